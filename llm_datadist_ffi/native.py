"""The C++ class ``llm_datadist::LlmDataDist``, in Python.

A Pythonic mirror of the vendor's public C++ API (docs/reference/cpp-api.md §4–§6), one method per
C++ method, over the flat C ABI of ``include/``. Names follow Python conventions
(``pull_kv_blocks`` for ``PullKvBlocks``); arguments, defaults and results follow
the C++ signatures; layer ranges are the C++ **inclusive** pairs.

Errors, in the order they are checked:

1. ``TypeError`` for an argument of the wrong type, ``ValueError`` for an integer
   outside its C type (``uint32_t`` batch index, ``int32_t`` layer pair, ...): the
   call never reaches C.
2. Lint (docs/semantics.md §0): layer pairs the vendor reads as "every layer" (PR-1,
   PR-11) and a repeated destination block (PR-5) warn with their ``LintWarning``
   and go on as the device does; under ``LLM_DATADIST_FFI_STRICT=1`` they raise
   ``LLMException`` with ``LLM_PARAM_INVALID`` instead. They are checked while the
   engine is initialised (before, the backend answers ``LLM_FAILED``).
3. Every other rule is the backend's: a non-zero status raises the ``LLMException``
   subclass of its code, carrying the C side's message. ``link_llm_clusters`` and
   ``unlink_llm_clusters`` return their statuses instead of raising.

Block lists may be lists, tuples or one-dimensional integer numpy arrays; a
C-contiguous ``uint64`` array crosses into C without a copy.
"""
from __future__ import annotations

import contextlib
import functools
import logging
import os
import threading
import weakref
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, Callable, Iterator, Mapping, Optional, Sequence, Tuple, TypeVar, Union, cast

import numpy as np

from ._core import _buffers, _capi
from . import lint
from ._core._trace import traced
from ._core._capi import ffi
from ._core._blocklists import plain_u64
from ._core._cints import INT32, INT64, UINT16, UINT32, UINT64, CInt, int_converter, plain_ints
from ._core._marshal import (
    ClusterEntry, Endpoint, U64Buffer, block_pointer, blocks_converter, c_array, c_cache_desc, c_clusters, c_options,
    lint_repeated_blocks, u64_block_array, u64_block_list,
)
from .data_type import ELEMENT_BITS, DataType, GeDataType, data_type_value
from .status import LLMException, LLMStatusCode, exception_for, map_status

__all__ = [
    "LlmRole", "CachePlacement", "DataType", "GeDataType", "CacheDesc", "Cache", "CacheIndex",
    "KvCacheExtParam", "IpInfo", "ClusterInfo", "LlmDataDist", "BlockList",
    "OPTION_LISTEN_IP_INFO", "OPTION_DEVICE_ID", "OPTION_SYNC_CACHE_WAIT_TIME", "OPTION_BUF_POOL_CFG",
    "OPTION_ENABLE_SET_ROLE", "OPTION_LOCAL_COMM_RES", "OPTION_TRANSFER_BACKEND",
    "OPTION_GLOBAL_RESOURCE_CONFIG", "OPTION_MEM_POOL_CONFIG", "OPTION_HOST_MEM_POOL_CONFIG",
    "OPTION_MOCK_NATIVE_POOL", "OPTION_MOCK_LINK_BANDWIDTH", "OPTION_MOCK_LINK_LATENCY_US",
    "DEFAULT_TENSOR_NUM_PER_LAYER", "capabilities",
]

# Option keys of the C++ header (docs/reference/cpp-api.md §3.3), and the two pool keys the engine reads.
_log = logging.getLogger(__name__)

OPTION_LISTEN_IP_INFO = "llm.ListenIpInfo"
OPTION_DEVICE_ID = "llm.DeviceId"
OPTION_SYNC_CACHE_WAIT_TIME = "llm.SyncKvCacheWaitTime"
OPTION_BUF_POOL_CFG = "llm.BufPoolCfg"
OPTION_ENABLE_SET_ROLE = "llm.EnableSwitchRole"
OPTION_LOCAL_COMM_RES = "llm.LocalCommRes"
OPTION_TRANSFER_BACKEND = "llm.TransferBackend"
OPTION_GLOBAL_RESOURCE_CONFIG = "llm.GlobalResourceConfig"
OPTION_MEM_POOL_CONFIG = "llm.MemPoolConfig"
OPTION_HOST_MEM_POOL_CONFIG = "llm.HostMemPoolConfig"
# Mock only (PR-9): "1" makes allocate_cache, deallocate_cache, copy_kv_cache and
# copy_kv_blocks work with the memory pools; without it they answer
# LLM_FEATURE_NOT_ENABLED, as the vendor's class always does.
OPTION_MOCK_NATIVE_POOL = "llm_datadist_ffi.mock.NativePool"
# Mock only, the link model: every transfer this engine starts takes at least
# latency + bytes / bandwidth (docs/user-guide.md, "The link model").
OPTION_MOCK_LINK_BANDWIDTH = "llm_datadist_ffi.mock.LinkBandwidth"      # bytes per second, "0" = unlimited
OPTION_MOCK_LINK_LATENCY_US = "llm_datadist_ffi.mock.LinkLatencyUs"     # microseconds
#: The option keys the C++ class reads (lint OPT-1 names the closest for a misspelt key).
OPTION_NAMES = (OPTION_LISTEN_IP_INFO, OPTION_DEVICE_ID, OPTION_SYNC_CACHE_WAIT_TIME, OPTION_BUF_POOL_CFG,
                OPTION_ENABLE_SET_ROLE, OPTION_LOCAL_COMM_RES, OPTION_TRANSFER_BACKEND,
                OPTION_GLOBAL_RESOURCE_CONFIG, OPTION_MEM_POOL_CONFIG, OPTION_HOST_MEM_POOL_CONFIG,
                "llm.LinkTotalTime", "llm.LinkRetryCount", "llm.RdmaTrafficClass", "llm.RdmaServiceLevel",
                "ge.exec.deviceId", OPTION_MOCK_NATIVE_POOL, OPTION_MOCK_LINK_BANDWIDTH, OPTION_MOCK_LINK_LATENCY_US)

