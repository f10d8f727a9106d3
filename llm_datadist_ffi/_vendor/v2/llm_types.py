"""The vendor's ``llm_datadist.v2.llm_types``: descriptors, keys, caches, transfer types.

Everything here is pure Python and checks its arguments exactly as the vendor's
Python layer does (docs/reference/python-api.md §2, §6–§9), in the vendor's order, with the vendor's
exception types. One set of these classes serves both generations (docs/reference/python-api.md §0,
project rule): a ``CacheDesc`` or key made here is accepted by ``cache_manager`` (v2)
and ``kv_cache_manager`` (v1) alike.

Besides the vendor's names the module holds what the engine-facing layer needs to
hand these objects to the core:

* ``core_cache_desc`` — what reaches the core for allocate/register (python-api.md §6);
* ``core_key``/``CoreKey`` — the uniform record a key becomes in the core (python-api.md §7.4);
* ``check_cache_key`` — the validity rule for pulls (python-api.md §7.5), static on both managers.

``CacheTask`` wraps the background thread of ``transfer_cache_async`` (the managers
build it).
"""
from __future__ import annotations

import abc
import threading
from enum import Enum, IntEnum
from typing import TYPE_CHECKING, Any, Dict, List, NamedTuple, Optional, Sequence, Tuple, Union, cast

from .._options import Checked, int_in
from ..._core._trace import traced
from .._vendor_checks import (
    INT32, INT64, INVALID_ID, UINT32, UINT64, check_int, check_int_list, check_type, none_error, param_invalid,
    raise_param_invalid, type_name,
)
from .._vendor_checks import check_layer_range as _check_layer_range
from ...data_type import ELEMENT_BITS, DataType
from ...status import LLMException, LLMStatusCode

if TYPE_CHECKING:  # numpy is imported only when host memory is allocated
    import numpy as np

__all__ = [
    "CacheDesc", "CacheKey", "CacheKeyByIdAndIndex", "KvCache", "BlocksCacheKey", "Placement",
    "CacheTask", "TransferConfig", "LayerSynchronizer", "Cache",
]
# Also public, outside the vendor's __all__ (docs/reference/python-api.md §1.3): RegisterMemStatus,
# Memtype, MemInfo, TransferWithCacheKeyConfig, PushType, check_layer_range; and the project's
# CoreCacheDesc, core_cache_desc, CoreKey, core_key, check_cache_key.


# ---------------------------------------------------------------------------
# Enums (docs/reference/python-api.md §2)
# ---------------------------------------------------------------------------


class Placement(IntEnum):
    """Where a cache lives. Members compare equal to ints; ``str()`` gives ``"Placement.DEVICE"``."""

    HOST = 0
    DEVICE = 1

    def __str__(self) -> str:
        return f"{type(self).__name__}.{self.name}"

    def __format__(self, format_spec: str) -> str:
        return format(str(self), format_spec)


class Memtype(Enum):
    """Memory kind of a ``MemInfo`` (a plain ``Enum``: members are not ints)."""

    MEM_TYPE_DEVICE = 0
    MEM_TYPE_HOST = 1


class RegisterMemStatus(Enum):
    """Result of ``query_register_mem_status`` (a plain ``Enum``)."""

    OK = 0
    PREPARING = 1
    FAILED = 2


class PushType(Enum):
    """The vendor's internal kind of a push destination."""

    NO_CACHE_KEY = 0
    BLOCKS_CACHE_KEY = 1
    CACHE_KEY_BY_ID = 2


# ---------------------------------------------------------------------------
# CacheDesc (docs/reference/python-api.md §6)
# ---------------------------------------------------------------------------


