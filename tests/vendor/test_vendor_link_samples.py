"""The call sequences of the vendor's link samples, played across two processes.

Each test plays one sample program's sequence (the peer process is one side, this
process the other) with the vendor-compatible API, and checks the bytes that moved:

- the v1 pair ``prompt_blocks.py`` / ``decoder_blocks.py``, whose engines both use
  cluster id 0 (docs/semantics.md E-7);
- ``hixl_transfer_backend_sample.py``: with ``llm.TransferBackend="hixl"`` the Prompt
  and the Decoder each link to the other, transfer over their own link, and unlink
  naming only ``remote_cluster_id`` without ``force`` (PR-42, E-5);
- the same sequence on the default backend, where one link serves a pair of engines
  (the second ``link_clusters`` is ``ALREADY_LINK``) and a non-forced unlink needs the
  peer's address.
"""
from __future__ import annotations

import ctypes
from typing import Any, List

import numpy as np
import pytest

from llm_datadist_ffi import LLMStatusCode as S
from llm_datadist_ffi.vendor import (BlocksCacheKey, CacheDesc, DataType, LLMClusterInfo, LLMConfig, LLMDataDist,
                                     LLMException, LLMRole)

import vendor_support as vs

pytestmark = pytest.mark.mock_only(reason="the vendor-compatible API needs the mock's extension functions")


BLOCKS, BLOCK_BYTES = 3, 40          # the hixl sample: 3 blocks of 10 float32


def id_only(remote_cluster_id: int) -> LLMClusterInfo:
    """A cluster named by its id alone, as the hixl sample's unlink names it."""
    info = LLMClusterInfo()
    info.remote_cluster_id = remote_cluster_id
    return info


def link_info(remote_cluster_id: int, local_port: int, remote_port: int) -> LLMClusterInfo:
    info = LLMClusterInfo()
    info.remote_cluster_id = remote_cluster_id
    info.append_local_ip_info("127.0.0.1", local_port)
    info.append_remote_ip_info("127.0.0.1", remote_port)
    return info


def hixl_options(port: int, hixl: bool) -> dict[str, str]:
    """The hixl sample's LLMConfig: a device, an empty local_comm_res, the backend, a listener."""
    config = LLMConfig()
    config.device_id = 0
    config.local_comm_res = ""
    if hixl:
        config.transfer_backend = "hixl"
    config.listen_ip_info = f"127.0.0.1:{port}"
    return dict(config.generate_options())


PEER_SIDE = """
import ctypes
def start(cluster_id, port, hixl):
    global engine, cache
    config = LLMConfig(); config.device_id = 0; config.local_comm_res = ""
    if hixl:
        config.transfer_backend = "hixl"
    config.listen_ip_info = f"127.0.0.1:{port}"
    engine = LLMDataDist(LLMRole.DECODER, cluster_id)
    engine.init(config.generate_options())
    global tensors
    tensors = [fill(30 + t, (3, 40)) for t in range(2)]
    cache = engine.cache_manager.register_blocks_cache(CacheDesc(2, [3, 10], DataType.DT_FLOAT),
        [a.ctypes.data for a in tensors], BlocksCacheKey(cluster_id, 0))
def link(remote_cluster_id, local_port, remote_port):
    info = LLMClusterInfo(); info.remote_cluster_id = remote_cluster_id
    info.append_local_ip_info("127.0.0.1", local_port); info.append_remote_ip_info("127.0.0.1", remote_port)
    status, rets = engine.link_clusters([info], 5000)
    return [int(status), [int(r) for r in rets]]
def unlink(remote_cluster_id):
    info = LLMClusterInfo(); info.remote_cluster_id = remote_cluster_id
    status, rets = engine.unlink_clusters([info], 5000)
    return [int(status), [int(r) for r in rets]]
def status_of(call):
    try:
        call()
    except LLMException as exc:
        return int(exc.status_code)
    return 0
"""


def start_prompt(cluster_id: int, port: int, hixl: bool) -> tuple[LLMDataDist, Any, List[np.ndarray]]:
    """This process's side: a Prompt whose 2-tensor blocks cache holds fill(20 + t)."""
    engine = LLMDataDist(LLMRole.PROMPT, cluster_id)
    engine.init(hixl_options(port, hixl))
    tensors = [vs.fill(20 + t, (BLOCKS, BLOCK_BYTES)).copy() for t in range(2)]
    cache = engine.cache_manager.register_blocks_cache(CacheDesc(2, [BLOCKS, 10], DataType.DT_FLOAT),
                                                       [a.ctypes.data for a in tensors],
                                                       BlocksCacheKey(cluster_id, 0))
    return engine, cache, tensors


