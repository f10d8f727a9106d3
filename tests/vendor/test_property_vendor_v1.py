"""Property tests of the v1 generation (``KvCacheManager``) between two processes,
against the oracle of ``tests/oracle/vendor_v1.py``.

The vendor's API allows one initialised ``LLMDataDist`` per process (V-1), so every
example runs one engine here and one in a peer process (``vendor_support.Peer``,
with ``vendor_v1_peer_support`` loaded there), both in v1 mode. Two arrangements:

* **Decoder here**, Prompt in the peer. The Prompt allocates one to three caches
  with keys drawn from a small pool (request keys, prefix keys, placeholders,
  duplicates, keys already bound by an earlier cache, more keys than batches),
  blocks caches with or without a blocks key, fills them from seeds, and
  deallocates some at once (the keys keep them alive, semantics.md §9.5). The Decoder
  allocates its destination caches, links (semantics.md §10.5), and makes one pull:
  ``pull_cache`` through a key or by ``(cache id, batch)`` with a destination
  batch, ``size``, offsets (semantics.md §6.3, PR-38), layer ranges and
  ``tensor_num_per_layer`` (PR-3), or ``pull_blocks`` with block lists (semantics.md §7.3, PR-4,
  PR-5, PR-13). The same call is then made a second time: what it gives shows the
  key state the first one left (released or not).
* **Prompt here**, Decoder in the peer (the swapped roles). The Prompt allocates
  with keys, the Decoder links to it, and the Prompt either moves layers with
  ``transfer_cache_async`` to raw addresses inside (or outside) the Decoder's
  tensors (semantics.md §8.7, PR-40, V-9), or removes a key (semantics.md §9.6) after which the Decoder
  pulls through it; or this engine tries a pull, which its role forbids (semantics.md §11).

Every example is clean (the call succeeds unless the drawn caches do not fit each
other) or has one flawed knob, the focus group of the test. The outcome (an
``LLMException``'s ``status_code``, a ``ValueError``, or success) must be the
oracle's, and every byte of every live cache on both sides must equal the oracle's
memory: the sources' seed bytes with exactly the oracle's copies applied.
"""
from __future__ import annotations

import ctypes
from typing import Any, Dict, Iterator, List, Optional, Tuple

import numpy as np
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from llm_datadist_ffi import LLMStatusCode as S
from llm_datadist_ffi.testing import strategies as lst
from llm_datadist_ffi.vendor import (
    BlocksCacheKey, CacheDesc, CacheKey, CacheKeyByIdAndIndex, DataType, LayerSynchronizer, LLMDataDist, LLMRole,
    TransferConfig,
)

from oracle.memory import apply_copies
from oracle.outcome import Outcome
from oracle.vendor_v1 import (
    U64_MAX, BlocksKey, ById, Key, TransferConfigArg, V1Engine, identity, link_v1,
)

import vendor_support as vs

pytestmark = [pytest.mark.mock_only(reason="the vendor-compatible API needs the mock's extension functions"),
              pytest.mark.usefixtures("no_engine_left")]


P_ID, D_ID, STRANGER = 1, 2, 99
Memory = Dict[Tuple[int, int], List[np.ndarray]]


@pytest.fixture(scope="module")
def peer() -> Iterator[Any]:
    with vs.Peer() as made:
        made.run("import vendor_v1_peer_support as ps")
        yield made
        made.run("ps.stop()")


# ---- making calls and comparing them with the oracle ------------------------------------------------

observed = vs.observed


def peer_observed(peer: Any, code: str, value: Optional[str] = None) -> Tuple[str, Any]:
    """The same for a statement run in the peer."""
    try:
        return "ok", peer.run(code, value)
    except vs.PeerError as exc:
        if exc.status is not None:
            return "status", S(exc.status)
        return "error", exc.type
    finally:
        vs.LAST_LINTS = peer.last_lints


expect = vs.expect