DEFAULT_TENSOR_NUM_PER_LAYER = 2

class LlmRole(IntEnum):
    """``llm_datadist::LlmRole``."""

    PROMPT = 1
    DECODER = 2
    MIX = 3


class CachePlacement(IntEnum):
    """``llm_datadist::CachePlacement``."""

    HOST = 0
    DEVICE = 1


BlockList = Union[Sequence[int], "np.ndarray[Any, Any]"]


# ---- argument conversion ----------------------------------------------------------------------
#
# This tier's checks and their words; the conversions into C structs are ``_marshal``'s.

def _not_an_int(name: str, value: Any, c_type: CInt) -> TypeError:
    return TypeError(f"{name} must be an int ({c_type.name}), not {type(value).__name__}")


def _int_outside(name: str, value: Any, c_type: CInt) -> ValueError:
    return ValueError(f"{name} {int(value)} is outside {c_type.name} [{c_type.low}, {c_type.high}]")


#: An int of a C type; ``bool`` and numpy integers pass, as in the vendor's checks.
_int = int_converter((int, np.integer), _not_an_int, _int_outside)


def _require(value: Any, cls: type, name: str) -> None:
    if not isinstance(value, cls):
        raise TypeError(f"{name} must be a {cls.__name__}, not {type(value).__name__}")


def _pair(value: Any, name: str) -> tuple[int, int]:
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        raise TypeError(f"{name} must be a pair (first, second) of two ints, not {value!r}")
    return (_int(value[0], f"{name}[0]", INT32), _int(value[1], f"{name}[1]", INT32))


def _block_outside(name: str, index: Optional[int], value: Any) -> ValueError:
    return ValueError(f"{name} holds {int(value)}; block indexes are uint64")


def _block_array(value: Any, name: str) -> U64Buffer:
    """A block list as a C-contiguous uint64 array, or the error it deserves."""
    if isinstance(value, np.ndarray):
        if value.ndim != 1:
            raise TypeError(f"{name} must be one-dimensional, got an array of shape {value.shape}")
        if value.dtype.kind not in "iu":
            raise TypeError(f"{name} must hold integers, got dtype {value.dtype}")
        return u64_block_array(value, name, _block_outside)
    if isinstance(value, (list, tuple)):
        fast = plain_u64(value)
        if fast is not None:
            return fast
        # numpy integers, int subclasses, a value outside uint64, or something to refuse
        for i, item in enumerate(value):
            if not isinstance(item, (int, np.integer)):
                raise TypeError(f"{name}[{i}] must be an int, not {type(item).__name__}")
        return u64_block_list(value, name, _block_outside)
    raise TypeError(f"{name} must be a list, tuple or 1-D integer numpy array, not {type(value).__name__}")


#: A block list as (C pointer, count, object the caller keeps alive while C reads the
#: pointer and passes to ``lint_repeated_blocks``).
_blocks = blocks_converter(_block_array)


def _refuse_option(name: str, key: Any, value: Any) -> TypeError:
    return TypeError(f"{name} keys and values must be str, got {key!r}: {value!r}")


def _options(options: Optional[Mapping[str, str]], name: str) -> tuple[Any, int, list[Any]]:
    if options is None:
        return ffi.NULL, 0, []
    if not isinstance(options, Mapping):
        raise TypeError(f"{name} must be a dict[str, str], not {type(options).__name__}")
    return c_options(options, name, _refuse_option)


def _param_invalid(tag: str, message: str) -> LLMException:
    return exception_for(int(LLMStatusCode.LLM_PARAM_INVALID),
                         f"[{tag}] failed, error code is {LLMStatusCode.LLM_PARAM_INVALID}, {message}.")


# ---- converted arguments, kept --------------------------------------------------------------
#
# A transfer converts its cache arguments into C structs on every call, and most calls
# name the same few caches again and again. The backend only reads these structs (every
# pointer to them in the C ABI is const), so one struct per distinct value serves every
# call and thread. A table is keyed by the argument's values, and only when each value
# has a type whose equal values convert to equal C values (ints, bools, the enums): a
# value that equals a key but is not one of those (1.0 equals 1) takes the checks, which
# refuse it. A hit stands for values that passed the checks before, so the checks are
# skipped and nothing else changes. A table that grows past its size starts over.

_TABLE_SIZE = 1024
_INT_TYPES = frozenset((int, bool))
_DATA_TYPE_TYPES = frozenset((int, bool, DataType, GeDataType))
_PLACEMENT_TYPES = frozenset((int, bool, CachePlacement))
_index_structs: dict[tuple[Any, ...], Any] = {}
_cache_structs: dict[tuple[Any, ...], tuple[Any, list[Any]]] = {}
_ext_structs: dict[tuple[Any, ...], tuple[Any, bool]] = {}


def _remember(table: dict[tuple[Any, ...], Any], key: tuple[Any, ...], value: Any) -> None:
    if len(table) >= _TABLE_SIZE:
        table.clear()
    table[key] = value


def _int_tuple(values: Any) -> Optional[tuple[Any, ...]]:
    """``values`` as a tuple when it is a list or tuple of ints (or bools), else None."""
    if type(values) is not list and type(values) is not tuple:
        return None
    if not values:
        return ()
    return tuple(values) if plain_ints(values) else None


# ---- value types ------------------------------------------------------------------------------

