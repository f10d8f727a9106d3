"""The mock engine's cache table (docs/reference/semantics.md §2, §3, §6.6, §8.8, §8.9, §15): register,
unregister, the memory pools of PR-9/PR-34, and the local copies."""
from __future__ import annotations

from typing import Callable

import numpy as np
import pytest

from llm_datadist_ffi import LLMException
from llm_datadist_ffi import LLMStatusCode as S
from llm_datadist_ffi import acl, lint, mock_control, native
from llm_datadist_ffi.native import Cache, GeDataType

import engine_support as sup


raw = sup.Raw()

Engines = Callable[..., native.LlmDataDist]
POOL = '{"memory_size": 16384, "page_shift": 10}'          # 16 pages of 1 KiB
HOST_POOL = '{"memory_size": 8192, "page_shift": 12}'      # 2 pages of 4 KiB


@pytest.fixture
def eng(engines: Engines) -> native.LlmDataDist:
    return engines(1, options={native.OPTION_MOCK_NATIVE_POOL: "1", native.OPTION_MEM_POOL_CONFIG: POOL, native.OPTION_HOST_MEM_POOL_CONFIG: HOST_POOL,
                               native.OPTION_MOCK_NATIVE_POOL: "1"})


def zeros(n: int, shape: tuple[int, ...]) -> list[np.ndarray]:
    return [np.zeros(shape, np.uint8) for _ in range(n)]


# ---- registration -------------------------------------------------------------------------

@pytest.mark.rules("§2.4", "§3.1", "§3.2", "§15", "cpp-api §6.13")
@pytest.mark.mock_only(reason="pool-backed AllocateCache/DeallocateCache/CopyKv* (PR-9): the vendor's C++ class answers FEATURE_NOT_ENABLED")
def test_register_ids_start_at_one_and_later_failures_consume_ids(eng: native.LlmDataDist) -> None:
    arrays = zeros(2, (4, 8))
    assert sup.register(eng, arrays) == 1
    # rank and address count are checked before an id is taken
    assert sup.status_of(eng.register_kv_cache, sup.desc(2, []), [a.ctypes.data for a in arrays]) == \
        S.LLM_PARAM_INVALID
    assert sup.status_of(eng.register_kv_cache, sup.desc(2, [4, 8]), [arrays[0].ctypes.data]) == S.LLM_PARAM_INVALID
    assert sup.register(eng, arrays) == 2
    # a bad dim or data type fails after the id was taken
    assert sup.status_of(eng.register_kv_cache, sup.desc(2, [4, 0]), [a.ctypes.data for a in arrays]) == \
        S.LLM_PARAM_INVALID
    assert sup.status_of(eng.register_kv_cache, sup.desc(2, [4, 8], dtype=28),
                         [a.ctypes.data for a in arrays]) == S.LLM_PARAM_INVALID
    assert sup.register(eng, arrays) == 5
    # allocation shares the counter
    assert eng.allocate_cache(sup.desc(1, [2, 8])).cache_id == 6


@pytest.mark.rules("§3.1")
@pytest.mark.mock_only(reason="pool-backed AllocateCache/DeallocateCache/CopyKv* (PR-9): the vendor's C++ class answers FEATURE_NOT_ENABLED")
def test_ids_are_never_reused_within_one_initialisation(eng: native.LlmDataDist) -> None:
    arrays = zeros(1, (2, 8))
    first = sup.register(eng, arrays)
    second = eng.allocate_cache(sup.desc(1, [2, 8])).cache_id
    assert (first, second) == (1, 2)
    eng.unregister_kv_cache(first)
    eng.deallocate_cache(second)
    assert sup.register(eng, arrays) == 3
    assert eng.allocate_cache(sup.desc(1, [2, 8])).cache_id == 4


@pytest.mark.rules("§3.2", "§15", "cpp-api §6.13")
def test_register_rejects_empty_mismatched_and_zero_addresses(eng: native.LlmDataDist) -> None:
    a = np.zeros((2, 2), np.uint8)
    assert sup.status_of(eng.register_kv_cache, sup.desc(0, [2, 2]), []) == S.LLM_PARAM_INVALID
    assert "empty" in raw.last_error()
    assert sup.status_of(eng.register_kv_cache, sup.desc(1, [2, 2]), [a.ctypes.data, a.ctypes.data]) == \
        S.LLM_PARAM_INVALID
    assert sup.status_of(eng.register_kv_cache, sup.desc(2, [2, 2]), [a.ctypes.data, 0]) == S.LLM_PARAM_INVALID
    assert "addrs[1] is 0" in raw.last_error()


@pytest.mark.rules("§2.4", "§15")
@pytest.mark.parametrize("rank,ok", [(1, True), (31, True), (32, False)])
def test_register_takes_shapes_of_1_to_31_dims(eng: native.LlmDataDist, rank: int, ok: bool) -> None:
    a = np.zeros(2, np.uint8)
    status = sup.status_of(eng.register_kv_cache, sup.desc(1, [2] + [1] * (rank - 1)), [a.ctypes.data])
    assert status == (S.LLM_SUCCESS if ok else S.LLM_PARAM_INVALID)


