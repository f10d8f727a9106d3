"""Two v2 engines, one in this process and one in a peer process, driven side by side
with the oracle of tests/oracle/vendor_v2.py (the suites test_property_vendor_v2.py and
test_stateful_vendor_v2.py).

The vendor's API allows one initialised ``LLMDataDist`` per process (V-1), so the
peer (cluster 1, PROMPT) runs in ``vendor_peer.py``; this module is imported there
too, where the functions under "peer side" keep the peer's caches and memory.
The test process holds ``Pair``: the local engine (cluster 2, DECODER), the ``Peer``
handle and the oracle's ``World``. Every operation is made on the engines and on the
world, and the outcomes (exception type and status code) must agree; ``check_memory``
then compares every byte the two processes hold for their caches (guard bytes around
every registered tensor included, and buffers of caches already unregistered) with
the world's memory.

Memory is reproducible from seeds (``vendor_support.fill``): a registered tensor is a
numpy buffer of ``GUARD + TS + GUARD`` bytes filled from its seed, registered at
offset ``GUARD``; an allocated tensor is filled from its seed right after allocation.
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass, field
from typing import Any, Dict, FrozenSet, Iterator, List, Optional, Sequence, Tuple

import numpy as np

GUARD = 16
P_ID, D_ID = 1, 2

# A key as plain data, usable on both sides of the pipe:
#   ("key", cluster, req_id, model_id, prefix_id) | ("blocks", cluster, model_id) | ("id", cluster, cache_id, batch)
KeyData = Tuple[Any, ...]


def vendor_key(data: KeyData) -> Any:
    """The vendor key object for ``data``."""
    from llm_datadist_ffi.vendor import BlocksCacheKey, CacheKey, CacheKeyByIdAndIndex

    if data[0] == "key":
        return CacheKey(data[1], data[2], model_id=data[3], prefix_id=data[4])
    if data[0] == "blocks":
        return BlocksCacheKey(data[1], data[2])
    return CacheKeyByIdAndIndex(data[1], data[2], data[3])


def fill_bytes(seed: int, size: int) -> bytes:
    return np.random.default_rng(seed).integers(0, 256, size=size, dtype=np.uint8).tobytes()


@dataclass
class Held:
    """What one side holds for one cache: guarded numpy buffers (registered) or pool
    addresses (allocated)."""

    arrays: List[np.ndarray] = field(default_factory=list)
    addrs: List[int] = field(default_factory=list)
    tensor_size: int = 0
    cache: Any = None


class Memory:
    """One process's caches and the bytes of their memory (used on both sides)."""

    def __init__(self) -> None:
        self.held: Dict[int, Held] = {}

    def make(self, cm: Any, blocks: bool, owned: bool, num: int, dim0: int, row: int, placement: str,
             keys: Sequence[KeyData], blocks_key: Optional[KeyData], ra: Optional[bool], seed: int) -> int:
        from llm_datadist_ffi.vendor import CacheDesc, DataType, Placement

        size = dim0 * row
        desc = CacheDesc(num, [dim0, row], DataType.DT_UINT8, Placement.DEVICE if placement == "DEVICE" else
                         Placement.HOST)
        vkeys = [vendor_key(k) for k in keys]
        bkey = vendor_key(blocks_key) if blocks_key is not None else None
        if owned:
            cache = cm.allocate_blocks_cache(desc, bkey) if blocks else cm.allocate_cache(desc, vkeys)
            held = Held(addrs=list(cache.tensor_addrs), tensor_size=size, cache=cache)
            for t, addr in enumerate(held.addrs):
                ctypes.memmove(addr, fill_bytes(seed + t, size), size)
        else:
            arrays = [np.frombuffer(bytearray(fill_bytes(seed + t, GUARD + size + GUARD)), dtype=np.uint8).copy()
                      for t in range(num)]
            addrs = [a.ctypes.data + GUARD for a in arrays]
            if blocks:
                cache = cm.register_blocks_cache(desc, addrs, bkey, ra)
            else:
                cache = cm.register_cache(desc, addrs, vkeys, ra)
            held = Held(arrays=arrays, addrs=addrs, tensor_size=size, cache=cache)
        self.held[cache.cache_id] = held
        return int(cache.cache_id)

    def bytes_of(self, cache_id: int) -> List[bytes]:
        """Every tensor's bytes: whole guarded buffers of a registered cache, ``TS`` bytes at
        each address of an allocated one."""
        held = self.held[cache_id]
        if held.arrays:
            return [a.tobytes() for a in held.arrays]
        return [ctypes.string_at(addr, held.tensor_size) for addr in held.addrs]