@dataclass
class CacheDesc:
    """``llm_datadist::CacheDesc``: ``shape`` is the shape of ONE tensor, ``shape[0]``
    the batch or block count."""

    num_tensors: int
    data_type: Union[DataType, GeDataType, int]
    shape: Sequence[int]
    placement: CachePlacement = CachePlacement.DEVICE

    def _to_c(self, name: str) -> tuple[Any, list[Any]]:
        num_tensors = _int(self.num_tensors, f"{name}.num_tensors", UINT32)
        dtype = data_type_value(self.data_type, f"{name}.data_type")
        placement = _int(self.placement, f"{name}.placement", UINT32)
        if not isinstance(self.shape, (list, tuple)):
            raise TypeError(f"{name}.shape must be a list or tuple of ints, not {type(self.shape).__name__}")
        dims = [_int(d, f"{name}.shape[{i}]", INT64) for i, d in enumerate(self.shape)]
        return c_cache_desc(placement, num_tensors, dtype, dims)


@dataclass
class Cache:
    """``llm_datadist::Cache``. Pulls read only ``cache_id``; pushes also read
    ``cache_desc.placement`` and ``cache_desc.num_tensors`` (a ``None`` desc is the
    C++ default: DEVICE, 0 tensors)."""

    cache_id: int = -1
    tensor_addrs: list[int] = field(default_factory=list)
    cache_desc: Optional[CacheDesc] = None

    def _to_c(self, name: str) -> tuple[Any, list[Any]]:
        key = self._key()
        if key is not None:
            known = _cache_structs.get(key)
            if known is not None:
                return known
        cache, keep = self._convert(name)
        if key is not None:
            _remember(_cache_structs, key, (cache, keep))
        return cache, keep

    def _key(self) -> Optional[tuple[Any, ...]]:
        """The values ``_to_c`` converts, when they may key ``_cache_structs``."""
        addrs = _int_tuple(self.tensor_addrs)
        if type(self.cache_id) not in _INT_TYPES or addrs is None:
            return None
        desc = self.cache_desc
        if desc is None:
            return (self.cache_id, addrs)
        shape = _int_tuple(desc.shape)
        if type(desc) is not CacheDesc or shape is None or type(desc.num_tensors) not in _INT_TYPES \
                or type(desc.data_type) not in _DATA_TYPE_TYPES or type(desc.placement) not in _PLACEMENT_TYPES:
            return None
        return (self.cache_id, addrs, desc.num_tensors, desc.data_type, shape, desc.placement)

    def _convert(self, name: str) -> tuple[Any, list[Any]]:
        cache = ffi.new("lldd_cache *")
        cache.cache_id = _int(self.cache_id, f"{name}.cache_id", INT64)
        keep: list[Any] = []
        if not isinstance(self.tensor_addrs, (list, tuple)):
            raise TypeError(f"{name}.tensor_addrs must be a list of ints")
        addrs = [_int(a, f"{name}.tensor_addrs[{i}]", UINT64) for i, a in enumerate(self.tensor_addrs)]
        if addrs:
            buf = c_array(UINT64, addrs)
            keep.append(buf)
            cache.tensor_addrs, cache.num_tensor_addrs = buf, len(addrs)
        if self.cache_desc is None:
            cache.cache_desc.placement = int(CachePlacement.DEVICE)
            cache.cache_desc.data_type = int(GeDataType.DT_UNDEFINED)
        else:
            _require(self.cache_desc, CacheDesc, f"{name}.cache_desc")
            desc, more = self.cache_desc._to_c(f"{name}.cache_desc")
            keep += [desc, *more]
            cache.cache_desc = desc[0]
        return cache, keep


@dataclass(frozen=True)
class CacheIndex:
    """``llm_datadist::CacheIndex``: a cache on a remote cluster."""

    cluster_id: int
    cache_id: int
    batch_index: int = 0

    def _to_c(self, name: str) -> Any:
        key = (self.cluster_id, self.cache_id, self.batch_index)
        plain = type(key[0]) in _INT_TYPES and type(key[1]) in _INT_TYPES and type(key[2]) in _INT_TYPES
        if plain:
            known = _index_structs.get(key)
            if known is not None:
                return known
        index = ffi.new("lldd_cache_index *")
        index.cluster_id = _int(self.cluster_id, f"{name}.cluster_id", UINT64)
        index.cache_id = _int(self.cache_id, f"{name}.cache_id", INT64)
        index.batch_index = _int(self.batch_index, f"{name}.batch_index", UINT32)
        if plain:
            _remember(_index_structs, key, index)
        return index


@dataclass(frozen=True)
class KvCacheExtParam:
    """``llm_datadist::KvCacheExtParam``: INCLUSIVE layer pairs, ``(-1, -1)`` for all
    layers; ``tensor_num_per_layer`` is 1..255 (the C++ field is ``uint8_t``)."""

    src_layer_range: Tuple[int, int] = (-1, -1)
    dst_layer_range: Tuple[int, int] = (-1, -1)
    tensor_num_per_layer: int = DEFAULT_TENSOR_NUM_PER_LAYER

    def _to_c(self) -> Any:
        src = _pair(self.src_layer_range, "ext_param.src_layer_range")
        dst = _pair(self.dst_layer_range, "ext_param.dst_layer_range")
        n = _int(self.tensor_num_per_layer, "ext_param.tensor_num_per_layer", UINT32)
        ext = ffi.new("lldd_ext_param *")
        ext.src_layer_first, ext.src_layer_second = src
        ext.dst_layer_first, ext.dst_layer_second = dst
        ext.tensor_num_per_layer = n
        return ext

    def _key(self) -> Optional[tuple[Any, ...]]:
        """The values ``_to_c`` converts, when they may key ``_ext_structs``."""
        src, dst = _int_tuple(self.src_layer_range), _int_tuple(self.dst_layer_range)
        if src is None or dst is None or type(self.tensor_num_per_layer) not in _INT_TYPES:
            return None
        return (src, dst, self.tensor_num_per_layer)


_DEFAULT_EXT = KvCacheExtParam()._to_c()

#: A transfer's two ends as C values, and what keeps its cache's arrays alive across the call.
_Ends = Tuple[Any, Any, Any]


