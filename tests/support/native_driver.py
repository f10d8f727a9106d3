"""The driver of the native oracle: runs each call on the package and on the oracle,
and compares.

It lives beside the other helpers, outside ``tests/oracle/``, because it imports
``llm_datadist_ffi.native`` to make the calls, which the oracle never does. A ``Harness`` holds native engines in
this process, their models in one ``World``, and the memory of every cache: for a
registered cache a numpy buffer holding its tensors between random guard bytes, for
an allocated cache the pool addresses the engine returned. Each call:

1. asks the oracle for the outcome (which mutates the model as the call would);
2. makes the call on the package and checks the exception type and ``status_code``
   (or the result) against the outcome;
3. applies the outcome's copies to the expected bytes and compares every byte of
   every cache (guards included) with memory.
"""
from __future__ import annotations

import contextlib
import ctypes
import re
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Optional, Sequence

import numpy as np

from llm_datadist_ffi import LLMException
from llm_datadist_ffi import LLMStatusCode as S
from llm_datadist_ffi import lint, native

from oracle.dtypes import tensor_layout
from oracle.memory import apply_copies
from oracle.model import ClusterArg, Ext, World
from oracle.outcome import Outcome

GUARD = 64                   # random bytes before, between and after the tensors of a buffer
MAX_BACKED = 4 << 20         # larger valid caches are registered on a stand-in address, never moved


class Mismatch(AssertionError):
    pass


def ext_param(ext: Optional[Ext]) -> Optional[native.KvCacheExtParam]:
    if ext is None:
        return None
    return native.KvCacheExtParam(ext.src, ext.dst, ext.n)