@pytest.mark.rules("§2.3")
@pytest.mark.parametrize("shape", [[4, -1], [0, 4], [2**62, 4], [2**31, 2**31, 4], [2**40, 2**40]])
def test_register_rejects_non_positive_dims_and_size_overflow(eng: native.LlmDataDist, shape: list[int]) -> None:
    a = np.zeros(4, np.uint8)
    assert sup.status_of(eng.register_kv_cache, sup.desc(1, shape, dtype=int(GeDataType.DT_FLOAT)),
                         [a.ctypes.data]) == S.LLM_PARAM_INVALID


@pytest.mark.rules("§2.3")
@pytest.mark.parametrize("dtype,shape", [(GeDataType.DT_FLOAT, [2**61, 1]), (GeDataType.DT_STRING, [2**60, 1]),
                                         (GeDataType.DT_COMPLEX128, [4, 2**59])])
def test_register_rejects_a_byte_size_beyond_int64(eng: native.LlmDataDist, dtype: GeDataType,
                                                   shape: list[int]) -> None:
    # the element count fits int64, the byte size does not
    a = np.zeros(4, np.uint8)
    assert sup.status_of(eng.register_kv_cache, sup.desc(1, shape, dtype=int(dtype)), [a.ctypes.data]) == \
        S.LLM_PARAM_INVALID
    assert "byte size overflows int64" in raw.last_error()


@pytest.mark.rules("§2.3")
@pytest.mark.parametrize("dtype", [5, 28, 43, 44, -1, 1000])
def test_register_rejects_data_types_without_a_size(eng: native.LlmDataDist, dtype: int) -> None:
    a = np.zeros(4, np.uint8)
    assert sup.status_of(eng.register_kv_cache, sup.desc(1, [4], dtype=dtype), [a.ctypes.data]) == \
        S.LLM_PARAM_INVALID
    assert "data_type" in raw.last_error()


@pytest.mark.rules("E-17", "§2.6")
def test_register_rejects_an_unknown_placement(eng: native.LlmDataDist) -> None:
    a = np.zeros(4, np.uint8)
    d = raw.ffi.new("lldd_cache_desc *")
    shape = raw.ffi.new("int64_t[]", [4])
    d.placement, d.num_tensors, d.data_type, d.shape, d.shape_len = 2, 1, 4, shape, 1
    addrs, cid = raw.ffi.new("uint64_t[]", [a.ctypes.data]), raw.ffi.new("int64_t *")
    assert raw.lib.lldd_register_kv_cache(eng._engine(), d, addrs, 1, cid) == S.LLM_PARAM_INVALID
    assert "placement" in raw.last_error()


# (data type, shape, stride in bytes, or None when the PR-17 guard rejects a stride of 0)
SIZES = [
    (GeDataType.DT_FLOAT16, [3, 5], 10),
    (GeDataType.DT_STRING, [2, 1], 16),
    (GeDataType.DT_STRING_REF, [2, 2], 32),
    (GeDataType.DT_DUAL, [2, 3], 15),
    (GeDataType.DT_COMPLEX32, [2, 2], 8),
    (GeDataType.DT_INT4, [4, 4], 2),
    (GeDataType.DT_UINT1, [3, 8], 1),
    (GeDataType.DT_INT2, [2, 8], 2),
    (GeDataType.DT_FLOAT6_E3M2, [2, 4], 3),
    (GeDataType.DT_HIFLOAT4, [2, 6], 3),
    (GeDataType.DT_INT4, [3, 1], None),         # 3 half bytes make 2 bytes: 3 batches of 0 bytes
    (GeDataType.DT_UINT1, [3, 1], None),
]


@pytest.mark.rules("§2.2", "§2.3", "PR-17")
@pytest.mark.mock_only(reason="pool-backed AllocateCache/DeallocateCache/CopyKv* (PR-9): the vendor's C++ class answers FEATURE_NOT_ENABLED")
@pytest.mark.parametrize("dtype,shape,stride", SIZES)
def test_tensor_sizes_follow_the_data_type_table(eng: native.LlmDataDist, dtype: GeDataType, shape: list[int],
                                                stride: int | None) -> None:
    # a stride is observed through CopyKvCache: batch 1 of one cache into batch 0 of another
    nbytes = 64
    src = [np.arange(nbytes, dtype=np.uint8)]
    dst = [np.zeros(nbytes, np.uint8)]
    status = sup.status_of(eng.register_kv_cache, sup.desc(1, shape, dtype=int(dtype)), [src[0].ctypes.data])
    if stride is None:
        assert status == S.LLM_PARAM_INVALID
        assert "PR-17" in raw.last_error()
        return
    assert status == S.LLM_SUCCESS
    sid = 1
    did = eng.register_kv_cache(sup.desc(1, shape, dtype=int(dtype)), [dst[0].ctypes.data])
    eng.copy_kv_cache(Cache(sid), Cache(did), src_batch_index=1, dst_batch_index=0)
    expected = np.zeros(nbytes, np.uint8)
    expected[:stride] = src[0][stride:2 * stride]
    assert (dst[0] == expected).all()


