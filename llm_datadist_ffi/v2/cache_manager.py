"""The vendor's ``llm_datadist.v2.cache_manager``: ``CacheManager`` (v2) and the
project's ``KvCacheManager`` (v1).

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

import threading
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from .. import _buffers, _capi, _trace, lint
from .. import _lint_rules as _rules
from .._capi import const, ffi
from .._cints import first_outside
from .._marshal import Blocks, block_pointer, c_array, lint_repeated_blocks
from .._vendor_checks import (
    INT32, INT64, UINT32, UINT64, check_int, check_int_items, check_int_list, check_layer_range, check_type, none_error,
    raise_param_invalid, type_name,
)
from ..configs import LLMRole
from .._trace import traced
from ..status import LLMException, LLMStatusCode, exception_for
from . import _native
from .llm_types import (
    BlocksCacheKey, Cache, CacheDesc, CacheKey, CacheKeyByIdAndIndex, CacheTask, KvCache, LayerSynchronizer,
    MemInfo, Memtype, Placement, TransferConfig, TransferWithCacheKeyConfig, check_cache_key, core_cache_desc,
)

if TYPE_CHECKING:  # the v1 tensor types are lazy names of the vendor module (docs/reference/python-api.md §1.2)
    from ..tensor import Tensor

__all__ = ["CacheManager", "KvCacheManager"]

_FAILED = LLMStatusCode.LLM_FAILED
_PARAM_INVALID = LLMStatusCode.LLM_PARAM_INVALID
_DEFAULT_TENSOR_NUM = 2

_PULL_KEYWORDS = ("src_layer_range", "dst_layer_range", "tensor_num_per_layer")
_V1_PULL_CACHE_KEYWORDS = ("src_layer_range", "dst_layer_range", "src_cache_offset", "dst_cache_offset",
                           "tensor_num_per_layer")
_OFFSET_KEYWORDS = ("src_cache_offset", "dst_cache_offset")

#: A block list: a list or tuple of int (the vendor's), or a one-dimensional integer
#: numpy array (project rule, docs/reference/python-api.md §11.2).
BlockList = Union[Tuple[int, ...], List[int], "np.ndarray[Any, Any]"]


# ---- checks shared by both managers ---------------------------------------------------------

def _check_keywords(kwargs: Dict[str, Any], allowed: Sequence[str], tag: str, v2: bool) -> None:
    """PR-8 (lint): a keyword argument the call does not read is ignored, as the vendor
    ignores it."""
    _report(_rules.ignored_keywords(kwargs, allowed, tag, v2))


def _report(findings: List[_rules.Finding]) -> None:
    """Each finding of the shared rules (llm_datadist_ffi._lint_rules) as its lint."""
    for rule, text in findings:
        lint.lint(rule, text)


def _tensor_num(value: Any, tag: str) -> int:
    """``tensor_num_per_layer``: uint32 (T/V), then ``> 0`` (LX)."""
    n = check_int(value, "tensor_num_per_layer", UINT32)
    if n <= 0:
        raise_param_invalid(f"[{tag}] tensor_num_per_layer ({n}) is invalid, should be in [1, the cache's tensor "
                            "count]")
    return n


def _pull_ranges(src: Any, dst: Any, n: int, tag: str) -> Tuple[Optional[range], Optional[range]]:
    """The layer-range conversion of pulls (docs/reference/python-api.md §11.2) up to the tensor
    indexes, which ``_pull_tensors`` makes once PR-3 has bounded them.

    Raises:
        TypeError: a range that is neither ``range`` nor ``None``.
        LLMException: ``LLM_PARAM_INVALID`` for a step other than 1, an empty range
            (PR-2), a negative first layer.
        ValueError: the first or last layer outside uint32.
    """
    check_type(src, range, "src_layer_range")
    check_type(dst, range, "dst_layer_range")
    if src is not None and src.step != 1:
        raise_param_invalid(f"[{tag}] src_layer_range step must be 1, got {src!r}")
    if dst is not None and dst.step != 1:
        raise_param_invalid(f"[{tag}] dst_layer_range step must be 1, got {dst!r}")
    checked = []
    for name, layers in (("src_layer_range", src), ("dst_layer_range", dst)):
        if layers is not None and len(layers) == 0:
            _report(_rules.empty_layer_range(layers, name, tag))
            layers = None
        if layers is not None:
            if layers[0] < 0:
                raise_param_invalid(f"[{tag}] {name} {layers!r} starts below 0")
            check_int(layers[0], f"{name} first layer", UINT32)
            check_int(layers[-1], f"{name} last layer", UINT32)
        checked.append(layers)
    return checked[0], checked[1]


def _pull_tensors(layers: Optional[range], n: int, num_local: int, name: str, tag: str) -> List[int]:
    """The tensor indexes a pull's layer range selects (``[]``: all tensors).

    More selected tensors than the local cache has is what the core rejects with
    ``LLM_PARAM_INVALID`` (every selected tensor pairs with a distinct local one); it
    is raised here, with the same code, before a list of that size is built.
    """
    if layers is None:
        return []
    count = len(layers) * n
    if count > num_local:
        raise_param_invalid(f"[{tag}] {name} {layers!r} selects {count} tensors (tensor_num_per_layer {n}) but the "
                            f"local cache has {num_local}")
    first = layers[0] * n
    return list(range(first, first + count))


def _memory_objects(addrs: Any, cache_desc: Any) -> Tuple[Any, List[Any]]:
    """``addrs`` with tensor memory given as objects (numpy arrays, CPU torch tensors,
    buffer-protocol and DLPack objects) replaced by their checked addresses, and those
    objects (an addition to the vendor's int lists, ``llm_datadist_ffi._buffers``)."""
    if not isinstance(addrs, list) or not any(_buffers.is_buffer(a) for a in addrs) or \
            not isinstance(cache_desc, CacheDesc):
        return addrs, []
    given, kept = _buffers.tensor_addresses(addrs, int(cache_desc.size), "addrs")
    return given, kept


def _check_batch_dim(cache_desc: CacheDesc, name: str, tag: str) -> None:
    """PR-18 (lint): the core always uses ``shape[0]`` as the batch or block count,
    whatever ``batch_dim_index`` says; only ``swap_blocks`` reads it."""
    _report(_rules.batch_dim(cache_desc, name, tag))


def _lint_placeholder_key(cache_key: CacheKey, tag: str) -> None:
    """PR-41 (lint): ``remove_cache_key`` with neither or both of ``req_id`` and
    ``prefix_id`` valid acts as the vendor's core does (the blocks key of the model,
    or the prefix key)."""
    _report(_rules.placeholder_key(cache_key, tag))


def _check_key_list(keys: Any, name: str) -> None:
    check_type(keys, (list, tuple), name, allow_none=False)
    for index, key in enumerate(keys):
        if not isinstance(key, CacheKey):
            raise TypeError(f"{name}[{index}] must be CacheKey, not {type_name(key)}")


def _int_keyed_dict(value: Any, name: str, list_values: bool) -> None:
    """The vendor's type check of a block mapping: a dict with int keys and (for
    ``copy_blocks``) list-of-int values."""
    check_type(value, dict, name, allow_none=False)
    for key, item in value.items():
        if not isinstance(key, int):
            raise TypeError(f"{name} keys must be int, got {key!r} ({type_name(key)})")
        if list_values:
            check_int_list(item, f"{name}[{key}]", containers=list, allow_none=False)


def _pairs_array(pairs: List[Tuple[int, int]], name: str) -> Blocks:
    """Pairs flattened as ``src0, dst0, src1, dst1, …``, for C as a block list.

    Raises:
        TypeError: an index outside uint64 (the vendor's binding conversion).
    """
    flat = [index for pair in pairs for index in pair]
    bad = first_outside(flat, UINT64)
    if bad is not None:
        raise TypeError(f"{name}: {'source' if bad[0] % 2 == 0 else 'destination'} block {bad[1]} is outside uint64")
    return block_pointer(np.array(flat, dtype=np.uint64))


def _check_swap(src_cache: Any, dst_cache: Any, src_to_dst: Any, tag: str) -> Tuple[int, List[Tuple[int, int]], bool]:
    """The checks of ``swap_blocks`` after the type and kind checks (docs/reference/python-api.md
    §11.6); returns the block size, the pairs and whether it swaps in."""
    _int_keyed_dict(src_to_dst, "src_to_dst", list_values=False)
    src_desc, dst_desc = src_cache.cache_desc, dst_cache.cache_desc
    src_block = src_desc.size // src_desc.batch_size
    dst_block = dst_desc.size // dst_desc.batch_size
    if src_block != dst_block:
        raise_param_invalid(f"[{tag}] block sizes differ: src_cache {src_block} bytes, dst_cache {dst_block} bytes")
    if src_desc.num_tensors != dst_desc.num_tensors:
        raise_param_invalid(f"[{tag}] src_cache has {src_desc.num_tensors} tensors but dst_cache has "
                            f"{dst_desc.num_tensors}")
    for src_index, dst_index in src_to_dst.items():
        if not 0 <= src_index < src_desc.batch_size:
            raise_param_invalid(f"[{tag}] source block {src_index} is outside [0, {src_desc.batch_size})")
        if not 0 <= dst_index < dst_desc.batch_size:
            raise_param_invalid(f"[{tag}] destination block {dst_index} is outside [0, {dst_desc.batch_size})")
    swap_in = src_desc.placement == Placement.HOST and dst_desc.placement == Placement.DEVICE
    swap_out = src_desc.placement == Placement.DEVICE and dst_desc.placement == Placement.HOST
    if not (swap_in or swap_out):
        raise_param_invalid(f"[{tag}] swap_blocks moves HOST->DEVICE or DEVICE->HOST only, got "
                            f"{src_desc.placement} -> {dst_desc.placement}")
    _check_batch_dim(src_desc, "src_cache.cache_desc", tag)
    _check_batch_dim(dst_desc, "dst_cache.cache_desc", tag)
    _report(_rules.mapping_findings(src_to_dst, tag))
    return src_block, [(int(k), int(v)) for k, v in src_to_dst.items()], swap_in


def _swap(addrs: Tuple[List[int], List[int]], block_size: int, pairs: List[Tuple[int, int]], swap_in: bool,
          tag: str) -> None:
    src_addrs = _native.c_u64(addrs[0], "src_cache addresses")
    dst_addrs = _native.c_u64(addrs[1], "dst_cache addresses")
    pair_ptr, _, keep = _pairs_array(pairs, "src_to_dst")
    _capi.lldd_ext_swap_blocks(_native.engine_for(tag), src_addrs, dst_addrs, len(addrs[0]), block_size, pair_ptr,
                               len(pairs), swap_in, tag)
    del keep


def _check_copy_size(size: int, tag: str) -> None:
    if size != -1 and size <= 0:
        raise_param_invalid(f"[{tag}] size is {size}; it must be -1 (the whole batch) or > 0")


class _Planned:
    """One config of ``transfer_cache_async``, resolved before the thread starts."""

    def __init__(self, config: Any, src_layers: range, dst_layers: Optional[range], key: Any,
                 dst_addrs: Optional[List[int]]) -> None:
        self.dst_cluster_id = config.dst_cluster_id
        self.src_batch_index = int(config.src_batch_index)
        self.src_layers = src_layers
        self.dst_layers = dst_layers
        self.key = key
        self.dst_addrs = dst_addrs


def _transfer_cache_async(src_cache: Any, num_tensors: int, batch_size: int, layer_synchronizer: Any,
                          transfer_configs: Any, src_block_indices: Any, dst_block_indices: Any,
                          dst_block_memory_size: Any, keyed: bool, default_error: LLMStatusCode,
                          tag: str) -> CacheTask:
    """``transfer_cache_async`` from step 3 on (docs/reference/python-api.md §11.4; §12 for v1)."""
    check_int_list(dst_block_indices, "dst_block_indices")
    check_int_items(dst_block_indices, "dst_block_indices", UINT64)
    check_int_list(src_block_indices, "src_block_indices")
    check_int_items(src_block_indices, "src_block_indices", UINT64)
    if dst_block_memory_size is not None:
        check_int(dst_block_memory_size, "dst_block_memory_size", UINT64)
    if src_block_indices:
        if not dst_block_indices:
            raise_param_invalid(f"[{tag}] transfer from blocks to cache is not supported: src_block_indices is given "
                                "but dst_block_indices is empty")
        if len(src_block_indices) != len(dst_block_indices):
            raise_param_invalid(f"[{tag}] src_block_indices ({len(src_block_indices)}) and dst_block_indices "
                                f"({len(dst_block_indices)}) must have the same length")
    elif dst_block_indices and dst_block_memory_size is None:
        raise_param_invalid(f"[{tag}] dst_block_indices without src_block_indices needs dst_block_memory_size")
    check_type(layer_synchronizer, LayerSynchronizer, "layer_synchronizer", allow_none=False)
    config_type = TransferWithCacheKeyConfig if keyed else TransferConfig
    check_type(transfer_configs, (list, tuple), "transfer_configs", allow_none=False)
    for index, config in enumerate(transfer_configs):
        if not isinstance(config, config_type):
            raise TypeError(f"transfer_configs[{index}] must be {config_type.__name__}, not {type_name(config)}")
    if dst_block_memory_size not in (None, 0) and not dst_block_indices:
        raise_param_invalid(f"[{tag}] dst_block_memory_size ({dst_block_memory_size}) is given but "
                            "dst_block_indices is empty")
    if num_tensors % 2:
        raise_param_invalid(f"[{tag}] src_cache has {num_tensors} tensors; transfer_cache_async moves layers of 2 "
                            "tensors, so the count must be even")
    num_layers = num_tensors // 2
    plan: List[_Planned] = []
    for index, config in enumerate(transfer_configs):
        name = f"transfer_configs[{index}]"
        if not keyed and config.src_layer_range is None:
            config.src_layer_range = range(0, num_layers)
        src_layers = config.src_layer_range
        if keyed and (src_layers is None or config.dst_layer_range is None):
            raise_param_invalid(f"[{tag}] {name} needs both src_layer_range and dst_layer_range")
        if src_block_indices and config.src_batch_index != 0:
            raise_param_invalid(f"[{tag}] {name}.src_batch_index must be 0 when src_block_indices is given, got "
                                f"{config.src_batch_index}")
        if not config.src_batch_index < batch_size:
            raise_param_invalid(f"[{tag}] {name}.src_batch_index {config.src_batch_index} is outside the source "
                                f"batch count {batch_size}")
        if not 0 <= src_layers.start < src_layers.stop <= num_layers:
            raise_param_invalid(f"[{tag}] {name}.src_layer_range {src_layers!r} must satisfy 0 <= start < stop <= "
                                f"{num_layers} (the source's layer count)")
        if keyed:
            dst_layers = config.dst_layer_range
            if len(dst_layers) != len(src_layers):
                raise_param_invalid(f"[{tag}] {name}: src_layer_range {src_layers!r} and dst_layer_range "
                                    f"{dst_layers!r} must have the same length")
            plan.append(_Planned(config, src_layers, dst_layers, _native.c_key(config.cache_key), None))
        else:
            if len(config.dst_addrs) != 2 * len(src_layers):
                raise_param_invalid(f"[{tag}] {name}.dst_addrs holds {len(config.dst_addrs)} addresses; 2 per layer "
                                    f"of src_layer_range {src_layers!r} makes {2 * len(src_layers)}")
            plan.append(_Planned(config, src_layers, None, None, list(config.dst_addrs)))
    src_blocks = _native.block_list(src_block_indices, "src_block_indices")
    dst_blocks = _native.block_list(dst_block_indices, "dst_block_indices")
    lint_repeated_blocks(dst_blocks.array, "dst_block_indices", tag)
    _native.check_live(src_cache, "src_cache", tag)
    cache_id = int(src_cache.cache_id)
    block_memory_size = int(dst_block_memory_size or 0)
    results: Dict[int, LLMStatusCode] = {}

    def transfer() -> None:
        for layer in range(num_layers):
            covering = [item for item in plan if layer in item.src_layers]
            if not covering:
                continue
            try:
                ready = layer_synchronizer.synchronize_layer(layer, None)
                code = _PARAM_INVALID
            except Exception:  # noqa: BLE001 - a failing synchronizer stops the task (docs/semantics.md V-9)
                ready, code = False, _FAILED
            if not ready:
                for item in covering:
                    results[item.dst_cluster_id] = code
                return
            for item in covering:
                position = layer - item.src_layers.start
                try:
                    with _trace.span(f"{tag}.layer", layer=layer, dst_cluster_id=item.dst_cluster_id):
                        push_layer(item, layer, position)
                except LLMException as exc:
                    results[item.dst_cluster_id] = exc.status_code
                    return
                if layer == item.src_layers[-1]:
                    results[item.dst_cluster_id] = LLMStatusCode.LLM_SUCCESS

    def push_layer(item: _Planned, layer: int, position: int) -> None:
        handle = _native.engine_for(tag)
        if item.key is not None and item.dst_layers is not None:
            _capi.lldd_ext_push_layer(handle, cache_id, item.src_batch_index, layer, item.key,
                                      item.dst_layers[position], 2, src_blocks.pointer, src_blocks.count,
                                      dst_blocks.pointer, dst_blocks.count, tag)
        else:
            addrs = (item.dst_addrs or [])[2 * position:2 * position + 2]
            _capi.lldd_ext_transfer_layer(handle, cache_id, item.src_batch_index, layer, item.dst_cluster_id,
                                          c_array(UINT64, addrs), src_blocks.pointer, src_blocks.count,
                                          dst_blocks.pointer, dst_blocks.count, block_memory_size, tag)

    thread = threading.Thread(target=transfer, name=f"transfer_cache_async[{cache_id}]", daemon=True)
    thread.start()
    return CacheTask(thread, transfer_configs, results, default_error)


# ---- CacheManager (v2) ---------------------------------------------------------------------


def _ext_pull(tag: str, key: Any, cache: Any, batch_index: int, size: int, blocks: Tuple[Any, Any],
              ranges: Tuple[Optional[range], Optional[range]], n: int, offsets: Tuple[int, int],
              names: Tuple[str, str, str]) -> None:
    """The project checks every pull of both managers makes last (tensor counts, ranges,
    repeated destination blocks, a cache of a finalized engine), then the native pull.
    ``names`` are the caller's parameter names for the two block lists and the cache."""
    src_range, dst_range = ranges
    num_local = int(cache.cache_desc.num_tensors)
    # the binding's conversion of the block lists is the vendor's (TypeError), so it comes
    # before the project rules (docs/semantics.md §5.1)
    src = _native.block_list(blocks[0], names[0])
    dst = _native.block_list(blocks[1], names[1])
    src_tensors = _pull_tensors(src_range, n, num_local, "src_layer_range", tag)
    dst_tensors = _pull_tensors(dst_range, n, num_local, "dst_layer_range", tag)
    lint_repeated_blocks(dst.array, names[1], tag)
    _native.check_live(cache, names[2], tag)
    key_ptr = _native.c_key(key)
    src_t = _native.c_u64(src_tensors, "src tensor indexes")
    dst_t = _native.c_u64(dst_tensors, "dst tensor indexes")
    _capi.lldd_ext_pull(_native.engine_for(tag), key_ptr, int(cache.cache_id), batch_index, size, src.pointer,
                        src.count, dst.pointer, dst.count, src_t, len(src_tensors), dst_t, len(dst_tensors),
                        offsets[0], offsets[1], n, tag)
    del src, dst

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
        addrs, kept = _memory_objects(addrs, cache_desc)
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
        addrs, kept = _memory_objects(addrs, cache_desc)
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
        check_type(dst_cache, Cache, "dst_cache")
        _native.check_block_types(src_blocks, "src_blocks")
        _native.check_block_types(dst_blocks, "dst_blocks")
        if dst_cache is None:
            raise none_error("dst_cache", "a Cache", AttributeError)
        if not dst_cache.is_blocks_cache:
            raise_param_invalid(f"[{tag}] dst_cache must be a blocks cache")
        if _native.block_count(dst_blocks, "dst_blocks") == 0:
            raise_param_invalid(f"[{tag}] dst_blocks must not be empty")
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
        check_type(src_cache, Cache, "src_cache")
        _native.check_block_types(src_blocks, "src_blocks")
        _native.check_block_types(dst_blocks, "dst_blocks")
        if src_cache is None:
            raise none_error("src_cache", "a Cache", AttributeError)
        if not src_cache.is_blocks_cache:
            raise_param_invalid(f"[{tag}] src_cache must be a blocks cache")
        if _native.block_count(dst_blocks, "dst_blocks") == 0:
            raise_param_invalid(f"[{tag}] dst_blocks must not be empty")
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
        desc, keep = _native.c_core_desc(core_cache_desc(cache_desc, blocks))
        key_array, num_keys = _native.c_keys(keys)
        engine, handle = _native.live(tag, _FAILED)
        kind = const("LLDD_CACHE_KIND_BLOCKS" if blocks else "LLDD_CACHE_KIND_CACHE")
        cache_id, addrs = _capi.lldd_ext_allocate_cache(handle, desc, kind, key_array, num_keys,
                                                        int(cache_desc.num_tensors), tag)
        del keep
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
        check_int(dst_batch_index, "dst_batch_index", UINT32)
        check_int(src_batch_index, "src_batch_index", UINT32)
        check_int(offset, "offset", UINT64)
        check_int(size, "size", INT64)
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
        _native.check_live(dst, "dst", tag)
        _native.check_live(src, "src", tag)
        _capi.lldd_ext_copy_cache(_native.engine_for(tag), int(dst.cache_id), int(src.cache_id), dst_batch_index,
                                  src_batch_index, offset, size, tag)

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
        self._copy_pairs(cache, copy_block_info, tag)

    @staticmethod
    def _copy_pairs(cache: Any, copy_block_info: Dict[int, List[int]], tag: str) -> None:
        pairs = [(int(src), int(dst)) for src, dsts in copy_block_info.items() for dst in dsts]
        _report(_rules.copy_pairs_findings(copy_block_info, tag))
        _native.check_live(cache, "cache", tag)
        pair_ptr, _, keep = _pairs_array(pairs, "copy_block_info")
        _capi.lldd_ext_copy_blocks(_native.engine_for(tag), int(cache.cache_id), pair_ptr, len(pairs), tag)
        del keep

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


# ---- KvCacheManager (v1) ---------------------------------------------------------------------

@traced
class KvCacheManager:
    """The v1 cache manager, from ``LLMDataDist.kv_cache_manager``; never made by users.

    The older generation: the library allocates every cache; a Prompt binds request
    keys at allocation and a Decoder pulls through them (docs/reference/python-api.md §12). Calls
    are restricted by the engine's role, which ``switch_role`` updates.
    """

    check_cache_key = staticmethod(check_cache_key)

    def __init__(self, engine: _native.EngineState, role: LLMRole) -> None:
        self._role = role
        self._initialized = True

    def _mark_finalized(self) -> None:
        self._initialized = False

    def is_initialized(self) -> bool:
        """Whether the engine that made this manager is still initialised."""
        return self._initialized

    def _require_role(self, allowed: Tuple[LLMRole, ...], tag: str) -> None:
        if self._role not in allowed:
            raise_param_invalid(f"[{tag}] is not supported by {self._role}")

    def _new_cache(self, engine: _native.EngineState, cache_id: int, cache_desc: CacheDesc,
                   addrs: List[int]) -> KvCache:
        cache = KvCache(cache_id, cache_desc, [addrs], self)
        cache._engine = engine
        return cache

    def _check_device(self, cache: Any, name: str, tag: str, message: str) -> None:
        if cache is None:
            raise none_error(name, "a KvCache", AttributeError)
        if cache.cache_desc.placement == Placement.HOST:
            raise_param_invalid(f"[{tag}] {message}")

    # -- allocation ------------------------------------------------------------------------

    def _check_allocate(self, cache_desc: Any, tag: str) -> None:
        if cache_desc is None:
            raise none_error("cache_desc", "a CacheDesc", AttributeError)
        if cache_desc.num_tensors <= 0:
            raise_param_invalid(f"[{tag}] cache_desc.num_tensors is {cache_desc.num_tensors}; it must be > 0")
        if cache_desc.placement != Placement.DEVICE:
            raise_param_invalid(f"[{tag}] Only support allocate device cache")

    def _allocate(self, tag: str, cache_desc: CacheDesc, keys: Sequence[Any], blocks: bool) -> KvCache:
        _check_batch_dim(cache_desc, "cache_desc", tag)
        desc, keep = _native.c_core_desc(core_cache_desc(cache_desc, blocks))
        key_array, num_keys = _native.c_keys(keys)
        engine, handle = _native.live(tag, _FAILED)
        kind = const("LLDD_CACHE_KIND_BLOCKS" if blocks else "LLDD_CACHE_KIND_CACHE")
        cache_id, addrs = _capi.lldd_ext_allocate_cache(handle, desc, kind, key_array, num_keys,
                                                        int(cache_desc.num_tensors), tag)
        del keep
        return self._new_cache(engine, cache_id, cache_desc, addrs)

    def allocate_cache(self, cache_desc: CacheDesc,
                       cache_keys: Union[Tuple[CacheKey, ...], List[CacheKey]] = ()) -> KvCache:
        """Allocate a device cache; on a PROMPT, key ``cache_keys[b]`` binds batch ``b``.

        Raises:
            TypeError: wrong argument types. AttributeError: ``cache_desc`` is ``None``.
            LLMException: ``LLM_PARAM_INVALID`` for ``num_tensors <= 0``, a HOST
                placement, keys on a non-PROMPT engine; from the core
                ``LLM_FAILED`` (a key already bound), ``LLM_DEVICE_OUT_OF_MEMORY``.
                Lint: ``batch_dim_index != 0`` (PR-18).
        """
        tag = "allocate_cache"
        check_type(cache_desc, CacheDesc, "cache_desc")
        _check_key_list(cache_keys, "cache_keys")
        self._check_allocate(cache_desc, tag)
        if self._role is not LLMRole.PROMPT and cache_keys:
            raise_param_invalid(f"[{tag}] cache_keys are only supported by LLMRole.PROMPT, not {self._role}")
        return self._allocate(tag, cache_desc, list(cache_keys), False)

    def allocate_blocks_cache(self, cache_desc: CacheDesc,
                              blocks_cache_key: Optional[BlocksCacheKey] = None) -> KvCache:
        """Allocate a device blocks cache, bound to ``blocks_cache_key`` if given.

        Raises:
            TypeError: wrong argument types. AttributeError: ``cache_desc`` is ``None``.
            LLMException: ``LLM_PARAM_INVALID`` for ``num_tensors <= 0``, a HOST
                placement, a key on a DECODER; from the core. Lint:
                ``batch_dim_index != 0`` (PR-18).
        """
        tag = "allocate_blocks_cache"
        check_type(cache_desc, CacheDesc, "cache_desc")
        check_type(blocks_cache_key, BlocksCacheKey, "blocks_cache_key")
        self._check_allocate(cache_desc, tag)
        if self._role is LLMRole.DECODER and blocks_cache_key is not None:
            raise_param_invalid(f"[{tag}] blocks_cache_key is not supported by {self._role}")
        return self._allocate(tag, cache_desc, [] if blocks_cache_key is None else [blocks_cache_key], True)

    def deallocate_cache(self, cache: KvCache) -> None:
        """Free a cache (deferred while its keys are outstanding); the object becomes
        invalid (``per_device_tensor_addrs == []``) and is not freed again when
        collected.

        Raises:
            TypeError: ``cache`` is not a ``KvCache``. AttributeError: ``None``.
            LLMException: ``LLM_PARAM_INVALID`` for a HOST cache; from the core
                ``LLM_KV_CACHE_NOT_EXIST`` for an unknown id.
        """
        tag = "deallocate_cache"
        check_type(cache, KvCache, "cache")
        self._check_device(cache, "cache", tag, "Only support device cache")
        _native.check_live(cache, "cache", tag)
        _capi.lldd_ext_deallocate_cache(_native.engine_for(tag), int(cache.cache_id), tag)
        cache.per_device_tensor_addrs = []

    def remove_cache_key(self, cache_key: CacheKey) -> None:
        """(PROMPT) Release a key; the cache is freed when it was deallocated and this
        was its last key.

        Raises:
            TypeError: not a ``CacheKey``. AttributeError: ``None``.
            LLMException: ``LLM_PARAM_INVALID`` on a non-PROMPT engine. Lint (PR-41):
                neither or both of ``req_id`` and ``prefix_id`` valid.
        """
        tag = "remove_cache_key"
        self._require_role((LLMRole.PROMPT,), tag)
        check_type(cache_key, CacheKey, "cache_key")
        if cache_key is None:
            raise none_error("cache_key", "a CacheKey", AttributeError)
        _lint_placeholder_key(cache_key, tag)
        _capi.lldd_ext_remove_cache_key(_native.engine_for(tag), _native.c_key(cache_key), tag)

    # -- pulls -----------------------------------------------------------------------------

    def _pull(self, tag: str, key: Any, cache: KvCache, batch_index: int, size: int, src_blocks: Any,
              dst_blocks: Any, src_range: Optional[range], dst_range: Optional[range], n: int,
              offsets: Tuple[int, int]) -> None:
        _ext_pull(tag, key, cache, batch_index, size, (src_blocks, dst_blocks), (src_range, dst_range), n, offsets,
                  ("prompt_blocks", "decoder_blocks", "kv_cache" if tag == "pull_cache" else "decoder_kv_cache"))

    def pull_cache(self, cache_key: Union[CacheKey, CacheKeyByIdAndIndex], kv_cache: KvCache, batch_index: int = 0,
                   size: int = -1, **kwargs: Any) -> None:
        """(DECODER) Pull ``size`` bytes (-1: the rest of the destination batch after
        ``dst_cache_offset``) of each selected tensor of the source batch, from
        ``src_cache_offset``, into batch ``batch_index`` of ``kv_cache`` at
        ``dst_cache_offset``.

        Keywords: ``src_layer_range``, ``dst_layer_range``, ``src_cache_offset``,
        ``dst_cache_offset``, ``tensor_num_per_layer`` (default 2). An offset given as
        ``None`` counts as not given, as in the vendor. Giving either offset (even 0)
        keeps the source key bound after the pull.

        Raises:
            TypeError, ValueError: wrong types or C ranges; a negative offset is a
                ``ValueError``.
            AttributeError: ``kv_cache`` or ``cache_key`` is ``None`` (the key before
                the ``tensor_num_per_layer`` and layer-range checks: where the vendor
                packs it).
            LLMException: ``LLM_PARAM_INVALID`` for another keyword (PR-8), a
                non-DECODER engine, a HOST cache, a bad ``size``, an invalid
                ``CacheKey``, ``tensor_num_per_layer <= 0``, a bad or empty layer range,
                PR-3; from the core ``LLM_NOT_YET_LINK``, ``LLM_KV_CACHE_NOT_EXIST``,
                ``LLM_PARAM_INVALID``, ``LLM_WAIT_PROCESS_TIMEOUT``.
        """
        tag = "pull_cache"
        _check_keywords(kwargs, _V1_PULL_CACHE_KEYWORDS, tag, v2=False)
        self._require_role((LLMRole.DECODER,), tag)
        check_type(cache_key, (CacheKey, CacheKeyByIdAndIndex), "cache_key")
        check_type(kv_cache, KvCache, "kv_cache")
        self._check_device(kv_cache, "kv_cache", tag, "Only support device cache")
        check_int(size, "size", INT64)
        check_int(batch_index, "batch_index", UINT32)
        _check_copy_size(size, tag)
        offsets = []
        for word in _OFFSET_KEYWORDS:
            # the vendor reads kwargs.get(word): an offset given as None is not given
            value = kwargs.get(word)
            if value is None:
                offsets.append(-1)
                continue
            value = check_int(value, word, INT64)
            if value < 0:
                raise ValueError(f"{word} is {value}; it should be >= 0")
            offsets.append(value)
        check_cache_key(cache_key)
        if cache_key is None:   # where the vendor packs the key: before tensor_num_per_layer
            raise none_error("cache_key", "a CacheKey or CacheKeyByIdAndIndex", AttributeError)
        n = _tensor_num(kwargs.get("tensor_num_per_layer", _DEFAULT_TENSOR_NUM), tag)
        src_range, dst_range = _pull_ranges(kwargs.get("src_layer_range"), kwargs.get("dst_layer_range"), n, tag)
        self._pull(tag, cache_key, kv_cache, batch_index, size, None, None, src_range, dst_range, n,
                   (offsets[0], offsets[1]))

    def pull_blocks(self, prompt_cache_key: BlocksCacheKey, decoder_kv_cache: KvCache,
                    prompt_blocks: Union[List[int], "np.ndarray[Any, Any]"],
                    decoder_blocks: Union[List[int], "np.ndarray[Any, Any]"], **kwargs: Any) -> None:
        """(DECODER) Pull block ``prompt_blocks[k]`` of the Prompt's blocks cache into
        block ``decoder_blocks[k]`` of ``decoder_kv_cache``.

        Keywords: ``src_layer_range``, ``dst_layer_range``, ``tensor_num_per_layer``
        (default 2). Block lists are lists (tuples are rejected, as in the vendor) or
        one-dimensional integer numpy arrays.

        Raises:
            TypeError, ValueError: wrong types or C ranges; a block index outside uint64;
                a block list that is ``None`` (the vendor takes its length).
            AttributeError: ``decoder_kv_cache`` or ``prompt_cache_key`` is ``None``
                (the key after the layer ranges: the vendor packs it last).
            LLMException: ``LLM_PARAM_INVALID`` for another keyword (PR-8), a
                non-DECODER engine, a HOST cache, empty or unequal block lists,
                ``tensor_num_per_layer <= 0``, a bad or empty layer range, PR-3, PR-5;
                from the core as ``pull_cache``.
        """
        tag = "pull_blocks"
        _check_keywords(kwargs, _PULL_KEYWORDS, tag, v2=False)
        self._require_role((LLMRole.DECODER,), tag)
        check_type(prompt_cache_key, BlocksCacheKey, "prompt_cache_key")
        check_type(decoder_kv_cache, KvCache, "decoder_kv_cache")
        _native.check_block_types(prompt_blocks, "prompt_blocks", containers=(list,))
        _native.check_block_types(decoder_blocks, "decoder_blocks", containers=(list,))
        self._check_device(decoder_kv_cache, "decoder_kv_cache", tag, "Only support device cache")
        num_prompt = _native.block_count(prompt_blocks, "prompt_blocks")
        if num_prompt == 0:
            raise_param_invalid(f"[{tag}] prompt_blocks must not be empty")
        num_decoder = _native.block_count(decoder_blocks, "decoder_blocks")
        if num_decoder == 0:
            raise_param_invalid(f"[{tag}] decoder_blocks must not be empty")
        if num_prompt != num_decoder:
            raise_param_invalid(f"[{tag}] prompt_blocks ({num_prompt}) and decoder_blocks ({num_decoder}) must have "
                                "the same length")
        n = _tensor_num(kwargs.get("tensor_num_per_layer", _DEFAULT_TENSOR_NUM), tag)
        src_range, dst_range = _pull_ranges(kwargs.get("src_layer_range"), kwargs.get("dst_layer_range"), n, tag)
        if prompt_cache_key is None:
            raise none_error("prompt_cache_key", "a BlocksCacheKey", AttributeError)
        self._pull(tag, prompt_cache_key, decoder_kv_cache, 0, -1, prompt_blocks, decoder_blocks, src_range,
                   dst_range, n, (-1, -1))

    # -- local copies, swaps, tensors ------------------------------------------------------

    def copy_cache(self, dst: KvCache, src: KvCache, dst_batch_index: int = 0, src_batch_index: int = 0,
                   offset: int = 0, size: int = -1, req_id: Optional[int] = None) -> None:
        """Copy bytes ``[offset, offset + size)`` of a batch of every tensor of ``src``
        to the same bytes of a batch of ``dst`` (device caches only).

        Raises:
            TypeError, ValueError: wrong types or C ranges. AttributeError: ``None``.
            LLMException: ``LLM_PARAM_INVALID`` for a HOST cache or a bad ``size``;
                from the core ``LLM_KV_CACHE_NOT_EXIST``, ``LLM_PARAM_INVALID``.
        """
        tag = "copy_cache"
        check_type(dst, KvCache, "dst")
        self._check_device(dst, "dst", tag, "dst cache must be a device cache")
        check_type(src, KvCache, "src")
        self._check_device(src, "src", tag, "src cache must be a device cache")
        check_int(dst_batch_index, "dst_batch_index", UINT32)
        check_int(src_batch_index, "src_batch_index", UINT32)
        check_int(offset, "offset", UINT64)
        check_int(size, "size", INT64)
        _check_copy_size(size, tag)
        check_type(req_id, int, "req_id")
        _native.check_live(dst, "dst", tag)
        _native.check_live(src, "src", tag)
        _capi.lldd_ext_copy_cache(_native.engine_for(tag), int(dst.cache_id), int(src.cache_id), dst_batch_index,
                                  src_batch_index, offset, size, tag)

    def copy_blocks(self, cache: KvCache, copy_block_info: Dict[int, List[int]]) -> None:
        """Within one device cache, copy block ``s`` to every block of
        ``copy_block_info[s]``, in every tensor.

        Raises:
            TypeError: wrong types. ValueError: an index outside uint64.
            AttributeError: ``cache`` is ``None``.
            LLMException: ``LLM_PARAM_INVALID`` for a HOST cache; from the core
                (bounds, PR-24). Lints: an empty mapping (PR-25), a repeated
                destination (PR-5).
        """
        tag = "copy_blocks"
        check_type(cache, KvCache, "cache")
        _int_keyed_dict(copy_block_info, "copy_block_info", list_values=True)
        self._check_device(cache, "cache", tag, "Only support device cache")
        for src, dsts in copy_block_info.items():
            check_int(src, "copy_block_info source block", UINT64)
            for dst in dsts:
                check_int(dst, f"copy_block_info[{src}] destination block", UINT64)
        CacheManager._copy_pairs(cache, copy_block_info, tag)

    def swap_blocks(self, src: KvCache, dst: KvCache, src_to_dst: Dict[int, int]) -> None:
        """Copy blocks between a HOST and a DEVICE cache (either way), addressing both
        by ``per_device_tensor_addrs[0]``; works with ``KvCache.create_cpu_cache``.

        Raises:
            TypeError: wrong types. AttributeError: ``None``.
            LLMException: as ``CacheManager.swap_blocks`` without the blocks-cache rule.
        """
        tag = "swap_blocks"
        check_type(src, KvCache, "src")
        check_type(dst, KvCache, "dst")
        for name, cache in (("src", src), ("dst", dst)):
            if cache is None:
                raise none_error(name, "a KvCache", AttributeError)
        block_size, pairs, swap_in = _check_swap(src, dst, src_to_dst, tag)
        _native.check_live(src, "src", tag)
        _native.check_live(dst, "dst", tag)
        for name, cache in (("src", src), ("dst", dst)):
            if not cache.per_device_tensor_addrs:
                raise_param_invalid(f"[{tag}] {name} (cache id {cache.cache_id}) has been deallocated")
        _swap((list(src.per_device_tensor_addrs[0]), list(dst.per_device_tensor_addrs[0])), block_size, pairs,
              swap_in, tag)

    def get_cache_tensors(self, cache: KvCache, tensor_index: int = 0) -> List["Tensor"]:
        """The tensor ``tensor_index`` of ``cache``, one ``Tensor`` per device, over the
        cache's memory (``Tensor.numpy()`` reads it).

        Raises:
            TypeError: ``cache`` is not a ``KvCache``; ``tensor_index`` not an int.
            ValueError: ``tensor_index`` outside int32. AttributeError: ``None``.
            LLMException: ``LLM_PARAM_INVALID`` for an index outside
                ``[0, num_tensors)`` or a cache of a finalized engine;
                ``LLM_KV_CACHE_NOT_EXIST`` for a deallocated cache.
        """
        tag = "get_cache_tensors"
        check_type(cache, KvCache, "cache")
        check_int(tensor_index, "tensor_index", INT32)
        if cache is None:
            raise none_error("cache", "a KvCache", AttributeError)
        desc = cache.cache_desc
        if not 0 <= tensor_index < desc.num_tensors:
            raise_param_invalid(f"[{tag}] tensor_index {tensor_index} is outside [0, {desc.num_tensors})")
        _native.check_live(cache, "cache", tag)
        if not cache.per_device_tensor_addrs:
            raise _kv_cache_gone(cache, tag)
        from ..tensor import Tensor, TensorDesc

        tensor_desc = TensorDesc(desc.data_type, list(desc.shape))
        return [Tensor(int(addrs[tensor_index]), tensor_desc) for addrs in cache.per_device_tensor_addrs]

    def transfer_cache_async(self, src_cache: KvCache, layer_synchronizer: LayerSynchronizer,
                             transfer_configs: Union[List[TransferConfig], Tuple[TransferConfig, ...]],
                             src_block_indices: Optional[Union[List[int], Tuple[int, ...]]] = None,
                             dst_block_indices: Optional[Union[List[int], Tuple[int, ...]]] = None,
                             dst_block_memory_size: Optional[int] = None) -> CacheTask:
        """(PROMPT) As ``CacheManager.transfer_cache_async`` with ``TransferConfig``
        destinations; a task still running after a wait reports
        ``LLM_WAIT_PROCESS_TIMEOUT``.

        Raises:
            TypeError, ValueError, LLMException: as the v2 call, and
                ``LLM_PARAM_INVALID`` on a non-PROMPT engine.
        """
        tag = "transfer_cache_async"
        self._require_role((LLMRole.PROMPT,), tag)
        check_type(src_cache, KvCache, "src_cache", allow_none=False)
        desc = src_cache.cache_desc
        return _transfer_cache_async(src_cache, int(desc.num_tensors), int(desc.shape[0]), layer_synchronizer,
                                     transfer_configs, src_block_indices, dst_block_indices, dst_block_memory_size,
                                     False, LLMStatusCode.LLM_WAIT_PROCESS_TIMEOUT, tag)


def _kv_cache_gone(cache: KvCache, tag: str) -> LLMException:
    code = int(LLMStatusCode.LLM_KV_CACHE_NOT_EXIST)
    return exception_for(code, f"[{tag}] failed, error code is {LLMStatusCode.LLM_KV_CACHE_NOT_EXIST}, cache "
                               f"{cache.cache_id} has been deallocated.")
