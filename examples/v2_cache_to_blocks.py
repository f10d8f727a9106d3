"""v2 cache -> blocks: the Prompt holds a request in a contiguous cache (one batch per
request); the Decoder pulls one batch cut into its own scattered blocks.

    python examples/v2_cache_to_blocks.py

The source is named by ``CacheKeyByIdAndIndex(prompt_cluster_id, cache_id,
batch_index)``, the id the Prompt's registration returned (sent over the client's own
control channel; here, the Prompt's stdout). Runs on the mock backend in a second or
two.
"""
import os
import socket
import subprocess
import sys
import tempfile

import numpy as np

import llm_datadist_ffi.compat

llm_datadist_ffi.compat.install()

from llm_datadist import (  # noqa: E402
    CacheDesc, CacheKeyByIdAndIndex, DataType, LLMClusterInfo, LLMDataDist, LLMRole, LLMStatusCode,
)

PROMPT_ID, DECODER_ID = 3, 4
NUM_TENSORS = 4                         # 2 layers of K and V
BLOCK_BYTES, BLOCKS_PER_REQUEST = 256, 6
CONTIGUOUS = [2, BLOCKS_PER_REQUEST * BLOCK_BYTES]     # 2 requests (batches) of 6 blocks each
PAGED = [16, BLOCK_BYTES]


def require(ok, what):
    if not ok:
        sys.exit(f"FAILED: {what}")


def source(tensor):
    return np.random.default_rng([5, tensor]).integers(0, 256, CONTIGUOUS, dtype=np.uint8)


def options(port=None):
    opts = {"llm.EnableCacheManager": "1", "llm.EnableRemoteCacheAccessible": "1", "ge.exec.deviceId": "0"}
    if port:
        opts["llm.listenIpInfo"] = f"127.0.0.1:{port}"
    return opts


def prompt(port):
    datadist = LLMDataDist(LLMRole.PROMPT, PROMPT_ID)
    datadist.init(options(port))
    tensors = [source(t) for t in range(NUM_TENSORS)]
    cache = datadist.cache_manager.register_cache(CacheDesc(NUM_TENSORS, CONTIGUOUS, DataType.DT_UINT8),
                                                  [t.ctypes.data for t in tensors])
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
        cache_manager = datadist.cache_manager
        tensors = [np.zeros(PAGED, dtype=np.uint8) for _ in range(NUM_TENSORS)]
        paged = cache_manager.register_blocks_cache(CacheDesc(NUM_TENSORS, PAGED, DataType.DT_UINT8),
                                                    [t.ctypes.data for t in tensors])
        cluster = LLMClusterInfo()
        cluster.remote_cluster_id = PROMPT_ID
        cluster.append_local_ip_info("127.0.0.1", 0)
        cluster.append_remote_ip_info("127.0.0.1", port)
        ret, _ = datadist.link_clusters([cluster], timeout=5000)
        require(ret == LLMStatusCode.LLM_SUCCESS, f"link_clusters: {ret}")

        dst_blocks = [9, 2, 14, 5, 0, 11]
        cache_manager.pull_blocks(CacheKeyByIdAndIndex(PROMPT_ID, remote_cache_id, 0), paged, (), dst_blocks)
        # layer 1 only (tensors 2, 3): the first two blocks of the request into blocks 7, 8
        cache_manager.pull_blocks(CacheKeyByIdAndIndex(PROMPT_ID, remote_cache_id, 0), paged, [], [7, 8],
                                  src_layer_range=range(1, 2), dst_layer_range=range(1, 2))
        for t, got in enumerate(tensors):
            request = source(t)[0].reshape(BLOCKS_PER_REQUEST, BLOCK_BYTES)
            expected = np.zeros(PAGED, dtype=np.uint8)
            expected[dst_blocks] = request
            if t >= 2:
                expected[[7, 8]] = request[:2]
            require(got.tobytes() == expected.tobytes(), f"tensor {t} differs")
        print("v2 cache -> blocks: every byte verified")
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
