"""``python -m llm_datadist_ffi bench``: transfer throughput as a ratio of memcpy.

Figures are only meaningful against a baseline measured in the same run on the same
machine, so every row is printed as GB/s and as a multiple of the memcpy bandwidth
measured here for the same number of bytes (``numpy.copyto`` of one contiguous
buffer). Rows:

- ``pull_kv_blocks`` between two engines of this process (one-sided memcpy), for
  contiguous block lists (coalesced into one run per tensor) and scattered ones
  (every other block: one region per block);
- the same with the source engine in another process (``process_vm_readv`` or the
  socket fall-back of the mock);
- ``push_kv_blocks`` in the same two settings.

This is a benchmark, not a test: it asserts nothing about speed. It does check that
the bytes arrived, so a fast wrong answer cannot pass for a result.
"""
from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import time
from typing import Callable, Sequence

import numpy as np

SRC_CLUSTER, DST_CLUSTER = 11, 12


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _tensors(count: int, blocks: int, block_bytes: int, fill: int) -> list[np.ndarray]:
    return [np.full((blocks, block_bytes), (fill + i) % 251, dtype=np.uint8) for i in range(count)]


def _serve(args: argparse.Namespace) -> int:
    from . import native

    tensors = _tensors(args.tensors, args.blocks, args.block_bytes, fill=7)
    with native.LlmDataDist(SRC_CLUSTER, native.LlmRole.PROMPT) as engine:
        engine.initialize({native.OPTION_DEVICE_ID: "0",
                           native.OPTION_LISTEN_IP_INFO: f"127.0.0.1:{args.port}"})
        desc = native.CacheDesc(len(tensors), native.DataType.DT_UINT8, [args.blocks, args.block_bytes])
        cache_id = engine.register_kv_cache(desc, [t.ctypes.data for t in tensors])
        print(f"READY {cache_id}", flush=True)
        sys.stdin.readline()
        engine.finalize()
    return 0


def _best(fn: Callable[[], None], repeat: int) -> float:
    fn()                                   # warm-up: first use takes the peer's table copy
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def _run(args: argparse.Namespace) -> int:
    from . import native

    block_lists = {
        "contiguous": np.arange(args.blocks, dtype=np.uint64),
        "scattered": np.arange(0, args.blocks, 2, dtype=np.uint64),
    }
    rows: list[tuple[str, int, float]] = []

    def measure(where: str, engine: native.LlmDataDist, remote_id: int, local_id: int,
                local: list[np.ndarray], expect: int) -> None:
        for shape, blocks in block_lists.items():
            nbytes = int(blocks.size) * args.block_bytes * args.tensors
            for t in local:
                t.fill(0)
            seconds = _best(lambda: engine.pull_kv_blocks(native.CacheIndex(SRC_CLUSTER, remote_id),
                                                          native.Cache(local_id), blocks, blocks), args.repeat)
            got = local[0][blocks.astype(np.intp)]
            if not (got == expect).all():
                raise SystemExit(f"bench: pull_kv_blocks ({where}, {shape}) moved wrong bytes")
            rows.append((f"pull_kv_blocks {where}, {shape}", nbytes, seconds))
            seconds = _best(lambda: engine.push_kv_blocks(native.Cache(local_id, cache_desc=None),
                                                          native.CacheIndex(SRC_CLUSTER, remote_id),
                                                          blocks, blocks,
                                                          native.KvCacheExtParam((0, args.tensors // 2 - 1),
                                                                                 (0, args.tensors // 2 - 1))),
                            args.repeat)
            rows.append((f"push_kv_blocks {where}, {shape}", nbytes, seconds))

    desc = native.CacheDesc(args.tensors, native.DataType.DT_UINT8, [args.blocks, args.block_bytes])
    local = _tensors(args.tensors, args.blocks, args.block_bytes, fill=0)
    with native.LlmDataDist(DST_CLUSTER, native.LlmRole.DECODER) as dst_engine:
        dst_engine.initialize({native.OPTION_DEVICE_ID: "1"})
        local_id = dst_engine.register_kv_cache(desc, [t.ctypes.data for t in local])

        # 1. both engines in this process
        port = _free_port()
        with native.LlmDataDist(SRC_CLUSTER, native.LlmRole.PROMPT) as src_engine:
            src_engine.initialize({native.OPTION_DEVICE_ID: "0", native.OPTION_LISTEN_IP_INFO: f"127.0.0.1:{port}"})
            remote = _tensors(args.tensors, args.blocks, args.block_bytes, fill=7)
            remote_id = src_engine.register_kv_cache(desc, [t.ctypes.data for t in remote])
            cluster = native.ClusterInfo(SRC_CLUSTER, 0, [native.IpInfo("127.0.0.1", 0)], [native.IpInfo("127.0.0.1", port)])
            status, per = dst_engine.link_llm_clusters([cluster], 5000)
            if status != 0:
                raise SystemExit(f"bench: link failed {status} {per}")
            measure("in-process", dst_engine, remote_id, local_id, local, expect=7)
            dst_engine.unlink_llm_clusters([cluster], 5000)

        # 2. the source engine in another process
        port = _free_port()
        child = subprocess.Popen(
            [sys.executable, "-m", "llm_datadist_ffi._bench", "--serve", "--port", str(port),
             "--tensors", str(args.tensors), "--blocks", str(args.blocks), "--block-bytes", str(args.block_bytes)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert child.stdin is not None and child.stdout is not None
        try:
            line = child.stdout.readline().split()
            if len(line) != 2 or line[0] != "READY":
                raise SystemExit(f"bench: the source process did not start ({line!r})")
            cluster = native.ClusterInfo(SRC_CLUSTER, 0, [native.IpInfo("127.0.0.1", 0)], [native.IpInfo("127.0.0.1", port)])
            status, per = dst_engine.link_llm_clusters([cluster], 5000)
            if status != 0:
                raise SystemExit(f"bench: link failed {status} {per}")
            measure("cross-process", dst_engine, int(line[1]), local_id, local, expect=7)
            dst_engine.unlink_llm_clusters([cluster], 5000)
        finally:
            child.stdin.write("done\n")
            child.stdin.flush()
            child.wait(timeout=30)

    def baseline(nbytes: int) -> float:
        src = np.ones(nbytes, dtype=np.uint8)
        dst = np.empty_like(src)
        return nbytes / _best(lambda: np.copyto(dst, src), args.repeat)

    rates = {n: baseline(n) for n in {r[1] for r in rows}}
    print(f"{args.tensors} tensors x {args.blocks} blocks x {args.block_bytes} B; best of {args.repeat}")
    print(f"{'transfer':<42} {'bytes':>11} {'ms':>9} {'GB/s':>7} {'x memcpy':>9}")
    for label, nbytes, seconds in rows:
        rate = nbytes / seconds
        print(f"{label:<42} {nbytes:>11} {seconds * 1e3:>9.3f} {rate / 1e9:>7.2f} {rate / rates[nbytes]:>9.2f}")
    for nbytes, rate in sorted(rates.items()):
        print(f"memcpy baseline for {nbytes} B: {rate / 1e9:.2f} GB/s")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m llm_datadist_ffi bench", description=__doc__.splitlines()[0])
    parser.add_argument("--tensors", type=int, default=8, help="K and V tensors (even)")
    parser.add_argument("--blocks", type=int, default=512)
    parser.add_argument("--block-bytes", type=int, default=16384)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.tensors < 2 or args.tensors % 2:
        parser.error("--tensors must be an even number >= 2")
    return _serve(args) if args.serve else _run(args)


if __name__ == "__main__":
    sys.exit(main())
