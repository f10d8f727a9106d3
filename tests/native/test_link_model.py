"""The mock's link model: transfers paced at a bandwidth and a latency, per engine (the
options ``llm_datadist_ffi.mock.LinkBandwidth`` / ``LinkLatencyUs``) and per link
(``mock_control.set_link_pace``).

Pacing is the feature, so elapsed times are checked from below (a paced transfer takes
at least latency + bytes / bandwidth); everything else is checked by outcome and order:
a transfer paced past the wait time is a TIMEOUT that moves nothing, transfers over two
links overlap, transfers over one link take turns, finalize ends a paced wait.
"""
from __future__ import annotations

import threading
import time
from typing import Any, Callable, Dict, List

import numpy as np
import pytest

from llm_datadist_ffi import LLMException
from llm_datadist_ffi import LLMStatusCode as S
from llm_datadist_ffi import mock_control, native
from llm_datadist_ffi.native import Cache, CacheIndex, KvCacheExtParam
from llm_datadist_ffi.vendor import Cache as VCache
from llm_datadist_ffi.vendor import CacheDesc as VDesc
from llm_datadist_ffi.vendor import DataType, LLMDataDist, LLMRole, Placement

import vendor_support as vs

pytestmark = pytest.mark.mock_only(reason="the link model is part of the mock's control interface")

BANDWIDTH, LATENCY = native.OPTION_MOCK_LINK_BANDWIDTH, native.OPTION_MOCK_LINK_LATENCY_US
WAIT = native.OPTION_SYNC_CACHE_WAIT_TIME
Engines = Callable[..., native.LlmDataDist]


def cluster(remote_cluster_id: int, port: int) -> native.ClusterInfo:
    return native.ClusterInfo(remote_cluster_id, 0, [native.IpInfo("127.0.0.1", 0)],
                              [native.IpInfo("127.0.0.1", port)])


def register(engine: native.LlmDataDist, arrays: List[np.ndarray]) -> int:
    return engine.register_kv_cache(native.CacheDesc(len(arrays), native.DataType.DT_UINT8, list(arrays[0].shape)),
                                    [a.ctypes.data for a in arrays])


def source(seed: int, num_tensors: int = 2, shape: tuple = (4, 1000)) -> List[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, size=shape, dtype=np.uint8) for _ in range(num_tensors)]


class Decoder:
    """Cluster 2 with one zeroed cache of 2 tensors (4 x 1000 bytes), linked to Prompt
    engines (cluster ids 1, 3, ...) that each hold one cache of random bytes."""

    def __init__(self, engines: Engines, options: Dict[str, str], prompts: int = 1) -> None:
        self.prompts = [engines(2 * k + 1, listen=True, options={}) for k in range(prompts)]
        self.arrays = [source(100 + k) for k in range(prompts)]
        self.src = [register(p, a) for p, a in zip(self.prompts, self.arrays)]
        self.engine = engines(2, native.LlmRole.DECODER, options=options, device_id=1)
        self.dst_arrays = [np.zeros((4, 1000), np.uint8) for _ in range(2)]
        self.dst = register(self.engine, self.dst_arrays)
        for k, prompt in enumerate(self.prompts):
            status, _ = self.engine.link_llm_clusters([cluster(2 * k + 1, prompt.listen_port)])
            assert status == S.LLM_SUCCESS

    def pull_batch(self, prompt: int = 0, batch: int = 0, ext: Any = None) -> None:
        self.engine.pull_kv_cache(CacheIndex(2 * prompt + 1, self.src[prompt], batch), Cache(self.dst), batch,
                                  -1, ext)


def timed(call: Callable[[], Any]) -> float:
    start = time.monotonic()
    call()
    return time.monotonic() - start


def test_a_paced_pull_takes_latency_plus_bytes_over_bandwidth_and_moves_every_byte(engines: Engines) -> None:
    # one batch of two tensors: 2 x 1000 bytes at 20 000 B/s is 100 ms, plus 50 ms latency
    d = Decoder(engines, {BANDWIDTH: "20000", LATENCY: "50000"})
    before = mock_control.bytes_moved()
    elapsed = timed(lambda: d.pull_batch(batch=1))
    assert mock_control.bytes_moved() - before == 2000
    assert elapsed >= 0.150
    for dst, src in zip(d.dst_arrays, d.arrays[0]):
        assert (dst[1] == src[1]).all() and (dst[[0, 2, 3]] == 0).all()


