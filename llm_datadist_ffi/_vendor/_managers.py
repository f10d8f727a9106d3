"""The checks and calls the two cache managers share: v2's ``CacheManager``
(``_vendor/v2/cache_manager.py``) and v1's ``KvCacheManager``
(``_vendor/v1/cache_manager.py``) import them from here, and neither imports the other.

The order of the checks in each manager's calls is described in
``llm_datadist_ffi._vendor.v2.cache_manager``'s docstring; the helpers here keep the
vendor's order within each check.
"""
from __future__ import annotations

import threading
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from .._core import _buffers, _capi, _trace
from .. import lint
from .._core import _lint_rules as _rules
from .._core._cints import first_outside
from .._core._capi import const
from .._core._marshal import Blocks, block_pointer, c_array, lint_repeated_blocks
from ._vendor_checks import (
    INT64, UINT32, UINT64, check_int, check_int_items, check_int_list, check_type, raise_param_invalid, type_name,
)
from ..status import LLMException, LLMStatusCode
from . import _native
from .v2.llm_types import (
    CacheDesc, CacheKey, CacheTask, LayerSynchronizer, Placement, TransferConfig, TransferWithCacheKeyConfig,
    core_cache_desc,
)

_FAILED = LLMStatusCode.LLM_FAILED
_PARAM_INVALID = LLMStatusCode.LLM_PARAM_INVALID
_DEFAULT_TENSOR_NUM = 2

_PULL_KEYWORDS = ("src_layer_range", "dst_layer_range", "tensor_num_per_layer")
_OFFSET_KEYWORDS = ("src_cache_offset", "dst_cache_offset")

#: A block list: a list or tuple of int (the vendor's), or a one-dimensional integer
#: numpy array (project rule, docs/reference/python-api.md §11.2).
BlockList = Union[Tuple[int, ...], List[int], "np.ndarray[Any, Any]"]


def _check_keywords(kwargs: Dict[str, Any], allowed: Sequence[str], tag: str, v2: bool) -> None:
    """PR-8 (lint): a keyword argument the call does not read is ignored, as the vendor
    ignores it."""
    _report(_rules.ignored_keywords(kwargs, allowed, tag, v2))


def _report(findings: List[_rules.Finding]) -> None:
    """Each finding of the shared rules (llm_datadist_ffi/_core/_lint_rules.py) as its lint."""
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

    More selected tensors than the pull's destination (the local cache) has is what the
    core rejects with ``LLM_PARAM_INVALID`` (every selected tensor, of either range,
    pairs with a distinct destination tensor); it is raised here, with the same code,
    before a list of that size is built. The message names the destination cache: for
    ``src_layer_range`` the selected tensors are the source's, the count that falls
    short is the destination's.
    """
    if layers is None:
        return []
    count = len(layers) * n
    if count > num_local:
        raise_param_invalid(f"[{tag}] {name} {layers!r} selects {count} tensors (tensor_num_per_layer {n}), but the "
                            f"destination cache has {num_local}")
    first = layers[0] * n
    return list(range(first, first + count))


def _memory_objects(addrs: Any, cache_desc: Any, tag: str) -> Tuple[Any, List[Any]]:
    """``addrs`` with tensor memory given as objects (numpy arrays, CPU torch tensors,
    buffer-protocol and DLPack objects) replaced by their checked addresses, and those
    objects (an addition to the vendor's int lists, ``llm_datadist_ffi._buffers``)."""
    if not isinstance(addrs, list) or not any(_buffers.is_buffer(a) for a in addrs) or \
            not isinstance(cache_desc, CacheDesc):
        return addrs, []
    given, kept = _buffers.tensor_addresses(addrs, int(cache_desc.size), "addrs", cache_desc.data_type.value, tag)
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


def _check_copy_ints(dst_batch_index: int, src_batch_index: int, offset: int, size: int) -> None:
    """The C ranges of ``copy_cache``'s numbers (v1 and v2), in parameter order."""
    check_int(dst_batch_index, "dst_batch_index", UINT32)
    check_int(src_batch_index, "src_batch_index", UINT32)
    check_int(offset, "offset", UINT64)
    check_int(size, "size", INT64)


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
                          tag: str, v1: bool = False) -> CacheTask:
    """``transfer_cache_async`` from step 3 on (docs/reference/python-api.md §11.4; python-api.md §12 for v1:
    there ``dst_block_indices`` without source blocks, even an empty list, is refused,
    docs/semantics.md X-17)."""
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
    elif v1 and dst_block_indices is not None:
        raise_param_invalid(f"[{tag}] transfer from cache to blocks is not supported: dst_block_indices is given "
                            "without src_block_indices")
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


def _allocate_core(tag: str, cache_desc: CacheDesc, keys: Sequence[Any],
                   blocks: bool) -> Tuple[_native.EngineState, int, List[int]]:
    """The core's allocation for both managers' ``allocate_cache`` and
    ``allocate_blocks_cache``, after their own checks: the live engine, the new
    cache's id and its tensor addresses."""
    desc, keep = _native.c_core_desc(core_cache_desc(cache_desc, blocks))
    key_array, num_keys = _native.c_keys(keys)
    engine, handle = _native.live(tag, _FAILED)
    kind = const("LLDD_CACHE_KIND_BLOCKS" if blocks else "LLDD_CACHE_KIND_CACHE")
    cache_id, addrs = _capi.lldd_ext_allocate_cache(handle, desc, kind, key_array, num_keys,
                                                    int(cache_desc.num_tensors), tag)
    del keep
    return engine, cache_id, addrs


def _copy_cache(dst: Any, src: Any, dst_batch_index: int, src_batch_index: int, offset: int, size: int,
                tag: str) -> None:
    """The end of both managers' ``copy_cache``, after their own checks: both caches
    still live, then the core's copy."""
    _native.check_live(dst, "dst", tag)
    _native.check_live(src, "src", tag)
    _capi.lldd_ext_copy_cache(_native.engine_for(tag), int(dst.cache_id), int(src.cache_id), dst_batch_index,
                              src_batch_index, offset, size, tag)


def _copy_pairs(cache: Any, copy_block_info: Dict[int, List[int]], tag: str) -> None:
    pairs = [(int(src), int(dst)) for src, dsts in copy_block_info.items() for dst in dsts]
    _report(_rules.copy_pairs_findings(copy_block_info, tag))
    _native.check_live(cache, "cache", tag)
    pair_ptr, _, keep = _pairs_array(pairs, "copy_block_info")
    _capi.lldd_ext_copy_blocks(_native.engine_for(tag), int(cache.cache_id), pair_ptr, len(pairs), tag)
    del keep
