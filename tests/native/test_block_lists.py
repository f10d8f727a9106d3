"""Block lists in both Python tiers: every container and integer kind the API takes
moves the blocks it names, and every rejected list fails with the error it failed with
before lists got a fast path (plain lists are checked in C-level passes; any other list
walks the element-by-element path that words the error).

The expected messages are written out here; the expected bytes come from numpy fancy
indexing of the source arrays; the oracles of the property tests are plain Python loops.
"""
from __future__ import annotations

import array
import collections
import enum
import re
from typing import Any, Callable, Iterator, Optional

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from llm_datadist_ffi import LLMException, LLMStatusCode, lint, native
from llm_datadist_ffi._core._blocklists import ints_to_u64, packed_u64, plain_u64, smallest_repeat
from llm_datadist_ffi._vendor._vendor_checks import UINT64, check_int_items
from llm_datadist_ffi.native import Cache, CacheIndex

import vendor_support as vs
from lint_support import lenient

U64_MAX = 2**64 - 1
BLOCKS, BLOCK_BYTES = 16, 8


class Block(enum.IntEnum):
    ONE = 1
    TWO = 2


# ---- the native tier: in-process pulls between two linked engines ---------------------------

class Pair:
    """Engine 1 (listening, source cache of 2 tensors x 16 blocks of random bytes) and
    engine 2 (linked to it, a zeroed destination cache of the same shape)."""

    def __init__(self, engines: Callable[..., native.LlmDataDist]) -> None:
        self.server = engines(1, listen=True)
        self.client = engines(2, options={}, device_id=1)
        rng = np.random.default_rng(5)
        self.src = [rng.integers(0, 256, (BLOCKS, BLOCK_BYTES), dtype=np.uint8) for _ in range(2)]
        self.dst = [np.zeros((BLOCKS, BLOCK_BYTES), np.uint8) for _ in range(2)]
        desc = native.CacheDesc(2, native.DataType.DT_UINT8, [BLOCKS, BLOCK_BYTES])
        self.src_id = self.server.register_kv_cache(desc, [a.ctypes.data for a in self.src])
        self.dst_id = self.client.register_kv_cache(desc, [a.ctypes.data for a in self.dst])
        cluster = native.ClusterInfo(1, 0, [native.IpInfo("127.0.0.1", 0)],
                                     [native.IpInfo("127.0.0.1", self.server.listen_port)])
        assert self.client.link_llm_clusters([cluster])[0] == LLMStatusCode.LLM_SUCCESS

    def pull(self, src_blocks: Any, dst_blocks: Any) -> None:
        self.client.pull_kv_blocks(CacheIndex(1, self.src_id), Cache(self.dst_id), src_blocks, dst_blocks)


@pytest.fixture
def linked(engines: Callable[..., native.LlmDataDist], monkeypatch: pytest.MonkeyPatch) -> Iterator[Pair]:
    lenient(monkeypatch)
    yield Pair(engines)


def _array(values: list[int], dtype: Any) -> np.ndarray:
    return np.array(values, dtype=dtype)


def _strided(values: list[int]) -> np.ndarray:
    """A view every other element of a larger array: not contiguous."""
    spread = np.zeros(2 * len(values), dtype=np.uint64)
    spread[::2] = values
    return spread[::2]


def _reversed(values: list[int]) -> np.ndarray:
    return np.array(values[::-1], dtype=np.int32)[::-1]


# (label, the container made from [3, 1, 0] as a source list and [2, 0, 1] as a destination)
CONTAINERS: list[tuple[str, Callable[[list[int]], Any]]] = [
    ("list", list),
    ("tuple", tuple),
    ("list with bools", lambda v: [bool(x) if x in (0, 1) else x for x in v]),
    ("list of IntEnum", lambda v: [Block(x) if x in (1, 2) else x for x in v]),
    ("list of numpy integers", lambda v: [np.int16(x) for x in v]),
    *[(f"numpy {np.dtype(t).name}", lambda v, t=t: _array(v, t))
      for t in (np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64)],
    ("numpy big-endian uint64", lambda v: _array(v, ">u8")),
    ("numpy non-contiguous uint64", _strided),
    ("numpy negative stride int32", _reversed),
]


@pytest.mark.parametrize("make", [c[1] for c in CONTAINERS], ids=[c[0] for c in CONTAINERS])
def test_every_accepted_block_list_kind_moves_the_blocks_it_names(linked: Pair, make: Callable[[list[int]], Any]) -> None:
    linked.pull(make([3, 1, 0]), make([2, 0, 1]))
    for src, dst in zip(linked.src, linked.dst):
        expected = np.zeros_like(dst)
        expected[[2, 0, 1]] = src[[3, 1, 0]]
        assert (dst == expected).all()


