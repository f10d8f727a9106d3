"""The state of native engines and the rules of every native call.

A ``World`` holds engines by cluster id. Each engine model has its life-cycle state,
options (listen port, memory pools), caches, links and the package's record of the
caches it registered or allocated. A method per native call checks the call's
arguments in the order of the three layers that see them:

1. the Python layer (docs/semantics.md N-1, N-2): ``ValueError`` for an integer
   outside its C type; then, while the engine is initialised, the lints PR-11, PR-1 and
   PR-5 (in that order);
2. the C++ API layer (docs/reference/cpp-api.md §6.4–§6.13);
3. the engine (docs/reference/semantics.md §3, §8.0 and the sections they cite),

and either returns the first failing rule's outcome, or applies the call to the state
and returns the copies it makes. A lint rule (docs/semantics.md §0) is noted in
``World.lints`` and the call goes on as the device's; in strict mode
(``LLM_DATADIST_FFI_STRICT=1``, read per call) it is the refusal the rule names, at the
rule's place in the order. Logical time (``World.clock``) orders registrations,
links and table copies, which decides PR-32 and semantics.md §9.7.

Every rule below carries the spec reference it implements; where the specification
leaves a choice, the comment says "decision" and the report of the test suite lists it.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Optional, Sequence

from .codes import LLMStatusCode as S
from .codes import Placement, Role
from .dtypes import Layout, tensor_layout
from .outcome import Copy, Outcome, fail, python_error, strict, strict_mode, success

PI = S.LLM_PARAM_INVALID
KVNE = S.LLM_KV_CACHE_NOT_EXIST

U16 = (0, 2**16 - 1)
U32 = (0, 2**32 - 1)
U64 = (0, 2**64 - 1)
I32 = (-(2**31), 2**31 - 1)
I64 = (-(2**63), 2**63 - 1)

MAX_RANK = 31                   # semantics.md §2.4: 1 .. 31 dims
TABLE_LIMIT = 1 << 20           # semantics.md §15: published cache table ≤ 1 MiB
TABLE_HEADER, TABLE_PER_CACHE, TABLE_PER_ADDR = 24, 64, 8
DIRECT_MAX_ENTRIES = 131_064    # semantics.md §15: E = T + 2·R ≤ 131,064 in direct mode


# ---- arguments --------------------------------------------------------------------------------

@dataclass(frozen=True)
class Ext:
    """``KvCacheExtParam``: INCLUSIVE layer pairs and ``tensor_num_per_layer``."""

    src: tuple[int, int] = (-1, -1)
    dst: tuple[int, int] = (-1, -1)
    n: int = 2

    @property
    def ranged(self) -> bool:
        """Both pairs are ranges (pulls use pairs only when both ``first`` ≥ 0, semantics.md §4.4)."""
        return self.src[0] >= 0 and self.dst[0] >= 0


DEFAULT_EXT = Ext()


@dataclass(frozen=True)
class ClusterArg:
    """One ``ClusterInfo`` of a link/unlink call: the remote cluster id, the ports of
    its ``remote_ip_infos`` (127.0.0.1) and the number of ``local_ip_infos``."""

    remote_cluster_id: int
    remote_ports: tuple[int, ...]
    num_local: int = 1


# ---- state ------------------------------------------------------------------------------------

@dataclass
class CacheModel:
    """A cache of a native engine: always kind MIX (semantics.md §2.2), usable with ``count``
    batches and ``count`` blocks of ``stride`` bytes."""

    cache_id: int
    num_tensors: int
    placement: int
    layout: Layout
    owned: bool                  # allocated from a pool (PR-9), else registered
    born: int                    # logical time of its registration/allocation
    pages: list[tuple[int, int]] = field(default_factory=list)   # (first page, count) per tensor

    @property
    def tensor_size(self) -> int:
        return self.layout.tensor_size

    @property
    def stride(self) -> int:
        return self.layout.stride

    @property
    def batches(self) -> int:
        return self.layout.count

    @property
    def blocks(self) -> int:
        return self.layout.count


@dataclass
class LinkEnd:
    """One side of a link (semantics.md §10.1). Both sides share ``token``; ``table`` is this side's
    copy of the peer's cache ids, taken on first use (semantics.md §9.7)."""

    peer: int
    token: int
    born: int
    table: Optional[frozenset[int]] = None
    poisoned: bool = False       # PR-35
    broken: bool = False         # the other side timed out (docs/semantics.md E-9)


