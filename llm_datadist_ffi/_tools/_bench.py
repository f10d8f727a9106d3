"""``python -m llm_datadist_ffi bench``: the transfer benchmark suite, every figure as a ratio to its floor.

Figures are only meaningful against floors measured on the same machine in the same
state, so each repetition of a transfer is followed at once by its floors: a memcpy of
the same byte count and, for a peer in another process, a raw ``process_vm_readv``
(``process_vm_writev`` for pushes) of exactly the same regions; a row reports the best
of its transfers against the best of each floor. The suite covers block sizes (a list,
4 KiB to 4 MiB by default), contiguous and scattered (random order) block lists, two
memory kinds (numpy arrays the user registers; library memory from ``acl.malloc``),
the paths bytes take (two engines in this process; a peer process the kernel
identified, ``process_vm``; a peer with ``LLDD_MOCK_NO_PROCESS_VM=1``, the socket; the
shared mapping of library memory wherever the backend reports it), 1 to N threads
pulling disjoint blocks over one link, pulls and pushes. Then the cost of one call (a
one-block pull through the native API, and the part of it spent in Python: the same
call made straight into C costs the rest), the Python cost each extra block adds to a
call (block lists from Python lists and numpy arrays, up to the request limit: the
fixed cost of a call is the one-call figure, not charged to the blocks), and the goals of the
project's performance work with their targets, each met or not.

This is a benchmark, not a test: it asserts nothing about speed. It checks every
transfer's bytes and exits with status 1 when any are wrong, so a fast wrong answer
cannot pass for a result. ``--json`` prints everything as JSON, ``--plot FILE.png``
draws GB/s against block size per path with the floors (matplotlib: ``pip install
llm_datadist_ffi[plot]``). Sizes that do not fit in the available memory are refused
before anything is allocated (exit status 2), as are out-of-range arguments; Ctrl-C
stops it at once (status 130).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence

import numpy as np

from . import _bench_report
from ._bench_measure import RawProcessVm, RegionsMemcpy, Tensors, best_interleaved, blocks_hold, pattern, per_call, \
    per_call_pair, read_remote, start_library
from ._cli import MEMCPY_CHUNK, CommandError, check_fits, describe_exit, description, int_in, run_interruptibly, \
    spawn

SRC_CLUSTER, DST_CLUSTER = 11, 12
PROG = "python -m llm_datadist_ffi bench"

#: Entries of one direct-mode pull request, ``tensors + 2 x runs`` (docs/reference/semantics.md §15).
REQUEST_ENTRIES_LIMIT = 131064
#: The block-list rows use two tensors of this many bytes per block, so that the bytes
#: moved are small beside the handling of the list.
LIST_TENSORS, LIST_BLOCK_BYTES = 2, 64
#: The longest scattered block list one request takes with ``LIST_TENSORS`` tensors.
LIST_LIMIT = (REQUEST_ENTRIES_LIMIT - LIST_TENSORS) // 2

NO_PROCESS_VM = "LLDD_MOCK_NO_PROCESS_VM"
PATHS = ("in-process", "process_vm", "socket")
MEMORY_KINDS = ("user", "library")
OPS = ("pull", "push")
DEFAULT_SIZES = "4K,16K,64K,256K,1M,4M"


# ---- arguments ----------------------------------------------------------------------------------

def byte_size(low: int, high: int) -> Callable[[str], int]:
    """An argparse ``type``: a byte count, decimal with an optional K, M or G (powers of 1024)."""
    units = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}

    def parse(text: str) -> int:
        number, unit = text.rstrip("KMGTkmgt"), text[len(text.rstrip("KMGTkmgt")):].upper()
        if unit not in units or not number.isdigit():
            raise argparse.ArgumentTypeError(f"{text!r} is not a byte count (such as 4096, 64K or 4M)")
        value = int(number) * units[unit]
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{text} is out of range: must be in [{low}, {high}] bytes")
        return value
    parse.__name__ = "byte count"
    return parse


def sizes_list(text: str) -> List[int]:
    """An argparse ``type``: comma-separated block sizes, ascending after sorting, distinct."""
    parse = byte_size(1, 2**31)
    sizes = sorted({parse(item) for item in text.split(",")})
    return sizes


def names_list(allowed: Sequence[str]) -> Callable[[str], List[str]]:
    """An argparse ``type``: a comma-separated subset of ``allowed``, in ``allowed``'s order."""
    def parse(text: str) -> List[str]:
        names = text.split(",")
        unknown = [name for name in names if name not in allowed]
        if unknown:
            raise argparse.ArgumentTypeError(f"{unknown[0]!r} is not one of {', '.join(allowed)}")
        return [name for name in allowed if name in names]
    parse.__name__ = "list"
    return parse


