"""v2 switch_role: two engines swap roles and the transfer reverses, as in the
vendor's sample.

    python examples/v2_switch_role.py

A starts as the Decoder, B (a second process of this script) as the listening
Prompt. A links and pulls from B, then unlinks. A switches to PROMPT with a listen
address, B switches to DECODER (its listener stops) and links to A; A now pushes
into B over that link with ``push_blocks(..., src_blocks=[0, 1, 2],
dst_blocks=[5, 6, 7], src_layer_range=range(0, 2), dst_layer_range=range(0, 2),
tensor_num_per_layer=1)``. Runs on the mock backend in a second or two.
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
    BlocksCacheKey, CacheDesc, DataType, LLMClusterInfo, LLMDataDist, LLMRole, LLMStatusCode,
)

A_ID, B_ID = 100, 200
SHAPE = [8, 128]
NUM_TENSORS = 2


def require(ok, what):
    if not ok:
        sys.exit(f"FAILED: {what}")


def content(owner, tensor):
    return np.random.default_rng([owner, tensor]).integers(0, 256, SHAPE, dtype=np.uint8)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def options(port=None):
    opts = {"llm.EnableCacheManager": "1", "llm.EnableRemoteCacheAccessible": "1", "ge.exec.deviceId": "0"}
    if port:
        opts["llm.listenIpInfo"] = f"127.0.0.1:{port}"
    return opts


def cluster(remote_id, port):
    info = LLMClusterInfo()
    info.remote_cluster_id = remote_id
    info.append_local_ip_info("127.0.0.1", 0)
    info.append_remote_ip_info("127.0.0.1", port)
    return info


def register(datadist, owner_id, seed_owner):
    tensors = [content(seed_owner, t) for t in range(NUM_TENSORS)]
    cache = datadist.cache_manager.register_blocks_cache(CacheDesc(NUM_TENSORS, SHAPE, DataType.DT_UINT8),
                                                         [t.ctypes.data for t in tensors],
                                                         BlocksCacheKey(owner_id, 0))
    return cache, tensors


def b_process(port):
    b = LLMDataDist(LLMRole.PROMPT, B_ID)
    b.init(options(port))
    _, tensors = register(b, B_ID, B_ID)
    print("READY", flush=True)
    a_port = int(sys.stdin.readline())    # A has unlinked and now listens here
    b.switch_role(LLMRole.DECODER)
    ret, _ = b.link_clusters([cluster(A_ID, a_port)], timeout=5000)
    print(f"LINKED {int(ret)}", flush=True)
    sys.stdin.readline()                  # A has pushed
    ok = True
    for t, got in enumerate(tensors):
        expected = content(B_ID, t)
        expected[[5, 6, 7]] = content(A_ID, t)[[0, 1, 2]]
        ok = ok and got.tobytes() == expected.tobytes()
    print("OK" if ok else "MISMATCH", flush=True)
    sys.stdin.readline()
    b.finalize()


def a_process():
    b_port, a_port = free_port(), free_port()
    child = subprocess.Popen([sys.executable, os.path.abspath(__file__), "b", str(b_port)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=tempfile.gettempdir())
    require(child.stdout.readline().strip() == "READY", "B did not start")
    a = LLMDataDist(LLMRole.DECODER, A_ID)
    a.init(options())
    try:
        cache, tensors = register(a, A_ID, A_ID)
        ret, _ = a.link_clusters([cluster(B_ID, b_port)], timeout=5000)
        require(ret == LLMStatusCode.LLM_SUCCESS, f"link_clusters: {ret}")
        a.cache_manager.pull_blocks(BlocksCacheKey(B_ID, 0), cache, [4], [7])
        require(all(t[7].tobytes() == content(B_ID, i)[4].tobytes() for i, t in enumerate(tensors)), "pull")
        ret, _ = a.unlink_clusters([cluster(B_ID, b_port)], timeout=5000)
        require(ret == LLMStatusCode.LLM_SUCCESS, f"unlink_clusters: {ret}")

        a.switch_role(LLMRole.PROMPT, {"llm.listenIpInfo": f"127.0.0.1:{a_port}"})
        child.stdin.write(f"{a_port}\n")
        child.stdin.flush()
        require(child.stdout.readline().strip() == "LINKED 0", "B could not link to A")
        a.cache_manager.push_blocks(BlocksCacheKey(B_ID, 0), cache, src_blocks=[0, 1, 2], dst_blocks=[5, 6, 7],
                                    src_layer_range=range(0, 2), dst_layer_range=range(0, 2),
                                    tensor_num_per_layer=1)
        child.stdin.write("check\n")
        child.stdin.flush()
        require(child.stdout.readline().strip() == "OK", "B received other bytes")
        print("v2 switch_role: pulled as Decoder, pushed as Prompt, every byte verified")
    finally:
        a.finalize()
        if child.poll() is None:
            child.stdin.write("done\n")
            child.stdin.flush()
        child.wait(timeout=30)


if __name__ == "__main__":
    if sys.argv[1:2] == ["b"]:
        b_process(int(sys.argv[2]))
    else:
        a_process()