NATIVE_REJECTIONS: list[tuple[str, Any, type, str]] = [
    ("a float", [0, 2.0], TypeError, "dst_blocks[1] must be an int, not float"),
    ("None", [0, None], TypeError, "dst_blocks[1] must be an int, not NoneType"),
    ("a string", ["0", 1], TypeError, "dst_blocks[0] must be an int, not str"),
    ("a numpy float", [0, np.float64(1)], TypeError, "dst_blocks[1] must be an int, not float64"),
    ("a negative int", [0, -1], ValueError, "dst_blocks holds -1; block indexes are uint64"),
    ("an int past uint64", [0, 2**64], ValueError, "dst_blocks holds 18446744073709551616; block indexes are uint64"),
    ("the first bad value decides (past uint64)", [2**64, -1], ValueError,
     "dst_blocks holds 18446744073709551616; block indexes are uint64"),
    ("the first bad value decides (negative)", (-5, 2**70), ValueError, "dst_blocks holds -5; block indexes are uint64"),
    ("a negative numpy integer in a list", [np.int64(1), np.int64(-2)], ValueError,
     "dst_blocks holds -2; block indexes are uint64"),
    ("a negative IntEnum", [0, enum.IntEnum("Neg", {"M": -3}).M], ValueError,
     "dst_blocks holds -3; block indexes are uint64"),
    ("a negative numpy element", np.array([0, -3, -7], dtype=np.int64), ValueError,
     "dst_blocks holds -7; block indexes are uint64"),
    ("a float array", np.array([0.0, 1.0]), TypeError, "dst_blocks must hold integers, got dtype float64"),
    ("a bool array", np.array([True, False]), TypeError, "dst_blocks must hold integers, got dtype bool"),
    ("a 2-D array", np.zeros((1, 2), np.uint64), TypeError,
     "dst_blocks must be one-dimensional, got an array of shape (1, 2)"),
    ("a set", {0, 1}, TypeError, "dst_blocks must be a list, tuple or 1-D integer numpy array, not set"),
    # long lists take the packed path first
    ("a float in a long list", [*range(100), 2.0], TypeError, "dst_blocks[100] must be an int, not float"),
    ("a negative int in a long list", [*range(100), -1], ValueError, "dst_blocks holds -1; block indexes are uint64"),
    ("an int past uint64 in a long tuple", (*range(100), 2**64, -1), ValueError,
     "dst_blocks holds 18446744073709551616; block indexes are uint64"),
]


@pytest.mark.parametrize("value,exc_type,message", [c[1:] for c in NATIVE_REJECTIONS],
                         ids=[c[0] for c in NATIVE_REJECTIONS])
def test_native_block_lists_are_rejected_with_the_documented_error(linked: Pair, value: Any, exc_type: type,
                                                                   message: str) -> None:
    with pytest.raises(exc_type, match=f"^{re.escape(message)}$"):
        linked.pull([0, 1] if len(value) == 2 else [0, 1, 2], value)
    assert all((dst == 0).all() for dst in linked.dst)


def test_the_largest_uint64_passes_python_and_the_backend_refuses_it_as_out_of_range(linked: Pair) -> None:
    for value in ([0, U64_MAX], np.array([0, U64_MAX], dtype=np.uint64)):
        with pytest.raises(LLMException, match=r"dst_blocks\[1\] = 18446744073709551615 is out of range") as info:
            linked.pull([0, 1], value)
        assert info.value.status_code == LLMStatusCode.LLM_PARAM_INVALID


def test_a_repeated_destination_block_warns_with_the_smallest_repeated_block(linked: Pair) -> None:
    src_blocks, dst_blocks = [0, 1, 2, 3, 4, 5], [9, 5, 3, 9, 3, 1]
    with pytest.warns(lint.RepeatedDestinationBlockWarning, match="dst_blocks contains block 3 more than once"):
        linked.pull(src_blocks, dst_blocks)
    for src, dst in zip(linked.src, linked.dst):
        expected = np.zeros_like(dst)
        for s, d in zip(src_blocks, dst_blocks):      # in list order: the last write wins
            expected[d] = src[s]
        assert (dst == expected).all()


def test_repeats_among_huge_scattered_blocks_are_found_too(linked: Pair) -> None:
    dst_blocks = np.array([2**63, 6, 2**40, 2**63, 6], dtype=np.uint64)
    with pytest.warns(lint.RepeatedDestinationBlockWarning, match="dst_blocks contains block 6 more than once"):
        with pytest.raises(LLMException, match="out of range") as info:
            linked.pull([0, 1, 2, 3, 4], dst_blocks)
    assert info.value.status_code == LLMStatusCode.LLM_PARAM_INVALID