def _pull_ends(src_cache_index: CacheIndex, dst_cache: Cache) -> _Ends:
    """A pull's ends, checked then converted in the vendor's order: the remote source, the local destination."""
    _require(src_cache_index, CacheIndex, "src_cache_index")
    _require(dst_cache, Cache, "dst_cache")
    src = src_cache_index._to_c("src_cache_index")
    dst, keep = dst_cache._to_c("dst_cache")
    return src, dst, keep


def _push_ends(src_cache: Cache, dst_cache_index: CacheIndex) -> _Ends:
    """A push's ends, checked then converted in the vendor's order: the local source, the remote destination."""
    _require(src_cache, Cache, "src_cache")
    _require(dst_cache_index, CacheIndex, "dst_cache_index")
    src, keep = src_cache._to_c("src_cache")
    return src, dst_cache_index._to_c("dst_cache_index"), keep


@dataclass(frozen=True)
class IpInfo:
    """``llm_datadist::IpInfo``."""

    ip: str
    port: int


@dataclass
class ClusterInfo:
    """``llm_datadist::ClusterInfo``."""

    remote_cluster_id: int
    remote_role_type: int = 0
    local_ip_infos: list[IpInfo] = field(default_factory=list)
    remote_ip_infos: list[IpInfo] = field(default_factory=list)


def _clusters(clusters: Any) -> tuple[Any, int, list[Any]]:
    if not isinstance(clusters, (list, tuple)):
        raise TypeError(f"clusters must be a list of ClusterInfo, not {type(clusters).__name__}")
    entries: list[ClusterEntry] = []
    for i, cluster in enumerate(clusters):
        _require(cluster, ClusterInfo, f"clusters[{i}]")
        remote_id = _int(cluster.remote_cluster_id, f"clusters[{i}].remote_cluster_id", UINT64)
        role_type = _int(cluster.remote_role_type, f"clusters[{i}].remote_role_type", INT32)
        local = _endpoints(cluster.local_ip_infos, f"clusters[{i}].local_ip_infos")
        remote = _endpoints(cluster.remote_ip_infos, f"clusters[{i}].remote_ip_infos")
        entries.append((remote_id, role_type, local, remote))
    return c_clusters(entries)


def _endpoints(infos: Any, name: str) -> list[Endpoint]:
    if not isinstance(infos, (list, tuple)):
        raise TypeError(f"{name} must be a list of IpInfo")
    endpoints = []
    for j, info in enumerate(infos):
        _require(info, IpInfo, f"{name}[{j}]")
        if not isinstance(info.ip, str):
            raise TypeError(f"{name}[{j}].ip must be a str")
        endpoints.append((info.ip.encode(), _int(info.port, f"{name}[{j}].port", UINT16)))
    return endpoints


# ---- project rules checked in Python (docs/semantics.md, scope [all]) ----------------------

def _check_sync_wait_time(options: Mapping[str, str], tag: str) -> None:
    value = options.get(OPTION_SYNC_CACHE_WAIT_TIME)
    if value is None:
        return
    if not (value.isdigit() and value.isascii()) or int(value) > 2**31 - 1:
        raise _param_invalid(tag, f"option {OPTION_SYNC_CACHE_WAIT_TIME}={value!r} must be a decimal integer in "
                                  f"[0, {2**31 - 1}] milliseconds (PR-26)")
    if int(value) == 0:
        lint.lint("PR-26", f"[{tag}] option {OPTION_SYNC_CACHE_WAIT_TIME}={value!r} is 0 milliseconds")


def _check_listen_port(options: Optional[Mapping[str, str]], tag: str) -> None:
    value = (options or {}).get(OPTION_LISTEN_IP_INFO)
    if value is None:
        return
    _, sep, port = value.rpartition(":")
    # port 0 is the vendor's (an ephemeral listener, or none with HIXL: docs/semantics.md E-26)
    if sep and port.isdigit() and port.isascii() and int(port) > 65535:
        raise _param_invalid(tag, f"option {OPTION_LISTEN_IP_INFO}={value!r}: port {int(port)} is outside "
                                  "[0, 65535] (PR-27)")


def _check_ext_param(ext: KvCacheExtParam, tag: str) -> None:
    """PR-11 and PR-1 (lint): pairs the vendor's API accepts but reads as "every layer"."""
    for rule, message in _ext_param_lints(ext, tag):
        lint.lint(rule, message)


def _ext_param_lints(ext: KvCacheExtParam, tag: str) -> list[tuple[str, str]]:
    """The lints of ``_check_ext_param`` as (rule, message), in the order it reports them.

    Pairs the API check refuses (a member below -1, first > second) are left to the
    backend, which refuses them with the vendor's code.
    """
    src, dst = tuple(ext.src_layer_range), tuple(ext.dst_layer_range)
    if not all(-1 <= pair[0] <= pair[1] for pair in (src, dst)):
        return []
    lints = []
    for name, pair in (("src_layer_range", src), ("dst_layer_range", dst)):
        if pair[0] == -1 and pair[1] >= 0:
            lints.append(("PR-11", f"[{tag}] ext_param.{name} {{-1, {pair[1]}}} is neither a range nor the default "
                                   "{-1, -1}"))
    if (src[0] == -1) != (dst[0] == -1):
        lints.append(("PR-1", f"[{tag}] ext_param.src_layer_range {{{src[0]}, {src[1]}}} and dst_layer_range "
                              f"{{{dst[0]}, {dst[1]}}}: only one of them is a range"))
    return lints


def _tensor_bytes(cache_desc: "CacheDesc") -> int:
    """The byte size of one tensor of ``cache_desc`` (0 when it has none: the backend refuses)."""
    try:
        bits = ELEMENT_BITS.get(data_type_value(cache_desc.data_type), 0)
        elements = 1
        for dim in cache_desc.shape:
            elements *= int(dim)
    except (TypeError, ValueError):
        return 0
    return max(elements, 0) * bits // 8 if bits else 0


def _destroy(handle: Any, kept: dict[int, list[Any]]) -> None:
    """Destroy the native engine, then let go of the memory it could still touch."""
    _capi.lldd_destroy(handle)
    kept.clear()


# ---- the engine -------------------------------------------------------------------------------

