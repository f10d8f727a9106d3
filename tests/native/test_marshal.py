"""The conversions both Python tiers share (``_cints``, ``_marshal``): the C values they
write, read back field by field through cffi, and the errors they raise, each against
values written out here. The last section holds each tier's words for the same flaw,
which the shared conversions must leave as they were.
"""
from __future__ import annotations

import array
import enum
from typing import Any, Callable

import numpy as np
import pytest

from llm_datadist_ffi import lint, native
from llm_datadist_ffi._core._capi import ffi
from llm_datadist_ffi._core._cints import (
    INT32, INT64, UINT16, UINT32, UINT64, first_outside, int_converter, plain_ints,
)
from llm_datadist_ffi._core._marshal import (
    block_pointer, blocks_converter, c_array, c_cache_desc, c_clusters, c_options, lint_repeated_blocks, u64_block_array,
    u64_block_list,
)
from llm_datadist_ffi._vendor._vendor_checks import check_int
from llm_datadist_ffi._vendor import _native as vendor_native

from lint_support import lenient


class Refused(Exception):
    """What the factories below raise: the arguments the conversion gave them."""


def refuse(*args: Any) -> Refused:
    return Refused(*args)


class Colour(enum.IntEnum):
    RED = 1


def address(pointer: Any) -> int:
    return int(ffi.cast("uintptr_t", pointer))


# ---- C integer types -----------------------------------------------------------------------

def test_the_c_integer_types_have_the_bounds_of_their_c_types() -> None:
    assert UINT16 == ("uint16", 0, 65535)
    assert UINT32 == ("uint32", 0, 4294967295)
    assert UINT64 == ("uint64", 0, 18446744073709551615)
    assert INT32 == ("int32", -2147483648, 2147483647)
    assert INT64 == ("int64", -9223372036854775808, 9223372036854775807)


def test_a_converter_returns_a_plain_int_for_each_value_within_the_bounds() -> None:
    convert = int_converter((int, np.integer), refuse, refuse)
    for value, expected in ((0, 0), (65535, 65535), (True, 1), (Colour.RED, 1), (np.uint8(7), 7)):
        number = convert(value, "x", UINT16)
        assert number == expected and type(number) is int


def test_a_converter_refuses_one_past_each_bound_with_the_outside_factory() -> None:
    convert = int_converter(int, lambda *a: Refused("type", *a), lambda *a: Refused("outside", *a))
    for value, c_type in ((-1, UINT32), (2**32, UINT32), (-(2**31) - 1, INT32), (2**31, INT32)):
        with pytest.raises(Refused) as raised:
            convert(value, "batch_index", c_type)
        assert raised.value.args == ("outside", "batch_index", value, c_type)


def test_a_converter_refuses_a_type_it_was_not_given_with_the_type_factory() -> None:
    convert = int_converter(int, lambda *a: Refused("type", *a), lambda *a: Refused("outside", *a))
    for value in (None, 1.0, "1", np.int64(1)):
        with pytest.raises(Refused) as raised:
            convert(value, "size", INT64)
        assert raised.value.args == ("type", "size", value, INT64)


def test_first_outside_names_the_position_and_value_of_the_first_value_a_type_cannot_hold() -> None:
    assert first_outside([0, 5, 2**64 - 1], UINT64) is None
    assert first_outside([], UINT64) is None
    assert first_outside([3, -1, 2**64], UINT64) == (1, -1)
    assert first_outside((1, 2, 2**64, -5), UINT64) == (2, 2**64)
    assert first_outside([np.int64(-2)], UINT32) == (0, -2)


def test_plain_ints_are_exactly_ints_and_bools_in_short_and_long_lists() -> None:
    assert plain_ints([]) and plain_ints([1, True, 3]) and plain_ints(list(range(100)) + [False])
    assert not plain_ints([1, Colour.RED]) and not plain_ints([np.int64(1)]) and not plain_ints([1, 2.0])
    assert not plain_ints(list(range(100)) + [Colour.RED]) and not plain_ints(tuple(range(9)) + (None,))


# ---- arrays, options, descriptions, clusters ------------------------------------------------