class CacheDesc:
    """The description of a cache: ``num_tensors`` tensors of one ``shape`` and type.

    ``shape`` is the shape of ONE tensor; the core treats ``shape[0]`` as the batch
    count (contiguous cache) or block count (blocks cache).
    """

    def __init__(self, num_tensors: int, shape: Union[Tuple[int, ...], List[int]],
                 data_type: DataType, placement: Placement = Placement.DEVICE,
                 batch_dim_index: int = 0, seq_len_dim_index: int = -1,
                 kv_tensor_format: Optional[str] = None) -> None:
        """Check the arguments in the vendor's order.

        Raises:
            TypeError: ``num_tensors`` or ``seq_len_dim_index`` not an int (also
                ``None``); ``shape`` not a list/tuple of int (``None`` fails at the
                index check, where the vendor's ``len()`` fails); ``data_type`` not a
                ``DataType``; ``placement`` not a ``Placement`` (an int is rejected);
                ``batch_dim_index`` not an int (``None`` fails at the index check);
                ``kv_tensor_format`` not a ``str``.
            ValueError: ``num_tensors`` outside uint32, ``seq_len_dim_index`` outside
                int32, a dim outside int64.
            LLMException: ``LLM_PARAM_INVALID`` when ``batch_dim_index`` is not in
                ``[0, len(shape))`` (so an empty shape fails), or ``seq_len_dim_index``
                is neither -1 nor in ``[0, len(shape))``.
        """
        check_int(num_tensors, "num_tensors", UINT32)
        check_int_list(shape, "shape")
        check_type(data_type, DataType, "data_type")
        check_type(placement, Placement, "placement")
        check_type(batch_dim_index, int, "batch_dim_index")
        check_int(seq_len_dim_index, "seq_len_dim_index", INT32)
        check_type(kv_tensor_format, str, "kv_tensor_format")
        if shape is None:
            raise none_error("shape", "a list or tuple of int")
        if batch_dim_index is None:
            raise none_error("batch_dim_index", "an int")
        if not 0 <= batch_dim_index < len(shape):
            raise_param_invalid(
                f"batch_dim_index is {batch_dim_index}; it must be in [0, len(shape)) = [0, {len(shape)})")
        if not (seq_len_dim_index == -1 or 0 <= seq_len_dim_index < len(shape)):
            raise_param_invalid(
                f"seq_len_dim_index is {seq_len_dim_index}; it must be -1 or in [0, len(shape)) = [0, {len(shape)})")
        for index, dim in enumerate(shape):
            check_int(dim, f"shape[{index}]", INT64)
        self._num_tensors = num_tensors
        self._shape = shape
        self._data_type = data_type
        self._placement = placement
        self._batch_dim_index = batch_dim_index
        self._seq_len_dim_index = seq_len_dim_index
        self._kv_tensor_format = kv_tensor_format
        self._batch_size: int = shape[batch_dim_index]
        self._size: Optional[int] = None

    @property
    def num_tensors(self) -> int:
        """The number of tensors, as given."""
        return self._num_tensors

    @property
    def shape(self) -> Union[Tuple[int, ...], List[int]]:
        """The shape of one tensor: the very list or tuple passed in."""
        return self._shape

    @property
    def data_type(self) -> DataType:
        """The element type, as given."""
        return self._data_type

    @property
    def placement(self) -> Placement:
        """``Placement.DEVICE`` or ``Placement.HOST``, as given."""
        return self._placement

    @property
    def batch_dim(self) -> int:
        """The ``batch_dim_index`` given to the constructor."""
        return self._batch_dim_index

    @property
    def batch_size(self) -> int:
        """``shape[batch_dim_index]`` as it was at construction (``update_dim`` does not
        change it)."""
        return self._batch_size

    @property
    def seq_len_dim_index(self) -> int:
        """The sequence-length dim, or -1; as given."""
        return self._seq_len_dim_index

    @property
    def kv_tensor_format(self) -> Optional[str]:
        """As given (``None`` by default); never sent to the core."""
        return self._kv_tensor_format

    @property
    def size(self) -> int:
        """Byte size of ONE tensor: the product of the dims times the element size.

        Computed on first use and cached until ``update_dim``.

        Raises:
            LLMException: **without** a status code, so ``status_code`` is
                ``LLM_SUCCESS`` (the vendor's quirk), when the size cannot be
                computed: a dim <= 0 or not an int, int64 overflow, or a data type
                without a size.
        """
        if self._size is None:
            self._size = _tensor_size(self._shape, self._data_type)
        return self._size

    def update_dim(self, dim_index: int, dim_value: int) -> None:
        """Set ``shape[dim_index] = dim_value`` without checks and forget the cached size.

        Raises:
            TypeError: the shape is a tuple (raised by Python itself).
            IndexError: ``dim_index`` is outside the shape (raised by Python itself).
        """
        self._shape[dim_index] = dim_value  # type: ignore[index]
        self._size = None

    def __repr__(self) -> str:
        return (f"CacheDesc(num_tensors={self._num_tensors!r}, shape={self._shape!r}, "
                f"data_type={self._data_type}, placement={self._placement}, "
                f"batch_dim_index={self._batch_dim_index!r}, "
                f"seq_len_dim_index={self._seq_len_dim_index!r}, "
                f"kv_tensor_format={self._kv_tensor_format!r})")


def _tensor_size(shape: Sequence[Any], data_type: Any) -> int:
    # The vendor raises LLMException without a status code here (docs/reference/python-api.md §6).
    if not isinstance(data_type, DataType) or data_type.value not in ELEMENT_BITS:
        raise LLMException(f"can not compute the size of a cache: data type {data_type} has no known size")
    elements = 1
    for index, dim in enumerate(shape):
        if not isinstance(dim, int) or dim <= 0:
            raise LLMException(f"can not compute the size of a cache: shape[{index}] is {dim!r}, "
                               f"dims must be ints > 0")
        elements *= dim
        if elements > INT64[2]:
            raise LLMException(f"can not compute the size of a cache: the element count of "
                               f"shape {list(shape)} overflows int64")
    size = (elements * ELEMENT_BITS[data_type.value] + 7) // 8
    if size > INT64[2]:
        raise LLMException(f"can not compute the size of a cache: {size} bytes overflows int64")
    return size


class CoreCacheDesc(NamedTuple):
    """What reaches the core for allocate/register (docs/reference/python-api.md §6).

    ``batch_dim_index`` and ``kv_tensor_format`` are never sent. ``is_blocks`` comes
    from the call, not from the ``CacheDesc`` (project rule: the caller's descriptor
    is not mutated).
    """

    num_tensors: int
    data_type: int
    seq_len_dim_index: int
    shape: Tuple[int, ...]
    placement: int
    is_blocks: bool


def core_cache_desc(cache_desc: CacheDesc, is_blocks: bool) -> CoreCacheDesc:
    """The core form of ``cache_desc`` for an allocate or register call.

    A ``None`` data type or placement passes the vendor's constructor and fails with
    ``AttributeError`` when the vendor reads ``.value``; this raises that first (project
    rule on ``None``). A dim changed by ``update_dim`` to a non-int or a value outside
    int64 fails the vendor's native conversion with ``TypeError``.

    Raises:
        AttributeError: ``data_type`` or ``placement`` is ``None``.
        TypeError: a dim is not an int in int64.
    """
    if cache_desc.data_type is None:
        raise none_error("cache_desc.data_type", "a DataType", AttributeError)
    if cache_desc.placement is None:
        raise none_error("cache_desc.placement", "a Placement", AttributeError)
    dims: List[int] = []
    for index, dim in enumerate(cache_desc.shape):
        if not isinstance(dim, int) or not INT64[1] <= dim <= INT64[2]:
            raise TypeError(f"cache_desc.shape[{index}] is {dim!r}; the core takes int64 dims")
        dims.append(int(dim))
    return CoreCacheDesc(int(cache_desc.num_tensors), int(cache_desc.data_type.value),
                         int(cache_desc.seq_len_dim_index), tuple(dims),
                         int(cache_desc.placement.value), bool(is_blocks))


