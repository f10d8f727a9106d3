"""The vendor's types, row by row of docs/reference/python-api.md §2, §6–§9 and §13.

Expected values are written out from the spec, not taken from the package: status
codes as literals (``0x5010B005`` is LLM_PARAM_INVALID), sizes and ids as numbers.
Where a call breaks two rules, the test shows that the rule checked first by the
vendor decides (docs/reference/python-api.md: "Checks, in order").
"""
from __future__ import annotations

import ctypes
import gc
import inspect
import re
from enum import Enum, IntEnum
from typing import Any, Callable, List, Optional

import numpy as np
import pytest

from llm_datadist_ffi.data_type import DataType
from llm_datadist_ffi.status import LLMException, LLMStatusCode
from llm_datadist_ffi._vendor.v1.tensor import Tensor, TensorDesc
from llm_datadist_ffi._vendor.v2 import llm_types
from llm_datadist_ffi._vendor.v2.cache_manager import CacheManager
from llm_datadist_ffi._vendor.v1.cache_manager import KvCacheManager
from llm_datadist_ffi._vendor.v2.llm_types import (
    BlocksCacheKey, Cache, CacheDesc, CacheKey, CacheKeyByIdAndIndex, CoreCacheDesc, CoreKey, KvCache,
    LayerSynchronizer, MemInfo, Memtype, Placement, PushType, RegisterMemStatus, TransferConfig,
    TransferWithCacheKeyConfig, check_cache_key, core_cache_desc, core_key,
)
from llm_datadist_ffi._vendor._vendor_checks import check_layer_range

PARAM_INVALID = 0x5010B005
U64_MAX = 18446744073709551615  # 2**64 - 1, the vendor's "no id"


def raises_lx(call: Callable[[], Any], match: Optional[str] = None) -> LLMException:
    """``call()`` raises LLMException with LLM_PARAM_INVALID (and no builtin type)."""
    with pytest.raises(LLMException, match=match) as info:
        call()
    assert info.value.status_code == PARAM_INVALID
    assert info.value.status_code is LLMStatusCode.LLM_PARAM_INVALID
    assert not isinstance(info.value, (TypeError, ValueError, AttributeError))
    return info.value


def raises(exc_type: type, call: Callable[[], Any], match: Optional[str] = None) -> BaseException:
    """``call()`` raises exactly the builtin ``exc_type`` family, never an LLMException."""
    with pytest.raises(exc_type, match=match) as info:
        call()
    assert not isinstance(info.value, LLMException)
    if exc_type is RuntimeError:
        assert type(info.value) is RuntimeError
    return info.value


def desc(**overrides: Any) -> CacheDesc:
    args: dict[str, Any] = {"num_tensors": 2, "shape": [4, 16], "data_type": DataType.DT_FLOAT16}
    args.update(overrides)
    return CacheDesc(**args)


# ---------------------------------------------------------------------------
# python-api.md §2 enums
# ---------------------------------------------------------------------------


def test_placement_is_an_int_enum_with_host_0_and_device_1() -> None:
    assert issubclass(Placement, IntEnum)
    assert [(m.name, m.value) for m in Placement] == [("HOST", 0), ("DEVICE", 1)]
    assert Placement.DEVICE == 1 and Placement.HOST == 0


def test_placement_str_and_format_give_the_qualified_name() -> None:
    assert str(Placement.DEVICE) == "Placement.DEVICE"
    assert f"{Placement.HOST}" == "Placement.HOST"


def test_memtype_is_a_plain_enum_whose_members_are_not_ints() -> None:
    assert issubclass(Memtype, Enum) and not issubclass(Memtype, int)
    assert [(m.name, m.value) for m in Memtype] == [("MEM_TYPE_DEVICE", 0), ("MEM_TYPE_HOST", 1)]
    assert Memtype.MEM_TYPE_DEVICE != 0
    assert str(Memtype.MEM_TYPE_HOST) == "Memtype.MEM_TYPE_HOST"


def test_register_mem_status_is_a_plain_enum_ok_preparing_failed() -> None:
    assert not issubclass(RegisterMemStatus, int)
    assert [(m.name, m.value) for m in RegisterMemStatus] == [("OK", 0), ("PREPARING", 1), ("FAILED", 2)]
    assert RegisterMemStatus.OK != 0


def test_push_type_is_a_plain_enum_of_three_destination_kinds() -> None:
    assert not issubclass(PushType, int)
    assert [(m.name, m.value) for m in PushType] == [
        ("NO_CACHE_KEY", 0), ("BLOCKS_CACHE_KEY", 1), ("CACHE_KEY_BY_ID", 2)]


def test_data_type_is_a_plain_enum_in_the_vendor_declaration_order() -> None:
    assert not issubclass(DataType, int)
    assert [(m.name, m.value) for m in DataType] == [
        ("DT_FLOAT", 0), ("DT_FLOAT16", 1), ("DT_BF16", 27), ("DT_INT8", 2), ("DT_INT16", 6),
        ("DT_UINT16", 7), ("DT_UINT8", 4), ("DT_INT32", 3), ("DT_INT64", 9), ("DT_UINT32", 8),
        ("DT_UINT64", 10), ("DT_BOOL", 12), ("DT_DOUBLE", 11), ("DT_STRING", 13)]
    assert (DataType.DT_FLOAT16 == 1) is False
    assert DataType.DT_FLOAT16.value == 1


# ---------------------------------------------------------------------------
# python-api.md §6 CacheDesc
# ---------------------------------------------------------------------------


def test_cache_desc_signature_matches_the_vendor() -> None:
    params = inspect.signature(CacheDesc).parameters
    assert list(params) == ["num_tensors", "shape", "data_type", "placement", "batch_dim_index",
                            "seq_len_dim_index", "kv_tensor_format"]
    assert params["placement"].default is Placement.DEVICE
    assert params["batch_dim_index"].default == 0
    assert params["seq_len_dim_index"].default == -1
    assert params["kv_tensor_format"].default is None
    for name in ("num_tensors", "shape", "data_type"):
        assert params[name].default is inspect.Parameter.empty


def test_cache_desc_accepts_positional_and_keyword_forms_alike() -> None:
    shape = [8, 128, 4, 64]
    a = CacheDesc(80, shape, DataType.DT_BF16, Placement.HOST, 0, 1, "ND")
    b = CacheDesc(num_tensors=80, shape=shape, data_type=DataType.DT_BF16, placement=Placement.HOST,
                  batch_dim_index=0, seq_len_dim_index=1, kv_tensor_format="ND")
    for d in (a, b):
        assert (d.num_tensors, d.shape, d.data_type, d.placement, d.batch_dim, d.seq_len_dim_index,
                d.kv_tensor_format) == (80, [8, 128, 4, 64], DataType.DT_BF16, Placement.HOST, 0, 1, "ND")


def test_cache_desc_defaults_are_device_batch_dim_0_no_seq_dim_no_format() -> None:
    d = CacheDesc(1, [2, 3], DataType.DT_INT8)
    assert d.placement is Placement.DEVICE
    assert d.batch_dim == 0
    assert d.seq_len_dim_index == -1
    assert d.kv_tensor_format is None


@pytest.mark.parametrize("value, exc", [
    ("2", TypeError), (None, TypeError), (2.0, TypeError), (-1, ValueError), (2**32, ValueError)])
def test_cache_desc_num_tensors_is_a_uint32(value: Any, exc: type) -> None:
    raises(exc, lambda: desc(num_tensors=value), "num_tensors")


def test_cache_desc_accepts_num_tensors_0_and_uint32_max() -> None:
    assert desc(num_tensors=0).num_tensors == 0
    assert desc(num_tensors=4294967295).num_tensors == 4294967295