# ---------------------------------------------------------------------------
# peer side (runs inside vendor_peer.py)
# ---------------------------------------------------------------------------

PEER: Dict[str, Any] = {"engine": None, "memory": Memory()}


def peer_start(port: int, direct: bool, pool: bool, host_pool: bool) -> None:
    from llm_datadist_ffi.vendor import LLMDataDist, LLMRole
    import vendor_support

    if PEER["engine"] is not None:
        PEER["engine"].finalize()
        PEER["engine"] = None
    engine = LLMDataDist(LLMRole.PROMPT, P_ID)
    engine.init(vendor_support.v2_options(port, direct=direct, pool=pool, host_pool=host_pool))
    PEER["engine"] = engine
    PEER["memory"] = Memory()


def peer_stop() -> None:
    if PEER["engine"] is not None:
        PEER["engine"].finalize()
        PEER["engine"] = None


def peer_make(*args: Any) -> int:
    return PEER["memory"].make(PEER["engine"].cache_manager, *args)


def peer_dump(ids: Sequence[int]) -> List[List[str]]:
    return [[b.hex() for b in PEER["memory"].bytes_of(i)] for i in ids]


def peer_deallocate(cache_id: int) -> None:
    held = PEER["memory"].held[cache_id]
    cm = PEER["engine"].cache_manager
    (cm.deallocate_blocks_cache if held.cache.is_blocks_cache else cm.deallocate_cache)(held.cache)


def peer_unregister(cache_id: int) -> None:
    PEER["engine"].cache_manager.unregister_cache(cache_id)


def peer_remove_key(key: KeyData) -> None:
    PEER["engine"].cache_manager.remove_cache_key(vendor_key(key))


def peer_link(port: int) -> List[int]:
    import vendor_support

    status, rets = PEER["engine"].link_clusters([vendor_support.cluster_info(D_ID, port)], 5000)
    return [int(status)] + [int(r) for r in rets]


# ---------------------------------------------------------------------------
# test side
# ---------------------------------------------------------------------------


Seen = Tuple[str, Optional[int], FrozenSet[str]]


def observe(call: Any) -> Seen:
    """``("ok", None, lints)``, ``("LLMException", status, lints)`` or
    ``("TypeError"/"ValueError", None, lints)``; ``lints`` are the rule ids of the lint
    warnings the call emitted."""
    import warnings

    from llm_datadist_ffi import LintWarning, LLMException
    from vendor_support import lint_ids

    with warnings.catch_warnings(record=True) as records:
        warnings.simplefilter("always", LintWarning)
        try:
            call()
            kind: Tuple[str, Optional[int]] = ("ok", None)
        except LLMException as exc:
            kind = ("LLMException", int(exc.status_code))
        except (TypeError, ValueError) as exc:
            kind = (type(exc).__name__, None)
    return (kind[0], kind[1], lint_ids(records))


def expected(outcome: Any) -> Seen:
    """What ``observe`` must see for an oracle ``Outcome``."""
    lints = frozenset(outcome.lints)
    if outcome.python_error is not None:
        return (outcome.python_error.__name__, None, lints)
    if outcome.ok:
        return ("ok", None, lints)
    return ("LLMException", int(outcome.status), lints)


def peer_observe(peer: Any, code: str) -> Tuple[Seen, Any]:
    from vendor_support import PeerError

    try:
        value = peer.run(value=code)
    except PeerError as exc:
        if exc.status is not None:
            return ("LLMException", exc.status, peer.last_lints), None
        if exc.type in ("TypeError", "ValueError"):
            return (exc.type, None, peer.last_lints), None
        raise
    return ("ok", None, peer.last_lints), value


