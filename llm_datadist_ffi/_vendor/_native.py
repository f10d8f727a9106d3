"""The engine behind the vendor-compatible API, and the conversions into the C ABI.

The vendor's Python package keeps ONE native engine per process (docs/reference/python-api.md
§10.8): ``LLMDataDist.init`` creates it, ``finalize`` destroys it, and every manager
object — also one kept from before a ``finalize`` — talks to whichever engine is live
at the moment of the call. This module holds that live engine (``EngineState``) and
what the managers need to reach it:

* ``engine_for(tag, code)``: the live engine's handle, or the error the vendor's core
  gives when there is none (``LLM_FAILED`` for register, unregister and allocate,
  ``LLM_PARAM_INVALID`` for every other cache call, docs/reference/python-api.md §10.3);
* ``check_live``: the project rule that a ``Cache``/``KvCache`` made by an engine that
  has since been finalized is rejected (docs/reference/python-api.md §8.1) — cache ids restart at 1,
  so such an object would otherwise address whatever the new engine calls by that id;
* the vendor's native conversions of descriptors, keys, address and block lists: the
  binding's errors (``TypeError`` for an int its C type cannot hold) raised before the
  call, over the conversions both tiers share (``_marshal``); keys are this tier's only.

A finalized engine's handle is not freed while a call still holds it: every call
takes the handle into a local variable for its duration, and the handle is released
by ``ffi.gc`` once nothing refers to it. The backend itself makes a finalize wait
for the calls already running (PR-37).
"""
from __future__ import annotations

import os
import threading
from typing import Any, Dict, List, Optional, Sequence, Tuple, cast

import numpy as np

from .._core import _capi
from .._core._capi import const, ffi
from .._core._cints import UINT64, first_outside
from .._core._marshal import (
    CData, Blocks, U64Buffer, block_pointer, blocks_converter, c_array, c_cache_desc, u64_block_array, u64_block_list,
)
from ._vendor_checks import check_int_elements, none_error, param_invalid, type_name
from ..status import LLMException, LLMStatusCode, exception_for
from .v2.llm_types import AnyCacheKey, BlocksCacheKey, CacheKeyByIdAndIndex, CoreCacheDesc, core_key

__all__ = [
    "EngineState", "current", "set_current", "live", "engine_for", "check_live", "no_engine_error",
    "c_core_desc", "c_key", "c_keys", "c_u64", "BlockArray", "block_list", "is_block_array",
    "check_block_types", "block_count",
]

class EngineState:
    """One initialised native engine, from a successful ``init`` to ``finalize``.

    The flags are the ones the vendor fixes at init from the final options
    (docs/reference/python-api.md §10.2 step 10).
    """

    def __init__(self, handle: CData, cluster_id: int, options: Dict[str, str]) -> None:
        self.handle: Optional[CData] = handle
        self.cluster_id = cluster_id
        self.options = options
        self.cache_manager_mode = options.get("llm.EnableCacheManager") == "1"
        self.direct_mode = options.get("llm.EnableRemoteCacheAccessible") == "1"
        self.device_pool = bool(options.get("llm.MemPoolConfig"))
        self.host_pool = bool(options.get("llm.HostMemPoolConfig"))
        self.local_comm_res_given = "llm.LocalCommRes" in options
        self.local_comm_res_set = bool(options.get("llm.LocalCommRes"))
        #: memory objects of registered caches (``_buffers``), kept alive until the cache
        #: is unregistered or the engine finalized
        self.kept: Dict[int, List[Any]] = {}

    @property
    def alive(self) -> bool:
        return self.handle is not None


_lock = threading.Lock()
_current: Optional[EngineState] = None


def current() -> Optional[EngineState]:
    """The process's live engine, or None."""
    return _current


def set_current(state: Optional[EngineState]) -> None:
    global _current
    with _lock:
        _current = state