# ---------------------------------------------------------------------------
# Cache keys (docs/reference/python-api.md §7)
# ---------------------------------------------------------------------------

_CACHE_KEY_WORDS = ("prompt_cluster_id", "cluster_id", "req_id", "model_id", "prefix_id")
_BLOCKS_KEY_WORDS = ("prompt_cluster_id", "cluster_id", "model_id")

# The key constructors' errors carry the vendor's exact texts: client code (the vendor's
# own tests among it) matches them with regular expressions.
_TOO_MANY = "Param num is over limit"
_NO_CLUSTER = "Param prompt_cluster_id or cluster_id is required"
_NO_REQ_ID = "Param req_id is required"


def _key_arguments(args: Tuple[Any, ...], kwargs: Dict[str, Any], slots: Tuple[str, ...],
                   words: Tuple[str, ...]) -> Dict[str, Any]:
    """The arguments of a key by name, parsed as the vendor does: the count, then a
    positional argument overrides the keyword of its slot, then the cluster id must be
    present, then (``CacheKey``) ``req_id``, then every keyword must be known."""
    if len(args) + len(kwargs) > len(slots):
        raise_param_invalid(_TOO_MANY)
    named = dict(kwargs)
    named.update(zip(slots, args))
    if "prompt_cluster_id" not in named and "cluster_id" not in named:
        raise_param_invalid(_NO_CLUSTER)
    if "req_id" in slots and "req_id" not in named:
        raise_param_invalid(_NO_REQ_ID)
    for word in named:
        if word not in words:
            raise_param_invalid(f"Unsupported param:{word}")
    return named


def _cluster_id_arg(named: Dict[str, Any]) -> Tuple[str, Any]:
    """The cluster id and the keyword it came by: ``cluster_id`` (a positional argument
    counts as it) wins over ``prompt_cluster_id``."""
    if "cluster_id" in named:
        return "cluster_id", named["cluster_id"]
    return "prompt_cluster_id", named["prompt_cluster_id"]


def _only_int(name: str, value: Any, prefix: str = "") -> TypeError:
    return TypeError(f"{prefix}{name} only support ['int'], but got {type(value)}.")


def _key_uint64(value: Any, name: str) -> int:
    """The vendor's uint64 check of a ``CacheKey`` field, with its texts."""
    if not isinstance(value, int):
        raise _only_int(name, value)
    if not UINT64[1] <= value <= UINT64[2]:
        raise ValueError(f"{name}'s value is out of range,{value} is not a uint64 value.")
    return int(value)