def seed_bytes(seed: int, num: int, size: int) -> List[np.ndarray]:
    return [vs.fill(seed + t, size).copy() for t in range(num)]


def read_here(addrs: List[int], size: int) -> bytes:
    return b"".join(ctypes.string_at(a, size) for a in addrs)


# ---- the world of one example ---------------------------------------------------------------------

class World:
    """Both engines, their models, the caches' addresses and the model's memory."""

    def __init__(self, peer: Any, here_role: LLMRole, prompt_here: bool) -> None:
        self.peer = peer
        self.prompt_here = prompt_here
        self.here_id = P_ID if prompt_here else D_ID
        self.peer_id = D_ID if prompt_here else P_ID
        self.port = vs.free_port()
        peer_role = "DECODER" if prompt_here else "PROMPT"
        peer.run(f"ps.start({peer_role!r}, {self.peer_id}, {None if prompt_here else self.port})")
        self.engine = LLMDataDist(here_role, self.here_id)
        own_port = self.port if prompt_here else vs.free_port()
        self.engine.init(vs.v1_options(own_port if here_role is LLMRole.PROMPT else None))
        self.kv = self.engine.kv_cache_manager
        self.models = {self.here_id: V1Engine(self.here_id, here_role),
                       self.peer_id: V1Engine(self.peer_id, LLMRole.DECODER if prompt_here else LLMRole.PROMPT)}
        self.memory: Memory = {}
        self.addrs: Dict[Tuple[int, int], List[int]] = {}
        self.sizes: Dict[Tuple[int, int], int] = {}
        self.objects: Dict[int, Any] = {}          # this side's KvCache objects by id

    def close(self) -> None:
        self.engine.finalize()

    @property
    def here(self) -> V1Engine:
        return self.models[self.here_id]

    @property
    def there(self) -> V1Engine:
        return self.models[self.peer_id]

    def allocate(self, on_peer: bool, num: int, shape: Tuple[int, int], keys: List[Key], blocks: bool,
                 blocks_key: Optional[BlocksKey], seed: int) -> Optional[int]:
        cluster = self.peer_id if on_peer else self.here_id
        model = self.models[cluster]
        outcome = model.allocate(num, shape[0], shape[0] * shape[1], keys, blocks, blocks_key)
        size = shape[0] * shape[1]
        if on_peer:
            key_specs = [["key", k.cluster_id, k.req_id, k.model_id, k.prefix_id] for k in keys]
            bkey = None if blocks_key is None else ["blocks", blocks_key.cluster_id, blocks_key.model_id]
            got = peer_observed(self.peer, "", f"ps.allocate('c{seed}', {num}, {list(shape)}, {key_specs}, "
                                               f"{blocks}, {bkey}, {seed})")
            expect(outcome, got, "allocate in the peer")
            if got[0] != "ok":
                return None
            cache_id, addrs = got[1]
        else:
            desc = CacheDesc(num, list(shape), DataType.DT_UINT8)
            vendor_keys = [CacheKey(k.cluster_id, k.req_id, k.model_id, k.prefix_id) for k in keys]
            bk = None if blocks_key is None else BlocksCacheKey(blocks_key.cluster_id, blocks_key.model_id)
            got = observed(lambda: self.kv.allocate_blocks_cache(desc, bk) if blocks
                           else self.kv.allocate_cache(desc, vendor_keys))
            expect(outcome, got, "allocate here")
            if got[0] != "ok":
                return None
            cache = got[1]
            cache_id, addrs = cache.cache_id, list(cache.per_device_tensor_addrs[0])
            for t in range(num):
                ctypes.memmove(addrs[t], vs.fill(seed + t, size).tobytes(), size)
            self.objects[cache_id] = cache
        assert cache_id == outcome.value, f"cache id {cache_id}, the oracle says {outcome.value}"
        self.memory[(cluster, cache_id)] = seed_bytes(seed, num, size)
        self.addrs[(cluster, cache_id)] = addrs
        self.sizes[(cluster, cache_id)] = size
        return cache_id

    def deallocate(self, on_peer: bool, cache_id: int, seed: int) -> None:
        cluster = self.peer_id if on_peer else self.here_id
        outcome = self.models[cluster].deallocate(cache_id)
        if on_peer:
            got = peer_observed(self.peer, f"ps.deallocate('c{seed}')")
        else:
            got = observed(lambda: self.kv.deallocate_cache(self.objects[cache_id]))
        expect(outcome, got, "deallocate")

    def apply(self, outcome: Outcome) -> None:
        if outcome.ok and outcome.copies:
            assert outcome.src is not None and outcome.dst is not None
            apply_copies(outcome.copies, self.memory[outcome.src], self.memory[outcome.dst])

    def check_memory(self) -> None:
        """Every byte of every live cache on both sides equals the model."""
        for (cluster, cache_id), tensors in self.memory.items():
            if self.models[cluster].live(cache_id) is None:
                continue            # freed: its memory is no longer the cache's
            addrs, size = self.addrs[(cluster, cache_id)], self.sizes[(cluster, cache_id)]
            if cluster == self.here_id:
                got = read_here(addrs, size)
            else:
                got = bytes.fromhex(self.peer.run(value=f"ps.dump({addrs}, {size})"))
            wanted = b"".join(bytes(t) for t in tensors)
            assert got == wanted, f"cache {cache_id} of cluster {cluster} differs from the model"

    def link(self) -> None:
        """The Decoder links to the Prompt (semantics.md §10.5)."""
        decoder, prompt = (self.there, self.here) if self.prompt_here else (self.here, self.there)
        outcome = link_v1(decoder, prompt, prompt.cluster_id)
        if self.prompt_here:
            got = self.peer.run(value=f"ps.link({P_ID}, {self.port})")
            got = (S(got[0]), [S(r) for r in got[1]])
        else:
            got = self.engine.link_clusters([vs.cluster_info(P_ID, self.port)], 5000)
        assert got == (outcome.status, outcome.value), f"link: {got} != {outcome.status}, {outcome.value}"


