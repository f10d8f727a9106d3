"""``python -m llm_datadist_ffi demo``: a Prompt process and a Decoder process move paged
KV cache over 127.0.0.1 with the vendor's API, and every byte is verified.

It is written the way a serving engineer writes a KV connector for LLM-DataDist:

* both sides build their options with ``LLMConfig`` (CacheManager mode, direct mode;
  the Prompt listens);
* each side owns one K and one V tensor per layer, of shape ``[num_blocks,
  block_size, num_kv_heads, head_dim]`` in float16, and registers them as ONE
  blocks cache with the addresses interleaved ``k0, v0, k1, v1, …``, so that layer
  ``l`` is tensors ``2l, 2l+1`` (the default ``tensor_num_per_layer = 2``); the
  Prompt binds it to ``BlocksCacheKey(prompt_cluster_id, model_id=0)``;
* the Decoder links with an ``LLMClusterInfo`` and pulls a request's blocks layer by
  layer (``pull_blocks`` with ``src_layer_range=range(l, l + 1)``), then a whole
  request in one call, then every block for throughput.

The Prompt's tensors hold a pattern reproducible from the seed, so the Decoder
computes what every destination byte must be without reading the Prompt's memory
and compares its whole cache after each step: pulled blocks must match, every other
byte must still be zero. The table shows what moved and how fast, next to a memcpy
of the same number of bytes measured right after each step. Exit status 1 on any
mismatch, 2 for arguments that are out of range or sizes that do not fit in the
available memory (refused before anything is allocated) and when the set-up fails,
130 on Ctrl-C (the Prompt process is killed).
"""
from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import time
from typing import Any, List, Sequence, Tuple

import numpy as np

from ._cli import MEMCPY_CHUNK, CommandError, check_fits, describe_exit, description, int_in, \
    memcpy_seconds, run_interruptibly, spawn

PROMPT_CLUSTER_ID = 0x7F000001_6590_0001    # an address-derived id, as clients make them
DECODER_CLUSTER_ID = 0xC0A80102_6591_0002   # >= 2**63: ids are full uint64


def kv_pattern(tensor: int, shape: Tuple[int, ...], seed: int) -> np.ndarray:
    """The Prompt's content of tensor ``tensor`` (``2l`` = K, ``2l+1`` = V of layer ``l``)."""
    rng = np.random.default_rng([seed, tensor])
    return rng.integers(0, 2**16, size=shape, dtype=np.uint16).view(np.float16)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _config(listen_port: int = 0) -> Any:
    from ..vendor import LLMConfig

    config = LLMConfig()
    config.device_id = 0
    config.enable_cache_manager = True
    config.enable_remote_cache_accessible = True
    config.sync_kv_timeout = 20000
    if listen_port:
        config.listen_ip_info = f"127.0.0.1:{listen_port}"
    return config


def _register_kv(cache_manager: Any, k_caches: List[np.ndarray], v_caches: List[np.ndarray],
                 cluster_id: int) -> Any:
    """One blocks cache over every layer's K and V tensors, interleaved k0, v0, k1, v1, …"""
    from ..vendor import BlocksCacheKey, CacheDesc, DataType

    addrs = []
    for k, v in zip(k_caches, v_caches):
        addrs += [k.ctypes.data, v.ctypes.data]
    desc = CacheDesc(len(addrs), list(k_caches[0].shape), DataType.DT_FLOAT16)
    return cache_manager.register_blocks_cache(desc, addrs, BlocksCacheKey(cluster_id=cluster_id, model_id=0))


def _shape(args: argparse.Namespace) -> Tuple[int, int, int, int]:
    return (args.blocks, args.block_size, args.kv_heads, args.head_dim)


def _prompt(args: argparse.Namespace) -> int:
    from ..vendor import LLMDataDist, LLMException, LLMRole

    shape = _shape(args)
    k_caches = [kv_pattern(2 * layer, shape, args.seed) for layer in range(args.layers)]
    v_caches = [kv_pattern(2 * layer + 1, shape, args.seed) for layer in range(args.layers)]
    with LLMDataDist(LLMRole.PROMPT, PROMPT_CLUSTER_ID) as datadist:
        try:
            datadist.init(_config(args.port).generate_options())
            cache = _register_kv(datadist.cache_manager, k_caches, v_caches, PROMPT_CLUSTER_ID)
        except LLMException as exc:
            raise CommandError(f"the Prompt's set-up failed: {type(exc).__name__} ({exc.status_code}): {exc}") \
                from None
        print(f"READY {cache.cache_id}", flush=True)
        sys.stdin.readline()              # the Decoder says when it is done (or ends: EOF)
    return 0