@pytest.mark.rules("E-5", "§10.2", "PR-42")
def test_the_hixl_sample_links_both_ways_transfers_and_unlinks_by_id_alone() -> None:
    port_p, port_d = vs.free_port(), vs.free_port()
    with vs.Peer() as decoder:
        decoder.run(PEER_SIDE + "start(1, %d, True)" % port_d)
        prompt, cache, tensors = start_prompt(0, port_p, hixl=True)
        try:
            # the Prompt links to the Decoder: the Decoder holds no link of its own yet
            assert prompt.link_clusters([link_info(1, port_p, port_d)], 5000) == (S.LLM_SUCCESS, [S.LLM_SUCCESS])
            assert decoder.run(value="status_of(lambda: engine.cache_manager.push_blocks(BlocksCacheKey(0, 0), "
                                     "cache, [0], [0]))") == S.LLM_NOT_YET_LINK
            # the Decoder links to the Prompt: a link of its own, not ALREADY_LINK
            assert decoder.run(value=f"link(0, {port_d}, {port_p})") == [S.LLM_SUCCESS, [S.LLM_SUCCESS]]
            # HIXL keys its connections by address: the same address again is ALREADY_LINK
            assert prompt.link_clusters([link_info(1, port_p, port_d)], 5000) == (S.LLM_ALREADY_LINK,
                                                                                 [S.LLM_ALREADY_LINK])
            prompt.cache_manager.pull_blocks(BlocksCacheKey(1, 0), cache, src_blocks=[2], dst_blocks=[2])
            decoder.run("engine.cache_manager.push_blocks(BlocksCacheKey(0, 0), cache, src_blocks=[0, 1], "
                        "dst_blocks=[0, 1])")
            # unlink naming only remote_cluster_id, not forced: HIXL needs no address
            assert prompt.unlink_clusters([id_only(1)], 5000) == (S.LLM_SUCCESS, [S.LLM_SUCCESS])
            assert decoder.run(value="unlink(0)") == [S.LLM_SUCCESS, [S.LLM_SUCCESS]]
            for t in range(2):
                assert tensors[t].tobytes() == vs.fill(30 + t, (BLOCKS, BLOCK_BYTES)).tobytes()
            with pytest.raises(LLMException) as info:
                prompt.cache_manager.pull_blocks(BlocksCacheKey(1, 0), cache, src_blocks=[2], dst_blocks=[2])
            assert info.value.status_code == S.LLM_NOT_YET_LINK
            prompt.cache_manager.unregister_cache(cache.cache_id)
        finally:
            prompt.finalize()
            decoder.run("engine.finalize()")


@pytest.mark.rules("E-5", "§10.2", "PR-42")
def test_the_same_sequence_on_the_default_backend_shares_one_link_and_unlinks_by_address() -> None:
    """The default backend's handshake records the link on both engines (one per pair):
    the Decoder's link call is ALREADY_LINK, and a non-forced unlink without the
    peer's address is PARAM_INVALID for that cluster."""
    port_p, port_d = vs.free_port(), vs.free_port()
    with vs.Peer() as decoder:
        decoder.run(PEER_SIDE + "start(1, %d, False)" % port_d)
        prompt, cache, tensors = start_prompt(0, port_p, hixl=False)
        try:
            assert prompt.link_clusters([link_info(1, port_p, port_d)], 5000) == (S.LLM_SUCCESS, [S.LLM_SUCCESS])
            assert decoder.run(value=f"link(0, {port_d}, {port_p})") == [S.LLM_ALREADY_LINK,
                                                                         [S.LLM_ALREADY_LINK]]
            prompt.cache_manager.pull_blocks(BlocksCacheKey(1, 0), cache, src_blocks=[2], dst_blocks=[2])
            decoder.run("engine.cache_manager.push_blocks(BlocksCacheKey(0, 0), cache, src_blocks=[0, 1], "
                        "dst_blocks=[0, 1])")
            for t in range(2):
                assert tensors[t].tobytes() == vs.fill(30 + t, (BLOCKS, BLOCK_BYTES)).tobytes()
            assert prompt.unlink_clusters([id_only(1)], 5000) == (S.LLM_PARAM_INVALID, [S.LLM_PARAM_INVALID])
            remote = LLMClusterInfo()
            remote.remote_cluster_id = 1
            remote.append_remote_ip_info("127.0.0.1", port_d)
            assert prompt.unlink_clusters([remote], 5000) == (S.LLM_SUCCESS, [S.LLM_SUCCESS])
            assert decoder.run(value="status_of(lambda: engine.cache_manager.push_blocks(BlocksCacheKey(0, 0), "
                                     "cache, [0], [0]))") == S.LLM_NOT_YET_LINK
        finally:
            prompt.finalize()
            decoder.run("engine.finalize()")


@pytest.mark.rules("E-7")
def test_the_v1_sample_pair_shares_cluster_id_0_and_pulls_blocks() -> None:
    """prompt_blocks.py / decoder_blocks.py: both engines are cluster 0; the Decoder
    links to cluster 0 and pulls blocks of BlocksCacheKey(0, 0) from the Prompt."""
    port = vs.free_port()
    shape, size = [10, 128], 10 * 128 * 2
    with vs.Peer() as prompt:
        prompt.run("import vendor_v1_peer_support as v1\n"
                   f"v1.start('PROMPT', 0, {port})\n"
                   "engine = v1.engine\n"
                   "cache = engine.kv_cache_manager.allocate_blocks_cache(CacheDesc(4, [10, 128], "
                   "DataType.DT_FLOAT16), BlocksCacheKey(0, 0))\n"
                   "import ctypes\n"
                   "for t in range(4):\n"
                   f"    ctypes.memmove(cache.per_device_tensor_addrs[0][t], fill(40 + t, {size}).tobytes(), {size})")
        decoder = LLMDataDist(LLMRole.DECODER, 0)
        decoder.init(vs.v1_options())
        try:
            info = vs.cluster_info(0, port)
            assert decoder.link_clusters([info], 5000) == (S.LLM_SUCCESS, [S.LLM_SUCCESS])
            manager = decoder.kv_cache_manager
            kv_cache = manager.allocate_blocks_cache(CacheDesc(4, shape, DataType.DT_FLOAT16))
            manager.pull_blocks(BlocksCacheKey(0, 0), kv_cache, [0, 1], [2, 3])
            block = size // 10
            for t in range(4):
                got = ctypes.string_at(kv_cache.per_device_tensor_addrs[0][t], size)
                source = vs.fill(40 + t, size).tobytes()
                assert got[2 * block:4 * block] == source[0:2 * block]
            manager.deallocate_cache(kv_cache)
            assert decoder.unlink_clusters([info], 5000) == (S.LLM_SUCCESS, [S.LLM_SUCCESS])
        finally:
            decoder.finalize()
            prompt.run("v1.stop()")