class Pool:
    """A memory pool of whole pages, first fit (PR-34)."""

    def __init__(self, memory_size: int, page_shift: int) -> None:
        self.page_size = 1 << page_shift
        self.pages = memory_size >> page_shift
        self.used: list[tuple[int, int]] = []        # (first page, count), sorted

    def _first_fit(self, count: int) -> Optional[int]:
        start = 0
        for first, used in self.used:
            if first - start >= count:
                return start
            start = first + used
        return start if self.pages - start >= count else None

    def take(self, sizes: Sequence[int]) -> Optional[list[tuple[int, int]]]:
        """Pages for tensors of ``sizes`` bytes, all or nothing."""
        taken: list[tuple[int, int]] = []
        for size in sizes:
            count = -(-size // self.page_size)
            first = self._first_fit(count)
            if first is None:
                self.give(taken)
                return None
            self.used.append((first, count))
            self.used.sort()
            taken.append((first, count))
        return taken

    def give(self, runs: Iterable[tuple[int, int]]) -> None:
        for run in runs:
            self.used.remove(run)


@dataclass
class EngineModel:
    cluster_id: int
    role: int
    initialized: bool = False
    listen_port: Optional[int] = None
    comm_resource: bool = False                   # semantics.md §10.2: listen address or a first link
    sync_timeout: int = 1000                      # llm.SyncKvCacheWaitTime, ms (semantics.md §13)
    native_pool: bool = False                     # llm_datadist_ffi.mock.NativePool = "1" (PR-9)
    pools: dict[int, Pool] = field(default_factory=dict)     # by placement
    next_id: int = 1
    caches: dict[int, CacheModel] = field(default_factory=dict)
    known: set[int] = field(default_factory=set)  # the package's own record (N-2)
    links: dict[int, LinkEnd] = field(default_factory=dict)  # by peer cluster id
    finalizing: bool = False                      # semantics.md §12.3: Finalize has begun and not returned

    def table_bytes(self) -> int:
        """Size of the published cache table (semantics.md §15; native engines bind no keys)."""
        return TABLE_HEADER + sum(TABLE_PER_CACHE + TABLE_PER_ADDR * c.num_tensors for c in self.caches.values())


# ---- helpers ----------------------------------------------------------------------------------

def _outside(checks: Iterable[tuple[int, tuple[int, int]]]) -> bool:
    return any(not lo <= int(v) <= hi for v, (lo, hi) in checks)


def _blocks(values: Sequence[int]) -> Optional[list[int]]:
    """A block list as Python ints, or None when an entry is outside uint64 (N-1)."""
    items = [int(v) for v in values]
    return None if _outside((v, U64) for v in items) else items


def runs(pairs: Sequence[tuple[int, int]]) -> list[tuple[int, int, int]]:
    """Maximal runs ``(s0, d0, len)`` in list order, both indexes increasing by 1 (semantics.md §7.3)."""
    out: list[tuple[int, int, int]] = []
    for s, d in pairs:
        if out and s == out[-1][0] + out[-1][2] and d == out[-1][1] + out[-1][2]:
            out[-1] = (out[-1][0], out[-1][1], out[-1][2] + 1)
        else:
            out.append((s, d, 1))
    return out


def _first_repeat(values: Sequence[int]) -> Optional[int]:
    seen: set[int] = set()
    for v in values:
        if v in seen:
            return v
        seen.add(v)
    return None


def _ext_lints(ext: Ext) -> list[str]:
    """PR-11 for each pair ``{-1, s}``, ``s >= 0`` (src, then dst), then PR-1 when exactly
    one pair starts at -1: pairs the API accepts and reads as "every layer"."""
    found = [f"PR-11: {name} layer range {pair} is neither a range nor the default"
             for name, pair in (("src", ext.src), ("dst", ext.dst)) if pair[0] == -1 and pair[1] >= 0]
    if (ext.src[0] == -1) != (ext.dst[0] == -1):
        found.append("PR-1: exactly one layer range is a range")
    return found


def _api_ext_rules(ext: Ext, push: bool) -> Optional[str]:
    """docs/reference/cpp-api.md §6.10 step 3 (and cpp-api.md §6.11 step 4 for pushes), N-3."""
    for name, (first, second) in (("src", ext.src), ("dst", ext.dst)):
        if first < -1 or second < -1 or first > second:
            return f"§4.4: {name} layer range {(first, second)} is malformed"
    if ext.n == 0 or ext.n > 255:
        return f"§5, N-3: tensor_num_per_layer {ext.n} is outside [1, 255]"
    if push and ext.src[1] - ext.src[0] != ext.dst[1] - ext.dst[0]:
        return "cpp-api §6.11: the layer ranges span different numbers of layers"
    return None


def _tensor_num_rule(ext: Ext, local_tensors: int) -> Optional[str]:
    """semantics.md §5: a ranged pull needs a local tensor count that is a multiple of ``n`` (the v2
    engine's check); no upper bound (PR-3 is gone)."""
    if ext.ranged and local_tensors % ext.n:
        return f"§5: tensor_num_per_layer {ext.n} does not divide {local_tensors}"
    return None


# ---- the world --------------------------------------------------------------------------------

class World:
    """Engines by cluster id, and a logical clock."""

    def __init__(self) -> None:
        self.engines: dict[int, EngineModel] = {}
        #: False for calls made on the C ABI directly: then no Python-side rule (N-2)
        #: applies and the engine checks the [all] rules at their own places
        self.python_layer = True
        self.clock = 0
        #: the lint rules (ids) the current call emits; the driver takes them per call
        self.lints: list[str] = []
        self._tokens = 0
        #: live mock-ACL allocations (address, size) that registrations must respect (PR-30)
        self.acl_allocations: list[tuple[int, int]] = []
        #: the mock's serve delay per engine (a test hook, E-15): a peer whose answers take
        #: at least the caller's llm.SyncKvCacheWaitTime makes its transfers time out
        self.serve_delay: dict[int, int] = {}

    def tick(self) -> int:
        self.clock += 1
        return self.clock

    def lint(self, reason: str) -> Optional[Outcome]:
        """Lint ``reason`` (``"PR-n: …"``): in strict mode its refusal, else noted (None)."""
        if strict():
            return fail(PI, reason)
        self.lints.append(reason.split(":", 1)[0])
        return None

    def take_lints(self) -> list[str]:
        taken, self.lints = self.lints, []
        return taken

    def add_engine(self, cluster_id: int, role: int) -> EngineModel:
        engine = EngineModel(cluster_id, int(role))
        self.engines[cluster_id] = engine
        return engine

    def listener(self, port: int) -> Optional[EngineModel]:
        for engine in self.engines.values():
            if engine.initialized and engine.listen_port == port:
                return engine
        return None

    def _link_usable(self, engine: EngineModel, end: LinkEnd) -> bool:
        """PR-31, PR-35, E-9: a link is usable unless it timed out here, timed out on the
        other side, or the other side is gone. An unusable link is poisoned."""
        if end.poisoned or end.broken or not self._peer_side_alive(engine, end):
            end.poisoned = True
            return False
        return True

    def _answers_in_time(self, engine: EngineModel, end: LinkEnd) -> bool:
        """semantics.md §13: the peer's answer to the lookup arrives within llm.SyncKvCacheWaitTime;
        otherwise this side is poisoned (PR-35) and the other side broken (E-9)."""
        if self.serve_delay.get(end.peer, 0) < engine.sync_timeout:
            return True
        end.poisoned = True
        other = self.engines[end.peer].links.get(engine.cluster_id)
        if other is not None and other.token == end.token:
            other.broken = True
        return False

    def _peer_side_alive(self, engine: EngineModel, end: LinkEnd) -> bool:
        peer = self.engines.get(end.peer)
        if peer is None or not peer.initialized:
            return False
        other = peer.links.get(engine.cluster_id)
        return other is not None and other.token == end.token

    # -- life cycle (semantics.md §12.1, docs/reference/cpp-api.md §6.4, §6.5) --

    def initialize(self, cluster_id: int, options: Mapping[str, str]) -> Outcome:
        e = self.engines[cluster_id]
        wait = options.get("llm.SyncKvCacheWaitTime")
        listen = options.get("llm.ListenIpInfo")
        lints: list[str] = []
        if not e.initialized:                                          # N-2: PR-26, PR-27 in Python
            if wait is not None and not (wait.isascii() and wait.isdigit() and int(wait) <= 2**31 - 1):
                return fail(PI, "PR-26: llm.SyncKvCacheWaitTime")
            if wait is not None and int(wait) == 0:                    # PR-26 lint: a zero timeout
                if strict():
                    return fail(PI, "PR-26: llm.SyncKvCacheWaitTime 0 (strict)")
                lints.append("PR-26")
            if listen is not None:
                _, sep, port_text = listen.rpartition(":")
                if sep and port_text.isascii() and port_text.isdigit() and int(port_text) > 65535:
                    return fail(PI, "PR-27: listen port")
        if e.initialized:
            return success(rule="§12.1: already initialised, options ignored")
        if e.role not in (Role.PROMPT, Role.DECODER, Role.MIX):
            return fail(PI, "cpp-api §6.4: invalid role")
        device = options.get("llm.DeviceId")
        if device is None or not device.isascii() or not device.isdigit() or int(device) > 2**31 - 1:
            return fail(PI, "cpp-api §6.4: llm.DeviceId missing or not one int32 >= 0")
        port: Optional[int] = None
        if listen is not None:
            ip, sep, text = listen.rpartition(":")
            parts = ip.split(".")
            if (not sep or not text.isascii() or not text.isdigit() or len(parts) != 4
                    or not all(p.isdigit() and int(p) <= 255 for p in parts)):
                return fail(PI, "cpp-api §6.4: malformed llm.ListenIpInfo")
            port = int(text)
        pools: dict[int, Pool] = {}
        for key, placement in (("llm.MemPoolConfig", Placement.DEVICE),
                               ("llm.HostMemPoolConfig", Placement.HOST)):
            if key not in options:
                continue
            try:
                config = json.loads(options[key])
            except ValueError:
                return fail(PI, f"§3.3: {key} is not JSON")
            size, shift = config.get("memory_size"), config.get("page_shift", 16)
            if not isinstance(size, int) or not isinstance(shift, int) or not 10 <= shift < 31 \
                    or size <= 0 or size >> shift >= 2**32 - 1:           # size 0: docs/semantics.md E-4
                return fail(PI, f"§3.3, §15: {key} out of range")
            pools[int(placement)] = Pool(size, shift)
        native_pool = options.get("llm_datadist_ffi.mock.NativePool")
        if native_pool not in (None, "0", "1"):
            return fail(PI, "PR-9: llm_datadist_ffi.mock.NativePool neither 0 nor 1")
        e.initialized, e.listen_port, e.comm_resource, e.pools = True, port, port is not None, pools
        e.native_pool = native_pool == "1"
        e.sync_timeout = int(wait) if wait is not None else 1000
        e.next_id, e.caches, e.known, e.links = 1, {}, set(), {}
        return success().linted(*lints)

    def finalize(self, cluster_id: int) -> Outcome:
        """Drops every link locally (peers keep theirs, semantics.md §10.4), frees everything."""
        e = self.engines[cluster_id]
        e.initialized, e.listen_port, e.comm_resource, e.finalizing = False, None, False, False
        e.pools, e.caches, e.known, e.links, e.native_pool = {}, {}, set(), {}, False
        return success()

    def begin_finalize(self, cluster_id: int) -> None:
        """``Finalize`` has begun on another thread and waits for the running calls (PR-37)."""
        self.engines[cluster_id].finalizing = True

    def call_while_finalizing(self, cluster_id: int, name: str) -> Outcome:
        """semantics.md §12.3, PR-37: a call that starts after ``Finalize`` began returns ``FAILED``,
        whatever its arguments; the pool calls too (decision E-2), where an engine that
        was never initialised answers them ``FEATURE_NOT_ENABLED`` (PR-9)."""
        assert self.engines[cluster_id].finalizing, "the engine is not finalizing"
        assert name not in ("initialize", "finalize"), "PR-37 says nothing of Initialize/Finalize during Finalize"
        return fail(S.LLM_FAILED, "PR-37: Finalize is running")

    def set_role(self, cluster_id: int, role: int, options: Optional[Mapping[str, str]] = None) -> Outcome:
        """docs/reference/cpp-api.md §6.6; the listen address must be on 127.0.0.1."""
        e = self.engines[cluster_id]
        if _outside([(role, I32)]):
            return python_error(ValueError, "N-1: role outside int32")
        listen = (options or {}).get("llm.ListenIpInfo")
        port: Optional[int] = None
        if listen is not None:
            port = int(listen.rpartition(":")[2])
        if e.initialized and port is not None and not 0 <= port <= 65535:
            return fail(PI, "PR-27: listen port")
        if not e.initialized:
            return fail(S.LLM_FAILED, "§12.1: not initialised")
        if role not in (Role.PROMPT, Role.DECODER, Role.MIX):
            return fail(PI, "§10.7: invalid role")
        if e.links:
            return fail(S.LLM_EXIST_LINK, "§10.7: a link is alive")
        e.listen_port = port
        if port is not None:
            e.comm_resource = True
        e.role = int(role)
        return success()

    # -- links (semantics.md §10.2, §10.3, PR-28, PR-29, PR-42) --

    def _link_args(self, e: EngineModel, clusters: Sequence[ClusterArg], timeout: int) -> Optional[Outcome]:
        if _outside([(timeout, I32)]) or _outside((c.remote_cluster_id, U64) for c in clusters):
            return python_error(ValueError, "N-1: timeout or cluster id outside its C type")
        if not e.initialized:
            return Outcome(status=S.LLM_FAILED, value=[], rule="§12.1: not initialised")
        if timeout <= 0:
            return Outcome(status=PI, value=[], rule="§10.2: timeout <= 0")
        if not clusters:
            return Outcome(status=PI, value=[], rule="§10.2: no clusters")
        return None

    @staticmethod
    def _call_status(rets: list[S]) -> S:
        failed = [r for r in rets if r != S.LLM_SUCCESS]
        return failed[-1] if failed else S.LLM_SUCCESS

    def link(self, cluster_id: int, clusters: Sequence[ClusterArg], timeout: int = 1000) -> Outcome:
        e = self.engines[cluster_id]
        early = self._link_args(e, clusters, timeout)
        if early is not None:
            return early
        rets: list[S] = []
        lints: set[str] = set()
        for c in clusters:                                     # PR-29: as if in input order
            rets.append(self._link_one(e, c, lints))
        return Outcome(status=self._call_status(rets), value=rets, lints=frozenset(lints))

    def _link_one(self, e: EngineModel, c: ClusterArg, lints: set[str]) -> S:
        if len(c.remote_ports) != 1:
            return PI
        if not e.comm_resource:
            if c.num_local != 1:
                return PI
            e.comm_resource = True                            # the first link generates it
        # the own cluster id is no error (docs/semantics.md E-7)
        target = self.listener(c.remote_ports[0])
        if target is None:
            return S.LLM_LINK_FAILED
        key = c.remote_cluster_id
        if target.cluster_id != c.remote_cluster_id:
            if strict_mode():
                return PI                                     # PR-28, strict: nothing linked
            lints.add("PR-28")
            key = target.cluster_id                           # the vendor keys by the listener's id
        if c.remote_cluster_id in e.links:
            return S.LLM_ALREADY_LINK                         # PR-42: the peer is left unchanged
        self._tokens += 1
        born = self.tick()
        # an older link under that key, and the peer's old side, are replaced (semantics.md §10.2, §10.4)
        e.links[key] = LinkEnd(key, self._tokens, born)
        target.links[e.cluster_id] = LinkEnd(e.cluster_id, self._tokens, born)
        return S.LLM_SUCCESS

    def unlink(self, cluster_id: int, clusters: Sequence[ClusterArg], timeout: int = 1000,
               force: bool = False) -> Outcome:
        e = self.engines[cluster_id]
        early = self._link_args(e, clusters, timeout)
        if early is not None:
            return early
        rets: list[S] = []
        lints: set[str] = set()
        for c in clusters:
            if force:
                e.links.pop(c.remote_cluster_id, None)
                rets.append(S.LLM_SUCCESS)
                continue
            if len(c.remote_ports) != 1:
                rets.append(PI)
                continue
            target = self.listener(c.remote_ports[0])
            if target is None:
                rets.append(S.LLM_UNLINK_FAILED)              # the local link is kept
                continue
            if target.cluster_id != c.remote_cluster_id:
                if strict_mode():
                    rets.append(PI)                           # PR-28 (E-8), strict: both links kept
                    continue
                lints.add("PR-28")                            # the vendor's disconnect carries no expected id
            # decision: the peer drops whatever link it holds to us, even when we hold none
            target.links.pop(e.cluster_id, None)
            e.links.pop(c.remote_cluster_id, None)
            rets.append(S.LLM_SUCCESS)
        return Outcome(status=self._call_status(rets), value=rets, lints=frozenset(lints))

    # -- caches (semantics.md §3, docs/reference/cpp-api.md §6.9, §6.13) --

    @staticmethod
    def _desc_values_outside(num_tensors: int, data_type: int, placement: int, shape: Sequence[int]) -> bool:
        return _outside([(num_tensors, U32), (data_type, I32), (placement, U32)]) or \
            _outside((d, I64) for d in shape)

    def register(self, cluster_id: int, num_tensors: int, data_type: int, shape: Sequence[int],
                 addrs: Sequence[int], placement: int = Placement.DEVICE) -> Outcome:
        e = self.engines[cluster_id]
        if self._desc_values_outside(num_tensors, data_type, placement, shape) or _outside((a, U64) for a in addrs):
            return python_error(ValueError, "N-1: a value outside its C type")
        if not e.initialized:
            return fail(S.LLM_FAILED, "§12.1: not initialised")
        if not addrs:
            return fail(PI, "cpp-api §6.13: addrs empty")
        if len(addrs) != num_tensors:
            return fail(PI, "cpp-api §6.13: address count != num_tensors")
        if any(a == 0 for a in addrs):
            return fail(PI, "cpp-api §6.13: address 0")
        if not 1 <= len(shape) <= MAX_RANK:
            return fail(PI, "§2.4: shape rank")
        cache_id = e.next_id                                   # semantics.md §3.1: the id is taken here
        e.next_id += 1
        layout = tensor_layout(shape, data_type)
        if isinstance(layout, str):
            return fail(PI, f"§2.3: {layout}")
        rounded = ["PR-17"] if layout.rounded else []           # the lint comes with the layout
        for i, addr in enumerate(addrs):                       # PR-30
            for base, size in self.acl_allocations:
                if base <= addr < base + size and addr + layout.tensor_size > base + size:
                    return fail(PI, f"PR-30: tensor {i} runs past its mock-ACL allocation").linted(*rounded)
        added = TABLE_PER_CACHE + TABLE_PER_ADDR * num_tensors
        if e.table_bytes() + added > TABLE_LIMIT:
            return fail(PI, "§15: the published table would exceed 1 MiB").linted(*rounded)
        e.caches[cache_id] = CacheModel(cache_id, num_tensors, int(placement), layout, False, self.tick())
        e.known.add(cache_id)
        return success(cache_id).linted(*(["PR-17"] if layout.rounded else []))

    def unregister(self, cluster_id: int, cache_id: int) -> Outcome:
        e = self.engines[cluster_id]
        if _outside([(cache_id, I64)]):
            return python_error(ValueError, "N-1: cache id outside int64")
        if not e.initialized:
            return fail(S.LLM_FAILED, "§12.1: not initialised")
        cache = e.caches.get(cache_id)
        if cache is None:
            e.known.discard(cache_id)
            return success(rule="§3.5: unknown id")
        if cache.owned:                        # PR-23 lint: the entry goes, its pages go back
            if strict():
                return fail(PI, "PR-23: an allocated cache is not unregistered (strict)")
            e.pools[cache.placement].give(cache.pages)
        del e.caches[cache_id]
        e.known.discard(cache_id)
        return success().linted(*(["PR-23"] if cache.owned else []))

    def allocate(self, cluster_id: int, num_tensors: int, data_type: int, shape: Sequence[int],
                 placement: int = Placement.DEVICE) -> Outcome:
        """semantics.md §3.6 ``AllocateCache``."""
        e = self.engines[cluster_id]
        if self._desc_values_outside(num_tensors, data_type, placement, shape):
            return python_error(ValueError, "N-1: a value outside its C type")
        if not self._pool_calls(e):
            return fail(S.LLM_FEATURE_NOT_ENABLED, "PR-9: the vendor's class; no mock option or no pool")
        if num_tensors == 0:
            return fail(PI, "§3.6: num_tensors == 0")
        pool = e.pools.get(int(placement))
        if pool is None:
            return fail(PI, "§3.6: no pool for this placement")
        if not 1 <= len(shape) <= MAX_RANK:
            return fail(PI, "§2.4: shape rank")
        cache_id = e.next_id
        e.next_id += 1
        layout = tensor_layout(shape, data_type)
        if isinstance(layout, str):
            return fail(PI, f"§2.3: {layout}")
        # decision (semantics.md §3.6 and §15 give no order): the table limit, which the description
        # alone decides, before any pool page is taken
        rounded = ["PR-17"] if layout.rounded else []
        if e.table_bytes() + TABLE_PER_CACHE + TABLE_PER_ADDR * num_tensors > TABLE_LIMIT:
            return fail(PI, "§15: the published table would exceed 1 MiB").linted(*rounded)
        pages = pool.take([layout.tensor_size] * num_tensors)
        if pages is None:
            return fail(S.LLM_OUT_OF_MEMORY, "PR-34: pool exhausted").linted(*rounded)
        e.caches[cache_id] = CacheModel(cache_id, num_tensors, int(placement), layout, True, self.tick(), pages)
        e.known.add(cache_id)
        return success(cache_id).linted(*(["PR-17"] if layout.rounded else []))

    def deallocate(self, cluster_id: int, cache_id: int) -> Outcome:
        e = self.engines[cluster_id]
        if _outside([(cache_id, I64)]):
            return python_error(ValueError, "N-1: cache id outside int64")
        if not self._pool_calls(e):
            return fail(S.LLM_FEATURE_NOT_ENABLED, "PR-9: the vendor's class; no mock option or no pool")
        cache = e.caches.get(cache_id)
        if cache is None or not cache.owned:
            return success(rule="§3.6: unknown or registered id: nothing happens")
        e.pools[cache.placement].give(cache.pages)
        del e.caches[cache_id]
        e.known.discard(cache_id)
        return success()

    # -- local copies (semantics.md §3.6, §6.6, §8.8, §8.9, PR-24) --

    @staticmethod
    def _pool_calls(e: "EngineModel") -> bool:
        """PR-9: the four pool calls work only on an initialised engine given the mock's
        option and a memory pool; otherwise the vendor's class answer,
        ``FEATURE_NOT_ENABLED``."""
        return e.initialized and e.native_pool and bool(e.pools)

    def copy_kv_cache(self, cluster_id: int, src_id: int, dst_id: int, src_batch: int = 0, dst_batch: int = 0,
                      offset: int = 0, size: int = -1) -> Outcome:
        e = self.engines[cluster_id]
        if _outside([(src_id, I64), (dst_id, I64), (src_batch, U32), (dst_batch, U32), (offset, U64),
                     (size, I64)]):
            return python_error(ValueError, "N-1: a value outside its C type")
        if not self._pool_calls(e):
            return fail(S.LLM_FEATURE_NOT_ENABLED, "PR-9: the vendor's class; no mock option or no pool")
        if not (size == -1 or size > 0):
            return fail(PI, "§6.6: size neither -1 nor > 0")
        src, dst = e.caches.get(src_id), e.caches.get(dst_id)
        if src is None or dst is None:
            return fail(KVNE, "§6.6: unknown cache id")
        if src.num_tensors != dst.num_tensors:
            return fail(PI, "§6.6: tensor counts differ")
        if src_batch >= src.batches or dst_batch >= dst.batches:
            return fail(PI, "§6.6: batch index out of range")
        if offset > 0 and (offset >= src.stride or offset >= dst.stride):
            return fail(PI, "§6.6: offset not below both strides")
        length = size if size > 0 else src.stride - offset
        if length > src.stride - offset or length > dst.stride - offset:
            return fail(PI, "§6.6: size past a batch")
        if src_id == dst_id and src_batch == dst_batch:
            return fail(PI, "PR-24: source and destination ranges overlap")
        copies = [Copy(i, dst_batch * dst.stride + offset, i, src_batch * src.stride + offset, length)
                  for i in range(src.num_tensors)]
        return success(copies=copies).at((cluster_id, src_id), (cluster_id, dst_id))

    def copy_kv_blocks(self, cluster_id: int, src_id: int, dst_id: int, src_blocks: Sequence[int],
                       dst_blocks_list: Sequence[Sequence[int]]) -> Outcome:
        e = self.engines[cluster_id]
        sblk = _blocks(src_blocks)
        lists = [_blocks(lst) for lst in dst_blocks_list]
        if _outside([(src_id, I64), (dst_id, I64)]) or sblk is None or any(lst is None for lst in lists):
            return python_error(ValueError, "N-1: a value outside its C type")
        dlists: list[list[int]] = [lst for lst in lists if lst is not None]
        flat = [b for lst in dlists for b in lst]
        lints: list[str] = []
        repeat = _first_repeat(flat) is not None
        if self.python_layer and e.initialized and e.native_pool and repeat:   # PR-5 lint, in Python
            if strict():
                return fail(PI, "PR-5: a destination block repeats (checked in Python, strict)")
            lints.append("PR-5")
        return self._copy_kv_blocks_engine(e, src_id, dst_id, sblk, dlists, flat, repeat).linted(*lints)

    def _copy_kv_blocks_engine(self, e: "EngineModel", src_id: int, dst_id: int, sblk: list[int],
                               dlists: list[list[int]], flat: list[int], repeat: bool) -> Outcome:
        cluster_id = e.cluster_id
        lints: list[str] = []
        if not self._pool_calls(e):
            return fail(S.LLM_FEATURE_NOT_ENABLED, "PR-9: the vendor's class; no mock option or no pool")
        if not sblk or not dlists:
            return fail(PI, "§3.6: src_blocks or dst_blocks_list empty")
        if any(len(lst) != len(sblk) for lst in dlists):
            return fail(PI, "§3.6: a destination list of another length")
        src, dst = e.caches.get(src_id), e.caches.get(dst_id)
        if src is None or dst is None:
            return fail(KVNE, "§3.6: unknown cache id")
        if src.num_tensors != dst.num_tensors:
            return fail(PI, "§3.6: tensor counts differ")
        if src.stride != dst.stride:
            return fail(PI, "§3.6: block sizes differ")
        if any(b >= src.blocks for b in sblk) or any(b >= dst.blocks for b in flat):
            return fail(PI, "§3.6: a block index out of range")
        if repeat:                                 # PR-5 lint, in the engine: the last write wins
            if strict():
                return fail(PI, "PR-5: a destination block repeats (strict)")
            if not self.python_layer:
                lints.append("PR-5")
        if src_id == dst_id and set(sblk) & set(flat):
            return fail(PI, "PR-24: a block is both source and destination").linted(*lints)
        stride = src.stride
        copies = [Copy(i, d * stride, i, s * stride, stride)
                  for lst in dlists for s, d in zip(sblk, lst) for i in range(src.num_tensors)]
        return success(copies=copies).at((cluster_id, src_id), (cluster_id, dst_id)).linted(*lints)

    # -- pulls (docs/reference/cpp-api.md §6.10, docs/reference/semantics.md §8.0 pull order, semantics.md §8.2, §8.3) --

    def pull_kv_cache(self, cluster_id: int, src: tuple[int, int, int], dst_id: int, batch_index: int = 0,
                      size: int = -1, ext: Optional[Ext] = None) -> Outcome:
        """``src`` is the ``CacheIndex`` (cluster id, cache id, batch index)."""
        ext = ext or DEFAULT_EXT
        e = self.engines[cluster_id]
        if _outside([(src[0], U64), (src[1], I64), (src[2], U32), (dst_id, I64), (batch_index, U32),
                     (size, I64)]) or self._ext_outside(ext):
            return python_error(ValueError, "N-1: a value outside its C type")
        early = self._python_rules(e, ext, None)
        if early is not None:
            return early
        if not e.initialized:
            return fail(S.LLM_FAILED, "§12.1: not initialised")
        if not (size == -1 or size > 0):
            return fail(PI, "§6.1: size neither -1 nor > 0")
        early = self._api_rules(ext, push=False)
        if early is not None:
            return early
        return self._pull(e, src, dst_id, ext, batch=batch_index, size=size, blocks=None)

    def pull_kv_blocks(self, cluster_id: int, src: tuple[int, int, int], dst_id: int, src_blocks: Sequence[int],
                       dst_blocks: Sequence[int], ext: Optional[Ext] = None) -> Outcome:
        ext = ext or DEFAULT_EXT
        e = self.engines[cluster_id]
        sblk, dblk = _blocks(src_blocks), _blocks(dst_blocks)
        if _outside([(src[0], U64), (src[1], I64), (src[2], U32), (dst_id, I64)]) or self._ext_outside(ext) \
                or sblk is None or dblk is None:
            return python_error(ValueError, "N-1: a value outside its C type")
        early = self._python_rules(e, ext, dblk)
        if early is not None:
            return early
        if not e.initialized:
            return fail(S.LLM_FAILED, "§12.1: not initialised")
        if src[2] != 0:
            return fail(PI, "§6.2: CacheIndex.batch_index of a block pull must be 0")
        early = self._api_rules(ext, push=False)
        if early is not None:
            return early
        if not sblk:
            return fail(PI, "§7.1: src_blocks empty (the C++ API cannot pull into blocks from a cache)")
        if len(sblk) != len(dblk):
            return fail(PI, "§7.2: block lists of different lengths")
        return self._pull(e, src, dst_id, ext, batch=0, size=-1, blocks=(sblk, dblk))

    def _pull(self, e: EngineModel, src: tuple[int, int, int], dst_id: int, ext: Ext, batch: int, size: int,
              blocks: Optional[tuple[list[int], list[int]]]) -> Outcome:
        src_cluster, src_id, src_batch = src
        n = ext.n
        # 2. own cluster
        if src_cluster == e.cluster_id:
            return fail(PI, "§8.0.2: pulling from the own cluster")
        # 3. the local (destination) cache
        local = e.caches.get(dst_id)
        if local is None:
            return fail(KVNE, "§8.0.3: unknown local cache")
        # 4. local checks
        if blocks is None:
            if batch >= local.batches:
                return fail(PI, "§6.2: destination batch out of range")
            if size > local.stride:
                return fail(PI, "§6.1: size > destination stride")
        reason = _tensor_num_rule(ext, local.num_tensors)
        if reason:
            return fail(PI, reason)
        # (range objects, not lists: a pair may name layers up to 2^31 - 1)
        if ext.ranged:
            dst_tensors = range(ext.dst[0] * n, (ext.dst[1] + 1) * n)
            src_tensors = range(ext.src[0] * n, (ext.src[1] + 1) * n)
            if dst_tensors[-1] >= local.num_tensors:
                return fail(PI, "§4.2: a destination tensor past the local cache")
            if len(src_tensors) != len(dst_tensors):
                return fail(PI, "§4.2: layer ranges select different tensor counts")
        else:
            dst_tensors = src_tensors = range(local.num_tensors)
        # 5. the link
        link = e.links.get(src_cluster)
        if link is None:
            return fail(S.LLM_NOT_YET_LINK, "§8.0.5: no link")
        if not self._link_usable(e, link):
            return fail(S.LLM_TIMEOUT, "PR-31/PR-35/E-9: the link timed out or its peer side is gone")
        # 6. request construction
        if blocks is not None:
            sblk, dblk = blocks
            if _first_repeat(dblk) is not None:
                refused = self.lint("PR-5: a destination block repeats")
                if refused is not None:
                    return refused
            if any(d >= local.blocks for d in dblk):
                return fail(PI, "§7.3, PR-4: a destination block out of range")
            request_runs = len(runs(list(zip(sblk, dblk))))
        else:
            request_runs = 1
        if len(dst_tensors) + 2 * request_runs > DIRECT_MAX_ENTRIES:
            return fail(PI, "§15: request too large")
        # 7. the source, through the table copy
        peer = self.engines[src_cluster]
        if src_id <= 0:
            return fail(KVNE, "PR-20: cache id <= 0")
        if not self._answers_in_time(e, link):
            return fail(S.LLM_TIMEOUT, "§13: the peer did not answer within llm.SyncKvCacheWaitTime")
        if link.table is None:
            link.table = frozenset(peer.caches)
        remote = peer.caches.get(src_id)
        if src_id not in link.table or remote is None:
            return fail(KVNE, "§9.7, PR-7: the source is not in the table copy or not live")
        if blocks is None and src_batch >= remote.batches:
            return fail(KVNE, "PR-6: source batch out of range")
        # 8. PR-32
        for cache, side in ((local, "local"), (remote, "remote")):
            if not cache.owned and cache.born > link.born:
                return fail(PI, f"PR-32: the {side} cache was registered after the link")
        # 9. source checks
        if ext.ranged:
            if src_tensors[-1] >= remote.num_tensors:
                return fail(PI, "PR-12: a source tensor past the remote cache")
        elif remote.num_tensors != local.num_tensors:
            return fail(PI, "§8.1: tensor counts differ (no layer range)")
        pairs = list(zip(src_tensors, dst_tensors))
        if blocks is None:
            length = size if size > 0 else local.stride
            if length > remote.stride:
                return fail(PI, "§6.1: length > source stride")
            # PR-6: the source batch is addressed with the destination stride, as the device
            # does; past the source tensor the device reads out of bounds (a guard)
            src_offset = src_batch * local.stride
            if src_offset + length > remote.tensor_size:
                return fail(PI, "PR-6: the source batch at the destination stride runs past the source tensor")
            copies = [Copy(d, batch * local.stride, s, src_offset, length) for s, d in pairs]
        else:
            sblk, dblk = blocks
            if any(s >= remote.blocks for s in sblk):
                return fail(PI, "PR-4: a source block out of range")
            if remote.stride != local.stride:
                return fail(PI, "PR-13: block sizes differ")
            stride = local.stride
            copies = [Copy(d, d0 * stride, s, s0 * stride, count * stride)
                      for s0, d0, count in runs(list(zip(sblk, dblk))) for s, d in pairs]
        return success(copies=copies).at((src_cluster, src_id), (e.cluster_id, dst_id))

    # -- pushes (docs/reference/cpp-api.md §6.11, docs/reference/semantics.md §8.0 push order, semantics.md §8.5, §8.6) --

    def push_kv_cache(self, cluster_id: int, src_id: int, dst: tuple[int, int, int], src_batch: int = 0,
                      size: int = -1, ext: Optional[Ext] = None,
                      caller: Optional[tuple[int, int]] = None) -> Outcome:
        """``caller`` is ``(placement, num_tensors)`` of ``src_cache.cache_desc``; None
        is the C++ default ``Cache{}`` desc (DEVICE, 0 tensors)."""
        ext = ext or DEFAULT_EXT
        e = self.engines[cluster_id]
        placement, given = caller if caller is not None else (int(Placement.DEVICE), 0)
        if _outside([(src_id, I64), (dst[0], U64), (dst[1], I64), (dst[2], U32), (src_batch, U32), (size, I64),
                     (placement, U32), (given, U32)]) or self._ext_outside(ext):
            return python_error(ValueError, "N-1: a value outside its C type")
        early = self._python_rules(e, ext, None)
        if early is not None:
            return early
        if not e.initialized:
            return fail(S.LLM_FAILED, "§12.1: not initialised")
        if placement != Placement.DEVICE:
            return fail(PI, "cpp-api §6.11: caller placement not DEVICE")
        if size != -1:
            return fail(PI, "§6.5: size only support -1")
        return self._push(e, src_id, dst, ext, given, src_batch=src_batch, blocks=None)

    def push_kv_blocks(self, cluster_id: int, src_id: int, dst: tuple[int, int, int], src_blocks: Sequence[int],
                       dst_blocks: Sequence[int], ext: Optional[Ext] = None,
                       caller: Optional[tuple[int, int]] = None) -> Outcome:
        ext = ext or DEFAULT_EXT
        e = self.engines[cluster_id]
        placement, given = caller if caller is not None else (int(Placement.DEVICE), 0)
        sblk, dblk = _blocks(src_blocks), _blocks(dst_blocks)
        if _outside([(src_id, I64), (dst[0], U64), (dst[1], I64), (dst[2], U32), (placement, U32),
                     (given, U32)]) or self._ext_outside(ext) or sblk is None or dblk is None:
            return python_error(ValueError, "N-1: a value outside its C type")
        early = self._python_rules(e, ext, dblk)
        if early is not None:
            return early
        if not e.initialized:
            return fail(S.LLM_FAILED, "§12.1: not initialised")
        if placement != Placement.DEVICE:
            return fail(PI, "cpp-api §6.11: caller placement not DEVICE")
        if not sblk:
            return fail(PI, "§7.2: src_blocks empty")
        if len(sblk) != len(dblk):
            return fail(PI, "§7.2: block lists of different lengths")
        if dst[2] != 0:
            return fail(PI, "§6.2: CacheIndex.batch_index of a block push must be 0")
        return self._push(e, src_id, dst, ext, given, src_batch=0, blocks=(sblk, dblk))

    def _push(self, e: EngineModel, src_id: int, dst: tuple[int, int, int], ext: Ext, given: int, src_batch: int,
              blocks: Optional[tuple[list[int], list[int]]]) -> Outcome:
        dst_cluster, dst_id, dst_batch = dst
        n = ext.n
        reason = _api_ext_rules(ext, push=True)
        if reason:
            return fail(PI, reason)
        if ext.src[0] == -1 and given == 0:
            return fail(PI, "cpp-api §6.11: default source range and num_tensors == 0")
        early = self._api_rules(ext, push=True)
        if early is not None:
            return early
        # the layer pairs (docs/reference/cpp-api.md §6.11 step 6): a default source pushes every layer of
        # the caller's tensor count to the same layers; a source range takes the destination
        # pair's first layer, which for a default destination is 2^64 - 1 (refused below)
        if ext.src[0] < 0:
            last = 0 if given < n else (given // n - 1 if given % n == 0 else given // n)
            layers: Iterable[tuple[int, int]] = ((k, k) for k in range(last + 1))
        else:   # lazily: the per-layer checks stop the loop at the first layer past either cache
            first_dst = ext.dst[0] if ext.dst[0] >= 0 else 2**64 - 1
            layers = ((ext.src[0] + k, first_dst + k) for k in range(ext.src[1] - ext.src[0] + 1))
        # 2. the local (source) cache; the vendor checks only the caller's description (PR-33)
        local = e.caches.get(src_id)
        if local is None:
            return fail(KVNE, "§8.0 push 2: unknown local cache")
        if given and given != local.num_tensors:
            refused = self.lint("PR-33: caller num_tensors differs")
            if refused is not None:
                return refused
        if local.placement != Placement.DEVICE:
            refused = self.lint("PR-33: the local cache is not DEVICE")
            if refused is not None:
                return refused
        # 3. the link
        link = e.links.get(dst_cluster)
        if link is None:
            return fail(S.LLM_NOT_YET_LINK, "§8.0 push 3: no link")
        if not self._link_usable(e, link):
            return fail(S.LLM_TIMEOUT, "PR-31/PR-35/E-9: the link timed out or its peer side is gone")
        # 4. the local cache must be reachable through the link. Decision: PR-32 says a
        #    late registration is "not remote accessible through this link", so the local
        #    half of PR-32 is checked here with the local remote-accessible flag.
        if not local.owned and local.born > link.born:
            return fail(PI, "PR-32: the local cache was registered after the link")
        # 5. the destination, through the table copy
        peer = self.engines[dst_cluster]
        if dst_id <= 0:
            return fail(KVNE, "PR-20: cache id <= 0")
        if not self._answers_in_time(e, link):
            return fail(S.LLM_TIMEOUT, "§13: the peer did not answer within llm.SyncKvCacheWaitTime")
        if link.table is None:
            link.table = frozenset(peer.caches)
        remote = peer.caches.get(dst_id)
        if dst_id not in link.table or remote is None:
            return fail(KVNE, "§9.7, PR-7: the destination is not in the table copy or not live")
        # 6.-8. per layer: destination checks, source checks, the transfer
        copies: list[Copy] = []
        for k, (ls, ld) in enumerate(layers):
            reason = self._push_layer_checks(local, remote, link, ext, ls, ld, src_batch, dst_batch, blocks,
                                             first=k == 0)
            if reason:
                return fail(PI, reason, copies).at((e.cluster_id, src_id), (dst_cluster, dst_id))
            for j in range(n):
                s, d = ls * n + j, ld * n + j
                if blocks is None:
                    copies.append(Copy(d, dst_batch * remote.stride, s, src_batch * local.stride, local.stride))
                else:
                    copies.extend(Copy(d, d0 * local.stride, s, s0 * local.stride, count * local.stride)
                                  for s0, d0, count in runs(list(zip(*blocks))))
        return success(copies=copies).at((e.cluster_id, src_id), (dst_cluster, dst_id))

    def _push_layer_checks(self, local: CacheModel, remote: CacheModel, link: LinkEnd, ext: Ext, ls: int, ld: int,
                           src_batch: int, dst_batch: int, blocks: Optional[tuple[list[int], list[int]]],
                           first: bool) -> Optional[str]:
        n = ext.n
        # 6. destination
        if not remote.owned and remote.born > link.born:
            return "PR-32: the remote cache was registered after the link"
        if ld >= remote.num_tensors // n:
            return f"§4.3: destination layer {ld} out of range"
        if blocks is None:
            if dst_batch >= remote.batches:
                return "§6.2: destination batch out of range"
            if local.stride > remote.stride:
                return "PR-14: source batch larger than destination batch"
        else:
            sblk, dblk = blocks
            if any(d >= remote.blocks for d in dblk):
                return "§7.3, PR-4: a destination block out of range"
            if local.stride != remote.stride:
                return "PR-13: block sizes differ"
            if first and _first_repeat(dblk) is not None:        # the engine checks it once
                refused = self.lint("PR-5: a destination block repeats")
                if refused is not None:
                    return refused.rule
        # 7. source
        if ls >= local.num_tensors // n:
            return f"§4.3: source layer {ls} out of range"
        if local.num_tensors % n:
            return "§5: tensor_num_per_layer does not divide the local tensor count"
        if blocks is None:
            if src_batch >= local.batches:
                return "§6.2: source batch out of range"
        elif any(s >= local.blocks for s in blocks[0]):
            return "PR-4: a source block out of range"
        return None

    # -- the lints the Python layer checks before the call (N-2) --

    @staticmethod
    def _ext_outside(ext: Ext) -> bool:
        return _outside([(ext.src[0], I32), (ext.src[1], I32), (ext.dst[0], I32), (ext.dst[1], I32),
                         (ext.n, U32)])

    def _python_rules(self, e: EngineModel, ext: Ext, dst_blocks: Optional[list[int]]) -> Optional[Outcome]:
        """PR-11, PR-1 (for pairs the API accepts), then PR-5, while the engine is initialised."""
        if not self.python_layer or not e.initialized:
            return None
        reasons = []
        if all(-1 <= pair[0] <= pair[1] for pair in (ext.src, ext.dst)):
            reasons = _ext_lints(ext)
        if dst_blocks is not None and _first_repeat(dst_blocks) is not None:
            reasons.append("PR-5: a destination block repeats")
        for reason in reasons:
            refused = self.lint(f"{reason} (checked in Python)")
            if refused is not None:
                return refused
        return None

    def _api_rules(self, ext: Ext, push: bool) -> Optional[Outcome]:
        """The API layer's checks of the pairs, then the engine's own PR-11 and PR-1 lints."""
        reason = _api_ext_rules(ext, push)
        if reason:
            return fail(PI, reason)
        for reason in _ext_lints(ext):
            refused = self.lint(reason)
            if refused is not None:
                return refused
        return None