def test_an_unpaced_engine_records_the_bytes_of_each_pull(engines: Engines) -> None:
    d = Decoder(engines, {})
    before = mock_control.bytes_moved()
    d.engine.pull_kv_blocks(CacheIndex(1, d.src[0]), Cache(d.dst), [0, 1, 3], [2, 0, 1])
    assert mock_control.bytes_moved() - before == 3 * 1000 * 2
    for dst, src in zip(d.dst_arrays, d.arrays[0]):
        assert (dst[2] == src[0]).all() and (dst[0] == src[1]).all() and (dst[1] == src[3]).all()


def test_a_transfer_paced_past_the_wait_time_times_out_moves_nothing_and_poisons_the_link(
        engines: Engines) -> None:
    d = Decoder(engines, {WAIT: "200", LATENCY: "500000"})
    before = mock_control.bytes_moved()
    start = time.monotonic()
    with pytest.raises(LLMException) as caught:
        d.pull_batch()
    assert time.monotonic() - start >= 0.200                   # the whole wait time passed first
    assert caught.value.status_code == S.LLM_TIMEOUT
    assert "link model needs 500000 us for 2000 bytes" in str(caught.value)
    assert mock_control.bytes_moved() == before
    assert all((a == 0).all() for a in d.dst_arrays)
    mock_control.set_link_pace(d.engine, 1, 0, 0)             # fast again, but the link stays dead (PR-35)
    with pytest.raises(LLMException) as again:
        d.pull_batch()
    assert again.value.status_code == S.LLM_TIMEOUT and "PR-35" in str(again.value)


def test_the_pace_of_one_link_overrides_the_engine_options(engines: Engines) -> None:
    # the engine's latency alone would time every transfer out; the link to cluster 3 is
    # set free, the link to cluster 1 keeps the engine's pace
    d = Decoder(engines, {WAIT: "300", LATENCY: "2000000"}, prompts=2)
    mock_control.set_link_pace(d.engine, 3, 0, 0)
    d.pull_batch(prompt=1)
    assert all((dst[0] == src[0]).all() for dst, src in zip(d.dst_arrays, d.arrays[1]))
    with pytest.raises(LLMException) as caught:
        d.pull_batch(prompt=0, batch=1)
    assert caught.value.status_code == S.LLM_TIMEOUT


def test_a_link_pace_set_again_replaces_the_earlier_one(engines: Engines) -> None:
    d = Decoder(engines, {WAIT: "300"})
    mock_control.set_link_pace(d.engine, 1, 0, 1_000_000)
    mock_control.set_link_pace(d.engine, 1, 0, 0)
    d.pull_batch()
    assert all((dst[0] == src[0]).all() for dst, src in zip(d.dst_arrays, d.arrays[0]))


def test_layer_wise_pulls_over_two_links_overlap(engines: Engines) -> None:
    # layer 0 from cluster 1 over a slow link, layer 1 from cluster 3 over a fast one,
    # started second: the fast pull ends first, while the slow one is still moving
    d = Decoder(engines, {}, prompts=2)
    mock_control.set_link_pace(d.engine, 1, 0, 800_000)
    mock_control.set_link_pace(d.engine, 3, 0, 100_000)
    order: List[str] = []
    errors: List[BaseException] = []

    def pull(prompt: int, layer: int, name: str) -> None:
        try:
            d.pull_batch(prompt, ext=KvCacheExtParam((layer, layer), (layer, layer), 1))
            order.append(name)
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread, which fails on it
            errors.append(exc)

    slow = threading.Thread(target=pull, args=(0, 0, "slow"))
    fast = threading.Thread(target=pull, args=(1, 1, "fast"))
    slow.start()
    time.sleep(0.1)
    fast.start()
    fast.join()
    slow.join()
    assert not errors
    assert order == ["fast", "slow"]
    assert (d.dst_arrays[0][0] == d.arrays[0][0][0]).all() and (d.dst_arrays[1][0] == d.arrays[1][1][0]).all()


