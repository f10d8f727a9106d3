"""The run behind docs/img/trace-link-model.png: a small connector-style pull that fails.

    python docs/img/trace_example.py [OUT.png]

A Prompt process registers a blocks cache of 4 layers (K and V per layer); a Decoder
process, on a link paced at 4 MB/s with 2 ms latency (the mock's link model), pulls the
request's blocks layer by layer and then the next request with a stale block table: block
40 of a 16-block cache. A connector that reported every failure as "Timeout during
pull_blocks" would hide it; the trace shows the pull that failed and its real code,
LLM_PARAM_INVALID. Both processes run with LLM_DATADIST_FFI_TRACE set; the files are
merged and drawn by docs/render_trace.py (needs matplotlib).
"""
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

import llm_datadist_ffi.compat

llm_datadist_ffi.compat.install()

from llm_datadist import (  # noqa: E402
    BlocksCacheKey, CacheDesc, DataType, LLMClusterInfo, LLMDataDist, LLMException, LLMRole,
)

PROMPT_ID, DECODER_ID = 1, 2
LAYERS, BLOCKS, BLOCK_BYTES = 4, 16, 16384
DESC = CacheDesc(2 * LAYERS, [BLOCKS, BLOCK_BYTES], DataType.DT_UINT8)


def options(port=None, **extra):
    opts = {"llm.EnableCacheManager": "1", "llm.EnableRemoteCacheAccessible": "1", "ge.exec.deviceId": "0",
            "llm.SyncKvCacheWaitTime": "2000", **extra}
    if port:
        opts["llm.listenIpInfo"] = f"127.0.0.1:{port}"
    return opts


def prompt(port):
    dist = LLMDataDist(LLMRole.PROMPT, PROMPT_ID)
    dist.init(options(port))
    tensors = [np.full((BLOCKS, BLOCK_BYTES), t, np.uint8) for t in range(2 * LAYERS)]
    dist.cache_manager.register_blocks_cache(DESC, [t.ctypes.data for t in tensors], BlocksCacheKey(PROMPT_ID, 0))
    print("READY", flush=True)
    sys.stdin.readline()
    dist.finalize()


def decoder(port):
    sys.stdin.readline()                                 # the Prompt is ready
    dist = LLMDataDist(LLMRole.DECODER, DECODER_ID)
    dist.init(options(**{"llm_datadist_ffi.mock.LinkBandwidth": "4000000",
                         "llm_datadist_ffi.mock.LinkLatencyUs": "2000"}))
    cm = dist.cache_manager
    tensors = [np.zeros((BLOCKS, BLOCK_BYTES), np.uint8) for _ in range(2 * LAYERS)]
    cache = cm.register_blocks_cache(DESC, [t.ctypes.data for t in tensors])
    info = LLMClusterInfo()
    info.remote_cluster_id = PROMPT_ID
    info.append_local_ip_info("127.0.0.1", 0)
    info.append_remote_ip_info("127.0.0.1", port)
    dist.link_clusters([info], 5000)
    for table in ([0, 1, 2, 3], [4, 5, 40]):             # the second request's table is stale
        try:
            for layer in range(LAYERS):
                cm.pull_blocks(BlocksCacheKey(PROMPT_ID, 0), cache, table, table,
                               src_layer_range=range(layer, layer + 1), dst_layer_range=range(layer, layer + 1))
        except LLMException as exc:
            print(f"the pull failed: {exc.status_code.name}", file=sys.stderr)
            break
    dist.unlink_clusters([info], 5000)
    dist.finalize()


def main():
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).with_name("trace-link-model.png")
    directory = tempfile.mkdtemp(prefix="trace-example-")
    env = {**os.environ, "LLM_DATADIST_FFI_TRACE": directory}
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    me = [sys.executable, os.path.abspath(__file__)]
    # both start at once, so that the Decoder's start-up does not stretch the timeline
    with subprocess.Popen(me + ["prompt", str(port)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                          env=env) as p, \
            subprocess.Popen(me + ["decoder", str(port)], stdin=subprocess.PIPE, text=True, env=env) as d:
        assert p.stdout.readline().strip() == "READY"
        d.stdin.write("go\n")
        d.stdin.close()
        assert d.wait() == 0
        p.stdin.write("done\n")
        p.stdin.close()
    merged = Path(directory) / "merged.json"
    subprocess.run([sys.executable, "-m", "llm_datadist_ffi", "trace", "merge", directory, "-o", str(merged)],
                   check=True)
    subprocess.run([sys.executable, "-m", "llm_datadist_ffi", "trace", "summary", str(merged)], check=True)
    subprocess.run([sys.executable, str(Path(__file__).resolve().parent.parent / "render_trace.py"), str(merged),
                    str(out), "--title", "A Decoder pulls layer by layer over a paced link; the second request "
                    "fails with its real code"], check=True)
    print(out)


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] in ("prompt", "decoder"):
        (prompt if sys.argv[1] == "prompt" else decoder)(int(sys.argv[2]))
    else:
        main()