# ---- the vendor tier (v2 CacheManager): checks up to the core, which has no link ------------

pytest_v2 = pytest.mark.mock_only(reason="the vendor-compatible API needs the mock's extension functions")


@pytest.fixture
def blocks_cache(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Any, Any]]:
    from llm_datadist_ffi.vendor import CacheDesc, DataType, LLMDataDist, LLMRole

    lenient(monkeypatch)
    engine = LLMDataDist(LLMRole.DECODER, 2)
    engine.init(vs.v2_options(pool=True, host_pool=True))
    arrays = [np.zeros((BLOCKS, BLOCK_BYTES), np.uint8) for _ in range(2)]
    cache = engine.cache_manager.register_blocks_cache(CacheDesc(2, [BLOCKS, BLOCK_BYTES], DataType.DT_UINT8),
                                                       [a.ctypes.data for a in arrays])
    try:
        yield engine.cache_manager, cache
    finally:
        engine.finalize()


def _pull_v2(blocks_cache: tuple[Any, Any], src_blocks: Any, dst_blocks: Any) -> None:
    from llm_datadist_ffi.vendor import BlocksCacheKey

    manager, cache = blocks_cache
    manager.pull_blocks(BlocksCacheKey(1), cache, src_blocks, dst_blocks)


V2_ACCEPTED = [c for c in CONTAINERS if c[0] != "list of numpy integers"]


@pytest_v2
@pytest.mark.parametrize("make", [c[1] for c in V2_ACCEPTED], ids=[c[0] for c in V2_ACCEPTED])
def test_every_accepted_v2_block_list_kind_reaches_the_core(blocks_cache: tuple[Any, Any],
                                                            make: Callable[[list[int]], Any]) -> None:
    with pytest.raises(LLMException) as info:
        _pull_v2(blocks_cache, make([3, 1, 0]), make([2, 0, 1]))
    assert info.value.status_code == LLMStatusCode.LLM_NOT_YET_LINK


V2_REJECTIONS: list[tuple[str, Any, str]] = [
    ("a float", [0, 2.0], "dst_blocks[1] must be int, not float"),
    ("None", [0, None], "dst_blocks[1] must be int, not None"),
    ("a numpy integer in a list", [0, np.int64(1)], "dst_blocks[1] must be int, not int64"),
    ("a negative int", [0, -1], f"dst_blocks[1] is -1; block indexes are uint64 in [0, {U64_MAX}]"),
    ("an int past uint64", [0, 2**64], f"dst_blocks[1] is {2**64}; block indexes are uint64 in [0, {U64_MAX}]"),
    ("the first bad value decides", (2**64, -1), f"dst_blocks[0] is {2**64}; block indexes are uint64 in [0, {U64_MAX}]"),
    ("a negative numpy element", np.array([0, -3, -7], dtype=np.int16), "dst_blocks holds -7; block indexes are uint64 (>= 0)"),
    ("a float array", np.array([0.0, 1.0]), "dst_blocks must be list | tuple of int or a one-dimensional integer numpy "
     "array, not a numpy array of shape (2,) and dtype float64"),
    ("a float in a long list", [*range(100), 2.0], "dst_blocks[100] must be int, not float"),
    ("a negative int in a long list", [*range(100), -1], f"dst_blocks[100] is -1; block indexes are uint64 in [0, {U64_MAX}]"),
    ("an int past uint64 in a long tuple", (*range(100), 2**64, -1),
     f"dst_blocks[100] is {2**64}; block indexes are uint64 in [0, {U64_MAX}]"),
]


@pytest_v2
@pytest.mark.parametrize("value,message", [c[1:] for c in V2_REJECTIONS], ids=[c[0] for c in V2_REJECTIONS])
def test_v2_block_lists_are_rejected_with_the_documented_type_error(blocks_cache: tuple[Any, Any], value: Any,
                                                                    message: str) -> None:
    with pytest.raises(TypeError, match=f"^{re.escape(message)}$"):
        _pull_v2(blocks_cache, [0, 1] if len(value) == 2 else [0, 1, 2], value)


@pytest_v2
def test_a_repeated_v2_destination_block_warns_with_the_smallest_repeated_block(
        blocks_cache: tuple[Any, Any]) -> None:
    with pytest.warns(lint.RepeatedDestinationBlockWarning, match="dst_blocks contains block 2 more than once"):
        with pytest.raises(LLMException) as info:
            _pull_v2(blocks_cache, [0, 1, 2, 3, 4], [7, 2, 5, 7, 2])
    assert info.value.status_code == LLMStatusCode.LLM_NOT_YET_LINK