class CacheKey:
    """A cache on a Prompt cluster, by request id (or prefix id) and model id.

    ``CacheKey(cluster_id, req_id, model_id=0, prefix_id=2**64-1)``; ``prompt_cluster_id``
    is an alias keyword for ``cluster_id``. Keys compare by identity.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        """Parse and check the arguments in the vendor's order.

        Raises:
            LLMException: ``LLM_PARAM_INVALID`` for more than 4 arguments in total, no
                cluster id, no ``req_id``, or an unknown keyword (in that order).
            TypeError: a value that is not an int (also ``None``).
            ValueError: a value outside uint64.
        """
        named = _key_arguments(args, kwargs, ("cluster_id", "req_id", "model_id", "prefix_id"), _CACHE_KEY_WORDS)
        # the vendor checks every value under its slot's name, also a prompt_cluster_id
        self._cluster_id = _key_uint64(_cluster_id_arg(named)[1], "cluster_id")
        self._req_id = _key_uint64(named["req_id"], "req_id")
        self._model_id = _key_uint64(named.get("model_id", 0), "model_id")
        self._prefix_id = _key_uint64(named.get("prefix_id", INVALID_ID), "prefix_id")

    @property
    def cluster_id(self) -> int:
        """The cluster that holds the cache."""
        return self._cluster_id

    @property
    def prompt_cluster_id(self) -> int:
        """Same as ``cluster_id``."""
        return self._cluster_id

    @property
    def req_id(self) -> int:
        """The request id; ``2**64-1`` means none."""
        return self._req_id

    @property
    def model_id(self) -> int:
        """The model id (0 by default)."""
        return self._model_id

    @property
    def prefix_id(self) -> int:
        """The prefix id; ``2**64-1`` (the default) means none."""
        return self._prefix_id

    def __repr__(self) -> str:
        return (f"CacheKey(cluster_id={self._cluster_id}, req_id={self._req_id}, "
                f"model_id={self._model_id}, prefix_id={self._prefix_id})")


class CacheKeyByIdAndIndex:
    """A cache on a remote cluster by its cache id, and a batch index in it."""

    def __init__(self, cluster_id: int, cache_id: int, batch_index: int = 0) -> None:
        """Raises ``TypeError`` (a value that is not an int, also ``None``) or
        ``ValueError`` (``cluster_id`` outside uint64, ``cache_id`` outside int64,
        ``batch_index`` outside uint32)."""
        self._cluster_id = check_int(cluster_id, "cluster_id", UINT64)
        self._cache_id = check_int(cache_id, "cache_id", INT64)
        self._batch_index = check_int(batch_index, "batch_index", UINT32)

    @property
    def cluster_id(self) -> int:
        """The cluster that holds the cache."""
        return self._cluster_id

    @property
    def cache_id(self) -> int:
        """The cache id on that cluster."""
        return self._cache_id

    @property
    def batch_index(self) -> int:
        """The batch index within that cache."""
        return self._batch_index

    def __repr__(self) -> str:
        return (f"CacheKeyByIdAndIndex(cluster_id={self._cluster_id}, cache_id={self._cache_id}, "
                f"batch_index={self._batch_index})")


class BlocksCacheKey:
    """A blocks cache on a cluster, by model id: ``BlocksCacheKey(cluster_id, model_id=0)``.

    ``prompt_cluster_id`` is an alias keyword for ``cluster_id``. Values are only
    type-checked here; a negative or too large value fails when the key is used.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        """Parse and check the arguments in the vendor's order.

        Raises:
            LLMException: ``LLM_PARAM_INVALID`` for more than 2 arguments in total, no
                cluster id, or an unknown keyword (in that order).
            TypeError: the cluster id or ``model_id`` is not an int (``None`` passes).
        """
        named = _key_arguments(args, kwargs, ("cluster_id", "model_id"), _BLOCKS_KEY_WORDS)
        cluster_word, cluster_id = _cluster_id_arg(named)
        model_id = named.get("model_id", 0)
        if cluster_id is not None and not isinstance(cluster_id, int):
            raise _only_int("cluster_id", cluster_id, "The first param ")
        if model_id is not None and not isinstance(model_id, int):
            raise _only_int("model_id", model_id, "The second param ")
        self._cluster_word = cluster_word
        self._cluster_id: Optional[int] = cluster_id
        self._model_id: Optional[int] = model_id

    @property
    def cluster_id(self) -> Optional[int]:
        """The cluster that holds the cache, as given."""
        return self._cluster_id

    @property
    def prompt_cluster_id(self) -> Optional[int]:
        """Same as ``cluster_id``."""
        return self._cluster_id

    @property
    def model_id(self) -> Optional[int]:
        """The model id (0 by default), as given."""
        return self._model_id

    def __repr__(self) -> str:
        return f"BlocksCacheKey({self._cluster_word}={self._cluster_id}, model_id={self._model_id})"


AnyCacheKey = Union[CacheKey, CacheKeyByIdAndIndex, BlocksCacheKey]


class CoreKey(NamedTuple):
    """What a key becomes in the core (docs/reference/python-api.md §7.4), in a fixed field order
    that a C struct can mirror."""

    cluster_id: int
    cache_id: int
    batch_index: int
    req_id: int
    prefix_id: int
    model_id: int
    is_blocks: bool


def core_key(key: AnyCacheKey) -> CoreKey:
    """The core form of a key.

    A ``BlocksCacheKey`` is only type-checked when it is made; its values are
    converted here as the vendor's native conversion does (project rule on ``None``:
    the failure comes before any native call and names the field).

    Raises:
        TypeError: ``key`` is not a key; a ``BlocksCacheKey`` cluster id or model id
            that is ``None``, negative or above ``2**64-1``.
    """
    if isinstance(key, CacheKey):
        return CoreKey(key.cluster_id, -1, 0, key.req_id, key.prefix_id, key.model_id, False)
    if isinstance(key, CacheKeyByIdAndIndex):
        return CoreKey(key.cluster_id, key.cache_id, key.batch_index, INVALID_ID, INVALID_ID, 0, False)
    if isinstance(key, BlocksCacheKey):
        cluster_id = _native_uint64(key.cluster_id, "BlocksCacheKey cluster_id")
        model_id = _native_uint64(key.model_id, "BlocksCacheKey model_id")
        return CoreKey(cluster_id, -1, 0, INVALID_ID, INVALID_ID, model_id, True)
    raise TypeError(f"cache key must be CacheKey, CacheKeyByIdAndIndex or BlocksCacheKey, not {type_name(key)}")


def _native_uint64(value: Optional[int], name: str) -> int:
    # The vendor's binding raises TypeError for a value its uint64_t cannot take.
    if value is None:
        raise none_error(name, "an int in [0, 2**64-1]")
    if not UINT64[1] <= value <= UINT64[2]:
        raise TypeError(f"{name} is {value}; the core takes a uint64 in [0, {UINT64[2]}]")
    return int(value)


def _is_valid_id(value: int) -> bool:
    return 0 <= value != INVALID_ID


def check_cache_key(cache_key: Any) -> None:
    """The validity rule for a key used in a pull (docs/reference/python-api.md §7.5).

    For a ``CacheKey``, exactly one of ``req_id`` and ``prefix_id`` must be valid (an
    id is invalid when it is < 0 or ``2**64-1``). Other keys pass. Static on both
    managers as ``check_cache_key``.

    Raises:
        LLMException: ``LLM_PARAM_INVALID`` when both ids or neither id are valid.
    """
    if not isinstance(cache_key, CacheKey):
        return
    req_valid = _is_valid_id(cache_key.req_id)
    prefix_valid = _is_valid_id(cache_key.prefix_id)
    if not req_valid and not prefix_valid:
        raise_param_invalid(f"one of req id and prefix id should contain valid value, "
                            f"got req_id={cache_key.req_id}, prefix_id={cache_key.prefix_id}")
    if req_valid and prefix_valid:
        raise_param_invalid(f"only one of req id and prefix id should contain valid value, "
                            f"got req_id={cache_key.req_id}, prefix_id={cache_key.prefix_id}")


