"""The project's ``KvCacheManager``: the v1 generation's cache manager.

The vendor's v1 package (``llm_datadist_v1``) holds its ``KvCacheManager``; the vendor
module resolves the name lazily, as ``llm_datadist_ffi.vendor`` does from this module.
Made by ``LLMDataDist.init`` in v1 mode, never by users. It shares with ``CacheManager``
(``llm_datadist_ffi._vendor.v2.cache_manager``) the checks and calls of
``llm_datadist_ffi._vendor._managers`` and the order described there: the vendor's
checks (docs/reference/python-api.md §12), then the project's lints and guards
(docs/semantics.md §5), then the extension calls of the C ABI (include/lldd/ext.h).
Calls are restricted by the engine's role, which ``switch_role`` updates.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from ..._core import _capi
from ..._core._trace import traced
from ...status import LLMException, LLMStatusCode, exception_for
from .. import _native
from .._managers import (
    _DEFAULT_TENSOR_NUM, _allocate_core, _OFFSET_KEYWORDS, _PULL_KEYWORDS, _check_batch_dim, _check_copy_ints,
    _check_copy_size,
    _check_key_list, _check_keywords, _check_swap, _copy_cache, _copy_pairs, _ext_pull, _int_keyed_dict,
    _lint_placeholder_key, _pull_ranges, _swap, _tensor_num, _transfer_cache_async,
)
from .._vendor_checks import INT32, INT64, UINT32, UINT64, check_int, check_type, none_error, raise_param_invalid
from ..configs import LLMRole
from ..v2.llm_types import (
    BlocksCacheKey, CacheDesc, CacheKey, CacheKeyByIdAndIndex, CacheTask, KvCache, LayerSynchronizer, Placement,
    TransferConfig, check_cache_key,
)

if TYPE_CHECKING:  # the v1 tensor types are lazy names of the vendor module (docs/reference/python-api.md §1.2)
    from .tensor import Tensor

__all__ = ["KvCacheManager"]

_V1_PULL_CACHE_KEYWORDS = ("src_layer_range", "dst_layer_range", "src_cache_offset", "dst_cache_offset",
                           "tensor_num_per_layer")


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
        engine, cache_id, addrs = _allocate_core(tag, cache_desc, keys, blocks)
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

        Raises what v2's ``CacheManager.copy_cache`` raises, with a HOST cache where v2
        names a blocks cache; v1 checks each cache's placement right after its type
        (``dst`` first), before the numbers, and ``req_id`` only as an int.
        """
        tag = "copy_cache"
        check_type(dst, KvCache, "dst")
        self._check_device(dst, "dst", tag, "dst cache must be a device cache")
        check_type(src, KvCache, "src")
        self._check_device(src, "src", tag, "src cache must be a device cache")
        _check_copy_ints(dst_batch_index, src_batch_index, offset, size)
        _check_copy_size(size, tag)
        check_type(req_id, int, "req_id")
        _copy_cache(dst, src, dst_batch_index, src_batch_index, offset, size, tag)

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
        _copy_pairs(cache, copy_block_info, tag)

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
        from .tensor import Tensor, TensorDesc

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
                                     False, LLMStatusCode.LLM_WAIT_PROCESS_TIMEOUT, tag, v1=True)


def _kv_cache_gone(cache: KvCache, tag: str) -> LLMException:
    code = int(LLMStatusCode.LLM_KV_CACHE_NOT_EXIST)
    return exception_for(code, f"[{tag}] failed, error code is {LLMStatusCode.LLM_KV_CACHE_NOT_EXIST}, cache "
                               f"{cache.cache_id} has been deallocated.")