def thread_counts(most: int) -> List[int]:
    """1, 2, 4, ... up to ``most``, and ``most`` itself: every count on a small machine,
    a handful on a large one."""
    counts = [1]
    while counts[-1] * 2 < most:
        counts.append(counts[-1] * 2)
    return counts + [most] if most > 1 else counts


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# ---- the peer process ---------------------------------------------------------------------------

def _serve(args: argparse.Namespace) -> int:
    """The peer: registers one cache per memory kind, reports its pid, cache ids and
    tensor addresses on one line, and serves until its stdin says so."""
    from .. import native

    with contextlib.ExitStack() as stack:
        if "library" in args.memory:
            stack.callback(start_library())
        engine = stack.enter_context(native.LlmDataDist(SRC_CLUSTER, native.LlmRole.PROMPT))
        engine.initialize({native.OPTION_DEVICE_ID: "0", native.OPTION_LISTEN_IP_INFO: f"127.0.0.1:{args.port}"})
        desc = native.CacheDesc(args.tensors, native.DataType.DT_UINT8, [args.blocks, args.block_bytes])
        report: Dict[str, Any] = {"pid": os.getpid(), "caches": {}}
        for kind in args.memory:
            tensors = Tensors(kind, args.tensors, args.blocks, args.block_bytes)
            stack.callback(tensors.close)   # after the engine is gone (callbacks run last in, first out)
            tensors.fill(7)
            report["caches"][kind] = {"id": engine.register_kv_cache(desc, tensors.addresses),
                                      "addresses": tensors.addresses}
        print("READY " + json.dumps(report), flush=True)
        sys.stdin.readline()
    return 0


# ---- the suite ----------------------------------------------------------------------------------

@dataclass
class Peer:
    """The source end of one link, as the measuring side sees it."""

    path: str
    pid: Optional[int]                                  # None: the same process
    ids: Dict[str, int]                                 # memory kind -> cache id
    addresses: Dict[str, List[int]]
    views: Dict[str, List["np.ndarray[Any, Any]"]] = field(default_factory=dict)   # same process only


@dataclass
class Results:
    transfers: List[Dict[str, Any]] = field(default_factory=list)
    per_call: List[Dict[str, Any]] = field(default_factory=list)
    block_lists: List[Dict[str, Any]] = field(default_factory=list)
    paths: Dict[str, str] = field(default_factory=dict)