_Method = TypeVar("_Method", bound=Callable[..., Any])


# This process's id, renewed in the child of a fork: os.getpid() is a system call, and
# an engine compares its creator's id with this on every call.
_process_id = os.getpid()


def _renew_process_id() -> None:
    global _process_id
    _process_id = os.getpid()


os.register_at_fork(after_in_child=_renew_process_id)


def _holds_engine(method: _Method) -> _Method:
    """Runs the method with the native engine held (see ``LlmDataDist._held``)."""
    @functools.wraps(method)
    def call(self: "LlmDataDist", *args: Any, **kwargs: Any) -> Any:
        self._hold()
        try:
            return method(self, *args, **kwargs)
        finally:
            self._let_go()
    return cast(_Method, call)


@traced
class LlmDataDist:
    """``llm_datadist::LlmDataDist(cluster_id, role)``.

    Use as a context manager, or call :meth:`close`, to finalize and free the engine
    deterministically; an engine nobody refers to any more is finalized and freed when
    it is garbage-collected, and one still alive at interpreter exit is finalized then.
    Every method may be called from any thread; the GIL is released while the backend
    works.

    The native engine is reference-counted: every method holds it while it runs, and
    :meth:`close` frees it only when no method holds it any more (docs/security.md
    §1.2). A method that starts after ``close()`` began raises ``RuntimeError``; one
    that reaches the backend while ``close()`` finalizes gets ``LLM_FAILED``.

    After ``fork()`` the child's copy of an engine belongs to the parent: every call
    on it raises ``RuntimeError``, ``finalize`` and ``close`` leave the parent's engine
    alone, and the child creates engines of its own (docs/user-guide.md, "Processes").
    """

    def __init__(self, cluster_id: int, role: Union[LlmRole, int]) -> None:
        self._cluster_id = _int(cluster_id, "cluster_id", UINT64)
        self._role = _int(role, "role", INT32)
        # guards _handle, _users, _closing; _mutex is the condition's own lock, taken
        # directly where nothing waits (Condition's own ``with`` costs a Python call more)
        self._mutex = threading.RLock()
        self._lock = threading.Condition(self._mutex)
        self._users = 0                        # methods holding the native engine
        self._closing = False
        self._initialized = False
        self._caches: dict[int, CacheDesc] = {}
        self._owned: set[int] = set()          # ids from allocate_cache (deallocate frees only these)
        # memory objects of registered caches, kept alive while the engine may touch them
        self._kept: dict[int, list[Any]] = {}
        self._link_reasons: tuple[str, tuple[str, ...]] = ("", ())
        self._pid = os.getpid()
        self._native_pool = False               # OPTION_MOCK_NATIVE_POOL given at initialize
        self._handle: Any = _capi.lldd_create(self._cluster_id, self._role, "LlmDataDist")
        # weakref.finalize runs on garbage collection and, for those still alive, at exit;
        # it holds the kept memory until the engine is gone
        self._release = weakref.finalize(self, _destroy, self._handle, self._kept)

    # -- properties --
    @property
    def cluster_id(self) -> int:
        return self._cluster_id

    @property
    def role(self) -> int:
        """The role label (an ``LlmRole`` when valid)."""
        try:
            return LlmRole(self._role)
        except ValueError:
            return self._role

    def _engine(self) -> Any:
        """The native handle. Methods call it while they hold the engine (``_held``),
        so the handle stays valid until they return."""
        handle = self._handle
        if handle is None:
            raise RuntimeError("this LlmDataDist was closed")
        if self._pid != _process_id:
            raise RuntimeError(f"this LlmDataDist was created by process {self._pid} before a fork; a child "
                               "process creates its own engines")
        return handle

    @contextlib.contextmanager
    def _held(self) -> Iterator[Any]:
        """Holds the native engine: ``close()`` waits until every holder has left.

        Raises:
            RuntimeError: ``close()`` has begun or is done, or this is a child of
                ``fork()`` (whose copy of the lock a parent thread may hold).
        """
        handle = self._hold()
        try:
            yield handle
        finally:
            self._let_go()

    def _hold(self) -> Any:
        """Count one more holder of the native engine and return its handle (``_held``)."""
        if self._pid != _process_id:
            raise RuntimeError(f"this LlmDataDist was created by process {self._pid} before a fork; a child "
                               "process creates its own engines")
        # acquire and release rather than ``with``: half the cost, on every call
        self._mutex.acquire()
        try:
            if self._handle is None or self._closing:
                raise RuntimeError("this LlmDataDist was closed")
            self._users += 1
            return self._handle
        finally:
            self._mutex.release()

    def _let_go(self) -> None:
        self._mutex.acquire()
        try:
            self._users -= 1
            # only close() waits for the holders, and it sets _closing first
            if self._users == 0 and self._closing:
                self._lock.notify_all()
        finally:
            self._mutex.release()

    # -- life cycle --
    @_holds_engine
    def initialize(self, options: Mapping[str, str]) -> None:
        """``Initialize(options)``.

        Raises:
            TypeError: ``options`` is not a mapping of str to str.
            LLMException: ``LLM_PARAM_INVALID`` for a missing or malformed option (PR-26,
                PR-27 and docs/reference/cpp-api.md §6.4), ``LLM_FAILED`` when the device or listener
                cannot be set up, ``LLM_OUT_OF_MEMORY`` when a pool cannot be allocated.
        """
        tag = "LlmDataDist.initialize"
        array, count, keep = _options(options, "options")
        if not self._initialized:
            lint.check_option_keys(options, OPTION_NAMES, tag)
            _check_sync_wait_time(options, tag)
            _check_listen_port(options, tag)
        was_initialized = self._initialized
        _capi.lldd_initialize(self._engine(), array, count, tag)
        del keep
        if not was_initialized:
            self._native_pool = options.get(OPTION_MOCK_NATIVE_POOL) == "1"
        self._initialized = True

    def finalize(self) -> None:
        """``Finalize()``: drop every link locally, free every cache. Idempotent, also
        after :meth:`close`. In a child of ``fork()`` it leaves the parent's engine alone."""
        with contextlib.ExitStack() as stack:
            try:
                handle = stack.enter_context(self._held())
            except RuntimeError:
                handle = None                  # closed or closing: close() finalizes
            if handle is not None and self._pid == os.getpid():
                _capi.lldd_finalize(handle)
        self._initialized = False
        self._caches.clear()
        self._owned.clear()
        self._kept.clear()

    def close(self) -> None:
        """Finalize and free the native engine; the object is unusable afterwards.

        Methods already running in other threads finish first: ``Finalize`` waits for
        the calls inside the backend (each ends within its own wait time), and a call
        that reaches the backend after that gets ``LLM_FAILED``. The engine is freed
        once no method holds it; a second ``close()`` returns when the first is done.
        In a child of ``fork()`` the parent's engine is left alone.
        """
        if self._pid != os.getpid():           # the parent's engine: only forget it here
            self._handle = None
            self._release()                    # no-op for the engine outside its process
            self._initialized = False
            return
        with self._lock:
            if self._handle is None:
                return
            if self._closing:
                self._lock.wait_for(lambda: self._handle is None)
                return
            self._closing = True
            handle = self._handle
        if self._pid == os.getpid():
            _capi.lldd_finalize(handle)
        with self._lock:
            self._lock.wait_for(lambda: self._users == 0)
            self._handle = None
            self._release()          # destroys the engine once (in its own process only), then its kept memory
            self._lock.notify_all()
        self._initialized = False
        self._caches.clear()
        self._owned.clear()

    def __enter__(self) -> "LlmDataDist":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @_holds_engine
    def set_role(self, role: Union[LlmRole, int], options: Optional[Mapping[str, str]] = None) -> None:
        """``SetRole(role, options)``.

        Raises:
            LLMException: ``LLM_EXIST_LINK`` while a link lives, ``LLM_PARAM_INVALID`` for
                an invalid role or listen address, ``LLM_FAILED`` before ``initialize``.
        """
        tag = "LlmDataDist.set_role"
        role_value = _int(role, "role", INT32)
        array, count, keep = _options(options, "options")
        if self._initialized:
            _check_listen_port(options, tag)
        _capi.lldd_set_role(self._engine(), role_value, array, count, tag)
        del keep
        self._role = role_value

    # -- links --
    @_holds_engine
    def link_llm_clusters(self, clusters: Sequence[ClusterInfo],
                          timeout_in_millis: int = 1000) -> tuple[LLMStatusCode, list[LLMStatusCode]]:
        """``LinkLlmClusters``: returns ``(status, [status per cluster])`` and does not
        raise for link failures.

        Raises:
            TypeError, ValueError: malformed arguments.
        """
        array, count, keep = _clusters(clusters)
        timeout = _int(timeout_in_millis, "timeout_in_millis", INT32)
        status, rets = _capi.lldd_link_clusters(self._engine(), array, count, timeout)
        del keep
        return self._link_result("link", clusters, status, rets)

    @_holds_engine
    def unlink_llm_clusters(self, clusters: Sequence[ClusterInfo], timeout_in_millis: int = 1000,
                            force_flag: bool = False) -> tuple[LLMStatusCode, list[LLMStatusCode]]:
        """``UnlinkLlmClusters``: returns ``(status, [status per cluster])``.

        Raises:
            TypeError, ValueError: malformed arguments.
        """
        array, count, keep = _clusters(clusters)
        timeout = _int(timeout_in_millis, "timeout_in_millis", INT32)
        _require(force_flag, bool, "force_flag")
        status, rets = _capi.lldd_unlink_clusters(self._engine(), array, count, timeout, force_flag)
        del keep
        return self._link_result("unlink", clusters, status, rets)

    def _link_result(self, what: str, clusters: Sequence[ClusterInfo], status: int,
                     rets: list[int]) -> tuple[LLMStatusCode, list[LLMStatusCode]]:
        self._link_reasons = _capi.log_link_call(_log, what, [c.remote_cluster_id for c in clusters], status, rets)
        return map_status(status), [map_status(r) for r in rets]

    @property
    def link_reasons(self) -> tuple[str, tuple[str, ...]]:
        """Why the last ``link_llm_clusters``/``unlink_llm_clusters`` of this object gave
        what it gave: the call's own error text ("" when it succeeded) and, per cluster in
        the call's order, the reason of its status ("" for a success). An addition to the
        C++ API; the same texts are logged by the ``llm_datadist_ffi.native`` logger."""
        return self._link_reasons

    # -- caches --
    @_holds_engine
    def register_kv_cache(self, cache_desc: CacheDesc, addrs: Sequence[int]) -> int:
        """``RegisterKvCache(cache_desc, addrs, RegisterCfg{}, cache_id)``: returns the id.

        ``addrs`` holds one address per tensor; each must point at the tensor's whole
        byte size (ACL buffers: their pointer). An element may also be the memory itself:
        a numpy array, a CPU torch tensor or any buffer-protocol or DLPack object, which is
        checked (C-contiguous, writable, at least the tensor's byte size) and kept alive
        until the cache is unregistered or the engine finalized (an addition to the C++
        signature).

        Raises:
            LLMException: ``LLM_PARAM_INVALID`` (address count or value, shape, dtype,
                bounds of a mock-ACL allocation), ``LLM_FAILED`` before ``initialize``.
        """
        _require(cache_desc, CacheDesc, "cache_desc")
        desc, keep = cache_desc._to_c("cache_desc")
        if not isinstance(addrs, (list, tuple)):
            raise TypeError(f"addrs must be a list of ints, not {type(addrs).__name__}")
        given, kept = _buffers.tensor_addresses(addrs, _tensor_bytes(cache_desc), "addrs", int(desc.data_type),
                                                "LlmDataDist.register_kv_cache")
        values = [_int(a, f"addrs[{i}]", UINT64) for i, a in enumerate(given)]
        buf = c_array(UINT64, values)
        cache_id = _capi.lldd_register_kv_cache(self._engine(), desc, buf, len(values),
                                                "LlmDataDist.register_kv_cache")
        del keep
        self._caches[cache_id] = cache_desc
        if kept:
            self._kept[cache_id] = kept
        return cache_id

    @_holds_engine
    def unregister_kv_cache(self, cache_id: int) -> None:
        """``UnregisterKvCache(cache_id)``; an unknown id succeeds. An allocated cache's
        entry goes too, with the engine's ``OwnedCacheUnregisteredWarning`` (PR-23)."""
        cid = _int(cache_id, "cache_id", INT64)
        _capi.lldd_unregister_kv_cache(self._engine(), cid, "LlmDataDist.unregister_kv_cache")
        self._kept.pop(cid, None)
        self._owned.discard(cid)
        self._caches.pop(cid, None)

    @_holds_engine
    def allocate_cache(self, cache_desc: CacheDesc) -> Cache:
        """``AllocateCache``: ``LLM_FEATURE_NOT_ENABLED``, as the vendor's class answers.

        On the mock, with ``OPTION_MOCK_NATIVE_POOL="1"`` and a memory pool given at
        ``initialize``, a library-owned cache from the pool (PR-9).

        Raises:
            LLMException: ``LLM_FEATURE_NOT_ENABLED`` without that option or without a
                pool (always on the ascend backend), ``LLM_OUT_OF_MEMORY`` when the pool
                is exhausted, ``LLM_PARAM_INVALID`` for a malformed description.
        """
        _require(cache_desc, CacheDesc, "cache_desc")
        desc, keep = cache_desc._to_c("cache_desc")
        cache_id, addrs = _capi.lldd_allocate_cache(self._engine(), desc, int(cache_desc.num_tensors),
                                                    "LlmDataDist.allocate_cache")
        del keep
        self._caches[cache_id] = cache_desc
        self._owned.add(cache_id)
        return Cache(cache_id, addrs, cache_desc)

    @_holds_engine
    def deallocate_cache(self, cache_id: int) -> None:
        """``DeallocateCache``: ``LLM_FEATURE_NOT_ENABLED`` as :meth:`allocate_cache`;
        with the mock's pool-backed variant an unknown id succeeds (PR-9)."""
        cid = _int(cache_id, "cache_id", INT64)
        _capi.lldd_deallocate_cache(self._engine(), cid, "LlmDataDist.deallocate_cache")
        if cid in self._owned:                 # a registered cache stays (docs/reference/semantics.md §3.6: a no-op)
            self._owned.discard(cid)
            self._caches.pop(cid, None)

    # -- transfers --
    def _ext(self, ext_param: Optional[KvCacheExtParam], tag: str) -> Any:
        if ext_param is None:
            return _DEFAULT_EXT                 # all layers, both sides: nothing to lint
        key = ext_param._key() if type(ext_param) is KvCacheExtParam else None
        known = _ext_structs.get(key) if key is not None else None
        if known is not None:
            ext, lint_free = known
        else:
            _require(ext_param, KvCacheExtParam, "ext_param")
            ext = ext_param._to_c()
            lint_free = not _ext_param_lints(ext_param, tag)
            if key is not None:
                _remember(_ext_structs, key, (ext, lint_free))
        if self._initialized and not lint_free:
            _check_ext_param(ext_param, tag)
        return ext

    @_holds_engine
    def pull_kv_cache(self, src_cache_index: CacheIndex, dst_cache: Cache, batch_index: int = 0,
                      size: int = -1, ext_param: Optional[KvCacheExtParam] = None) -> None:
        """``PullKvCache``: ``size`` bytes (−1: one destination batch) of every selected
        tensor, from the remote batch ``src_cache_index.batch_index`` into local batch
        ``batch_index``.

        Raises:
            LLMException: ``LLM_NOT_YET_LINK``, ``LLM_KV_CACHE_NOT_EXIST``,
                ``LLM_PARAM_INVALID``, ``LLM_TIMEOUT`` (docs/semantics.md).
        """
        self._move_cache(_capi.lldd_pull_kv_cache, _pull_ends(src_cache_index, dst_cache),
                         (batch_index, "batch_index"), size, ext_param, "LlmDataDist.pull_kv_cache")

    def _move_cache(self, call: Callable[..., None], ends: _Ends, batch: Tuple[int, str], size: int,
                    ext_param: Optional[KvCacheExtParam], tag: str) -> None:
        """The rest of pull_kv_cache and push_kv_cache once their ends are converted
        (``_pull_ends``, ``_push_ends``): the batch index (``batch``: its value and its
        parameter's name), ``size``, ``ext_param``, then ``call`` (the C entry point)."""
        batch_index = _int(batch[0], batch[1], UINT32)
        nbytes = _int(size, "size", INT64)
        ext = self._ext(ext_param, tag)
        call(self._engine(), ends[0], ends[1], batch_index, nbytes, ext, tag)

    def _move_blocks(self, call: Callable[..., None], ends: _Ends, src_blocks: BlockList,
                     dst_blocks: BlockList, ext_param: Optional[KvCacheExtParam], tag: str) -> None:
        """The rest of pull_kv_blocks and push_kv_blocks once their ends are converted:
        the block lists (source first), ``ext_param``, the repeated-destination lint, then
        ``call`` (the C entry point) with the lists kept alive across it."""
        src_ptr, n_src, src_arr = _blocks(src_blocks, "src_blocks")
        dst_ptr, n_dst, dst_arr = _blocks(dst_blocks, "dst_blocks")
        ext = self._ext(ext_param, tag)
        if self._initialized:
            lint_repeated_blocks(dst_arr, "dst_blocks", tag)
        call(self._engine(), ends[0], ends[1], src_ptr, n_src, dst_ptr, n_dst, ext, tag)
        del src_arr, dst_arr

    @_holds_engine
    def pull_kv_blocks(self, src_cache_index: CacheIndex, dst_cache: Cache, src_blocks: BlockList,
                       dst_blocks: BlockList, ext_param: Optional[KvCacheExtParam] = None) -> None:
        """``PullKvBlocks``: block ``src_blocks[k]`` of every selected remote tensor into
        block ``dst_blocks[k]`` of the local one; contiguous runs move as one region.

        Raises:
            LLMException: as :meth:`pull_kv_cache`.
        """
        self._move_blocks(_capi.lldd_pull_kv_blocks, _pull_ends(src_cache_index, dst_cache), src_blocks,
                          dst_blocks, ext_param, "LlmDataDist.pull_kv_blocks")

    @_holds_engine
    def push_kv_cache(self, src_cache: Cache, dst_cache_index: CacheIndex, src_batch_index: int = 0,
                      size: int = -1, ext_param: Optional[KvCacheExtParam] = None) -> None:
        """``PushKvCache``: one local batch of every selected layer into the remote batch
        ``dst_cache_index.batch_index``. Layers before a failing one stay written.

        Raises:
            LLMException: as :meth:`pull_kv_cache`.
        """
        self._move_cache(_capi.lldd_push_kv_cache, _push_ends(src_cache, dst_cache_index),
                         (src_batch_index, "src_batch_index"), size, ext_param, "LlmDataDist.push_kv_cache")

    @_holds_engine
    def push_kv_blocks(self, src_cache: Cache, dst_cache_index: CacheIndex, src_blocks: BlockList,
                       dst_blocks: BlockList, ext_param: Optional[KvCacheExtParam] = None) -> None:
        """``PushKvBlocks``: local block ``src_blocks[k]`` into remote block ``dst_blocks[k]``.

        Raises:
            LLMException: as :meth:`pull_kv_blocks`.
        """
        self._move_blocks(_capi.lldd_push_kv_blocks, _push_ends(src_cache, dst_cache_index), src_blocks,
                          dst_blocks, ext_param, "LlmDataDist.push_kv_blocks")

    @_holds_engine
    def copy_kv_cache(self, src_cache: Cache, dst_cache: Cache, src_batch_index: int = 0,
                      dst_batch_index: int = 0, offset: int = 0, size: int = -1) -> None:
        """``CopyKvCache``: ``LLM_FEATURE_NOT_ENABLED`` as :meth:`allocate_cache`; with
        the mock's pool-backed variant, a local copy between two caches by id (PR-9).

        Raises:
            LLMException: ``LLM_FEATURE_NOT_ENABLED`` without the mock's option or a
                pool (always on the ascend backend), ``LLM_KV_CACHE_NOT_EXIST``,
                ``LLM_PARAM_INVALID``.
        """
        tag = "LlmDataDist.copy_kv_cache"
        _require(src_cache, Cache, "src_cache")
        _require(dst_cache, Cache, "dst_cache")
        src, keep_src = src_cache._to_c("src_cache")
        dst, keep_dst = dst_cache._to_c("dst_cache")
        sb = _int(src_batch_index, "src_batch_index", UINT32)
        db = _int(dst_batch_index, "dst_batch_index", UINT32)
        off = _int(offset, "offset", UINT64)
        nbytes = _int(size, "size", INT64)
        _capi.lldd_copy_kv_cache(self._engine(), src, dst, sb, db, off, nbytes, tag)
        del keep_src, keep_dst

    @_holds_engine
    def copy_kv_blocks(self, src_cache: Cache, dst_cache: Cache, src_blocks: BlockList,
                       dst_blocks_list: Sequence[BlockList]) -> None:
        """``CopyKvBlocks``: ``LLM_FEATURE_NOT_ENABLED`` as :meth:`allocate_cache`; with
        the mock's pool-backed variant, for each list in ``dst_blocks_list``, block
        ``src_blocks[k]`` into block ``list[k]`` of every tensor (PR-9). A destination
        block given more than once is written in list order, the last write winning,
        with a ``RepeatedDestinationBlockWarning`` (PR-5).

        Raises:
            LLMException: as :meth:`copy_kv_cache`.
        """
        tag = "LlmDataDist.copy_kv_blocks"
        _require(src_cache, Cache, "src_cache")
        _require(dst_cache, Cache, "dst_cache")
        src, keep_src = src_cache._to_c("src_cache")
        dst, keep_dst = dst_cache._to_c("dst_cache")
        src_ptr, n_src, src_arr = _blocks(src_blocks, "src_blocks")
        if not isinstance(dst_blocks_list, (list, tuple)):
            raise TypeError(f"dst_blocks_list must be a list of block lists, not {type(dst_blocks_list).__name__}")
        arrays = [_block_array(lst, f"dst_blocks_list[{i}]") for i, lst in enumerate(dst_blocks_list)]
        flat_ptr, _, flat = block_pointer(np.concatenate(arrays) if arrays else np.empty(0, dtype=np.uint64))
        if self._initialized and self._native_pool:
            lint_repeated_blocks(flat, "dst_blocks_list", tag)
        lens = ffi.new("size_t[]", [len(a) for a in arrays]) if arrays else ffi.NULL
        _capi.lldd_copy_kv_blocks(self._engine(), src, dst, src_ptr, n_src, flat_ptr, lens, len(arrays), tag)
        del keep_src, keep_dst, src_arr, flat

    def __repr__(self) -> str:
        state = "closed" if self._handle is None else ("initialized" if self._initialized else "created")
        return f"LlmDataDist(cluster_id={self._cluster_id}, role={self.role!r}, {state})"


def capabilities() -> dict[str, bool]:
    """The live backend's capability flags by name (``LLDD_CAP_*`` without the prefix,
    in lower case), in the order of their bits."""
    bits = _capi.lldd_capabilities()
    # Read from the header, so that a new flag needs no edit here.
    flags = sorted(_capi.constants("LLDD_CAP_").items(), key=lambda item: item[1])
    return {name.lower(): bool(bits & flag) for name, flag in flags}