# ---- strategies -------------------------------------------------------------------------------------

KEY_POOL = [Key(P_ID, 10), Key(P_ID, 11), Key(P_ID, 12), Key(P_ID, 10, 1), Key(P_ID, U64_MAX, 0, 30),
            Key(P_ID, U64_MAX, 0, 31), Key(P_ID, U64_MAX)]
WIDTHS = [16, 32, 64]


@st.composite
def cache_specs(draw: Any, focus: str, force_blocks: bool = False) -> Dict[str, Any]:
    """A Prompt-side cache: tensor count, shape, keys, blocks key, deallocated at once."""
    blocks = force_blocks or draw(st.integers(0, 3)) == 0
    batches = draw(st.integers(1, 4))
    limit = batches + 1 if focus == "keys" else batches
    keys = [] if blocks else draw(st.lists(st.sampled_from(KEY_POOL), max_size=limit))
    return {"num": draw(st.sampled_from([2, 4])), "shape": (batches, draw(st.sampled_from(WIDTHS))),
            "keys": keys, "blocks": blocks,
            "blocks_key": draw(st.sampled_from([None, BlocksKey(P_ID, 0), BlocksKey(P_ID, 0), BlocksKey(P_ID, 1)]))
            if blocks else None,
            "dealloc": draw(st.integers(0, 3)) == 0}


def prompt_caches(world: World, data: Any, focus: str, on_peer: bool) -> List[int]:
    ids = []
    for index in range(data.draw(st.integers(1, 3), label="prompt caches")):
        spec = data.draw(cache_specs(focus, force_blocks=index == 0 and focus == "blocks"),
                         label=f"prompt cache {index}")
        seed = 1000 + 100 * index
        cache_id = world.allocate(on_peer, spec["num"], spec["shape"], spec["keys"], spec["blocks"],
                                  spec["blocks_key"], seed)
        if cache_id is not None:
            ids.append(cache_id)
            if spec["dealloc"]:
                world.deallocate(on_peer, cache_id, seed)
    return ids


