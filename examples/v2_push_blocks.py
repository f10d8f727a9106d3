"""v2 push from the Prompt: the Decoder opens the link, the Prompt pushes blocks over it
from several threads at once (the SGLang-style connector).

    python examples/v2_push_blocks.py

The Decoder registers one blocks cache per tensor kind (here K and V of every layer,
all K in one cache and all V in another) under ``BlocksCacheKey(own_cluster_id,
model_id=i)`` and links to the listening Prompt. The Prompt then pushes with
``push_blocks(BlocksCacheKey(decoder_id, i), cache_i, src, dst, range(n), range(n), 1)``
(positional layer ranges over all ``n`` tensors, one tensor per layer), twelve
worker threads in parallel. Runs on the mock backend in a second or two.
"""
import os
import socket
import subprocess
import sys
import tempfile
import threading

import numpy as np

import llm_datadist_ffi.compat

llm_datadist_ffi.compat.install()

from llm_datadist import (  # noqa: E402
    BlocksCacheKey, CacheDesc, DataType, LLMClusterInfo, LLMDataDist, LLMRole, LLMStatusCode,
)

PROMPT_ID, DECODER_ID = 2**63 + 11, 2**63 + 22       # address-derived ids are often >= 2**63
NUM_LAYERS, BLOCKS, BLOCK_BYTES = 6, 96, 512
WORKERS, BLOCKS_PER_CHUNK = 12, 8


def require(ok, what):
    if not ok:
        sys.exit(f"FAILED: {what}")


def content(kind, layer):
    return np.random.default_rng([11, kind, layer]).integers(0, 256, (BLOCKS, BLOCK_BYTES), dtype=np.uint8)


def options(port=None):
    opts = {"llm.EnableCacheManager": "1", "llm.EnableRemoteCacheAccessible": "1", "ge.exec.deviceId": "0",
            "llm.SyncKvCacheWaitTime": "5000"}
    if port:
        opts["llm.listenIpInfo"] = f"127.0.0.1:{port}"
    return opts


def chunks():
    """(src blocks, dst blocks) per chunk: the Prompt's blocks 0.. go to the Decoder's blocks in reverse."""
    for start in range(0, WORKERS * BLOCKS_PER_CHUNK, BLOCKS_PER_CHUNK):
        src = np.arange(start, start + BLOCKS_PER_CHUNK)
        yield src, BLOCKS - 1 - src


def prompt(port):
    datadist = LLMDataDist(LLMRole.PROMPT, PROMPT_ID)
    datadist.init(options(port))
    cache_manager = datadist.cache_manager
    desc = CacheDesc(NUM_LAYERS, [BLOCKS, BLOCK_BYTES], DataType.DT_UINT8)
    memory = [[content(kind, layer) for layer in range(NUM_LAYERS)] for kind in (0, 1)]
    caches = [cache_manager.register_blocks_cache(desc, [t.ctypes.data for t in tensors]) for tensors in memory]
    print("READY", flush=True)
    sys.stdin.readline()                  # the Decoder has linked
    errors = []

    def worker(src, dst):
        try:
            for model_id, cache in enumerate(caches):
                cache_manager.push_blocks(BlocksCacheKey(DECODER_ID, model_id), cache, src.tolist(), dst.tolist(),
                                          range(NUM_LAYERS), range(NUM_LAYERS), 1)
        except Exception as exc:  # reported to the Decoder
            errors.append(repr(exc))

    threads = [threading.Thread(target=worker, args=pair) for pair in chunks()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    print("PUSHED" if not errors else f"ERRORS {errors}", flush=True)
    sys.stdin.readline()
    datadist.finalize()


def decoder():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    child = subprocess.Popen([sys.executable, os.path.abspath(__file__), "prompt", str(port)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=tempfile.gettempdir())
    require(child.stdout.readline().strip() == "READY", "the Prompt did not start")
    datadist = LLMDataDist(LLMRole.DECODER, DECODER_ID)
    datadist.init(options())
    try:
        cache_manager = datadist.cache_manager
        desc = CacheDesc(NUM_LAYERS, [BLOCKS, BLOCK_BYTES], DataType.DT_UINT8)
        memory = [[np.zeros((BLOCKS, BLOCK_BYTES), dtype=np.uint8) for _ in range(NUM_LAYERS)] for _ in (0, 1)]
        for model_id, tensors in enumerate(memory):
            cache_manager.register_blocks_cache(desc, [t.ctypes.data for t in tensors],
                                                BlocksCacheKey(cluster_id=DECODER_ID, model_id=model_id))
        cluster = LLMClusterInfo()
        cluster.remote_cluster_id = PROMPT_ID
        cluster.append_local_ip_info("127.0.0.1", 0)
        cluster.append_remote_ip_info("127.0.0.1", port)
        ret, _ = datadist.link_clusters([cluster], timeout=5000)
        require(ret == LLMStatusCode.LLM_SUCCESS, f"link_clusters: {ret}")
        child.stdin.write("push\n")
        child.stdin.flush()
        answer = child.stdout.readline().strip()
        require(answer == "PUSHED", f"the Prompt reported {answer}")
        for kind, tensors in enumerate(memory):
            for layer, got in enumerate(tensors):
                expected = np.zeros((BLOCKS, BLOCK_BYTES), dtype=np.uint8)
                for src, dst in chunks():
                    expected[dst] = content(kind, layer)[src]
                require(got.tobytes() == expected.tobytes(), f"cache {kind} layer {layer} differs")
        print(f"v2 push_blocks from {WORKERS} threads: every byte verified")
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