def test_cache_desc_accepts_bool_where_an_int_is_expected() -> None:
    assert desc(num_tensors=True).num_tensors is True


@pytest.mark.parametrize("shape", ["abc", {1: 2}, [1, "2"], [1, 2.0], (1, None)])
def test_cache_desc_shape_must_be_a_list_or_tuple_of_int(shape: Any) -> None:
    raises(TypeError, lambda: desc(shape=shape), "shape")


def test_cache_desc_rejects_a_none_shape_with_type_error_naming_it() -> None:
    raises(TypeError, lambda: desc(shape=None), "shape")


def test_cache_desc_rejects_an_int_data_type() -> None:
    raises(TypeError, lambda: desc(data_type=1), "data_type")


def test_cache_desc_rejects_an_int_placement() -> None:
    raises(TypeError, lambda: desc(placement=1), "placement")


@pytest.mark.parametrize("value", ["0", 0.0])
def test_cache_desc_batch_dim_index_must_be_an_int(value: Any) -> None:
    raises(TypeError, lambda: desc(batch_dim_index=value), "batch_dim_index")


@pytest.mark.parametrize("value, exc", [
    ("1", TypeError), (None, TypeError), (2**31, ValueError), (-(2**31) - 1, ValueError)])
def test_cache_desc_seq_len_dim_index_is_an_int32(value: Any, exc: type) -> None:
    raises(exc, lambda: desc(seq_len_dim_index=value), "seq_len_dim_index")


def test_cache_desc_kv_tensor_format_must_be_a_str() -> None:
    raises(TypeError, lambda: desc(kv_tensor_format=1), "kv_tensor_format")


@pytest.mark.parametrize("batch_dim_index", [-1, 2, 5])
def test_cache_desc_batch_dim_index_outside_the_shape_is_param_invalid(batch_dim_index: int) -> None:
    raises_lx(lambda: desc(batch_dim_index=batch_dim_index), "batch_dim_index")


def test_cache_desc_with_an_empty_shape_fails_the_batch_dim_rule() -> None:
    raises_lx(lambda: desc(shape=[]), "batch_dim_index")


@pytest.mark.parametrize("seq", [-2, 2, 100])
def test_cache_desc_seq_len_dim_index_must_be_minus_1_or_inside_the_shape(seq: int) -> None:
    raises_lx(lambda: desc(seq_len_dim_index=seq), "seq_len_dim_index")


@pytest.mark.parametrize("seq", [-1, 0, 1])
def test_cache_desc_accepts_seq_len_dim_index_minus_1_or_a_dim(seq: int) -> None:
    assert desc(seq_len_dim_index=seq).seq_len_dim_index == seq


@pytest.mark.parametrize("dim", [2**63, -(2**63) - 1])
def test_cache_desc_dims_must_fit_int64(dim: int) -> None:
    raises(ValueError, lambda: desc(shape=[4, dim]), r"shape\[1\]")


def test_cache_desc_does_not_check_dims_are_positive() -> None:
    assert desc(shape=[0, -5]).shape == [0, -5]


def test_cache_desc_accepts_none_data_type_and_placement_like_the_vendor() -> None:
    d = desc(data_type=None, placement=None)
    assert d.data_type is None and d.placement is None


# Check order: each pair breaks two rules; the earlier one decides.

def test_cache_desc_checks_num_tensors_before_shape() -> None:
    raises(ValueError, lambda: desc(num_tensors=-1, shape="x"), "num_tensors")


def test_cache_desc_checks_shape_before_data_type() -> None:
    raises(TypeError, lambda: desc(shape="x", data_type=1), "shape")


def test_cache_desc_checks_data_type_before_placement() -> None:
    raises(TypeError, lambda: desc(data_type=1, placement=1), "data_type")


def test_cache_desc_checks_placement_before_batch_dim_index() -> None:
    raises(TypeError, lambda: desc(placement=1, batch_dim_index="0"), "placement")


def test_cache_desc_checks_batch_dim_index_type_before_seq_len_dim_index() -> None:
    raises(TypeError, lambda: desc(batch_dim_index="0", seq_len_dim_index=2**31), "batch_dim_index")


def test_cache_desc_checks_seq_len_dim_index_range_before_kv_tensor_format() -> None:
    raises(ValueError, lambda: desc(seq_len_dim_index=2**31, kv_tensor_format=1), "seq_len_dim_index")


def test_cache_desc_checks_kv_tensor_format_before_the_batch_dim_rule() -> None:
    raises(TypeError, lambda: desc(kv_tensor_format=1, batch_dim_index=9), "kv_tensor_format")


def test_cache_desc_checks_the_batch_dim_rule_before_the_seq_len_rule() -> None:
    raises_lx(lambda: desc(batch_dim_index=9, seq_len_dim_index=9), "batch_dim_index")


def test_cache_desc_checks_the_seq_len_rule_before_dim_ranges() -> None:
    raises_lx(lambda: desc(shape=[4, 2**63], seq_len_dim_index=5), "seq_len_dim_index")


def test_cache_desc_none_shape_fails_where_the_vendor_uses_it_after_the_type_checks() -> None:
    # The vendor's type check lets None through; len(None) fails at step 8.
    raises(ValueError, lambda: desc(shape=None, seq_len_dim_index=2**31), "seq_len_dim_index")


def test_cache_desc_none_batch_dim_index_fails_with_type_error_after_the_type_checks() -> None:
    raises(TypeError, lambda: desc(batch_dim_index=None), "batch_dim_index")
    raises(ValueError, lambda: desc(batch_dim_index=None, seq_len_dim_index=-(2**31) - 1), "seq_len_dim_index")


def test_cache_desc_shape_is_the_very_object_passed_in() -> None:
    shape = [4, 16]
    assert desc(shape=shape).shape is shape
    shape_t = (4, 16)
    assert desc(shape=shape_t).shape is shape_t


def test_cache_desc_batch_size_is_the_batch_dim_captured_at_construction() -> None:
    d = desc(shape=[4, 16, 8], batch_dim_index=1)
    assert d.batch_dim == 1
    assert d.batch_size == 16
    d.update_dim(1, 99)
    assert d.shape == [4, 99, 8]
    assert d.batch_size == 16


@pytest.mark.parametrize("data_type, element_bytes", [
    (DataType.DT_FLOAT, 4), (DataType.DT_FLOAT16, 2), (DataType.DT_INT8, 1), (DataType.DT_INT32, 4),
    (DataType.DT_UINT8, 1), (DataType.DT_INT16, 2), (DataType.DT_UINT16, 2), (DataType.DT_UINT32, 4),
    (DataType.DT_INT64, 8), (DataType.DT_UINT64, 8), (DataType.DT_DOUBLE, 8), (DataType.DT_BOOL, 1),
    (DataType.DT_STRING, 16), (DataType.DT_BF16, 2)])
def test_cache_desc_size_is_one_tensors_bytes(data_type: DataType, element_bytes: int) -> None:
    assert desc(shape=[3, 5, 7], data_type=data_type).size == 3 * 5 * 7 * element_bytes


def test_cache_desc_size_is_recomputed_after_update_dim() -> None:
    d = desc(shape=[4, 16])
    assert d.size == 128
    d.update_dim(0, 8)
    assert d.size == 256


@pytest.mark.parametrize("shape", [[4, 0], [4, -2], [2**62, 4]])
def test_cache_desc_size_that_cannot_be_computed_raises_llm_exception_carrying_success(shape: List[int]) -> None:
    d = desc(shape=shape, data_type=DataType.DT_FLOAT)
    with pytest.raises(LLMException) as info:
        d.size
    assert info.value.status_code == 0
    assert info.value.status_code is LLMStatusCode.LLM_SUCCESS
    assert isinstance(info.value, RuntimeError)