def decoder_caches(world: World, data: Any, on_peer: bool) -> List[int]:
    """The Decoder's caches: contiguous, and a blocks cache, mostly shaped like a
    Prompt cache (same tensor count and stride) so that clean pulls fit."""
    prompt = world.models[P_ID]
    ids = []
    for index, blocks in enumerate([False, True]):
        like = [c for c in prompt.caches.values() if c.blocks == blocks] or list(prompt.caches.values())
        if like and data.draw(st.integers(0, 3), label="mirror"):
            model = data.draw(st.sampled_from(like), label="mirrored")
            num, width = model.num_tensors, model.stride
        else:
            num, width = data.draw(st.sampled_from([2, 4])), data.draw(st.sampled_from(WIDTHS))
        shape = (data.draw(st.integers(1, 4)), width)
        cache_id = world.allocate(on_peer, num, shape, [], blocks, None, 5000 + 100 * index)
        assert cache_id is not None
        ids.append(cache_id)
    return ids


def layer_knobs(data: Any, focus: str) -> Tuple[Optional[range], Optional[range], int]:
    if focus != "layer ranges":
        n = 2 if data.draw(st.integers(0, 3)) else 1
        if data.draw(st.integers(0, 2)) == 0:
            start = data.draw(st.integers(0, 1))
            return range(start, start + 1), range(start, start + 1), n
        return None, None, n
    def one() -> Optional[range]:
        if data.draw(st.booleans()):
            return None
        start = data.draw(st.integers(-1, 3))
        return range(start, start + data.draw(st.sampled_from([1, 1, 2, 2, 3, 0, -1])))
    return one(), one(), data.draw(st.integers(1, 5))


FOCUS = ["clean", "keys", "key validity", "unbound key", "batch", "size", "offsets", "layer ranges", "no link",
         "local cache", "blocks", "wrong role"]


# ---- the decoder-here property ------------------------------------------------------------------