def test_an_int_array_has_the_c_type_of_its_width_and_the_values_given() -> None:
    values = c_array(UINT64, [0, 7, 2**64 - 1])
    assert ffi.typeof(values) is ffi.typeof("uint64_t[]") and list(values) == [0, 7, 2**64 - 1]
    ranks = c_array(UINT32, (4, 2))
    assert ffi.typeof(ranks) is ffi.typeof("uint32_t[]") and list(ranks) == [4, 2]
    assert list(c_array(INT64, [-(2**63), 5])) == [-(2**63), 5]


def test_an_empty_int_array_is_null() -> None:
    assert c_array(UINT64, []) == ffi.NULL and c_array(INT64, ()) == ffi.NULL


def test_options_become_key_value_pairs_in_the_maps_order() -> None:
    array_, count, keep = c_options({"llm.DeviceId": "0", "llm.ListenIpInfo": "127.0.0.1:26000"}, "options", refuse)
    assert count == 2 and len(keep) == 4
    pairs = [(ffi.string(array_[i].key), ffi.string(array_[i].value)) for i in range(count)]
    assert pairs == [(b"llm.DeviceId", b"0"), (b"llm.ListenIpInfo", b"127.0.0.1:26000")]


def test_an_empty_option_map_is_a_count_of_zero_over_a_real_array() -> None:
    array_, count, keep = c_options({}, "options", refuse)
    assert count == 0 and keep == [] and array_ != ffi.NULL


def test_an_option_that_is_not_a_str_is_refused_with_the_callers_factory() -> None:
    with pytest.raises(Refused) as raised:
        c_options({"llm.DeviceId": "0", "llm.Role": 1}, "switch_options", refuse)
    assert raised.value.args == ("switch_options", "llm.Role", 1)
    with pytest.raises(Refused) as raised:
        c_options({2: "x"}, "options", refuse)
    assert raised.value.args == ("options", 2, "x")


def test_a_cache_description_carries_every_field_and_its_shape() -> None:
    desc, keep = c_cache_desc(1, 4, 27, [16, -1, 2**63 - 1])
    assert (desc.placement, desc.num_tensors, desc.data_type, desc.shape_len) == (1, 4, 27, 3)
    assert [desc.shape[i] for i in range(3)] == [16, -1, 2**63 - 1]
    assert keep == [desc.shape]


def test_a_cache_description_without_dims_has_a_null_shape() -> None:
    desc, _keep = c_cache_desc(0, 2, 4, ())
    assert desc.shape == ffi.NULL and desc.shape_len == 0 and desc.num_tensors == 2


def test_clusters_carry_their_ids_role_types_and_endpoints() -> None:
    entries = [(7, 2, [(b"10.0.0.1", 0)], [(b"10.0.0.2", 26000), (b"10.0.0.3", 65535)]),
               (2**64 - 1, 0, [], [(b"127.0.0.1", 1)])]
    clusters, count, _keep = c_clusters(entries)
    assert count == 2
    first, second = clusters[0], clusters[1]
    assert (first.remote_cluster_id, first.remote_role_type) == (7, 2)
    assert (second.remote_cluster_id, second.remote_role_type) == (2**64 - 1, 0)

    def endpoints(infos: Any, n: int) -> list[tuple[bytes, int]]:
        return [(ffi.string(infos[i].ip), infos[i].port) for i in range(n)]

    assert endpoints(first.local_ip_infos, first.num_local_ip_infos) == [(b"10.0.0.1", 0)]
    assert endpoints(first.remote_ip_infos, first.num_remote_ip_infos) == [(b"10.0.0.2", 26000),
                                                                             (b"10.0.0.3", 65535)]
    assert second.num_local_ip_infos == 0 and second.local_ip_infos != ffi.NULL
    assert endpoints(second.remote_ip_infos, second.num_remote_ip_infos) == [(b"127.0.0.1", 1)]


def test_no_clusters_is_a_count_of_zero_over_a_real_array() -> None:
    clusters, count, keep = c_clusters([])
    assert count == 0 and keep == [] and clusters != ffi.NULL


# ---- block lists --------------------------------------------------------------------------------