def test_transfers_over_one_link_take_turns(engines: Engines) -> None:
    # two pulls of 200 ms each over the same link: the link carries one at a time
    d = Decoder(engines, {LATENCY: "200000"})
    threads = [threading.Thread(target=d.pull_batch, args=(0, batch)) for batch in (0, 1)]
    start = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert time.monotonic() - start >= 0.400
    assert all((dst[:2] == src[:2]).all() for dst, src in zip(d.dst_arrays, d.arrays[0]))


def test_finalize_ends_the_wait_of_a_paced_transfer(engines: Engines) -> None:
    # a minute of latency within a two-minute wait time: finalize does not wait for it
    d = Decoder(engines, {WAIT: "120000", LATENCY: "60000000"})
    outcome: List[Any] = []
    thread = threading.Thread(target=lambda: outcome.append(d.pull_batch()), daemon=True)
    thread.start()
    time.sleep(0.3)
    d.engine.finalize()
    thread.join(timeout=50)
    assert not thread.is_alive()
    assert outcome == [None]                                    # the bytes had moved before the wait
    assert all((dst[0] == src[0]).all() for dst, src in zip(d.dst_arrays, d.arrays[0]))


@pytest.mark.parametrize("key, value", [(BANDWIDTH, "fast"), (BANDWIDTH, "-1"), (LATENCY, "3600000001"),
                                        (LATENCY, "1.5")])
def test_initialize_refuses_a_malformed_link_option(engines: Engines, key: str, value: str) -> None:
    engine = engines(2)
    with pytest.raises(LLMException) as caught:
        engine.initialize({native.OPTION_DEVICE_ID: "0", key: value})
    assert caught.value.status_code == S.LLM_PARAM_INVALID
    assert f'option {key} "{value}" must be a decimal integer' in str(caught.value)


def test_set_link_pace_refuses_a_latency_above_an_hour(engines: Engines) -> None:
    engine = engines(2, options={})
    with pytest.raises(LLMException) as caught:
        mock_control.set_link_pace(engine, 1, 0, 3_600_000_001)
    assert caught.value.status_code == S.LLM_PARAM_INVALID


def test_an_engine_paces_at_most_64_clusters(engines: Engines) -> None:
    engine = engines(2, options={})
    for cluster_id in range(64):
        mock_control.set_link_pace(engine, cluster_id, 1000, 0)
    mock_control.set_link_pace(engine, 63, 2000, 0)              # an existing entry is replaced
    with pytest.raises(LLMException) as caught:
        mock_control.set_link_pace(engine, 64, 1000, 0)
    assert caught.value.status_code == S.LLM_PARAM_INVALID


# ---- the per-thread bytes record of local copies ----------------------------------------------

def pool_engine(engines: Engines) -> native.LlmDataDist:
    return engines(1, options={native.OPTION_MOCK_NATIVE_POOL: "1",
                               native.OPTION_MEM_POOL_CONFIG: '{"memory_size": 1048576, "page_shift": 12}'})


def test_native_local_copies_record_the_bytes_they_move(engines: Engines) -> None:
    engine = pool_engine(engines)
    src, dst = source(5, 3, (6, 64)), [np.zeros((6, 64), np.uint8) for _ in range(3)]
    sid, did = register(engine, src), register(engine, dst)
    before = mock_control.bytes_moved()
    engine.copy_kv_cache(Cache(sid), Cache(did), 1, 2, offset=8, size=40)     # 40 bytes of 3 tensors
    assert mock_control.bytes_moved() - before == 3 * 40
    before = mock_control.bytes_moved()
    engine.copy_kv_blocks(Cache(sid), Cache(did), [0, 1, 4], [[3, 4, 0], [5, 1, 2]])   # 6 blocks of 3 tensors
    assert mock_control.bytes_moved() - before == 6 * 64 * 3
    assert all((d[[3, 4, 0, 5, 1, 2]] == s[[0, 1, 4, 0, 1, 4]]).all() for d, s in zip(dst, src))


def test_the_bytes_record_belongs_to_the_calling_thread(engines: Engines) -> None:
    d = Decoder(engines, {})
    totals: List[int] = []

    def pull_in_a_thread() -> None:
        start = mock_control.bytes_moved()
        d.pull_batch(batch=2)
        totals.append(mock_control.bytes_moved() - start)

    before = mock_control.bytes_moved()
    thread = threading.Thread(target=pull_in_a_thread)
    thread.start()
    thread.join()
    assert totals == [2000] and mock_control.bytes_moved() == before


