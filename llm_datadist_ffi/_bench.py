"""``python -m llm_datadist_ffi bench``: transfer throughput as a ratio of memcpy.

Figures are only meaningful against a baseline measured on the same machine in the
same state, so every row is printed as GB/s and as a multiple of its own memcpy
baseline: each repetition of a transfer is followed at once by a ``numpy.copyto`` of
the same number of bytes, and each row reports the best of its transfers against the
best of its copies (memory bandwidth drifts with the machine's load and frequency;
a baseline measured once, before or after, would move the ratios with it). Rows:

- ``pull_kv_blocks`` between two engines of this process (one-sided memcpy), for
  contiguous block lists (coalesced into one run per tensor) and scattered ones
  (every other block: one region per block);
- the same with the source engine in another process (``process_vm_readv`` or the
  socket fall-back of the mock);
- ``push_kv_blocks`` in the same two settings.

``--memory library`` puts every cache in memory of the ACL runtime
(``acl.shared_array``) instead of numpy arrays: across processes the mock then copies
between mappings of each other's library memory (docs/security.md §2.7). Each row
names the path its transfers took (``mock_control.last_transfer_path``).

This is a benchmark, not a test: it asserts nothing about speed. It does check that
the bytes arrived, so a fast wrong answer cannot pass for a result. ``--json`` prints
the rows as JSON. Sizes that do not fit in the available memory are refused before
anything is allocated (exit status 2), as are out-of-range arguments; Ctrl-C stops it
at once (status 130).
"""
from __future__ import annotations

import argparse
import json
import socket
import sys
import time
from typing import Any, Callable, Dict, List, Sequence, Tuple

import numpy as np

from ._cli import MEMCPY_CHUNK, CommandError, check_fits, describe_exit, description, int_in, \
    memcpy_seconds, run_interruptibly, spawn

SRC_CLUSTER, DST_CLUSTER = 11, 12


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _tensors(count: int, blocks: int, block_bytes: int, fill: int, memory: str = "user") -> list[np.ndarray]:
    if memory == "user":
        return [np.full((blocks, block_bytes), (fill + i) % 251, dtype=np.uint8) for i in range(count)]
    from . import acl

    acl.set_device(0)
    tensors = [acl.shared_array((blocks, block_bytes)) for _ in range(count)]
    for i, tensor in enumerate(tensors):
        tensor.fill((fill + i) % 251)
    return tensors


def _serve(args: argparse.Namespace) -> int:
    from . import native

    tensors = _tensors(args.tensors, args.blocks, args.block_bytes, fill=7, memory=args.memory)
    with native.LlmDataDist(SRC_CLUSTER, native.LlmRole.PROMPT) as engine:
        engine.initialize({native.OPTION_DEVICE_ID: "0",
                           native.OPTION_LISTEN_IP_INFO: f"127.0.0.1:{args.port}"})
        desc = native.CacheDesc(len(tensors), native.DataType.DT_UINT8, [args.blocks, args.block_bytes])
        cache_id = engine.register_kv_cache(desc, [t.ctypes.data for t in tensors])
        print(f"READY {cache_id}", flush=True)
        sys.stdin.readline()
        engine.finalize()
    return 0


def _best_interleaved(transfer: Callable[[], None], nbytes: int, repeat: int) -> Tuple[float, float]:
    """(best seconds of ``transfer``, best seconds of a memcpy of ``nbytes``), the two
    alternating so that both see the machine in the same state."""
    transfer()                             # warm-up: first use takes the peer's table copy
    best_transfer = best_copy = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        transfer()
        best_transfer = min(best_transfer, time.perf_counter() - start)
        best_copy = min(best_copy, memcpy_seconds(nbytes))
    return best_transfer, best_copy


def _memory_needed(args: argparse.Namespace) -> int:
    """Local tensors, the in-process source's and the child's, the baseline's buffers."""
    cache: int = args.tensors * args.blocks * args.block_bytes
    return 3 * cache + 2 * min(cache, MEMCPY_CHUNK)


def _link(engine: Any, port: int) -> Any:
    from . import native

    cluster = native.ClusterInfo(SRC_CLUSTER, 0, [native.IpInfo("127.0.0.1", 0)], [native.IpInfo("127.0.0.1", port)])
    status, per = engine.link_llm_clusters([cluster], 5000)
    if status != 0:
        raise CommandError(f"link to 127.0.0.1:{port} failed: {status} {per}")
    return cluster


