"""``python -m llm_datadist_ffi demo``: Prompt → Decoder KV-cache transfer across two
processes on 127.0.0.1, every byte verified.

The Decoder (this process) starts a Prompt process, which registers paged KV memory
(``layers`` layers of K and V tensors, ``blocks`` blocks each) filled with a
deterministic pattern and listens on a free port. The Decoder registers its own
zeroed paged memory, links, and pulls:

1. the seed example: source blocks 1, 3, 5, 7 into destination blocks 0, 2, 4, 6,
   every layer;
2. the same with layer ranges: source layers 1..2 into destination layers 0..1;
3. every block of every layer, for throughput (contiguous runs move as one region).

After each pull it recomputes what every destination byte must be from the pattern
(without reading the Prompt's memory) and compares the whole cache: untouched bytes
must still be zero. Exit status 1 on any mismatch, 2 on a setup failure.
"""
from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import time
from typing import Sequence

import numpy as np

PROMPT_CLUSTER, DECODER_CLUSTER = 1, 2


def pattern(tensor: int, shape: tuple[int, int], seed: int) -> "np.ndarray[tuple[int, int], np.dtype[np.uint8]]":
    """The Prompt's content of tensor ``tensor``: reproducible from the seed alone."""
    rng = np.random.default_rng([seed, tensor])
    return rng.integers(0, 256, size=shape, dtype=np.uint8)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _prompt(args: argparse.Namespace) -> int:
    from . import native

    shape = (args.blocks, args.block_bytes)
    tensors = [pattern(t, shape, args.seed) for t in range(2 * args.layers)]
    with native.LlmDataDist(PROMPT_CLUSTER, native.LlmRole.PROMPT) as engine:
        engine.initialize({native.OPTION_DEVICE_ID: "0",
                           native.OPTION_LISTEN_IP_INFO: f"127.0.0.1:{args.port}"})
        desc = native.CacheDesc(len(tensors), native.DataType.DT_UINT8, list(shape))
        cache_id = engine.register_kv_cache(desc, [t.ctypes.data for t in tensors])
        print(f"READY {cache_id}", flush=True)
        sys.stdin.readline()          # the Decoder says when it is done
        engine.finalize()
    return 0


def _expected_after(dst: list[np.ndarray], src_blocks: Sequence[int], dst_blocks: Sequence[int],
                    src_layers: range, dst_layers: range, shape: tuple[int, int], seed: int) -> None:
    for ls, ld in zip(src_layers, dst_layers):
        for j in range(2):
            source = pattern(2 * ls + j, shape, seed)
            dst[2 * ld + j][list(dst_blocks)] = source[list(src_blocks)]