class Pair:
    """The local engine, the peer and the world, made to agree call by call.

    ``world`` is a ``tests/oracle/vendor_v2.World``; ``oracle`` its module (passed in, so
    that this module does not import the oracle into the peer process).
    """

    def __init__(self, peer: Any, oracle: Any, local_port: int, peer_port: int) -> None:
        self.peer, self.oracle = peer, oracle
        self.local_port, self.peer_port = local_port, peer_port
        self.engine: Any = None
        self.memory = Memory()
        self.world = oracle.World()
        self.guards: Dict[Tuple[str, int], List[Tuple[bytes, bytes]]] = {}
        self.kinds: Dict[Tuple[str, int], bool] = {}
        self.seed = 1000
        peer.run("import vendor_v2_peer_support as v2s")

    # -- life cycle ---------------------------------------------------------

    def start(self, direct: bool = True, peer_direct: Optional[bool] = None, pools: Tuple[bool, bool] = (True, True),
              peer_pools: Tuple[bool, bool] = (True, True)) -> None:
        """Both engines afresh (finalize + init: no caches, no links, ids from 1)."""
        self.stop()
        from llm_datadist_ffi.vendor import LLMDataDist, LLMRole
        import vendor_support

        peer_direct = direct if peer_direct is None else peer_direct
        self.peer.run(f"v2s.peer_start({self.peer_port}, {peer_direct}, {peer_pools[0]}, {peer_pools[1]})")
        self.engine = LLMDataDist(LLMRole.DECODER, D_ID)
        self.engine.init(vendor_support.v2_options(self.local_port, direct=direct, pool=pools[0],
                                                   host_pool=pools[1]))
        self.memory = Memory()
        self.world = self.oracle.World()
        self.world.init_peer(P_ID, peer_direct, *peer_pools)
        self.world.init_local(D_ID, direct, *pools)
        self.guards = {}
        self.kinds = {}

    def restart_peer(self) -> None:
        """finalize + init of the peer alone: its caches are gone, the local side keeps a stale link."""
        peer = self.world.engine("peer")
        self.peer.run(f"v2s.peer_start({self.peer_port}, {peer.direct}, {peer.device_pool}, {peer.host_pool})")
        self.world.init_peer(P_ID, peer.direct, peer.device_pool, peer.host_pool)
        self.guards = {k: v for k, v in self.guards.items() if k[0] != "peer"}

    def stop(self) -> None:
        if self.engine is not None:
            self.engine.finalize()
            self.engine = None
        self.peer.run("v2s.peer_stop()")

    @property
    def cm(self) -> Any:
        return self.engine.cache_manager

    # -- caches --------------------------------------------------------------

    def make(self, side: str, blocks: bool, owned: bool, num: int, dim0: int, row: int,
             placement: str = "DEVICE", keys: Sequence[KeyData] = (), blocks_key: Optional[KeyData] = None,
             ra: Optional[bool] = None) -> Optional[int]:
        """Register or allocate a cache on ``side``; the outcome must agree with the world. The id or None."""
        oracle = self.oracle
        self.seed += 100
        seed = self.seed
        kind = oracle.Kind.BLOCKS if blocks else oracle.Kind.CACHE
        mkeys = [oracle.Key(k[1], k[2], k[3], k[4]) for k in keys]
        mbkey = oracle.BlocksKey(blocks_key[1], blocks_key[2]) if blocks_key is not None else None
        size = dim0 * row
        if owned:
            model = self.world.allocate(side, kind, num, dim0, row, placement, mkeys, mbkey)
        else:
            memory = [bytearray(fill_bytes(seed + t, GUARD + size + GUARD)[GUARD:GUARD + size]) for t in range(num)]
            model = self.world.register(side, kind, num, dim0, row, placement, memory, mkeys, mbkey, ra)
        args = (blocks, owned, num, dim0, row, placement, list(keys), blocks_key, ra, seed)
        if side == "local":
            got: Any = None

            def call() -> None:
                nonlocal got
                got = self.memory.make(self.cm, *args)
            seen = observe(call)
        else:       # the peer process reports the lints of the command (vendor_peer.py)
            seen, got = peer_observe(self.peer, f"v2s.peer_make(*{args!r})")
        assert seen == expected(model), f"make {side} {args}: {seen} != {expected(model)} ({model.rule})"
        if not model.ok:
            return None
        assert got == model.value, f"cache id {got} != {model.value}"
        cache = self.world.engine(side).caches[got]
        self.kinds[(side, got)] = blocks
        if owned:
            for t in range(num):
                cache.memory[t][:] = fill_bytes(seed + t, size)
        else:
            whole = [fill_bytes(seed + t, GUARD + size + GUARD) for t in range(num)]
            self.guards[(side, got)] = [(w[:GUARD], w[GUARD + size:]) for w in whole]
        return int(got)

    def deallocate(self, cache_id: int) -> None:
        model = self.world.deallocate("peer", cache_id, self.kinds[("peer", cache_id)])
        seen, _ = peer_observe(self.peer, f"v2s.peer_deallocate({cache_id})")
        assert seen == expected(model), f"deallocate {cache_id}: {seen} != {expected(model)} ({model.rule})"

    def unregister(self, cache_id: int) -> None:
        model = self.world.unregister("peer", cache_id)
        seen, _ = peer_observe(self.peer, f"v2s.peer_unregister({cache_id})")
        assert seen == expected(model), f"unregister {cache_id}: {seen} != {expected(model)} ({model.rule})"

    def remove_key(self, key: KeyData) -> None:
        model = self.world.remove_cache_key("peer", self.oracle.Key(key[1], key[2], key[3], key[4]))
        seen, _ = peer_observe(self.peer, f"v2s.peer_remove_key({key!r})")
        assert seen == expected(model), f"remove_cache_key {key}: {seen} != {expected(model)} ({model.rule})"

    # -- links ------------------------------------------------------------------

    def link(self, from_peer: bool = False) -> bool:
        import vendor_support

        model = self.world.link_clusters(from_peer)
        if from_peer:
            got = self.peer.run(value=f"v2s.peer_link({self.local_port})")
        else:
            status, rets = self.engine.link_clusters([vendor_support.cluster_info(P_ID, self.peer_port)], 5000)
            got = [int(status)] + [int(r) for r in rets]
        assert got == [int(model.status), int(model.status)], f"link: {got} != {model.status.name} ({model.rule})"
        return model.ok

    def unlink(self, force: bool) -> None:
        import vendor_support

        self.world.unlink(force)
        status, rets = self.engine.unlink_clusters([vendor_support.cluster_info(P_ID, self.peer_port)], 5000,
                                                   force=force)
        assert (int(status), [int(r) for r in rets]) == (0, [0]), f"unlink: {status} {rets}"

    # -- transfers ------------------------------------------------------------------

    def pull(self, form: str, key: KeyData, dst_id: int, **kw: Any) -> Any:
        """``pull_cache``/``pull_blocks`` on the engine and the world; the world's outcome."""
        model = self.world.pull(form, self.model_key(key), dst_id, **kw)
        dst = self.memory.held[dst_id].cache
        vkey = vendor_key(key)
        args = {"tensor_num_per_layer": kw.get("n", 2)}
        for mine, theirs in (("src_range", "src_layer_range"), ("dst_range", "dst_layer_range")):
            if kw.get(mine) is not None:
                args[theirs] = kw[mine]
        if form == "cache":
            call = lambda: self.cm.pull_cache(vkey, dst, kw.get("batch_index", 0), kw.get("size", -1), **args)  # noqa
        else:
            call = lambda: self.cm.pull_blocks(vkey, dst, list(kw.get("src_blocks", ())),  # noqa: E731
                                               list(kw.get("dst_blocks", ())), **args)
        seen = observe(call)
        assert seen == expected(model), \
            f"pull_{form} {key} -> {dst_id} {kw}: {seen} != {expected(model)} ({model.rule})"
        return model

    def push(self, form: str, key: KeyData, src_id: int, **kw: Any) -> Any:
        model = self.world.push(form, self.model_key(key), src_id, **kw)
        src = self.memory.held[src_id].cache
        vkey = vendor_key(key)
        if form == "cache":
            call = lambda: self.cm.push_cache(vkey, src, kw.get("src_batch_index", 0),  # noqa: E731
                                              kw.get("src_range"), kw.get("dst_range"),
                                              kw.get("size", -1), kw.get("n", 2))
        else:
            call = lambda: self.cm.push_blocks(vkey, src, list(kw.get("src_blocks", ())),  # noqa: E731
                                               list(kw.get("dst_blocks", ())), kw.get("src_range"),
                                               kw.get("dst_range"), kw.get("n", 2))
        seen = observe(call)
        assert seen == expected(model), \
            f"push_{form} {key} <- {src_id} {kw}: {seen} != {expected(model)} ({model.rule})"
        return model

    def model_key(self, key: KeyData) -> Any:
        if key[0] == "key":
            return self.oracle.Key(key[1], key[2], key[3], key[4])
        if key[0] == "blocks":
            return self.oracle.BlocksKey(key[1], key[2])
        return self.oracle.ById(key[1], key[2], key[3])

    # -- memory ---------------------------------------------------------------------

    def expected_bytes(self, side: str, cache: Any) -> List[bytes]:
        guards = self.guards.get((side, cache.cache_id))
        if guards is None:
            return [bytes(m) for m in cache.memory]
        return [g[0] + bytes(m) + g[1] for g, m in zip(guards, cache.memory)]

    def check_memory(self) -> None:
        """Every byte both processes hold for their caches equals the world's memory."""
        for side in ("local", "peer"):
            engine = self.world.engine(side)
            watched = [c for c in engine.caches.values()] + [c for c in engine.released if not c.owned]
            watched = [c for c in watched if not c.owned or not c.freed]
            if side == "local":
                got = [self.memory.bytes_of(c.cache_id) for c in watched]
            else:
                ids = [c.cache_id for c in watched]
                got = [[bytes.fromhex(h) for h in t] for t in self.peer.run(value=f"v2s.peer_dump({ids})")]
            for cache, tensors in zip(watched, got):
                want = self.expected_bytes(side, cache)
                for t, (g, w) in enumerate(zip(tensors, want)):
                    if g != w:
                        diff = [i for i in range(len(w)) if g[i] != w[i]]
                        raise AssertionError(f"{side} cache {cache.cache_id} tensor {t}: {len(diff)} bytes differ, "
                                             f"first at {diff[0]} (guard {GUARD}, size {cache.tensor_size})")

    def peer_addrs(self, cache_id: int) -> List[int]:
        """The tensor addresses of a peer cache (for server-assisted ``TransferConfig``)."""
        return [int(a) for a in self.peer.run(value=f"v2s.PEER['memory'].held[{cache_id}].addrs")]

    def transfer_async(self, src_id: int, configs: Sequence[Any], src_blocks: Sequence[int] = (),
                       dst_blocks: Sequence[int] = (), not_ready: Optional[int] = None,
                       addrs: Optional[Sequence[Sequence[int]]] = None) -> Any:
        """``transfer_cache_async`` on the engine and the world. ``configs`` are the oracle's
        ``KeyConfig``/``AddrConfig``; ``addrs[i]`` are the raw addresses of ``AddrConfig`` i."""
        from llm_datadist_ffi.vendor import LayerSynchronizer, TransferConfig, TransferWithCacheKeyConfig

        model = self.oracle.transfer_cache_async(self.world, src_id, configs, src_blocks, dst_blocks, not_ready)

        class Sync(LayerSynchronizer):
            def synchronize_layer(self, layer_index: int, timeout_in_millis: Optional[int]) -> bool:
                return layer_index != not_ready

        vendor = []
        for i, config in enumerate(configs):
            if isinstance(config, self.oracle.KeyConfig):
                key = config.key
                data = ("blocks", key.cluster, key.model_id) if isinstance(key, self.oracle.BlocksKey) else \
                    ("id", key.cluster, key.cache_id, key.batch_index)
                vendor.append(TransferWithCacheKeyConfig(vendor_key(data), config.src_range, config.dst_range,
                                                         config.src_batch_index))
            else:
                assert addrs is not None
                vendor.append(TransferConfig(config.cluster, list(addrs[i]), config.src_range, config.src_batch_index))
        src = self.memory.held[src_id].cache
        task: Any = None

        def call() -> None:
            nonlocal task
            task = self.cm.transfer_cache_async(src, Sync(), vendor, list(src_blocks) or None,
                                                list(dst_blocks) or None, None)
        seen = observe(call)
        assert seen == expected(model.call), f"transfer_cache_async {configs}: {seen} != {expected(model.call)} " \
                                             f"({model.call.rule})"
        if model.call.ok:
            status = task.synchronize()
            results = task.get_results()
            assert (int(status), [None if r is None else int(r) for r in results]) == \
                (int(model.synchronize), [None if r is None else int(r) for r in model.results]), \
                f"task of {configs}: {status}, {results} != {model.synchronize}, {model.results}"
        return model


def module_pair(oracle: Any) -> Iterator[Pair]:
    """A ``Pair`` over a fresh peer process, for a module-scoped fixture; stopped at the end."""
    import vendor_support
    with vendor_support.Peer() as peer:
        made = Pair(peer, oracle, vendor_support.free_port(), vendor_support.free_port())
        try:
            yield made
        finally:
            made.stop()

