"""v2 (CacheManager) paged KV transfer: the Decoder pulls a request's blocks from the
Prompt, layer by layer, as a vLLM-style connector does.

    python examples/v2_pull_blocks.py

Each side registers its per-layer K and V tensors as one blocks cache with the
addresses interleaved k0, v0, k1, v1, ... (layer l = tensors 2l, 2l+1). Runs on the
mock backend in a second or two; the Prompt is a second process of this script.
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
    BlocksCacheKey, CacheDesc, DataType, LLMClusterInfo, LLMConfig, LLMDataDist, LLMRole, LLMStatusCode,
)

PROMPT_ID, DECODER_ID = 10, 20
NUM_LAYERS = 4
KV_SHAPE = [32, 16, 2, 64]          # [num_blocks, block_size, num_kv_heads, head_dim], float16


def require(ok, what):
    if not ok:
        sys.exit(f"FAILED: {what}")


def layer_tensor(tensor):
    return np.random.default_rng([3, tensor]).standard_normal(KV_SHAPE).astype(np.float16)


def init(role, cluster_id, listen_port=None):
    config = LLMConfig()
    config.device_id = 0
    config.enable_cache_manager = True
    config.enable_remote_cache_accessible = True
    config.sync_kv_timeout = 5000
    if listen_port:
        config.listen_ip_info = f"127.0.0.1:{listen_port}"
    datadist = LLMDataDist(role, cluster_id)
    datadist.init(config.generate_options())
    return datadist


def register(cache_manager, tensors, cluster_id):
    desc = CacheDesc(len(tensors), KV_SHAPE, DataType.DT_FLOAT16)
    return cache_manager.register_blocks_cache(desc, [t.ctypes.data for t in tensors],
                                               BlocksCacheKey(cluster_id=cluster_id, model_id=0))


def prompt(port):
    datadist = init(LLMRole.PROMPT, PROMPT_ID, port)
    tensors = [layer_tensor(t) for t in range(2 * NUM_LAYERS)]   # k0, v0, k1, v1, ...
    register(datadist.cache_manager, tensors, PROMPT_ID)
    print("READY", flush=True)
    sys.stdin.readline()
    datadist.finalize()


def decoder():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    child = subprocess.Popen([sys.executable, os.path.abspath(__file__), "prompt", str(port)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=tempfile.gettempdir())
    require(child.stdout.readline().strip() == "READY", "the Prompt did not start")
    datadist = init(LLMRole.DECODER, DECODER_ID)
    try:
        cache_manager = datadist.cache_manager
        tensors = [np.zeros(KV_SHAPE, dtype=np.float16) for _ in range(2 * NUM_LAYERS)]
        kv_cache = register(cache_manager, tensors, DECODER_ID)     # register before linking
        cluster = LLMClusterInfo()
        cluster.remote_cluster_id = PROMPT_ID
        cluster.append_local_ip_info("127.0.0.1", 0)
        cluster.append_remote_ip_info("127.0.0.1", port)
        ret, per_cluster = datadist.link_clusters([cluster], timeout=5000)
        require(ret == LLMStatusCode.LLM_SUCCESS, f"link_clusters: {ret} {per_cluster}")

        remote_blocks, local_blocks = [3, 4, 5, 9, 17], [0, 1, 2, 6, 7]
        for layer in range(NUM_LAYERS):
            cache_manager.pull_blocks(BlocksCacheKey(PROMPT_ID, 0), kv_cache, remote_blocks, local_blocks,
                                      src_layer_range=range(layer, layer + 1),
                                      dst_layer_range=range(layer, layer + 1))
        # V of layer 3 only, one tensor per "layer" (tensor_num_per_layer=1), into block 31
        cache_manager.pull_blocks(BlocksCacheKey(PROMPT_ID, 0), kv_cache, [31], [31],
                                  src_layer_range=range(7, 8), dst_layer_range=range(7, 8), tensor_num_per_layer=1)

        for t, got in enumerate(tensors):
            expected = np.zeros(KV_SHAPE, dtype=np.float16)
            expected[local_blocks] = layer_tensor(t)[remote_blocks]
            if t == 7:
                expected[31] = layer_tensor(7)[31]
            require(got.view(np.uint16).tobytes() == expected.view(np.uint16).tobytes(), f"tensor {t} differs")
        datadist.unlink_clusters([cluster], timeout=5000)
        print("v2 pull_blocks: every byte verified")
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