# ---------------------------------------------------------------------------
# Caches (docs/reference/python-api.md §8)
# ---------------------------------------------------------------------------


class Cache:
    """A v2 cache: built by the ``CacheManager`` (or ``create_cpu_cache``), never by users.

    ``Cache(cache_id, cache_desc, tensor_addrs, cache_manager, is_registered,
    is_blocks_cache)``. The manager, the registered flag and any host memory this
    object owns are kept in private attributes for the engine-facing layer.
    """

    def __init__(self, cache_id: int, cache_desc: CacheDesc, tensor_addrs: List[int],
                 cache_manager: Any, is_registered: bool, is_blocks_cache: bool) -> None:
        """Raises ``TypeError`` (``cache_id`` not an int) or ``ValueError`` (outside int64)."""
        self._cache_id = check_int(cache_id, "cache_id", INT64)
        self._cache_desc = cache_desc
        self._tensor_addrs = tensor_addrs
        self._cache_manager = cache_manager
        self._is_registered = is_registered
        self._is_blocks_cache = is_blocks_cache
        self._host_buffers: List["np.ndarray[Any, Any]"] = []
        self._engine: Any = None  # the engine that made it (set by the manager), for check_live

    @property
    def cache_id(self) -> int:
        """The process-local cache id (-1 for a CPU cache made by ``create_cpu_cache``)."""
        return self._cache_id

    @property
    def cache_desc(self) -> CacheDesc:
        """The ``CacheDesc`` object given to the call that made the cache."""
        return self._cache_desc

    @property
    def tensor_addrs(self) -> List[int]:
        """One address per tensor; ``[]`` after the cache was deallocated."""
        return self._tensor_addrs

    @tensor_addrs.setter
    def tensor_addrs(self, value: List[int]) -> None:
        self._tensor_addrs = value

    @property
    def is_blocks_cache(self) -> bool:
        """Whether the cache is a blocks cache."""
        return self._is_blocks_cache

    @classmethod
    def create_cpu_cache(cls, cache_desc: CacheDesc, addrs: List[int]) -> "Cache":
        """An unregistered host blocks cache over caller-owned memory, for ``swap_blocks``.

        Returns ``Cache(-1, cache_desc, addrs, None, False, True)``.

        Raises:
            TypeError: ``cache_desc`` not a ``CacheDesc``; ``addrs`` not a ``list`` of
                int (a tuple is rejected; ``None`` fails at the length check).
            AttributeError: ``cache_desc`` is ``None`` (the vendor reads its placement).
            LLMException: ``LLM_PARAM_INVALID`` when the placement is not ``HOST`` or
                ``len(addrs) != num_tensors``.
        """
        check_type(cache_desc, CacheDesc, "cache_desc")
        check_int_list(addrs, "addrs", containers=list)
        if cache_desc is None:
            raise none_error("cache_desc", "a CacheDesc", AttributeError)
        if cache_desc.placement != Placement.HOST:
            raise_param_invalid(f"create_cpu_cache needs cache_desc.placement Placement.HOST, "
                                f"got {cache_desc.placement}")
        if addrs is None:
            raise none_error("addrs", "a list of int")
        if len(addrs) != cache_desc.num_tensors:
            raise_param_invalid(f"len(addrs) is {len(addrs)}; it must equal cache_desc.num_tensors "
                                f"({cache_desc.num_tensors})")
        return cls(-1, cache_desc, addrs, None, False, True)

    @classmethod
    def allocate_cpu_cache(cls, cache_desc: CacheDesc) -> "Cache":
        """Project extension: ``create_cpu_cache`` over host memory this object owns.

        Allocates one zeroed numpy buffer of ``cache_desc.size`` bytes per tensor and
        returns ``create_cpu_cache(cache_desc, <their addresses>)``. The buffers live
        as long as the returned object (``host_buffers`` gives them) or until
        ``close()``.

        Raises:
            TypeError: ``cache_desc`` is not a ``CacheDesc`` (``None`` included).
            LLMException: ``LLM_PARAM_INVALID`` when the placement is not ``HOST``,
                ``num_tensors`` is 0, or the tensor size cannot be computed.
        """
        import numpy as np

        check_type(cache_desc, CacheDesc, "cache_desc", allow_none=False)
        if cache_desc.placement != Placement.HOST:
            raise_param_invalid(f"allocate_cpu_cache needs cache_desc.placement Placement.HOST, "
                                f"got {cache_desc.placement}")
        if cache_desc.num_tensors == 0:
            raise_param_invalid("allocate_cpu_cache needs cache_desc.num_tensors >= 1")
        try:
            size = cache_desc.size
        except LLMException as exc:
            raise param_invalid(f"allocate_cpu_cache: {exc}") from None
        buffers = [np.zeros(size, dtype=np.uint8) for _ in range(cache_desc.num_tensors)]
        cache = cls.create_cpu_cache(cache_desc, [int(b.ctypes.data) for b in buffers])
        cache._host_buffers = buffers
        return cache

    @property
    def host_buffers(self) -> List["np.ndarray[Any, Any]"]:
        """The uint8 buffers of a cache made by ``allocate_cpu_cache`` (else ``[]``)."""
        return self._host_buffers

    def close(self) -> None:
        """Release the host memory this object owns, if any (``allocate_cpu_cache``);
        ``tensor_addrs`` becomes ``[]``. Other caches are left as they are: they are
        freed through their manager. Safe to call twice."""
        if self._host_buffers:
            self._host_buffers = []
            self._tensor_addrs = []

    def __enter__(self) -> "Cache":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"Cache(cache_id={self._cache_id}, cache_desc={self._cache_desc!r}, "
                f"tensor_addrs={self._tensor_addrs!r}, is_blocks_cache={self._is_blocks_cache})")