def _run(args: argparse.Namespace) -> List[Dict[str, Any]]:
    from . import mock_control, native

    check_fits(_memory_needed(args), f"a bench of {args.tensors} tensors x {args.blocks} blocks x "
               f"{args.block_bytes} B (three copies: local, in-process source, source process)",
               "choose fewer --tensors or --blocks or a smaller --block-bytes")
    block_lists = {
        "contiguous": np.arange(args.blocks, dtype=np.uint64),
        "scattered": np.arange(0, args.blocks, 2, dtype=np.uint64),
    }
    rows: List[Dict[str, Any]] = []
    last_layer = args.tensors // 2 - 1

    def measure(where: str, engine: native.LlmDataDist, remote_id: int, local_id: int,
                local: list[np.ndarray], expect: int) -> None:
        for shape, blocks in block_lists.items():
            nbytes = int(blocks.size) * args.block_bytes * args.tensors
            for t in local:
                t.fill(0)
            def pull() -> None:
                engine.pull_kv_blocks(native.CacheIndex(SRC_CLUSTER, remote_id), native.Cache(local_id), blocks, blocks)

            seconds, baseline = _best_interleaved(pull, nbytes, args.repeat)
            got = local[0][blocks.astype(np.intp)]
            if not (got == expect).all():
                raise CommandError(f"pull_kv_blocks ({where}, {shape}) moved wrong bytes", status=1)
            rows.append(_row("pull_kv_blocks", where, shape, nbytes, seconds, baseline,
                             mock_control.last_transfer_path(engine, SRC_CLUSTER)))

            def push() -> None:
                engine.push_kv_blocks(native.Cache(local_id, cache_desc=None),
                                      native.CacheIndex(SRC_CLUSTER, remote_id), blocks, blocks,
                                      native.KvCacheExtParam((0, last_layer), (0, last_layer)))

            seconds, baseline = _best_interleaved(push, nbytes, args.repeat)
            rows.append(_row("push_kv_blocks", where, shape, nbytes, seconds, baseline,
                             mock_control.last_transfer_path(engine, SRC_CLUSTER)))

    desc = native.CacheDesc(args.tensors, native.DataType.DT_UINT8, [args.blocks, args.block_bytes])
    local = _tensors(args.tensors, args.blocks, args.block_bytes, fill=0, memory=args.memory)
    with native.LlmDataDist(DST_CLUSTER, native.LlmRole.DECODER) as dst_engine:
        dst_engine.initialize({native.OPTION_DEVICE_ID: "1"})
        local_id = dst_engine.register_kv_cache(desc, [t.ctypes.data for t in local])

        # 1. both engines in this process
        port = _free_port()
        with native.LlmDataDist(SRC_CLUSTER, native.LlmRole.PROMPT) as src_engine:
            src_engine.initialize({native.OPTION_DEVICE_ID: "0", native.OPTION_LISTEN_IP_INFO: f"127.0.0.1:{port}"})
            remote = _tensors(args.tensors, args.blocks, args.block_bytes, fill=7, memory=args.memory)
            remote_id = src_engine.register_kv_cache(desc, [t.ctypes.data for t in remote])
            cluster = _link(dst_engine, port)
            measure("in-process", dst_engine, remote_id, local_id, local, expect=7)
            dst_engine.unlink_llm_clusters([cluster], 5000)
        del remote

        # 2. the source engine in another process
        port = _free_port()
        child = spawn(["llm_datadist_ffi._bench", "--serve", "--port", str(port), "--tensors", str(args.tensors),
                       "--blocks", str(args.blocks), "--block-bytes", str(args.block_bytes), "--memory", args.memory])
        assert child.stdin is not None and child.stdout is not None
        try:
            line = child.stdout.readline().split()
            if len(line) != 2 or line[0] != "READY":
                child.wait(timeout=5)
                raise CommandError(f"the source process did not start: it {describe_exit(child.poll())}")
            cluster = _link(dst_engine, port)
            measure("cross-process", dst_engine, int(line[1]), local_id, local, expect=7)
            dst_engine.unlink_llm_clusters([cluster], 5000)
        finally:
            if child.poll() is None:
                child.stdin.write("done\n")
                child.stdin.flush()
            child.wait(timeout=30)
    return rows


def _row(call: str, where: str, shape: str, nbytes: int, seconds: float, baseline: float,
         path: str) -> Dict[str, Any]:
    seconds, baseline = max(seconds, 1e-9), max(baseline, 1e-9)     # below the clock's resolution
    return {"transfer": f"{call} {where}, {shape}", "path": path, "bytes": nbytes, "seconds": seconds,
            "gb_per_s": nbytes / seconds / 1e9, "memcpy_seconds": baseline,
            "memcpy_gb_per_s": nbytes / baseline / 1e9, "x_memcpy": baseline / seconds}


def _report(args: argparse.Namespace, rows: List[Dict[str, Any]]) -> None:
    if args.json:
        print(json.dumps({"tensors": args.tensors, "blocks": args.blocks, "block_bytes": args.block_bytes,
                          "repeat": args.repeat, "memory": args.memory, "rows": rows}, indent=2))
        return
    print(f"{args.tensors} tensors x {args.blocks} blocks x {args.block_bytes} B of {args.memory} memory; best of "
          f"{args.repeat}, each transfer followed by a memcpy of the same bytes")
    print(f"{'transfer':<42} {'path':<12} {'bytes':>11} {'ms':>9} {'GB/s':>7} {'memcpy GB/s':>11} {'x memcpy':>9}")
    for row in rows:
        print(f"{row['transfer']:<42} {row['path']:<12} {row['bytes']:>11} {row['seconds'] * 1e3:>9.3f} "
              f"{row['gb_per_s']:>7.2f} {row['memcpy_gb_per_s']:>11.2f} {row['x_memcpy']:>9.2f}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m llm_datadist_ffi bench", description=description(__doc__),
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--tensors", type=int_in(2, 4096), default=8, help="K and V tensors, even, 2..4096")
    parser.add_argument("--blocks", type=int_in(1, 2**31), default=512, help="blocks per tensor, >= 1")
    parser.add_argument("--block-bytes", type=int_in(1, 2**31), default=16384, help="bytes per block, >= 1")
    parser.add_argument("--repeat", type=int_in(1, 10**6), default=5, help="repetitions per row (best is kept)")
    parser.add_argument("--memory", choices=("user", "library"), default="user",
                        help="caches in numpy arrays (user) or in the ACL runtime's memory (library: acl.shared_array)")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int_in(0, 65535), default=0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.tensors % 2:
        parser.error("argument --tensors: must be even (K and V of each layer)")
    prog = "python -m llm_datadist_ffi bench"
    if args.serve:
        return run_interruptibly(prog, lambda: _serve(args))

    def work() -> int:
        _report(args, _run(args))
        return 0
    return run_interruptibly(prog, work)


if __name__ == "__main__":
    sys.exit(main())