def pull_call(world: World, data: Any, focus: str, sources: List[int], dsts: List[int]) -> Tuple[Any, ...]:
    """Draw one pull: ``("cache", key, dst, batch, size, kwargs)`` or
    ``("blocks", key, dst, src_blocks, dst_blocks, kwargs)``."""
    prompt = world.there
    blocks = focus == "blocks" or (focus in ("clean", "layer ranges", "no link", "wrong role")
                                   and data.draw(st.integers(0, 2)) == 0)
    src_range, dst_range, n = layer_knobs(data, focus)
    kwargs: Dict[str, Any] = {"tensor_num_per_layer": n}
    if src_range is not None:
        kwargs["src_layer_range"] = src_range
    if dst_range is not None:
        kwargs["dst_layer_range"] = dst_range
    kind = [d for d in dsts if world.here.caches[d].blocks == blocks]
    dst = data.draw(st.sampled_from(kind if kind and focus != "local cache" else dsts), label="dst")
    if focus == "local cache":
        dst = data.draw(st.sampled_from([dst, 77]), label="dst id")
    local = world.here.caches.get(dst)
    if blocks:
        key = data.draw(st.sampled_from([BlocksKey(P_ID, 0), BlocksKey(P_ID, 1)]), label="blocks key")
        top_d = local.batches if local is not None else 4
        count = data.draw(st.integers(1, 4 if focus == "blocks" else top_d))
        src_top = max([c.batches for c in prompt.caches.values() if c.blocks] or [4])
        if focus == "blocks":          # indexes up to one past each cache, destinations may repeat
            src_blocks = data.draw(st.lists(st.integers(0, src_top), min_size=count, max_size=count))
            dst_blocks = data.draw(st.lists(st.integers(0, top_d), min_size=count, max_size=count))
        else:
            src_blocks = data.draw(lst.block_lists(src_top, min_size=count, max_size=count, unique=False,
                                                   containers=["list"]))
            dst_blocks = data.draw(lst.block_lists(top_d, min_size=count, max_size=count, containers=["list"]))
        return ("blocks", key, dst, src_blocks, dst_blocks, kwargs)
    bound = [k for k in KEY_POOL if identity(k) in prompt.bindings]
    choices: List[Any] = [ById(P_ID, c, data.draw(st.integers(0, 3))) for c in sources] + bound
    if focus == "unbound key":
        choices = [Key(P_ID, 12, 7), Key(P_ID, U64_MAX, 5, 33), ById(P_ID, 55, 0), ById(P_ID, 0, 0)] + choices
    if focus == "key validity":
        choices = [Key(P_ID, U64_MAX), Key(P_ID, 10, 0, 30), Key(D_ID, 10)]
    if not choices:
        choices = [Key(P_ID, 10)]
    key = data.draw(st.sampled_from(choices), label="key")
    b_dst = local.batches if local is not None else 1
    stride = local.stride if local is not None else 16
    batch = data.draw(st.integers(0, b_dst - 1 + (2 if focus == "batch" else 0)), label="batch")
    if focus == "size":
        size = data.draw(st.sampled_from([-2, 0, stride, stride + 1, 2 * stride, 128]), label="size")
    else:
        size = data.draw(st.sampled_from([-1, -1, 1, stride // 2, stride]), label="size")
    for word in ("src_cache_offset", "dst_cache_offset"):
        if focus in ("offsets", "wrong role"):
            # with a wrong role, a negative offset (ValueError at step 8) shows that the role (step 1) came first
            choice = data.draw(st.sampled_from([None, 0, stride // 2, stride - 1, stride, stride + 8, 64, -1]))
        else:
            choice = data.draw(st.sampled_from([None, None, 0, 1, stride // 4]))
        if choice is not None:
            kwargs[word] = choice
    return ("cache", key, dst, batch, size, kwargs)


def model_pull(world: World, call: Tuple[Any, ...]) -> Outcome:
    here, prompt = world.here, world.there
    kw = call[5]
    src_range, dst_range, n = kw.get("src_layer_range"), kw.get("dst_layer_range"), kw["tensor_num_per_layer"]
    if call[0] == "blocks":
        return here.pull_blocks(prompt, call[1], call[2], call[3], call[4], src_range, dst_range, n)
    return here.pull_cache(prompt, call[1], call[2], call[3], call[4], src_range, dst_range, n,
                           kw.get("src_cache_offset"), kw.get("dst_cache_offset"))


def vendor_key(key: Any) -> Any:
    if isinstance(key, Key):
        return CacheKey(key.cluster_id, key.req_id, key.model_id, key.prefix_id)
    if isinstance(key, ById):
        return CacheKeyByIdAndIndex(key.cluster_id, key.cache_id, key.batch_index)
    return BlocksCacheKey(key.cluster_id, key.model_id)


def make_pull(world: World, call: Tuple[Any, ...]) -> Tuple[str, Any]:
    cache = world.objects.get(call[2])
    if cache is None:       # an id this engine never gave: a KvCache object the manager did not make
        from llm_datadist_ffi.vendor import KvCache, Placement
        cache = KvCache(call[2], CacheDesc(2, [1, 16], DataType.DT_UINT8, Placement.DEVICE), [[0, 0]], None)
    if call[0] == "blocks":
        return observed(lambda: world.kv.pull_blocks(vendor_key(call[1]), cache, list(call[3]), list(call[4]),
                                                     **call[5]))
    return observed(lambda: world.kv.pull_cache(vendor_key(call[1]), cache, call[3], call[4], **call[5]))


def run_decoder_here(peer: Any, data: Any, focus: str) -> None:
    role = LLMRole.DECODER
    if focus == "wrong role":
        role = data.draw(st.sampled_from([LLMRole.MIX, LLMRole.PROMPT]), label="here role")
    world = World(peer, role, prompt_here=False)
    try:
        sources = prompt_caches(world, data, focus, on_peer=True)
        dsts = decoder_caches(world, data, on_peer=False)
        if focus != "no link" and role is LLMRole.DECODER:
            world.link()
        call = pull_call(world, data, focus, sources, dsts)
        for attempt in ("first", "second"):
            outcome = model_pull(world, call)
            event(f"{attempt}: {outcome.describe()}")
            expect(outcome, make_pull(world, call), f"{attempt} {call[0]} pull {call}")
            world.apply(outcome)
            world.check_memory()
    finally:
        world.close()


@pytest.mark.rules("§3.1", "§3.3", "§3.4", "§4.1", "§4.2", "§5", "§6.1", "§6.2", "§6.3", "§7.1", "§7.2", "§7.3", "§7.5",
                   "§7.6", "§8.0", "§8.2", "§8.3", "§8.4", "§8.5", "§8.6", "§8.11", "§8.12", "§9.1", "§9.2", "§9.4",
                   "§9.5", "§10.5", "§11", "PR-2", "PR-3", "PR-4", "PR-5", "PR-6", "PR-13", "PR-14", "PR-15", "PR-20",
                   "PR-22", "PR-24", "PR-25", "PR-36", "PR-38", "V-5", "X-12", "X-18")
@pytest.mark.parametrize("focus", FOCUS)
@settings(max_examples=settings.default.max_examples)
@given(data=st.data())
def test_v1_pulls_between_two_processes_agree_with_the_oracle(peer: Any, focus: str, data: Any) -> None:
    run_decoder_here(peer, data, focus)


# ---- the prompt-here property -------------------------------------------------------------------

class Always(LayerSynchronizer):
    def synchronize_layer(self, layer_index: int, timeout_in_millis: Optional[int]) -> bool:
        return True


TRANSFER_FOCUS = ["clean", "addresses", "no link", "layer ranges", "batch", "remove key", "wrong role"]


def transfer_configs(world: World, data: Any, focus: str, src: int, dsts: List[int]) -> List[TransferConfigArg]:
    source = world.here.caches[src]
    layers = max(source.num_tensors // 2, 1)
    configs = []
    for _ in range(data.draw(st.integers(1, 2), label="configs")):
        if focus == "layer ranges":
            start = data.draw(st.integers(-1, layers))
            covered: Optional[range] = range(start, data.draw(st.integers(start, layers + 1)))
        else:
            start = data.draw(st.integers(0, layers - 1))
            covered = range(start, data.draw(st.integers(start + 1, layers)))
        if data.draw(st.booleans()) and covered == range(0, layers):
            covered = None
        count = len(covered) if covered is not None else layers
        addrs = []
        for _ in range(2 * count):
            dst = data.draw(st.sampled_from(dsts))
            dst_addrs = world.addrs[(D_ID, dst)]
            size = world.sizes[(D_ID, dst)]
            tensor = data.draw(st.integers(0, len(dst_addrs) - 1))
            if focus == "addresses":
                offset = data.draw(st.sampled_from([0, size - source.stride, size - source.stride + 1, size, -16,
                                                    1 << 40]))
            else:
                offset = data.draw(st.integers(0, max(size - source.stride, 0)))
            addrs.append(max(dst_addrs[tensor] + offset, 0))
        batch = data.draw(st.integers(0, source.batches - 1 + (1 if focus == "batch" else 0)))
        cluster = data.draw(st.sampled_from([D_ID, STRANGER])) if focus == "no link" else D_ID
        configs.append(TransferConfigArg(cluster, tuple(addrs), covered, batch))
    return configs


def run_prompt_here(peer: Any, data: Any, focus: str) -> None:
    world = World(peer, LLMRole.PROMPT, prompt_here=True)
    try:
        sources = prompt_caches(world, data, focus, on_peer=False)
        dsts = decoder_caches(world, data, on_peer=True)
        if focus != "no link":
            world.link()
        if focus == "wrong role":
            # semantics.md §11: a Prompt cannot pull (Python, before anything else)
            key = data.draw(st.sampled_from(KEY_POOL[:3]))
            cache = world.objects[sources[0]] if sources else None
            outcome = world.here.pull_cache(None, key, sources[0] if sources else 1)
            expect(outcome, observed(lambda: world.kv.pull_cache(vendor_key(key), cache)), "pull by a Prompt")
            world.check_memory()
            return
        if focus == "remove key":
            key = data.draw(st.sampled_from(KEY_POOL + [Key(P_ID, 10, 0, 30)]), label="removed key")
            outcome = world.here.remove_cache_key(key)
            expect(outcome, observed(lambda: world.kv.remove_cache_key(vendor_key(key))), "remove_cache_key")
            # the key state: the Decoder pulls through every key of the pool
            dst = dsts[0]
            for probe in KEY_POOL[:-1]:
                wanted = world.there.pull_cache(world.here, probe, dst, 0, 1)
                spec = ["key", probe.cluster_id, probe.req_id, probe.model_id, probe.prefix_id]
                got = peer_observed(peer, f"ps.pull_cache({spec}, 'c{5000}', 0, 1, {{}})")
                expect(wanted, got, f"the Decoder's pull through {probe} after removing {key}")
                world.apply(wanted)
            world.check_memory()
            return
        live = [c for c in sources if world.here.live(c) is not None]
        if not live:
            event("no live source cache")
            return
        src = data.draw(st.sampled_from(live), label="source")
        configs = transfer_configs(world, data, focus, src, dsts)
        peer_addresses = {D_ID: {cid: world.addrs[(D_ID, cid)] for cid in dsts}}
        outcome = world.here.transfer_cache_async({D_ID: world.there}, src, configs, peer_addresses)
        # a range that is not 0 <= start < stop is refused by TransferConfig itself (docs/reference/python-api.md §9.1, LX)
        got = observed(lambda: world.kv.transfer_cache_async(world.objects[src], Always(), [
            TransferConfig(c.dst_cluster, list(c.dst_addrs), c.src_range, c.src_batch) for c in configs]))
        if not outcome.ok:
            expect(outcome, got, "transfer_cache_async")
        else:
            assert got[0] == "ok", f"transfer_cache_async raised {got}"
            results, writes = outcome.value
            task = got[1]
            assert task.get_results() == results, f"results {task.get_results()} != {results}"
            wanted_sync = next((r for r in results if r not in (None, S.LLM_SUCCESS)), S.LLM_SUCCESS)
            assert task.synchronize() == wanted_sync
            event(f"results {[None if r is None else r.name for r in results]}")
            for cluster, copies in writes.items():
                for cache_id, copy in copies:
                    apply_copies([copy], world.memory[(P_ID, src)], world.memory[(cluster, cache_id)])
        world.check_memory()
    finally:
        world.close()


@pytest.mark.rules("§4.3", "§8.2", "§8.3", "§8.4", "§8.5", "§8.6", "§8.7", "§8.12", "§9.5", "§9.6", "§10.5", "§11",
                   "python-api §14", "PR-36", "PR-40", "PR-41", "V-9", "X-12")
@pytest.mark.parametrize("focus", TRANSFER_FOCUS)
@settings(max_examples=settings.default.max_examples)
@given(data=st.data())
def test_v1_prompt_calls_with_a_decoder_peer_agree_with_the_oracle(peer: Any, focus: str, data: Any) -> None:
    run_prompt_here(peer, data, focus)