def _decoder(args: argparse.Namespace) -> int:
    from . import LLMException, native

    port = _free_port()
    child = subprocess.Popen(
        [sys.executable, "-m", "llm_datadist_ffi._demo", "--serve-prompt", "--port", str(port),
         "--layers", str(args.layers), "--blocks", str(args.blocks),
         "--block-bytes", str(args.block_bytes), "--seed", str(args.seed)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert child.stdin is not None and child.stdout is not None
    try:
        line = child.stdout.readline().split()
        if len(line) != 2 or line[0] != "READY":
            print(f"demo: the Prompt process did not start (said {line!r})", file=sys.stderr)
            return 2
        src_cache_id = int(line[1])
        shape = (args.blocks, args.block_bytes)
        n_tensors = 2 * args.layers
        local = [np.zeros(shape, dtype=np.uint8) for _ in range(n_tensors)]
        expected = [np.zeros(shape, dtype=np.uint8) for _ in range(n_tensors)]
        rows: list[tuple[str, int, float]] = []
        failures = 0
        with native.LlmDataDist(DECODER_CLUSTER, native.LlmRole.DECODER) as engine:
            engine.initialize({native.OPTION_DEVICE_ID: "1"})
            desc = native.CacheDesc(n_tensors, native.DataType.DT_UINT8, list(shape))
            dst_id = engine.register_kv_cache(desc, [t.ctypes.data for t in local])
            cluster = native.ClusterInfo(PROMPT_CLUSTER, 0, [native.IpInfo("127.0.0.1", 0)],
                                         [native.IpInfo("127.0.0.1", port)])
            status, per_cluster = engine.link_llm_clusters([cluster], timeout_in_millis=5000)
            if status != 0:
                print(f"demo: link failed: {status} {per_cluster}", file=sys.stderr)
                return 2
            src = native.CacheIndex(PROMPT_CLUSTER, src_cache_id)
            dst = native.Cache(dst_id)
            every = np.arange(args.blocks, dtype=np.uint64)
            steps = [
                ("blocks 1,3,5,7 -> 0,2,4,6, all layers (1st use)", [1, 3, 5, 7], [0, 2, 4, 6], None, 1),
                ("same, src layers 1..2 -> dst layers 0..1", [1, 3, 5, 7], [0, 2, 4, 6],
                 native.KvCacheExtParam((1, 2), (0, 1)), 1),
                (f"all {args.blocks} blocks, all {args.layers} layers", every, every, None, args.repeat),
            ]
            for label, sb, db, ext, repeat in steps:
                start = time.perf_counter()
                for _ in range(repeat):
                    engine.pull_kv_blocks(src, dst, sb, db, ext)
                seconds = (time.perf_counter() - start) / repeat
                src_layers = range(0, args.layers) if ext is None else range(ext.src_layer_range[0],
                                                                              ext.src_layer_range[1] + 1)
                dst_layers = range(0, args.layers) if ext is None else range(ext.dst_layer_range[0],
                                                                              ext.dst_layer_range[1] + 1)
                _expected_after(expected, [int(b) for b in sb], [int(b) for b in db], src_layers, dst_layers,
                                shape, args.seed)
                moved = len(sb) * args.block_bytes * 2 * len(src_layers)
                bad = sum(int(np.count_nonzero(a != e)) for a, e in zip(local, expected))
                failures += bad
                rows.append((label + ("" if bad == 0 else f"  MISMATCH: {bad} bytes"), moved, seconds))
            engine.unlink_llm_clusters([cluster], timeout_in_millis=5000)
            engine.unregister_kv_cache(dst_id)
    except LLMException as exc:
        print(f"demo: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    finally:
        child.stdin.write("done\n")
        child.stdin.flush()
        child.wait(timeout=30)

    scratch_src = np.ones(rows[-1][1], dtype=np.uint8)
    scratch_dst = np.zeros_like(scratch_src)          # touched: no page faults in the timing
    np.copyto(scratch_dst, scratch_src)
    start = time.perf_counter()
    for _ in range(args.repeat):
        np.copyto(scratch_dst, scratch_src)
    memcpy_rate = rows[-1][1] / ((time.perf_counter() - start) / args.repeat)

    print(f"Prompt (cluster {PROMPT_CLUSTER}, pid {child.pid}) -> Decoder (cluster {DECODER_CLUSTER}) "
          f"over 127.0.0.1:{port}: {args.layers} layers x K/V, {args.blocks} blocks of {args.block_bytes} B")
    print(f"{'transfer':<50} {'bytes':>12} {'ms':>9} {'GB/s':>7} {'x memcpy':>9}")
    for label, moved, seconds in rows:
        rate = moved / seconds if seconds > 0 else float("inf")
        print(f"{label:<50} {moved:>12} {seconds * 1e3:>9.3f} {rate / 1e9:>7.2f} {rate / memcpy_rate:>9.2f}")
    print(f"memcpy baseline in this process: {memcpy_rate / 1e9:.2f} GB/s; the first pull over a link "
          "also copies the peer's cache table")
    if failures:
        print(f"demo: FAILED, {failures} bytes differ from the expected content", file=sys.stderr)
        return 1
    print("demo: every byte verified")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m llm_datadist_ffi demo", description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--blocks", type=int, default=256)
    parser.add_argument("--block-bytes", type=int, default=16384)
    parser.add_argument("--seed", type=int, default=2024)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--serve-prompt", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.layers < 3 or args.blocks < 8:
        parser.error("--layers must be at least 3 and --blocks at least 8 (the demo uses layers 0..2 and blocks 0..7)")
    return _prompt(args) if args.serve_prompt else _decoder(args)


if __name__ == "__main__":
    sys.exit(main())