class KvCache:
    """A v1 cache: built by the ``KvCacheManager`` (or ``create_cpu_cache``), never by users.

    ``KvCache(cache_id, cache_desc, per_device_tensor_addrs, kv_cache_manager)``. When
    the object is garbage-collected while still valid and its manager is initialised,
    it frees its cache through ``kv_cache_manager.deallocate_cache(self)`` — clients
    rely on that.
    """

    def __init__(self, cache_id: int, cache_desc: CacheDesc, per_device_tensor_addrs: List[List[int]],
                 kv_cache_manager: Any) -> None:
        """Raises ``TypeError`` (``cache_id`` not an int) or ``ValueError`` (outside int64)."""
        self._per_device_tensor_addrs: List[List[int]] = []  # so that __del__ of a failed init is a no-op
        self._kv_cache_manager: Any = None
        self._cache_id = check_int(cache_id, "cache_id", INT64)
        self._cache_desc = cache_desc
        self._per_device_tensor_addrs = per_device_tensor_addrs
        self._kv_cache_manager = kv_cache_manager
        self._engine: Any = None  # the engine that made it (set by the manager), for check_live

    @property
    def cache_id(self) -> int:
        """The process-local cache id (-1 for a CPU cache)."""
        return self._cache_id

    @property
    def cache_desc(self) -> CacheDesc:
        """The ``CacheDesc`` object given to the call that made the cache."""
        return self._cache_desc

    @property
    def per_device_tensor_addrs(self) -> List[List[int]]:
        """One list of tensor addresses per device (clients use ``[0]``); ``[]`` after
        deallocation."""
        return self._per_device_tensor_addrs

    @per_device_tensor_addrs.setter
    def per_device_tensor_addrs(self, value: List[List[int]]) -> None:
        self._per_device_tensor_addrs = value

    @classmethod
    def create_cpu_cache(cls, cache_desc: CacheDesc, addrs: Union[List[int], List[List[int]]]) -> "KvCache":
        """A host cache over caller-owned memory, for ``swap_blocks``.

        ``addrs`` is one flat list of ``num_tensors`` addresses, or a list of such
        lists (one per device). Returns ``KvCache(-1, cache_desc, [addrs] if flat else
        addrs, None)``.

        Raises:
            TypeError: ``cache_desc`` not a ``CacheDesc``; ``addrs`` not a ``list``
                (also ``None``); an element neither ``list`` nor ``int``; a non-int in an
                inner list.
            AttributeError: ``cache_desc`` is ``None`` (the vendor reads its placement).
            LLMException: ``LLM_PARAM_INVALID`` when the placement is not ``HOST``,
                ``addrs`` is empty, an inner list's length is not ``num_tensors``,
                flat and nested elements are mixed, or a flat list's length is not
                ``num_tensors`` (checked in that order).
        """
        check_type(cache_desc, CacheDesc, "cache_desc")
        if cache_desc is None:
            raise none_error("cache_desc", "a CacheDesc", AttributeError)
        if cache_desc.placement != Placement.HOST:
            raise_param_invalid(f"create_cpu_cache needs cache_desc.placement Placement.HOST, "
                                f"got {cache_desc.placement}")
        check_type(addrs, list, "addrs", allow_none=False)
        if not addrs:
            raise_param_invalid("addrs must not be empty")
        for index, item in enumerate(addrs):
            if not isinstance(item, (list, int)):
                raise TypeError(f"addrs[{index}] must be list | int, not {type_name(item)}")
        num_tensors = cache_desc.num_tensors
        for index, item in enumerate(addrs):
            if isinstance(item, list):
                check_int_list(item, f"addrs[{index}]", containers=list)
                if len(item) != num_tensors:
                    raise_param_invalid(f"len(addrs[{index}]) is {len(item)}; it must equal "
                                        f"cache_desc.num_tensors ({num_tensors})")
        nested = isinstance(addrs[0], list)
        if any(isinstance(item, list) != nested for item in addrs):
            raise_param_invalid("addrs must hold only ints (one device) or only lists (one per device)")
        if not nested and len(addrs) != num_tensors:
            raise_param_invalid(f"len(addrs) is {len(addrs)}; it must equal cache_desc.num_tensors "
                                f"({num_tensors})")
        per_device: List[List[int]] = addrs if nested else [addrs]  # type: ignore[assignment,list-item]
        return cls(-1, cache_desc, per_device, None)

    def __del__(self) -> None:
        manager = self._kv_cache_manager
        if manager is None or not self._per_device_tensor_addrs:
            return
        # A finalizer must not raise: an error here would only be printed as
        # "Exception ignored", possibly during interpreter shutdown.
        try:
            if manager.is_initialized():
                manager.deallocate_cache(self)
        except Exception:  # noqa: BLE001 - see above
            pass

    def __repr__(self) -> str:
        return (f"KvCache(cache_id={self._cache_id}, cache_desc={self._cache_desc!r}, "
                f"per_device_tensor_addrs={self._per_device_tensor_addrs!r})")


# ---------------------------------------------------------------------------
# Transfer helper types (docs/reference/python-api.md §9)
# ---------------------------------------------------------------------------