class _Check:
    """The Decoder's expected cache content, updated step by step."""

    def __init__(self, layers: int, shape: Tuple[int, ...], seed: int) -> None:
        self.seed = seed
        self.shape = shape
        self.expected = [np.zeros(shape, dtype=np.float16) for _ in range(2 * layers)]

    def pulled(self, src_blocks: Sequence[int], dst_blocks: Sequence[int], layers: range) -> None:
        for layer in layers:
            for tensor in (2 * layer, 2 * layer + 1):
                self.expected[tensor][list(dst_blocks)] = kv_pattern(tensor, self.shape, self.seed)[list(src_blocks)]

    def mismatches(self, k_caches: List[np.ndarray], v_caches: List[np.ndarray]) -> int:
        actual = [t for pair in zip(k_caches, v_caches) for t in pair]
        return sum(int(np.count_nonzero(a.view(np.uint16) != e.view(np.uint16)))
                   for a, e in zip(actual, self.expected))


def _memory_needed(args: argparse.Namespace) -> int:
    """Bytes of both processes at their peak: the Prompt's cache, the Decoder's cache
    and its expected copy, one tensor's pattern being generated on each side, and
    the memcpy baseline's buffers."""
    tensor: int = args.blocks * args.block_size * args.kv_heads * args.head_dim * 2
    cache = 2 * int(args.layers) * tensor
    return 3 * cache + 2 * tensor + 2 * min(cache, MEMCPY_CHUNK)