def test_cache_desc_size_of_a_none_data_type_raises_llm_exception_carrying_success() -> None:
    with pytest.raises(LLMException) as info:
        desc(data_type=None).size
    assert info.value.status_code == 0


def test_cache_desc_update_dim_on_a_tuple_shape_raises_type_error() -> None:
    d = desc(shape=(4, 16))
    raises(TypeError, lambda: d.update_dim(0, 8))


def test_cache_desc_update_dim_does_not_check_the_value() -> None:
    d = desc(shape=[4, 16])
    d.update_dim(1, -3)
    assert d.shape == [4, -3]


def test_cache_desc_repr_lists_every_field() -> None:
    text = repr(CacheDesc(2, [4, 16], DataType.DT_FLOAT16, Placement.HOST, 0, 1, "ND"))
    for part in ("num_tensors=2", "shape=[4, 16]", "DT_FLOAT16", "Placement.HOST", "batch_dim_index=0",
                 "seq_len_dim_index=1", "kv_tensor_format='ND'"):
        assert part in text


def test_core_cache_desc_is_the_tuple_the_core_receives() -> None:
    d = CacheDesc(4, [8, 2, 16], DataType.DT_BF16, Placement.HOST, 0, 1, "ND")
    core = core_cache_desc(d, is_blocks=True)
    assert core == (4, 27, 1, (8, 2, 16), 0, True)
    assert isinstance(core, CoreCacheDesc)
    assert core_cache_desc(d, is_blocks=False).is_blocks is False


def test_core_cache_desc_does_not_mark_the_callers_descriptor_as_blocks() -> None:
    d = desc()
    core_cache_desc(d, is_blocks=True)
    assert core_cache_desc(d, is_blocks=False) == (2, 1, -1, (4, 16), 1, False)


def test_core_cache_desc_of_a_none_data_type_raises_attribute_error_naming_it() -> None:
    raises(AttributeError, lambda: core_cache_desc(desc(data_type=None), False), "data_type")


def test_core_cache_desc_of_a_none_placement_raises_attribute_error_naming_it() -> None:
    raises(AttributeError, lambda: core_cache_desc(desc(placement=None), False), "placement")


# ---------------------------------------------------------------------------
# python-api.md §7.1 CacheKey
# ---------------------------------------------------------------------------


def test_cache_key_takes_cluster_req_model_prefix_positionally() -> None:
    key = CacheKey(1, 2, 3, 4)
    assert (key.cluster_id, key.req_id, key.model_id, key.prefix_id) == (1, 2, 3, 4)


def test_cache_key_defaults_model_id_0_and_prefix_id_u64_max() -> None:
    key = CacheKey(1, 2)
    assert key.model_id == 0
    assert key.prefix_id == 18446744073709551615


def test_cache_key_accepts_every_keyword() -> None:
    key = CacheKey(cluster_id=5, req_id=6, model_id=7, prefix_id=8)
    assert (key.cluster_id, key.req_id, key.model_id, key.prefix_id) == (5, 6, 7, 8)


def test_cache_key_prompt_cluster_id_is_an_alias_of_cluster_id() -> None:
    key = CacheKey(prompt_cluster_id=9, req_id=1)
    assert key.cluster_id == 9
    assert key.prompt_cluster_id == 9


def test_cache_key_cluster_id_wins_over_prompt_cluster_id() -> None:
    key = CacheKey(prompt_cluster_id=9, cluster_id=3, req_id=1)
    assert key.cluster_id == 3 and key.prompt_cluster_id == 3


def test_cache_key_positional_argument_overrides_the_keyword_for_the_same_slot() -> None:
    key = CacheKey(1, 2, req_id=5)
    assert key.req_id == 2
    key = CacheKey(4, cluster_id=7, req_id=1)
    assert key.cluster_id == 4


def test_cache_key_prefix_key_still_passes_req_id() -> None:
    key = CacheKey(1, U64_MAX, prefix_id=10)
    assert key.req_id == U64_MAX and key.prefix_id == 10


@pytest.mark.parametrize("args, kwargs", [
    ((1, 2, 3, 4, 5), {}), ((1, 2, 3, 4), {"prefix_id": 5}), ((1,), {"req_id": 2, "model_id": 3, "prefix_id": 4,
                                                                     "prompt_cluster_id": 1})])
def test_cache_key_with_more_than_4_arguments_is_param_invalid(args: tuple, kwargs: dict) -> None:
    raises_lx(lambda: CacheKey(*args, **kwargs), "Param num is over limit")


def exactly(text: str) -> str:
    """A ``match`` pattern that accepts ``text`` and nothing else."""
    return "^" + re.escape(text) + "$"


def test_cache_key_without_a_cluster_id_is_param_invalid_with_the_vendor_text() -> None:
    raises_lx(lambda: CacheKey(req_id=1), exactly("Param prompt_cluster_id or cluster_id is required"))


def test_cache_key_without_req_id_is_param_invalid_with_the_vendor_text() -> None:
    raises_lx(lambda: CacheKey(1), exactly("Param req_id is required"))
    raises_lx(lambda: CacheKey(cluster_id=1, prefix_id=3), exactly("Param req_id is required"))


def test_cache_key_with_an_unknown_keyword_is_param_invalid_with_the_vendor_text() -> None:
    raises_lx(lambda: CacheKey(1, 2, batch_index=0), exactly("Unsupported param:batch_index"))


def test_cache_key_with_too_many_arguments_has_the_vendor_text() -> None:
    raises_lx(lambda: CacheKey(1, 2, 3, 4, 5), exactly("Param num is over limit"))


@pytest.mark.parametrize("kwargs, exc, text", [
    ({"cluster_id": "1"}, TypeError, "cluster_id only support ['int'], but got <class 'str'>."),
    ({"prompt_cluster_id": None}, TypeError, "cluster_id only support ['int'], but got <class 'NoneType'>."),
    ({"req_id": 1.0}, TypeError, "req_id only support ['int'], but got <class 'float'>."),
    ({"model_id": -1}, ValueError, "model_id's value is out of range,-1 is not a uint64 value."),
    ({"prefix_id": 2**64}, ValueError, "prefix_id's value is out of range,18446744073709551616 is not a uint64 "
                                       "value.")])
def test_cache_key_value_errors_have_the_vendor_texts(kwargs: dict, exc: type, text: str) -> None:
    args = {"req_id": 2, **kwargs}
    if "prompt_cluster_id" not in args:
        args.setdefault("cluster_id", 1)
    raises(exc, lambda: CacheKey(**args), exactly(text))


@pytest.mark.parametrize("slot", ["cluster_id", "req_id", "model_id", "prefix_id"])
@pytest.mark.parametrize("value, exc", [("1", TypeError), (None, TypeError), (1.0, TypeError),
                                        (-1, ValueError), (2**64, ValueError)])
def test_cache_key_ids_are_uint64(slot: str, value: Any, exc: type) -> None:
    kwargs = {"cluster_id": 1, "req_id": 2, slot: value}
    raises(exc, lambda: CacheKey(**kwargs), slot)


def test_cache_key_accepts_u64_max_and_bool_ids() -> None:
    key = CacheKey(U64_MAX, True, U64_MAX, 0)
    assert (key.cluster_id, key.req_id, key.model_id, key.prefix_id) == (U64_MAX, 1, U64_MAX, 0)


def test_cache_key_checks_argument_count_before_the_missing_cluster_id() -> None:
    raises_lx(lambda: CacheKey(req_id=1, model_id=2, prefix_id=3, a=4, b=5), "Param num is over limit")