def check_layer_range(name: str, layer_range: Optional[range], allow_none: bool = True) -> None:
    """The vendor's module helper, with its signature: the layer-range check of pushes
    and async transfers (``None`` passes unless ``allow_none`` is False; otherwise a
    ``range`` with step 1 and ``0 <= start < stop``).

    Raises:
        TypeError: not a ``range`` (``None`` when ``allow_none`` is False).
        LLMException: ``LLM_PARAM_INVALID`` for a step other than 1, or a range that
            is empty, descending or starts below 0.
    """
    _check_layer_range(layer_range, name, allow_none=allow_none)


def _check_layer_range_value(name: str, value: Optional[range]) -> Optional[range]:
    """Raises ``TypeError`` (not a range) or ``LLMException`` (python-api.md §9.1); ``None`` passes."""
    _check_layer_range(value, name)
    return value


def _check_dst_addrs(name: str, value: Union[List[int], Tuple[int, ...]]) -> Union[List[int], Tuple[int, ...]]:
    """Raises ``TypeError`` (not a list/tuple of int; ``None``) or ``ValueError`` (an
    address outside uint64)."""
    check_int_list(value, name, allow_none=False)
    for index, addr in enumerate(value):
        check_int(addr, f"{name}[{index}]", UINT64)
    return value


class TransferConfig:
    """One destination of a v1-style ``transfer_cache_async``: raw destination
    addresses, two per layer."""

    dst_cluster_id = Checked(int_in(UINT64), doc="The destination cluster (results are keyed by it).")
    dst_addrs = Checked(_check_dst_addrs, doc="The destination addresses, two per layer, as given.")
    src_layer_range = Checked(
        _check_layer_range_value,
        doc="The source layers; ``None`` means all (filled in by ``transfer_cache_async``).")
    src_batch_index = Checked(int_in(UINT32), doc="The source batch index.")

    def __init__(self, dst_cluster_id: int, dst_addrs: Union[List[int], Tuple[int, ...]],
                 src_layer_range: Optional[range] = None, src_batch_index: int = 0) -> None:
        """Check the arguments in the vendor's order (the attribute setters repeat them).

        Raises:
            TypeError: ``dst_cluster_id`` or ``src_batch_index`` not an int (also
                ``None``); ``dst_addrs`` not a list/tuple of int (also ``None``);
                ``src_layer_range`` not a ``range``.
            ValueError: ``dst_cluster_id`` or an address outside uint64,
                ``src_batch_index`` outside uint32.
            LLMException: ``LLM_PARAM_INVALID`` for a ``src_layer_range`` with step
                other than 1 or not ``0 <= start < stop``.
        """
        self.dst_cluster_id = dst_cluster_id
        self.dst_addrs = dst_addrs
        self.src_layer_range = src_layer_range
        self.src_batch_index = src_batch_index
        self.dst_layer_range: Optional[range] = None

    def __repr__(self) -> str:
        return (f"TransferConfig(dst_cluster_id={self.dst_cluster_id}, dst_addrs={self.dst_addrs!r}, "
                f"src_layer_range={self.src_layer_range!r}, src_batch_index={self.src_batch_index})")


class TransferWithCacheKeyConfig:
    """One destination of a direct-mode ``transfer_cache_async``: a remote cache by key.

    ``cache_key`` and ``src_batch_index`` stay properties: their setters read or write
    another field (``dst_cluster_id``, the key's kind).
    """

    src_layer_range = Checked(
        _check_layer_range_value,
        doc="The source layers. The setter raises ``TypeError`` (not a range) or ``LLMException`` "
            "(§9.1); ``None`` passes.")
    dst_layer_range = Checked(
        _check_layer_range_value,
        doc="The destination layers, paired one to one with the source layers. The setter raises "
            "``TypeError`` (not a range) or ``LLMException`` (§9.1); ``None`` passes.")

    def __init__(self, cache_key: Union[BlocksCacheKey, CacheKeyByIdAndIndex],
                 src_layer_range: Optional[range] = None, dst_layer_range: Optional[range] = None,
                 src_batch_index: int = 0) -> None:
        """Check the arguments in the vendor's order; both ranges are required.

        Raises:
            TypeError: ``cache_key`` not a ``BlocksCacheKey``/``CacheKeyByIdAndIndex``
                (also ``None``); a layer range not a ``range`` (also ``None``);
                ``src_batch_index`` not an int.
            ValueError: ``src_batch_index`` outside uint32.
            LLMException: ``LLM_PARAM_INVALID`` for a range with step other than 1 or
                not ``0 <= start < stop``, ranges of different lengths, or a
                ``BlocksCacheKey`` with ``src_batch_index != 0``.
        """
        check_type(cache_key, (BlocksCacheKey, CacheKeyByIdAndIndex), "cache_key", allow_none=False)
        _check_layer_range(src_layer_range, "src_layer_range", allow_none=False)
        _check_layer_range(dst_layer_range, "dst_layer_range", allow_none=False)
        if len(cast(range, src_layer_range)) != len(cast(range, dst_layer_range)):
            raise_param_invalid(f"src_layer_range {src_layer_range!r} and dst_layer_range "
                                f"{dst_layer_range!r} must have the same length")
        batch_index = check_int(src_batch_index, "src_batch_index", UINT32)
        if isinstance(cache_key, BlocksCacheKey) and batch_index != 0:
            raise_param_invalid(f"src_batch_index must be 0 with a BlocksCacheKey, got {batch_index}")
        self._cache_key = cache_key
        self.src_layer_range = src_layer_range
        self.dst_layer_range = dst_layer_range
        self._src_batch_index = batch_index
        self.dst_cluster_id: Optional[int] = cache_key.cluster_id

    @property
    def cache_key(self) -> Union[BlocksCacheKey, CacheKeyByIdAndIndex]:
        """The destination cache's key."""
        return self._cache_key

    @cache_key.setter
    def cache_key(self, value: Union[BlocksCacheKey, CacheKeyByIdAndIndex]) -> None:
        """Raises ``TypeError`` unless ``value`` is a ``BlocksCacheKey`` or
        ``CacheKeyByIdAndIndex``; also updates ``dst_cluster_id``."""
        check_type(value, (BlocksCacheKey, CacheKeyByIdAndIndex), "cache_key", allow_none=False)
        self._cache_key = value
        self.dst_cluster_id = value.cluster_id

    @property
    def src_batch_index(self) -> int:
        """The source batch index (0 with a ``BlocksCacheKey``)."""
        return self._src_batch_index

    @src_batch_index.setter
    def src_batch_index(self, value: int) -> None:
        """Raises ``LLMException`` (a ``BlocksCacheKey`` and a value other than 0, checked
        first), ``TypeError`` (not an int) or ``ValueError`` (outside uint32)."""
        if isinstance(self._cache_key, BlocksCacheKey) and value != 0:
            raise_param_invalid(f"src_batch_index must be 0 with a BlocksCacheKey, got {value!r}")
        self._src_batch_index = check_int(value, "src_batch_index", UINT32)

    def __repr__(self) -> str:
        return (f"TransferWithCacheKeyConfig(cache_key={self._cache_key!r}, "
                f"src_layer_range={self.src_layer_range!r}, dst_layer_range={self.dst_layer_range!r}, "
                f"src_batch_index={self._src_batch_index})")