class Recorder:
    """A tier's general path that records what reached it (and answers an empty list)."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, str]] = []

    def __call__(self, value: Any, name: str) -> Any:
        self.calls.append((value, name))
        return np.zeros(0, dtype=np.uint64)


def test_a_contiguous_uint64_array_reaches_c_without_a_copy_or_the_general_path() -> None:
    general = Recorder()
    blocks = np.array([5, 0, 9], dtype=np.uint64)
    pointer, count, kept = blocks_converter(general)(blocks, "dst_blocks")
    assert kept is blocks and count == 3 and address(pointer) == blocks.ctypes.data
    assert general.calls == []


def test_a_list_or_tuple_of_plain_ints_is_packed_without_the_general_path() -> None:
    general = Recorder()
    for value in ([3, 1, 2**64 - 1], (3, True, 0)):
        pointer, count, kept = blocks_converter(general)(value, "src_blocks")
        assert isinstance(kept, array.array) and kept.typecode == "Q"
        assert [pointer[i] for i in range(count)] == [int(v) for v in value]
    assert general.calls == []


def test_every_other_block_list_takes_the_callers_general_path_with_its_name() -> None:
    strided = np.arange(6, dtype=np.uint64)[::2]
    others: list[Any] = [[], (), [1, -1], [2**64], [Colour.RED], [np.int64(2)], np.array([1, 2], dtype=np.int32),
                         strided, np.zeros(0, dtype=np.uint64), np.array([[1]], dtype=np.uint64)]
    for value in others:
        general = Recorder()
        blocks_converter(general)(value, "blocks")
        assert len(general.calls) == 1
        assert general.calls[0][0] is value and general.calls[0][1] == "blocks"


def test_the_general_paths_answer_reaches_c_and_an_empty_one_is_null() -> None:
    pointer, count, kept = blocks_converter(lambda value, name: np.array([8, 6], dtype=np.uint64))([Colour.RED], "b")
    assert count == 2 and [pointer[0], pointer[1]] == [8, 6] and list(kept) == [8, 6]
    pointer, count, _kept = blocks_converter(lambda value, name: np.zeros(0, dtype=np.uint64))([], "b")
    assert pointer == ffi.NULL and count == 0


def test_a_block_pointer_points_into_the_array_it_keeps() -> None:
    packed = array.array("Q", [4, 2])
    pointer, count, kept = block_pointer(packed)
    assert kept is packed and count == 2 and address(pointer) == packed.buffer_info()[0]
    assert block_pointer(np.zeros(0, dtype=np.uint64))[:2] == (ffi.NULL, 0)


def test_a_uint64_array_is_kept_when_contiguous_and_copied_when_not() -> None:
    blocks = np.array([3, 4], dtype=np.uint64)
    assert u64_block_array(blocks, "b", refuse) is blocks
    strided = np.arange(6, dtype=np.uint64)[::2]
    copied = u64_block_array(strided, "b", refuse)
    assert copied.flags.c_contiguous and copied.dtype == np.uint64 and copied.tolist() == [0, 2, 4]


def test_other_integer_arrays_become_uint64_arrays_with_the_same_values() -> None:
    for dtype in (np.int8, np.int32, np.int64, np.uint8, np.uint32):
        converted = u64_block_array(np.array([0, 1, 100], dtype=dtype), "b", refuse)
        assert converted.dtype == np.uint64 and converted.flags.c_contiguous and converted.tolist() == [0, 1, 100]


def test_an_array_with_a_negative_value_is_refused_with_its_smallest_value() -> None:
    with pytest.raises(Refused) as raised:
        u64_block_array(np.array([4, -2, -7, 1], dtype=np.int16), "dst_blocks", refuse)
    assert raised.value.args == ("dst_blocks", None, -7)


def test_a_list_of_integers_of_any_kind_becomes_a_uint64_array() -> None:
    for values in ([1, Colour.RED, np.int64(5), np.uint64(2**64 - 1)], [Colour.RED] * 100, [3, True]):
        converted = u64_block_list(values, "b", refuse)
        assert np.asarray(converted, dtype=np.uint64).tolist() == [int(v) for v in values]


def test_a_list_is_refused_at_its_first_value_outside_uint64() -> None:
    for values, bad in (([1, -1, 2**64], (1, -1)), ([Colour.RED, 2**64, -3], (1, 2**64)),
                        ([0] * 99 + [Colour.RED, -4], (100, -4)), ([np.int64(-9)], (0, -9))):
        with pytest.raises(Refused) as raised:
            u64_block_list(values, "src_blocks", refuse)
        assert raised.value.args == ("src_blocks", *bad)


def test_a_repeated_block_warns_once_naming_the_smallest_repeat(monkeypatch: pytest.MonkeyPatch) -> None:
    lenient(monkeypatch)
    for blocks in (array.array("Q", [9, 4, 9, 4]), np.array([9, 4, 9, 4] + list(range(10, 400)), dtype=np.uint64)):
        with pytest.warns(lint.RepeatedDestinationBlockWarning) as warned:
            lint_repeated_blocks(blocks, "dst_blocks", "pull")
        assert len(warned) == 1
        assert str(warned[0].message).startswith("[pull] dst_blocks contains block 4 more than once (PR-5; ")


def test_distinct_blocks_do_not_warn(monkeypatch: pytest.MonkeyPatch) -> None:
    lenient(monkeypatch)
    for blocks in (array.array("Q", [3, 1, 2]), np.arange(500, dtype=np.uint64), array.array("Q")):
        lint_repeated_blocks(blocks, "dst_blocks", "pull")   # filterwarnings=error fails on a warning


# ---- each tier's words over the shared conversions ----------------------------------------------

def raised_by(call: Callable[[], Any]) -> tuple[type, str]:
    with pytest.raises(Exception) as raised:
        call()
    return type(raised.value), str(raised.value)


def test_each_tier_words_an_int_of_the_wrong_type_its_own_way() -> None:
    assert raised_by(lambda: native.CacheIndex(1, 2, None)._to_c("src")) == (  # type: ignore[arg-type]
        TypeError, "src.batch_index must be an int (uint32), not NoneType")
    assert raised_by(lambda: check_int(None, "batch_index", UINT32)) == (
        TypeError, "batch_index must be an int (uint32), not None")


def test_each_tier_words_an_int_outside_its_type_its_own_way() -> None:
    assert raised_by(lambda: native.CacheIndex(1, 2, 2**32)._to_c("src")) == (
        ValueError, "src.batch_index 4294967296 is outside uint32 [0, 4294967295]")
    assert raised_by(lambda: check_int(2**32, "batch_index", UINT32)) == (
        ValueError, "batch_index is 4294967296, outside the uint32 range [0, 4294967295]")


def test_each_tier_words_an_option_that_is_not_a_str_its_own_way() -> None:
    assert raised_by(lambda: native._options({"llm.DeviceId": 0}, "options")) == (  # type: ignore[dict-item]
        TypeError, "options keys and values must be str, got 'llm.DeviceId': 0")
    from llm_datadist_ffi._vendor.v2.llm_datadist import _option_not_str
    assert raised_by(lambda: c_options({"llm.DeviceId": 0}, "options", _option_not_str)) == (
        TypeError, "options keys and values must be str, got 'llm.DeviceId': 0 (str: int)")


def test_each_tier_words_a_block_outside_uint64_its_own_way() -> None:
    assert raised_by(lambda: native._blocks([1, -1], "dst_blocks")) == (
        ValueError, "dst_blocks holds -1; block indexes are uint64")
    assert raised_by(lambda: vendor_native.block_list([1, -1], "dst_blocks")) == (
        TypeError, "dst_blocks[1] is -1; block indexes are uint64 in [0, 18446744073709551615]")
    negative = np.array([2, -3], dtype=np.int64)
    assert raised_by(lambda: native._blocks(negative, "dst_blocks")) == (
        ValueError, "dst_blocks holds -3; block indexes are uint64")
    assert raised_by(lambda: vendor_native.block_list(negative, "dst_blocks")) == (
        TypeError, "dst_blocks holds -3; block indexes are uint64 (>= 0)")


def test_a_vendor_block_list_of_none_is_an_empty_one_and_null() -> None:
    blocks = vendor_native.block_list(None, "src_blocks")
    assert blocks.pointer == ffi.NULL and blocks.count == 0 and blocks.tolist() == []


def test_the_vendors_uint64_arrays_refuse_a_value_with_the_binding_words() -> None:
    assert raised_by(lambda: vendor_native.c_u64([5, 2**64], "addrs")) == (
        TypeError, "addrs[1] is 18446744073709551616; the core takes a uint64 in [0, 18446744073709551615]")
    assert list(vendor_native.c_u64([5, 2**64 - 1], "addrs")) == [5, 2**64 - 1]
    assert vendor_native.c_u64([], "addrs") == ffi.NULL