@dataclass
class CacheMemory:
    """The tensors of one cache as writable views, and the bytes they must hold."""

    views: list[Any]                  # per tensor: a numpy view, or (address, size) for pool memory
    expected: list[np.ndarray]
    buffer: Optional[np.ndarray] = None
    buffer_expected: Optional[np.ndarray] = None

    @classmethod
    def registered(cls, num_tensors: int, tensor_size: int, rng: np.random.Generator) -> "CacheMemory":
        pitch = -(-tensor_size // 64) * 64 + GUARD
        buffer = rng.integers(0, 256, size=GUARD + num_tensors * pitch, dtype=np.uint8)
        expected = buffer.copy()
        starts = [GUARD + i * pitch for i in range(num_tensors)]
        return cls([buffer[s:s + tensor_size] for s in starts], [expected[s:s + tensor_size] for s in starts],
                   buffer, expected)

    @classmethod
    def pooled(cls, addrs: Sequence[int], tensor_size: int, rng: np.random.Generator) -> "CacheMemory":
        views, expected = [], []
        for addr in addrs:
            content = rng.integers(0, 256, size=tensor_size, dtype=np.uint8)
            ctypes.memmove(addr, content.ctypes.data, tensor_size)
            views.append((addr, tensor_size))
            expected.append(content)
        return cls(views, expected)

    def addresses(self) -> list[int]:
        return [int(v.ctypes.data) for v in self.views]

    def actual(self, i: int) -> np.ndarray:
        view = self.views[i]
        if isinstance(view, tuple):
            return np.frombuffer(ctypes.string_at(view[0], view[1]), dtype=np.uint8)
        assert isinstance(view, np.ndarray)
        return view

    def mismatch(self) -> Optional[str]:
        if self.buffer is not None and self.buffer_expected is not None:
            bad = np.flatnonzero(self.buffer != self.buffer_expected)
            return None if bad.size == 0 else f"{bad.size} bytes differ, first at buffer offset {int(bad[0])}"
        for i in range(len(self.views)):
            bad = np.flatnonzero(self.actual(i) != self.expected[i])
            if bad.size:
                return f"tensor {i}: {bad.size} bytes differ, first at {int(bad[0])}"
        return None


@dataclass
class Node:
    """One engine, the options it is initialised with, its caches' memory. ``engine`` is
    None for an engine in another process (its memory objects then fetch their bytes)."""

    engine: Optional[native.LlmDataDist]
    options: dict[str, str]
    port: Optional[int]
    memory: dict[int, Any] = field(default_factory=dict)        # CacheMemory or a duck-typed equivalent
    retired: list[Any] = field(default_factory=list)            # released: must stay untouched


def observe(fn: Callable[[], Any]) -> tuple[str, Optional[S], Any, str]:
    """(kind, status, result, message) of one package call."""
    try:
        result = fn()
    except LLMException as exc:
        return "LLMException", S(exc.status_code), None, str(exc)
    except ValueError as exc:
        return "ValueError", None, None, str(exc)
    except TypeError as exc:
        return "TypeError", None, None, str(exc)
    return "ok", S.LLM_SUCCESS, result, ""


_LINT_ID = re.compile(r"\((PR-\d+|OPT-\d+)[;)]")


def lint_ids(records: Sequence[warnings.WarningMessage]) -> set[str]:
    """The rule ids (``PR-n``) the lint warnings among ``records`` name in their text."""
    ids = set()
    for record in records:
        found = _LINT_ID.search(str(record.message))
        if found and issubclass(record.category, UserWarning):
            ids.add(found.group(1))
    return ids


def agree_lints(call: str, expected: set[str], got: set[str]) -> None:
    if got != expected:
        raise Mismatch(f"{call}: the oracle expects the lints {sorted(expected)}, the package gave {sorted(got)}")


def agree(call: str, expected: Outcome, fn: Callable[[], Any], lints: Optional[set[str]] = None) -> Any:
    """Run ``fn`` and check it against ``expected`` (raising calls only), and the lint
    warnings it emits against ``lints`` (when given)."""
    with warnings.catch_warnings(record=True) as records:
        warnings.simplefilter("always")
        kind, status, result, message = observe(fn)
    if lints is not None:
        agree_lints(call, lints, lint_ids(records))
    if expected.python_error is not None:
        want: tuple[str, Optional[S]] = (expected.python_error.__name__, None)
    elif expected.status == S.LLM_SUCCESS:
        want = ("ok", S.LLM_SUCCESS)
    else:
        want = ("LLMException", expected.status)
    if (kind, status) != want:
        got = kind if status is None else f"{kind}({status.name})"
        raise Mismatch(f"{call}: the oracle expects {expected.describe()}, the package gave {got}: {message}")
    return result


class RawAbi:
    """Transfers and copies made on the flat C ABI itself, bypassing the Python layer's
    checks, so that the backend's own enforcement of the [all] rules is tested too
    (docs/semantics.md §1: the mock enforces every rule for C callers). Arguments must
    fit their C types (the oracle reports a ValueError for those that do not, and the
    call is then not made)."""

    def __init__(self) -> None:
        from llm_datadist_ffi._core._loader import ffi, lldd_lib
        self.ffi, self.lib = ffi, lldd_lib

    def index(self, cluster_id: int, cache_id: int, batch: int) -> Any:
        p = self.ffi.new("lldd_cache_index *")
        p.cluster_id, p.cache_id, p.batch_index = cluster_id, cache_id, batch
        return p

    def cache(self, cache_id: int, caller: Optional[tuple[int, int]] = None) -> Any:
        p = self.ffi.new("lldd_cache *")
        p.cache_id = cache_id
        p.cache_desc.placement, p.cache_desc.num_tensors = caller if caller is not None else (1, 0)
        return p

    def ext(self, ext: Optional[Ext]) -> Any:
        if ext is None:
            return self.ffi.NULL
        p = self.ffi.new("lldd_ext_param *")
        p.src_layer_first, p.src_layer_second = ext.src
        p.dst_layer_first, p.dst_layer_second = ext.dst
        p.tensor_num_per_layer = ext.n
        return p

    def blocks(self, values: Any) -> tuple[Any, int]:
        items = [int(v) for v in values]
        return (self.ffi.new("uint64_t[]", items) if items else self.ffi.NULL), len(items)

    def error(self) -> str:
        return str(self.ffi.string(self.lib.lldd_last_error()).decode("utf-8", "replace"))

    def lints(self) -> set[str]:
        """The rules of the mock's lint record of this thread (include/lldd/mock.h), as ids."""
        count = min(int(self.lib.lldd_mock_lint_count()), 8)
        return {f"PR-{int(self.lib.lldd_mock_lint_rule(i))}" for i in range(count)}

    def take_lints(self) -> list[str]:
        """The rule ids of the engine's lint record since the last take; clears it (a
        raw call bypasses the package's reader of the record)."""
        count = min(int(self.lib.lldd_mock_lint_count()), 8)
        rules = [f"PR-{int(self.lib.lldd_mock_lint_rule(i))}" for i in range(count)]
        self.lib.lldd_mock_lint_clear()
        return rules


def agree_status(call: str, expected: Outcome, status: int, message: str) -> None:
    """A C ABI call's status (its lints: ``agree_lints``)."""
    want = S.LLM_SUCCESS if expected.ok else expected.status
    if status != int(want):
        got = S(status).name if status in set(int(c) for c in S) else hex(status)
        raise Mismatch(f"{call} (C ABI): the oracle expects {expected.describe()}, the backend gave {got}: {message}")


class Harness:
    """Engines of this process under one oracle ``World``.

    With ``raw`` set, transfers and copies go to the C ABI directly (``RawAbi``) and
    the oracle leaves out the Python layer's rules (``World.python_layer``)."""

    def __init__(self, seed: int = 0) -> None:
        self.world = World()
        self.nodes: dict[int, Node] = {}
        self.rng = np.random.default_rng(seed)
        self.log: list[str] = []
        self.abi = RawAbi()

    @property
    def raw(self) -> bool:
        return not self.world.python_layer

    @raw.setter
    def raw(self, value: bool) -> None:
        self.world.python_layer = not value

    @contextlib.contextmanager
    def layer(self, raw: bool) -> Iterator[None]:
        """``with h.layer(raw):`` the transfers and copies inside go to the C ABI (raw)
        or through the package."""
        self.raw = raw
        try:
            yield
        finally:
            self.raw = False

    def _handle(self, cluster_id: int) -> Any:
        return self.engine(cluster_id)._engine()

    def _agree(self, call: str, expected: Outcome, fn: Callable[[], Any]) -> Any:
        # the model notes lints in the world (transfers) or on the outcome (local calls)
        lints = {reason.split(":")[0] for reason in self.world.take_lints()} | set(expected.lints)
        try:
            return agree(call, expected, fn, lints)
        except Mismatch as exc:
            raise Mismatch(f"{exc}\n  calls so far: {self.log[-15:]}") from None

    # -- set-up --
    def add(self, cluster_id: int, role: native.LlmRole, options: dict[str, str], port: Optional[int]) -> Node:
        engine = native.LlmDataDist(cluster_id, role)
        self.world.add_engine(cluster_id, role)
        node = Node(engine, dict(options), port)
        self.nodes[cluster_id] = node
        return node

    def add_remote(self, cluster_id: int, role: native.LlmRole, options: dict[str, str], port: Optional[int]) -> Node:
        """An engine in another process: the subclass that drives it overrides the calls."""
        self.world.add_engine(cluster_id, role)
        node = Node(None, dict(options), port)
        self.nodes[cluster_id] = node
        return node

    def engine(self, cluster_id: int) -> native.LlmDataDist:
        engine = self.nodes[cluster_id].engine
        assert engine is not None, f"cluster {cluster_id} lives in another process"
        return engine

    def close(self) -> None:
        for node in self.nodes.values():
            if node.engine is not None:
                node.engine.close()

    def initialize(self, cluster_id: int, options: Optional[dict[str, str]] = None) -> Outcome:
        node = self.nodes[cluster_id]
        opts = node.options if options is None else options
        expected = self.world.initialize(cluster_id, opts)
        self.log.append(f"initialize({cluster_id})")
        self._agree(f"initialize({cluster_id})", expected, lambda: self.engine(cluster_id).initialize(opts))
        return expected

    def finalize(self, cluster_id: int) -> None:
        node = self.nodes[cluster_id]
        self.log.append(f"finalize({cluster_id})")
        self.world.finalize(cluster_id)
        self.engine(cluster_id).finalize()
        self._retire_all(node)

    def _retire_all(self, node: Node) -> None:
        """Registered buffers stay checked after their cache is gone (nothing may write
        them any more); pool memory is the engine's and is not read after it is freed."""
        node.retired.extend(mem for mem in node.memory.values() if mem.buffer is not None)
        node.memory.clear()

    @staticmethod
    def _retire(node: Node, cache_id: int) -> None:
        mem = node.memory.pop(cache_id)
        if mem.buffer is not None:
            node.retired.append(mem)

    def reset(self) -> None:
        """Finalize and initialise every engine: no caches, no links, ids from 1."""
        for cid in self.nodes:
            self.finalize(cid)
        self.log.clear()
        for cid, node in self.nodes.items():
            node.retired.clear()
            self.initialize(cid)

    # -- memory --
    def check_memory(self) -> None:
        for cid, node in self.nodes.items():
            for cache_id, mem in node.memory.items():
                problem = mem.mismatch()
                if problem:
                    raise Mismatch(f"cluster {cid} cache {cache_id}: {problem}; calls: {self.log}")
            for mem in node.retired:
                problem = mem.mismatch()
                if problem:
                    raise Mismatch(f"cluster {cid}, a released cache's buffer: {problem}; calls: {self.log}")

    def _apply(self, outcome: Outcome) -> None:
        if not outcome.copies:
            return
        assert outcome.src is not None and outcome.dst is not None
        src = self.nodes[outcome.src[0]].memory.get(outcome.src[1])
        dst = self.nodes[outcome.dst[0]].memory.get(outcome.dst[1])
        if src is None or dst is None:
            raise Mismatch(f"test error: bytes would move between {outcome.src} and {outcome.dst}, which are "
                           "not backed by test memory")
        apply_copies(outcome.copies, src.expected, dst.expected)

    def transfer(self, call: str, expected: Outcome, fn: Callable[[], Any],
                 raw: Optional[Callable[[], int]] = None) -> Outcome:
        """Make the call (``raw`` on the C ABI in raw mode), check its outcome, apply the
        oracle's copies to the expected bytes and compare all memory."""
        if self.raw and raw is not None:
            call += " [C ABI]"
            self.log.append(call)
            lints = set(self.world.take_lints()) | set(expected.lints)
            if expected.python_error is not None:
                return expected               # not expressible in C types: no call
            self.abi.lib.lldd_mock_lint_clear()
            status = raw()
            got_lints = self.abi.lints()
            self.abi.lib.lldd_mock_lint_clear()     # the package reports a record it finds later
            try:
                agree_status(call, expected, status, self.abi.error() if status else "")
                agree_lints(call, lints, got_lints)
            except Mismatch as exc:
                raise Mismatch(f"{exc}\n  calls so far: {self.log[-15:]}") from None
        else:
            self.log.append(call)
            self._agree(call, expected, fn)
        self._apply(expected)
        self.check_memory()
        return expected

    # -- caches --
    def register(self, cluster_id: int, num_tensors: int, data_type: int, shape: Sequence[int],
                 placement: int = native.CachePlacement.DEVICE, addrs: Optional[Sequence[int]] = None) -> Outcome:
        """Registers ``num_tensors`` tensors of random bytes (or the given addresses)."""
        node = self.nodes[cluster_id]
        layout = tensor_layout(shape, data_type) if 1 <= len(shape) <= 31 else "rank"
        mem: Optional[CacheMemory] = None
        if addrs is None:
            if not isinstance(layout, str) and layout.tensor_size <= MAX_BACKED and 0 < num_tensors <= 4096:
                mem = CacheMemory.registered(num_tensors, layout.tensor_size, self.rng)
                addrs = mem.addresses()
            else:      # never moved: a rejected or oversized description
                stand_in = self.rng.integers(1, 255, size=64, dtype=np.uint8)
                node.retired.append(CacheMemory([stand_in], [stand_in.copy()]))
                addrs = [int(stand_in.ctypes.data)] * min(num_tensors, 200_000)
        expected = self.world.register(cluster_id, num_tensors, data_type, shape, addrs, placement)
        call = f"register({cluster_id}, {num_tensors}, {int(data_type)}, {list(shape)}, {int(placement)})"
        self.log.append(call)
        desc = native.CacheDesc(num_tensors, data_type, list(shape), native.CachePlacement(placement))
        cache_id = self._agree(call, expected, lambda: self.engine(cluster_id).register_kv_cache(desc, list(addrs)))
        if expected.ok:
            if cache_id != expected.value:
                raise Mismatch(f"{call}: cache id {cache_id}, the oracle expects {expected.value}")
            if mem is not None:
                node.memory[cache_id] = mem
            # else: registered on a stand-in address; tests never move such a cache
        elif mem is not None:
            node.retired.append(mem)
        return expected

    def allocate(self, cluster_id: int, num_tensors: int, data_type: int, shape: Sequence[int],
                 placement: int = native.CachePlacement.DEVICE) -> Outcome:
        node = self.nodes[cluster_id]
        expected = self.world.allocate(cluster_id, num_tensors, data_type, shape, placement)
        call = f"allocate({cluster_id}, {num_tensors}, {int(data_type)}, {list(shape)}, {int(placement)})"
        self.log.append(call)
        desc = native.CacheDesc(num_tensors, data_type, list(shape), native.CachePlacement(placement))
        cache = self._agree(call, expected, lambda: self.engine(cluster_id).allocate_cache(desc))
        if expected.ok:
            if cache.cache_id != expected.value or len(cache.tensor_addrs) != num_tensors:
                raise Mismatch(f"{call}: got cache {cache.cache_id} with {len(cache.tensor_addrs)} addresses, "
                               f"the oracle expects id {expected.value}")
            size = self.world.engines[cluster_id].caches[cache.cache_id].tensor_size
            node.memory[cache.cache_id] = CacheMemory.pooled(cache.tensor_addrs, size, self.rng)
        return expected

    def unregister(self, cluster_id: int, cache_id: int) -> Outcome:
        node = self.nodes[cluster_id]
        expected = self.world.unregister(cluster_id, cache_id)
        self.transfer(f"unregister({cluster_id}, {cache_id})", expected,
                      lambda: self.engine(cluster_id).unregister_kv_cache(cache_id))
        if expected.ok and cache_id in node.memory and cache_id not in self.world.engines[cluster_id].caches:
            self._retire(node, cache_id)
        return expected

    def deallocate(self, cluster_id: int, cache_id: int) -> Outcome:
        node = self.nodes[cluster_id]
        expected = self.world.deallocate(cluster_id, cache_id)
        call = f"deallocate({cluster_id}, {cache_id})"
        self.log.append(call)
        self._agree(call, expected, lambda: self.engine(cluster_id).deallocate_cache(cache_id))
        if expected.ok and cache_id in node.memory and cache_id not in self.world.engines[cluster_id].caches:
            self._retire(node, cache_id)
        self.check_memory()
        return expected

    def set_role(self, cluster_id: int, role: int, options: Optional[dict[str, str]] = None) -> Outcome:
        expected = self.world.set_role(cluster_id, role, options)
        call = f"set_role({cluster_id}, {role}, {options})"
        self.log.append(call)
        self._agree(call, expected, lambda: self.engine(cluster_id).set_role(role, options))
        return expected

    # -- links --
    def cluster_info(self, remote_cluster_id: int, port: Optional[int] = None, num_local: int = 1) -> \
            tuple[ClusterArg, native.ClusterInfo]:
        peer = self.nodes.get(remote_cluster_id)
        if port is None:
            assert peer is not None and peer.port is not None
            port = peer.port
        info = native.ClusterInfo(remote_cluster_id, 0, [native.IpInfo("127.0.0.1", 0)] * num_local,
                                  [native.IpInfo("127.0.0.1", port)])
        return ClusterArg(remote_cluster_id, (port,), num_local), info

    def link(self, cluster_id: int, remote_cluster_id: int, port: Optional[int] = None,
             timeout: int = 1000) -> Outcome:
        return self.link_clusters(cluster_id, [(remote_cluster_id, port)], timeout)

    def unlink(self, cluster_id: int, remote_cluster_id: int, force: bool = False, port: Optional[int] = None,
               timeout: int = 1000) -> Outcome:
        return self.link_clusters(cluster_id, [(remote_cluster_id, port)], timeout, unlink=True, force=force)

    def link_clusters(self, cluster_id: int, remotes: Sequence[tuple[int, Optional[int]]], timeout: int = 1000,
                      unlink: bool = False, force: bool = False) -> Outcome:
        """link/unlink_llm_clusters with one ClusterInfo per ``(remote cluster id, port)``
        (port None: where that engine listens); the call returns its statuses (N-5)."""
        pairs = [self.cluster_info(remote, port, num_local=0 if unlink else 1) for remote, port in remotes]
        args, infos = [a for a, _ in pairs], [i for _, i in pairs]
        if unlink:
            expected = self.world.unlink(cluster_id, args, timeout, force)
        else:
            expected = self.world.link(cluster_id, args, timeout)
        call = (f"{'unlink' if unlink else 'link'}({cluster_id} -> {[r for r, _ in remotes]}, timeout={timeout}"
                f"{', force' if force else ''})")
        self.log.append(call)
        engine = self.engine(cluster_id)
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always", lint.LintWarning)
            got = (engine.unlink_llm_clusters(infos, timeout, force) if unlink
                   else engine.link_llm_clusters(infos, timeout))
        warned = {w.message.rule for w in seen if isinstance(w.message, lint.LintWarning)}
        if (got[0], list(got[1]), warned) != (expected.status, expected.value, set(expected.lints)):
            raise Mismatch(f"{call}: got {got} with lints {sorted(warned)}, the oracle expects "
                           f"{(expected.status, expected.value)} with lints {sorted(expected.lints)}; "
                           f"calls so far: {self.log[-15:]}")
        return expected

    # -- transfers --
    def pull_kv_cache(self, cluster_id: int, src: tuple[int, int, int], dst_id: int, batch_index: int = 0,
                      size: int = -1, ext: Optional[Ext] = None) -> Outcome:
        engine = self.engine(cluster_id)
        expected = self.world.pull_kv_cache(cluster_id, src, dst_id, batch_index, size, ext)
        return self.transfer(
            f"pull_kv_cache({cluster_id}, src={src}, dst={dst_id}, batch={batch_index}, size={size}, ext={ext})",
            expected, lambda: engine.pull_kv_cache(native.CacheIndex(*src), native.Cache(dst_id), batch_index,
                                                   size, ext_param(ext)),
            lambda: self.abi.lib.lldd_pull_kv_cache(self._handle(cluster_id), self.abi.index(*src),
                                                    self.abi.cache(dst_id), batch_index, size, self.abi.ext(ext)))

    def pull_kv_blocks(self, cluster_id: int, src: tuple[int, int, int], dst_id: int, src_blocks: Any,
                       dst_blocks: Any, ext: Optional[Ext] = None) -> Outcome:
        engine = self.engine(cluster_id)
        expected = self.world.pull_kv_blocks(cluster_id, src, dst_id, src_blocks, dst_blocks, ext)
        return self.transfer(
            f"pull_kv_blocks({cluster_id}, src={src}, dst={dst_id}, {_short(src_blocks)}, {_short(dst_blocks)}, "
            f"ext={ext})",
            expected, lambda: engine.pull_kv_blocks(native.CacheIndex(*src), native.Cache(dst_id), src_blocks,
                                                    dst_blocks, ext_param(ext)),
            lambda: self.abi.lib.lldd_pull_kv_blocks(self._handle(cluster_id), self.abi.index(*src),
                                                     self.abi.cache(dst_id), *self.abi.blocks(src_blocks),
                                                     *self.abi.blocks(dst_blocks), self.abi.ext(ext)))

    @staticmethod
    def _caller(src_id: int, caller: Optional[tuple[int, int]]) -> native.Cache:
        if caller is None:
            return native.Cache(src_id)
        placement, num_tensors = caller
        return native.Cache(src_id, [], native.CacheDesc(num_tensors, native.GeDataType.DT_UINT8, [1],
                                                         native.CachePlacement(placement)))

    def push_kv_cache(self, cluster_id: int, src_id: int, dst: tuple[int, int, int], src_batch: int = 0,
                      size: int = -1, ext: Optional[Ext] = None, caller: Optional[tuple[int, int]] = None) -> Outcome:
        engine = self.engine(cluster_id)
        expected = self.world.push_kv_cache(cluster_id, src_id, dst, src_batch, size, ext, caller)
        return self.transfer(
            f"push_kv_cache({cluster_id}, src={src_id}, dst={dst}, src_batch={src_batch}, size={size}, ext={ext}, "
            f"caller={caller})",
            expected, lambda: engine.push_kv_cache(self._caller(src_id, caller), native.CacheIndex(*dst), src_batch,
                                                   size, ext_param(ext)),
            lambda: self.abi.lib.lldd_push_kv_cache(self._handle(cluster_id), self.abi.cache(src_id, caller),
                                                    self.abi.index(*dst), src_batch, size, self.abi.ext(ext)))

    def push_kv_blocks(self, cluster_id: int, src_id: int, dst: tuple[int, int, int], src_blocks: Any,
                       dst_blocks: Any, ext: Optional[Ext] = None,
                       caller: Optional[tuple[int, int]] = None) -> Outcome:
        engine = self.engine(cluster_id)
        expected = self.world.push_kv_blocks(cluster_id, src_id, dst, src_blocks, dst_blocks, ext, caller)
        return self.transfer(
            f"push_kv_blocks({cluster_id}, src={src_id}, dst={dst}, {_short(src_blocks)}, {_short(dst_blocks)}, "
            f"ext={ext}, caller={caller})",
            expected, lambda: engine.push_kv_blocks(self._caller(src_id, caller), native.CacheIndex(*dst),
                                                    src_blocks, dst_blocks, ext_param(ext)),
            lambda: self.abi.lib.lldd_push_kv_blocks(self._handle(cluster_id), self.abi.cache(src_id, caller),
                                                     self.abi.index(*dst), *self.abi.blocks(src_blocks),
                                                     *self.abi.blocks(dst_blocks), self.abi.ext(ext)))

    def copy_kv_cache(self, cluster_id: int, src_id: int, dst_id: int, src_batch: int = 0, dst_batch: int = 0,
                      offset: int = 0, size: int = -1) -> Outcome:
        engine = self.engine(cluster_id)
        expected = self.world.copy_kv_cache(cluster_id, src_id, dst_id, src_batch, dst_batch, offset, size)
        return self.transfer(
            f"copy_kv_cache({cluster_id}, {src_id} -> {dst_id}, batches {src_batch} -> {dst_batch}, "
            f"offset={offset}, size={size})",
            expected, lambda: engine.copy_kv_cache(native.Cache(src_id), native.Cache(dst_id), src_batch, dst_batch,
                                                   offset, size),
            lambda: self.abi.lib.lldd_copy_kv_cache(self._handle(cluster_id), self.abi.cache(src_id),
                                                    self.abi.cache(dst_id), src_batch, dst_batch, offset, size))

    def copy_kv_blocks(self, cluster_id: int, src_id: int, dst_id: int, src_blocks: Any,
                       dst_blocks_list: Any) -> Outcome:
        engine = self.engine(cluster_id)
        expected = self.world.copy_kv_blocks(cluster_id, src_id, dst_id, src_blocks, dst_blocks_list)
        return self.transfer(
            f"copy_kv_blocks({cluster_id}, {src_id} -> {dst_id}, {_short(src_blocks)}, "
            f"{[_short(b) for b in dst_blocks_list]})",
            expected, lambda: engine.copy_kv_blocks(native.Cache(src_id), native.Cache(dst_id), src_blocks,
                                                    dst_blocks_list),
            lambda: self._raw_copy_blocks(cluster_id, src_id, dst_id, src_blocks, dst_blocks_list))

    def _raw_copy_blocks(self, cluster_id: int, src_id: int, dst_id: int, src_blocks: Any,
                         dst_blocks_list: Any) -> int:
        flat = [int(b) for lst in dst_blocks_list for b in lst]
        lens = self.abi.ffi.new("size_t[]", [len(lst) for lst in dst_blocks_list]) if dst_blocks_list \
            else self.abi.ffi.NULL
        flat_ptr, _ = self.abi.blocks(flat)
        return int(self.abi.lib.lldd_copy_kv_blocks(self._handle(cluster_id), self.abi.cache(src_id),
                                                    self.abi.cache(dst_id), *self.abi.blocks(src_blocks), flat_ptr,
                                                    lens, len(dst_blocks_list)))


def _short(blocks: Any) -> str:
    items = [int(b) for b in blocks]
    text = repr(items[:12])
    if len(items) > 12:
        text = text[:-1] + f", ... ({len(items)} entries)]"
    return f"{type(blocks).__name__}{text}"
