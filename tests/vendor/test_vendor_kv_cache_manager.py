"""KvCacheManager (docs/reference/python-api.md §12, the v1 generation) row by row, and the seed's
``pull_cache`` between two processes.

v1 is the generation in which the library allocates every cache: a Prompt allocates
with request (or prefix) keys, writes, and deallocates at once — the keys keep the
memory alive until the Decoder's pull consumes them. The two-process tests check
every destination byte of ``pull_cache`` by ``CacheKey`` and by
``CacheKeyByIdAndIndex`` with ``batch_index``, ``size``, layer ranges,
``tensor_num_per_layer`` and both offsets, and of ``pull_blocks``.
"""
from __future__ import annotations

import ctypes
import gc
import threading
from typing import Any, Iterator, List, Optional, Tuple

import numpy as np
import pytest

from llm_datadist_ffi import LLMException, LLMStatusCode
from llm_datadist_ffi._vendor.v1.tensor import Tensor
from llm_datadist_ffi.vendor import (
    BlocksCacheKey, CacheDesc, CacheKey, CacheKeyByIdAndIndex, DataType, KvCache, LayerSynchronizer, LLMDataDist,
    LLMRole, Placement, TransferConfig, TransferWithCacheKeyConfig,
)
from llm_datadist_ffi._vendor.v1.cache_manager import KvCacheManager

import vendor_support as vs
from lint_support import lenient, strict

# The vendor-compatible API runs on the extension functions (include/lldd/ext.h): keys, cache
# kinds and modes that the public C++ class cannot express, so the ascend shim answers
# LLM_FEATURE_NOT_ENABLED for them (docs/ascend.md).
pytestmark = [pytest.mark.mock_only(reason="the vendor-compatible API needs the mock's extension functions"),
              pytest.mark.usefixtures("no_engine_left")]