def test_cache_key_checks_the_cluster_id_before_req_id() -> None:
    raises_lx(lambda: CacheKey(model_id=1), "cluster_id")


def test_cache_key_checks_req_id_before_unknown_keywords() -> None:
    raises_lx(lambda: CacheKey(1, foo=2), "req_id")


def test_cache_key_checks_unknown_keywords_before_value_types() -> None:
    raises_lx(lambda: CacheKey("x", 2, foo=3), "Unsupported param:foo")


def test_cache_key_checks_values_in_slot_order() -> None:
    raises(TypeError, lambda: CacheKey("x", -1), "cluster_id")
    raises(ValueError, lambda: CacheKey(-1, "x"), "cluster_id")
    raises(ValueError, lambda: CacheKey(1, 2**64, "x"), "req_id")
    raises(TypeError, lambda: CacheKey(1, 2, "x", -1), "model_id")


def test_cache_key_has_identity_semantics() -> None:
    assert CacheKey.__eq__ is object.__eq__
    assert CacheKey.__hash__ is object.__hash__
    assert CacheKey(1, 2) != CacheKey(1, 2)


def test_cache_key_repr_shows_the_fields() -> None:
    text = repr(CacheKey(1, 2, 3))
    for part in ("cluster_id=1", "req_id=2", "model_id=3", "prefix_id=18446744073709551615"):
        assert part in text


# ---------------------------------------------------------------------------
# python-api.md §7.2 CacheKeyByIdAndIndex
# ---------------------------------------------------------------------------


def test_cache_key_by_id_and_index_signature_defaults_batch_index_0() -> None:
    params = inspect.signature(CacheKeyByIdAndIndex).parameters
    assert list(params) == ["cluster_id", "cache_id", "batch_index"]
    assert params["batch_index"].default == 0
    key = CacheKeyByIdAndIndex(1, 2)
    assert (key.cluster_id, key.cache_id, key.batch_index) == (1, 2, 0)


@pytest.mark.parametrize("kwargs, name, exc", [
    ({"cluster_id": None}, "cluster_id", TypeError), ({"cluster_id": -1}, "cluster_id", ValueError),
    ({"cluster_id": 2**64}, "cluster_id", ValueError), ({"cache_id": "1"}, "cache_id", TypeError),
    ({"cache_id": 2**63}, "cache_id", ValueError), ({"cache_id": -(2**63) - 1}, "cache_id", ValueError),
    ({"batch_index": None}, "batch_index", TypeError), ({"batch_index": -1}, "batch_index", ValueError),
    ({"batch_index": 2**32}, "batch_index", ValueError)])
def test_cache_key_by_id_and_index_checks_uint64_int64_uint32(kwargs: dict, name: str, exc: type) -> None:
    args = {"cluster_id": 1, "cache_id": 2, "batch_index": 3, **kwargs}
    raises(exc, lambda: CacheKeyByIdAndIndex(**args), name)


def test_cache_key_by_id_and_index_accepts_the_range_ends() -> None:
    key = CacheKeyByIdAndIndex(U64_MAX, -(2**63), 4294967295)
    assert (key.cluster_id, key.cache_id, key.batch_index) == (U64_MAX, -(2**63), 4294967295)


def test_cache_key_by_id_and_index_checks_in_argument_order() -> None:
    raises(ValueError, lambda: CacheKeyByIdAndIndex(-1, "x", "y"), "cluster_id")
    raises(TypeError, lambda: CacheKeyByIdAndIndex(1, "x", -1), "cache_id")


def test_cache_key_by_id_and_index_has_no_prompt_cluster_id() -> None:
    assert not hasattr(CacheKeyByIdAndIndex(1, 2), "prompt_cluster_id")


# ---------------------------------------------------------------------------
# python-api.md §7.3 BlocksCacheKey
# ---------------------------------------------------------------------------


def test_blocks_cache_key_takes_cluster_and_model_positionally_with_model_0_default() -> None:
    assert (BlocksCacheKey(3, 4).cluster_id, BlocksCacheKey(3, 4).model_id) == (3, 4)
    assert BlocksCacheKey(3).model_id == 0


def test_blocks_cache_key_prompt_cluster_id_alias_and_cluster_id_wins() -> None:
    key = BlocksCacheKey(prompt_cluster_id=8)
    assert key.cluster_id == 8 and key.prompt_cluster_id == 8
    assert BlocksCacheKey(prompt_cluster_id=8, cluster_id=2).cluster_id == 2


def test_blocks_cache_key_with_more_than_2_arguments_is_param_invalid() -> None:
    raises_lx(lambda: BlocksCacheKey(1, 2, 3), "Param num is over limit")
    raises_lx(lambda: BlocksCacheKey(1, model_id=2, prompt_cluster_id=1), "Param num is over limit")


def test_blocks_cache_key_without_a_cluster_id_is_param_invalid_with_the_vendor_text() -> None:
    raises_lx(lambda: BlocksCacheKey(model_id=1), exactly("Param prompt_cluster_id or cluster_id is required"))


def test_blocks_cache_key_with_an_unknown_keyword_is_param_invalid_with_the_vendor_text() -> None:
    raises_lx(lambda: BlocksCacheKey(1, req_id=2), exactly("Unsupported param:req_id"))


def test_blocks_cache_key_with_too_many_arguments_has_the_vendor_text() -> None:
    raises_lx(lambda: BlocksCacheKey(1, 2, 3), exactly("Param num is over limit"))


def test_blocks_cache_key_type_checks_cluster_id_and_model_id_with_the_vendor_texts() -> None:
    raises(TypeError, lambda: BlocksCacheKey("1"),
           exactly("The first param cluster_id only support ['int'], but got <class 'str'>."))
    raises(TypeError, lambda: BlocksCacheKey(prompt_cluster_id=1.0),
           exactly("The first param cluster_id only support ['int'], but got <class 'float'>."))
    raises(TypeError, lambda: BlocksCacheKey(1, "0"),
           exactly("The second param model_id only support ['int'], but got <class 'str'>."))


def test_blocks_cache_key_lets_none_through_like_the_vendor() -> None:
    assert BlocksCacheKey(None).cluster_id is None
    assert BlocksCacheKey(1, None).model_id is None


def test_blocks_cache_key_has_no_range_check() -> None:
    key = BlocksCacheKey(-1, 2**70)
    assert (key.cluster_id, key.model_id) == (-1, 2**70)


def test_blocks_cache_key_check_order() -> None:
    raises_lx(lambda: BlocksCacheKey(model_id=1, a=1, b=2), "Param num is over limit")
    raises_lx(lambda: BlocksCacheKey(foo=1), "cluster_id")
    raises_lx(lambda: BlocksCacheKey("x", foo=1), "Unsupported param:foo")
    raises(TypeError, lambda: BlocksCacheKey("x", "y"), "cluster_id")


def test_blocks_cache_key_repr_uses_the_keyword_the_caller_used() -> None:
    assert "prompt_cluster_id=1" in repr(BlocksCacheKey(prompt_cluster_id=1))
    assert "cluster_id=1" in repr(BlocksCacheKey(1)) and "prompt" not in repr(BlocksCacheKey(1))
    assert "prompt" not in repr(BlocksCacheKey(cluster_id=1, prompt_cluster_id=1))


# ---------------------------------------------------------------------------
# python-api.md §7.4 core form, python-api.md §7.5 validity rule
# ---------------------------------------------------------------------------


def test_core_key_of_a_cache_key() -> None:
    assert core_key(CacheKey(1, 2, 3, 4)) == (1, -1, 0, 2, 4, 3, False)


