"""An independent model of two v2 (CacheManager-mode) engines that move data over a link.

Written from docs/reference/semantics.md and docs/reference/python-api.md alone. It imports nothing from
``llm_datadist_ffi`` and shares no code with the package or the mock.

The story the model tells. Two engines, ``local`` (the process making the calls,
usually the Decoder) and ``peer`` (the other process, usually the Prompt), are each in
direct mode or in server-assisted mode (semantics.md §1.3). Each holds caches: registered over
caller memory or allocated from a pool (semantics.md §3.2, §3.3), contiguous (CACHE: ``B = D``) or
blocks (BLOCKS: ``NB = D``), with a placement and a remote-accessible flag (semantics.md §2.6).
Ids come from a per-engine counter that starts at 1 and is consumed by calls that fail
their key checks (semantics.md §3.1).

Keys live in two namespaces (semantics.md §9.1): the request namespace holds request keys
``(req_id, model_id)`` and blocks keys ``(2**64-1, model_id)``; the prefix namespace
holds prefix keys. A binding names a cache and a slot. An owned contiguous cache keeps
one reference for its id (dropped by ``deallocate_cache``) and one per bound key, and
a remaining-tensor set ``R`` shared by its keys (semantics.md §9.5): a successful server-assisted
contiguous or cache-to-blocks pull through a request key removes the tensors it read
from ``R`` (all of them without a source range) and releases the key once ``R`` is
empty; a cache with no id reference and no key left is freed (semantics.md §9.8).
``remove_cache_key`` empties ``R`` and releases (semantics.md §9.6).

A link records the logical time it was made. In direct mode the local engine copies
the peer's published table on the first pull or push over the link (semantics.md §9.7): its caches
and the bindings of request and blocks keys (prefix keys are never published). From
then on a source or destination is found only if it is in that copy and still live on
the peer with the same cache (PR-7, PR-19). In server-assisted mode the peer resolves
every request against its live tables (semantics.md §9.4). A cache registered after the link was
made is unreachable through it (PR-32; pool allocations exempt).

Every data-movement call returns its ``Outcome`` (a ``TypeError``, an
``LLMException`` status, or success) following the Python checks of docs/reference/python-api.md
§11.2–§11.4 and the engine order of docs/reference/semantics.md §8.0, and applies exactly the bytes
that move to the model's memory (semantics.md §8.2–§8.7; a multi-layer push keeps the layers
written before a failing one, semantics.md §8.12).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Dict, List, Optional, Sequence, Set, Tuple, Union

from .codes import LLMStatusCode as S
from .outcome import Copy, Outcome, fail, python_error, strict, strict_mode, success

U64 = 2**64 - 1
PI, KNE = S.LLM_PARAM_INVALID, S.LLM_KV_CACHE_NOT_EXIST
HOST, DEVICE = "HOST", "DEVICE"


def valid(identifier: int) -> bool:
    """An id is valid when ``0 <= id < 2**64 - 1`` (semantics.md §9.1)."""
    return 0 <= identifier < U64


# ---------------------------------------------------------------------------
# Keys as the model sees them (built by the tests from their own draws)
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Key:
    """A ``CacheKey(cluster, req_id, model_id, prefix_id)``."""

    cluster: int
    req_id: int
    model_id: int = 0
    prefix_id: int = U64

    @property
    def namespace(self) -> Optional[str]:
        """``prefix`` when the prefix id is valid (it decides, semantics.md §9.1), ``request`` when only
        the request id is, ``None`` for a placeholder."""
        if valid(self.prefix_id):
            return "prefix"
        if valid(self.req_id):
            return "request"
        return None

    @property
    def identity(self) -> Tuple[str, int, int]:
        if self.namespace == "prefix":
            return ("prefix", self.prefix_id, self.model_id)
        # placeholders share the request namespace identity (2**64-1, model_id) with blocks keys (PR-22)
        return ("request", self.req_id, self.model_id)

    @property
    def pullable(self) -> bool:
        """The validity rule of pulls and of ``remove_cache_key`` (docs/reference/python-api.md §7.5, PR-41)."""
        return valid(self.req_id) != valid(self.prefix_id)


@dataclass(frozen=True)
class BlocksKey:
    """A ``BlocksCacheKey(cluster, model_id)``: identity ``(2**64-1, model_id)`` (semantics.md §9.1)."""

    cluster: int
    model_id: int = 0

    @property
    def identity(self) -> Tuple[str, int, int]:
        return ("request", U64, self.model_id)


@dataclass(frozen=True)
class ById:
    """A ``CacheKeyByIdAndIndex(cluster, cache_id, batch_index)``: not a binding."""

    cluster: int
    cache_id: int
    batch_index: int = 0


AnyKey = Union[Key, BlocksKey, ById]


# ---------------------------------------------------------------------------
# Caches and engines
# ---------------------------------------------------------------------------


class Kind(Enum):
    CACHE = "CACHE"
    BLOCKS = "BLOCKS"


@dataclass(eq=False)
class VCache:
    """One cache: ``num`` tensors of ``dim0 * row`` bytes (shape ``[dim0, row]`` of uint8)."""

    cache_id: int
    kind: Kind
    num: int
    dim0: int
    row: int
    placement: str
    remote_accessible: bool
    owned: bool
    born: int
    memory: List[bytearray]
    ext_ref: int = 1
    remaining: Set[int] = field(default_factory=set)
    freed: bool = False

    @property
    def blocks(self) -> bool:
        return self.kind is Kind.BLOCKS

    @property
    def stride(self) -> int:
        """``S = TS / D`` (semantics.md §2.2)."""
        return self.row

    @property
    def tensor_size(self) -> int:
        return self.dim0 * self.row

    @property
    def batches(self) -> int:
        return 1 if self.blocks else self.dim0

    @property
    def block_count(self) -> int:
        return self.dim0 if self.blocks else 0


@dataclass
class Table:
    """A direct-mode table copy (semantics.md §9.7): the peer's caches and request-namespace bindings
    at the moment it was taken."""

    caches: Dict[int, VCache]
    bindings: Dict[Tuple[str, int, int], Tuple[int, int]]


@dataclass
class VEngine:
    cluster_id: int
    direct: bool
    device_pool: bool
    host_pool: bool
    caches: Dict[int, VCache] = field(default_factory=dict)
    next_id: int = 1
    bindings: Dict[Tuple[str, int, int], Tuple[int, int]] = field(default_factory=dict)
    released: List[VCache] = field(default_factory=list)

    def key_of_slot(self, cache_id: int, slot: int) -> Optional[Tuple[str, int, int]]:
        for identity, (cid, s) in self.bindings.items():
            if cid == cache_id and s == slot and identity[1] != U64:
                return identity
        return None

    def keys_of(self, cache_id: int) -> List[Tuple[str, int, int]]:
        return [identity for identity, (cid, _) in self.bindings.items() if cid == cache_id]

    def live(self, cache_id: int) -> Optional[VCache]:
        cache = self.caches.get(cache_id)
        return cache if cache is not None and not cache.freed else None

    def free(self, cache: VCache) -> None:
        """Drop a cache and every key bound to it (its memory is no longer the model's concern
        for owned caches; a registered cache's memory stays the caller's and must not change)."""
        cache.freed = True
        self.caches.pop(cache.cache_id, None)
        for identity in self.keys_of(cache.cache_id):
            del self.bindings[identity]
        self.released.append(cache)

    def release_key(self, identity: Tuple[str, int, int]) -> None:
        """Unbind a key of an owned contiguous cache; free the cache when nothing holds it (semantics.md §9.5)."""
        cache_id, _ = self.bindings.pop(identity)
        cache = self.caches[cache_id]
        if cache.ext_ref == 0 and not self.keys_of(cache_id):
            self.free(cache)


@dataclass
class Link:
    born: int
    table: Optional[Table] = None   # the local engine's copy of the peer's table (direct mode)
    stale: bool = False             # the peer's side is gone (PR-31)
    timed_out: bool = False         # PR-35


def layers(rng: Optional[range], n: int) -> List[int]:
    """Tensor indexes ``[a·n, b·n)`` of a Python layer range (semantics.md §4.1)."""
    return [] if rng is None else list(range(rng.start * n, rng.stop * n))


def _selected_count(rng: range, n: int) -> int:
    return (rng.stop - rng.start) * n


class World:
    """The two engines, their link, and the calls of the local engine."""

    def __init__(self) -> None:
        self.clock = 0
        self.local: Optional[VEngine] = None
        self.peer: Optional[VEngine] = None
        self.link: Optional[Link] = None
        self.peer_side = False
        #: the lint rules of the call being modelled (docs/semantics.md §0)
        self.lints: List[str] = []

    def tick(self) -> int:
        self.clock += 1
        return self.clock

    def lint(self, reason: str) -> Optional[Outcome]:
        """A lint rule: its refusal (LX) in strict mode, else noted (None) and the call goes on."""
        if strict_mode():
            return fail(PI, reason)
        self.lints.append(reason.split(" ", 1)[0])
        return None

    def with_lints(self, outcome: Outcome) -> Outcome:
        """``outcome`` carrying the lints noted since the last call, which it takes."""
        outcome.lints, self.lints = frozenset(self.lints), []
        return outcome

    # -- life cycle --------------------------------------------------------

    def init_local(self, cluster_id: int, direct: bool, device_pool: bool, host_pool: bool) -> VEngine:
        self.local = VEngine(cluster_id, direct, device_pool, host_pool)
        self.link = None   # finalize drops every link locally (semantics.md §10.4)
        self.peer_side = False   # (used at the start of an example, when both engines are fresh)
        return self.local

    def init_peer(self, cluster_id: int, direct: bool, device_pool: bool, host_pool: bool) -> VEngine:
        """A fresh peer engine; a link the local side still holds becomes stale (semantics.md §10.4, PR-31)."""
        if self.peer is not None:
            for cache in list(self.peer.caches.values()):
                self.peer.free(cache)
        self.peer = VEngine(cluster_id, direct, device_pool, host_pool)
        self.peer_side = False
        if self.link is not None:
            self.link.stale = True
        return self.peer

    def engine(self, side: str) -> VEngine:
        engine = self.local if side == "local" else self.peer
        assert engine is not None
        return engine

    # -- caches (semantics.md §3) -------------------------------------------------------

    def register(self, side: str, kind: Kind, num: int, dim0: int, row: int, placement: str,
                 memory: List[bytearray], keys: Sequence[Key] = (), blocks_key: Optional[BlocksKey] = None,
                 remote_accessible: Optional[bool] = None) -> Outcome:
        """``register_cache``/``register_blocks_cache`` of well-formed memory (semantics.md §3.2, §9.3)."""
        engine = self.engine(side)
        ra = remote_accessible if remote_accessible is not None else placement == DEVICE   # semantics.md §2.6
        cache_id = engine.next_id
        engine.next_id += 1                         # taken after the rank and address checks (semantics.md §3.1)
        binding: Sequence[Optional[Key]] = keys
        lints: List[str] = []
        if kind is Kind.CACHE:
            if len(keys) > dim0:
                return fail(PI, "§9.2/PR-21 more keys than batches")       # a guard
            if self._key_problem(engine, keys, dim0):                     # PR-21: a lint
                if strict():
                    return fail(PI, "PR-21 a repeated or bound key (strict)")
                lints.append("PR-21")
                binding = self._first_bindings(engine, keys)          # first binding wins across calls
        cache = VCache(cache_id, kind, num, dim0, row, placement, ra, owned=False, born=self.tick(), memory=memory)
        engine.caches[cache_id] = cache
        if kind is Kind.CACHE:
            self._bind(engine, cache, binding)
        elif blocks_key is not None:
            engine.bindings[blocks_key.identity] = (cache_id, 0)   # semantics.md §9.3: the new cache takes the key
        return success(cache_id).linted(*lints)

    def allocate(self, side: str, kind: Kind, num: int, dim0: int, row: int, placement: str,
                 keys: Sequence[Key] = (), blocks_key: Optional[BlocksKey] = None) -> Outcome:
        """``allocate_cache``/``allocate_blocks_cache`` (semantics.md §3.3, §9.2); memory starts as the test
        fills it (``set_memory``)."""
        engine = self.engine(side)
        if not (engine.device_pool if placement == DEVICE else engine.host_pool):
            return fail(PI, "§2.6 placement without its pool (LX)")
        cache_id = engine.next_id
        engine.next_id += 1                         # taken after pool, placement and rank (semantics.md §3.1)
        if kind is Kind.CACHE:
            problem = self._key_problem(engine, keys, dim0)       # semantics.md §9.2, PR-22
            if problem:
                return fail(PI, problem)
        elif blocks_key is not None and blocks_key.identity in engine.bindings:
            return fail(PI, "§9.2 blocks key model_id already bound")
        memory = [bytearray(dim0 * row) for _ in range(num)]
        # decision: pool allocations are remote-accessible (pools are registered at init, PR-32)
        cache = VCache(cache_id, kind, num, dim0, row, placement, True, owned=True, born=self.tick(), memory=memory)
        engine.caches[cache_id] = cache
        if kind is Kind.CACHE:
            self._bind(engine, cache, keys)
        elif blocks_key is not None:
            engine.bindings[blocks_key.identity] = (cache_id, 0)
        return success(cache_id)

    @staticmethod
    def _key_problem(engine: VEngine, keys: Sequence[Key], dim0: int) -> str:
        if len(keys) > dim0:
            return "§9.2/PR-21 more keys than batches"
        seen: Set[Tuple[str, int, int]] = set()
        for key in keys:
            identity = key.identity
            if identity in seen:
                return "PR-22 the same key (or placeholder) twice"
            seen.add(identity)
            if identity in engine.bindings:
                return "§9.2/PR-21/PR-22 key already bound"
        return ""

    @staticmethod
    def _first_bindings(engine: VEngine, keys: Sequence[Key]) -> List[Optional[Key]]:
        """PR-21: the registration's keys with every key bound already replaced by
        ``None`` (its binding stays), and a key repeated in the call kept only at its
        last occurrence (the core's slot map keeps the last write)."""
        last = {key.identity: slot for slot, key in enumerate(keys)}
        return [key if key.identity not in engine.bindings and last[key.identity] == slot else None
                for slot, key in enumerate(keys)]

    @staticmethod
    def _bind(engine: VEngine, cache: VCache, keys: Sequence[Optional[Key]]) -> None:
        bound = False
        for slot, key in enumerate(keys):
            if key is not None and key.namespace is not None:
                engine.bindings[key.identity] = (cache.cache_id, slot)
                bound = True
        if bound and cache.owned:
            cache.remaining = set(range(cache.num))   # semantics.md §9.5: R is reset when a key is bound

    def deallocate(self, side: str, cache_id: int, blocks: bool) -> Outcome:
        """``deallocate_cache``/``deallocate_blocks_cache`` (semantics.md §3.4, §9.8)."""
        engine = self.engine(side)
        if not (engine.device_pool or engine.host_pool):
            return fail(S.LLM_FEATURE_NOT_ENABLED, "§3.4 no memory pool")
        cache = engine.live(cache_id)
        if cache is None or not cache.owned:
            return success(rule="§3.4 unknown or registered: no-op")
        if cache.ext_ref == 0:
            return success(rule="X-6 already deferred")
        cache.ext_ref = 0
        if cache.blocks or not engine.keys_of(cache_id):
            engine.free(cache)
        return success()

    def unregister(self, side: str, cache_id: int) -> Outcome:
        engine = self.engine(side)
        cache = engine.live(cache_id)
        if cache is None:
            return success(rule="§3.5 unknown id")
        if cache.owned and strict():
            return fail(PI, "PR-23 unregister of an allocated cache (strict)")
        engine.free(cache)                           # PR-23: an allocated cache goes too, a lint
        return success().linted(*(["PR-23"] if cache.owned else []))

    def remove_cache_key(self, side: str, key: Key) -> Outcome:
        """semantics.md §9.6, PR-41."""
        engine = self.engine(side)
        if not (engine.device_pool or engine.host_pool):
            return fail(S.LLM_FEATURE_NOT_ENABLED, "§9.6 no memory pool")
        lints: List[str] = []
        if not key.pullable:                         # PR-41: a lint; the key acts by its identity
            if strict():
                return fail(PI, "PR-41 remove_cache_key validity (LX, strict)")
            lints.append("PR-41")
        binding = engine.bindings.get(key.identity)
        if binding is None:
            return success(rule="§9.6 not bound").linted(*lints)
        cache = engine.caches[binding[0]]
        if not cache.owned:
            return success(rule="§9.6 registered cache keeps its key").linted(*lints)
        cache.remaining = set()
        engine.release_key(key.identity)
        return success().linted(*lints)

    # -- links (semantics.md §10, §1.4) -------------------------------------------------

    def link_clusters(self, from_peer: bool = False) -> Outcome:
        """A link between local and peer, made from either side (semantics.md §10.2, §10.4).

        Each side holds its own end: ``self.link`` is the local end, ``self.peer_side``
        says whether the peer holds one. The client that already holds an end gets
        ``ALREADY_LINK`` (PR-42); a client without one replaces the other side's old end."""
        local, peer = self.engine("local"), self.engine("peer")
        if (self.peer_side if from_peer else self.link is not None):
            return fail(S.LLM_ALREADY_LINK, "§10.2/PR-42 the client already holds a link")
        if local.direct != peer.direct:
            return fail(PI, "§1.4 transfer modes differ")
        self.link = Link(born=self.tick())
        self.peer_side = True
        return success()

    def unlink(self, force: bool) -> Outcome:
        """Unlink from the local side (semantics.md §10.3): forced drops only the local end; otherwise the
        peer drops its end too."""
        self.link = None
        if not force:
            self.peer_side = False
        return success()

    # -- resolution (semantics.md §9.4, §9.7) -------------------------------------------

    def _table(self) -> Table:
        """The table copy, taken on the first transfer that reaches the remote lookup (semantics.md §9.7)."""
        assert self.link is not None
        if self.link.table is None:
            peer = self.engine("peer")
            self.link.table = Table(dict(peer.caches), dict(peer.bindings))
        return self.link.table

    def _resolve(self, key: AnyKey) -> Tuple[Optional[VCache], int, Optional[Tuple[str, int, int]], str]:
        """(source cache, source batch, the request key it was reached through, rule when not found)."""
        peer = self.engine("peer")
        local = self.engine("local")
        if isinstance(key, ById) and key.cache_id <= 0:
            if not local.direct or strict_mode():
                return None, 0, None, "PR-20 cache id <= 0"
            # PR-20 (vendor + lint): direct mode looks the id up as the blocks key of model_id 0
            found = self._resolve(BlocksKey(key.cluster, 0))
            if found[0] is not None:
                self.lints.append("PR-20")
            return found
        if local.direct:
            table = self._table()
            if isinstance(key, ById):
                listed = table.caches.get(key.cache_id)
                if listed is None:
                    return None, 0, None, "§9.7 not in the table copy"
                if peer.live(key.cache_id) is not listed:
                    return None, 0, None, "PR-7 released peer cache"
                return listed, key.batch_index, None, ""
            if isinstance(key, Key) and key.namespace == "prefix":
                return None, 0, None, "§9.4 prefix keys are not published"
            binding = table.bindings.get(key.identity)
            if binding is None:
                return None, 0, None, "§9.7 binding not in the table copy"
            if peer.bindings.get(key.identity) != binding or peer.live(binding[0]) is not table.caches.get(binding[0]):
                return None, 0, None, "PR-19 binding withdrawn on the peer"
            return peer.live(binding[0]), binding[1], None, ""
        # server-assisted: the peer resolves against its live tables
        if isinstance(key, ById):
            cache = peer.live(key.cache_id)
            if cache is None:
                return None, 0, None, "§9.4 unknown cache id"
            identity = peer.key_of_slot(key.cache_id, key.batch_index)
            return cache, key.batch_index, identity, ""
        binding = peer.bindings.get(key.identity)
        if binding is None:
            return None, 0, None, "§9.4 key not bound"
        return peer.live(binding[0]), binding[1], key.identity, ""

    def _pr32(self, cache: VCache) -> bool:
        """PR-32: a registered cache born after the link is unreachable through it."""
        assert self.link is not None
        return not cache.owned and cache.born > self.link.born

    def _link_problem(self, remote_cluster: int) -> Optional[Outcome]:
        peer = self.engine("peer")
        if self.link is None or remote_cluster != peer.cluster_id:
            return fail(S.LLM_NOT_YET_LINK, "§8.0 step 5 no link")
        if self.link.stale or self.link.timed_out or not self.peer_side:
            self.link.timed_out = True
            return fail(S.LLM_TIMEOUT, "PR-31/PR-35 peer side gone")
        return None

    # -- pulls (semantics.md §8.0, §4.2, §6, §7, §8.2–§8.4, §9.5) -------------------------

    def pull(self, form: str, key: AnyKey, dst_id: int, batch_index: int = 0, size: int = -1,
             src_range: Optional[range] = None, dst_range: Optional[range] = None, n: int = 2,
             src_blocks: Sequence[int] = (), dst_blocks: Sequence[int] = ()) -> Outcome:
        """``pull_cache`` (``form == "cache"``) or ``pull_blocks`` (``form == "blocks"``) into
        the local cache ``dst_id``."""
        self.lints = []
        return self.with_lints(self._pull(form, key, dst_id, batch_index, size, src_range, dst_range, n, src_blocks,
                                          dst_blocks))

    def _pull(self, form: str, key: AnyKey, dst_id: int, batch_index: int, size: int, src_range: Optional[range],
              dst_range: Optional[range], n: int, src_blocks: Sequence[int], dst_blocks: Sequence[int]) -> Outcome:
        local = self.engine("local")
        dst = local.caches.get(dst_id)
        b2b = isinstance(key, BlocksKey)
        # Python layer, docs/reference/python-api.md §11.2
        if form == "cache":
            if local.direct and not isinstance(key, ById):
                return python_error(TypeError, "§11.2 step 1: direct mode takes CacheKeyByIdAndIndex only")
            if isinstance(key, BlocksKey):
                return python_error(TypeError, "§11.2 step 1: key type")
            if dst is not None and dst.blocks:
                return fail(PI, "§7.6 cache can not be blocks cache (LX)")
            if size != -1 and size <= 0:
                return fail(PI, "§6.1 size (LX)")
        else:
            if dst is not None and not dst.blocks:
                return fail(PI, "§7.6 dst_cache must be a blocks cache (LX)")
            if not dst_blocks:
                return fail(PI, "§7.2 dst_blocks empty (LX)")
        if n <= 0:
            return fail(PI, "§5 n <= 0 (LX)")
        if form == "blocks" and b2b and not src_blocks:
            return fail(PI, "§7.2 BlocksCacheKey needs src_blocks (LX)")
        if isinstance(key, Key) and not key.pullable:
            return fail(PI, "§7.5 key validity (LX)")
        if form == "blocks" and not b2b and src_blocks:
            return fail(PI, "§7.2 src_blocks must be empty for C2B (LX)")
        if src_range is not None and len(src_range) == 0:       # the vendor: no range, every layer
            src_range = None
            refused = self.lint("PR-2 empty layer range (LX)")
            if refused is not None:
                return refused
        if dst_range is not None and len(dst_range) == 0:
            dst_range = None
            refused = self.lint("PR-2 empty layer range (LX)")
            if refused is not None:
                return refused
        if len(set(dst_blocks)) != len(dst_blocks):
            refused = self.lint("PR-5 repeated destination block (LX)")
            if refused is not None:
                return refused
        # engine, semantics.md §8.0 pull steps 2-4
        if key.cluster == local.cluster_id:
            return fail(PI, "§8.0 step 2 source cluster is this engine")
        dst = local.live(dst_id)
        if dst is None:
            return fail(KNE, "§8.0 step 3 local cache unknown")
        if form == "cache" and batch_index >= dst.batches:
            return fail(PI, "§6.2 destination batch >= B_dst")
        if form == "cache" and size > dst.stride:
            return fail(PI, "§6.1 size > S_dst")
        if (src_range is not None or dst_range is not None) and dst.num % n:
            return fail(PI, "§5 N_local % n with a layer range")
        if dst_range is not None and dst_range.stop * n > dst.num:
            return fail(PI, "§4.2 destination tensor past the local cache (V-5)")
        if src_range is not None and dst_range is not None and \
                _selected_count(src_range, n) != _selected_count(dst_range, n):
            return fail(PI, "§4.2 spans differ")
        if src_range is not None and dst_range is None and _selected_count(src_range, n) != dst.num:
            return fail(PI, "§4.2 src range count != N_local")
        # step 5: the link
        problem = self._link_problem(key.cluster)
        if problem is not None:
            return problem
        # step 6: request construction
        if b2b and len(src_blocks) != len(dst_blocks):
            return fail(PI, "§7.2 block lists of different lengths")
        if any(d >= dst.block_count for d in dst_blocks):
            return fail(PI, "§7.3 destination block past the local cache")
        # step 7: source lookup
        src, src_batch, via, rule = self._resolve(key)
        if src is None:
            return fail(KNE, rule)
        if not b2b and src_batch >= src.batches:
            return fail(KNE, "§6.2/PR-6 source batch >= B_src")
        # step 8: remote-accessible flags (direct) and PR-32
        if local.direct and not (dst.remote_accessible and src.remote_accessible):
            return fail(PI, "§1.3 direct mode needs remote-accessible caches")
        if self._pr32(dst) or self._pr32(src):
            return fail(PI, "PR-32 registered after the link")
        # step 9: source checks
        if b2b and not src.blocks:
            return fail(PI, "§7.6/PR-15 B2B source without blocks")
        if not b2b and src.blocks:
            return fail(PI, "§7.6/PR-15 contiguous source is a blocks cache")
        if src_range is not None:
            src_idx = layers(src_range, n)
        else:
            src_idx = list(range(src.num))
            if dst_range is not None and src.num != _selected_count(dst_range, n):
                return fail(PI, "§4.2 N_remote != dst range count")
            if dst_range is None and src.num != dst.num:
                return fail(PI, "§8.1 N_src != N_dst without ranges")
        if src_idx and src_idx[-1] >= src.num:
            return fail(PI, "§4.2/PR-12 source tensor past the remote cache")
        dst_idx = layers(dst_range, n) if dst_range is not None else list(range(dst.num))
        length = size if size > 0 else dst.stride
        if form == "cache" and length > src.stride:
            return fail(PI, "§6.1 L > S_src")
        # where the source batch starts: the holder's own stride (server-assisted); the
        # destination stride in direct mode (PR-6), batch 0 for cache-to-blocks (PR-16)
        src_base = src_batch * (dst.stride if local.direct else src.stride)
        if form == "cache" and local.direct and src_base + length > src.tensor_size:
            return fail(PI, "PR-6 the source batch at S_dst runs past the source tensor")
        if not local.direct:
            problem = self._placement_problem(src, dst)
            if problem is not None:
                return problem
        chunk_lengths: List[int] = []
        if form == "blocks" and not b2b:
            if dst.stride > src.stride:
                return fail(PI, "§8.4 S_dst > S_src")
            # semantics.md §8.4 as the device: whole blocks, the one listed last cut to TS mod S_dst when
            # that is not 0; every chunk inside the one source batch (PR-16, guard)
            chunk_lengths = [dst.stride] * (len(dst_blocks) - 1) + [src.tensor_size % dst.stride or dst.stride]
            if sum(chunk_lengths) > src.stride:
                return fail(PI, "PR-16 chunks past the source batch")
            if local.direct:
                if src_batch != 0:
                    refused = self.lint("PR-16 direct C2B source batch != 0 (the device reads batch 0)")
                    if refused is not None:
                        return refused
                src_base = 0
        if b2b:
            if any(s >= src.block_count for s in src_blocks):
                return fail(PI, "PR-4 source block past the remote cache")
            if src.stride != dst.stride:
                return fail(PI, "PR-13 block sizes differ")
        # the bytes
        copies: List[Copy] = []
        for s, d in zip(src_idx, dst_idx):
            if form == "cache":
                copies.append(Copy(d, batch_index * dst.stride, s, src_base, length))
            elif b2b:
                for sb, db in zip(src_blocks, dst_blocks):
                    copies.append(Copy(d, db * dst.stride, s, sb * src.stride, src.stride))
            else:
                for k, (db, chunk) in enumerate(zip(dst_blocks, chunk_lengths)):
                    copies.append(Copy(d, db * dst.stride, s, src_base + k * dst.stride, chunk))
        _apply(copies, src.memory, dst.memory)
        # step 11: key release (server-assisted, semantics.md §9.5)
        if not local.direct and not b2b and via is not None and via[0] == "request" and src.owned:
            peer = self.engine("peer")
            if src_range is None:
                src.remaining = set()
            else:
                src.remaining -= set(src_idx)
            if not src.remaining:
                peer.release_key(via)
        return success(copies=copies).at((self.engine("peer").cluster_id, src.cache_id), (local.cluster_id, dst_id))

    def _placement_problem(self, src: VCache, dst: VCache) -> Optional[Outcome]:
        """semantics.md §1.3 server-assisted placement pairs (source → destination)."""
        if src.placement == HOST and dst.placement == HOST:
            return fail(S.LLM_FEATURE_NOT_ENABLED, "§1.3 H→H")
        if src.placement == DEVICE and dst.placement == HOST and not self.engine("local").device_pool:
            return fail(PI, "§1.3 D→H needs a device pool on the puller")
        if src.placement == HOST and dst.placement == DEVICE and not self.engine("peer").device_pool:
            return fail(PI, "§1.3 H→D needs a device pool on the host-side peer")
        return None

    # -- pushes (semantics.md §8.0, §4.3, §6.5, §8.5, §8.6) ------------------------------

    def push(self, form: str, key: Union[ById, BlocksKey], src_id: int, src_batch_index: int = 0,
             src_range: Optional[range] = None, dst_range: Optional[range] = None, n: int = 2, size: int = -1,
             src_blocks: Sequence[int] = (), dst_blocks: Sequence[int] = ()) -> Outcome:
        """``push_cache`` (``form == "cache"``, key by id) or ``push_blocks`` (blocks key) from the
        local cache ``src_id`` into the peer."""
        self.lints = []
        return self.with_lints(self._push(form, key, src_id, src_batch_index, src_range, dst_range, n, size,
                                          src_blocks, dst_blocks))

    def _push(self, form: str, key: Union[ById, BlocksKey], src_id: int, src_batch_index: int,
              src_range: Optional[range], dst_range: Optional[range], n: int, size: int, src_blocks: Sequence[int],
              dst_blocks: Sequence[int]) -> Outcome:
        local = self.engine("local")
        src = local.caches.get(src_id)
        # Python layer, docs/reference/python-api.md §11.3
        if not local.direct:
            return fail(PI, "§1.3 pushes need direct mode (LX)")
        if form == "cache":
            if not isinstance(key, ById):
                return python_error(TypeError, "§11.3 key type")
            if src is not None and src.blocks:
                return fail(PI, "§7.6 push_cache from a blocks cache (LX)")
        else:
            if not isinstance(key, BlocksKey):
                return python_error(TypeError, "§11.3 key type")
            if src is not None and not src.blocks:
                return fail(PI, "§7.6 push_blocks from a cache without blocks (LX)")
            if not dst_blocks:
                return fail(PI, "§7.2 dst_blocks empty (LX)")
        if n <= 0:
            return fail(PI, "§5 n <= 0 (LX)")
        for rng in (src_range, dst_range):
            if rng is not None and not 0 <= rng.start < rng.stop:
                return fail(PI, "§4.3 range not 0 <= start < stop (LX)")
        assert src is not None
        default = range(0, src.num // n)
        src_layers = src_range if src_range is not None else default
        dst_layers = dst_range if dst_range is not None else default
        if len(default) == 0 and src_range is None and dst_range is None:
            refused = self.lint("PR-3 default push range empty (LX)")
            if refused is not None:
                return refused
        if len(src_layers) != len(dst_layers):
            return fail(PI, "§4.3 lengths differ (LX)")
        if form == "cache" and size != -1:
            return fail(PI, "§6.5 size != -1 (LX)")
        if len(set(dst_blocks)) != len(dst_blocks):
            refused = self.lint("PR-5 repeated destination block (LX)")
            if refused is not None:
                return refused
        if not src_layers:
            return success(rule="PR-3: the vendor loops over no layer")
        written: List[Copy] = []
        dst: Optional[VCache] = None
        for ls, ld in zip(src_layers, dst_layers):
            outcome = self._push_layer(form, key, src, src_batch_index, ls, ld, n, src_blocks, dst_blocks)
            if not outcome.ok:
                outcome.copies = written
                return outcome
            dst = outcome.value
            _apply(outcome.copies, src.memory, dst.memory)
            written += outcome.copies
        assert dst is not None
        return success(copies=written).at((local.cluster_id, src_id), (self.engine("peer").cluster_id, dst.cache_id))

    def _push_layer(self, form: str, key: Union[ById, BlocksKey], src: VCache, src_batch: int, ls: int, ld: int,
                    n: int, src_blocks: Sequence[int], dst_blocks: Sequence[int]) -> Outcome:
        local = self.engine("local")
        if local.live(src.cache_id) is None:
            return fail(KNE, "§8.0 push step 2 local cache unknown")
        problem = self._link_problem(key.cluster)
        if problem is not None:
            return problem
        if not src.remote_accessible:
            return fail(PI, "§8.0 push step 4 local cache not remote-accessible")
        if self._pr32(src):
            # decision: the local cache's PR-32 is its remote access through this link, step 4 (the spec
            # lists PR-32 under step 6 with the destination's checks)
            return fail(PI, "PR-32 local cache registered after the link (push step 4)")
        dst, dst_batch, _, rule = self._resolve(key)
        if dst is None:
            return fail(KNE, rule)
        # step 6: destination checks
        if not dst.remote_accessible:
            return fail(PI, "§1.3 destination not remote-accessible")
        if self._pr32(dst):
            return fail(PI, "PR-32 destination registered after the link")
        if ld >= dst.num // n:
            return fail(PI, "§4.3 destination layer >= N_remote / n")
        if form == "block0":
            dst_batch = 0
            if dst_batch >= (dst.block_count if dst.blocks else dst.batches):
                return fail(PI, "§6.2 push destination batch >= B_dst")
            if src.stride > dst.stride:
                return fail(PI, "PR-14 S_src > S_dst")
        elif form == "cache":
            if dst_batch >= dst.batches:
                return fail(PI, "§6.2 push destination batch >= B_dst")
            if dst.blocks:
                return fail(PI, "PR-15 C2C push destination is a blocks cache")
            if src.stride > dst.stride:
                return fail(PI, "PR-14 S_src > S_dst")
        else:
            if dst_blocks and max(dst_blocks) >= dst.block_count:
                return fail(PI, "§7.3 destination block past the remote cache")
            if not dst.blocks:
                return fail(PI, "PR-15 B2B push destination without blocks")
            if src.stride != dst.stride:
                return fail(PI, "PR-13 block sizes differ")
        # step 7: source checks
        if ls >= src.num // n:
            return fail(PI, "§4.3 source layer >= N_local / n")
        if src.num % n:
            return fail(PI, "§5 N_local % n (push)")
        copies: List[Copy] = []
        if form in ("cache", "block0"):
            if src_batch >= (src.block_count if form == "block0" and src.blocks else src.batches):
                return fail(PI, "§6.2 src_batch_index >= B_src")
            for j in range(n):
                copies.append(Copy(ld * n + j, dst_batch * dst.stride, ls * n + j, src_batch * src.stride,
                                   src.stride))
        else:
            if not src_blocks:
                return fail(PI, "§7.2 push_blocks src_blocks empty")
            if len(src_blocks) != len(dst_blocks):
                return fail(PI, "§7.2 push_blocks sizes differ")
            if any(s >= src.block_count for s in src_blocks):
                return fail(PI, "§7.3 source block past the local cache")
            for j in range(n):
                for sb, db in zip(src_blocks, dst_blocks):
                    copies.append(Copy(ld * n + j, db * src.stride, ls * n + j, sb * src.stride, src.stride))
        return success(dst, copies)


def _apply(copies: Sequence[Copy], src: Sequence[bytearray], dst: Sequence[bytearray]) -> None:
    chunks = [bytes(src[c.src_tensor][c.src_offset:c.src_offset + c.length]) for c in copies]
    for c, chunk in zip(copies, chunks):
        assert c.src_offset + c.length <= len(src[c.src_tensor]), f"{c} reads past the source"
        assert c.dst_offset + c.length <= len(dst[c.dst_tensor]), f"{c} writes past the destination"
        dst[c.dst_tensor][c.dst_offset:c.dst_offset + c.length] = chunk


@dataclass(frozen=True)
class KeyConfig:
    """A ``TransferWithCacheKeyConfig(key, src_layer_range, dst_layer_range, src_batch_index)``
    (direct mode)."""

    key: Union[ById, BlocksKey]
    src_range: range
    dst_range: range
    src_batch_index: int = 0


@dataclass(frozen=True)
class AddrConfig:
    """A ``TransferConfig(dst_cluster_id, dst_addrs, src_layer_range, src_batch_index)``
    (server-assisted mode): ``dst_addrs`` are peer addresses, given here as
    ``(cache_id, tensor, offset)`` so the model can say where they point (PR-40); an
    address outside every peer cache is ``(None, 0, 0)``."""

    cluster: int
    dst: Tuple[Tuple[Optional[int], int, int], ...]
    src_range: Optional[range] = None
    src_batch_index: int = 0


@dataclass
class AsyncOutcome:
    """The outcome of ``transfer_cache_async``: ``call`` for the call itself (a Python
    error, or success: a ``CacheTask``), then the task's ``results`` (one per config, the
    result recorded for its destination cluster or ``None``) and ``synchronize``."""

    call: Outcome
    results: List[Optional[S]] = field(default_factory=list)
    synchronize: S = S.LLM_SUCCESS
    rule: str = ""


def transfer_cache_async(world: World, src_id: int, configs: Sequence[Union[KeyConfig, AddrConfig]],
                         src_blocks: Sequence[int] = (), dst_blocks: Sequence[int] = (),
                         not_ready: Optional[int] = None) -> AsyncOutcome:
    """``transfer_cache_async`` from the local cache ``src_id`` (docs/reference/python-api.md §11.4,
    docs/reference/semantics.md §8.7, PR-40, V-9); the synchronizer answers False for layer ``not_ready``."""
    world.lints = []
    local = world.engine("local")
    src = local.caches[src_id]
    # Python layer, docs/reference/python-api.md §11.4
    if src.placement == HOST:
        return AsyncOutcome(fail(PI, "§2.6 transfer_cache_async from a HOST cache (LX)"))
    if src_blocks:
        if not dst_blocks:
            return AsyncOutcome(fail(PI, "§7.1 blocks to cache (LX)"))
        if len(src_blocks) != len(dst_blocks):
            return AsyncOutcome(fail(PI, "§7.2 index lists of different lengths (LX)"))
    for config in configs:
        if isinstance(config, KeyConfig) != local.direct:
            return AsyncOutcome(python_error(TypeError, "§11.4 step 7 config type of the mode"))
    if src.num % 2:
        return AsyncOutcome(fail(PI, "§4.3 odd tensor count (LX)"))
    layers_total = src.num // 2
    mapped: List[Tuple[Union[KeyConfig, AddrConfig], range, Optional[range]]] = []
    for config in configs:
        src_range = config.src_range if config.src_range is not None else range(0, layers_total)
        if src_blocks and config.src_batch_index != 0:
            return AsyncOutcome(fail(PI, "§6.2 source blocks need src_batch_index 0 (LX)"))
        if config.src_batch_index >= src.dim0:
            return AsyncOutcome(fail(PI, "V-9 src_batch_index past the source's batches (LX)"))
        if not 0 <= src_range.start < src_range.stop <= layers_total:
            return AsyncOutcome(fail(PI, "§4.3 source range past N_src / 2 (LX)"))
        if isinstance(config, AddrConfig) and len(config.dst) != 2 * len(src_range):
            return AsyncOutcome(fail(PI, "§11.4 dst_addrs != 2 x layers (LX)"))
        mapped.append((config, src_range, config.dst_range if isinstance(config, KeyConfig) else None))
    if len(set(dst_blocks)) != len(dst_blocks):
        refused = world.lint("PR-5 repeated destination block (LX)")
        if refused is not None:
            return AsyncOutcome(world.with_lints(refused))
    # the thread (semantics.md §8.7)
    results: Dict[int, S] = {}
    rule = ""
    stop = False
    for layer in range(layers_total):
        covering = [(c, r, d) for c, r, d in mapped if layer in r]
        if not covering:
            continue
        if layer == not_ready:
            for c, _, _ in covering:
                results[_cluster(c)] = PI      # semantics.md §8.7: False stops the thread
            rule = "§8.7 layer not ready"
            break
        for config, src_range, dst_range in covering:
            index = layer - src_range.start
            if isinstance(config, KeyConfig):
                assert dst_range is not None
                form = "blocks" if isinstance(config.key, BlocksKey) else "cache"
                if form == "blocks" and not src_blocks and not dst_blocks:
                    form = "block0"      # the layer-wise job's "batch" 0 of a blocks key, block 0
                outcome = world._push_layer(form, config.key, src, config.src_batch_index, layer, dst_range[index],
                                            2, src_blocks, dst_blocks)
            else:
                outcome = _transfer_layer(world, config, src, layer, index, src_blocks, dst_blocks)
            if not outcome.ok:
                results[_cluster(config)] = outcome.status
                rule = f"layer {layer}: {outcome.rule}"
                stop = True
                break
            if isinstance(config, KeyConfig):
                _apply(outcome.copies, src.memory, outcome.value.memory)
            if layer == src_range.stop - 1:
                results[_cluster(config)] = S.LLM_SUCCESS
        if stop:
            break
    per_config = [results.get(_cluster(c)) for c in configs]
    first_failure = next((r for r in per_config if r is not None and r != S.LLM_SUCCESS), S.LLM_SUCCESS)
    return AsyncOutcome(world.with_lints(success()), per_config, first_failure, rule)


def _cluster(config: Union[KeyConfig, AddrConfig]) -> int:
    return config.key.cluster if isinstance(config, KeyConfig) else config.cluster


def _transfer_layer(world: World, config: AddrConfig, src: VCache, layer: int, index: int,
                    src_blocks: Sequence[int], dst_blocks: Sequence[int]) -> Outcome:
    """One server-assisted layer of a ``TransferConfig`` (semantics.md §8.7, PR-40): tensors ``2L``,
    ``2L+1``, ``S_src`` bytes from ``src_batch_index`` (or the listed blocks) to the given
    peer addresses, each written range inside one live remote-accessible peer tensor."""
    problem = world._link_problem(config.cluster)
    if problem is not None:
        return problem
    peer = world.engine("peer")
    copies: List[Tuple[VCache, Copy]] = []
    for j in range(2):
        cache_id, tensor, offset = config.dst[2 * index + j]
        target = peer.live(cache_id) if cache_id is not None else None
        ranges: List[Tuple[int, int, int]] = []      # (dst offset, src offset, length)
        if src_blocks:
            for sb, db in zip(src_blocks, dst_blocks):
                ranges.append((offset + db * src.stride, sb * src.stride, src.stride))
        else:
            ranges.append((offset, config.src_batch_index * src.stride, src.stride))
        if target is None or not target.remote_accessible or tensor >= target.num or \
                any(o + length > target.tensor_size for o, _, length in ranges):
            return fail(PI, "PR-40 a written range outside one live remote-accessible peer tensor")
        for o, so, length in ranges:
            copies.append((target, Copy(tensor, o, 2 * layer + j, so, length)))
    # one destination cache per layer in the tests; the copies go to whichever cache each names
    for target, copy in copies:
        _apply([copy], src.memory, target.memory)
    return success(None, [])
