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
project's performance work with their targets and this machine's figures.

This is a benchmark, not a test: it asserts nothing about speed (a goal this machine
does not reach is reported as its figure, not as a failure). It checks every
transfer's bytes and exits with status 1 when any are wrong, so a fast wrong answer
cannot pass for a result. Before it starts it says on stderr how many rows it will
measure and about how long that takes on this machine (from a memcpy timed there and
then), and after each block size how long it has taken and what is left.
``--json`` prints everything as JSON, ``--plot FILE.png`` draws GB/s against block size
per path with the floors (matplotlib: the package's ``plot`` extra). Sizes that do not
fit in the available memory are refused before anything is allocated (exit status 2),
as are out-of-range arguments and a ``--bytes`` below two blocks of the largest size
per tensor; Ctrl-C stops it at once (status 130).
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
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from . import _bench_report
from ._bench_measure import RawProcessVm, RegionsMemcpy, Tensors, best_interleaved, blocks_hold, pattern, per_call, \
    per_call_pair, read_remote, start_library
from ._cli import MEMCPY_CHUNK, ArgumentParser, CommandError, check_fits, describe_exit, description, int_in, \
    memcpy_seconds, run_interruptibly, spawn

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


def _byte_count(nbytes: int) -> str:
    """``nbytes`` as ``--bytes`` takes it, shortest first: ``16K``, ``32M``, ``4096``."""
    for unit, scale in (("T", 2**40), ("G", 2**30), ("M", 2**20), ("K", 2**10)):
        if nbytes % scale == 0:
            return f"{nbytes // scale}{unit}"
    return str(nbytes)


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
        counts = _list_counts(limit)
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


# ---- what a run will take -------------------------------------------------------------------------------

#: Seconds to start a peer process and link to it (Python, numpy, the package, an engine).
_SPAWN_S = 1.5
#: Transfer speed of each path as a share of this machine's memcpy.
_PATH_SHARE = {"in-process": 0.5, "process_vm": 0.3, "socket": 0.05}
#: Seconds of one native call without its bytes, per path; the block-list rows' per block.
_CALL_S = {"in-process": 30e-6, "process_vm": 40e-6, "socket": 100e-6}
_LIST_BLOCK_S = 0.15e-6


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" + ("" if count == 1 else "s")


@dataclass
class Plan:
    """The rows a run measures and the seconds each step (a block size, then the block
    lists) is expected to take here."""

    transfer_rows: int
    per_call_rows: int
    list_rows: int
    steps: List[Tuple[str, float]]

    def announce(self, args: argparse.Namespace) -> str:
        total = sum(seconds for _, seconds in self.steps)
        minutes = f" ({total / 60:.0f} min)" if total >= 90 else ""
        return (f"bench: {_plural(self.transfer_rows, 'transfer row')} at {_plural(len(args.sizes), 'block size')}, "
                f"{_plural(self.per_call_rows, 'per-call row')}, {_plural(self.list_rows, 'block-list row')}, "
                f"best of {args.repeat}; expect about {total:.0f} s{minutes}")


def _list_counts(limit: int) -> List[int]:
    return sorted({c for c in (1, 16, 256, 4096, limit) if c <= limit})


def plan(args: argparse.Namespace, memcpy_bytes_per_s: float) -> Plan:
    """What ``args`` make the suite measure, and a rough time per step: each transfer row
    moves its bytes ``repeat`` times, each followed by its floors, at a share of the
    memcpy rate measured here; each peer process costs a start; each per-call and
    block-list row a fixed number of calls."""
    threads = len(thread_counts(args.threads))
    pulls = (1 + threads) if "pull" in args.ops else 0
    pushes = 2 if "push" in args.ops else 0
    kinds = len(args.memory)
    steps: List[Tuple[str, float]] = []
    for index, size in enumerate(args.sizes):
        nbytes = max(2, args.bytes // (args.tensors * size)) * size * args.tensors
        seconds = 0.0
        for path in args.paths:
            rate = memcpy_bytes_per_s * _PATH_SHARE[path]
            per_row = (args.repeat + 2) * nbytes / rate + args.repeat * 3 * nbytes / memcpy_bytes_per_s + 0.005
            seconds += kinds * (pulls + pushes) * per_row + (0 if path == "in-process" else _SPAWN_S)
            if index == 0:
                seconds += kinds * args.calls * (14 * _CALL_S[path] + 60e-6)
        steps.append((f"{_bench_report.size_text(size)} blocks", seconds))
    lists = sum(2 * 14 * max(1, 2000 // count) * (_CALL_S["in-process"] + count * _LIST_BLOCK_S)
                for count in _list_counts(args.list_blocks))
    steps.append(("block lists", 0.3 + lists))
    return Plan(len(args.sizes) * len(args.paths) * kinds * (pulls + pushes), len(args.paths) * kinds,
                2 * len(_list_counts(args.list_blocks)), steps)


class Progress:
    """One line on stderr per finished step: its name, the time so far and about what is
    left (the plan's figure for the rest, scaled by how the finished steps compared)."""

    def __init__(self, steps: List[Tuple[str, float]]) -> None:
        self.steps = steps
        self.started = time.monotonic()
        self.done = 0

    def step_done(self) -> None:
        name, _ = self.steps[self.done]
        self.done += 1
        elapsed = time.monotonic() - self.started
        planned_done = sum(s for _, s in self.steps[:self.done])
        planned_left = sum(s for _, s in self.steps[self.done:])
        # the plan's rest, scaled by how the steps so far compared once they are long enough to tell
        left = planned_left * (elapsed / planned_done if planned_done >= 1.0 else 1.0)
        tail = f"; about {left:.0f} s left" if self.done < len(self.steps) else ""
        print(f"bench [{self.done}/{len(self.steps)}] {name}: done after {elapsed:.0f} s{tail}", file=sys.stderr,
              flush=True)


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
    probe = min(args.bytes, MEMCPY_CHUNK)
    steps = plan(args, probe / max(memcpy_seconds(probe), 1e-9))
    print(steps.announce(args), file=sys.stderr, flush=True)
    progress = Progress(steps.steps)
    with contextlib.ExitStack() as stack:
        if "library" in args.memory:
            stack.callback(start_library())
        engine = stack.enter_context(native.LlmDataDist(DST_CLUSTER, native.LlmRole.DECODER))
        engine.initialize({native.OPTION_DEVICE_ID: "1"})
        suite = Suite(args, engine)
        try:
            for block_bytes in args.sizes:
                suite.block_size(block_bytes)
                progress.step_done()
            suite.block_lists()
            progress.step_done()
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
    parser = ArgumentParser(prog=PROG, description=description(__doc__),
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
    least = 2 * args.tensors * args.sizes[-1]
    if args.bytes < least and not args.serve:
        parser.error(f"argument --bytes: {args.bytes} is below the minimum of these settings, 2 blocks of "
                     f"{_bench_report.size_text(args.sizes[-1])} for each of {args.tensors} tensors: {least} bytes "
                     f"(give --bytes {_byte_count(least)} or more, or smaller --sizes or --tensors)")
    if args.serve:
        return run_interruptibly(PROG, lambda: _serve(args))

    def work() -> int:
        if args.plot:
            _bench_report.require_matplotlib()
        report = _run(args)
        from . import _bench_companion
        report["companion"] = _bench_companion.measure()
        print(json.dumps(report, indent=2) if args.json else
              _bench_report.text(report) + "\n" + _bench_companion.line(report["companion"]))
        if args.plot:
            _bench_report.plot(report, args.plot)
        return 0
    return run_interruptibly(PROG, work)


if __name__ == "__main__":
    sys.exit(main())