def test_core_key_of_a_cache_key_by_id_and_index() -> None:
    assert core_key(CacheKeyByIdAndIndex(1, 5, 6)) == (1, 5, 6, U64_MAX, U64_MAX, 0, False)


def test_core_key_of_a_blocks_cache_key() -> None:
    key = core_key(BlocksCacheKey(7, 3))
    assert key == (7, -1, 0, U64_MAX, U64_MAX, 3, True)
    assert isinstance(key, CoreKey)
    assert key._fields == ("cluster_id", "cache_id", "batch_index", "req_id", "prefix_id", "model_id",
                           "is_blocks")


@pytest.mark.parametrize("key, name", [
    (BlocksCacheKey(None), "cluster_id"), (BlocksCacheKey(-1), "cluster_id"),
    (BlocksCacheKey(2**64), "cluster_id"), (BlocksCacheKey(1, None), "model_id"),
    (BlocksCacheKey(1, -1), "model_id")])
def test_core_key_of_a_blocks_key_that_does_not_fit_uint64_raises_type_error(key: BlocksCacheKey,
                                                                              name: str) -> None:
    raises(TypeError, lambda: core_key(key), name)


def test_core_key_of_something_else_raises_type_error() -> None:
    raises(TypeError, lambda: core_key((1, 2)))


@pytest.mark.parametrize("req_id, prefix_id", [(0, U64_MAX), (5, U64_MAX), (U64_MAX, 0), (U64_MAX, 9)])
def test_check_cache_key_accepts_exactly_one_valid_id(req_id: int, prefix_id: int) -> None:
    assert check_cache_key(CacheKey(1, req_id, prefix_id=prefix_id)) is None


def test_check_cache_key_rejects_neither_id_valid() -> None:
    raises_lx(lambda: check_cache_key(CacheKey(1, U64_MAX)),
              "one of req id and prefix id should contain valid value")


def test_check_cache_key_rejects_both_ids_valid() -> None:
    raises_lx(lambda: check_cache_key(CacheKey(1, 1, prefix_id=2)),
              "only one of req id and prefix id should contain valid value")


def test_check_cache_key_lets_other_key_kinds_pass() -> None:
    assert check_cache_key(CacheKeyByIdAndIndex(1, 2)) is None
    assert check_cache_key(BlocksCacheKey(1)) is None


def test_check_cache_key_is_static_on_both_managers() -> None:
    for manager in (CacheManager, KvCacheManager):
        assert isinstance(inspect.getattr_static(manager, "check_cache_key"), staticmethod)
        raises_lx(lambda: manager.check_cache_key(CacheKey(1, U64_MAX)), "one of req id")


# ---------------------------------------------------------------------------
# python-api.md §8.1 Cache
# ---------------------------------------------------------------------------


def test_cache_keeps_what_the_library_built_it_with() -> None:
    d = desc()
    addrs = [4096, 8192]
    cache = Cache(3, d, addrs, None, True, False)
    assert cache.cache_id == 3
    assert cache.cache_desc is d
    assert cache.tensor_addrs is addrs
    assert cache.is_blocks_cache is False


@pytest.mark.parametrize("cache_id, exc", [("1", TypeError), (None, TypeError), (2**63, ValueError),
                                           (-(2**63) - 1, ValueError)])
def test_cache_id_is_int64_checked(cache_id: Any, exc: type) -> None:
    raises(exc, lambda: Cache(cache_id, desc(), [1, 2], None, False, False), "cache_id")


def test_cache_tensor_addrs_can_become_empty_after_deallocation() -> None:
    cache = Cache(1, desc(), [1, 2], None, False, False)
    cache.tensor_addrs = []
    assert cache.tensor_addrs == []


def test_create_cpu_cache_returns_an_unregistered_host_blocks_cache() -> None:
    d = desc(placement=Placement.HOST)
    addrs = [4096, 8192]
    cache = Cache.create_cpu_cache(d, addrs)
    assert cache.cache_id == -1
    assert cache.cache_desc is d
    assert cache.tensor_addrs is addrs
    assert cache.is_blocks_cache is True
    assert cache._cache_manager is None and cache._is_registered is False


def test_create_cpu_cache_rejects_a_non_cache_desc() -> None:
    raises(TypeError, lambda: Cache.create_cpu_cache("desc", [1, 2]), "cache_desc")


@pytest.mark.parametrize("addrs, name", [((1, 2), "addrs"), ([1, "2"], r"addrs\[1\]")])
def test_create_cpu_cache_addrs_must_be_a_list_of_int(addrs: Any, name: str) -> None:
    raises(TypeError, lambda: Cache.create_cpu_cache(desc(placement=Placement.HOST), addrs), name)


def test_create_cpu_cache_needs_host_placement() -> None:
    raises_lx(lambda: Cache.create_cpu_cache(desc(), [1, 2]), "HOST")


def test_create_cpu_cache_needs_one_address_per_tensor() -> None:
    raises_lx(lambda: Cache.create_cpu_cache(desc(placement=Placement.HOST), [1]), "num_tensors")


def test_create_cpu_cache_check_order() -> None:
    raises(TypeError, lambda: Cache.create_cpu_cache(1, (1,)), "cache_desc")
    raises(TypeError, lambda: Cache.create_cpu_cache(desc(), (1, 2)), "addrs")
    raises_lx(lambda: Cache.create_cpu_cache(desc(), [1]), "HOST")


def test_create_cpu_cache_with_none_desc_raises_attribute_error_naming_it() -> None:
    raises(AttributeError, lambda: Cache.create_cpu_cache(None, [1]), "cache_desc")


def test_create_cpu_cache_with_none_addrs_raises_type_error_after_the_placement_rule() -> None:
    raises(TypeError, lambda: Cache.create_cpu_cache(desc(placement=Placement.HOST), None), "addrs")
    raises_lx(lambda: Cache.create_cpu_cache(desc(), None), "HOST")


def test_allocate_cpu_cache_owns_one_zeroed_buffer_per_tensor() -> None:
    d = desc(placement=Placement.HOST, shape=[4, 16])
    cache = Cache.allocate_cpu_cache(d)
    assert cache.cache_id == -1 and cache.is_blocks_cache is True
    assert len(cache.host_buffers) == 2
    assert cache.tensor_addrs == [b.ctypes.data for b in cache.host_buffers]
    assert all(b.nbytes == 128 and not b.any() for b in cache.host_buffers)
    cache.host_buffers[1][5] = 0xAB
    assert ctypes.c_uint8.from_address(cache.tensor_addrs[1] + 5).value == 0xAB


def test_allocate_cpu_cache_close_releases_the_buffers() -> None:
    with Cache.allocate_cpu_cache(desc(placement=Placement.HOST)) as cache:
        assert len(cache.tensor_addrs) == 2
    assert cache.tensor_addrs == [] and cache.host_buffers == []
    cache.close()
    assert cache.tensor_addrs == []


def test_allocate_cpu_cache_checks_its_desc() -> None:
    raises(TypeError, lambda: Cache.allocate_cpu_cache(None), "cache_desc")
    raises_lx(lambda: Cache.allocate_cpu_cache(desc()), "HOST")
    raises_lx(lambda: Cache.allocate_cpu_cache(desc(placement=Placement.HOST, num_tensors=0)), "num_tensors")
    raises_lx(lambda: Cache.allocate_cpu_cache(desc(placement=Placement.HOST, shape=[4, 0])), "size")


def test_close_of_a_cache_without_own_memory_changes_nothing() -> None:
    cache = Cache(1, desc(), [1, 2], None, False, False)
    cache.close()
    assert cache.tensor_addrs == [1, 2]


# ---------------------------------------------------------------------------
# python-api.md §8.2 KvCache
# ---------------------------------------------------------------------------