# ---- transfer_cache_async's index lists: the vendor's range check of every element ----------

@pytest.mark.parametrize("values,exc_type,message", [
    ([0, -1], ValueError, f"dst_block_indices[1] is -1, outside the uint64 range [0, {U64_MAX}]"),
    ((5, 2**64), ValueError, f"dst_block_indices[1] is {2**64}, outside the uint64 range [0, {U64_MAX}]"),
    ([0, None, -1], TypeError, "dst_block_indices[1] must be an int (uint64), not None"),
    ([2**64, 1.5], ValueError, f"dst_block_indices[0] is {2**64}, outside the uint64 range [0, {U64_MAX}]"),
    ([1, Block.TWO, -4], ValueError, f"dst_block_indices[2] is -4, outside the uint64 range [0, {U64_MAX}]"),
    ([*range(100), 2**64], ValueError, f"dst_block_indices[100] is {2**64}, outside the uint64 range [0, {U64_MAX}]"),
])
def test_index_lists_fail_on_their_first_bad_element(values: Any, exc_type: type, message: str) -> None:
    with pytest.raises(exc_type, match=f"^{re.escape(message)}$"):
        check_int_items(values, "dst_block_indices", UINT64)


@pytest.mark.parametrize("values", [None, [], (), [0, True, U64_MAX], [Block.ONE, 7]])
def test_index_lists_within_uint64_pass(values: Any) -> None:
    check_int_items(values, "dst_block_indices", UINT64)


# ---- the fast paths against plain Python loops ------------------------------------------------

ELEMENTS = st.one_of(st.integers(-3, 40), st.integers(-2**70, 2**70), st.booleans(), st.just(U64_MAX),
                     st.just(2**64), st.sampled_from([1.0, None, Block.TWO, np.int64(4)]))


@given(st.lists(ELEMENTS, max_size=200))
def test_plain_u64_converts_exactly_the_plain_in_range_lists(values: list[Any]) -> None:
    plain = all(type(v) in (int, bool) for v in values)
    in_range = plain and all(0 <= v <= U64_MAX for v in values)
    got = plain_u64(values)
    if not in_range:
        assert got is None
        return
    assert got is not None and got.dtype == np.uint64 and got.flags.c_contiguous
    assert [int(v) for v in got] == [int(v) for v in values]


@given(st.lists(ELEMENTS, max_size=200), st.sampled_from([list, tuple]))
def test_packed_u64_packs_exactly_the_non_empty_plain_in_range_lists(values: list[Any], container: Any) -> None:
    plain = all(type(v) in (int, bool) for v in values)
    in_range = plain and all(0 <= v <= U64_MAX for v in values)
    got = packed_u64(container(values))
    if not (values and in_range):
        assert got is None
        return
    assert got is not None and got.typecode == "Q" and got.itemsize == 8
    assert list(got) == [int(v) for v in values]


@given(st.lists(ELEMENTS, max_size=200))
def test_ints_to_u64_converts_every_list_of_ints_in_range_and_nothing_else(values: list[Any]) -> None:
    ints = all(isinstance(v, (int, np.integer)) for v in values)
    in_range = ints and all(0 <= v <= U64_MAX for v in values)
    got = ints_to_u64(values)
    if got is None:
        assert not (in_range and all(type(v) in (int, bool) for v in values))
        return
    assert in_range and got.dtype == np.uint64 and got.flags.c_contiguous
    assert [int(v) for v in got] == [int(v) for v in values]


def _oracle_repeat(values: list[int]) -> Optional[int]:
    counts = collections.Counter(values)
    repeated = [v for v, n in counts.items() if n > 1]
    return min(repeated) if repeated else None


# dense tables of small or larger indexes, scattered huge indexes, and huge ones that repeat
BLOCK_VALUES = st.sampled_from([st.integers(0, 50), st.integers(0, 5000), st.integers(0, U64_MAX),
                                st.integers(0, 40).map(lambda k: 2**63 + k * 2**40)])


@given(BLOCK_VALUES.flatmap(lambda values: st.lists(values, max_size=300)), st.booleans(),
       st.sampled_from([np.uint64, np.int64]))
def test_smallest_repeat_finds_the_smallest_value_listed_twice(values: list[int], ascending: bool, dtype: Any) -> None:
    if dtype is np.int64:
        values = [v % 2**63 for v in values]
    if ascending:
        values = sorted(values)
    assert smallest_repeat(np.array(values, dtype=dtype)) == _oracle_repeat(values)


