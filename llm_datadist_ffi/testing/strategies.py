"""Hypothesis strategies for the arguments of LLM-DataDist calls.

Each strategy draws what a connector hands to the library: cache descriptions, block
tables, layer ranges, ``tensor_num_per_layer`` values and cache keys, for the
vendor-compatible API (``llm_datadist_ffi.vendor`` / ``.v2``, the ``llm_datadist`` alias)
and for the native API (``llm_datadist_ffi.native``).

Every strategy takes ``validity``:

- ``"valid"``: values the device accepts, without a lint warning, so a test that runs
  with lint warnings as errors can use them as they are;
- ``"invalid"``: values the device refuses; each strategy's docstring lists the kinds it
  draws and the code or exception each kind gets (docs/semantics.md,
  docs/reference/semantics.md);
- ``"any"``: either.

A case the device accepts but the package lints (an empty Python range in a pull, a
repeated destination block, a half-default layer pair, ...) is valid on the device, so
it is never drawn as invalid; strategies draw it only where a parameter asks for it
(``block_lists(..., unique=False)``).

Sizes stay small by default (a few KiB per cache), so drawn caches can be backed by
numpy arrays in every example.
"""
from __future__ import annotations

import math
from typing import Any, Literal, Optional, Sequence, Union, overload

try:
    from hypothesis import assume
    from hypothesis import strategies as st
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "llm_datadist_ffi.testing.strategies needs Hypothesis: pip install llm_datadist_ffi[test]"
    ) from exc

import numpy as np

from llm_datadist_ffi import native
from llm_datadist_ffi.data_type import ELEMENT_BITS, DataType, GeDataType
from llm_datadist_ffi._vendor.v2.llm_types import BlocksCacheKey, CacheDesc, CacheKey, CacheKeyByIdAndIndex, Placement

__all__ = [
    "Validity", "Api", "Container", "U64_INVALID_ID", "VENDOR_DATA_TYPES", "NATIVE_DATA_TYPES", "SUB_BYTE_DATA_TYPES",
    "cache_descs", "tensor_bytes", "block_lists", "block_pairs", "layer_ranges", "tensor_nums_per_layer", "cache_keys",
]

Validity = Literal["valid", "invalid", "any"]
Api = Literal["vendor", "native"]
Container = Literal["list", "tuple", "array"]
IntOrStrategy = Union[int, "st.SearchStrategy[int]"]
AnyDesc = Union[CacheDesc, native.CacheDesc]
AnyKey = Union[CacheKey, CacheKeyByIdAndIndex, BlocksCacheKey, native.CacheIndex]

#: The id a ``CacheKey`` uses for "no request id" / "no prefix id".
U64_INVALID_ID = 2**64 - 1

#: Every member of the vendor's ``DataType`` (whole-byte types only).
VENDOR_DATA_TYPES: tuple[DataType, ...] = tuple(DataType)
#: The ``ge::DataType`` values with an element size: the native layer registers these.
NATIVE_DATA_TYPES: tuple[GeDataType, ...] = tuple(t for t in GeDataType if int(t) in ELEMENT_BITS)
#: The native types smaller than a byte (``DT_INT4``, ``DT_UINT1``, ``DT_FLOAT4_E2M1``, ...).
SUB_BYTE_DATA_TYPES: tuple[GeDataType, ...] = tuple(t for t in NATIVE_DATA_TYPES if ELEMENT_BITS[int(t)] < 8)

_UNSIZED_DATA_TYPES = (5, int(GeDataType.DT_UNDEFINED), int(GeDataType.DT_HIFLOAT4_SCALE))
_CONTAINERS: tuple[Container, ...] = ("list", "tuple", "array")


def _check_validity(validity: str) -> None:
    if validity not in ("valid", "invalid", "any"):
        raise ValueError(f"validity must be 'valid', 'invalid' or 'any', not {validity!r}")


def _by_validity(validity: Validity, valid: "st.SearchStrategy[Any]",
                 invalid: "st.SearchStrategy[Any]") -> "st.SearchStrategy[Any]":
    _check_validity(validity)
    if validity == "valid":
        return valid
    if validity == "invalid":
        return invalid
    return st.one_of(valid, invalid)


