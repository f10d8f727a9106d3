"""A reference model of one vendor-compatible engine's local calls (no peer, no link).

What a single ``LLMDataDist`` engine does with the calls that need no peer, written from
docs/reference/semantics.md alone: cache ids (semantics.md §3.1), registration (semantics.md §3.2, §9.3, PR-21, PR-23),
allocation from the device and host pools (semantics.md §3.3, PR-34) with key binding (semantics.md §9.2, PR-22),
deallocation and its deferral while keys are bound (semantics.md §3.4, §9.8), ``remove_cache_key``
(semantics.md §9.6), and the bytes of ``copy_cache`` (semantics.md §6.6, §8.8, PR-24), ``copy_blocks`` (semantics.md §8.9, §7.3,
PR-24) and ``swap_blocks`` (semantics.md §8.10). The Python-side checks that come before these are
modelled in ``vendor_checks``; this module answers what the core says once a call has
passed them.

``Engine`` keeps, per cache, the bytes every tensor must hold (``CacheM.tensors``); the
tests compare them with the real memory after every call. Keys live in two namespaces
(semantics.md §9.1): the request namespace holds request keys ``(req_id, model_id)`` and blocks keys
``(2**64-1, model_id)``; the prefix namespace holds prefix keys ``(prefix_id, model_id)``.
A placeholder (neither id valid) is never bound but has the identity of its model's
blocks key (PR-22).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

from .codes import LLMStatusCode as S
from .model import Pool
from .outcome import strict

U64_MAX = 2**64 - 1
TABLE_LIMIT = 1 << 20            # semantics.md §15: the published cache table of direct mode
HOST, DEVICE = 0, 1
REQUEST, PREFIX = "request", "prefix"

#: bytes per element of the Python ``DataType`` members (docs/reference/python-api.md §2).
PY_ELEMENT_BYTES = {0: 4, 1: 2, 2: 1, 3: 4, 4: 1, 6: 2, 7: 2, 8: 4, 9: 8, 10: 8, 11: 8, 12: 1, 13: 16, 27: 2}


def valid_id(value: int) -> bool:
    """docs/reference/semantics.md §9.1: an id is valid when ``0 <= id < 2**64 - 1``."""
    return 0 <= value < U64_MAX


@dataclass(frozen=True)
class KeyM:
    """A cache key as the core sees it (docs/reference/python-api.md §7.4)."""

    kind: str                    # "CacheKey", "BlocksCacheKey", "CacheKeyByIdAndIndex"
    cluster_id: int = 0
    req_id: int = U64_MAX
    prefix_id: int = U64_MAX
    model_id: int = 0
    cache_id: int = -1
    batch_index: int = 0

    def identity(self) -> Optional[Tuple[str, int, int]]:
        """The binding identity (docs/reference/semantics.md §9.1); ``None`` for a by-id key."""
        if self.kind == "BlocksCacheKey":
            return (REQUEST, U64_MAX, self.model_id)
        if self.kind == "CacheKeyByIdAndIndex":
            return None
        if valid_id(self.prefix_id):
            return (PREFIX, self.prefix_id, self.model_id)
        if valid_id(self.req_id):
            return (REQUEST, self.req_id, self.model_id)
        return (REQUEST, U64_MAX, self.model_id)       # a placeholder: its model's blocks-key identity

    @property
    def placeholder(self) -> bool:
        return self.kind == "CacheKey" and not valid_id(self.req_id) and not valid_id(self.prefix_id)


@dataclass
class CacheM:
    """One cache of the engine (docs/reference/semantics.md §2.2)."""

    cache_id: int
    kind: str                    # "CACHE", "BLOCKS" (v2) or "V1BLOCKS" (v1 blocks caches are MIX, X-6)
    num_tensors: int
    tensor_size: int
    count: int                   # shape[0]
    placement: int
    owned: bool
    tensors: List[bytearray]
    pages: List[Tuple[int, int]] = field(default_factory=list)
    id_reference: bool = True    # ext_ref_count (semantics.md §3.3): dropped by deallocate_cache

    @property
    def stride(self) -> int:
        return self.tensor_size // self.count

    @property
    def batches(self) -> int:
        return 1 if self.kind == "BLOCKS" else self.count

    @property
    def blocks(self) -> int:
        return 0 if self.kind == "CACHE" else self.count


def tensor_size(shape: Sequence[int], data_type: int) -> Optional[int]:
    """``TS`` of a byte type (semantics.md §2.3), or ``None`` when the core rejects it (PARAM_INVALID)."""
    if not 1 <= len(shape) <= 31 or any(d <= 0 for d in shape) or data_type not in PY_ELEMENT_BYTES:
        return None
    size = PY_ELEMENT_BYTES[data_type]
    for d in shape:
        size *= d
    return size if size <= 2**63 - 1 else None


class Engine:
    """One initialised engine: its caches, key bindings, pools and the next cache id."""

    def __init__(self, generation: int, device_pool: Optional[Tuple[int, int]] = None,
                 host_pool: Optional[Tuple[int, int]] = None, v1_pool: Optional[int] = None,
                 direct: bool = False) -> None:
        self.generation = generation
        self.direct = generation == 2 and direct
        self.device_pool = Pool(*device_pool) if device_pool else None
        self.host_pool = Pool(*host_pool) if host_pool else None
        if generation == 1 and v1_pool is not None:
            self.device_pool = Pool(v1_pool, 10)            # 1 KiB pages
        self.next_id = 1
        self.lints: List[str] = []       # the lint rules the core warned about (the caller clears it)
        self.caches: Dict[int, CacheM] = {}
        self.bindings: Dict[Tuple[str, int, int], Tuple[int, int]] = {}   # identity -> (cache id, slot)

    # ---- ids and keys ----------------------------------------------------------------------------

    def _take_id(self) -> int:
        """semantics.md §3.1: one counter for registration and allocation, consumed by failures after the
        first checks."""
        cache_id = self.next_id
        self.next_id += 1
        return cache_id

    def keys_of(self, cache_id: int) -> List[Tuple[str, int, int]]:
        return [ident for ident, (cid, _) in self.bindings.items() if cid == cache_id]

    def _check_keys(self, keys: Sequence[KeyM], count: int, strict: bool) -> Optional[str]:
        """semantics.md §9.2, PR-21, PR-22: why the keys cannot be bound, or ``None``. ``strict`` is the v2
        rule (repeats rejected); v1 lets the last occurrence win (PR-22)."""
        if len(keys) > count:
            return "more keys than batches"
        seen = set()
        for key in keys:
            ident = key.identity()
            if not strict and (key.placeholder or ident in seen):
                continue                                  # v1: placeholders repeat, the last key wins
            if ident in seen:
                return f"key {ident} repeated (PR-22)"
            seen.add(ident)
            if ident in self.bindings:
                return f"key {ident} already bound"
        return None

    def _plan_registration_keys(self, keys: Sequence[KeyM]) -> Tuple[List[Tuple[int, KeyM]], bool]:
        """PR-21 (semantics.md §9.3): the registration checks no key. A key bound already keeps that
        binding and binds nothing here; a key repeated in the call binds once, at the slot
        of its last occurrence (the core's slot map keeps the last write). The (slot, key)
        pairs that bind, and whether the lint applies (placeholders count too)."""
        last: Dict[Tuple[str, int, int], int] = {}
        linted = False
        for slot, key in enumerate(keys):
            ident = key.identity()
            linted = linted or ident in last or ident in self.bindings
            last[ident] = slot                                        # type: ignore[index]
        plan = [(slot, keys[slot]) for ident, slot in last.items()
                if ident not in self.bindings and not keys[slot].placeholder]
        return sorted(plan, key=lambda p: p[0]), linted

    def _bind(self, keys: Sequence[KeyM], cache_id: int) -> None:
        for slot, key in enumerate(keys):
            if not key.placeholder:
                self.bindings[key.identity()] = (cache_id, slot)     # type: ignore[index]

    def _unbind_all(self, cache_id: int) -> None:
        for ident in self.keys_of(cache_id):
            del self.bindings[ident]

    # ---- the published cache table (semantics.md §15, direct mode) ---------------------------------------------

    def table_bytes(self, extra_tensors: Sequence[int] = (), extra_bindings: int = 0) -> int:
        """semantics.md §15: 24 B + Σ over caches (64 B + 8 B × N) + 24 B per request/blocks key binding
        (prefix keys are not published, semantics.md §9.7)."""
        bindings = sum(1 for ident in self.bindings if ident[0] == REQUEST) + extra_bindings
        caches = list(self.caches.values())
        return (24 + sum(64 + 8 * c.num_tensors for c in caches) + sum(64 + 8 * n for n in extra_tensors)
                + 24 * bindings)

    def table_full(self, num_tensors: int, keys: Sequence[KeyM]) -> bool:
        if not self.direct:
            return False
        new = {k.identity() for k in keys if not k.placeholder and k.identity()[0] == REQUEST}  # type: ignore
        return self.table_bytes([num_tensors], len(new)) > TABLE_LIMIT

    # ---- registration (semantics.md §3.2, §9.3) ---------------------------------------------------------------

    def register(self, num_tensors: int, shape: Sequence[int], data_type: int, placement: int,
                 contents: Sequence[bytes], addrs: Sequence[int], keys: Sequence[KeyM],
                 blocks: bool) -> Tuple[S, Optional[int]]:
        """The core's answer to a registration that passed the Python checks."""
        if not 1 <= len(shape) <= 31 or len(addrs) != num_tensors:
            return S.LLM_PARAM_INVALID, None
        cache_id = self._take_id()
        size = tensor_size(shape, data_type)
        if size is None or any(a == 0 for a in addrs):       # address 0 refused
            return S.LLM_PARAM_INVALID, None
        plan: List[Tuple[int, KeyM]] = []
        if not blocks:
            # semantics.md §9.3: a blocks key already bound moves to the new cache (last registration
            # wins); slot keys follow PR-21
            if len(keys) > shape[0]:
                return S.LLM_PARAM_INVALID, None              # a guard: slots past the cache
            plan, linted = self._plan_registration_keys(keys)
            if linted:
                if strict():
                    return S.LLM_PARAM_INVALID, None
                self.lints.append("PR-21")
        if self.table_full(num_tensors, keys if blocks else [k for _, k in plan]):   # semantics.md §3.2
            return S.LLM_PARAM_INVALID, None
        cache = CacheM(cache_id, "BLOCKS" if blocks else "CACHE", num_tensors, size, shape[0], placement, False,
                       [bytearray(c) for c in contents])
        self.caches[cache_id] = cache
        if blocks and keys:
            self.bindings[keys[0].identity()] = (cache_id, 0)          # type: ignore[index]
        for slot, key in plan:
            self.bindings[key.identity()] = (cache_id, slot)          # type: ignore[index]
        return S.LLM_SUCCESS, cache_id

    def unregister(self, cache_id: int) -> S:
        cache = self.caches.get(cache_id)
        if cache is None:
            return S.LLM_SUCCESS                                      # semantics.md §3.5: unknown id
        if cache.owned:                                               # PR-23: a lint
            if strict():
                return S.LLM_PARAM_INVALID
            self.lints.append("PR-23")
            self._free(cache)                                         # the pool takes its pages back
            return S.LLM_SUCCESS
        self._unbind_all(cache_id)
        del self.caches[cache_id]
        return S.LLM_SUCCESS

    # ---- allocation (semantics.md §3.3, §3.6, §9.2) -----------------------------------------------------------

    def allocate(self, num_tensors: int, shape: Sequence[int], data_type: int, placement: int,
                 keys: Sequence[KeyM], blocks: bool) -> Tuple[S, Optional[int]]:
        """The core's answer to an allocation that passed the Python checks. The new
        cache's tensors hold unknown bytes until the caller writes them (``fill``)."""
        if self.generation == 2 and self.device_pool is None and self.host_pool is None:
            return S.LLM_FEATURE_NOT_ENABLED, None
        pool = self.device_pool if placement == DEVICE else self.host_pool
        if pool is None or not 1 <= len(shape) <= 31:
            return S.LLM_PARAM_INVALID, None
        cache_id = self._take_id()
        size = tensor_size(shape, data_type)
        if size is None:
            return S.LLM_PARAM_INVALID, None
        strict = self.generation == 2
        if blocks:
            why = self._check_keys(keys, shape[0], strict=True)
        else:
            why = self._check_keys(keys, shape[0], strict)
        if self.table_full(num_tensors, []):
            return S.LLM_PARAM_INVALID, None                   # E-22: the cache's entry, before any page
        pages = pool.take([size] * num_tensors)
        if pages is None:
            return (S.LLM_OUT_OF_MEMORY if self.generation == 2 else S.LLM_DEVICE_OUT_OF_MEMORY), None
        if not why and self.table_full(num_tensors, keys):
            # decision (semantics.md §15 and E-22 give no order for the keys' 24 B): the bindings are
            # counted with the keys, after the pool; the pages go back
            why = "the key bindings would push the table past 1 MiB"
        if why:
            pool.give(pages)
            if self.generation == 1 and "already bound" in why:
                return S.LLM_FAILED, None                             # semantics.md §9.2: v1 "key already exists"
            return S.LLM_PARAM_INVALID, None
        kind = ("BLOCKS" if self.generation == 2 else "V1BLOCKS") if blocks else "CACHE"
        cache = CacheM(cache_id, kind, num_tensors, size, shape[0], placement, True,
                       [bytearray(size) for _ in range(num_tensors)], pages)
        self.caches[cache_id] = cache
        if blocks and keys:
            self.bindings[keys[0].identity()] = (cache_id, 0)          # type: ignore[index]
        elif not blocks:
            last: Dict[Tuple[str, int, int], int] = {}
            for slot, key in enumerate(keys):                         # v1: the last occurrence wins
                if not key.placeholder:
                    last[key.identity()] = slot                       # type: ignore[index]
            for ident, slot in last.items():
                self.bindings[ident] = (cache_id, slot)
        return S.LLM_SUCCESS, cache_id

    def _free(self, cache: CacheM) -> None:
        pool = self.device_pool if cache.placement == DEVICE else self.host_pool
        if pool is not None:
            pool.give(cache.pages)
        self._unbind_all(cache.cache_id)
        del self.caches[cache.cache_id]

    def deallocate(self, cache_id: int) -> S:
        """semantics.md §3.4 (v2 and v1), semantics.md §9.8."""
        if self.generation == 2 and self.device_pool is None and self.host_pool is None:
            return S.LLM_FEATURE_NOT_ENABLED
        cache = self.caches.get(cache_id)
        if cache is None or (cache.owned and not cache.id_reference):
            if self.generation == 1 and cache is None:
                return S.LLM_KV_CACHE_NOT_EXIST
            return S.LLM_SUCCESS                      # unknown (v2) or already deferred
        if not cache.owned:
            return S.LLM_SUCCESS                      # a registered cache: no-op
        if cache.kind != "CACHE" or not self.keys_of(cache_id):
            self._free(cache)                         # blocks caches free at once and unbind
        else:
            cache.id_reference = False                # deferred until the last key goes (semantics.md §9.8)
        return S.LLM_SUCCESS

    def remove_cache_key(self, key: KeyM) -> S:
        """semantics.md §9.6 (the validity rule, PR-41, is a Python lint before): a placeholder-shaped
        key has its model's blocks-key identity, a key with both ids valid the prefix one."""
        if self.generation == 2 and self.device_pool is None and self.host_pool is None:
            return S.LLM_FEATURE_NOT_ENABLED
        ident = key.identity()
        bound = self.bindings.get(ident)              # type: ignore[arg-type]
        if bound is None:
            return S.LLM_SUCCESS
        cache = self.caches[bound[0]]
        if not cache.owned:
            return S.LLM_SUCCESS                      # a registered cache keeps its key
        del self.bindings[ident]                      # type: ignore[arg-type]
        if not cache.id_reference and not self.keys_of(cache.cache_id):
            self._free(cache)
        return S.LLM_SUCCESS

    # ---- local copies (semantics.md §6.6, §8.8, §8.9, §8.10) --------------------------------------------------

    def copy_cache(self, dst_id: int, src_id: int, dst_batch: int, src_batch: int, offset: int, size: int) -> S:
        src, dst = self.caches.get(src_id), self.caches.get(dst_id)
        if src is None or dst is None:
            return S.LLM_KV_CACHE_NOT_EXIST
        if src.num_tensors != dst.num_tensors:
            return S.LLM_PARAM_INVALID
        if src_batch >= src.batches or dst_batch >= dst.batches:
            return S.LLM_PARAM_INVALID
        if offset > 0 and (offset >= src.stride or offset >= dst.stride):
            return S.LLM_PARAM_INVALID
        length = size if size > 0 else src.stride - offset
        if length > src.stride - offset or length > dst.stride - offset:
            return S.LLM_PARAM_INVALID
        s0, d0 = src_batch * src.stride + offset, dst_batch * dst.stride + offset
        if src is dst and s0 < d0 + length and d0 < s0 + length:
            return S.LLM_PARAM_INVALID                # PR-24
        chunks = [bytes(t[s0:s0 + length]) for t in src.tensors]
        for t, chunk in zip(dst.tensors, chunks):
            t[d0:d0 + length] = chunk
        return S.LLM_SUCCESS

    def copy_blocks(self, cache_id: int, pairs: Sequence[Tuple[int, int]]) -> S:
        """semantics.md §8.9: pairs ``(src, dst)`` within one cache, in order: a repeated destination
        keeps the last pair's block (PR-5); no pair copies block 0 onto itself (PR-25).
        Both lints are Python checks."""
        cache = self.caches.get(cache_id)
        if cache is None:
            return S.LLM_KV_CACHE_NOT_EXIST
        if cache.blocks == 0:
            return S.LLM_PARAM_INVALID
        if any(s >= cache.blocks or d >= cache.blocks for s, d in pairs):
            return S.LLM_PARAM_INVALID                # semantics.md §7.3
        sources = {s for s, _ in pairs}
        if any(d in sources for _, d in pairs):
            return S.LLM_PARAM_INVALID                # PR-24
        st = cache.stride
        for t in cache.tensors:
            chunks = [bytes(t[s * st:(s + 1) * st]) for s, _ in pairs]
            for (_, d), chunk in zip(pairs, chunks):
                t[d * st:(d + 1) * st] = chunk
        return S.LLM_SUCCESS


def runs(pairs: Sequence[Tuple[int, int]]) -> List[Tuple[int, int, int]]:
    """semantics.md §7.3: maximal runs ``(s0, d0, len)`` in which both indexes rise by one."""
    out: List[Tuple[int, int, int]] = []
    for s, d in pairs:
        if out and out[-1][0] + out[-1][2] == s and out[-1][1] + out[-1][2] == d:
            out[-1] = (out[-1][0], out[-1][1], out[-1][2] + 1)
        else:
            out.append((s, d, 1))
    return out


def swap(src: List[bytearray], dst: List[bytearray], block_size: int, pairs: Sequence[Tuple[int, int]]) -> S:
    """semantics.md §8.10 on the tensors' bytes (the caches are addressed by their address lists).
    X-11: source and destination spans of one tensor that overlap → PARAM_INVALID (they
    cannot here: a swap is always between a HOST and a DEVICE cache)."""
    for s0, d0, n in runs(pairs):
        for ts, td in zip(src, dst):
            td[d0 * block_size:(d0 + n) * block_size] = ts[s0 * block_size:(s0 + n) * block_size]
    return S.LLM_SUCCESS