@pytest.mark.rules("§2.3", "PR-17")
@pytest.mark.mock_only(reason="pool-backed AllocateCache/DeallocateCache/CopyKv* (PR-9): the vendor's C++ class answers FEATURE_NOT_ENABLED")
@pytest.mark.parametrize("dtype,shape,stride", [
    (GeDataType.DT_INT4, [3, 5], 2),            # 15 half bytes make 8 bytes: 3 batches of 2, 2 bytes left over
    (GeDataType.DT_UINT1, [5, 9], 1),           # 45 bits make 6 bytes: 5 batches of 1, 1 byte left over
])
def test_a_stride_that_does_not_tile_the_tensor_is_rounded_down_with_a_lint(
        eng: native.LlmDataDist, dtype: GeDataType, shape: list[int], stride: int) -> None:
    src = [np.arange(64, dtype=np.uint8)]
    dst = [np.zeros(64, np.uint8)]
    with pytest.warns(lint.StrideRoundedDownWarning, match="PR-17"):
        sid = eng.register_kv_cache(sup.desc(1, shape, dtype=int(dtype)), [src[0].ctypes.data])
    with pytest.warns(lint.StrideRoundedDownWarning, match=f"rounded down to {stride} bytes"):
        did = eng.register_kv_cache(sup.desc(1, shape, dtype=int(dtype)), [dst[0].ctypes.data])
    eng.copy_kv_cache(Cache(sid), Cache(did), src_batch_index=shape[0] - 1, dst_batch_index=0)
    expected = np.zeros(64, np.uint8)
    expected[:stride] = src[0][(shape[0] - 1) * stride:shape[0] * stride]
    assert (dst[0] == expected).all()