def _forget_parent_engine() -> None:
    """In the child of ``fork()``: the parent's engine is not this process's. Its
    handle is dropped without a call into it (the handle's destructor only acts in
    the process that created it), and the lock is made anew in case a parent thread
    held it at the fork."""
    global _current, _lock
    _lock = threading.Lock()
    if _current is not None:
        _current.handle = None
    _current = None


os.register_at_fork(after_in_child=_forget_parent_engine)


def no_engine_error(tag: str, code: int) -> LLMException:
    """What a call reaching no engine raises (the vendor's core answers ``code``)."""
    name = LLMStatusCode(code)
    return exception_for(code, f"[{tag}] failed, error code is {name}, llm datadist is not initialized "
                               "(the engine was finalized).")


def live(tag: str, code: int = LLMStatusCode.LLM_PARAM_INVALID) -> Tuple[EngineState, CData]:
    """The live engine and its handle, for a call tagged ``tag``.

    The caller keeps the handle in a local variable for the duration of its native
    call, so that a concurrent ``finalize`` cannot free it under the call.

    Raises:
        LLMException: ``code`` when no engine is live (after ``finalize``).
    """
    state = _current
    handle = None if state is None else state.handle
    if state is None or handle is None:
        raise no_engine_error(tag, code)
    return state, handle


def engine_for(tag: str, code: int = LLMStatusCode.LLM_PARAM_INVALID) -> CData:
    """The live engine's handle for a call tagged ``tag`` (see ``live``).

    Raises:
        LLMException: ``code`` when no engine is live (after ``finalize``).
    """
    return live(tag, code)[1]


def check_live(cache: Any, name: str, tag: str) -> None:
    """Project rule (docs/reference/python-api.md §8.1): reject a cache object of a finalized engine.

    Objects made by ``create_cpu_cache`` belong to no engine and always pass.

    Raises:
        LLMException: ``LLM_PARAM_INVALID`` when the engine that made ``cache`` is no
            longer the live one.
    """
    owner = getattr(cache, "_engine", None)
    if owner is not None and owner is not _current:
        raise param_invalid(f"[{tag}] {name} (cache id {cache.cache_id}) was made by an engine that has been "
                            "finalized; cache objects do not survive finalize, and ids restart at 1 in a new "
                            "engine (project rule, docs/reference/python-api.md §8.1)")


# ---- conversions ------------------------------------------------------------------------------
#
# The vendor's native-conversion errors and the vendor-only structs (keys); the
# conversions both tiers share are ``_marshal``'s.

def c_core_desc(desc: CoreCacheDesc) -> Tuple[CData, List[CData]]:
    """The core form of a ``CacheDesc`` as ``lldd_cache_desc``."""
    return c_cache_desc(desc.placement, desc.num_tensors, desc.data_type, desc.shape)


def _fill_key(slot: CData, key: AnyCacheKey) -> None:
    core = core_key(key)
    if isinstance(key, BlocksCacheKey):
        slot.kind = const("LLDD_KEY_BLOCKS")
    elif isinstance(key, CacheKeyByIdAndIndex):
        slot.kind = const("LLDD_KEY_BY_ID")
    else:
        slot.kind = const("LLDD_KEY_CACHE")
    slot.batch_index = core.batch_index
    slot.cluster_id = core.cluster_id
    slot.req_id = core.req_id
    slot.prefix_id = core.prefix_id
    slot.model_id = core.model_id
    slot.cache_id = core.cache_id


def c_key(key: AnyCacheKey) -> CData:
    """One key as ``lldd_key *``.

    Raises:
        TypeError: a ``BlocksCacheKey`` value its uint64 field cannot hold.
    """
    out = _capi.new_keys(1)
    _fill_key(out[0], key)
    return out


def c_keys(keys: Sequence[AnyCacheKey]) -> Tuple[CData, int]:
    """Keys as ``lldd_key[]`` (NULL when there are none)."""
    if not keys:
        return ffi.NULL, 0
    out = _capi.new_keys(len(keys))
    for index, key in enumerate(keys):
        _fill_key(out[index], key)
    return out, len(keys)