def _decoder(args: argparse.Namespace) -> int:
    from ..vendor import BlocksCacheKey, LLMClusterInfo, LLMDataDist, LLMException, LLMRole, LLMStatusCode

    check_fits(_memory_needed(args), f"a demo of {args.layers} layers x {args.blocks} blocks x {args.block_size} "
               f"tokens x {args.kv_heads} heads x {args.head_dim} (two copies of the KV cache and the check)",
               "choose fewer --layers, --blocks or a smaller --block-size, --kv-heads, --head-dim")
    port = _free_port()
    prompt = spawn(["llm_datadist_ffi", "demo", "--serve-prompt", "--port", str(port),
                    "--layers", str(args.layers), "--blocks", str(args.blocks), "--block-size", str(args.block_size),
                    "--kv-heads", str(args.kv_heads), "--head-dim", str(args.head_dim), "--seed", str(args.seed)])
    assert prompt.stdin is not None and prompt.stdout is not None
    shape = _shape(args)
    block_bytes = int(np.prod(shape[1:])) * 2
    rows: List[Tuple[str, int, int, float, float, int]] = []
    try:
        with LLMDataDist(LLMRole.DECODER, DECODER_CLUSTER_ID) as datadist:
            ready = prompt.stdout.readline().split()
            if len(ready) != 2 or ready[0] != "READY":
                try:
                    prompt.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    pass
                raise CommandError(f"the Prompt process did not start: it {describe_exit(prompt.poll())} "
                                   "(its messages are above)")
            datadist.init(_config().generate_options())
            cache_manager = datadist.cache_manager
            k_caches = [np.zeros(shape, dtype=np.float16) for _ in range(args.layers)]
            v_caches = [np.zeros(shape, dtype=np.float16) for _ in range(args.layers)]
            kv_cache = _register_kv(cache_manager, k_caches, v_caches, DECODER_CLUSTER_ID)

            cluster = LLMClusterInfo()
            cluster.remote_cluster_id = PROMPT_CLUSTER_ID
            cluster.append_local_ip_info("127.0.0.1", 0)
            cluster.append_remote_ip_info("127.0.0.1", port)
            ret, per_cluster = datadist.link_clusters([cluster], timeout=5000)
            if ret != LLMStatusCode.LLM_SUCCESS:
                raise CommandError(f"link_clusters failed: {ret}, {per_cluster}")

            check = _Check(args.layers, shape, args.seed)
            prompt_key = BlocksCacheKey(cluster_id=PROMPT_CLUSTER_ID, model_id=0)
            # a request whose prefix hit on the Prompt: its blocks are scattered there and here
            remote_blocks = list(range(1, args.blocks, 2))[: args.blocks // 4]
            local_blocks = list(range(0, args.blocks, 2))[: len(remote_blocks)]

            def step(label: str, src: List[int], dst: Any, layers: range, per_layer: bool, repeat: int = 1) -> None:
                start = time.perf_counter()
                calls = 0
                for _ in range(repeat):
                    if per_layer:
                        for layer in layers:
                            cache_manager.pull_blocks(prompt_key, kv_cache, src, dst,
                                                      src_layer_range=range(layer, layer + 1),
                                                      dst_layer_range=range(layer, layer + 1))
                            calls += 1
                    else:
                        cache_manager.pull_blocks(prompt_key, kv_cache, src, dst)
                        calls += 1
                seconds = (time.perf_counter() - start) / repeat
                moved = len(src) * block_bytes * 2 * len(layers)
                baseline = memcpy_seconds(moved)          # measured now: the machine's state of this row
                check.pulled(src, dst, layers)
                bad = check.mismatches(k_caches, v_caches)
                rows.append((label, calls // repeat, moved, seconds, baseline, bad))

            step(f"request, layer by layer ({len(remote_blocks)} blocks)", remote_blocks, local_blocks,
                 range(args.layers), per_layer=True)
            step("same request, one call for all layers", remote_blocks, local_blocks, range(args.layers),
                 per_layer=False)
            every = np.arange(args.blocks, dtype=np.uint64)
            step(f"every block of every layer (x{args.repeat})", every.tolist(), every, range(args.layers),
                 per_layer=False, repeat=args.repeat)

            datadist.unlink_clusters([cluster], timeout=5000)
            cache_manager.unregister_cache(kv_cache.cache_id)
    except LLMException as exc:
        raise CommandError(f"{type(exc).__name__} ({exc.status_code}): {exc}") from None
    finally:
        if prompt.poll() is None:
            try:
                prompt.stdin.write("done\n")
                prompt.stdin.flush()
            except BrokenPipeError:
                pass
        prompt.wait(timeout=30)

    print(f"Prompt (cluster {PROMPT_CLUSTER_ID:#x}) -> Decoder (cluster {DECODER_CLUSTER_ID:#x}) over "
          f"127.0.0.1:{port}")
    print(f"{args.layers} layers x (K, V) float16 {list(shape)}: {block_bytes} B per block, one blocks cache of "
          f"{2 * args.layers} interleaved tensors per side")
    print(f"{'pull_blocks':<44} {'calls':>5} {'bytes':>11} {'ms':>9} {'GB/s':>7} {'x memcpy':>8}  check")
    failures = 0
    for label, calls, moved, seconds, baseline, bad in rows:
        rate = moved / seconds if seconds > 0 else float("inf")
        ratio = baseline / seconds if seconds > 0 else float("inf")
        verdict = "ok" if bad == 0 else f"{bad} values differ"
        failures += bad
        print(f"{label:<44} {calls:>5} {moved:>11} {seconds * 1e3:>9.3f} {rate / 1e9:>7.2f} {ratio:>8.2f}  {verdict}")
    print("x memcpy: the pull's speed over a numpy memcpy of the same bytes, timed right after it. The first "
          "pull over a link also copies the Prompt's cache table.")
    if failures:
        print(f"demo: FAILED: {failures} values differ from what the Prompt holds", file=sys.stderr)
        return 1
    print("demo: every byte verified (pulled blocks equal the Prompt's, all others still zero)")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m llm_datadist_ffi demo", description=description(__doc__),
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--layers", type=int_in(1, 4096), default=8, help="model layers (K and V each), 1..4096")
    parser.add_argument("--blocks", type=int_in(4, 2**31), default=128, help="blocks per tensor, >= 4")
    parser.add_argument("--block-size", type=int_in(1, 2**20), default=16, help="tokens per block, >= 1")
    parser.add_argument("--kv-heads", type=int_in(1, 4096), default=8, help="KV heads, 1..4096")
    parser.add_argument("--head-dim", type=int_in(1, 65536), default=128, help="elements per head, 1..65536")
    parser.add_argument("--seed", type=int_in(0, 2**63 - 1), default=2024, help="seed of the Prompt's content, >= 0")
    parser.add_argument("--repeat", type=int_in(1, 10**6), default=5,
                        help="repetitions of the throughput step, 1..1000000")
    parser.add_argument("--serve-prompt", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int_in(0, 65535), default=0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    prog = "python -m llm_datadist_ffi demo"
    return run_interruptibly(prog, lambda: _prompt(args) if args.serve_prompt else _decoder(args))


if __name__ == "__main__":
    sys.exit(main())