@pytest.mark.rules("§2.3", "PR-17")
@pytest.mark.mock_only(reason="LLM_DATADIST_FFI_STRICT is read by the mock engine; PR-17 is a mock rule")
def test_strict_mode_refuses_a_stride_that_does_not_tile_the_tensor(eng: native.LlmDataDist,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(lint.STRICT_ENV, "1")
    a = np.zeros(8, np.uint8)
    assert sup.status_of(eng.register_kv_cache, sup.desc(1, [3, 5], dtype=int(GeDataType.DT_INT4)),
                         [a.ctypes.data]) == S.LLM_PARAM_INVALID
    assert "PR-17" in raw.last_error()


@pytest.mark.rules("§2.3", "PR-17")
def test_sub_byte_tensors_above_2_31_bits_are_rejected(eng: native.LlmDataDist) -> None:
    a = np.zeros(1, np.uint8)
    assert sup.status_of(eng.register_kv_cache, sup.desc(1, [2**29, 1], dtype=int(GeDataType.DT_INT4)),
                         [a.ctypes.data]) == S.LLM_PARAM_INVALID
    assert "2^31 - 1 bits" in raw.last_error()


@pytest.mark.rules("§2.2", "PR-30")
def test_register_rejects_a_tensor_running_past_its_acl_allocation(eng: native.LlmDataDist) -> None:
    acl.aclrtSetDevice(0)
    base = acl.aclrtMalloc(100, 0)
    try:
        assert sup.status_of(eng.register_kv_cache, sup.desc(1, [1, 101]), [base]) == S.LLM_PARAM_INVALID
        assert "tensor 0" in raw.last_error() and "PR-30" in raw.last_error()
        assert sup.status_of(eng.register_kv_cache, sup.desc(2, [1, 51]), [base, base + 50]) == S.LLM_PARAM_INVALID
        assert "tensor 1" in raw.last_error()
        cid = eng.register_kv_cache(sup.desc(2, [1, 50]), [base, base + 50])
        eng.unregister_kv_cache(cid)
    finally:
        acl.aclrtFree(base)
        acl.aclrtResetDevice(0)


@pytest.mark.rules("§3.2", "§15")
@pytest.mark.mock_only(reason="pool-backed AllocateCache/DeallocateCache/CopyKv* (PR-9): the vendor's C++ class answers FEATURE_NOT_ENABLED")
def test_the_published_table_is_limited_to_one_mib(eng: native.LlmDataDist) -> None:
    a = np.zeros(1, np.uint8)
    # 24 + (64 + 8 * 131060) = 1 048 568 bytes fit; one more tensor would not
    big = eng.register_kv_cache(sup.desc(131060, [1]), [a.ctypes.data] * 131060)
    assert sup.status_of(eng.register_kv_cache, sup.desc(1, [1]), [a.ctypes.data]) == S.LLM_PARAM_INVALID
    # 1 048 568 + (64 + 8 * 1): every path that adds to the table names the size it would reach
    assert "would grow to 1048640 bytes, over its 1 MiB limit (24 + sum(64 + 8 * num_tensors))" in raw.last_error()
    assert sup.status_of(eng.allocate_cache, sup.desc(1, [1])) == S.LLM_PARAM_INVALID
    assert "would grow to 1048640 bytes, over its 1 MiB limit" in raw.last_error()
    eng.unregister_kv_cache(big)
    eng.register_kv_cache(sup.desc(131061, [1]), [a.ctypes.data] * 131061)
    assert sup.status_of(eng.register_kv_cache, sup.desc(131062, [1]), [a.ctypes.data] * 131062) == \
        S.LLM_PARAM_INVALID


@pytest.mark.rules("§3.5", "cpp-api §6.13")
def test_unregister_of_an_unknown_id_succeeds(eng: native.LlmDataDist) -> None:
    eng.unregister_kv_cache(77)
    eng.unregister_kv_cache(-1)


@pytest.mark.rules("§3.5", "cpp-api §6.13")
@pytest.mark.mock_only(reason="pool-backed AllocateCache/DeallocateCache/CopyKv* (PR-9): the vendor's C++ class answers FEATURE_NOT_ENABLED")
def test_unregister_removes_the_cache(eng: native.LlmDataDist) -> None:
    arrays = zeros(1, (2, 2))
    cid = sup.register(eng, arrays)
    other = sup.register(eng, zeros(1, (2, 2)))
    eng.unregister_kv_cache(cid)
    assert sup.status_of(eng.copy_kv_cache, Cache(cid), Cache(other)) == S.LLM_KV_CACHE_NOT_EXIST
    eng.unregister_kv_cache(cid)


@pytest.mark.rules("§3.5", "PR-23")
@pytest.mark.mock_only(reason="pool-backed AllocateCache/DeallocateCache/CopyKv* (PR-9): the vendor's C++ class answers FEATURE_NOT_ENABLED")
def test_unregister_of_an_allocated_cache_removes_it_with_a_lint(eng: native.LlmDataDist) -> None:
    # PR-23: the vendor erases the entry; its pool memory goes back with it
    first = eng.allocate_cache(sup.desc(8, [1, 2048]))          # all 16 pages
    other = sup.register(eng, zeros(1, (1, 2048)))
    with pytest.warns(lint.OwnedCacheUnregisteredWarning, match="PR-23"):
        eng.unregister_kv_cache(first.cache_id)
    assert sup.status_of(eng.copy_kv_cache, Cache(first.cache_id), Cache(other)) == S.LLM_KV_CACHE_NOT_EXIST
    eng.deallocate_cache(first.cache_id)                        # an unknown id now: success
    assert len(eng.allocate_cache(sup.desc(8, [1, 2048])).tensor_addrs) == 8


@pytest.mark.rules("§3.5", "PR-23")
@pytest.mark.mock_only(reason="pool-backed AllocateCache/DeallocateCache/CopyKv* (PR-9): the vendor's C++ class answers FEATURE_NOT_ENABLED")
def test_strict_mode_refuses_to_unregister_an_allocated_cache(eng: native.LlmDataDist,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    cache = eng.allocate_cache(sup.desc(1, [2, 8]))
    monkeypatch.setenv(lint.STRICT_ENV, "1")
    assert sup.status_of(eng.unregister_kv_cache, cache.cache_id) == S.LLM_PARAM_INVALID
    assert "PR-23" in raw.last_error()
    other = sup.register(eng, zeros(1, (2, 8)))
    eng.copy_kv_cache(Cache(cache.cache_id), Cache(other))      # still there
    eng.deallocate_cache(cache.cache_id)


# ---- pools --------------------------------------------------------------------------------

@pytest.mark.rules("E-17", "§2.4", "§2.6", "§3.1", "§3.6", "§15")
@pytest.mark.mock_only(reason="pool-backed AllocateCache/DeallocateCache/CopyKv* (PR-9): the vendor's C++ class answers FEATURE_NOT_ENABLED")
def test_allocate_checks_count_placement_and_shape_in_order(engines: Engines) -> None:
    e = engines(1, options={native.OPTION_MOCK_NATIVE_POOL: "1", native.OPTION_MEM_POOL_CONFIG: POOL})
    assert sup.status_of(e.allocate_cache, sup.desc(0, [2, 2], placement=0)) == S.LLM_PARAM_INVALID
    assert "num_tensors" in raw.last_error()
    assert sup.status_of(e.allocate_cache, sup.desc(1, [2, 2], placement=0)) == S.LLM_PARAM_INVALID
    assert "llm.HostMemPoolConfig" in raw.last_error()
    assert sup.status_of(e.allocate_cache, sup.desc(1, [])) == S.LLM_PARAM_INVALID
    assert sup.status_of(e.allocate_cache, sup.desc(1, [2, -2])) == S.LLM_PARAM_INVALID   # takes id 1
    assert e.allocate_cache(sup.desc(1, [2, 2])).cache_id == 2


@pytest.mark.rules("§3.3", "§3.4", "§3.6", "§15", "PR-34")
@pytest.mark.mock_only(reason="pool-backed AllocateCache/DeallocateCache/CopyKv* (PR-9): the vendor's C++ class answers FEATURE_NOT_ENABLED")
def test_allocated_tensors_are_whole_pages_of_the_pool_first_fit(eng: native.LlmDataDist) -> None:
    a = eng.allocate_cache(sup.desc(2, [1, 1500]))      # 2 pages per tensor: pages 0-1, 2-3
    b = eng.allocate_cache(sup.desc(1, [1, 1024]))      # pages 4
    base = a.tensor_addrs[0]
    assert a.tensor_addrs == [base, base + 2048]
    assert b.tensor_addrs == [base + 4096]
    eng.deallocate_cache(a.cache_id)
    c = eng.allocate_cache(sup.desc(3, [1, 1]))         # first fit: pages 0, 1, 2
    assert c.tensor_addrs == [base, base + 1024, base + 2048]


@pytest.mark.rules("§3.3", "§3.4", "§3.6", "§15", "PR-34")
@pytest.mark.mock_only(reason="pool-backed AllocateCache/DeallocateCache/CopyKv* (PR-9): the vendor's C++ class answers FEATURE_NOT_ENABLED")
def test_an_exhausted_pool_is_out_of_memory_until_memory_is_freed(eng: native.LlmDataDist) -> None:
    first = eng.allocate_cache(sup.desc(8, [1, 2048]))  # all 16 pages
    assert sup.status_of(eng.allocate_cache, sup.desc(1, [1, 1])) == S.LLM_OUT_OF_MEMORY
    assert "no room" in raw.last_error()
    eng.deallocate_cache(first.cache_id)
    eng.allocate_cache(sup.desc(16, [1, 1]))
    # a failed allocation takes no page: 4 tensors of 4 KiB cannot fit 0 free pages
    assert sup.status_of(eng.allocate_cache, sup.desc(1, [1, 1])) == S.LLM_OUT_OF_MEMORY


@pytest.mark.rules("§3.3", "§15", "PR-34")
@pytest.mark.mock_only(reason="pool-backed AllocateCache/DeallocateCache/CopyKv* (PR-9): the vendor's C++ class answers FEATURE_NOT_ENABLED")
def test_pool_pages_are_64_kib_when_page_shift_is_not_given(engines: Engines) -> None:
    e = engines(1, options={native.OPTION_MOCK_NATIVE_POOL: "1", native.OPTION_MEM_POOL_CONFIG: '{"memory_size": 131072}'})   # 2 pages
    a = e.allocate_cache(sup.desc(1, [1, 1]))
    b = e.allocate_cache(sup.desc(1, [1, 1]))
    assert b.tensor_addrs[0] - a.tensor_addrs[0] == 65536
    assert sup.status_of(e.allocate_cache, sup.desc(1, [1, 1])) == S.LLM_OUT_OF_MEMORY


@pytest.mark.rules("E-2", "§1.2", "§3.4", "§3.6", "PR-9")
@pytest.mark.mock_only(reason="pool-backed AllocateCache/DeallocateCache/CopyKv* (PR-9): the vendor's C++ class answers FEATURE_NOT_ENABLED")
def test_the_pool_calls_are_feature_not_enabled_without_the_mock_option_and_a_pool_in_every_state(engines: Engines) -> None:
    e = engines(1, options={})
    arrays = zeros(1, (4, 4))
    a, b = sup.register(e, arrays), sup.register(e, zeros(1, (4, 4)))

    def pool_calls() -> list[int]:
        return [sup.status_of(e.allocate_cache, sup.desc(1, [1, 8])),
                sup.status_of(e.deallocate_cache, a),
                sup.status_of(e.copy_kv_cache, Cache(a), Cache(b)),
                sup.status_of(e.copy_kv_blocks, Cache(a), Cache(b), [0], [[1]])]

    nfe = [S.LLM_FEATURE_NOT_ENABLED] * 4
    assert pool_calls() == nfe                             # initialised without a pool
    e.finalize()
    assert pool_calls() == nfe                             # after Finalize
    e.initialize({native.OPTION_DEVICE_ID: "0", native.OPTION_MEM_POOL_CONFIG: POOL})
    assert pool_calls() == nfe                             # a pool alone: the vendor's class answer
    assert native.OPTION_MOCK_NATIVE_POOL in raw.last_error() and "PR-9" in raw.last_error()
    e.finalize()
    e.initialize({native.OPTION_DEVICE_ID: "0", native.OPTION_MOCK_NATIVE_POOL: "1"})
    assert pool_calls() == nfe                             # the option without a pool
    e.finalize()
    e.initialize({native.OPTION_DEVICE_ID: "0", native.OPTION_MOCK_NATIVE_POOL: "1", native.OPTION_MEM_POOL_CONFIG: POOL})
    assert e.allocate_cache(sup.desc(1, [1, 8])).cache_id == 1
    e.finalize()
    assert pool_calls() == nfe                             # after Finalize of an engine that had a pool
    assert "PR-9" in raw.last_error()


@pytest.mark.rules("§1.2", "PR-9")
@pytest.mark.mock_only(reason="llm_datadist_ffi.mock.NativePool is an option of the mock only (PR-9)")
@pytest.mark.parametrize("value", ["", "yes", "2"])
def test_the_native_pool_option_takes_0_or_1(engines: Engines, value: str) -> None:
    e = engines(1)
    assert sup.status_of(e.initialize, {native.OPTION_DEVICE_ID: "0", native.OPTION_MOCK_NATIVE_POOL: value}) == \
        S.LLM_PARAM_INVALID
    assert native.OPTION_MOCK_NATIVE_POOL in raw.last_error()


@pytest.mark.rules("§3.6", "§6.6", "§8.8")
@pytest.mark.mock_only(reason="pool-backed AllocateCache/DeallocateCache/CopyKv* (PR-9): the vendor's C++ class answers FEATURE_NOT_ENABLED")
def test_host_caches_come_from_the_host_pool(eng: native.LlmDataDist) -> None:
    h = eng.allocate_cache(sup.desc(2, [2, 2048], placement=0))
    assert sup.status_of(eng.allocate_cache, sup.desc(1, [1, 1], placement=0)) == S.LLM_OUT_OF_MEMORY
    d = eng.allocate_cache(sup.desc(2, [2, 2048]))
    assert h.cache_desc is not None and d.cache_desc is not None
    np.frombuffer(raw.ffi.buffer(raw.ffi.cast("char *", h.tensor_addrs[1]), 4096), np.uint8)[:] = 7
    eng.copy_kv_cache(h, d, 1, 0)                        # any placement pair
    got = np.frombuffer(raw.ffi.buffer(raw.ffi.cast("char *", d.tensor_addrs[1]), 4096), np.uint8)
    assert (got[:2048] == 7).all()


@pytest.mark.rules("§1.5", "§3.4", "§3.6")
@pytest.mark.mock_only(reason="pool-backed AllocateCache/DeallocateCache/CopyKv* (PR-9): the vendor's C++ class answers FEATURE_NOT_ENABLED")
def test_deallocate_of_unknown_and_registered_caches_succeeds_and_keeps_them(eng: native.LlmDataDist) -> None:
    src = [np.arange(8, dtype=np.uint8).reshape(2, 4)]
    dst = zeros(1, (2, 4))
    sid, did = sup.register(eng, src), sup.register(eng, dst)
    eng.deallocate_cache(sid)
    eng.deallocate_cache(999)
    eng.copy_kv_cache(Cache(sid), Cache(did), 1, 1)
    assert (dst[0][1] == src[0][1]).all()


@pytest.mark.rules("E-4", "§3.3", "§6.5", "§12.1", "§15", "cpp-api §6.2", "PR-34")
@pytest.mark.mock_only(reason="uses the mock's control interface (fault injection, serve delay, dropped connections, accounting)")
def test_pool_memory_is_tracked_as_acl_allocations(engines: Engines) -> None:
    before = mock_control.live_allocations()
    e = engines(1, options={native.OPTION_MOCK_NATIVE_POOL: "1", native.OPTION_MEM_POOL_CONFIG: POOL, native.OPTION_HOST_MEM_POOL_CONFIG: HOST_POOL})
    assert mock_control.live_allocations() == before + 1            # the device pool only
    e.allocate_cache(sup.desc(1, [1, 1]))
    assert mock_control.live_allocations() == before + 1
    e.finalize()
    assert mock_control.live_allocations() == before


# ---- CopyKvCache --------------------------------------------------------------------------

@pytest.mark.rules("§3.6", "§6.6", "§8.8")
@pytest.mark.mock_only(reason="pool-backed AllocateCache/DeallocateCache/CopyKv* (PR-9): the vendor's C++ class answers FEATURE_NOT_ENABLED")
def test_copy_kv_cache_copies_size_bytes_from_the_offset(eng: native.LlmDataDist) -> None:
    src = sup.random_arrays(2, (4, 16), 3)
    dst = zeros(2, (3, 32))
    sid, did = sup.register(eng, src), sup.register(eng, dst)
    eng.copy_kv_cache(Cache(sid), Cache(did), src_batch_index=2, dst_batch_index=1, offset=4, size=10)
    for s, d in zip(src, dst):
        expected = np.zeros((3, 32), np.uint8)
        expected[1, 4:14] = s[2, 4:14]
        assert (d == expected).all()
    eng.copy_kv_cache(Cache(sid), Cache(did), src_batch_index=3, dst_batch_index=0, offset=5)
    for s, d in zip(src, dst):
        assert (d[0, 5:16] == s[3, 5:]).all() and (d[0, :5] == 0).all() and (d[0, 16:] == 0).all()


@pytest.mark.rules("§3.6", "§6.6", "§7.4", "§8.8", "§8.12", "§15", "PR-24")
@pytest.mark.mock_only(reason="pool-backed AllocateCache/DeallocateCache/CopyKv* (PR-9): the vendor's C++ class answers FEATURE_NOT_ENABLED")
@pytest.mark.parametrize("args,status,words", [
    ((1, 2, 0, 0, 0, 0), S.LLM_PARAM_INVALID, "size 0"),
    ((1, 2, 0, 0, 0, -2), S.LLM_PARAM_INVALID, "size -2"),
    ((9, 2, 0, 0, 0, -1), S.LLM_KV_CACHE_NOT_EXIST, "src_cache"),
    ((9, 8, 0, 0, 0, -1), S.LLM_KV_CACHE_NOT_EXIST, "src_cache"),
    ((1, 8, 0, 0, 0, -1), S.LLM_KV_CACHE_NOT_EXIST, "dst_cache"),
    ((1, 3, 0, 0, 0, -1), S.LLM_PARAM_INVALID, "tensors"),
    ((1, 2, 4, 0, 0, -1), S.LLM_PARAM_INVALID, "src_batch_index"),
    ((1, 2, 0, 2, 0, -1), S.LLM_PARAM_INVALID, "dst_batch_index"),
    ((1, 2, 0, 0, 16, -1), S.LLM_PARAM_INVALID, "offset"),
    ((1, 2, 0, 0, 8, 9), S.LLM_PARAM_INVALID, "do not fit"),
    ((2, 1, 0, 0, 0, 17), S.LLM_PARAM_INVALID, "do not fit"),
    ((1, 1, 0, 0, 0, -1), S.LLM_PARAM_INVALID, "PR-24"),
    ((1, 1, 2, 2, 4, 3), S.LLM_PARAM_INVALID, "PR-24"),
])
def test_copy_kv_cache_checks(eng: native.LlmDataDist, args: tuple[int, ...], status: int, words: str) -> None:
    src = sup.random_arrays(2, (4, 16), 1)                 # id 1: 4 batches of 16 bytes
    dst = zeros(2, (2, 32))                                # id 2: 2 batches of 32 bytes
    odd = zeros(3, (2, 32))                                # id 3: 3 tensors
    for arrays in (src, dst, odd):
        sup.register(eng, arrays)
    before = [a.copy() for a in src + dst]
    s, d, sb, db, off, size = args
    assert sup.status_of(eng.copy_kv_cache, Cache(s), Cache(d), sb, db, off, size) == status
    assert words in raw.last_error()
    assert all((a == b).all() for a, b in zip(src + dst, before))


@pytest.mark.rules("§7.4", "PR-24")
@pytest.mark.mock_only(reason="pool-backed AllocateCache/DeallocateCache/CopyKv* (PR-9): the vendor's C++ class answers FEATURE_NOT_ENABLED")
def test_copy_kv_cache_within_one_cache_needs_disjoint_ranges(eng: native.LlmDataDist) -> None:
    arrays = sup.random_arrays(1, (4, 16), 9)
    before = arrays[0].copy()
    cid = sup.register(eng, arrays)
    eng.copy_kv_cache(Cache(cid), Cache(cid), 1, 0, 4, 12)
    expected = before.copy()
    expected[0, 4:] = before[1, 4:]
    assert (arrays[0] == expected).all()


# ---- CopyKvBlocks -------------------------------------------------------------------------

@pytest.mark.rules("§3.6", "§7.2", "§7.4", "§8.9", "PR-5")
@pytest.mark.mock_only(reason="pool-backed AllocateCache/DeallocateCache/CopyKv* (PR-9): the vendor's C++ class answers FEATURE_NOT_ENABLED")
def test_copy_kv_blocks_copies_each_list(eng: native.LlmDataDist) -> None:
    src = sup.random_arrays(2, (8, 8), 4)
    dst = zeros(2, (8, 8))
    sid, did = sup.register(eng, src), sup.register(eng, dst)
    eng.copy_kv_blocks(Cache(sid), Cache(did), [1, 2, 3, 1], [[0, 1, 2, 7], [4, 5, 6, 3]])
    for s, d in zip(src, dst):
        assert (d[[0, 1, 2, 7, 4, 5, 6, 3]] == s[[1, 2, 3, 1, 1, 2, 3, 1]]).all()


@pytest.mark.rules("§7.4", "PR-24")
@pytest.mark.mock_only(reason="pool-backed AllocateCache/DeallocateCache/CopyKv* (PR-9): the vendor's C++ class answers FEATURE_NOT_ENABLED")
def test_copy_kv_blocks_within_one_cache(eng: native.LlmDataDist) -> None:
    arrays = sup.random_arrays(1, (6, 4), 5)
    before = arrays[0].copy()
    cid = sup.register(eng, arrays)
    eng.copy_kv_blocks(Cache(cid), Cache(cid), [0, 1], [[2, 3], [4, 5]])
    assert (arrays[0] == before[[0, 1, 0, 1, 0, 1]]).all()


def _flat_copy(e: native.LlmDataDist, s: int, d: int, src_blocks: list[int], lists: list[list[int]]) -> int:
    flat = [b for lst in lists for b in lst]
    lens = raw.ffi.new("size_t[]", [len(lst) for lst in lists]) if lists else raw.ffi.NULL
    return int(raw.lib.lldd_copy_kv_blocks(e._engine(), raw.cache(s), raw.cache(d), raw.blocks(src_blocks),
                                           len(src_blocks), raw.blocks(flat), lens, len(lists)))


@pytest.mark.rules("§3.6", "§7.2", "§7.3", "§7.4", "§8.9", "§8.12", "PR-4", "PR-24")
@pytest.mark.mock_only(reason="pool-backed AllocateCache/DeallocateCache/CopyKv* (PR-9): the vendor's C++ class answers FEATURE_NOT_ENABLED")
@pytest.mark.parametrize("s,d,src_blocks,lists,status,words", [
    (1, 2, [], [[0]], S.LLM_PARAM_INVALID, "src_blocks is empty"),
    (1, 2, [0], [], S.LLM_PARAM_INVALID, "dst_blocks_list is empty"),
    (1, 2, [0, 1], [[0, 1], [2]], S.LLM_PARAM_INVALID, "dst_blocks_list[1]"),
    (9, 2, [0], [[0]], S.LLM_KV_CACHE_NOT_EXIST, "src_cache"),
    (1, 9, [0], [[0]], S.LLM_KV_CACHE_NOT_EXIST, "dst_cache"),
    (1, 3, [0], [[0]], S.LLM_PARAM_INVALID, "tensors"),
    (1, 4, [0], [[0]], S.LLM_PARAM_INVALID, "block sizes differ"),
    (1, 2, [8], [[0]], S.LLM_PARAM_INVALID, "src_blocks[0]"),
    (1, 2, [0, 1], [[0, 4]], S.LLM_PARAM_INVALID, "out of range"),
    (1, 1, [0, 1], [[1, 2]], S.LLM_PARAM_INVALID, "PR-24"),
])
def test_copy_kv_blocks_checks(eng: native.LlmDataDist, s: int, d: int, src_blocks: list[int],
                               lists: list[list[int]], status: int, words: str) -> None:
    src = sup.random_arrays(2, (8, 8), 1)      # id 1: 8 blocks of 8 bytes
    dst = zeros(2, (4, 8))                     # id 2: 4 blocks of 8 bytes
    odd = zeros(3, (4, 8))                     # id 3: 3 tensors
    wide = zeros(2, (4, 16))                   # id 4: blocks of 16 bytes
    for arrays in (src, dst, odd, wide):
        sup.register(eng, arrays)
    before = [a.copy() for a in src + dst]
    assert _flat_copy(eng, s, d, src_blocks, lists) == status
    assert words in raw.last_error()
    assert all((a == b).all() for a, b in zip(src + dst, before))


@pytest.mark.rules("§7.4", "PR-5")
@pytest.mark.mock_only(reason="pool-backed AllocateCache/DeallocateCache/CopyKv* (PR-9): the vendor's C++ class answers FEATURE_NOT_ENABLED")
@pytest.mark.parametrize("lists,expected_dst_blocks", [
    ([[2, 2]], [0, 0, 2, 0]),                 # block 2 gets source block 0, then source block 1
    ([[2, 3], [1, 2]], [0, 1, 2, 2]),         # list 0 writes 2 and 3; list 1 writes 1 and rewrites 2
])
def test_copy_kv_blocks_writes_a_repeated_destination_last_in_list_order_with_a_lint(
        eng: native.LlmDataDist, lists: list[list[int]], expected_dst_blocks: list[int]) -> None:
    # PR-5: block b of the source holds the value b + 1; 0 marks a block never written
    src = [np.repeat(np.arange(1, 5, dtype=np.uint8)[:, None], 4, axis=1) for _ in range(2)]
    dst = zeros(2, (4, 4))
    sid, did = sup.register(eng, src), sup.register(eng, dst)
    with pytest.warns(lint.RepeatedDestinationBlockWarning, match="PR-5") as record:
        eng.copy_kv_blocks(Cache(sid), Cache(did), [0, 1], lists)
    assert len(record) == 1
    for d in dst:
        assert d[:, 0].tolist() == expected_dst_blocks and (d == d[:, :1]).all()
    raw.take_lints()
    assert _flat_copy(eng, sid, did, [0, 1], lists) == S.LLM_SUCCESS      # C callers: the engine's record
    assert [rule for rule, _ in raw.take_lints()] == [5]


@pytest.mark.rules("§7.4", "PR-5")
@pytest.mark.mock_only(reason="uses the mock's control interface (fault injection, serve delay, dropped connections, accounting)")
def test_strict_mode_refuses_repeated_copy_destinations_in_python_first(eng: native.LlmDataDist,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    # strict PR-5 is decided before any backend call, so an injected fault of the
    # backend function is still armed afterwards; the engine refuses C callers itself
    src, dst = sup.register(eng, zeros(1, (4, 4))), sup.register(eng, zeros(1, (4, 4)))
    monkeypatch.setenv(lint.STRICT_ENV, "1")
    with mock_control.fault("lldd_copy_kv_blocks", S.LLM_WAIT_PROCESS_TIMEOUT):
        with pytest.raises(LLMException) as info:
            eng.copy_kv_blocks(Cache(src), Cache(dst), [0, 1], [[2, 3], [3, 0]])
        assert info.value.status_code == S.LLM_PARAM_INVALID and "(PR-5;" in str(info.value)
        assert _flat_copy(eng, src, dst, [0], [[1]]) == S.LLM_WAIT_PROCESS_TIMEOUT
    marked = sup.random_arrays(1, (4, 4), 3)
    target = zeros(1, (4, 4))
    mid, tid = sup.register(eng, marked), sup.register(eng, target)
    assert _flat_copy(eng, mid, tid, [0, 1], [[2, 2]]) == S.LLM_PARAM_INVALID
    assert "(PR-5)" in raw.last_error() and not target[0].any()


@pytest.mark.rules("§3.6", "§7.2", "§8.9")
@pytest.mark.mock_only(reason="pool-backed AllocateCache/DeallocateCache/CopyKv* (PR-9): the vendor's C++ class answers FEATURE_NOT_ENABLED")
def test_copy_kv_blocks_with_large_lists(eng: native.LlmDataDist) -> None:
    n = 100_000
    src = sup.random_arrays(2, (n, 2), 6)
    dst = zeros(2, (n, 2))
    sid, did = sup.register(eng, src), sup.register(eng, dst)
    order = np.random.default_rng(0).permutation(n).astype(np.uint64)
    eng.copy_kv_blocks(Cache(sid), Cache(did), np.arange(n, dtype=np.uint64), [order])
    for s, d in zip(src, dst):
        assert (d[order] == s).all()