class Suite:
    """The rows of one run: for each block size, the local caches of each memory kind
    and one source per path (an engine in this process, a peer process, a peer process
    linked for the socket), each measured by :meth:`measure`; then the block lists."""

    def __init__(self, args: argparse.Namespace, engine: Any) -> None:
        self.args, self.engine = args, engine
        self.results = Results()
        self.rng = np.random.default_rng(20261201)
        self.push_base = 20
        self._pool: Optional[ThreadPoolExecutor] = None     # the thread rows' workers, shut down at the end

    # -- one block size --
    def block_size(self, block_bytes: int) -> None:
        from .. import native

        args = self.args
        blocks = max(2, args.bytes // (args.tensors * block_bytes))
        desc = native.CacheDesc(args.tensors, native.DataType.DT_UINT8, [blocks, block_bytes])
        with contextlib.ExitStack() as stack:
            local: Dict[str, Tensors] = {}
            local_ids: Dict[str, int] = {}
            for kind in args.memory:
                local[kind] = Tensors(kind, args.tensors, blocks, block_bytes)
                stack.callback(local[kind].close)
                local_ids[kind] = self.engine.register_kv_cache(desc, local[kind].addresses)
                stack.callback(self.engine.unregister_kv_cache, local_ids[kind])
            if "in-process" in args.paths:
                with self._in_process_peer(desc, blocks, block_bytes) as peer:
                    self.measure(peer, local, local_ids, blocks, block_bytes)
            for path in ("process_vm", "socket"):
                if path in args.paths:
                    with self._peer_process(path, blocks, block_bytes) as peer:
                        self.measure(peer, local, local_ids, blocks, block_bytes)

    @contextlib.contextmanager
    def _in_process_peer(self, desc: Any, blocks: int, block_bytes: int) -> Iterator[Peer]:
        from .. import native

        port = _free_port()
        with contextlib.ExitStack() as stack:
            remote: Dict[str, Tensors] = {}
            for kind in self.args.memory:
                remote[kind] = Tensors(kind, self.args.tensors, blocks, block_bytes)
                stack.callback(remote[kind].close)
                remote[kind].fill(7)
            source = stack.enter_context(native.LlmDataDist(SRC_CLUSTER, native.LlmRole.PROMPT))
            source.initialize({native.OPTION_DEVICE_ID: "0", native.OPTION_LISTEN_IP_INFO: f"127.0.0.1:{port}"})
            ids = {kind: source.register_kv_cache(desc, t.addresses) for kind, t in remote.items()}
            with self._link(port) as path:
                yield Peer(path, None, ids, {k: t.addresses for k, t in remote.items()},
                           {k: t.views for k, t in remote.items()})

    @contextlib.contextmanager
    def _peer_process(self, path: str, blocks: int, block_bytes: int) -> Iterator[Peer]:
        args = self.args
        port = _free_port()
        child = spawn(["llm_datadist_ffi._tools._bench", "--serve", "--port", str(port), "--tensors", str(args.tensors),
                       "--blocks", str(blocks), "--block-bytes", str(block_bytes),
                       "--memory", ",".join(args.memory)])
        assert child.stdin is not None and child.stdout is not None
        try:
            line = child.stdout.readline()
            if not line.startswith("READY "):
                child.wait(timeout=30)
                raise CommandError(f"the peer process did not start: it {describe_exit(child.poll())}")
            report = json.loads(line[len("READY "):])
            caches = report["caches"]
            with self._link(port, socket=path == "socket") as reported:
                yield Peer(reported, int(report["pid"]), {k: int(c["id"]) for k, c in caches.items()},
                           {k: [int(a) for a in c["addresses"]] for k, c in caches.items()})
        finally:
            if child.poll() is None:
                child.stdin.write("done\n")
                child.stdin.flush()
            child.wait(timeout=30)

    @contextlib.contextmanager
    def _link(self, port: int, socket: bool = False) -> Iterator[str]:
        """Link to the source listening on ``port``; yields the path the backend reports
        for the link. ``socket``: the mock's socket path, which the linking side chooses
        when ``LLDD_MOCK_NO_PROCESS_VM`` is set while it links."""
        from .. import mock_control, native

        cluster = native.ClusterInfo(SRC_CLUSTER, 0, [native.IpInfo("127.0.0.1", 0)],
                                     [native.IpInfo("127.0.0.1", port)])
        before = os.environ.get(NO_PROCESS_VM)
        if socket:
            os.environ[NO_PROCESS_VM] = "1"
        try:
            status, per = self.engine.link_llm_clusters([cluster], 5000)
        finally:
            if socket and before is None:
                del os.environ[NO_PROCESS_VM]
            elif socket and before is not None:
                os.environ[NO_PROCESS_VM] = before
        if status != 0:
            raise CommandError(f"link to 127.0.0.1:{port} failed: {status} {per}")
        try:
            path = mock_control.link_path(self.engine, SRC_CLUSTER)
            yield "in-process" if path == "same-process" else path
        finally:
            self.engine.unlink_llm_clusters([cluster], 5000)

    # -- the rows of one peer --
    def measure(self, peer: Peer, local: Dict[str, Tensors], local_ids: Dict[str, int], blocks: int,
                block_bytes: int) -> None:
        from .. import native

        args = self.args
        shapes = {"contiguous": np.arange(blocks, dtype=np.uint64),
                  "scattered": self.rng.permutation(blocks).astype(np.uint64)}
        for kind in args.memory:
            # what the peer's blocks hold: one value per block and tensor
            model = np.stack([pattern(7, t, blocks) for t in range(args.tensors)])
            # registered user memory keeps the process_vm path whatever the link reports for library memory
            path = "process_vm" if kind == "user" and peer.path == "shared" else peer.path
            self.results.paths.setdefault(path, "measured")
            source = native.CacheIndex(SRC_CLUSTER, peer.ids[kind])
            target = native.Cache(local_ids[kind])
            last_layer = args.tensors // 2 - 1
            ext = native.KvCacheExtParam((0, last_layer), (0, last_layer))

            def raw(src: "np.ndarray[Any, Any]", dst: "np.ndarray[Any, Any]", push: bool,
                    kind: str = kind) -> Optional[RawProcessVm]:
                if peer.pid is None:
                    return None
                return RawProcessVm(peer.pid, local[kind].addresses, peer.addresses[kind], block_bytes, src, dst, push)

            for shape, order in shapes.items():
                nbytes = int(order.size) * block_bytes * args.tensors
                row = {"path": path, "memory": kind, "shape": shape, "block_bytes": block_bytes, "bytes": nbytes}
                regions = RegionsMemcpy(args.tensors, blocks, block_bytes, order) if kind == "library" else None
                try:
                    path = self._rows(row, kind, order, nbytes, blocks, block_bytes, source, target, local,
                                      local_ids, model, peer, ext, raw, regions)
                finally:
                    if regions is not None:
                        regions.close()
            if block_bytes == args.sizes[0]:
                self.one_call(peer, path, kind, source, target, local[kind], block_bytes, raw)

    def _rows(self, row: Dict[str, Any], kind: str, order: "np.ndarray[Any, Any]", nbytes: int, blocks: int,
              block_bytes: int, source: Any, target: Any, local: Dict[str, Tensors], local_ids: Dict[str, int],
              model: "np.ndarray[Any, Any]", peer: Peer, ext: Any, raw: Callable[..., Optional[RawProcessVm]],
              regions: Optional[RegionsMemcpy]) -> str:
        """The pull rows (one per thread count) and the push row of one shape; the path
        the transfers took."""
        from .. import native

        args = self.args
        path, shape = row["path"], row["shape"]
        if "pull" in args.ops:
            for threads in thread_counts(args.threads) if shape == "scattered" else [1]:
                pull = self._pull(source, target, order, threads)
                for view in local[kind].views:
                    view.fill(0)
                pull()
                path = self._taken(path)
                self.results.paths.setdefault(path, "measured")
                row["path"] = path
                if not blocks_hold(local[kind].views, order, model[:, order.astype(np.intp)]):
                    raise CommandError(f"a pull ({path}, {kind} memory, {shape}, {block_bytes} B blocks, "
                                       f"{threads} threads) moved wrong bytes", status=1)
                best = best_interleaved(pull, nbytes, args.repeat, raw(order, order, push=False), regions)
                self.results.transfers.append(_transfer_row(dict(row, op="pull", threads=threads), best))
        if "push" in args.ops:
            self.push_base += 1
            local[kind].fill(self.push_base)
            sent = np.stack([pattern(self.push_base, t, blocks) for t in range(args.tensors)])

            def push(order: "np.ndarray[Any, Any]" = order, source: Any = source, kind: str = kind) -> None:
                self.engine.push_kv_blocks(native.Cache(local_ids[kind], cache_desc=None),
                                           source, order, order, ext)
            push()
            path = self._taken(path)
            self.results.paths.setdefault(path, "measured")
            row["path"] = path
            model[:, order.astype(np.intp)] = sent[:, order.astype(np.intp)]
            arrived = peer.views[kind] if peer.pid is None else \
                read_remote(peer.pid, peer.addresses[kind], blocks, block_bytes)
            every = np.arange(blocks, dtype=np.uint64)
            if not blocks_hold(arrived, every, model):
                raise CommandError(f"a push ({path}, {kind} memory, {shape}, {block_bytes} B blocks) moved "
                                   "wrong bytes", status=1)
            best = best_interleaved(push, nbytes, args.repeat, raw(order, order, push=True), regions)
            self.results.transfers.append(_transfer_row(dict(row, op="push", threads=1), best))
        return str(path)

    def _taken(self, reported: str) -> str:
        """The path the link's last transfer took (the mock reports "shared" per transfer:
        library memory on both sides), else what the link reported."""
        from .. import mock_control

        taken = mock_control.last_transfer_path(self.engine, SRC_CLUSTER)
        return {"same-process": "in-process", "none": reported}.get(taken, taken)

    def _pull(self, source: Any, target: Any, order: "np.ndarray[Any, Any]", threads: int) -> Callable[[], None]:
        if threads == 1:
            return lambda: self.engine.pull_kv_blocks(source, target, order, order)
        parts = np.array_split(order, threads)
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.args.threads, thread_name_prefix="bench")
        pool = self._pool

        def pull() -> None:
            for future in [pool.submit(self.engine.pull_kv_blocks, source, target, part, part) for part in parts]:
                future.result()
        return pull

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None

    # -- the cost of one call --
    def one_call(self, peer: Peer, path: str, kind: str, source: Any, target: Any, local: Tensors,
                 block_bytes: int, raw: Callable[..., Optional[RawProcessVm]]) -> None:
        one = np.zeros(1, dtype=np.uint64)
        calls = self.args.calls
        whole, c_only = per_call_pair(lambda: self.engine.pull_kv_blocks(source, target, one, one),
                                      _c_pull(self.engine, source, target, one), calls)
        src_block, dst_block = np.ones(block_bytes, dtype=np.uint8), np.zeros(block_bytes, dtype=np.uint8)
        memcpy = per_call(lambda: np.copyto(dst_block, src_block), calls)
        floor = raw(one, one, False)
        raw_s = per_call(floor, calls) if floor is not None else None
        self.results.per_call.append({
            "path": path, "memory": kind, "block_bytes": block_bytes, "bytes": block_bytes * self.args.tensors,
            "us_per_call": whole * 1e6, "us_c_call": c_only * 1e6, "us_python": (whole - c_only) * 1e6,
            "us_memcpy_one_block": memcpy * 1e6, "us_raw_process_vm": None if raw_s is None else raw_s * 1e6,
            "x_raw_process_vm": None if raw_s is None else raw_s / whole})

    # -- block lists --
    def block_lists(self) -> None:
        from .. import native

        limit = self.args.list_blocks
        desc = native.CacheDesc(LIST_TENSORS, native.DataType.DT_UINT8, [limit, LIST_BLOCK_BYTES])
        counts = sorted({c for c in (1, 16, 256, 4096, limit) if c <= limit})
        order = self.rng.permutation(limit).astype(np.uint64)
        with contextlib.ExitStack() as stack:
            local = Tensors("user", LIST_TENSORS, limit, LIST_BLOCK_BYTES)
            local_id = self.engine.register_kv_cache(desc, local.addresses)
            stack.callback(self.engine.unregister_kv_cache, local_id)
            with self._in_process_list_source(desc, limit) as remote_id:
                model = np.stack([pattern(7, t, limit) for t in range(LIST_TENSORS)])
                source, target = native.CacheIndex(SRC_CLUSTER, remote_id), native.Cache(local_id)
                for count in counts:
                    blocks = order[:count]
                    for view in local.views:
                        view.fill(0)
                    self.engine.pull_kv_blocks(source, target, blocks, blocks)
                    if not blocks_hold(local.views, blocks, model[:, blocks.astype(np.intp)]):
                        raise CommandError(f"a pull of {count} listed blocks moved wrong bytes", status=1)
                    calls = max(1, 2000 // count)
                    for form, value in (("list", blocks.tolist()), ("numpy", blocks)):
                        def pull(value: Any = value) -> None:
                            self.engine.pull_kv_blocks(source, target, value, value)
                        # the default 7 batches: a difference of short lists' figures is small
                        whole, c_only = per_call_pair(pull, _c_pull(self.engine, source, target, blocks), calls)
                        self.results.block_lists.append({
                            "blocks": count, "form": form, "us_per_call": whole * 1e6, "us_c_call": c_only * 1e6,
                            "us_python": (whole - c_only) * 1e6, "us_c_per_block": c_only * 1e6 / count})

    @contextlib.contextmanager
    def _in_process_list_source(self, desc: Any, blocks: int) -> Iterator[int]:
        from .. import native

        port = _free_port()
        with contextlib.ExitStack() as stack:
            remote = Tensors("user", LIST_TENSORS, blocks, LIST_BLOCK_BYTES)
            remote.fill(7)
            source = stack.enter_context(native.LlmDataDist(SRC_CLUSTER, native.LlmRole.PROMPT))
            source.initialize({native.OPTION_DEVICE_ID: "0", native.OPTION_LISTEN_IP_INFO: f"127.0.0.1:{port}"})
            remote_id = source.register_kv_cache(desc, remote.addresses)
            with self._link(port):
                yield remote_id


def _c_pull(engine: Any, source: Any, target: Any, blocks: "np.ndarray[Any, Any]") -> Callable[[], None]:
    """The native pull alone, through the thin tier of C names (one status check on top
    of the C call): every argument converted once, beforehand, as the Python method
    converts them, so that timing this against the method leaves the Python part."""
    from .._core import _capi
    from .. import native

    src = source._to_c("src_cache_index")
    dst, keep = target._to_c("dst_cache")
    pointer, count, array = native._blocks(blocks, "blocks")
    ext = engine._ext(None, "bench")
    handle = engine._engine()

    def call(_kept: Any = (keep, array)) -> None:    # the default keeps what C points into alive
        _capi.lldd_pull_kv_blocks(handle, src, dst, pointer, count, pointer, count, ext, "bench")
    return call


def _transfer_row(row: Dict[str, Any], best: Dict[str, Optional[float]]) -> Dict[str, Any]:
    nbytes = row["bytes"]
    seconds = max(float(best["transfer"] or 0), 1e-9)      # below the clock's resolution
    memcpy = max(float(best["memcpy"] or 0), 1e-9)
    raw, regions = best["raw"], best.get("regions")
    row.update({"seconds": seconds, "gb_per_s": nbytes / seconds / 1e9, "memcpy_seconds": memcpy,
                "memcpy_gb_per_s": nbytes / memcpy / 1e9, "x_memcpy": memcpy / seconds,
                "raw_seconds": raw, "raw_gb_per_s": None if raw is None else nbytes / max(raw, 1e-9) / 1e9,
                "x_raw": None if raw is None else max(raw, 1e-9) / seconds,
                "regions_seconds": regions,
                "x_regions": None if regions is None else max(regions, 1e-9) / seconds})
    return row


def _memory_needed(args: argparse.Namespace) -> int:
    """At the largest block size: the local caches, the in-process source's or the two
    peer processes' (one of each memory kind), a copy for checking pushes, the memcpy
    floor's buffers; and the block-list caches."""
    kinds = len(args.memory)
    cache = args.tensors * max(2, args.bytes // (args.tensors * args.sizes[-1])) * args.sizes[-1]
    lists = 2 * LIST_TENSORS * args.list_blocks * LIST_BLOCK_BYTES
    return int((3 * kinds + 1) * cache + 2 * min(cache, MEMCPY_CHUNK) + lists)


def _run(args: argparse.Namespace) -> Dict[str, Any]:
    from .. import native

    check_fits(_memory_needed(args), f"a bench of {args.tensors} tensors and {args.bytes} bytes per transfer at "
               f"{args.sizes[-1]} B blocks (local, source and peer copies of each memory kind)",
               "choose a smaller --bytes, fewer --sizes or --memory kinds")
    started = time.time()
    with contextlib.ExitStack() as stack:
        if "library" in args.memory:
            stack.callback(start_library())
        engine = stack.enter_context(native.LlmDataDist(DST_CLUSTER, native.LlmRole.DECODER))
        engine.initialize({native.OPTION_DEVICE_ID: "1"})
        suite = Suite(args, engine)
        try:
            for block_bytes in args.sizes:
                suite.block_size(block_bytes)
            suite.block_lists()
        finally:
            suite.close()
    results = suite.results
    for path in PATHS + ("shared",):
        if path in results.paths:
            continue
        if path == "shared":
            results.paths[path] = "not available: no link of this run reported it (the backend has no shared mapping)"
        elif path in args.paths:
            results.paths[path] = "selected, but no link of this run took it (see the rows' paths)"
        else:
            results.paths[path] = "not selected (--paths)"
    return _bench_report.assemble(args, results.transfers, results.per_call, results.block_lists, results.paths,
                                  time.time() - started)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=PROG, description=description(__doc__),
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--sizes", type=sizes_list, default=DEFAULT_SIZES,
                        help="block sizes, comma-separated byte counts (K, M: powers of 1024), 1 B .. 2 GiB each")
    parser.add_argument("--bytes", type=byte_size(1, 2**40), default="32M",
                        help="bytes per transfer, all tensors together (at least 2 blocks per tensor)")
    parser.add_argument("--tensors", type=int_in(2, 4096), default=2, help="K and V tensors, even, 2..4096")
    parser.add_argument("--paths", type=names_list(PATHS), default=",".join(PATHS),
                        help="paths to measure, comma-separated (the shared mapping is measured wherever a link "
                        "reports it)")
    parser.add_argument("--memory", type=names_list(MEMORY_KINDS), default=",".join(MEMORY_KINDS),
                        help="memory kinds, comma-separated: user (registered numpy arrays), library (acl.malloc)")
    parser.add_argument("--ops", type=names_list(OPS), default=",".join(OPS), help="pull, push or both")
    parser.add_argument("--threads", type=int_in(1, 64), default=min(64, max(1, os.cpu_count() or 1)),
                        help="N threads pulling disjoint blocks over one link: rows for 1, 2, 4, ... and N "
                        "(N defaults to the core count, at most 64)")
    parser.add_argument("--repeat", type=int_in(1, 10**6), default=5, help="repetitions per row (best is kept)")
    parser.add_argument("--calls", type=int_in(1, 10**6), default=200, help="calls per batch of the per-call rows")
    parser.add_argument("--list-blocks", type=int_in(1, LIST_LIMIT), default=LIST_LIMIT,
                        help="longest block list of the block-list rows (the request limit with 2 tensors)")
    parser.add_argument("--json", action="store_true", help="print everything as JSON")
    parser.add_argument("--plot", metavar="FILE.png", help="draw GB/s against block size per path (matplotlib)")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int_in(0, 65535), default=0, help=argparse.SUPPRESS)
    parser.add_argument("--blocks", type=int_in(1, 2**31), default=2, help=argparse.SUPPRESS)
    parser.add_argument("--block-bytes", type=int_in(1, 2**31), default=4096, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.tensors % 2:
        parser.error("argument --tensors: must be even (K and V of each layer)")
    if args.serve:
        return run_interruptibly(PROG, lambda: _serve(args))

    def work() -> int:
        if args.plot:
            _bench_report.require_matplotlib()
        report = _run(args)
        print(json.dumps(report, indent=2) if args.json else _bench_report.text(report))
        if args.plot:
            _bench_report.plot(report, args.plot)
        return 0
    return run_interruptibly(PROG, work)


if __name__ == "__main__":
    sys.exit(main())