@pytest.mark.parametrize("label,values,expected", [
    ("short", [9, 4, 9, 4], 4),
    ("ascending, long", list(range(1000)), None),
    ("ascending with a repeat", [*range(500), 499, *range(500, 600)], 499),
    ("dense, long", [*range(999, -1, -1), 700, 3], 3),
    ("dense without repeats", list(range(999, -1, -1)), None),
    ("huge and scattered", [2**64 - 1 - 7 * k for k in range(200)] + [2**64 - 1, 2**64 - 8, 2**63], 2**64 - 8),
    ("huge without repeats", [2**64 - 1 - 7 * k for k in range(200)], None),
])
def test_smallest_repeat_of_every_kind_of_table(label: str, values: list[int], expected: Optional[int]) -> None:
    assert smallest_repeat(np.array(values, dtype=np.uint64)) == expected


# ---- the native tier's lists of ints: packed at once, against the general (numpy) path --------

class ListSubclass(list):  # type: ignore[type-arg]
    """A list that is not exactly a ``list``: ``_blocks`` sends it down the general path."""


def _blocks_outcome(value: Any) -> tuple[Any, ...]:
    """What ``_blocks`` makes of ``value``: the values C would read, or the error."""
    try:
        pointer, count, _kept = native._blocks(value, "dst_blocks")
    except (TypeError, ValueError) as exc:
        return (type(exc), str(exc))
    return ("ok", [int(pointer[i]) for i in range(count)])


MIXED_ELEMENTS = st.one_of(st.integers(0, 40), st.integers(-2**70, 2**70), st.booleans(), st.just(U64_MAX),
                           st.just(2**64), st.sampled_from([2.0, None, "1", Block.TWO, np.int64(4), np.uint8(3)]))
# lists of plain ints on both sides of the short-list length, and lists of anything
BLOCK_LISTS = st.one_of(st.lists(st.integers(-3, 2**64 + 3), max_size=80),
                        st.lists(st.integers(0, 300), min_size=60, max_size=80), st.lists(MIXED_ELEMENTS, max_size=80))


@given(BLOCK_LISTS, st.sampled_from([list, tuple]))
def test_a_list_gives_c_the_values_and_errors_of_the_general_path(values: list[Any], container: Any) -> None:
    fast = _blocks_outcome(container(values))
    assert fast == _blocks_outcome(ListSubclass(values))
    ints = all(isinstance(v, (int, np.integer)) for v in values)
    if ints and all(0 <= v <= U64_MAX for v in values):
        assert fast == ("ok", [int(v) for v in values])
    else:
        assert fast[0] in (TypeError, ValueError)


@given(BLOCK_VALUES.flatmap(lambda values: st.lists(values, max_size=300)))
def test_smallest_repeat_of_a_packed_list_is_that_of_the_array(values: list[int]) -> None:
    assert smallest_repeat(array.array("Q", values)) == _oracle_repeat(values)


def test_a_list_of_ints_is_packed_for_c_without_numpy() -> None:
    for values in ([5, 3], (5, 3), list(range(1000, 0, -1))):
        pointer, count, kept = native._blocks(values, "b")
        assert isinstance(kept, array.array) and count == len(values)
        assert [pointer[i] for i in range(count)] == list(values)


def test_an_empty_list_and_an_empty_array_reach_c_as_null() -> None:
    for value in ([], (), np.zeros(0, np.uint64)):
        pointer, count, _kept = native._blocks(value, "b")
        assert pointer == native.ffi.NULL and count == 0


def test_a_contiguous_uint64_array_crosses_without_a_copy() -> None:
    blocks = np.array([4, 9], dtype=np.uint64)
    pointer, count, kept = native._blocks(blocks, "b")
    assert kept is blocks and count == 2
    blocks[1] = 11                        # C reads the caller's array itself
    assert pointer[1] == 11


@pytest.mark.parametrize("make", [list, tuple, ListSubclass], ids=["list", "tuple", "list subclass"])
def test_a_repeat_in_a_destination_list_warns_whatever_its_container(linked: Pair, make: Callable[[list[int]], Any]) -> None:
    with pytest.warns(lint.RepeatedDestinationBlockWarning, match="dst_blocks contains block 4 more than once"):
        linked.pull(make([0, 1, 2]), make([7, 4, 4]))
    expected = [np.zeros_like(d) for d in linked.dst]
    for src, want in zip(linked.src, expected):
        want[7], want[4] = src[0], src[2]          # the last write to block 4 wins
    assert all((dst == want).all() for dst, want in zip(linked.dst, expected))
