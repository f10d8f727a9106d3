"""A reference model of the v1 generation (``KvCacheManager``) between two engines.

In v1 the library allocates every cache. A Prompt binds request keys (and prefix
keys) to the batches of a cache when it allocates it (docs/reference/semantics.md §9.2): the key at
list position ``b`` binds slot ``b``, placeholders only advance the position, and a
key repeated in one call binds at its last position ("the last one wins", PR-22's v1
half). A key already bound to a live cache makes the allocation ``LLM_FAILED``.
The Prompt may deallocate at once: a cache with keys outstanding is only marked
(its id reference dropped, semantics.md §3.4, §9.8) and lives on until its last key is released.

A Decoder pulls through a key, or by ``(cache id, batch)``. Every pull is answered by
the Prompt against its live tables (v1 works like server-assisted mode, semantics.md §1.3). A
successful contiguous pull through a request key updates the cache's
remaining-tensor set ``R`` shared by all its keys; when ``R`` is empty the key is
released, and a marked cache whose last key goes is freed (semantics.md §9.5). A pull that gave
``src_cache_offset`` or ``dst_cache_offset`` (even 0) releases nothing (semantics.md §6.3).

``V1Engine`` holds one engine's state: role, cluster id, caches (their tensor
count, batch count, tensor size, kind, keys by slot, ``R``, the id reference and
whether they are freed), the key table and the links. Each call method checks its
arguments in the order of the vendor's Python layer (docs/reference/python-api.md §12), the lints
PR-2 and PR-5 (noted in ``lints``; the refusals in strict mode) and the Python rules
PR-41 and V-5, then the engine
(docs/reference/semantics.md §8.0 with the v1 rows of semantics.md §6.1, §6.3, §7.3, §8.11) and returns an
``Outcome`` whose ``copies`` say exactly which bytes move from the source cache to
the destination cache. ``transfer_cache_async`` (semantics.md §8.7, PR-40, docs/semantics.md V-9)
writes to raw peer addresses, so its copies are resolved against the peer's caches
here, and its result per configuration follows the CacheTask rules of docs/reference/python-api.md
§9.5.

Written from the specification alone; it imports nothing from ``llm_datadist_ffi``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Set, Tuple, Union

from .codes import LLMStatusCode as S
from .codes import Role
from .outcome import Copy, Outcome, fail, python_error, strict, strict_mode, success

PI = S.LLM_PARAM_INVALID
KVNE = S.LLM_KV_CACHE_NOT_EXIST
U64_MAX = 2**64 - 1
U32_MAX = 2**32 - 1


# ---- keys ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Key:
    """``CacheKey(cluster_id, req_id, model_id, prefix_id)``."""

    cluster_id: int
    req_id: int
    model_id: int = 0
    prefix_id: int = U64_MAX


@dataclass(frozen=True)
class ById:
    """``CacheKeyByIdAndIndex(cluster_id, cache_id, batch_index)``."""

    cluster_id: int
    cache_id: int
    batch_index: int = 0


@dataclass(frozen=True)
class BlocksKey:
    """``BlocksCacheKey(cluster_id, model_id)``."""

    cluster_id: int
    model_id: int = 0


Identity = Tuple[str, int, int]     # (namespace, id, model_id), semantics.md §9.1


def valid_id(value: int) -> bool:
    """semantics.md §9.1: an id is valid when 0 ≤ id < 2**64 − 1."""
    return 0 <= value < U64_MAX


def identity(key: Union[Key, BlocksKey]) -> Optional[Identity]:
    """The identity a key is bound under (semantics.md §9.1, docs/reference/python-api.md §7.4); ``None`` for a
    placeholder. A key with both ids valid is a prefix key when bound."""
    if isinstance(key, BlocksKey):
        return ("req", U64_MAX, key.model_id)
    if valid_id(key.prefix_id):
        return ("prefix", key.prefix_id, key.model_id)
    if valid_id(key.req_id):
        return ("req", key.req_id, key.model_id)
    return None


def pull_validity(key: Key) -> bool:
    """docs/reference/python-api.md §7.5: exactly one of ``req_id`` and ``prefix_id`` is valid."""
    return valid_id(key.req_id) != valid_id(key.prefix_id)


# ---- state --------------------------------------------------------------------------------------

@dataclass
class V1Cache:
    """An allocated v1 cache (semantics.md §2.2: CACHE, or "v1 blocks" with batches and blocks)."""

    cache_id: int
    num_tensors: int
    batches: int                    # D = shape[0]
    tensor_size: int
    blocks: bool
    slots: Dict[int, Identity] = field(default_factory=dict)   # bound request/prefix keys by slot
    blocks_key: Optional[Identity] = None
    remaining: Set[int] = field(default_factory=set)            # R of semantics.md §9.5
    ext_ref: int = 1
    freed: bool = False

    @property
    def stride(self) -> int:
        return self.tensor_size // self.batches

    @property
    def has_keys(self) -> bool:
        return bool(self.slots) or self.blocks_key is not None


@dataclass
class V1Engine:
    """One initialised v1 engine (a ``LLMDataDist`` in KvCacheManager mode)."""

    cluster_id: int
    role: Role
    next_id: int = 1
    caches: Dict[int, V1Cache] = field(default_factory=dict)
    bindings: Dict[Identity, Tuple[int, int]] = field(default_factory=dict)    # identity -> (cache id, slot)
    links: Set[int] = field(default_factory=set)
    #: the lint rules of the call being modelled (docs/semantics.md §0)
    lints: List[str] = field(default_factory=list)

    def _lint(self, rule: str) -> Optional[Outcome]:
        """A lint rule: its refusal (LX) in strict mode, else noted (None) and the call goes on."""
        if strict_mode():
            return python_error_lx(rule)
        self.lints.append(rule.split(":", 1)[0])
        return None

    def _with_lints(self, outcome: Outcome) -> Outcome:
        outcome.lints, self.lints = frozenset(self.lints), []
        return outcome

    # ---- allocation and keys (semantics.md §3.3, §9.2, §3.4, §9.6) -------------------------------------------

    def live(self, cache_id: int) -> Optional[V1Cache]:
        cache = self.caches.get(cache_id)
        return None if cache is None or cache.freed else cache


    def _python_layer_rules(self, n: int, src_range: Optional[range], dst_range: Optional[range],
                            dst_id: int) -> Tuple[Optional[Outcome], Optional[range], Optional[range]]:
        """The Python steps both v1 pulls share, in order (python-api §12): ``n > 0`` (semantics.md §5),
        the layer-range conversion (semantics.md §4.2, PR-2: an empty range is a lint and means no
        range), then V-5 against the local cache. Returns the first failure and the ranges
        as the core sees them."""
        if n <= 0:
            return python_error_lx("§5: tensor_num_per_layer <= 0"), src_range, dst_range
        for layers in (src_range, dst_range):
            if layers is not None and layers.step != 1:
                return python_error_lx("§4.2: step != 1"), src_range, dst_range
        ranges: List[Optional[range]] = []
        for layers in (src_range, dst_range):
            if layers is not None and len(layers) == 0:
                refused = self._lint("PR-2: empty range")
                if refused is not None:
                    return refused, src_range, dst_range
                layers = None
            if layers is not None:
                if layers[0] < 0:
                    return python_error_lx("§4.2: negative start"), src_range, dst_range
                if layers[-1] > U32_MAX:
                    return python_error(ValueError, "§4.2: a layer past uint32"), src_range, dst_range
            ranges.append(layers)
        src_range, dst_range = ranges
        local = self.live(dst_id)
        if local is not None:
            for layers in (src_range, dst_range):
                if layers is not None and len(layers) * n > local.num_tensors:
                    return python_error_lx("V-5: more selected tensors than N_local"), src_range, dst_range
        return None, src_range, dst_range

    def allocate(self, num_tensors: int, batches: int, tensor_size: int, keys: Sequence[Key] = (),
                 blocks: bool = False, blocks_key: Optional[BlocksKey] = None) -> Outcome:
        """``allocate_cache(desc, keys)`` or ``allocate_blocks_cache(desc, blocks_key)``.

        The value of a success is the new cache id."""
        # docs/reference/python-api.md §12 allocate_cache / allocate_blocks_cache (the role rows of semantics.md §9.2, §11)
        if not blocks and keys and self.role != Role.PROMPT:
            return python_error_lx("§9.2: keys given by a non-PROMPT engine")
        if blocks and blocks_key is not None and self.role == Role.DECODER:
            return python_error_lx("§9.2: a blocks key given by a DECODER")
        # semantics.md §3.1: a v1 allocation that passed the placement check takes an id, even if it fails later
        cache_id = self.next_id
        self.next_id += 1
        if len(keys) > batches:
            return fail(PI, "§9.2, X-6: more keys than batches")
        wanted: Dict[Identity, int] = {}
        for slot, key in enumerate(keys):
            ident = identity(key)
            if ident is not None:
                wanted[ident] = slot            # PR-22 (v1): the last occurrence binds
        if blocks_key is not None:
            wanted[identity(blocks_key)] = 0    # type: ignore[index]
        for ident in wanted:
            if ident in self.bindings:
                return fail(S.LLM_FAILED, "§9.2: a key already bound (v1: FAILED)")
        cache = V1Cache(cache_id, num_tensors, batches, tensor_size, blocks)
        for ident, slot in wanted.items():
            self.bindings[ident] = (cache_id, slot)
            if blocks_key is not None:
                cache.blocks_key = ident
            else:
                cache.slots[slot] = ident
        if cache.slots:
            cache.remaining = set(range(num_tensors))     # semantics.md §9.5: R is reset whenever a key is bound
        self.caches[cache_id] = cache
        return success(cache_id)

    def deallocate(self, cache_id: int) -> Outcome:
        """``deallocate_cache`` (semantics.md §3.4; the v2 deferral rule applies to v1, semantics.md §9.5, §9.8)."""
        cache = self.live(cache_id)
        if cache is None:
            return fail(KVNE, "§3.4: unknown id (v1)")
        if cache.ext_ref == 0:
            return success(rule="X-6: already deferred")
        cache.ext_ref = 0
        if cache.blocks or not cache.slots:
            # a blocks cache is freed at once and loses its key (semantics.md §3.4, §9.8)
            if cache.blocks_key is not None:
                del self.bindings[cache.blocks_key]
                cache.blocks_key = None
            cache.freed = True
        return success()

    def _release(self, ident: Identity) -> None:
        """Unbind ``ident``; a cache without its id reference and keys is freed (semantics.md §9.5)."""
        cache_id, slot = self.bindings.pop(ident)
        cache = self.caches[cache_id]
        if cache.blocks_key == ident:
            cache.blocks_key = None
        else:
            cache.slots.pop(slot, None)
        if cache.ext_ref == 0 and not cache.has_keys:
            cache.freed = True

    def remove_cache_key(self, key: Key) -> Outcome:
        """``remove_cache_key`` (semantics.md §9.6; PROMPT only; PR-41)."""
        if self.role != Role.PROMPT:
            return python_error_lx("§9.6, §11: remove_cache_key by a non-PROMPT engine")
        lints: List[str] = []
        if not pull_validity(key):                  # PR-41: a lint
            if strict():
                return python_error_lx("PR-41")
            lints.append("PR-41")
        # a placeholder-shaped key acts as its model's blocks key
        ident = identity(key) or ("req", U64_MAX, key.model_id)
        if ident not in self.bindings:
            return success(rule="§9.6: not bound").linted(*lints)
        cache = self.caches[self.bindings[ident][0]]
        cache.remaining = set()
        self._release(ident)
        return success().linted(*lints)

    # ---- pulls (semantics.md §6.1, §6.3, §8.0, §8.11, §9.4, §9.5) -----------------------------------------

    def pull_cache(self, prompt: Optional["V1Engine"], key: Union[Key, ById], dst_id: int, batch_index: int = 0,
                   size: int = -1, src_range: Optional[range] = None, dst_range: Optional[range] = None,
                   n: int = 2, src_offset: Optional[int] = None, dst_offset: Optional[int] = None) -> Outcome:
        """``kv_cache_manager.pull_cache`` on this engine from ``prompt`` (the engine of
        ``key.cluster_id``, or ``None`` when no engine has that cluster id)."""
        self.lints = []
        return self._with_lints(self._pull_cache(prompt, key, dst_id, batch_index, size, src_range, dst_range, n,
                                                 src_offset, dst_offset))

    def _pull_cache(self, prompt: Optional["V1Engine"], key: Union[Key, ById], dst_id: int, batch_index: int,
                    size: int, src_range: Optional[range], dst_range: Optional[range], n: int,
                    src_offset: Optional[int], dst_offset: Optional[int]) -> Outcome:
        # docs/reference/python-api.md §12 pull_cache, steps 1-11
        if self.role != Role.DECODER:
            return python_error_lx("§11: pulls only by a DECODER (MIX rejected)")
        if size != -1 and size <= 0:
            return python_error_lx("§6.1: size neither -1 nor > 0")
        for offset in (src_offset, dst_offset):
            if offset is not None and offset < 0:
                return python_error(ValueError, "§6.3: a negative offset is a ValueError")
        if isinstance(key, Key) and not pull_validity(key):
            return python_error_lx("§7.5: key validity")
        layered, src_range, dst_range = self._python_layer_rules(n, src_range, dst_range, dst_id)
        if layered is not None:
            return layered
        local = self.live(dst_id)
        # the engine (semantics.md §8.0 pull order; v1 has no own-cluster step, E-7)
        if local is None:
            return fail(KVNE, "§8.0 step 3: local cache unknown")
        if batch_index >= local.batches:
            return fail(PI, "§6.2: destination batch >= B_dst")
        doff = dst_offset or 0
        soff = src_offset or 0
        length = size if size > 0 else local.stride - doff           # semantics.md §6.1 (v1): S_dst − dst_cache_offset
        if length <= 0:
            # decision: size -1 with dst_cache_offset = S_dst would move nothing (semantics.md §1.5: rejected)
            return fail(PI, "§6.1 (v1): no byte left after dst_cache_offset (decision)")
        if doff + length > local.stride:
            return fail(PI, "§6.1, §6.3: dst_cache_offset + L > S_dst")
        tensor_check = _local_tensors(n, local.num_tensors, src_range, dst_range)
        if tensor_check is not None:
            return tensor_check
        if prompt is None or key.cluster_id not in self.links:
            return fail(S.LLM_NOT_YET_LINK, "§8.0 step 5: no link")
        # step 7: the source, resolved live by the Prompt (semantics.md §9.4)
        through: Optional[Identity] = None
        if isinstance(key, Key):
            ident = identity(key)
            if ident not in prompt.bindings:
                return fail(KVNE, "§9.4: key not bound")
            src_id, b_src = prompt.bindings[ident]
            if ident[0] == "req":
                through = ident
        else:
            if key.cache_id <= 0:
                return fail(KVNE, "PR-20")
            src_id, b_src = key.cache_id, key.batch_index
            cache = prompt.live(src_id)
            if cache is None:
                return fail(KVNE, "§9.4: cache by id unknown")
            if b_src >= cache.batches:
                return fail(KVNE, "§6.2: source batch >= B_src")
            if b_src in cache.slots and cache.slots[b_src][0] == "req":
                through = cache.slots[b_src]
        source = prompt.caches[src_id]
        # step 9: the source's checks
        pairs = _pairs(n, local.num_tensors, source.num_tensors, src_range, dst_range)
        if isinstance(pairs, Outcome):
            return pairs
        if soff + length > source.stride:
            return fail(PI, "§6.1, §6.3: src_cache_offset + L > S_src")
        copies = [Copy(d, batch_index * local.stride + doff, s, b_src * source.stride + soff, length)
                  for s, d in pairs]
        # semantics.md §9.5: release through a request key, unless an offset was given (even 0)
        if through is not None and src_offset is None and dst_offset is None:
            source.remaining = set() if src_range is None else source.remaining - {s for s, _ in pairs}
            if not source.remaining:
                prompt._release(through)
        return success(copies=copies).at((prompt.cluster_id, src_id), (self.cluster_id, dst_id))

    def pull_blocks(self, prompt: Optional["V1Engine"], key: BlocksKey, dst_id: int, src_blocks: Sequence[int],
                    dst_blocks: Sequence[int], src_range: Optional[range] = None,
                    dst_range: Optional[range] = None, n: int = 2) -> Outcome:
        """``kv_cache_manager.pull_blocks`` (semantics.md §7, §8.3, §8.11)."""
        self.lints = []
        return self._with_lints(self._pull_blocks(prompt, key, dst_id, src_blocks, dst_blocks, src_range, dst_range,
                                                  n))

    def _pull_blocks(self, prompt: Optional["V1Engine"], key: BlocksKey, dst_id: int, src_blocks: Sequence[int],
                     dst_blocks: Sequence[int], src_range: Optional[range], dst_range: Optional[range],
                     n: int) -> Outcome:
        if self.role != Role.DECODER:
            return python_error_lx("§11: pulls only by a DECODER")
        if not src_blocks or not dst_blocks:
            return python_error_lx("§7.2: an empty block list (v1)")
        if len(src_blocks) != len(dst_blocks):
            return python_error_lx("§7.2: lengths differ (v1)")
        layered, src_range, dst_range = self._python_layer_rules(n, src_range, dst_range, dst_id)
        if layered is not None:
            return layered
        local = self.live(dst_id)
        if len(set(dst_blocks)) != len(dst_blocks):
            refused = self._lint("PR-5: a repeated destination block")
            if refused is not None:
                return refused
        # (v1 has no own-cluster step: a pull names the linked cluster, E-7)
        if local is None:
            return fail(KVNE, "§8.0 step 3: local cache unknown")
        if not local.blocks:
            return fail(PI, "§7.6: a block pull into a cache without blocks")
        tensor_check = _local_tensors(n, local.num_tensors, src_range, dst_range)
        if tensor_check is not None:
            return tensor_check
        if prompt is None or key.cluster_id not in self.links:
            return fail(S.LLM_NOT_YET_LINK, "§8.0 step 5: no link")
        if max(dst_blocks) >= local.batches:
            return fail(PI, "§7.3 (v1): a destination index >= D_dst")
        ident = identity(key)
        if ident not in prompt.bindings:
            return fail(KVNE, "§9.4: blocks key not bound")
        source = prompt.caches[prompt.bindings[ident][0]]
        pairs = _pairs(n, local.num_tensors, source.num_tensors, src_range, dst_range)
        if isinstance(pairs, Outcome):
            return pairs
        if max(src_blocks) >= source.batches:
            return fail(PI, "§7.3 (v1), PR-4: a source run past the source cache")
        if source.stride != local.stride:
            return fail(PI, "PR-13: block sizes differ")
        block = local.stride        # semantics.md §8.11: the destination batch stride is the block length
        copies = [Copy(d, db * block, s, sb * block, block)
                  for s, d in pairs for sb, db in zip(src_blocks, dst_blocks)]
        return success(copies=copies).at((prompt.cluster_id, source.cache_id), (self.cluster_id, dst_id))

    # ---- transfer_cache_async (semantics.md §8.7, PR-40, V-9) ------------------------------------------------

    def transfer_cache_async(self, peers: Dict[int, "V1Engine"], src_id: int,
                             configs: Sequence["TransferConfigArg"],
                             peer_addresses: Dict[int, Dict[int, List[int]]]) -> Outcome:
        """``kv_cache_manager.transfer_cache_async(src, sync, configs)`` with a
        synchronizer that always answers True, joined without a timeout.

        ``peer_addresses[cluster][cache_id]`` are the tensor addresses of the peers'
        caches. The value of an accepted call is ``(results, writes)``: the
        per-config results of ``get_results()`` and, per peer cluster, the copies
        ``(dst_cache_id, Copy)`` made from ``src_id``.
        """
        if self.role != Role.PROMPT:
            return python_error_lx("§11: transfer_cache_async only by a PROMPT")
        src = self.live(src_id)
        assert src is not None, "the model draws only live source caches"
        if src.num_tensors % 2:
            return python_error_lx("§4.3: an odd tensor count")
        layers = src.num_tensors // 2
        plans = []
        for config in configs:
            covered = config.src_range if config.src_range is not None else range(0, layers)
            if not config.src_batch < src.batches:
                return python_error_lx("V-9: src_batch_index past the batch count")
            if not 0 <= covered.start < covered.stop <= layers:
                return python_error_lx("§4.3: 0 <= start < stop <= N/2")
            if len(config.dst_addrs) != 2 * len(covered):
                return python_error_lx("docs/reference/python-api.md §11.4 step 10: 2 addresses per layer")
            plans.append((config, covered))
        results: Dict[int, S] = {}
        writes: Dict[int, List[Tuple[int, Copy]]] = {}
        stopped = False
        for layer in range(layers):
            covering = [(c, r) for c, r in plans if layer in r]
            for config, covered in covering:
                code, layer_writes = self._transfer_layer(peers, src, layer, config, covered, peer_addresses)
                if code != S.LLM_SUCCESS:
                    results[config.dst_cluster] = code
                    stopped = True
                    break
                writes.setdefault(config.dst_cluster, []).extend(layer_writes)
                if layer == covered[-1]:
                    results[config.dst_cluster] = S.LLM_SUCCESS
            if stopped:
                break
        return success(([results.get(c.dst_cluster) for c in configs], writes))

    def _transfer_layer(self, peers: Dict[int, "V1Engine"], src: V1Cache, layer: int, config: "TransferConfigArg",
                        covered: range, peer_addresses: Dict[int, Dict[int, List[int]]]
                        ) -> Tuple[S, List[Tuple[int, Copy]]]:
        """One layer to the raw addresses (semantics.md §8.7): tensors 2L and 2L+1, ``S_src`` bytes
        each from batch ``src_batch``; each range inside one live peer tensor (PR-40),
        both checked before either is written."""
        peer = peers.get(config.dst_cluster)
        if peer is None or config.dst_cluster not in self.links:
            return S.LLM_NOT_YET_LINK, []
        position = layer - covered.start
        out = []
        for j in range(2):
            target = _find_tensor(peer, peer_addresses.get(config.dst_cluster, {}),
                                  config.dst_addrs[2 * position + j], src.stride)
            if target is None:
                return PI, []
            cache_id, tensor, offset = target
            out.append((cache_id, Copy(tensor, offset, 2 * layer + j, config.src_batch * src.stride, src.stride)))
        return S.LLM_SUCCESS, out

    # ---- links and roles (semantics.md §10.5, §10.7, §10.8, §11) -------------------------------------------

    def check_link_status(self, remote: int) -> Outcome:
        """semantics.md §10.8: DECODER only; a link exists → returns; else ``NOT_YET_LINK``."""
        if self.role != Role.DECODER:
            return fail(PI, "§10.8: caller not DECODER")
        if remote not in self.links:
            return fail(S.LLM_NOT_YET_LINK, "§10.8: no link")
        return success()


@dataclass(frozen=True)
class TransferConfigArg:
    """``TransferConfig(dst_cluster_id, dst_addrs, src_layer_range, src_batch_index)``."""

    dst_cluster: int
    dst_addrs: Tuple[int, ...]
    src_range: Optional[range] = None
    src_batch: int = 0


def link_v1(decoder: V1Engine, prompt: Optional[V1Engine], remote_cluster: int) -> Outcome:
    """v1 ``link_clusters`` of one cluster by ``decoder`` (python-api.md §10.5, X-12). The value is the
    per-cluster list."""
    if decoder.role != Role.DECODER:
        return Outcome(status=PI, rule="§10.5: caller not DECODER", value=[])
    if prompt is None:
        # nobody listens there: the cluster fails and is rolled back (semantics.md §10.5)
        return Outcome(status=S.LLM_LINK_FAILED, rule="§10.5: refused", value=[S.LLM_LINK_FAILED])
    if remote_cluster in decoder.links:
        return Outcome(status=S.LLM_ALREADY_LINK, rule="§10.2 (v1 decision): linked already",
                       value=[S.LLM_ALREADY_LINK])
    decoder.links.add(remote_cluster)
    prompt.links.add(decoder.cluster_id)
    return Outcome(value=[S.LLM_SUCCESS])


def unlink_v1(caller: V1Engine, peer: Optional[V1Engine], remote_cluster: int, force: bool) -> Outcome:
    """v1 ``unlink_clusters`` of one cluster (python-api.md §10.5, X-12: never linked → per-cluster
    ``NOT_YET_LINK``, overall success)."""
    if remote_cluster not in caller.links:
        return Outcome(value=[S.LLM_NOT_YET_LINK], rule="X-12")
    caller.links.discard(remote_cluster)
    if not force and peer is not None:
        peer.links.discard(caller.cluster_id)
    return Outcome(value=[S.LLM_SUCCESS])


# ---- helpers ------------------------------------------------------------------------------------

def python_error_lx(rule: str) -> Outcome:
    """An ``LLMException(LLM_PARAM_INVALID)`` raised by the Python layer (LX)."""
    return fail(PI, "LX " + rule)


def _local_tensors(n: int, num_local: int, src: Optional[range], dst: Optional[range]) -> Optional[Outcome]:
    """semantics.md §4.2 rows checked against the local cache (step 4)."""
    if dst is not None and (dst.stop * n > num_local):
        return fail(PI, "§4.2: a destination tensor >= N_local")
    if src is not None and dst is not None and len(src) != len(dst):
        return fail(PI, "§4.2: spans differ")
    if src is not None and dst is None and len(src) * n != num_local:
        return fail(PI, "§4.2: only src range, count != N_local")
    return None


def _pairs(n: int, num_local: int, num_remote: int, src: Optional[range],
           dst: Optional[range]) -> Union[Outcome, List[Tuple[int, int]]]:
    """The tensor pairs ``(s, d)`` of a pull (semantics.md §4.1, §8.1) after the source's checks
    (semantics.md §4.2: source tensors < N_remote; the counts without a range)."""
    src_t = list(range(src.start * n, src.stop * n)) if src is not None else None
    dst_t = list(range(dst.start * n, dst.stop * n)) if dst is not None else None
    if src_t is not None and src_t[-1] >= num_remote:
        return fail(PI, "§4.2: a source tensor >= N_remote")
    if src_t is None and dst_t is not None and num_remote != len(dst_t):
        return fail(PI, "§4.2: only dst range, N_remote != count")
    if src_t is None and dst_t is None and num_remote != num_local:
        return fail(PI, "§8.1: N_src != N_dst without ranges")
    if src_t is None:
        src_t = list(range(num_remote))
    if dst_t is None:
        dst_t = list(range(num_local))
    return list(zip(src_t, dst_t))


def _find_tensor(peer: V1Engine, addresses: Dict[int, List[int]], addr: int,
                 length: int) -> Optional[Tuple[int, int, int]]:
    """PR-40: the live peer tensor holding ``[addr, addr + length)``: (cache id,
    tensor, offset), or ``None``."""
    for cache_id, tensor_addrs in addresses.items():
        cache = peer.live(cache_id)
        if cache is None:
            continue
        for tensor, base in enumerate(tensor_addrs):
            if base <= addr and addr + length <= base + cache.tensor_size:
                return cache_id, tensor, addr - base
    return None