@pytest.fixture(autouse=True)
def _device_behaviour_unless_a_test_asks_for_strict(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests here check the device's behaviour with its lint, or call ``strict()`` for the
    refusal: a strict mode set for the whole run must not change which one they see."""
    lenient(monkeypatch)


raises, lx, fill = vs.raises, vs.lx, vs.fill
S = LLMStatusCode
U64_MAX = 2**64 - 1
P_ID, D_ID = 1, 2


def engine(role: LLMRole, **extra: str) -> LLMDataDist:
    made = LLMDataDist(role, P_ID if role is LLMRole.PROMPT else D_ID)
    port = vs.free_port() if role is LLMRole.PROMPT else None
    made.init(vs.v1_options(port, **extra))
    return made


@pytest.fixture
def decoder() -> Iterator[KvCacheManager]:
    made = engine(LLMRole.DECODER)
    yield made.kv_cache_manager
    made.finalize()


@pytest.fixture
def prompt() -> Iterator[KvCacheManager]:
    made = engine(LLMRole.PROMPT)
    yield made.kv_cache_manager
    made.finalize()


def desc(num: int = 4, shape: Tuple[int, ...] = (2, 256), placement: Placement = Placement.DEVICE,
         **kwargs: Any) -> CacheDesc:
    return CacheDesc(num, list(shape), DataType.DT_UINT8, placement, **kwargs)


def write(cache: KvCache, tensor: int, data: bytes) -> None:
    ctypes.memmove(cache.per_device_tensor_addrs[0][tensor], data, len(data))


def read(cache: KvCache, tensor: int, nbytes: int) -> bytes:
    return ctypes.string_at(cache.per_device_tensor_addrs[0][tensor], nbytes)


def not_yet_link(call: Any) -> None:
    raises(LLMException, call, status=S.LLM_NOT_YET_LINK)


# ---------------------------------------------------------------------------
# allocation, deallocation, keys
# ---------------------------------------------------------------------------


def test_allocate_cache_returns_a_kv_cache_with_one_address_list_per_device(decoder: KvCacheManager) -> None:
    d = desc()
    cache = decoder.allocate_cache(d)
    assert isinstance(cache, KvCache)
    assert cache.cache_id == 1 and cache.cache_desc is d
    assert len(cache.per_device_tensor_addrs) == 1 and len(cache.per_device_tensor_addrs[0]) == 4
    assert cache._kv_cache_manager is decoder
    decoder.deallocate_cache(cache)
    assert cache.per_device_tensor_addrs == []


def test_allocate_cache_checks_in_the_vendor_order(decoder: KvCacheManager) -> None:
    raises(TypeError, lambda: decoder.allocate_cache("d"), "cache_desc")  # type: ignore[arg-type]
    raises(TypeError, lambda: decoder.allocate_cache(desc(), [BlocksCacheKey(1)]), "cache_keys[0]")  # type: ignore
    raises(AttributeError, lambda: decoder.allocate_cache(None), "cache_desc")  # type: ignore[arg-type]
    lx(lambda: decoder.allocate_cache(desc(0)), "num_tensors")
    lx(lambda: decoder.allocate_cache(desc(placement=Placement.HOST)), "Only support allocate device cache")
    lx(lambda: decoder.allocate_cache(desc(), [CacheKey(1, 1)]), "LLMRole.PROMPT")
    with vs.strict_mode():
        lx(lambda: decoder.allocate_cache(desc(shape=(256, 2), batch_dim_index=1)), "PR-18")
    odd = vs.linted("PR-18", lambda: decoder.allocate_cache(desc(shape=(256, 2), batch_dim_index=1)))
    decoder.deallocate_cache(odd)
    # num_tensors (step 3) before placement (step 4) before the role (step 5)
    lx(lambda: decoder.allocate_cache(desc(0, placement=Placement.HOST), [CacheKey(1, 1)]), "num_tensors")


def test_allocate_blocks_cache_with_a_key_is_not_for_a_decoder(decoder: KvCacheManager) -> None:
    raises(TypeError, lambda: decoder.allocate_blocks_cache(desc(), CacheKey(1, 1)), "blocks_cache_key")  # type: ignore
    lx(lambda: decoder.allocate_blocks_cache(desc(placement=Placement.HOST)), "device")
    lx(lambda: decoder.allocate_blocks_cache(desc(), BlocksCacheKey(2)), "LLMRole.DECODER")
    assert decoder.allocate_blocks_cache(desc()).cache_id == 1


def test_a_prompt_allocates_with_keys_and_the_last_duplicate_wins(prompt: KvCacheManager) -> None:
    cache = prompt.allocate_cache(desc(), [CacheKey(1, 5), CacheKey(1, 5)])
    assert cache.cache_id == 1
    raises(LLMException, lambda: prompt.allocate_cache(desc(), [CacheKey(1, 5)]), status=S.LLM_FAILED)
    blocks = prompt.allocate_blocks_cache(desc(), BlocksCacheKey(1, 0))
    assert blocks.cache_id == 3


def test_the_pool_runs_out_as_device_out_of_memory(decoder: KvCacheManager) -> None:
    raises(LLMException, lambda: decoder.allocate_cache(desc(1, (1024, 131072))), status=S.LLM_DEVICE_OUT_OF_MEMORY)


def test_a_kv_cache_that_goes_out_of_scope_frees_its_memory(decoder: KvCacheManager) -> None:
    big = desc(1, (1024, 40960))        # 40 MiB of a 64 MiB pool
    for _ in range(3):
        cache = decoder.allocate_cache(big)
        del cache
        gc.collect()
    kept = decoder.allocate_cache(big)
    raises(LLMException, lambda: decoder.allocate_cache(big), status=S.LLM_DEVICE_OUT_OF_MEMORY)
    decoder.deallocate_cache(kept)


def test_deallocate_cache_checks_and_reports_an_unknown_id(decoder: KvCacheManager) -> None:
    raises(TypeError, lambda: decoder.deallocate_cache(1), "cache")  # type: ignore[arg-type]
    raises(AttributeError, lambda: decoder.deallocate_cache(None), "cache")  # type: ignore[arg-type]
    host = KvCache.create_cpu_cache(desc(placement=Placement.HOST), [1, 2, 3, 4])
    lx(lambda: decoder.deallocate_cache(host), "Only support device cache")
    stranger = KvCache(77, desc(), [[1, 2, 3, 4]], None)
    raises(LLMException, lambda: decoder.deallocate_cache(stranger), status=S.LLM_KV_CACHE_NOT_EXIST)


def test_remove_cache_key_is_for_a_prompt_and_applies_the_validity_rule(decoder: KvCacheManager) -> None:
    lx(lambda: decoder.remove_cache_key(CacheKey(1, 1)), "[remove_cache_key] is not supported by LLMRole.DECODER")
    # the role is checked before the type
    lx(lambda: decoder.remove_cache_key("key"), "is not supported by LLMRole.DECODER")  # type: ignore[arg-type]


def test_remove_cache_key_on_a_prompt(prompt: KvCacheManager) -> None:
    raises(TypeError, lambda: prompt.remove_cache_key(CacheKeyByIdAndIndex(1, 1)), "cache_key")  # type: ignore
    with vs.strict_mode():
        lx(lambda: prompt.remove_cache_key(CacheKey(1, U64_MAX)), "PR-41")
    assert vs.linted("PR-41", lambda: prompt.remove_cache_key(CacheKey(1, U64_MAX))) is None
    assert prompt.remove_cache_key(CacheKey(1, 1234)) is None


# ---------------------------------------------------------------------------
# pull_cache and pull_blocks: Python-side checks
# ---------------------------------------------------------------------------


def test_pull_cache_rejects_keywords_it_does_not_read_before_anything_else(prompt: KvCacheManager, monkeypatch: pytest.MonkeyPatch) -> None:
    strict(monkeypatch)          # the old refusals of the lint rules (docs/semantics.md §0)
    lx(lambda: prompt.pull_cache(None, None, src_offset=1), "'src_offset'")  # type: ignore[arg-type]


def test_pull_cache_is_for_a_decoder_only() -> None:
    for role in (LLMRole.PROMPT, LLMRole.MIX):
        made = engine(role)
        try:
            lx(lambda: made.kv_cache_manager.pull_cache(CacheKey(1, 1), None),  # type: ignore[arg-type]
               f"[pull_cache] is not supported by {role}")
            lx(lambda: made.kv_cache_manager.pull_blocks(BlocksCacheKey(1), None, [0], [0]),  # type: ignore
               f"[pull_blocks] is not supported by {role}")
        finally:
            made.finalize()


def test_pull_cache_checks_in_the_vendor_order(decoder: KvCacheManager, monkeypatch: pytest.MonkeyPatch) -> None:
    strict(monkeypatch)          # the old refusals of the lint rules (docs/semantics.md §0)
    cache = decoder.allocate_cache(desc())
    key = CacheKey(P_ID, 10)
    raises(TypeError, lambda: decoder.pull_cache(BlocksCacheKey(1), cache), "cache_key")  # type: ignore[arg-type]
    raises(TypeError, lambda: decoder.pull_cache(key, "cache"), "kv_cache")  # type: ignore[arg-type]
    host = KvCache.create_cpu_cache(desc(placement=Placement.HOST), [1, 2, 3, 4])
    lx(lambda: decoder.pull_cache(key, host), "Only support device cache")
    raises(AttributeError, lambda: decoder.pull_cache(key, None), "kv_cache")  # type: ignore[arg-type]
    raises(ValueError, lambda: decoder.pull_cache(key, cache, -1, 2**63), "size")
    raises(ValueError, lambda: decoder.pull_cache(key, cache, -1), "batch_index")
    lx(lambda: decoder.pull_cache(key, cache, 0, 0), "size")
    raises(TypeError, lambda: decoder.pull_cache(key, cache, src_cache_offset="1"), "src_cache_offset")
    raises(ValueError, lambda: decoder.pull_cache(key, cache, src_cache_offset=-1), "should be >= 0")
    raises(ValueError, lambda: decoder.pull_cache(key, cache, dst_cache_offset=-3), "should be >= 0")
    raises(ValueError, lambda: decoder.pull_cache(key, cache, dst_cache_offset=2**63), "dst_cache_offset")
    lx(lambda: decoder.pull_cache(CacheKey(1, U64_MAX), cache), "one of req id")
    lx(lambda: decoder.pull_cache(key, cache, tensor_num_per_layer=0), "tensor_num_per_layer")
    lx(lambda: decoder.pull_cache(key, cache, src_layer_range=range(2, 2)), "is empty (PR-2")
    # v1 has no divisibility check and no upper bound on tensor_num_per_layer: the pulls go on
    not_yet_link(lambda: decoder.pull_cache(key, cache, src_layer_range=range(0, 1), dst_layer_range=range(0, 1),
                                            tensor_num_per_layer=3))
    lx(lambda: decoder.pull_cache(key, cache, src_layer_range=range(0, 1), tensor_num_per_layer=3),
       "without dst_layer_range all 4 local tensors receive")
    not_yet_link(lambda: decoder.pull_cache(key, cache, tensor_num_per_layer=5))
    raises(AttributeError, lambda: decoder.pull_cache(None, cache), "cache_key")  # type: ignore[arg-type]
    # the offsets (step 8) come before the key validity rule (step 9)
    raises(ValueError, lambda: decoder.pull_cache(CacheKey(1, U64_MAX), cache, src_cache_offset=-1), "should be")
    not_yet_link(lambda: decoder.pull_cache(key, cache, 1, 64, src_cache_offset=0, dst_cache_offset=8))
    not_yet_link(lambda: decoder.pull_cache(CacheKeyByIdAndIndex(P_ID, 1, 1), cache, tensor_num_per_layer=3))


def test_pull_cache_offsets_given_as_none_count_as_not_given(decoder: KvCacheManager) -> None:
    cache = decoder.allocate_cache(desc())
    not_yet_link(lambda: decoder.pull_cache(CacheKey(P_ID, 10), cache, src_cache_offset=None))
    not_yet_link(lambda: decoder.pull_cache(CacheKey(P_ID, 10), cache, dst_cache_offset=None))
    not_yet_link(lambda: decoder.pull_cache(CacheKey(P_ID, 10), cache, 0, 64, src_cache_offset=None,
                                            dst_cache_offset=None))


def test_pull_cache_with_a_none_key_fails_where_the_vendor_packs_it(decoder: KvCacheManager) -> None:
    cache = decoder.allocate_cache(desc())
    # v1 packs the key right after the offsets: before tensor_num_per_layer and the ranges
    raises(AttributeError, lambda: decoder.pull_cache(None, cache, tensor_num_per_layer=0), "cache_key")  # type: ignore
    raises(AttributeError, lambda: decoder.pull_cache(None, cache, tensor_num_per_layer=-1), "cache_key")  # type: ignore
    raises(AttributeError, lambda: decoder.pull_cache(None, cache, src_layer_range=range(0, 2, 2)),  # type: ignore
           "cache_key")
    # the offsets come before it
    raises(ValueError, lambda: decoder.pull_cache(None, cache, src_cache_offset=-1), "should be >= 0")  # type: ignore


def test_pull_blocks_with_a_none_block_list_is_a_type_error(decoder: KvCacheManager) -> None:
    cache = decoder.allocate_blocks_cache(desc(shape=(8, 64)))
    raises(TypeError, lambda: decoder.pull_blocks(BlocksCacheKey(P_ID), cache, None, [0]), "prompt_blocks")
    raises(TypeError, lambda: decoder.pull_blocks(BlocksCacheKey(P_ID), cache, [0], None), "decoder_blocks")


def test_pull_blocks_packs_a_none_key_last_as_the_vendor_does(decoder: KvCacheManager) -> None:
    cache = decoder.allocate_blocks_cache(desc(shape=(8, 64)))
    lx(lambda: decoder.pull_blocks(None, cache, [0], [0], src_layer_range=range(0, 2, 2)), "step")  # type: ignore
    raises(AttributeError, lambda: decoder.pull_blocks(None, cache, [0], [0]), "prompt_cache_key")  # type: ignore


def test_a_v1_pull_from_the_own_cluster_id_runs_the_local_checks_then_finds_no_link(
        decoder: KvCacheManager) -> None:
    # v1 has no own-cluster check (the vendor's v1 samples give both engines cluster id 0)
    cache = decoder.allocate_cache(desc())
    blocks = decoder.allocate_blocks_cache(desc(shape=(8, 64)))
    not_yet_link(lambda: decoder.pull_cache(CacheKey(D_ID, 10), cache))
    not_yet_link(lambda: decoder.pull_cache(CacheKeyByIdAndIndex(D_ID, 1), cache))
    not_yet_link(lambda: decoder.pull_blocks(BlocksCacheKey(D_ID), blocks, [0], [1]))
    # the local checks come first: a batch index past the local cache
    lx(lambda: decoder.pull_cache(CacheKey(D_ID, 10), cache, 5))


def test_pull_blocks_checks_in_the_vendor_order(decoder: KvCacheManager, monkeypatch: pytest.MonkeyPatch) -> None:
    strict(monkeypatch)          # the old refusals of the lint rules (docs/semantics.md §0)
    cache = decoder.allocate_blocks_cache(desc(shape=(8, 64)))
    key = BlocksCacheKey(P_ID)
    lx(lambda: decoder.pull_blocks(key, cache, [0], [0], src_cache_offset=0), "'src_cache_offset'")
    raises(TypeError, lambda: decoder.pull_blocks(CacheKey(1, 1), cache, [0], [0]), "prompt_cache_key")  # type: ignore
    raises(TypeError, lambda: decoder.pull_blocks(key, 3, [0], [0]), "decoder_kv_cache")  # type: ignore[arg-type]
    raises(TypeError, lambda: decoder.pull_blocks(key, cache, (0,), [0]), "prompt_blocks")  # type: ignore[arg-type]
    raises(TypeError, lambda: decoder.pull_blocks(key, cache, [0], (0,)), "decoder_blocks")  # type: ignore[arg-type]
    host = KvCache.create_cpu_cache(desc(placement=Placement.HOST, shape=(8, 64)), [1, 2, 3, 4])
    lx(lambda: decoder.pull_blocks(key, host, [0], [0]), "Only support device cache")
    lx(lambda: decoder.pull_blocks(key, cache, [], [0]), "prompt_blocks must not be empty")
    lx(lambda: decoder.pull_blocks(key, cache, [0], []), "decoder_blocks must not be empty")
    lx(lambda: decoder.pull_blocks(key, cache, [0, 1], [0]), "same length")
    lx(lambda: decoder.pull_blocks(key, cache, [0], [0], tensor_num_per_layer=0), "tensor_num_per_layer")
    lx(lambda: decoder.pull_blocks(key, cache, [0], [0], dst_layer_range=range(1, 0)), "is empty (PR-2")
    lx(lambda: decoder.pull_blocks(key, cache, [0, 1], [3, 3]), "PR-5")
    not_yet_link(lambda: decoder.pull_blocks(key, cache, [0, 1], [3, 4]))
    not_yet_link(lambda: decoder.pull_blocks(key, cache, np.array([0, 1]), np.array([3, 4], dtype=np.uint64)))


# ---------------------------------------------------------------------------
# copies, swaps, tensors
# ---------------------------------------------------------------------------


def test_copy_cache_checks_in_the_vendor_order(decoder: KvCacheManager) -> None:
    a = decoder.allocate_cache(desc())
    b = decoder.allocate_cache(desc())
    host = KvCache.create_cpu_cache(desc(placement=Placement.HOST), [1, 2, 3, 4])
    raises(TypeError, lambda: decoder.copy_cache("a", b), "dst")  # type: ignore[arg-type]
    lx(lambda: decoder.copy_cache(host, "b"), "dst cache must be a device cache")  # type: ignore[arg-type]
    raises(TypeError, lambda: decoder.copy_cache(a, "b"), "src")  # type: ignore[arg-type]
    lx(lambda: decoder.copy_cache(a, host), "src cache must be a device cache")
    raises(ValueError, lambda: decoder.copy_cache(a, b, -1), "dst_batch_index")
    raises(ValueError, lambda: decoder.copy_cache(a, b, 0, -1), "src_batch_index")
    raises(ValueError, lambda: decoder.copy_cache(a, b, offset=-1), "offset")
    raises(ValueError, lambda: decoder.copy_cache(a, b, size=2**63), "size")
    lx(lambda: decoder.copy_cache(a, b, size=0), "size")
    raises(TypeError, lambda: decoder.copy_cache(a, b, req_id="7"), "req_id")  # type: ignore[arg-type]


def test_copy_cache_copies_a_range_and_takes_any_int_req_id(decoder: KvCacheManager) -> None:
    src = decoder.allocate_cache(desc(2, (2, 256)))
    dst = decoder.allocate_cache(desc(2, (2, 256)))
    for t in range(2):
        write(src, t, fill(20 + t, 512).tobytes())
        write(dst, t, bytes(512))
    decoder.copy_cache(dst, src, 1, 0, 100, 50, req_id=-5)
    for t in range(2):
        expected = bytearray(512)
        expected[256 + 100:256 + 150] = fill(20 + t, 512).tobytes()[100:150]
        assert read(dst, t, 512) == bytes(expected)


def test_copy_blocks_checks_indexes_as_uint64_and_copies(decoder: KvCacheManager) -> None:
    cache = decoder.allocate_blocks_cache(desc(2, (4, 64)))
    host = KvCache.create_cpu_cache(desc(2, (4, 64), Placement.HOST), [1, 2])
    raises(TypeError, lambda: decoder.copy_blocks([], {0: [1]}), "cache")  # type: ignore[arg-type]
    raises(TypeError, lambda: decoder.copy_blocks(cache, {0: 1}), "copy_block_info[0]")  # type: ignore[dict-item]
    lx(lambda: decoder.copy_blocks(host, {0: [1]}), "Only support device cache")
    raises(ValueError, lambda: decoder.copy_blocks(cache, {-1: [1]}), "source block")
    raises(ValueError, lambda: decoder.copy_blocks(cache, {0: [2**64]}), "destination block")
    with vs.strict_mode():
        lx(lambda: decoder.copy_blocks(cache, {1: []}), "PR-25")
        lx(lambda: decoder.copy_blocks(cache, {0: [3], 1: [3]}), "PR-5")
    for t in range(2):
        write(cache, t, fill(30 + t, 256).tobytes())
    decoder.copy_blocks(cache, {1: [3], 0: [2]})
    for t in range(2):
        source = fill(30 + t, 256).tobytes()
        assert read(cache, t, 256) == source[:128] + source[:64] + source[64:128]
    vs.linted("PR-25", lambda: decoder.copy_blocks(cache, {1: []}))      # block 0 onto itself
    vs.linted("PR-5", lambda: decoder.copy_blocks(cache, {1: [3], 0: [3]}))
    for t in range(2):                                                    # (0, 3) is the last write
        source = fill(30 + t, 256).tobytes()
        assert read(cache, t, 256) == source[:128] + source[:64] + source[:64]


def test_swap_blocks_moves_blocks_through_a_cpu_kv_cache(decoder: KvCacheManager) -> None:
    device = decoder.allocate_cache(desc(2, (4, 64)))
    for t in range(2):
        write(device, t, bytes(256))
    host_memory = [fill(40 + t, (4, 64)) for t in range(2)]
    host = KvCache.create_cpu_cache(desc(2, (4, 64), Placement.HOST), [[a.ctypes.data for a in host_memory]])
    lx(lambda: decoder.swap_blocks(device, device, {0: 0}), "HOST->DEVICE or DEVICE->HOST")
    with vs.strict_mode():
        lx(lambda: decoder.swap_blocks(host, device, {}), "PR-25")
    vs.linted("PR-25", lambda: decoder.swap_blocks(host, device, {}))
    assert all(read(device, t, 256) == bytes(256) for t in range(2))
    decoder.swap_blocks(host, device, {1: 0, 2: 1})
    for t in range(2):
        assert read(device, t, 256) == host_memory[t][1:3].tobytes() + bytes(128)
    host_memory[0][:] = 0
    decoder.swap_blocks(device, host, {0: 3})
    assert host_memory[0][3].tobytes() == fill(40, (4, 64))[1].tobytes()


def test_get_cache_tensors_checks_and_reads_the_cache_memory(decoder: KvCacheManager) -> None:
    cache = decoder.allocate_cache(CacheDesc(3, [2, 8], DataType.DT_FLOAT16))
    raises(TypeError, lambda: decoder.get_cache_tensors("c"), "cache")  # type: ignore[arg-type]
    raises(TypeError, lambda: decoder.get_cache_tensors(cache, "1"), "tensor_index")  # type: ignore[arg-type]
    raises(ValueError, lambda: decoder.get_cache_tensors(cache, 2**31), "tensor_index")
    lx(lambda: decoder.get_cache_tensors(cache, 3), "tensor_index 3")
    lx(lambda: decoder.get_cache_tensors(cache, -1), "tensor_index -1")
    values = np.arange(16, dtype=np.float16).reshape(2, 8)
    write(cache, 2, values.tobytes())
    tensors = decoder.get_cache_tensors(cache, 2)
    assert len(tensors) == 1 and isinstance(tensors[0], Tensor)
    array = tensors[0].numpy()
    assert array.dtype == np.float16 and array.shape == (2, 8)
    assert array.tobytes() == values.tobytes()
    decoder.deallocate_cache(cache)
    raises(LLMException, lambda: decoder.get_cache_tensors(cache), status=S.LLM_KV_CACHE_NOT_EXIST)


def test_check_cache_key_is_static_on_the_v1_manager() -> None:
    lx(lambda: KvCacheManager.check_cache_key(CacheKey(1, 1, prefix_id=2)), "only one of req id")


# ---------------------------------------------------------------------------
# transfer_cache_async (v1)
# ---------------------------------------------------------------------------


class Gate(LayerSynchronizer):
    def __init__(self) -> None:
        self.event = threading.Event()

    def synchronize_layer(self, layer_index: int, timeout_in_millis: Optional[int]) -> bool:
        return self.event.wait(30)


def test_transfer_cache_async_is_for_a_prompt_with_transfer_configs(decoder: KvCacheManager) -> None:
    cache = decoder.allocate_cache(desc())
    lx(lambda: decoder.transfer_cache_async(cache, Gate(), []), "[transfer_cache_async] is not supported by "
                                                                "LLMRole.DECODER")


def test_v1_transfer_cache_async_checks_and_reports_wait_process_timeout(prompt: KvCacheManager) -> None:
    cache = prompt.allocate_cache(desc())
    raises(TypeError, lambda: prompt.transfer_cache_async(None, Gate(), []), "src_cache")  # type: ignore[arg-type]
    keyed = TransferWithCacheKeyConfig(BlocksCacheKey(2), range(0, 1), range(0, 1))
    raises(TypeError, lambda: prompt.transfer_cache_async(cache, Gate(), [keyed]), "transfer_configs[0]")
    gate = Gate()
    task = prompt.transfer_cache_async(cache, gate, [TransferConfig(D_ID, [4096, 8192], range(0, 1))])
    assert task.synchronize(10) == S.LLM_WAIT_PROCESS_TIMEOUT
    assert task.get_results(10) == [S.LLM_WAIT_PROCESS_TIMEOUT]
    gate.event.set()
    assert task.synchronize() == S.LLM_NOT_YET_LINK


@pytest.mark.rules("X-17")
def test_a_v1_transfer_cache_async_into_blocks_is_refused_when_called(prompt: KvCacheManager) -> None:
    """The vendor's v1 Python layer refuses ``dst_block_indices`` without source blocks,
    an empty list included, before a task starts (hicann/ge llm_datadist_v1 llm_utils.py,
    transfer_cache_async)."""
    cache = prompt.allocate_cache(desc())
    config = TransferConfig(D_ID, [4096, 8192], range(0, 1))
    for src_blocks, dst_blocks in ((None, [0, 1]), ([], [0]), (None, [])):
        lx(lambda: prompt.transfer_cache_async(cache, Gate(), [config], src_blocks, dst_blocks, 16),
           "transfer from cache to blocks is not supported")


# ---------------------------------------------------------------------------
# Two processes: the seed's pull_cache, pull_blocks, the key life cycle
# ---------------------------------------------------------------------------

SHAPE = (2, 256)      # 2 batches of 256 bytes per tensor


def start_prompt(peer: Any) -> int:
    port = vs.free_port()
    peer.run(f"import ctypes\np = LLMDataDist(LLMRole.PROMPT, {P_ID}); p.init(support.v1_options({port})); "
             "kv = p.kv_cache_manager")
    return port


def prompt_allocate(peer: Any, name: str, seed: int, keys: str, num: int = 4, shape: Tuple[int, ...] = SHAPE,
                    blocks: bool = False) -> int:
    """Allocate a cache in the Prompt with ``keys``, fill it from ``seed``; its id."""
    call = "allocate_blocks_cache" if blocks else "allocate_cache"
    size = int(np.prod(shape))
    return int(peer.run(f"{name} = kv.{call}(CacheDesc({num}, {list(shape)}, DataType.DT_UINT8), {keys})\n"
                        f"for t in range({num}): ctypes.memmove({name}.per_device_tensor_addrs[0][t], "
                        f"fill({seed} + t, {size}).tobytes(), {size})", f"{name}.cache_id"))


def source(seed: int, tensor: int, shape: Tuple[int, ...] = SHAPE) -> np.ndarray:
    return fill(seed + tensor, int(np.prod(shape))).reshape(shape)


def linked_decoder(port: int) -> LLMDataDist:
    made = engine(LLMRole.DECODER)
    assert made.link_clusters([vs.cluster_info(P_ID, port)], 5000) == (S.LLM_SUCCESS, [S.LLM_SUCCESS])
    return made


def zeroed(manager: KvCacheManager, num: int = 4, shape: Tuple[int, ...] = SHAPE, blocks: bool = False) -> KvCache:
    cache = (manager.allocate_blocks_cache if blocks else manager.allocate_cache)(desc(num, shape))
    for t in range(num):
        write(cache, t, bytes(int(np.prod(shape))))
    return cache


def contents(cache: KvCache, num: int = 4, shape: Tuple[int, ...] = SHAPE) -> List[np.ndarray]:
    size = int(np.prod(shape))
    return [np.frombuffer(read(cache, t, size), dtype=np.uint8).reshape(shape).copy() for t in range(num)]


def test_seed_pull_cache_by_request_key_after_the_prompt_deallocated_then_the_key_is_gone() -> None:
    with vs.Peer() as peer:
        port = start_prompt(peer)
        cache_id = prompt_allocate(peer, "ctx", 100, "[CacheKey(1, 10), CacheKey(1, 11)]")
        peer.run("kv.deallocate_cache(ctx)")
        d = linked_decoder(port)
        try:
            kv = d.kv_cache_manager
            dst = zeroed(kv)
            kv.pull_cache(CacheKey(P_ID, 10), dst, 1)
            got = contents(dst)
            for t in range(4):
                expected = np.zeros(SHAPE, dtype=np.uint8)
                expected[1] = source(100, t)[0]
                assert got[t].tobytes() == expected.tobytes()
            raises(LLMException, lambda: kv.pull_cache(CacheKey(P_ID, 10), dst), status=S.LLM_KV_CACHE_NOT_EXIST)
            kv.pull_cache(CacheKeyByIdAndIndex(P_ID, cache_id, 1), dst, 0)
            assert contents(dst)[3][0].tobytes() == source(100, 3)[1].tobytes()
            # both keys were pulled: the deallocated cache is freed
            raises(LLMException, lambda: kv.pull_cache(CacheKey(P_ID, 11), dst), status=S.LLM_KV_CACHE_NOT_EXIST)
            raises(LLMException, lambda: kv.pull_cache(CacheKeyByIdAndIndex(P_ID, cache_id, 0), dst),
                   status=S.LLM_KV_CACHE_NOT_EXIST)
        finally:
            d.finalize()


def test_seed_pull_cache_with_layer_ranges_size_and_both_offsets_keeps_the_key() -> None:
    with vs.Peer() as peer:
        port = start_prompt(peer)
        prompt_allocate(peer, "ctx", 200, "[CacheKey(1, 10), CacheKey(1, 11)]")
        d = linked_decoder(port)
        try:
            kv = d.kv_cache_manager
            dst = zeroed(kv)
            # source layer 1 (tensors 2, 3), batch of key 11, bytes [32, 96) -> destination layer 0, batch 1, at 100
            kv.pull_cache(CacheKey(P_ID, 11), dst, 1, 64, src_layer_range=range(1, 2), dst_layer_range=range(0, 1),
                          src_cache_offset=32, dst_cache_offset=100)
            # size -1 with a destination offset: the rest of the destination batch (256 - 200 = 56 bytes)
            kv.pull_cache(CacheKey(P_ID, 11), dst, 0, dst_cache_offset=200)
            # tensor_num_per_layer 1: tensor 3 alone into tensor 2, from byte 8 of the source, offsets kept
            kv.pull_cache(CacheKeyByIdAndIndex(P_ID, 1, 0), dst, 1, 16, src_layer_range=range(3, 4),
                          dst_layer_range=range(2, 3), tensor_num_per_layer=1, src_cache_offset=8,
                          dst_cache_offset=0)
            got = contents(dst)
            for t in range(4):
                expected = np.zeros(SHAPE, dtype=np.uint8)
                if t < 2:
                    expected[1, 100:164] = source(200, t + 2)[1, 32:96]
                expected[0, 200:256] = source(200, t)[1, 0:56]
                if t == 2:
                    expected[1, 0:16] = source(200, 3)[0, 8:24]
                assert got[t].tobytes() == expected.tobytes(), f"tensor {t}"
            # offsets keep the key: a plain pull still finds it, and then releases it
            kv.pull_cache(CacheKey(P_ID, 11), dst, 0)
            raises(LLMException, lambda: kv.pull_cache(CacheKey(P_ID, 11), dst), status=S.LLM_KV_CACHE_NOT_EXIST)
            # an offset that does not fit the source batch is the prompt side's PARAM_INVALID
            lx(lambda: kv.pull_cache(CacheKey(P_ID, 10), dst, 0, 64, src_cache_offset=250))
        finally:
            d.finalize()


@pytest.mark.parametrize("seq_len_dim_index", [-1, 0, 1])
def test_seed_pull_cache_moves_exactly_size_bytes_whatever_the_prompt_cache_seq_len_dim_index(
        seq_len_dim_index: int) -> None:
    # PR-38, as the device: a Prompt cache whose seq_len_dim_index is not 1 sizes the
    # prompt side's send buffer to its whole batch, but each send is the length the
    # Decoder asked for, received into a buffer of that length: L bytes either way.
    with vs.Peer() as peer:
        port = start_prompt(peer)
        peer.run("import ctypes\n"
                 f"ctx = kv.allocate_cache(CacheDesc(2, [2, 256], DataType.DT_UINT8, "
                 f"seq_len_dim_index={seq_len_dim_index}), [CacheKey(1, 10), CacheKey(1, 11)])\n"
                 "for t in range(2): ctypes.memmove(ctx.per_device_tensor_addrs[0][t], fill(400 + t, 512).tobytes(), "
                 "512)")
        d = linked_decoder(port)
        try:
            kv = d.kv_cache_manager
            dst = zeroed(kv, num=2)
            kv.pull_cache(CacheKey(P_ID, 11), dst, 0, 64, src_cache_offset=32, dst_cache_offset=8)
            kv.pull_cache(CacheKey(P_ID, 10), dst, 1, 16)
            got = contents(dst, num=2)
            for t in range(2):
                expected = np.zeros(SHAPE, dtype=np.uint8)
                expected[0, 8:72] = source(400, t)[1, 32:96]
                expected[1, 0:16] = source(400, t)[0, 0:16]
                assert got[t].tobytes() == expected.tobytes(), f"tensor {t}"
        finally:
            d.finalize()


def test_seed_pull_cache_by_prefix_key_until_the_prompt_removes_it() -> None:
    with vs.Peer() as peer:
        port = start_prompt(peer)
        prompt_allocate(peer, "ctx", 300, "[CacheKey(1, 2**64 - 1, 0, 30)]", num=2)
        d = linked_decoder(port)
        try:
            kv = d.kv_cache_manager
            dst = zeroed(kv, num=2)
            prefix = CacheKey(P_ID, U64_MAX, prefix_id=30)
            kv.pull_cache(prefix, dst, 1)
            kv.pull_cache(prefix, dst, 0, 100)
            got = contents(dst, num=2)
            for t in range(2):
                assert got[t][1].tobytes() == source(300, t)[0].tobytes()
                assert got[t][0].tobytes() == source(300, t)[0, :100].tobytes() + bytes(156)
            peer.run("kv.remove_cache_key(CacheKey(1, 2**64 - 1, 0, 30))")
            raises(LLMException, lambda: kv.pull_cache(prefix, dst), status=S.LLM_KV_CACHE_NOT_EXIST)
        finally:
            d.finalize()


def test_v1_pull_blocks_moves_the_listed_blocks_with_layer_ranges() -> None:
    shape = (8, 64)
    with vs.Peer() as peer:
        port = start_prompt(peer)
        prompt_allocate(peer, "blocks", 400, "BlocksCacheKey(1, 0)", shape=shape, blocks=True)
        d = linked_decoder(port)
        try:
            kv = d.kv_cache_manager
            dst = zeroed(kv, shape=shape, blocks=True)
            kv.pull_blocks(BlocksCacheKey(P_ID, 0), dst, [1, 2, 3, 6], [0, 1, 2, 7])
            kv.pull_blocks(BlocksCacheKey(P_ID, 0), dst, [5], [4], src_layer_range=range(1, 2),
                           dst_layer_range=range(0, 1))
            got = contents(dst, shape=shape)
            for t in range(4):
                src = source(400, t, shape)
                expected = np.zeros(shape, dtype=np.uint8)
                expected[[0, 1, 2, 7]] = src[[1, 2, 3, 6]]
                if t < 2:
                    expected[4] = source(400, t + 2, shape)[5]
                assert got[t].tobytes() == expected.tobytes()
            raises(LLMException, lambda: kv.pull_blocks(BlocksCacheKey(P_ID, 9), dst, [0], [0]),
                   status=S.LLM_KV_CACHE_NOT_EXIST)
        finally:
            d.finalize()


def test_a_decoder_cannot_pull_without_a_link_and_after_unlinking() -> None:
    with vs.Peer() as peer:
        port = start_prompt(peer)
        prompt_allocate(peer, "ctx", 500, "[CacheKey(1, 10)]")
        d = linked_decoder(port)
        try:
            kv = d.kv_cache_manager
            dst = zeroed(kv)
            assert d.unlink_clusters([vs.cluster_info(P_ID, port)], 5000) == (S.LLM_SUCCESS, [S.LLM_SUCCESS])
            not_yet_link(lambda: kv.pull_cache(CacheKey(P_ID, 10), dst))
            raises(LLMException, lambda: d.check_link_status(P_ID), status=S.LLM_NOT_YET_LINK)
        finally:
            d.finalize()


def test_switch_role_in_v1_then_the_old_prompt_pulls() -> None:
    with vs.Peer() as peer:
        port = vs.free_port()
        peer.run(f"import ctypes\np = LLMDataDist(LLMRole.PROMPT, {P_ID}); "
                 f"p.init(support.v1_options({port}, **{{'llm.EnableSwitchRole': '1'}})); kv = p.kv_cache_manager")
        d = engine(LLMRole.DECODER, **{"llm.EnableSwitchRole": "1"})
        try:
            kv = d.kv_cache_manager
            my_port = vs.free_port()
            d.switch_role(LLMRole.PROMPT, {"llm.listenIpInfo": f"127.0.0.1:{my_port}"})
            keyed = kv.allocate_cache(desc(2), [CacheKey(D_ID, 77)])
            for t in range(2):
                write(keyed, t, fill(700 + t, 512).tobytes())
            peer.run("p.switch_role(LLMRole.DECODER, {})\n"
                     f"r = p.link_clusters([support.cluster_info({D_ID}, {my_port})], 5000)\n"
                     "dst = kv.allocate_cache(CacheDesc(2, [2, 256], DataType.DT_UINT8))\n"
                     "for t in range(2): ctypes.memmove(dst.per_device_tensor_addrs[0][t], bytes(512), 512)\n"
                     f"kv.pull_cache(CacheKey({D_ID}, 77), dst, 1)")
            for t in range(2):
                got = bytes.fromhex(peer.run(value=f"ctypes.string_at(dst.per_device_tensor_addrs[0][{t}], 512).hex()"))
                assert got == bytes(256) + fill(700 + t, 512).tobytes()[:256]
        finally:
            d.finalize()


def test_v1_transfer_cache_async_from_the_prompt_writes_each_layer_to_the_decoder() -> None:
    with vs.Peer() as peer:
        port = start_prompt(peer)
        prompt_allocate(peer, "ctx", 800, "[]")
        d = linked_decoder(port)
        try:
            kv = d.kv_cache_manager
            dst = zeroed(kv)
            addrs = dst.per_device_tensor_addrs[0]
            # both layers of source batch 0 into destination batch 1
            config_addrs = [a + 256 for a in addrs]
            peer.run("class Sync(LayerSynchronizer):\n"
                     "    def __init__(self): self.layers = []\n"
                     "    def synchronize_layer(self, layer_index, timeout_in_millis):\n"
                     "        self.layers.append(layer_index); return True\n"
                     "sync = Sync()\n"
                     f"task = kv.transfer_cache_async(ctx, sync, [TransferConfig({D_ID}, {config_addrs})])")
            assert peer.run(value="[int(r) for r in task.get_results()]") == [0]
            assert peer.run(value="sync.layers") == [0, 1]
            got = contents(dst)
            for t in range(4):
                expected = np.zeros(SHAPE, dtype=np.uint8)
                expected[1] = source(800, t)[0]
                assert got[t].tobytes() == expected.tobytes()
        finally:
            d.finalize()
