"""The vendor's ``llm_datadist.v2.cache_manager``: ``CacheManager`` (v2).

The project's ``KvCacheManager`` (v1) is in ``llm_datadist_ffi._vendor.v1.cache_manager``;
the checks and calls the two managers share are in ``llm_datadist_ffi._vendor._managers``.
Both managers are made by ``LLMDataDist.init``, never by users. Each method makes
the vendor's Python-side checks in the vendor's order with the vendor's exception
types (docs/reference/python-api.md §11, §12), then the project rules that hold on every backend
(docs/semantics.md §5), then one or more extension calls of the C ABI
(include/lldd/ext.h) with the arguments the vendor's Python layer hands its own core.

Where the checks are:

1. PR-8 (lint: keyword arguments the pulls do not read are ignored) first, as the
   vendor's ``kwargs.get`` never looks at them;
2. the vendor's checks, in order; PR-2 (lint: an empty layer range means every layer)
   inside the layer-range conversion, where the vendor turns it into "no range";
3. the remaining lints — PR-3 (a push whose default range is empty), PR-5 (a repeated
   destination block), PR-18, PR-25 — and the guards: PR-41 (``remove_cache_key``
   applies the pull validity rule) and the rule that a cache object of a finalized
   engine is rejected (docs/reference/python-api.md §8.1), after all vendor checks and before the
   native call. A lint warns and lets the call go on; under
   ``LLM_DATADIST_FFI_STRICT=1`` it refuses there (docs/semantics.md §0);
4. the core (mock, or shim + vendor).

A manager keeps the mode flags of the engine that made it (pools, direct mode,
"``link()`` was called"), but every native call goes to the engine that is live at
the moment: after ``finalize`` and before a new ``init`` those calls fail with the
vendor's codes (``LLM_FAILED`` for register, unregister, allocate; otherwise
``LLM_PARAM_INVALID``).

Block lists may be lists or tuples of ``int`` as in the vendor, and (project rule)
one-dimensional integer numpy arrays; a C-contiguous ``uint64`` array crosses into C
without a copy.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from ..._core import _capi
from ..._core import _lint_rules as _rules
from ..._core._capi import const, ffi
from ..._core._marshal import lint_repeated_blocks
from .._vendor_checks import (
    INT64, UINT32, UINT64, check_int, check_int_list, check_layer_range, check_type, none_error, raise_param_invalid,
    type_name,
)
from ..._core._trace import traced
from ...status import LLMStatusCode
from .. import _native
from .._managers import (
    _report,
    _DEFAULT_TENSOR_NUM, _FAILED, _PULL_KEYWORDS, BlockList, _allocate_core, _check_batch_dim, _check_copy_ints,
    _check_copy_size,
    _check_key_list, _check_keywords, _check_swap, _copy_cache, _copy_pairs, _ext_pull, _int_keyed_dict,
    _lint_placeholder_key, _memory_objects, _pull_ranges, _swap, _tensor_num, _transfer_cache_async,
)
from .llm_types import (
    BlocksCacheKey, Cache, CacheDesc, CacheKey, CacheKeyByIdAndIndex, CacheTask, LayerSynchronizer,
    MemInfo, Memtype, Placement, check_cache_key, core_cache_desc,
)

__all__ = ["CacheManager"]


def _check_blocks_call(cache: Any, name: str, src_blocks: Any, dst_blocks: Any, tag: str) -> None:
    """The checks ``pull_blocks`` and ``push_blocks`` share, after the key's type and in
    this order: the local cache's type, both block lists' element types, the cache not
    ``None`` (``AttributeError``) and a blocks cache, ``dst_blocks`` not empty."""
    check_type(cache, Cache, name)
    _native.check_block_types(src_blocks, "src_blocks")
    _native.check_block_types(dst_blocks, "dst_blocks")
    if cache is None:
        raise none_error(name, "a Cache", AttributeError)
    if not cache.is_blocks_cache:
        raise_param_invalid(f"[{tag}] {name} must be a blocks cache")
    if _native.block_count(dst_blocks, "dst_blocks") == 0:
        raise_param_invalid(f"[{tag}] dst_blocks must not be empty")


@traced
class CacheManager:
    """The v2 cache manager, from ``LLMDataDist.cache_manager``; never made by users.

    Registers, allocates and frees caches, pulls into local caches, pushes into peer
    caches (direct mode), and copies and swaps locally (docs/reference/python-api.md §11).
    """

    check_cache_key = staticmethod(check_cache_key)

    def __init__(self, engine: _native.EngineState) -> None:
        self._direct_mode = engine.direct_mode
        self._device_pool = engine.device_pool
        self._host_pool = engine.host_pool
        self._local_comm_res = engine.local_comm_res_given
        self._is_call_linked = False
        self._initialized = True

    def _mark_finalized(self) -> None:
        self._initialized = False

    def set_is_call_linked(self) -> None:
        """Remember that the rank-table ``link()`` was called (internal, called by
        ``LLMDataDist.link``): registrations are no longer remote-accessible."""
        self._is_call_linked = True

    def _new_cache(self, engine: _native.EngineState, cache_id: int, cache_desc: CacheDesc, addrs: List[int],
                   registered: bool, blocks: bool) -> Cache:
        cache = Cache(cache_id, cache_desc, addrs, self, registered, blocks)
        cache._engine = engine
        return cache

    # -- registration ----------------------------------------------------------------------

    def _check_register_common(self, addrs: Any, remote_accessible: Any) -> None:
        if self._is_call_linked and remote_accessible is True:
            raise_param_invalid("you can not register remote accessible cache after link.")
        if addrs is None:
            raise none_error("addrs", "a list of int")
        if not addrs:
            raise_param_invalid("addrs must not be empty")

    def _register(self, tag: str, cache_desc: CacheDesc, addrs: List[int], keys: Sequence[Any], blocks: bool,
                  remote_accessible: Optional[bool], kept: Sequence[Any] = ()) -> Cache:
        if cache_desc is None:
            raise none_error("cache_desc", "a CacheDesc", AttributeError)
        if remote_accessible is None:
            remote_accessible = cache_desc.placement == Placement.DEVICE and not self._is_call_linked
        _check_batch_dim(cache_desc, "cache_desc", tag)
        desc, keep = _native.c_core_desc(core_cache_desc(cache_desc, blocks))
        addr_array = _native.c_u64(addrs, "addrs")
        key_array, num_keys = _native.c_keys(keys)
        engine, handle = _native.live(tag, _FAILED)
        kind = const("LLDD_CACHE_KIND_BLOCKS" if blocks else "LLDD_CACHE_KIND_CACHE")
        cache_id = _capi.lldd_ext_register_cache(handle, desc, addr_array, len(addrs), kind, remote_accessible,
                                                 key_array, num_keys, tag)
        del keep
        if kept:
            engine.kept[cache_id] = list(kept)
        return self._new_cache(engine, cache_id, cache_desc, addrs, True, blocks)

    def register_cache(self, cache_desc: CacheDesc, addrs: List[int],
                       cache_keys: Union[Tuple[CacheKey, ...], List[CacheKey]] = (),
                       remote_accessible: Optional[bool] = None) -> Cache:
        """Register caller-owned memory (one address per tensor) as a contiguous cache;
        key ``cache_keys[b]`` binds batch ``b``.

        ``remote_accessible`` defaults to True for DEVICE memory, False for HOST, and
        False after the rank-table ``link()``.

        Raises:
            TypeError: wrong argument types (``addrs`` must be a list; ``None`` for
                ``addrs`` or ``cache_keys``); an address outside uint64.
            AttributeError: ``cache_desc`` is ``None``.
            LLMException: ``LLM_PARAM_INVALID`` for ``remote_accessible=True`` after
                ``link()``, empty ``addrs``, an address count other than
                ``num_tensors``, an address 0; from the core ``LLM_PARAM_INVALID``
                (shape, dtype, more keys than batches, …) or ``LLM_FAILED`` (no engine).
                Lints: ``batch_dim_index != 0`` (PR-18); a key bound already (it keeps
                that binding) or repeated in the call (it binds at its last slot), PR-21.
        """
        tag = "register_cache"
        check_type(cache_desc, CacheDesc, "cache_desc")
        addrs, kept = _memory_objects(addrs, cache_desc, tag)
        check_int_list(addrs, "addrs", containers=list)
        _check_key_list(cache_keys, "cache_keys")
        check_type(remote_accessible, bool, "remote_accessible")
        self._check_register_common(addrs, remote_accessible)
        if cache_desc is None:
            raise none_error("cache_desc", "a CacheDesc", AttributeError)
        if len(addrs) != cache_desc.num_tensors:
            raise_param_invalid(f"[{tag}] len(addrs) is {len(addrs)}; it must equal cache_desc.num_tensors "
                                f"({cache_desc.num_tensors})")
        for index, addr in enumerate(addrs):
            if addr == 0:
                raise_param_invalid(f"[{tag}] addrs[{index}] is 0")
        return self._register(tag, cache_desc, addrs, list(cache_keys), False, remote_accessible, kept)

    def register_blocks_cache(self, cache_desc: CacheDesc, addrs: List[int],
                              blocks_cache_key: Optional[BlocksCacheKey] = None,
                              remote_accessible: Optional[bool] = None) -> Cache:
        """Register caller-owned paged memory (one address per tensor, ``shape[0]``
        blocks each) as a blocks cache, bound to ``blocks_cache_key`` if given (a
        later registration with the same ``model_id`` takes the key over).

        Raises:
            TypeError: wrong argument types; an address outside uint64; a key value
                outside uint64.
            AttributeError: ``cache_desc`` is ``None``.
            LLMException: ``LLM_PARAM_INVALID`` for ``remote_accessible=True`` after
                ``link()``, empty ``addrs``; from the core ``LLM_PARAM_INVALID``
                (address count, shape, dtype, …) or ``LLM_FAILED`` (no engine). Lint:
                ``batch_dim_index != 0`` (PR-18).
        """
        tag = "register_blocks_cache"
        check_type(cache_desc, CacheDesc, "cache_desc")
        addrs, kept = _memory_objects(addrs, cache_desc, tag)
        check_int_list(addrs, "addrs", containers=list)
        check_type(blocks_cache_key, BlocksCacheKey, "blocks_cache_key")
        check_type(remote_accessible, bool, "remote_accessible")
        self._check_register_common(addrs, remote_accessible)
        keys = [] if blocks_cache_key is None else [blocks_cache_key]
        return self._register(tag, cache_desc, addrs, keys, True, remote_accessible, kept)

    def unregister_cache(self, cache_id: int) -> None:
        """Remove a registered cache, its keys and its memory registration; an unknown
        id succeeds.

        Raises:
            TypeError: ``cache_id`` not an int. ValueError: outside int64.
            LLMException: from the core (``LLM_FAILED`` without an engine). An
                allocated cache loses its entry and keys, as on a device, with an
                ``OwnedCacheUnregisteredWarning`` (PR-23).
        """
        tag = "unregister_cache"
        check_type(cache_id, int, "cache_id", allow_none=False)
        value = check_int(cache_id, "cache_id", INT64)
        _capi.lldd_ext_unregister_cache(_native.engine_for(tag, _FAILED), value, tag)
        state = _native.current()
        if state is not None:
            state.kept.pop(value, None)

    # -- pulls -----------------------------------------------------------------------------

    def pull_cache(self, cache_key: Union[CacheKey, CacheKeyByIdAndIndex], cache: Cache, batch_index: int = 0,
                   size: int = -1, **kwargs: Any) -> None:
        """Pull one source batch (``size`` bytes of each tensor, -1: one destination
        batch) into batch ``batch_index`` of the local contiguous ``cache``.

        Keywords: ``src_layer_range``, ``dst_layer_range``, ``tensor_num_per_layer``
        (default 2).

        Raises:
            TypeError: wrong argument types (in direct mode only
                ``CacheKeyByIdAndIndex`` is accepted).
            ValueError: ``batch_index``, ``size``, ``tensor_num_per_layer`` or a layer
                outside its C type.
            AttributeError: ``cache`` or ``cache_key`` is ``None`` (the key after the
                validity rule, before the layer ranges: where the vendor packs it).
            LLMException: ``LLM_PARAM_INVALID`` for another keyword (PR-8), a blocks
                cache, a bad ``size``, ``tensor_num_per_layer <= 0``, an invalid
                ``CacheKey``, a bad or empty layer range, PR-3; from the core
                ``LLM_NOT_YET_LINK``, ``LLM_KV_CACHE_NOT_EXIST``, ``LLM_PARAM_INVALID``,
                ``LLM_TIMEOUT`` (docs/semantics.md).
        """
        tag = "pull_cache"
        _check_keywords(kwargs, _PULL_KEYWORDS, tag, v2=True)
        key_types: Tuple[type, ...] = ((CacheKeyByIdAndIndex,) if self._direct_mode
                                       else (CacheKey, CacheKeyByIdAndIndex))
        check_type(cache_key, key_types, "cache_key")
        check_type(cache, Cache, "cache")
        check_int(batch_index, "batch_index", UINT32)
        check_int(size, "size", INT64)
        if cache is None:
            raise none_error("cache", "a Cache", AttributeError)
        if cache.is_blocks_cache:
            raise_param_invalid(f"[{tag}] cache can not be blocks cache")
        _check_copy_size(size, tag)
        n = _tensor_num(kwargs.get("tensor_num_per_layer", _DEFAULT_TENSOR_NUM), tag)
        check_cache_key(cache_key)
        if cache_key is None:   # where the vendor packs the key: before the layer ranges
            raise none_error("cache_key", "a CacheKey or CacheKeyByIdAndIndex", AttributeError)
        src_range, dst_range = _pull_ranges(kwargs.get("src_layer_range"), kwargs.get("dst_layer_range"), n, tag)
        self._pull(tag, cache_key, cache, batch_index, size, None, None, src_range, dst_range, n)

    def _pull(self, tag: str, key: Any, cache: Cache, batch_index: int, size: int, src_blocks: Any, dst_blocks: Any,
              src_range: Optional[range], dst_range: Optional[range], n: int) -> None:
        _ext_pull(tag, key, cache, batch_index, size, (src_blocks, dst_blocks), (src_range, dst_range), n, (-1, -1),
                  ("src_blocks", "dst_blocks", "cache" if tag == "pull_cache" else "dst_cache"))

    def pull_blocks(self, src_cache_key: Union[CacheKey, CacheKeyByIdAndIndex, BlocksCacheKey], dst_cache: Cache,
                    src_blocks: Optional[BlockList] = (), dst_blocks: BlockList = (), **kwargs: Any) -> None:
        """Pull blocks into the local blocks cache ``dst_cache``: with a
        ``BlocksCacheKey``, block ``src_blocks[k]`` into block ``dst_blocks[k]``
        (blocks→blocks); with a ``CacheKey``/``CacheKeyByIdAndIndex``, one source batch
        cut into ``dst_blocks`` (cache→blocks, ``src_blocks`` empty).

        Keywords: ``src_layer_range``, ``dst_layer_range``, ``tensor_num_per_layer``
        (default 2). Block lists may also be one-dimensional integer numpy arrays.

        Raises:
            TypeError: wrong argument types; a block index outside uint64; a block
                list that is ``None`` (the vendor takes its length).
            ValueError: ``tensor_num_per_layer`` or a layer outside its C type.
            AttributeError: ``dst_cache`` is ``None``; ``src_cache_key`` is ``None``
                (after the block-list checks, before the layer ranges: where the
                vendor packs the key).
            LLMException: ``LLM_PARAM_INVALID`` for another keyword (PR-8), a
                non-blocks ``dst_cache``, empty ``dst_blocks``, empty ``src_blocks`` with a
                ``BlocksCacheKey`` or non-empty ones without, an invalid ``CacheKey``, a
                bad or empty layer range, PR-3, PR-5; from the core as ``pull_cache``.
        """
        tag = "pull_blocks"
        _check_keywords(kwargs, _PULL_KEYWORDS, tag, v2=True)
        check_type(src_cache_key, (CacheKey, CacheKeyByIdAndIndex, BlocksCacheKey), "src_cache_key")
        _check_blocks_call(dst_cache, "dst_cache", src_blocks, dst_blocks, tag)
        n = _tensor_num(kwargs.get("tensor_num_per_layer", _DEFAULT_TENSOR_NUM), tag)
        if isinstance(src_cache_key, BlocksCacheKey):
            if _native.block_count(src_blocks, "src_blocks") == 0:
                raise_param_invalid(f"[{tag}] src_blocks must not be empty when src_cache_key is a BlocksCacheKey")
        else:
            check_cache_key(src_cache_key)
            if _native.block_count(src_blocks, "src_blocks") != 0:
                raise_param_invalid(f"[{tag}] src_blocks should be empty when src_cache_key is not instance of "
                                    "BlocksCacheKey.")
        if src_cache_key is None:   # where the vendor packs the key: before the layer ranges
            raise none_error("src_cache_key", "a cache key", AttributeError)
        src_range, dst_range = _pull_ranges(kwargs.get("src_layer_range"), kwargs.get("dst_layer_range"), n, tag)
        self._pull(tag, src_cache_key, dst_cache, 0, -1, src_blocks, dst_blocks, src_range, dst_range, n)

    # -- pushes (direct mode) --------------------------------------------------------------

    def _push_ranges(self, src_cache: Cache, src_range: Any, dst_range: Any, n: int,
                     tag: str) -> Tuple[range, range]:
        check_layer_range(src_range, "src_layer_range")
        check_layer_range(dst_range, "dst_layer_range")
        num_tensors = int(src_cache.cache_desc.num_tensors)
        _report(_rules.push_tensor_num(n, num_tensors, src_range, dst_range, tag))
        default = range(0, num_tensors // n)
        src_layers = default if src_range is None else src_range
        dst_layers = default if dst_range is None else dst_range
        if len(src_layers) != len(dst_layers):
            raise_param_invalid(f"[{tag}] src_layer_range {src_layers!r} and dst_layer_range {dst_layers!r} must have "
                                "the same length")
        return src_layers, dst_layers

    def _check_direct(self, tag: str) -> None:
        if not self._direct_mode:
            raise_param_invalid(f"{tag} is only supported while enable_remote_cache_accessible is True")

    def push_cache(self, dst_cache_key: CacheKeyByIdAndIndex, src_cache: Cache, src_batch_index: int = 0,
                   src_layer_range: Optional[range] = None, dst_layer_range: Optional[range] = None, size: int = -1,
                   tensor_num_per_layer: int = 2) -> None:
        """(Direct mode) Push batch ``src_batch_index`` of the local contiguous cache,
        layer by layer, into the peer cache and batch named by ``dst_cache_key``.

        Missing ranges mean every layer of the source. Not atomic: layers before a
        failing one stay written.

        Raises:
            TypeError: wrong argument types (``None`` key or cache included).
            ValueError: ``src_batch_index``, ``size`` or ``tensor_num_per_layer``
                outside its C type.
            LLMException: ``LLM_PARAM_INVALID`` outside direct mode, for a blocks
                source, ``tensor_num_per_layer <= 0``, a bad layer range, ranges of
                different lengths, ``size != -1``, PR-3; from the core per layer
                (``LLM_NOT_YET_LINK``, ``LLM_KV_CACHE_NOT_EXIST``, ``LLM_PARAM_INVALID``,
                ``LLM_TIMEOUT``).
        """
        tag = "push_cache"
        self._check_direct(tag)
        check_type(dst_cache_key, CacheKeyByIdAndIndex, "dst_cache_key", allow_none=False)
        check_type(src_cache, Cache, "src_cache", allow_none=False)
        check_int(src_batch_index, "src_batch_index", UINT32)
        if src_cache.is_blocks_cache:
            raise_param_invalid(f"[{tag}] src_cache can not be blocks cache")
        n = _tensor_num(tensor_num_per_layer, tag)
        src_layers, dst_layers = self._push_ranges(src_cache, src_layer_range, dst_layer_range, n, tag)
        check_int(size, "size", INT64)
        if size != -1:
            raise_param_invalid(f"[{tag}] size is {size}; push_cache only supports -1")
        _native.check_live(src_cache, "src_cache", tag)
        key = _native.c_key(dst_cache_key)
        for src_layer, dst_layer in zip(src_layers, dst_layers):
            _capi.lldd_ext_push_layer(_native.engine_for(tag), int(src_cache.cache_id), src_batch_index, src_layer,
                                      key, dst_layer, n, ffi.NULL, 0, ffi.NULL, 0, tag)

    def push_blocks(self, dst_cache_key: BlocksCacheKey, src_cache: Cache,
                    src_blocks: Optional[BlockList] = (), dst_blocks: BlockList = (),
                    src_layer_range: Optional[range] = None,
                    dst_layer_range: Optional[range] = None, tensor_num_per_layer: int = 2) -> None:
        """(Direct mode) Push local block ``src_blocks[k]`` into block ``dst_blocks[k]``
        of the peer's blocks cache bound to ``dst_cache_key``, layer by layer.

        Block lists may also be one-dimensional integer numpy arrays.

        Raises:
            TypeError: wrong argument types; a block index or key value outside uint64;
                ``dst_blocks`` is ``None`` (the vendor takes its length; a ``None``
                ``src_blocks`` is sent as ``[]``, as the vendor sends it).
            ValueError: ``tensor_num_per_layer`` outside uint32.
            AttributeError: ``src_cache`` or ``dst_cache_key`` is ``None``.
            LLMException: ``LLM_PARAM_INVALID`` outside direct mode, for a non-blocks
                source, empty ``dst_blocks``, ``tensor_num_per_layer <= 0``, a bad layer
                range, ranges of different lengths, PR-3, PR-5; from the core as
                ``push_cache`` (also for empty ``src_blocks`` or lists of different
                lengths).
        """
        tag = "push_blocks"
        self._check_direct(tag)
        check_type(dst_cache_key, BlocksCacheKey, "dst_cache_key")
        _check_blocks_call(src_cache, "src_cache", src_blocks, dst_blocks, tag)
        n = _tensor_num(tensor_num_per_layer, tag)
        src_layers, dst_layers = self._push_ranges(src_cache, src_layer_range, dst_layer_range, n, tag)
        if dst_cache_key is None:
            raise none_error("dst_cache_key", "a BlocksCacheKey", AttributeError)
        src = _native.block_list(src_blocks, "src_blocks")
        dst = _native.block_list(dst_blocks, "dst_blocks")
        lint_repeated_blocks(dst.array, "dst_blocks", tag)
        _native.check_live(src_cache, "src_cache", tag)
        key = _native.c_key(dst_cache_key)
        for src_layer, dst_layer in zip(src_layers, dst_layers):
            _capi.lldd_ext_push_layer(_native.engine_for(tag), int(src_cache.cache_id), 0, src_layer, key, dst_layer,
                                      n, src.pointer, src.count, dst.pointer, dst.count, tag)
        del src, dst

    def transfer_cache_async(self, src_cache: Cache, layer_synchronizer: LayerSynchronizer,
                             transfer_configs: Union[List[Any], Tuple[Any, ...]],
                             src_block_indices: Optional[Union[List[int], Tuple[int, ...]]] = None,
                             dst_block_indices: Optional[Union[List[int], Tuple[int, ...]]] = None,
                             dst_block_memory_size: Optional[int] = None) -> CacheTask:
        """Transfer ``src_cache`` layer by layer as ``layer_synchronizer`` reports
        each layer ready, to every destination of ``transfer_configs``
        (``TransferWithCacheKeyConfig`` in direct mode, ``TransferConfig``
        otherwise). Returns at once with a ``CacheTask``.

        The i-th layer of a config's ``src_layer_range`` goes to the i-th layer of its
        ``dst_layer_range`` (project rule, docs/reference/python-api.md §11.4).

        Raises:
            TypeError: wrong argument types (``None`` rejected for the cache, the
                synchronizer and the configs).
            ValueError: a block index or ``dst_block_memory_size`` outside uint64.
            LLMException: ``LLM_PARAM_INVALID`` for a HOST source and every rule of
                docs/reference/python-api.md §11.4 steps 5–10, PR-5 on ``dst_block_indices``.
        """
        tag = "transfer_cache_async"
        check_type(src_cache, Cache, "src_cache", allow_none=False)
        if src_cache.cache_desc.placement == Placement.HOST:
            raise_param_invalid(f"[{tag}] src_cache must be a DEVICE cache")
        desc = src_cache.cache_desc
        return _transfer_cache_async(src_cache, int(desc.num_tensors), int(desc.shape[0]), layer_synchronizer,
                                     transfer_configs, src_block_indices, dst_block_indices, dst_block_memory_size,
                                     self._direct_mode, LLMStatusCode.LLM_TIMEOUT, tag)

    # -- allocation ------------------------------------------------------------------------

    def _check_allocate(self, cache_desc: CacheDesc, tag: str) -> None:
        if cache_desc is None:
            raise none_error("cache_desc", "a CacheDesc", AttributeError)
        if cache_desc.num_tensors <= 0:
            raise_param_invalid(f"[{tag}] cache_desc.num_tensors is {cache_desc.num_tensors}; it must be > 0")
        has_pool = self._device_pool if cache_desc.placement == Placement.DEVICE else self._host_pool
        if not has_pool:
            raise_param_invalid("you should config memory pool firstly and then set placement that matches it.")
        _check_batch_dim(cache_desc, "cache_desc", tag)

    def _allocate(self, tag: str, cache_desc: CacheDesc, keys: Sequence[Any], blocks: bool) -> Cache:
        engine, cache_id, addrs = _allocate_core(tag, cache_desc, keys, blocks)
        return self._new_cache(engine, cache_id, cache_desc, addrs, False, blocks)

    def allocate_cache(self, cache_desc: CacheDesc,
                       cache_keys: Union[Tuple[CacheKey, ...], List[CacheKey]] = ()) -> Cache:
        """Allocate a contiguous cache from the memory pool of its placement; key
        ``cache_keys[b]`` binds batch ``b`` (placeholders ``req_id = prefix_id =
        2**64-1`` only advance).

        Raises:
            TypeError: wrong argument types. AttributeError: ``cache_desc`` is ``None``.
            LLMException: ``LLM_PARAM_INVALID`` for ``num_tensors <= 0``, no pool for
                the placement; from the core ``LLM_PARAM_INVALID`` (too many,
                repeated or bound keys, shape, …), ``LLM_OUT_OF_MEMORY``, ``LLM_FAILED``.
                Lint: ``batch_dim_index != 0`` (PR-18).
        """
        tag = "allocate_cache"
        check_type(cache_desc, CacheDesc, "cache_desc")
        _check_key_list(cache_keys, "cache_keys")
        self._check_allocate(cache_desc, tag)
        return self._allocate(tag, cache_desc, list(cache_keys), False)

    def allocate_blocks_cache(self, cache_desc: CacheDesc,
                              blocks_cache_key: Optional[BlocksCacheKey] = None) -> Cache:
        """Allocate a blocks cache (``shape[0]`` blocks) from the pool, bound to
        ``blocks_cache_key`` if given.

        Raises:
            TypeError: wrong argument types. AttributeError: ``cache_desc`` is ``None``.
            LLMException: as ``allocate_cache``; from the core ``LLM_PARAM_INVALID`` for
                a ``model_id`` already bound.
        """
        tag = "allocate_blocks_cache"
        check_type(cache_desc, CacheDesc, "cache_desc")
        check_type(blocks_cache_key, BlocksCacheKey, "blocks_cache_key")
        self._check_allocate(cache_desc, tag)
        return self._allocate(tag, cache_desc, [] if blocks_cache_key is None else [blocks_cache_key], True)

    def deallocate_cache(self, cache: Cache) -> None:
        """Free an allocated contiguous cache. Freeing waits while keys still bind it:
        the data stays readable until every key is pulled or removed. A registered
        cache or an unknown id is a no-op.

        Raises:
            TypeError: ``cache`` is not a ``Cache``. AttributeError: ``None``.
            LLMException: ``LLM_PARAM_INVALID`` for a blocks cache; from the core
                ``LLM_FEATURE_NOT_ENABLED`` without any pool.
        """
        tag = "deallocate_cache"
        check_type(cache, Cache, "cache")
        if cache is None:
            raise none_error("cache", "a Cache", AttributeError)
        if cache.is_blocks_cache:
            raise_param_invalid(f"[{tag}] cache is a blocks cache; use deallocate_blocks_cache")
        _native.check_live(cache, "cache", tag)
        _capi.lldd_ext_deallocate_cache(_native.engine_for(tag), int(cache.cache_id), tag)
        cache.tensor_addrs = []

    def deallocate_blocks_cache(self, cache: Cache) -> None:
        """Free an allocated blocks cache at once and unbind its key.

        Raises:
            TypeError: ``cache`` is not a ``Cache``. AttributeError: ``None``.
            LLMException: ``LLM_PARAM_INVALID`` for a cache that is not a blocks cache.
        """
        tag = "deallocate_blocks_cache"
        check_type(cache, Cache, "cache")
        if cache is None:
            raise none_error("cache", "a Cache", AttributeError)
        if not cache.is_blocks_cache:
            raise_param_invalid(f"[{tag}] cache is not a blocks cache; use deallocate_cache")
        _native.check_live(cache, "cache", tag)
        _capi.lldd_ext_deallocate_cache(_native.engine_for(tag), int(cache.cache_id), tag)
        cache.tensor_addrs = []

    def remove_cache_key(self, cache_key: CacheKey) -> None:
        """Release a key of an allocated cache (the cache is freed when it was
        deallocated and this was its last key). An unknown key succeeds; a key of a
        registered cache stays bound.

        Raises:
            TypeError: ``cache_key`` is not a ``CacheKey``. AttributeError: ``None``.
            LLMException: from the core ``LLM_FEATURE_NOT_ENABLED`` without any pool.
                Lint: neither or both of ``req_id`` and ``prefix_id`` valid (PR-41): the
                key acts as the blocks key of its model, or as the prefix key.
        """
        tag = "remove_cache_key"
        check_type(cache_key, CacheKey, "cache_key")
        if cache_key is None:
            raise none_error("cache_key", "a CacheKey", AttributeError)
        _lint_placeholder_key(cache_key, tag)
        _capi.lldd_ext_remove_cache_key(_native.engine_for(tag), _native.c_key(cache_key), tag)

    # -- local copies and swaps ------------------------------------------------------------

    def copy_cache(self, dst: Cache, src: Cache, dst_batch_index: int = 0, src_batch_index: int = 0,
                   offset: int = 0, size: int = -1, req_id: Optional[int] = None) -> None:
        """Copy bytes ``[offset, offset + size)`` of batch ``src_batch_index`` of every
        tensor of ``src`` to the same bytes of batch ``dst_batch_index`` of ``dst``
        (``size`` -1: to the end of the batch).

        Raises:
            TypeError, ValueError: wrong types or C ranges. AttributeError: ``None``.
            LLMException: ``LLM_PARAM_INVALID`` for a blocks cache or a bad ``size``;
                from the core ``LLM_KV_CACHE_NOT_EXIST``, ``LLM_PARAM_INVALID``.
        """
        tag = "copy_cache"
        check_type(dst, Cache, "dst")
        check_type(src, Cache, "src")
        _check_copy_ints(dst_batch_index, src_batch_index, offset, size)
        if src is None:
            raise none_error("src", "a Cache", AttributeError)
        if src.is_blocks_cache:
            raise_param_invalid(f"[{tag}] src can not be blocks cache")
        if dst is None:
            raise none_error("dst", "a Cache", AttributeError)
        if dst.is_blocks_cache:
            raise_param_invalid(f"[{tag}] dst can not be blocks cache")
        _check_copy_size(size, tag)
        if req_id is not None:
            check_int(req_id, "req_id", UINT64)
        _copy_cache(dst, src, dst_batch_index, src_batch_index, offset, size, tag)

    def copy_blocks(self, cache: Cache, copy_block_info: Dict[int, List[int]]) -> None:
        """Within one blocks cache, copy block ``s`` to every block of
        ``copy_block_info[s]``, in every tensor.

        Raises:
            TypeError: wrong types; an index outside uint64. AttributeError: ``None``.
            LLMException: ``LLM_PARAM_INVALID`` for a non-blocks cache; from the core
                ``LLM_PARAM_INVALID`` (bounds, PR-24). Lints: an empty mapping, which
                copies block 0 onto itself (PR-25); a repeated destination, where the
                last pair in order wins (PR-5).
        """
        tag = "copy_blocks"
        check_type(cache, Cache, "cache")
        _int_keyed_dict(copy_block_info, "copy_block_info", list_values=True)
        if cache is None:
            raise none_error("cache", "a Cache", AttributeError)
        if not cache.is_blocks_cache:
            raise_param_invalid(f"[{tag}] cache must be a blocks cache")
        _copy_pairs(cache, copy_block_info, tag)

    def swap_blocks(self, src_cache: Cache, dst_cache: Cache, src_to_dst: Dict[int, int]) -> None:
        """Copy blocks between a HOST and a DEVICE blocks cache (either way),
        addressing both by their tensor addresses; works with
        ``Cache.create_cpu_cache``.

        Raises:
            TypeError: wrong types. AttributeError: ``None``.
            LLMException: ``LLM_PARAM_INVALID`` for a non-blocks cache, different block
                sizes or tensor counts, an index outside its cache, a placement pair
                other than HOST↔DEVICE. Lints: ``batch_dim_index != 0`` (PR-18; the
                block size is ``size // shape[batch_dim_index]``), an empty mapping
                (PR-25: nothing moves), a repeated destination (PR-5: the last wins).
        """
        tag = "swap_blocks"
        check_type(src_cache, Cache, "src_cache")
        check_type(dst_cache, Cache, "dst_cache")
        for name, cache in (("src_cache", src_cache), ("dst_cache", dst_cache)):
            if cache is None:
                raise none_error(name, "a Cache", AttributeError)
            if not cache.is_blocks_cache:
                raise_param_invalid(f"[{tag}] {name} must be a blocks cache")
        block_size, pairs, swap_in = _check_swap(src_cache, dst_cache, src_to_dst, tag)
        _native.check_live(src_cache, "src_cache", tag)
        _native.check_live(dst_cache, "dst_cache", tag)
        _swap((list(src_cache.tensor_addrs), list(dst_cache.tensor_addrs)), block_size, pairs, swap_in, tag)

    def remap_registered_memory(self, mem_infos: Union[MemInfo, List[MemInfo]]) -> None:
        """Remap registered device memory (documented by the vendor as reserved).

        Raises:
            LLMException: ``LLM_PARAM_INVALID`` for anything but a ``MemInfo`` or a list
                of them, a non-device memory type, address 0, size <= 0; from the
                core ``LLM_PARAM_INVALID`` (empty list), ``LLM_NOT_YET_LINK``.
            TypeError: an ``addr`` or ``size`` that is not an int in uint64.
        """
        tag = "remap_registered_memory"
        if not isinstance(mem_infos, (list, MemInfo)):
            raise_param_invalid(f"[{tag}] mem_infos must be a MemInfo or a list of MemInfo, not "
                                f"{type_name(mem_infos)}")
        infos = [mem_infos] if isinstance(mem_infos, MemInfo) else mem_infos
        for index, info in enumerate(infos):
            if not isinstance(info, MemInfo):
                raise_param_invalid(f"[{tag}] mem_infos[{index}] must be a MemInfo, not {type_name(info)}")
            if info.mem_type != Memtype.MEM_TYPE_DEVICE:
                raise_param_invalid(f"[{tag}] mem_infos[{index}].mem_type must be Memtype.MEM_TYPE_DEVICE")
            if info.addr == 0:
                raise_param_invalid(f"[{tag}] mem_infos[{index}].addr is 0")
            if info.size is not None and info.size <= 0:
                raise_param_invalid(f"[{tag}] mem_infos[{index}].size is {info.size}; it must be > 0")
        addrs = [info.addr for info in infos]
        sizes = [info.size for info in infos]
        for name, values in (("addr", addrs), ("size", sizes)):
            for index, value in enumerate(values):
                if not isinstance(value, int):
                    raise TypeError(f"mem_infos[{index}].{name} must be an int, not {type_name(value)}")
        _capi.lldd_ext_remap_registered_memory(_native.engine_for(tag), _native.c_u64(addrs, "addr"),
                                               _native.c_u64(sizes, "size"), len(infos), tag)
