"""The seed's v1 flow (KvCacheManager): the Prompt allocates caches with request keys,
writes them and deallocates at once; the Decoder pulls through the keys, with layer
ranges and byte offsets.

    python examples/v1_pull_cache.py

Runs on the mock backend in a second or two: the Prompt is a second process of this
script, linked over 127.0.0.1. Written against the vendor's ``llm_datadist`` API;
``compat.install()`` makes that name resolve to llm_datadist_ffi.
"""
import ctypes
import os
import socket
import subprocess
import sys
import tempfile

import numpy as np

import llm_datadist_ffi.compat

llm_datadist_ffi.compat.install()

from llm_datadist import (  # noqa: E402  (after install(), as client code would be)
    CacheDesc, CacheKey, CacheKeyByIdAndIndex, DataType, LLMClusterInfo, LLMDataDist, LLMException, LLMRole,
    LLMStatusCode,
)

PROMPT_ID, DECODER_ID = 1, 2
NUM_LAYERS, BATCHES, BATCH_BYTES = 4, 2, 512       # K and V per layer: 8 tensors of [2, 512] bytes
REQ_ID = 0x1234_5678_9ABC


def require(ok, what):
    if not ok:
        sys.exit(f"FAILED: {what}")


def content(tensor):
    return np.random.default_rng([7, tensor]).integers(0, 256, BATCHES * BATCH_BYTES, dtype=np.uint8)


def options(port=None):
    opts = {"ge.exec.deviceId": "0", "llm.SyncKvCacheWaitTime": "5000", "ge.flowGraphMemMaxSize": "67108864"}
    if port:
        opts["llm.listenIpInfo"] = f"127.0.0.1:{port}"
    return opts


def prompt(port):
    datadist = LLMDataDist(LLMRole.PROMPT, PROMPT_ID)
    datadist.init(options(port))
    kv = datadist.kv_cache_manager
    desc = CacheDesc(2 * NUM_LAYERS, [BATCHES, BATCH_BYTES], DataType.DT_UINT8, seq_len_dim_index=1)
    cache = kv.allocate_cache(desc, [CacheKey(PROMPT_ID, REQ_ID), CacheKey(PROMPT_ID, REQ_ID + 1)])
    for tensor, addr in enumerate(cache.per_device_tensor_addrs[0]):
        ctypes.memmove(addr, content(tensor).tobytes(), BATCHES * BATCH_BYTES)
    kv.deallocate_cache(cache)            # the keys keep the memory until the Decoder pulls
    print(f"READY {cache.cache_id}", flush=True)
    sys.stdin.readline()
    datadist.finalize()


def decoder():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    child = subprocess.Popen([sys.executable, os.path.abspath(__file__), "prompt", str(port)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=tempfile.gettempdir())
    remote_cache_id = int(child.stdout.readline().split()[1])
    datadist = LLMDataDist(LLMRole.DECODER, DECODER_ID)
    datadist.init(options())
    try:
        kv = datadist.kv_cache_manager
        cluster = LLMClusterInfo()
        cluster.remote_cluster_id = PROMPT_ID
        cluster.append_local_ip_info("127.0.0.1", 0)
        cluster.append_remote_ip_info("127.0.0.1", port)
        ret, _ = datadist.link_clusters([cluster], timeout=5000)
        require(ret == LLMStatusCode.LLM_SUCCESS, f"link_clusters returned {ret}")

        cache = kv.allocate_cache(CacheDesc(2 * NUM_LAYERS, [BATCHES, BATCH_BYTES], DataType.DT_UINT8))
        for addr in cache.per_device_tensor_addrs[0]:
            ctypes.memset(addr, 0, BATCHES * BATCH_BYTES)
        # layers 2..3 of the request's batch, bytes [64, 192), into layers 0..1 of batch 1 at byte 256
        kv.pull_cache(CacheKey(PROMPT_ID, REQ_ID), cache, batch_index=1, size=128,
                      src_layer_range=range(2, 4), dst_layer_range=range(0, 2),
                      src_cache_offset=64, dst_cache_offset=256)
        # offsets keep the key: pull the whole request into batch 0 (this releases it)
        kv.pull_cache(CacheKey(PROMPT_ID, REQ_ID), cache, batch_index=0)
        # the second batch of the remote cache by id, one tensor per layer, 32 bytes
        kv.pull_cache(CacheKeyByIdAndIndex(PROMPT_ID, remote_cache_id, 1), cache, 1, 32,
                      src_layer_range=range(7, 8), dst_layer_range=range(7, 8), tensor_num_per_layer=1)

        for tensor, addr in enumerate(cache.per_device_tensor_addrs[0]):
            got = np.frombuffer(ctypes.string_at(addr, BATCHES * BATCH_BYTES), dtype=np.uint8).reshape(BATCHES, -1)
            expected = np.zeros((BATCHES, BATCH_BYTES), dtype=np.uint8)
            expected[0] = content(tensor)[:BATCH_BYTES]
            if tensor < 4:
                expected[1, 256:384] = content(tensor + 4)[64:192]
            if tensor == 7:
                expected[1, :32] = content(7)[BATCH_BYTES:BATCH_BYTES + 32]
            require(got.tobytes() == expected.tobytes(), f"tensor {tensor} differs")
        try:
            kv.pull_cache(CacheKey(PROMPT_ID, REQ_ID), cache)
            require(False, "the released key was found again")
        except LLMException as exc:
            require(exc.status_code == LLMStatusCode.LLM_KV_CACHE_NOT_EXIST, f"got {exc.status_code}")
        print("v1 pull_cache: every byte verified")
    finally:
        datadist.finalize()
        child.stdin.write("done\n")
        child.stdin.flush()
        child.wait(timeout=30)


if __name__ == "__main__":
    if sys.argv[1:2] == ["prompt"]:
        prompt(int(sys.argv[2]))
    else:
        decoder()