class FakeKvCacheManager:
    def __init__(self, initialized: bool = True, fail: bool = False) -> None:
        self.initialized = initialized
        self.fail = fail
        self.freed: List[int] = []

    def is_initialized(self) -> bool:
        return self.initialized

    def deallocate_cache(self, cache: KvCache) -> None:
        self.freed.append(cache.cache_id)
        if self.fail:
            raise LLMException("deallocate failed", status_code=LLMStatusCode.LLM_KV_CACHE_NOT_EXIST)
        cache.per_device_tensor_addrs = []


def test_kv_cache_keeps_what_the_library_built_it_with() -> None:
    d = desc()
    per_device = [[4096, 8192]]
    cache = KvCache(7, d, per_device, None)
    assert cache.cache_id == 7 and cache.cache_desc is d
    assert cache.per_device_tensor_addrs is per_device


def test_kv_cache_id_is_int64_checked() -> None:
    raises(TypeError, lambda: KvCache("7", desc(), [[1, 2]], None), "cache_id")
    raises(ValueError, lambda: KvCache(2**63, desc(), [[1, 2]], None), "cache_id")


def test_kv_cache_frees_itself_when_collected_while_valid() -> None:
    manager = FakeKvCacheManager()
    cache = KvCache(7, desc(), [[1, 2]], manager)
    del cache
    gc.collect()
    assert manager.freed == [7]


def test_kv_cache_is_not_freed_when_its_manager_is_not_initialised() -> None:
    manager = FakeKvCacheManager(initialized=False)
    cache = KvCache(7, desc(), [[1, 2]], manager)
    del cache
    gc.collect()
    assert manager.freed == []


def test_kv_cache_already_deallocated_is_not_freed_again() -> None:
    manager = FakeKvCacheManager()
    cache = KvCache(7, desc(), [[1, 2]], manager)
    manager.deallocate_cache(cache)
    del cache
    gc.collect()
    assert manager.freed == [7]


def test_kv_cache_automatic_free_swallows_a_failure() -> None:
    manager = FakeKvCacheManager(fail=True)
    cache = KvCache(7, desc(), [[1, 2]], manager)
    del cache
    gc.collect()  # an escaping error would be reported as an unraisable-exception warning (an error here)
    assert manager.freed == [7]


def test_kv_cache_create_cpu_cache_wraps_a_flat_list_per_device() -> None:
    d = desc(placement=Placement.HOST)
    cache = KvCache.create_cpu_cache(d, [1, 2])
    assert cache.cache_id == -1 and cache.cache_desc is d
    assert cache.per_device_tensor_addrs == [[1, 2]]
    assert cache._kv_cache_manager is None


def test_kv_cache_create_cpu_cache_keeps_a_nested_list() -> None:
    addrs = [[1, 2], [3, 4]]
    cache = KvCache.create_cpu_cache(desc(placement=Placement.HOST), addrs)
    assert cache.per_device_tensor_addrs is addrs


@pytest.mark.parametrize("cache_desc_arg, addrs, exc, match", [
    ("desc", [1, 2], TypeError, "cache_desc"),
    ("device", [1, 2], LLMException, "HOST"),
    ("host", (1, 2), TypeError, "addrs"),
    ("host", None, TypeError, "addrs"),
    ("host", [], LLMException, "empty"),
    ("host", [1, "2"], TypeError, r"addrs\[1\]"),
    ("host", [[1, "2"]], TypeError, r"addrs\[0\]\[1\]"),
    ("host", [[1]], LLMException, r"len\(addrs\[0\]\)"),
    ("host", [[1, 2], 3], LLMException, "only ints"),
    ("host", [1, 2, 3], LLMException, r"len\(addrs\)"),
])
def test_kv_cache_create_cpu_cache_checks(cache_desc_arg: str, addrs: Any, exc: type, match: str) -> None:
    d: Any = {"desc": "desc", "device": desc(), "host": desc(placement=Placement.HOST)}[cache_desc_arg]
    if exc is LLMException:
        raises_lx(lambda: KvCache.create_cpu_cache(d, addrs), match)
    else:
        raises(exc, lambda: KvCache.create_cpu_cache(d, addrs), match)


def test_kv_cache_create_cpu_cache_checks_placement_before_addrs() -> None:
    raises_lx(lambda: KvCache.create_cpu_cache(desc(), (1, 2)), "HOST")


def test_kv_cache_create_cpu_cache_checks_element_kinds_before_inner_lists() -> None:
    raises(TypeError, lambda: KvCache.create_cpu_cache(desc(placement=Placement.HOST), [[1], "x"]),
           r"addrs\[1\]")


def test_kv_cache_create_cpu_cache_checks_inner_lengths_before_mixed_kinds() -> None:
    raises_lx(lambda: KvCache.create_cpu_cache(desc(placement=Placement.HOST), [5, [1]]),
              r"len\(addrs\[1\]\)")


def test_kv_cache_create_cpu_cache_with_none_desc_raises_attribute_error() -> None:
    raises(AttributeError, lambda: KvCache.create_cpu_cache(None, [1]), "cache_desc")


# ---------------------------------------------------------------------------
# python-api.md §9.1 check_layer_range
# ---------------------------------------------------------------------------


def test_check_layer_range_accepts_none_and_increasing_step_1_ranges() -> None:
    assert check_layer_range(None, "r") is None
    assert check_layer_range(range(0, 1), "r") is None
    assert check_layer_range(range(3, 40), "r") is None


def test_check_layer_range_rejects_a_non_range_with_type_error() -> None:
    raises(TypeError, lambda: check_layer_range([0, 1], "src_layer_range"), "src_layer_range")
    raises(TypeError, lambda: check_layer_range(None, "src_layer_range", allow_none=False), "src_layer_range")


@pytest.mark.parametrize("value, match", [(range(0, 4, 2), "step"), (range(4, 0, -1), "step"),
                                          (range(2, 2), "start < stop"), (range(3, 1), "start < stop"),
                                          (range(-1, 2), "start < stop")])
def test_check_layer_range_rule_violations_are_param_invalid(value: range, match: str) -> None:
    raises_lx(lambda: check_layer_range(value, "dst_layer_range"), match)


# ---------------------------------------------------------------------------
# python-api.md §9.2 TransferConfig
# ---------------------------------------------------------------------------


def test_transfer_config_signature_and_defaults() -> None:
    params = inspect.signature(TransferConfig).parameters
    assert list(params) == ["dst_cluster_id", "dst_addrs", "src_layer_range", "src_batch_index"]
    assert params["src_layer_range"].default is None and params["src_batch_index"].default == 0
    config = TransferConfig(1, [4096, 8192])
    assert (config.dst_cluster_id, config.dst_addrs, config.src_layer_range, config.src_batch_index,
            config.dst_layer_range) == (1, [4096, 8192], None, 0, None)


def test_transfer_config_accepts_a_tuple_of_addresses_and_a_range() -> None:
    config = TransferConfig(U64_MAX, (1, 2), range(0, 1), 4294967295)
    assert (config.dst_addrs, config.src_layer_range, config.src_batch_index) == ((1, 2), range(0, 1), 4294967295)