def _ints(value: Optional[IntOrStrategy], default: "st.SearchStrategy[int]") -> "st.SearchStrategy[int]":
    if value is None:
        return default
    if isinstance(value, int):
        return st.just(value)
    return value


def _bits(data_type: Union[DataType, GeDataType, int]) -> int:
    return ELEMENT_BITS[data_type.value if isinstance(data_type, DataType) else int(data_type)]


# ---- cache descriptions ---------------------------------------------------------------------------------

@st.composite
def _valid_desc_parts(draw: Any, num_tensors: "st.SearchStrategy[int]", batch: "st.SearchStrategy[int]",
                      data_types: Sequence[Any], max_bytes: int, max_rank: int) -> tuple[int, Any, list[int]]:
    """(num_tensors, data type, shape) with ``num_tensors × TS <= max_bytes`` and a
    stride that tiles the tensor (a sub-byte row is a whole number of bytes, PR-17)."""
    count = draw(num_tensors)
    rows = draw(batch)
    data_type = draw(st.sampled_from(list(data_types)))
    bits = _bits(data_type)
    unit = 8 // math.gcd(bits, 8)                  # elements per row that make whole bytes
    budget_bits = (max_bytes // max(count, 1) // max(rows, 1)) * 8
    units = budget_bits // (unit * bits)           # how many units one row may hold
    assume(units >= 1)
    inner: list[int] = []
    room = units
    for _ in range(draw(st.integers(1, max(max_rank - 1, 1))) - 1):
        dim = draw(st.integers(1, min(room, 8)))
        inner.append(dim)
        room //= dim
    inner.append(unit * draw(st.integers(1, min(room, 64))))
    return count, data_type, [rows, *inner]


@st.composite
def _invalid_desc_parts(draw: Any, api: Api, data_types: Sequence[Any]) -> tuple[int, Any, list[int]]:
    kinds = ["no_tensors", "non_positive_dim", "too_many_dims", "element_count_overflow"]
    if api == "native":
        kinds += ["empty_shape", "unsized_data_type", "zero_stride"]
    kind = draw(st.sampled_from(kinds))
    data_type = draw(st.sampled_from(list(data_types)))
    count = draw(st.integers(1, 4))
    rows = draw(st.integers(1, 8))
    if kind == "no_tensors":
        return 0, data_type, [rows, draw(st.integers(1, 64))]
    if kind == "non_positive_dim":
        shape = [rows, draw(st.integers(1, 16)), draw(st.integers(1, 16))]
        shape[draw(st.integers(0, 2))] = draw(st.integers(-8, 0))
        return count, data_type, shape
    if kind == "too_many_dims":
        return count, data_type, [rows] + [1] * draw(st.integers(31, 33))
    if kind == "element_count_overflow":
        big = draw(st.integers(2**32, 2**40))
        return count, data_type, [rows, big, big]
    if kind == "empty_shape":
        return count, data_type, []
    if kind == "unsized_data_type":
        return count, draw(st.sampled_from(_UNSIZED_DATA_TYPES)), [rows, draw(st.integers(1, 64))]
    # zero_stride: a sub-byte tensor of fewer bytes than shape[0] (PR-17 guard); with one
    # element per row and at most 6 bits per element, 4 rows or more always fall short
    sub_byte = draw(st.sampled_from([t for t in SUB_BYTE_DATA_TYPES if t in data_types] or list(SUB_BYTE_DATA_TYPES)))
    return count, sub_byte, [draw(st.integers(4, 16)), 1]


@overload
def cache_descs(api: Literal["vendor"] = ..., *, validity: Validity = ..., num_tensors: Optional[IntOrStrategy] = ...,
                batch: Optional[IntOrStrategy] = ..., data_types: Optional[Sequence[Any]] = ...,
                placements: Optional[Sequence[Any]] = ..., max_bytes: int = ...,
                max_rank: int = ...) -> "st.SearchStrategy[CacheDesc]": ...


@overload
def cache_descs(api: Literal["native"], *, validity: Validity = ..., num_tensors: Optional[IntOrStrategy] = ...,
                batch: Optional[IntOrStrategy] = ..., data_types: Optional[Sequence[Any]] = ...,
                placements: Optional[Sequence[Any]] = ..., max_bytes: int = ...,
                max_rank: int = ...) -> "st.SearchStrategy[native.CacheDesc]": ...


def cache_descs(api: Api = "vendor", *, validity: Validity = "valid", num_tensors: Optional[IntOrStrategy] = None,
                batch: Optional[IntOrStrategy] = None, data_types: Optional[Sequence[Any]] = None,
                placements: Optional[Sequence[Any]] = None, max_bytes: int = 4096,
                max_rank: int = 3) -> "st.SearchStrategy[Any]":
    """Cache descriptions: ``CacheDesc`` of the vendor-compatible API (``api="vendor"``) or
    ``native.CacheDesc`` (``api="native"``).

    ``shape[0]`` is the batch count of a contiguous cache and the block count of a blocks
    cache (the same description serves both; the call that registers it decides), so
    ``batch`` fixes it (an int or a strategy; 1 … 8 by default). ``num_tensors`` is 1 … 8
    by default. ``data_types`` defaults to every ``DataType`` member (vendor) or every
    ``ge::DataType`` with a size, the sub-byte ones included (native). ``placements``
    defaults to both; the v1 ``KvCacheManager`` takes DEVICE caches only, so pass
    ``placements=[Placement.DEVICE]`` for it.

    Valid descriptions register: two to ``max_rank`` dims, each positive, a stride that
    tiles the tensor (a sub-byte row is a whole number of bytes, so no PR-17 lint), the
    vendor's ``batch_dim_index`` 0 (no PR-18 lint), and ``num_tensors`` tensors of at most
    ``max_bytes`` bytes together. Tensor sizes: ``tensor_bytes(desc)``. ``max_bytes``
    must hold one row of every tensor for every ``num_tensors`` and ``batch`` drawn
    (combinations that cannot fit are discarded, as ``assume`` does).

    Invalid descriptions, each refused at registration and allocation with
    ``LLM_PARAM_INVALID``:

    - ``num_tensors == 0`` (no address to register);
    - a dim ``<= 0``;
    - 32 dims or more;
    - an element count past int64;
    - native only: an empty shape; a data type without a size (5, ``DT_UNDEFINED``,
      ``DT_HIFLOAT4_SCALE``); a sub-byte tensor of fewer bytes than ``shape[0]`` (a
      stride of 0, PR-17).

    Example:

    >>> from hypothesis import given
    >>> from llm_datadist_ffi.testing.strategies import cache_descs, tensor_bytes
    >>> @given(cache_descs("native", num_tensors=2, max_bytes=1024))
    ... def test_small(desc):
    ...     assert desc.num_tensors == 2 and 2 * tensor_bytes(desc) <= 1024
    >>> test_small()
    """
    if api not in ("vendor", "native"):
        raise ValueError(f"api must be 'vendor' or 'native', not {api!r}")
    if max_rank < 2:
        raise ValueError("max_rank must be at least 2: shape[0] and one row dim")
    types = list(data_types) if data_types is not None else list(
        VENDOR_DATA_TYPES if api == "vendor" else NATIVE_DATA_TYPES)
    if api == "vendor" and not all(isinstance(t, DataType) for t in types):
        raise ValueError("the vendor API's CacheDesc takes DataType members only")
    if placements is not None:
        where = st.sampled_from(list(placements))
    elif api == "vendor":
        where = st.sampled_from([Placement.DEVICE, Placement.HOST])
    else:
        where = st.sampled_from([native.CachePlacement.DEVICE, native.CachePlacement.HOST])
    valid = _valid_desc_parts(_ints(num_tensors, st.integers(1, 8)), _ints(batch, st.integers(1, 8)), types,
                              max_bytes, max_rank)
    parts = _by_validity(validity, valid, _invalid_desc_parts(api, types))

    def build(drawn: tuple[tuple[int, Any, list[int]], Any]) -> Any:
        (count, data_type, shape), placement = drawn
        if api == "vendor":
            return CacheDesc(count, shape, data_type, placement)
        return native.CacheDesc(count, data_type, shape, placement)

    return st.tuples(parts, where).map(build)


def tensor_bytes(desc: AnyDesc) -> int:
    """The byte size of ONE tensor of ``desc`` (sub-byte types rounded up), as the core
    computes it; ``tensor_bytes(desc) // desc.shape[0]`` is the batch or block stride."""
    elements = math.prod(int(d) for d in desc.shape)
    return -(-elements * _bits(desc.data_type) // 8)


# ---- block lists -----------------------------------------------------------------------------------------

def _contain(values: list[int], container: Container) -> Any:
    if container == "tuple":
        return tuple(values)
    if container == "array":
        return np.array(values, dtype=np.uint64)
    return list(values)


@st.composite
def _runs(draw: Any, k: int, nb_src: int, nb_dst: int) -> tuple[list[int], list[int]]:
    """``k`` pairs made of runs (both sides grow by 1 within a run), destinations distinct."""
    src: list[int] = []
    dst: list[int] = []
    while len(dst) < k:
        run = draw(st.integers(1, min(k - len(dst), nb_src, nb_dst)))
        free = [d for d in range(nb_dst - run + 1) if not set(range(d, d + run)) & set(dst)]
        if not free:
            run = 1
            free = [d for d in range(nb_dst) if d not in dst]
        d0 = draw(st.sampled_from(free))
        s0 = draw(st.integers(0, nb_src - run))
        dst += range(d0, d0 + run)
        src += range(s0, s0 + run)
    return src, dst


@st.composite
def _valid_list(draw: Any, num_blocks: int, min_size: int, max_size: int, unique: bool, layout: str) -> list[int]:
    top = min(max_size, num_blocks) if unique else max_size
    k = draw(st.integers(min_size, top))
    shape = draw(st.sampled_from(["runs", "scattered"])) if layout == "any" else layout
    if shape == "runs" and unique:
        return list(draw(_runs(k, num_blocks, num_blocks))[1])
    if shape == "runs":
        values: list[int] = []
        while len(values) < k:                     # runs that may overlap: indexes repeat
            run = draw(st.integers(1, min(k - len(values), num_blocks)))
            start = draw(st.integers(0, num_blocks - run))
            values += range(start, start + run)
        return values
    if unique:
        return list(draw(st.permutations(range(num_blocks)))[:k])
    return list(draw(st.lists(st.integers(0, num_blocks - 1), min_size=k, max_size=k)))


@st.composite
def _past_end(draw: Any, values: list[int], limit: int) -> list[int]:
    """``values`` with one element moved to ``limit`` … ``limit + 3``."""
    out = list(values)
    out[draw(st.integers(0, len(out) - 1))] = draw(st.integers(limit, limit + 3))
    return out


def block_lists(num_blocks: int, *, validity: Validity = "valid", min_size: int = 1, max_size: int = 8,
                unique: bool = True, layout: Literal["any", "runs", "scattered"] = "any",
                containers: Sequence[Container] = _CONTAINERS) -> "st.SearchStrategy[Any]":
    """One block list for a cache of ``num_blocks`` blocks, as a ``list``, a ``tuple`` or a
    ``uint64`` numpy array (``containers`` picks; the vendor's v1 ``pull_blocks`` takes
    lists only).

    Valid lists hold ``min_size`` … ``max_size`` indexes below ``num_blocks``, as runs of
    consecutive indexes (``layout="runs"``, moved as one region each) or scattered
    (``"scattered"``), or both (``"any"``). With ``unique=True`` (the default) no index
    repeats; ``unique=False`` lets indexes repeat, which the device accepts (a repeated
    source is ordinary; a repeated destination copies in list order and warns,
    PR-5).

    Invalid lists, refused with ``LLM_PARAM_INVALID`` by every pull and push that uses
    them for this cache (the vendor's Python layer raises its ``LLMException`` with that
    code for an empty destination list):

    - empty;
    - one index at or past ``num_blocks`` (``num_blocks`` … ``num_blocks + 3``).

    Example:

    >>> from hypothesis import given
    >>> from llm_datadist_ffi.testing.strategies import block_lists
    >>> @given(block_lists(16, containers=["array"]))
    ... def test_in_range(blocks):
    ...     assert blocks.dtype.name == "uint64" and len(blocks) >= 1 and int(blocks.max()) < 16
    >>> test_in_range()
    """
    if num_blocks < 0 or min_size < 1 or max_size < min_size:
        raise ValueError("need num_blocks >= 0 and 1 <= min_size <= max_size")
    if validity != "invalid" and (num_blocks == 0 or (unique and num_blocks < min_size)):
        raise ValueError(f"no valid list of at least {min_size} blocks fits {num_blocks} blocks")
    kinds = list(containers)
    if not kinds or any(c not in _CONTAINERS for c in kinds):
        raise ValueError(f"containers must be some of {_CONTAINERS}")
    top = min(max_size, num_blocks) if unique and num_blocks else max_size
    valid = _valid_list(num_blocks, min_size, max_size, unique, layout) if num_blocks else st.nothing()
    filler = st.lists(st.integers(0, max(num_blocks - 1, 0)), min_size=1, max_size=max(top, 1),
                      unique=unique) if num_blocks else st.lists(st.just(0), min_size=1, max_size=1)
    invalid: st.SearchStrategy[list[int]] = st.one_of(st.just([]), filler.flatmap(lambda v: _past_end(v, num_blocks)))
    values = _by_validity(validity, valid, invalid)
    return st.tuples(values, st.sampled_from(kinds)).map(lambda vc: _contain(*vc))


@st.composite
def _valid_pairs(draw: Any, nb_src: int, nb_dst: int, max_size: int, layout: str) -> tuple[list[int], list[int]]:
    k = draw(st.integers(1, min(max_size, nb_dst)))
    shape = draw(st.sampled_from(["runs", "scattered"])) if layout == "any" else layout
    if shape == "runs":
        runs: tuple[list[int], list[int]] = draw(_runs(k, nb_src, nb_dst))
        return runs
    dst = list(draw(st.permutations(range(nb_dst)))[:k])
    src = draw(st.lists(st.integers(0, nb_src - 1), min_size=k, max_size=k))
    return src, dst


@st.composite
def _invalid_pairs(draw: Any, nb_src: int, nb_dst: int, max_size: int) -> tuple[list[int], list[int]]:
    kind = draw(st.sampled_from(["empty", "src_past_end", "dst_past_end", "lengths_differ"]))
    if kind == "empty":
        return [], []
    if nb_src == 0 or nb_dst == 0:
        src = draw(st.lists(st.integers(nb_src, nb_src + 3), min_size=1, max_size=max_size))
        return src, draw(st.lists(st.integers(nb_dst, nb_dst + 3), min_size=len(src), max_size=len(src)))
    src, dst = draw(_valid_pairs(nb_src, nb_dst, max_size, "any"))
    if kind == "src_past_end":
        return draw(_past_end(src, nb_src)), dst
    if kind == "dst_past_end":
        return src, draw(_past_end(dst, nb_dst))
    if len(src) > 1 and draw(st.booleans()):
        return src[:-1], dst
    return src + [draw(st.integers(0, nb_src - 1))], dst


def block_pairs(num_src_blocks: int, num_dst_blocks: int, *, validity: Validity = "valid", max_size: int = 8,
                layout: Literal["any", "runs", "scattered"] = "any",
                containers: Sequence[Container] = _CONTAINERS) -> "st.SearchStrategy[tuple[Any, Any]]":
    """A block table: ``(src_blocks, dst_blocks)`` for a block transfer (B2B:
    ``pull_blocks``/``push_blocks`` with a ``BlocksCacheKey``, ``pull_kv_blocks``,
    ``push_kv_blocks``) from a cache of ``num_src_blocks`` blocks to one of
    ``num_dst_blocks``; both lists in one container drawn from ``containers``.

    Valid tables pair 1 … ``max_size`` blocks, every index in its cache, destinations
    distinct (no PR-5 lint), sources possibly repeated (one block copied to several
    places), laid out as runs (``layout="runs"``: both sides grow by 1 within a run) or
    scattered.

    Invalid tables, refused with ``LLM_PARAM_INVALID`` (pulls and pushes; the vendor's
    Python layer raises its ``LLMException`` with that code for empty lists):

    - both lists empty;
    - a source index at or past ``num_src_blocks``;
    - a destination index at or past ``num_dst_blocks``;
    - lists of different lengths.

    Example:

    >>> from hypothesis import given
    >>> from llm_datadist_ffi.testing.strategies import block_pairs
    >>> @given(block_pairs(4, 6, containers=["list"]))
    ... def test_table(table):
    ...     src, dst = table
    ...     assert len(src) == len(dst) and len(set(dst)) == len(dst)
    ...     assert max(src) < 4 and max(dst) < 6
    >>> test_table()
    """
    if validity != "invalid" and (num_src_blocks < 1 or num_dst_blocks < 1):
        raise ValueError("valid block tables need at least one block on each side")
    kinds = list(containers)
    if not kinds or any(c not in _CONTAINERS for c in kinds):
        raise ValueError(f"containers must be some of {_CONTAINERS}")
    valid = _valid_pairs(num_src_blocks, num_dst_blocks, max_size, layout) \
        if num_src_blocks and num_dst_blocks else st.nothing()
    pairs = _by_validity(validity, valid, _invalid_pairs(num_src_blocks, num_dst_blocks, max_size))
    return st.tuples(pairs, st.sampled_from(kinds)).map(
        lambda pc: (_contain(pc[0][0], pc[1]), _contain(pc[0][1], pc[1])))


# ---- layer ranges ----------------------------------------------------------------------------------------

@overload
def layer_ranges(num_layers: int, *, form: Literal["python"] = ..., validity: Validity = ...,
                 default: bool = ...) -> "st.SearchStrategy[Optional[range]]": ...


@overload
def layer_ranges(num_layers: int, *, form: Literal["native"], validity: Validity = ...,
                 default: bool = ...) -> "st.SearchStrategy[tuple[int, int]]": ...


def layer_ranges(num_layers: int, *, form: Literal["python", "native"] = "python", validity: Validity = "valid",
                 default: bool = True) -> "st.SearchStrategy[Any]":
    """Layer ranges of a cache with ``num_layers`` layers (its tensor count divided by
    ``tensor_num_per_layer``), in the form of the vendor's Python API
    (``form="python"``: ``range(a, b)``, layers ``a`` … ``b - 1``) or of the native API
    (``form="native"``: the C++ inclusive pair ``(first, last)``).

    Valid: ``range(a, b)`` with ``0 <= a < b <= num_layers`` / ``(f, s)`` with
    ``0 <= f <= s < num_layers``, and, with ``default=True``, the "every layer" spelling:
    ``None`` / ``(-1, -1)``. Give the default to both sides of a native call or to neither
    (one default pair is the PR-1 lint). Empty Python ranges and pairs ``(-1, s)`` with
    ``s >= 0`` are lints (PR-2, PR-11), drawn by neither validity.

    Invalid, Python form (pulls and pushes of the vendor API):

    - a step other than 1: ``LLMException`` ``LLM_PARAM_INVALID`` (Python check);
    - a negative start: ``LLM_PARAM_INVALID`` (Python check);
    - past the last layer (``b > num_layers``): ``LLM_PARAM_INVALID`` (engine).

    Invalid, native form (pulls and pushes):

    - a first member below -1: ``LLM_PARAM_INVALID``;
    - ``first > last``: ``LLM_PARAM_INVALID``;
    - past the last layer (``last >= num_layers``): ``LLM_PARAM_INVALID`` when the other
      side's pair is not the default (a pull ignores both pairs when either is, PR-1).

    Example:

    >>> from hypothesis import given
    >>> from llm_datadist_ffi.testing.strategies import layer_ranges
    >>> @given(layer_ranges(4, form="native", default=False))
    ... def test_pair(pair):
    ...     first, last = pair
    ...     assert 0 <= first <= last < 4
    >>> test_pair()
    """
    if form not in ("python", "native"):
        raise ValueError(f"form must be 'python' or 'native', not {form!r}")
    if validity != "invalid" and num_layers < 1 and not default:
        raise ValueError("no valid layer range of a cache without layers, and default=False")
    top = max(num_layers, 0)
    spans = st.integers(0, top - 1).flatmap(lambda a: st.tuples(st.just(a), st.integers(a + 1, top))) \
        if top else st.nothing()
    plain: st.SearchStrategy[Any]
    dflt: st.SearchStrategy[Any]
    invalid: st.SearchStrategy[Any]
    if form == "python":
        plain = spans.map(lambda ab: range(*ab))
        dflt = st.none()
        invalid = st.one_of(
            st.tuples(st.integers(0, top + 2), st.integers(1, 4), st.integers(2, 3)).map(
                lambda t: range(t[0], t[0] + t[1], t[2])),
            st.tuples(st.integers(-4, -1), st.integers(1, top + 1)).map(lambda t: range(*t)),
            st.integers(top + 1, top + 3).flatmap(lambda b: st.integers(0, b - 1).map(lambda a: range(a, b))),
        )
    else:
        plain = spans.map(lambda ab: (ab[0], ab[1] - 1))
        dflt = st.just((-1, -1))
        invalid = st.one_of(
            st.tuples(st.integers(-6, -2), st.integers(-6, top + 2)),
            st.integers(1, top + 3).flatmap(lambda f: st.integers(0, f - 1).map(lambda s: (f, s))),
            st.integers(top, top + 3).flatmap(lambda s: st.integers(0, s).map(lambda f: (f, s))),
        )
    valid = st.one_of(plain, dflt) if default else plain
    return _by_validity(validity, valid, invalid)


# ---- tensor_num_per_layer --------------------------------------------------------------------------------

def tensor_nums_per_layer(num_tensors: int, *, api: Api = "vendor",
                          validity: Validity = "valid") -> "st.SearchStrategy[int]":
    """``tensor_num_per_layer`` values for a call whose local cache has ``num_tensors``
    tensors (the destination of a pull, the source of a push).

    Valid: the divisors of ``num_tensors`` (at most 255 for the native API, whose C++ field
    is a ``uint8_t``), accepted with and without layer ranges, by pulls and pushes.

    Invalid: ``0``, ``LLM_PARAM_INVALID`` everywhere (the vendor's Python layer raises it
    before the call); native only: 256 … 1000, ``LLM_PARAM_INVALID``.

    Example:

    >>> from hypothesis import given
    >>> from llm_datadist_ffi.testing.strategies import tensor_nums_per_layer
    >>> @given(tensor_nums_per_layer(6))
    ... def test_divides(n):
    ...     assert 6 % n == 0
    >>> test_divides()
    """
    if api not in ("vendor", "native"):
        raise ValueError(f"api must be 'vendor' or 'native', not {api!r}")
    if validity != "invalid" and num_tensors < 1:
        raise ValueError("valid values need num_tensors >= 1")
    cap = 255 if api == "native" else 2**32 - 1
    divisors = [d for d in range(1, min(num_tensors, cap) + 1) if num_tensors % d == 0]
    invalid = st.one_of(st.just(0), st.integers(256, 1000)) if api == "native" else st.just(0)
    return _by_validity(validity, st.sampled_from(divisors) if divisors else st.nothing(), invalid)


# ---- cache keys ------------------------------------------------------------------------------------------

KeyKind = Literal["CacheKey", "CacheKeyByIdAndIndex", "BlocksCacheKey", "CacheIndex"]


def cache_keys(cluster_id: IntOrStrategy, *, api: Api = "vendor", kinds: Optional[Sequence[KeyKind]] = None,
               validity: Validity = "valid", cache_id: Optional[IntOrStrategy] = None, num_batches: int = 1,
               model_id: Optional[IntOrStrategy] = None) -> "st.SearchStrategy[Any]":
    """Keys naming a cache of the cluster ``cluster_id``: the vendor-compatible
    ``CacheKey``, ``CacheKeyByIdAndIndex`` and ``BlocksCacheKey`` (one set of classes for
    v1 and v2; ``kinds`` picks, all three by default) or the native ``CacheIndex``
    (``api="native"``).

    ``cache_id`` (for ``CacheKeyByIdAndIndex``/``CacheIndex``; 1 … 2**63 - 1 by default),
    ``model_id`` (0 … 2**64 - 1 by default) and ``num_batches`` (the batch count of the
    cache a key addresses by index) tie the keys to real caches.

    Valid: a ``CacheKey`` with exactly one of ``req_id`` and ``prefix_id`` a valid id
    (the other ``U64_INVALID_ID``); a by-index key with ``batch_index < num_batches``; any
    ``BlocksCacheKey``.

    Invalid:

    - a ``CacheKey`` with both ids invalid or both valid: ``LLM_PARAM_INVALID`` from the
      Python layer (``check_cache_key``) before a pull;
    - a ``CacheKeyByIdAndIndex``/``CacheIndex`` with ``batch_index >= num_batches``:
      ``LLM_KV_CACHE_NOT_EXIST`` from a contiguous pull;
    - ``BlocksCacheKey``: none (no key is refused before the peer looks it up).

    Example:

    >>> from hypothesis import given
    >>> from llm_datadist_ffi.testing.strategies import cache_keys
    >>> @given(cache_keys(7, kinds=["CacheKeyByIdAndIndex"], cache_id=3, num_batches=4))
    ... def test_by_index(key):
    ...     assert (key.cluster_id, key.cache_id) == (7, 3) and 0 <= key.batch_index < 4
    >>> test_by_index()
    """
    _check_validity(validity)
    if api not in ("vendor", "native"):
        raise ValueError(f"api must be 'vendor' or 'native', not {api!r}")
    chosen = list(kinds) if kinds is not None else (
        ["CacheKey", "CacheKeyByIdAndIndex", "BlocksCacheKey"] if api == "vendor" else ["CacheIndex"])
    allowed = ("CacheIndex",) if api == "native" else ("CacheKey", "CacheKeyByIdAndIndex", "BlocksCacheKey")
    if not chosen or any(k not in allowed for k in chosen):
        raise ValueError(f"kinds for api={api!r} must be some of {allowed}")
    if validity == "invalid" and chosen == ["BlocksCacheKey"]:
        raise ValueError("BlocksCacheKey has no invalid kind")
    cluster = _ints(cluster_id, st.integers(0, 2**64 - 1))
    ids = _ints(cache_id, st.integers(1, 2**63 - 1))
    models = _ints(model_id, st.integers(0, 2**64 - 1))
    good_id = st.integers(0, U64_INVALID_ID - 1)
    good_batch = st.integers(0, num_batches - 1) if num_batches > 0 else st.nothing()
    bad_batch = st.integers(max(num_batches, 0), max(num_batches, 0) + 3)

    def by_index(batches: "st.SearchStrategy[int]") -> "st.SearchStrategy[Any]":
        make = native.CacheIndex if api == "native" else CacheKeyByIdAndIndex
        return st.builds(make, cluster, ids, batches)

    def cache_key(req: "st.SearchStrategy[int]", prefix: "st.SearchStrategy[int]") -> "st.SearchStrategy[Any]":
        return st.builds(lambda c, r, m, p: CacheKey(c, r, m, p), cluster, req, models, prefix)

    valid: list[st.SearchStrategy[Any]] = []
    invalid: list[st.SearchStrategy[Any]] = []
    for kind in chosen:
        if kind == "CacheKey":
            valid += [cache_key(good_id, st.just(U64_INVALID_ID)), cache_key(st.just(U64_INVALID_ID), good_id)]
            invalid += [cache_key(st.just(U64_INVALID_ID), st.just(U64_INVALID_ID)), cache_key(good_id, good_id)]
        elif kind == "BlocksCacheKey":
            valid.append(st.builds(lambda c, m: BlocksCacheKey(c, m), cluster, models))
        else:
            valid.append(by_index(good_batch))
            invalid.append(by_index(bad_batch))
    return _by_validity(validity, st.one_of(valid), st.one_of(invalid) if invalid else st.nothing())