class LayerSynchronizer(abc.ABC):
    """Tells ``transfer_cache_async`` when a layer's KV is computed."""

    @abc.abstractmethod
    def synchronize_layer(self, layer_index: int, timeout_in_millis: Optional[int]) -> bool:
        """Block until layer ``layer_index`` is computed; return True on success.

        The library always passes ``timeout_in_millis=None``. Returning False stops
        the transfer; every destination still covering the layer gets
        ``LLM_PARAM_INVALID``.
        """


@traced
class CacheTask:
    """The handle ``transfer_cache_async`` returns (docs/reference/python-api.md §9.5).

    It wraps the background thread that transfers layer by layer. Results are kept
    per destination cluster id (configs with the same destination share one), and
    transfer failures are reported, never raised. Built by the managers only.
    """

    def __init__(self, thread: threading.Thread, configs: Sequence[Any],
                 results: Dict[int, LLMStatusCode], default_error: LLMStatusCode) -> None:
        self._thread = thread
        self._configs = list(configs)
        self._results = results
        self._default_error = default_error

    def _wait(self, timeout_in_millis: Optional[int]) -> bool:
        """Join the thread; True when it has finished."""
        if timeout_in_millis is not None:
            check_int(timeout_in_millis, "timeout_in_millis", UINT32)
        self._thread.join(None if timeout_in_millis is None else timeout_in_millis / 1000)
        return not self._thread.is_alive()

    def synchronize(self, timeout_in_millis: Optional[int] = None) -> LLMStatusCode:
        """Wait for the transfer (``None``: without limit) and return the first
        failure in config order, else ``LLM_SUCCESS``. Still running after the wait:
        the default error (v2 ``LLM_TIMEOUT``, v1 ``LLM_WAIT_PROCESS_TIMEOUT``).

        Raises:
            TypeError: ``timeout_in_millis`` is not an int.
            ValueError: ``timeout_in_millis`` is outside uint32.
        """
        if not self._wait(timeout_in_millis):
            return self._default_error
        for config in self._configs:
            result = self._results.get(config.dst_cluster_id)
            if result is not None and result != LLMStatusCode.LLM_SUCCESS:
                return result
        return LLMStatusCode.LLM_SUCCESS

    def get_results(self, timeout_in_millis: Optional[int] = None) -> List[Optional[LLMStatusCode]]:
        """Wait as ``synchronize`` does; one entry per config in input order: the
        result recorded for its destination cluster, or ``None`` if none was (the
        thread stopped before reaching it). Still running: the default error for
        every config.

        Raises:
            TypeError: ``timeout_in_millis`` is not an int.
            ValueError: ``timeout_in_millis`` is outside uint32.
        """
        if not self._wait(timeout_in_millis):
            return [self._default_error] * len(self._configs)
        return [self._results.get(config.dst_cluster_id) for config in self._configs]


class MemInfo:
    """A memory range for ``remap_registered_memory``: ``MemInfo(mem_type, addr, size)``."""

    def __init__(self, mem_type: Memtype, addr: int, size: int) -> None:
        """Raises ``TypeError`` unless ``mem_type`` is a ``Memtype`` and ``addr``,
        ``size`` are ints (``None`` passes each check, as in the vendor)."""
        check_type(mem_type, Memtype, "mem_type")
        check_type(addr, int, "addr")
        check_type(size, int, "size")
        self._mem_type = mem_type
        self._addr = addr
        self._size = size

    @property
    def mem_type(self) -> Memtype:
        """The memory kind."""
        return self._mem_type

    @property
    def addr(self) -> int:
        """The start address."""
        return self._addr

    @property
    def size(self) -> int:
        """The length in bytes."""
        return self._size

    def __str__(self) -> str:
        return f"MemInfo(mem_type={self._mem_type}, addr={self._addr}, size={self._size})"

    __repr__ = __str__