def c_u64(values: Sequence[int], name: str) -> CData:
    """A ``uint64_t[]`` of the ints ``values`` (NULL when empty).

    Raises:
        TypeError: a value outside uint64 (the vendor's binding conversion).
    """
    bad = first_outside(values, UINT64)
    if bad is not None:
        raise TypeError(f"{name}[{bad[0]}] is {bad[1]}; the core takes a uint64 in [0, {UINT64.high}]")
    return c_array(UINT64, values)


class BlockArray:
    """A block list ready for C (``_marshal.Blocks``): ``pointer`` (NULL when empty),
    ``count``, and ``array``, which holds the values and must stay referenced for as
    long as C may read ``pointer``; the object holds it."""

    __slots__ = ("pointer", "count", "array")

    def __init__(self, blocks: Blocks) -> None:
        self.pointer, self.count, self.array = blocks

    def tolist(self) -> List[int]:
        return [int(v) for v in self.array]


def is_block_array(value: object) -> bool:
    """Project rule (docs/reference/python-api.md §11.2): a one-dimensional integer numpy array."""
    return isinstance(value, np.ndarray) and value.ndim == 1 and value.dtype.kind in "iu"


def _block_outside(name: str, index: Optional[int], value: Any) -> TypeError:
    if index is None:
        return TypeError(f"{name} holds {value}; block indexes are uint64 (>= 0)")
    return TypeError(f"{name}[{index}] is {value}; block indexes are uint64 in [0, {UINT64.high}]")


def _checked_blocks(value: Any, name: str) -> U64Buffer:
    if isinstance(value, np.ndarray):
        return u64_block_array(value, name, _block_outside)
    return u64_block_list(list(value), name, _block_outside)


_blocks = blocks_converter(_checked_blocks)
_EMPTY_BLOCKS = np.empty(0, dtype=np.uint64)


def block_list(value: Any, name: str) -> BlockArray:
    """A checked block list as a ``BlockArray``; ``None`` is an empty list (only
    ``push_blocks`` gets that far with one: the vendor sends its ``None`` source list
    as ``[]``).

    The element types were checked already (the vendor's type check); this is the
    native conversion: a negative index or one above ``2**64-1`` raises ``TypeError``
    as the vendor's binding does.

    Raises:
        TypeError: an index outside uint64.
    """
    if value is None:
        return BlockArray(block_pointer(_EMPTY_BLOCKS))
    return BlockArray(_blocks(value, name))


def check_block_types(value: Any, name: str, containers: Tuple[type, ...] = (list, tuple)) -> None:
    """The vendor's type check of a block list, plus the project's numpy arrays.

    ``None`` passes, as the vendor's type check lets it through (the vendor's later
    ``len()`` of it fails: ``block_count``). A one-dimensional integer numpy array is
    accepted (project rule, docs/reference/python-api.md §11.2); any other array is a ``TypeError``
    as in the vendor.

    Raises:
        TypeError: not one of ``containers`` of ``int``, nor such an array.
    """
    if value is None or is_block_array(value):
        return
    if isinstance(value, np.ndarray):
        raise TypeError(f"{name} must be {' | '.join(c.__name__ for c in containers)} of int or a one-dimensional "
                        f"integer numpy array, not a numpy array of shape {value.shape} and dtype {value.dtype}")
    if not isinstance(value, containers):
        raise TypeError(f"{name} must be {' | '.join(c.__name__ for c in containers)} of int, not "
                        f"{type_name(value)}")
    check_int_elements(cast(Sequence[Any], value), name)   # a list or tuple, checked above


def block_count(value: Any, name: str) -> int:
    """The length of a type-checked block list, where the vendor takes ``len()`` of it.

    Raises:
        TypeError: ``value`` is ``None`` (the vendor's ``len(None)``).
    """
    if value is None:
        raise none_error(name, "a list or tuple of block indexes")
    return int(value.size) if isinstance(value, np.ndarray) else len(value)

