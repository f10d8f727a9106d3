"""The Python side of the C++ <-> Python pairs (tests/cpp/test_sdk_pairs.py): the same
call sequences as the C++ programs kv_server and decoder_pull, through the package's
native API (``llm_datadist_ffi.native``, the v2 class one method to one function) and
its ACL (``llm_datadist_ffi.acl``), with the cache and pattern of programs/sample_util.h.

    python py_peer.py prompt PORT SEED          # prints "READY <cache_id>", waits for "done"
    python py_peer.py decoder PROMPT_PORT REMOTE_CACHE_ID OUT_FILE
"""
from __future__ import annotations

import sys

import numpy as np

from llm_datadist_ffi import acl
from llm_datadist_ffi.native import (
    Cache, CacheDesc, CacheIndex, ClusterInfo, IpInfo, LlmDataDist, LlmRole,
)

NUM_TENSORS, BLOCKS, BLOCK_ELEMENTS = 4, 8, 16
TENSOR_SIZE = BLOCKS * BLOCK_ELEMENTS * 4
PROMPT_CLUSTER, DECODER_CLUSTER = 0, 1


def pattern(seed: int) -> list[np.ndarray]:
    """The tensors of sample_util.h's pattern: element i of tensor t is seed*10^6 + t*10^4 + i."""
    if seed == 0:
        return [np.zeros(BLOCKS * BLOCK_ELEMENTS, dtype=np.int32) for _ in range(NUM_TENSORS)]
    return [(seed * 1000000 + t * 10000 + np.arange(BLOCKS * BLOCK_ELEMENTS)).astype(np.int32)
            for t in range(NUM_TENSORS)]


def register(engine: LlmDataDist, seed: int) -> tuple[int, list[int]]:
    addrs = []
    for host in pattern(seed):
        addr = acl.aclrtMalloc(TENSOR_SIZE, acl.ACL_MEM_MALLOC_HUGE_ONLY)
        acl.aclrtMemcpy(addr, TENSOR_SIZE, host.ctypes.data, TENSOR_SIZE, acl.ACL_MEMCPY_HOST_TO_DEVICE)
        addrs.append(addr)
    return engine.register_kv_cache(CacheDesc(NUM_TENSORS, 3, [BLOCKS, BLOCK_ELEMENTS]), addrs), addrs


def release(engine: LlmDataDist, cache_id: int, addrs: list[int]) -> None:
    engine.unregister_kv_cache(cache_id)
    for addr in addrs:
        acl.aclrtFree(addr)
    engine.finalize()


def prompt(port: int, seed: int) -> None:
    engine = LlmDataDist(PROMPT_CLUSTER, LlmRole.PROMPT)
    engine.initialize({"llm.DeviceId": "0", "llm.ListenIpInfo": f"127.0.0.1:{port}"})
    cache_id, addrs = register(engine, seed)
    print(f"READY {cache_id}", flush=True)
    for line in sys.stdin:
        if line.strip() == "done":
            break
    release(engine, cache_id, addrs)


def decoder(prompt_port: int, remote_cache: int, out: str) -> None:
    engine = LlmDataDist(DECODER_CLUSTER, LlmRole.DECODER)
    engine.initialize({"llm.DeviceId": "0"})
    cache_id, addrs = register(engine, 0)
    cluster = ClusterInfo(PROMPT_CLUSTER, local_ip_infos=[IpInfo("127.0.0.1", 0)],
                          remote_ip_infos=[IpInfo("127.0.0.1", prompt_port)])
    status, rets = engine.link_llm_clusters([cluster], 5000)
    if int(status) != 0:
        sys.exit(f"link_llm_clusters: {status!r} {rets!r}")
    engine.pull_kv_blocks(CacheIndex(PROMPT_CLUSTER, remote_cache, 0), Cache(cache_id), [1, 2, 3], [4, 5, 6])
    engine.pull_kv_cache(CacheIndex(PROMPT_CLUSTER, remote_cache, 7), Cache(cache_id), 0)
    with open(out, "wb") as f:
        for addr in addrs:
            host = np.empty(BLOCKS * BLOCK_ELEMENTS, dtype=np.int32)
            acl.aclrtMemcpy(host.ctypes.data, TENSOR_SIZE, addr, TENSOR_SIZE, acl.ACL_MEMCPY_DEVICE_TO_HOST)
            f.write(host.tobytes())
    engine.unlink_llm_clusters([cluster], 5000)
    release(engine, cache_id, addrs)


if __name__ == "__main__":
    if sys.argv[1] == "prompt":
        prompt(int(sys.argv[2]), int(sys.argv[3]))
    else:
        decoder(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