@pytest.mark.parametrize("kwargs, exc, match", [
    ({"dst_cluster_id": None}, TypeError, "dst_cluster_id"), ({"dst_cluster_id": -1}, ValueError, "dst_cluster_id"),
    ({"dst_addrs": None}, TypeError, "dst_addrs"), ({"dst_addrs": "12"}, TypeError, "dst_addrs"),
    ({"dst_addrs": [1, 2.0]}, TypeError, r"dst_addrs\[1\]"), ({"dst_addrs": [-1]}, ValueError, r"dst_addrs\[0\]"),
    ({"dst_addrs": [2**64]}, ValueError, r"dst_addrs\[0\]"),
    ({"src_layer_range": [0, 1]}, TypeError, "src_layer_range"),
    ({"src_batch_index": "0"}, TypeError, "src_batch_index"), ({"src_batch_index": 2**32}, ValueError, "src_batch_index"),
])
def test_transfer_config_checks(kwargs: dict, exc: type, match: str) -> None:
    args = {"dst_cluster_id": 1, "dst_addrs": [1, 2], **kwargs}
    raises(exc, lambda: TransferConfig(**args), match)


def test_transfer_config_src_layer_range_rules_are_param_invalid() -> None:
    raises_lx(lambda: TransferConfig(1, [1, 2], range(0, 2, 2)), "step")
    raises_lx(lambda: TransferConfig(1, [1, 2], range(1, 1)), "start < stop")


def test_transfer_config_check_order() -> None:
    raises(ValueError, lambda: TransferConfig(-1, None), "dst_cluster_id")
    raises(TypeError, lambda: TransferConfig(1, [-1, "a"]), r"dst_addrs\[1\]")
    raises(ValueError, lambda: TransferConfig(1, [-1], [0]), r"dst_addrs\[0\]")
    raises_lx(lambda: TransferConfig(1, [1], range(0, 0), "x"), "src_layer_range")


def test_transfer_config_setters_repeat_the_checks() -> None:
    config = TransferConfig(1, [1, 2])
    raises(ValueError, lambda: setattr(config, "dst_cluster_id", 2**64), "dst_cluster_id")
    raises(TypeError, lambda: setattr(config, "dst_addrs", None), "dst_addrs")
    raises_lx(lambda: setattr(config, "src_layer_range", range(2, 1)), "src_layer_range")
    raises(ValueError, lambda: setattr(config, "src_batch_index", -1), "src_batch_index")
    config.src_layer_range = range(0, 2)
    config.dst_addrs = (3, 4)
    assert (config.src_layer_range, config.dst_addrs) == (range(0, 2), (3, 4))


def test_transfer_config_dst_layer_range_is_a_plain_attribute() -> None:
    config = TransferConfig(1, [1, 2])
    assert "dst_layer_range" in vars(config)
    config.dst_layer_range = range(5, 6)
    assert config.dst_layer_range == range(5, 6)


# ---------------------------------------------------------------------------
# python-api.md §9.3 TransferWithCacheKeyConfig
# ---------------------------------------------------------------------------


def test_transfer_with_cache_key_config_signature_and_values() -> None:
    params = inspect.signature(TransferWithCacheKeyConfig).parameters
    assert list(params) == ["cache_key", "src_layer_range", "dst_layer_range", "src_batch_index"]
    assert params["src_layer_range"].default is None
    assert params["dst_layer_range"].default is None
    assert params["src_batch_index"].default == 0
    key = CacheKeyByIdAndIndex(9, 2, 1)
    config = TransferWithCacheKeyConfig(key, range(0, 2), range(2, 4), 3)
    assert config.cache_key is key
    assert (config.src_layer_range, config.dst_layer_range, config.src_batch_index) == (range(0, 2), range(2, 4), 3)
    assert config.dst_cluster_id == 9 and "dst_cluster_id" in vars(config)


@pytest.mark.parametrize("key", [None, CacheKey(1, 2), 5])
def test_transfer_with_cache_key_config_needs_a_blocks_or_by_id_key(key: Any) -> None:
    raises(TypeError, lambda: TransferWithCacheKeyConfig(key, range(0, 1), range(0, 1)), "cache_key")


def test_transfer_with_cache_key_config_needs_both_ranges() -> None:
    raises(TypeError, lambda: TransferWithCacheKeyConfig(BlocksCacheKey(1)), "src_layer_range")
    raises(TypeError, lambda: TransferWithCacheKeyConfig(BlocksCacheKey(1), range(0, 1)), "dst_layer_range")


def test_transfer_with_cache_key_config_range_rules_are_param_invalid() -> None:
    raises_lx(lambda: TransferWithCacheKeyConfig(BlocksCacheKey(1), range(0, 4, 2), range(0, 2)), "src_layer_range")
    raises_lx(lambda: TransferWithCacheKeyConfig(BlocksCacheKey(1), range(0, 2), range(1, 1)), "dst_layer_range")


def test_transfer_with_cache_key_config_ranges_must_have_equal_lengths() -> None:
    raises_lx(lambda: TransferWithCacheKeyConfig(BlocksCacheKey(1), range(0, 2), range(0, 3)), "same length")


def test_transfer_with_cache_key_config_src_batch_index_is_uint32() -> None:
    key = CacheKeyByIdAndIndex(1, 2)
    raises(TypeError, lambda: TransferWithCacheKeyConfig(key, range(0, 1), range(0, 1), None), "src_batch_index")
    raises(ValueError, lambda: TransferWithCacheKeyConfig(key, range(0, 1), range(0, 1), 2**32), "src_batch_index")


def test_transfer_with_cache_key_config_blocks_key_needs_batch_index_0() -> None:
    raises_lx(lambda: TransferWithCacheKeyConfig(BlocksCacheKey(1), range(0, 1), range(0, 1), 1), "BlocksCacheKey")
    assert TransferWithCacheKeyConfig(CacheKeyByIdAndIndex(1, 2), range(0, 1), range(0, 1), 1).src_batch_index == 1


def test_transfer_with_cache_key_config_check_order() -> None:
    raises(TypeError, lambda: TransferWithCacheKeyConfig(None, None, None), "cache_key")
    raises_lx(lambda: TransferWithCacheKeyConfig(BlocksCacheKey(1), range(0, 2, 2), None), "src_layer_range")
    raises_lx(lambda: TransferWithCacheKeyConfig(BlocksCacheKey(1), range(0, 2), range(0, 1), "x"),
              "same length")
    # The uint32 check comes before the blocks-key rule in the constructor.
    raises(ValueError, lambda: TransferWithCacheKeyConfig(BlocksCacheKey(1), range(0, 1), range(0, 1), -1),
           "src_batch_index")


def test_transfer_with_cache_key_config_range_setters_allow_none() -> None:
    config = TransferWithCacheKeyConfig(BlocksCacheKey(1), range(0, 1), range(0, 1))
    config.src_layer_range = None
    config.dst_layer_range = None
    assert config.src_layer_range is None and config.dst_layer_range is None
    raises(TypeError, lambda: setattr(config, "src_layer_range", [0]), "src_layer_range")
    raises_lx(lambda: setattr(config, "dst_layer_range", range(1, 0)), "dst_layer_range")


def test_transfer_with_cache_key_config_cache_key_setter_type_checks() -> None:
    config = TransferWithCacheKeyConfig(BlocksCacheKey(1), range(0, 1), range(0, 1))
    raises(TypeError, lambda: setattr(config, "cache_key", CacheKey(1, 2)), "cache_key")
    config.cache_key = CacheKeyByIdAndIndex(5, 1)
    assert config.dst_cluster_id == 5


def test_transfer_with_cache_key_config_batch_setter_checks_the_blocks_rule_first() -> None:
    blocks = TransferWithCacheKeyConfig(BlocksCacheKey(1), range(0, 1), range(0, 1))
    raises_lx(lambda: setattr(blocks, "src_batch_index", "x"), "BlocksCacheKey")
    raises_lx(lambda: setattr(blocks, "src_batch_index", -1), "BlocksCacheKey")
    blocks.src_batch_index = 0
    by_id = TransferWithCacheKeyConfig(CacheKeyByIdAndIndex(1, 2), range(0, 1), range(0, 1))
    raises(ValueError, lambda: setattr(by_id, "src_batch_index", -1), "src_batch_index")
    raises(TypeError, lambda: setattr(by_id, "src_batch_index", "x"), "src_batch_index")