def test_the_vendor_api_local_copies_record_the_bytes_they_move() -> None:
    pool = '{"memory_size": 1048576, "page_shift": 12}'
    dist = LLMDataDist(LLMRole.DECODER, 2)
    dist.init({"llm.EnableCacheManager": "1", "llm.EnableRemoteCacheAccessible": "1", "ge.exec.deviceId": "0",
               "llm.MemPoolConfig": pool})
    try:
        cm = dist.cache_manager
        blocks = cm.allocate_blocks_cache(VDesc(2, [8, 64], DataType.DT_UINT8))
        before = mock_control.bytes_moved()
        cm.copy_blocks(blocks, {0: [5, 6], 1: [7]})                        # 3 blocks of 2 tensors
        assert mock_control.bytes_moved() - before == 3 * 64 * 2
        batches = [cm.allocate_cache(VDesc(2, [4, 32], DataType.DT_UINT8)) for _ in range(2)]
        before = mock_control.bytes_moved()
        cm.copy_cache(batches[1], batches[0], 1, 2)                        # one batch of 2 tensors
        assert mock_control.bytes_moved() - before == 32 * 2
        host_memory = [np.arange(512, dtype=np.uint8) for _ in range(2)]
        host = VCache.create_cpu_cache(VDesc(2, [8, 64], DataType.DT_UINT8, Placement.HOST),
                                       [a.ctypes.data for a in host_memory])
        before = mock_control.bytes_moved()
        cm.swap_blocks(host, blocks, {0: 1, 1: 2, 5: 3})                   # 3 blocks of 2 tensors
        assert mock_control.bytes_moved() - before == 3 * 64 * 2
    finally:
        dist.finalize()


# ---- the vendor-compatible API ------------------------------------------------------------------

def test_the_vendor_api_reads_the_options_and_takes_set_link_pace() -> None:
    port = vs.free_port()
    with vs.Peer() as prompt, vs.Peer() as decoder:
        prompt.run(f"dist = LLMDataDist(LLMRole.PROMPT, 1)\ndist.init(support.v2_options({port}))\n"
                   "k = fill(3, (4, 256))\n"
                   "cache = dist.cache_manager.register_blocks_cache(CacheDesc(1, [4, 256], DataType.DT_UINT8), "
                   "[k.ctypes.data], BlocksCacheKey(1, 0))")
        # the engine's latency alone is past the 300 ms wait time; the link's own pace wins
        decoder.run("from llm_datadist_ffi import mock_control\n"
                    "dist = LLMDataDist(LLMRole.DECODER, 2)\n"
                    f"dist.init(support.v2_options(**{{'llm.SyncKvCacheWaitTime': '300', '{LATENCY}': '2000000'}}))\n"
                    "k = fill(-1, (4, 256))\n"
                    "cache = dist.cache_manager.register_blocks_cache(CacheDesc(1, [4, 256], DataType.DT_UINT8), "
                    "[k.ctypes.data])\n"
                    f"assert dist.link_clusters([support.cluster_info(1, {port})], 5000)[0] == 0\n"
                    "mock_control.set_link_pace(dist, 1, 0, 0)\n"
                    "dist.cache_manager.pull_blocks(BlocksCacheKey(1, 0), cache, [2], [0])")
        assert decoder.bytes_of("k[0]") == vs.fill(3, (4, 256))[2].tobytes()
        decoder.run("mock_control.set_link_pace(dist, 1, 0, 2000000)")
        refused = decoder.error("dist.cache_manager.pull_blocks(BlocksCacheKey(1, 0), cache, [3], [1])")
        assert refused.status == S.LLM_TIMEOUT and "link model needs 2000000 us for 256 bytes" in refused.message
        assert decoder.bytes_of("k[1]") == bytes(256)


def test_the_v1_generation_refuses_a_malformed_link_option() -> None:
    dist = LLMDataDist(LLMRole.DECODER, 2)
    with pytest.raises(LLMException) as caught:
        dist.init(vs.v1_options(**{BANDWIDTH: "1e9"}))
    assert caught.value.status_code == S.LLM_PARAM_INVALID and BANDWIDTH in str(caught.value)
    dist.finalize()