# ---------------------------------------------------------------------------
# python-api.md §9.4 LayerSynchronizer, python-api.md §9.6 MemInfo
# ---------------------------------------------------------------------------


def test_layer_synchronizer_is_abstract() -> None:
    raises(TypeError, lambda: LayerSynchronizer())
    params = inspect.signature(LayerSynchronizer.synchronize_layer).parameters
    assert list(params) == ["self", "layer_index", "timeout_in_millis"]


def test_layer_synchronizer_subclass_implements_synchronize_layer() -> None:
    class Ready(LayerSynchronizer):
        def synchronize_layer(self, layer_index: int, timeout_in_millis: Any) -> bool:
            return layer_index < 2

    sync = Ready()
    assert sync.synchronize_layer(1, None) is True
    assert sync.synchronize_layer(2, None) is False


def test_mem_info_keeps_its_fields_read_only() -> None:
    info = MemInfo(Memtype.MEM_TYPE_DEVICE, 4096, 1024)
    assert (info.mem_type, info.addr, info.size) == (Memtype.MEM_TYPE_DEVICE, 4096, 1024)
    raises(AttributeError, lambda: setattr(info, "addr", 1))


def test_mem_info_str_lists_the_fields() -> None:
    assert str(MemInfo(Memtype.MEM_TYPE_HOST, 4096, 1024)) == \
        "MemInfo(mem_type=Memtype.MEM_TYPE_HOST, addr=4096, size=1024)"


@pytest.mark.parametrize("args, name", [((0, 1, 2), "mem_type"), ((Memtype.MEM_TYPE_DEVICE, "1", 2), "addr"),
                                        ((Memtype.MEM_TYPE_DEVICE, 1, 2.0), "size")])
def test_mem_info_type_checks(args: tuple, name: str) -> None:
    raises(TypeError, lambda: MemInfo(*args), name)


def test_mem_info_lets_none_through_like_the_vendor() -> None:
    info = MemInfo(None, None, None)
    assert (info.mem_type, info.addr, info.size) == (None, None, None)


# ---------------------------------------------------------------------------
# python-api.md §13 Tensor, TensorDesc
# ---------------------------------------------------------------------------


def test_tensor_desc_type_checks_and_returns_a_new_shape_list() -> None:
    td = TensorDesc(DataType.DT_INT32, (2, 3))
    assert td.dtype is DataType.DT_INT32
    assert td.shape == [2, 3]
    assert td.shape is not td.shape
    raises(TypeError, lambda: TensorDesc(3, [2]), "dtype")
    raises(TypeError, lambda: TensorDesc(DataType.DT_INT32, "23"), "shape")
    raises(TypeError, lambda: TensorDesc(DataType.DT_INT32, None), "shape")


@pytest.mark.parametrize("np_dtype, data_type", [
    (np.float32, DataType.DT_FLOAT), (np.float16, DataType.DT_FLOAT16), (np.int8, DataType.DT_INT8),
    (np.int32, DataType.DT_INT32), (np.uint8, DataType.DT_UINT8), (np.int16, DataType.DT_INT16),
    (np.uint16, DataType.DT_UINT16), (np.uint32, DataType.DT_UINT32), (np.int64, DataType.DT_INT64),
    (np.uint64, DataType.DT_UINT64), (np.float64, DataType.DT_DOUBLE), (np.bool_, DataType.DT_BOOL)])
def test_tensor_of_an_array_takes_its_data_type(np_dtype: Any, data_type: DataType) -> None:
    array = np.zeros((2, 3), dtype=np_dtype)
    tensor = Tensor(array)
    assert tensor.tensor_desc is not None
    assert (tensor.tensor_desc.dtype, tensor.tensor_desc.shape) == (data_type, [2, 3])
    assert tensor.numpy() is array


def test_tensor_of_a_bytes_array_is_a_string_tensor_read_only_with_copy() -> None:
    tensor = Tensor(np.array([b"ab", b"c"]))
    assert tensor.tensor_desc is not None and tensor.tensor_desc.dtype is DataType.DT_STRING
    raises(RuntimeError, lambda: tensor.numpy(), "copy=True")
    assert tensor.numpy(copy=True).tolist() == [b"ab", b"c"]


def test_tensor_rejects_an_unsupported_dtype_without_desc() -> None:
    raises(RuntimeError, lambda: Tensor(np.zeros(2, dtype=np.complex64)), "complex64")


def test_tensor_rejects_a_non_contiguous_array() -> None:
    raises(RuntimeError, lambda: Tensor(np.zeros((4, 4), dtype=np.float32)[:, 1]), "C-contiguous")


def test_tensor_with_a_desc_needs_a_matching_shape_and_dtype() -> None:
    array = np.zeros((2, 3), dtype=np.float16)
    assert Tensor(array, TensorDesc(DataType.DT_FLOAT16, [2, 3])).numpy() is array
    raises(RuntimeError, lambda: Tensor(array, TensorDesc(DataType.DT_FLOAT16, [3, 2])), "does not match")
    raises(RuntimeError, lambda: Tensor(array, TensorDesc(DataType.DT_FLOAT, [2, 3])), "does not match")


def test_tensor_bf16_is_widened_to_float32() -> None:
    bits = np.array([0x3F80, 0xC000], dtype=np.uint16).view(np.float16)  # bf16 1.0 and -2.0
    out = Tensor(bits, TensorDesc(DataType.DT_BF16, [2])).numpy()
    assert out.dtype == np.float32
    assert out.tolist() == [1.0, -2.0]


def test_tensor_numpy_copy_must_be_a_bool() -> None:
    raises(TypeError, lambda: Tensor(np.zeros(2, dtype=np.float32)).numpy(copy=1), "copy")


def test_tensor_numpy_copy_returns_a_new_array() -> None:
    array = np.arange(3, dtype=np.int32)
    copied = Tensor(array).numpy(copy=True)
    assert copied is not array and copied.tolist() == [0, 1, 2]


def test_tensor_clone_copies_the_data() -> None:
    array = np.arange(3, dtype=np.int32)
    clone = Tensor(Tensor(array))
    array[0] = 9
    assert clone.numpy().tolist() == [0, 1, 2]


def test_tensor_rejects_other_data_and_desc_types() -> None:
    raises(TypeError, lambda: Tensor("data"), "data")
    raises(TypeError, lambda: Tensor(np.zeros(2, dtype=np.float32), "desc"), "tensor_desc")


def test_tensor_from_tensor_tuple_builds_a_handle_tensor() -> None:
    tensor = Tensor.from_tensor_tuple((123456, 1, [2, 3]))
    assert tensor.tensor_desc is not None
    assert (tensor.tensor_desc.dtype, tensor.tensor_desc.shape) == (DataType.DT_FLOAT16, [2, 3])
    assert tensor._handle == 123456


# ---------------------------------------------------------------------------
# python-api.md §1.3 the module's name list
# ---------------------------------------------------------------------------


def test_llm_types_all_is_the_vendors_list_and_the_other_names_exist() -> None:
    assert sorted(llm_types.__all__) == sorted([
        "CacheDesc", "CacheKey", "CacheKeyByIdAndIndex", "KvCache", "BlocksCacheKey", "Placement", "CacheTask",
        "TransferConfig", "LayerSynchronizer", "Cache"])
    for name in ("RegisterMemStatus", "Memtype", "MemInfo", "TransferWithCacheKeyConfig", "PushType"):
        assert isinstance(getattr(llm_types, name), type)
