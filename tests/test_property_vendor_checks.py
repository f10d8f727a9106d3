"""Property tests: the vendor-compatible managers' Python-side checks agree with the oracle.

Each example starts one engine in this process in a drawn mode (CacheManager mode in
direct or server-assisted mode, with or without memory pools; KvCacheManager mode as a
DECODER, PROMPT or MIX), gives it a few caches (registered numpy buffers between guard
bytes, pool allocations filled with random bytes through their addresses), and makes
one call of ``CacheManager`` or ``KvCacheManager`` whose arguments are drawn with usually
one flaw, sometimes several (then the check order decides) and sometimes none: wrong
types (``None``, ``str``, ``float``, a tuple where the vendor wants a list, numpy arrays
and numpy integers as block lists), integers at and past the uint32/int64/uint64
limits, negative values, empty, reversed, step-2 and negative-start layer ranges,
unknown keywords (v2 ``src_cache_offset`` included), blocks and non-blocks caches, HOST
and DEVICE placements, keys with both ids valid or neither, ``tensor_num_per_layer``
0, negative or huge.

The oracle (``tests/oracle/vendor_checks.py``, written from python-api.md and
semantics.md alone) says which exception the package must raise, in the vendor's
order, with which ``status_code`` and naming which parameter, or that the call passes
the Python checks; then the single-engine core model answers (a pull without a link
ends in ``LLM_NOT_YET_LINK`` once its local checks pass, semantics §8.0). After every
call every byte of every cache, guard bytes included, equals the model's bytes:
nothing is written by a call that fails, and local copies write exactly what the
model wrote.
"""
from __future__ import annotations

import ctypes
import socket
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np
import pytest
from hypothesis import event, example, given, settings
from hypothesis import strategies as st

from llm_datadist_ffi import LLMException, LLMStatusCode as S
from llm_datadist_ffi.vendor import (
    BlocksCacheKey, Cache, CacheDesc, CacheKey, CacheKeyByIdAndIndex, DataType, KvCache, LLMDataDist, LLMRole,
    Placement,
)

sys.path.insert(0, str(Path(__file__).resolve().parent))
from oracle.vendor_checks import Checks, Key, Mode, Ref, Verdict  # noqa: E402
from oracle.vendor_local import DEVICE, HOST, Engine  # noqa: E402

pytestmark = pytest.mark.mock_only(reason="the vendor-compatible API runs on the mock's extension functions")

U32, I64, U64 = 2**32 - 1, 2**63 - 1, 2**64 - 1
#: keys bound at set-up: a request key of "c", then (pool modes) a request key, a
#: placeholder and a prefix key of "ac"; the blocks key of "b"
BOUND = (Key("CacheKey", 1, req_id=10), Key("CacheKey", 1, req_id=11), Key("CacheKey", 1, model_id=2),
         Key("CacheKey", 1, prefix_id=12))
BOUND_BLOCKS = Key("BlocksCacheKey", 1, model_id=0)
GUARD = 32
CLUSTER = 7
POOL = '{"memory_size": 1048576, "page_shift": 12}'
HOST_POOL = '{"memory_size": 524288, "page_shift": 10}'
V1_POOL = 1048576


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# ---- the engine of one example ----------------------------------------------------------------

MODES = {
    "v2-direct-pools": Mode(2, CLUSTER, "DECODER", direct=True, device_pool=True, host_pool=True),
    "v2-server-pool": Mode(2, CLUSTER, "PROMPT", direct=False, device_pool=True),
    "v2-direct-nopool": Mode(2, CLUSTER, "MIX", direct=True),
    "v1-decoder": Mode(1, CLUSTER, "DECODER", device_pool=True),
    "v1-prompt": Mode(1, CLUSTER, "PROMPT", device_pool=True),
    "v1-mix": Mode(1, CLUSTER, "MIX", device_pool=True),
}


def options(mode: Mode) -> Dict[str, str]:
    if mode.generation == 2:
        opts = {"llm.EnableCacheManager": "1", "llm.EnableRemoteCacheAccessible": "1" if mode.direct else "0",
                "ge.exec.deviceId": "0"}
        if mode.device_pool:
            opts["llm.MemPoolConfig"] = POOL
        if mode.host_pool:
            opts["llm.HostMemPoolConfig"] = HOST_POOL
        return opts
    opts = {"ge.exec.deviceId": "0", "ge.flowGraphMemMaxSize": str(V1_POOL)}
    if mode.role == "PROMPT":
        opts["llm.listenIpInfo"] = f"127.0.0.1:{_free_port()}"
    return opts


class Env:
    """The engine of one example, its caches, their memory and the oracle's view."""

    def __init__(self) -> None:
        self.dd: Optional[LLMDataDist] = None

    def stop(self) -> None:
        if self.dd is not None:
            self.dd.finalize()
            self.dd = None

    def start(self, mode_name: str, rng: np.random.Generator) -> None:
        self.stop()
        mode = MODES[mode_name]
        self.mode = Mode(**mode.__dict__)
        self.rng = rng
        self.dd = LLMDataDist(LLMRole[mode.role], CLUSTER)
        self.dd.init(options(mode))
        self.manager: Any = self.dd.cache_manager if mode.generation == 2 else self.dd.kv_cache_manager
        self.checks = Checks(self.mode, Engine(mode.generation, (1048576, 12) if mode.device_pool else None,
                                               (524288, 10) if mode.host_pool else None,
                                               V1_POOL if mode.generation == 1 else None))
        self.objects: Dict[str, Any] = {}          # name -> Cache/KvCache
        self.buffers: Dict[str, List[np.ndarray]] = {}   # name -> guarded numpy buffers
        self.expected_buffers: Dict[str, List[bytearray]] = {}
        self.cpu_memory: Dict[str, List[bytearray]] = {}
        if mode.generation == 2:
            self.register("c", 4, (4, 32), blocks=False, keys=(BOUND[0],))
            self.register("b", 4, (8, 16), blocks=True, keys=(BOUND_BLOCKS,))
            self.register("c2", 2, (2, 64), blocks=False)
            self.register("hb", 4, (8, 16), blocks=True, placement=HOST)
            if mode.device_pool:
                self.allocate("ac", 4, (4, 32), blocks=False, keys=BOUND[1:])
                self.allocate("ab", 4, (8, 16), blocks=True, keys=(Key("BlocksCacheKey", 1, model_id=3),))
            if mode.host_pool:
                self.allocate("hab", 4, (8, 16), blocks=True, placement=HOST)
        else:
            prompt = mode.role == "PROMPT"
            self.allocate("c", 4, (4, 32), blocks=False, keys=BOUND[1:] if prompt else ())
            self.allocate("b", 4, (8, 16), blocks=True, keys=(BOUND_BLOCKS,) if mode.role != "DECODER" else ())
            self.allocate("c2", 2, (2, 64), blocks=False)
            self.cpu_cache("hb", 4, (8, 16))

    # -- caches --

    def guarded(self, name: str, num: int, size: int) -> List[int]:
        arrays = [self.rng.integers(0, 256, size + 2 * GUARD, dtype=np.uint8) for _ in range(num)]
        self.buffers[name] = arrays
        self.expected_buffers[name] = [bytearray(a.tobytes()) for a in arrays]
        return [a.ctypes.data + GUARD for a in arrays]

    def ref(self, name: str, cls: str, cache_id: int, num: int, shape: Tuple[int, ...], placement: int,
            blocks: bool, cpu: bool = False) -> Ref:
        ref = Ref(name, cls, cache_id, num, shape, 4, placement, blocks, cpu=cpu)
        self.checks.refs[name] = ref
        return ref

    def register(self, name: str, num: int, shape: Tuple[int, ...], blocks: bool, placement: int = DEVICE,
                 keys: Sequence[Key] = ()) -> None:
        size = shape[0] * shape[1]
        addrs = self.guarded(name, num, size)
        desc = CacheDesc(num, list(shape), DataType.DT_UINT8, Placement(placement))
        if blocks:
            cache = self.manager.register_blocks_cache(desc, addrs, self.build(keys[0]) if keys else None)
        else:
            cache = self.manager.register_cache(desc, addrs, self.build(list(keys)))
        self.objects[name] = cache
        contents = [bytes(b[GUARD:GUARD + size]) for b in self.expected_buffers[name]]
        desc_ref = replace(self.ref(name, "Cache", cache.cache_id, num, shape, placement, blocks), cls="CacheDesc")
        if blocks:
            verdict = self.checks.run("register_blocks_cache", desc_ref, addrs, keys[0] if keys else None,
                                      contents=contents)
        else:
            verdict = self.checks.run("register_cache", desc_ref, addrs, list(keys), contents=contents)
        assert (verdict.kind, verdict.status, verdict.value) == ("core", S.LLM_SUCCESS, cache.cache_id)
        # the engine model's tensors are views of the expected buffers' payloads
        self.link_payload(name, cache.cache_id, size)

    def link_payload(self, name: str, cache_id: int, size: int) -> None:
        """Make the model's tensors and the expected numpy buffers one memory."""
        model = self.checks.engine.caches[cache_id]
        model.tensors = [memoryview(b)[GUARD:GUARD + size] for b in self.expected_buffers[name]]  # type: ignore

    def allocate(self, name: str, num: int, shape: Tuple[int, ...], blocks: bool, placement: int = DEVICE,
                 keys: Sequence[Key] = ()) -> None:
        desc = CacheDesc(num, list(shape), DataType.DT_UINT8, Placement(placement))
        if blocks:
            cache = self.manager.allocate_blocks_cache(desc, self.build(keys[0]) if keys else None)
        else:
            cache = self.manager.allocate_cache(desc, self.build(list(keys)))
        self.objects[name] = cache
        cls = "Cache" if self.mode.generation == 2 else "KvCache"
        desc_ref = replace(self.ref(name, cls, cache.cache_id, num, shape, placement, blocks), cls="CacheDesc")
        if blocks:
            verdict = self.checks.run("allocate_blocks_cache", desc_ref, keys[0] if keys else None)
        else:
            verdict = self.checks.run("allocate_cache", desc_ref, list(keys))
        assert (verdict.kind, verdict.status, verdict.value) == ("core", S.LLM_SUCCESS, cache.cache_id)
        self.fill_allocated(cache)

    def fill_allocated(self, cache: Any) -> None:
        """Random bytes into a new pool cache, through its addresses, and into the model."""
        model = self.checks.engine.caches[cache.cache_id]
        for t, addr in enumerate(self.addrs_of(cache)):
            data = self.rng.integers(0, 256, model.tensor_size, dtype=np.uint8).tobytes()
            ctypes.memmove(addr, data, len(data))
            model.tensors[t][:] = data

    def cpu_cache(self, name: str, num: int, shape: Tuple[int, ...]) -> None:
        size = shape[0] * shape[1]
        addrs = self.guarded(name, num, size)
        desc = CacheDesc(num, list(shape), DataType.DT_UINT8, Placement.HOST)
        cls = KvCache if self.mode.generation == 1 else Cache
        self.objects[name] = cls.create_cpu_cache(desc, addrs)
        self.ref(name, cls.__name__, -1, num, shape, HOST, True, cpu=True)
        self.cpu_memory[name] = [memoryview(b)[GUARD:GUARD + size] for b in self.expected_buffers[name]]  # type: ignore

    def addrs_of(self, cache: Any) -> List[int]:
        if isinstance(cache, KvCache):
            return list(cache.per_device_tensor_addrs[0]) if cache.per_device_tensor_addrs else []
        return list(cache.tensor_addrs)

    def memory(self) -> Dict[str, List[Any]]:
        """name -> the model's tensors, for swaps (engine caches and cpu caches)."""
        out: Dict[str, List[Any]] = dict(self.cpu_memory)
        for name, ref in self.checks.refs.items():
            model = self.checks.engine.caches.get(ref.cache_id)
            if model is not None and not ref.cpu:
                out[name] = model.tensors
        return out

    def check_memory(self) -> None:
        """Every guarded buffer equals its expected bytes; every live pool tensor its model."""
        for name, arrays in self.buffers.items():
            for t, (a, e) in enumerate(zip(arrays, self.expected_buffers[name])):
                assert a.tobytes() == bytes(e), f"buffer {name}[{t}] differs from the model"
        for name, ref in self.checks.refs.items():
            model = self.checks.engine.caches.get(ref.cache_id)
            if model is None or not model.owned:
                continue
            for t, addr in enumerate(self.addrs_of(self.objects[name])):
                assert ctypes.string_at(addr, model.tensor_size) == bytes(model.tensors[t]), \
                    f"pool tensor {name}[{t}] differs from the model"

    # -- turning descriptions into objects --

    def build(self, x: Any) -> Any:
        if isinstance(x, Key):
            if x.kind == "CacheKey":
                return CacheKey(x.cluster_id, x.req_id, x.model_id, x.prefix_id)
            if x.kind == "CacheKeyByIdAndIndex":
                return CacheKeyByIdAndIndex(x.cluster_id, x.cache_id, x.batch_index)
            return BlocksCacheKey(x.cluster_id, x.model_id)
        if isinstance(x, Ref) and x.cls == "CacheDesc":
            return CacheDesc(x.num_tensors, list(x.shape), DataType.DT_UINT8, Placement(x.placement),
                             batch_dim_index=x.batch_dim)
        if isinstance(x, Ref):
            return self.objects[x.name]
        if isinstance(x, list):
            return [self.build(v) for v in x]
        if isinstance(x, tuple):
            return tuple(self.build(v) for v in x)
        return x


@pytest.fixture(scope="module")
def env() -> Iterator[Env]:
    made = Env()
    yield made
    made.stop()


# ---- strategies -------------------------------------------------------------------------------

NOT_INTS = st.sampled_from([None, "1", 1.0, np.int64(1), (1,)])
NOT_INTS_NONE_OK = st.sampled_from(["1", 1.0, np.uint32(1), [1]])


def u32(good: st.SearchStrategy[int]) -> st.SearchStrategy[Any]:
    return st.one_of(good, st.sampled_from([-1, U32 + 1, 2**63, -2**40]), NOT_INTS)


def i64(good: st.SearchStrategy[int]) -> st.SearchStrategy[Any]:
    return st.one_of(good, st.sampled_from([I64 + 1, -2**63 - 1, U64 + 1]), NOT_INTS)


def layer_range(n_layers: int) -> st.SearchStrategy[Any]:
    good = st.builds(lambda a, k: range(a, a + k), st.integers(0, max(n_layers - 1, 0)), st.integers(1, 2))
    bad = st.sampled_from([range(2, 2), range(3, 1), range(0, 4, 2), range(-1, 1), range(2**32, 2**32 + 1),
                           range(0, 2**32 - 1), [0, 1], (0, 1), "0:1", range(0, 5)])
    return st.one_of(st.none(), good, bad)


def cache_key(cluster: st.SearchStrategy[int] = st.sampled_from([1, 2, CLUSTER])) -> st.SearchStrategy[Key]:
    ids = st.sampled_from([0, 1, 5, 2**63, U64 - 1, U64])
    return st.builds(lambda c, r, p, m: Key("CacheKey", c, r, p, m), cluster, ids, ids, st.sampled_from([0, 1]))


def by_id_key() -> st.SearchStrategy[Key]:
    return st.builds(lambda c, i, b: Key("CacheKeyByIdAndIndex", c, cache_id=i, batch_index=b),
                     st.sampled_from([1, 2, CLUSTER]), st.sampled_from([-1, 0, 1, 3, 99]),
                     st.sampled_from([0, 1, 3, 7, U32]))


def blocks_key() -> st.SearchStrategy[Key]:
    return st.builds(lambda c, m: Key("BlocksCacheKey", c, model_id=m), st.sampled_from([1, 2, CLUSTER]),
                     st.sampled_from([0, 1, 3]))


def any_key() -> st.SearchStrategy[Any]:
    return st.one_of(cache_key(), by_id_key(), blocks_key(), st.sampled_from([None, "key", 1]))


def block_list(limit: int) -> st.SearchStrategy[Any]:
    good = st.lists(st.integers(0, limit - 1), min_size=1, max_size=4)
    bad = st.one_of(st.just([]), st.lists(st.integers(0, limit + 3), min_size=1, max_size=4).map(tuple),
                    st.sampled_from([[0, -1], [U64 + 1], [0, "1"], [np.int64(1)], None, "01", 3]),
                    st.lists(st.integers(0, limit - 1), min_size=1, max_size=4).map(
                        lambda v: np.array(v, dtype=np.uint64)),
                    st.just(np.array([1, -2], dtype=np.int64)))
    return st.one_of(good, good, bad)


def extra_kwargs() -> st.SearchStrategy[Dict[str, Any]]:
    return st.sampled_from([{"src_cache_offset": 0}, {"dst_cache_offset": 16}, {"bogus": 1}, {"req_id": 4}])


def refs(env: Env, *names: str) -> st.SearchStrategy[Any]:
    present = [env.checks.refs[n] for n in names if n in env.checks.refs]
    return st.sampled_from(present) if present else st.just(None)


def any_ref(env: Env) -> st.SearchStrategy[Any]:
    return st.one_of(st.sampled_from(list(env.checks.refs.values())), st.sampled_from([None, "cache", 1]))


# Each method: its positional parameters and keyword parameters, each (name, good, bad);
# ``**`` marks drawn extra keywords (PR-8).

def params(env: Env, method: str) -> List[Tuple[str, st.SearchStrategy[Any], st.SearchStrategy[Any]]]:
    g = env.mode.generation
    contig, blocks_ = ("c", "ac", "c2"), ("b", "ab")
    n_small = st.sampled_from([1, 2, 4])
    n_bad = st.one_of(st.sampled_from([0, -1, 3, 5, 255, U32, U32 + 1]), NOT_INTS)
    if method == "pull_cache":
        keys = by_id_key() if (g == 2 and env.mode.direct) else st.one_of(cache_key(), by_id_key())
        out = [("cache_key", keys, any_key()), ("cache", refs(env, *contig), any_ref(env)),
               ("batch_index", st.integers(0, 3), u32(st.integers(4, 9))),
               ("size", st.sampled_from([-1, 1, 16, 32]), i64(st.sampled_from([0, -2, 33, 64, I64]))),
               ("src_layer_range", layer_range(2), layer_range(2)),
               ("dst_layer_range", layer_range(2), layer_range(2)),
               ("tensor_num_per_layer", n_small, n_bad)]
        if g == 1:
            off = st.sampled_from([0, 8, 16])
            out += [("src_cache_offset", off, i64(st.sampled_from([-1, 31, 40]))),
                    ("dst_cache_offset", off, i64(st.sampled_from([-1, 31, 40])))]
        return out + [("**", st.just({}), extra_kwargs())]
    if method == "pull_blocks":
        keys = st.one_of(blocks_key(), blocks_key(), cache_key(), by_id_key()) if g == 2 else blocks_key()
        return [("src_cache_key", keys, any_key()), ("dst_cache", refs(env, *blocks_), any_ref(env)),
                ("src_blocks", block_list(8), block_list(8)), ("dst_blocks", block_list(8), block_list(8)),
                ("src_layer_range", layer_range(2), layer_range(2)),
                ("dst_layer_range", layer_range(2), layer_range(2)),
                ("tensor_num_per_layer", n_small, n_bad), ("**", st.just({}), extra_kwargs())]
    if method in ("push_cache", "push_blocks"):
        push_range = st.one_of(st.none(), st.sampled_from([range(0, 1), range(1, 2), range(0, 2)]))
        bad_range = st.sampled_from([range(1, 1), range(2, 0), range(0, 2, 2), [0], range(-1, 1)])
        first = (("dst_cache_key", by_id_key(), any_key()), ("src_cache", refs(env, *contig), any_ref(env)),
                 ("src_batch_index", st.integers(0, 3), u32(st.integers(4, 9)))) if method == "push_cache" else (
                 ("dst_cache_key", blocks_key(), any_key()), ("src_cache", refs(env, *blocks_), any_ref(env)),
                 ("src_blocks", block_list(8), block_list(8)), ("dst_blocks", block_list(8), block_list(8)))
        rest = [("src_layer_range", push_range, bad_range), ("dst_layer_range", push_range, bad_range)]
        if method == "push_cache":
            rest.append(("size", st.just(-1), i64(st.sampled_from([0, 16, -2]))))
        rest.append(("tensor_num_per_layer", n_small, n_bad))
        return list(first) + rest
    if method == "copy_cache":
        return [("dst", refs(env, *contig), any_ref(env)), ("src", refs(env, *contig), any_ref(env)),
                ("dst_batch_index", st.integers(0, 3), u32(st.integers(4, 9))),
                ("src_batch_index", st.integers(0, 3), u32(st.integers(4, 9))),
                ("offset", st.sampled_from([0, 0, 8, 16]), st.one_of(st.sampled_from([-1, 32, 40, U64 + 1]), NOT_INTS)),
                ("size", st.sampled_from([-1, 8, 16]), i64(st.sampled_from([0, -2, 24, 32, 64]))),
                ("req_id", st.sampled_from([None, 0, 5]), st.sampled_from([-1, U64 + 1, "r", -5]))]
    if method == "copy_blocks":
        good = st.dictionaries(st.integers(0, 3), st.lists(st.integers(4, 7), min_size=1, max_size=2, unique=True),
                               min_size=1, max_size=2).filter(
            lambda d: len({x for v in d.values() for x in v}) == sum(len(v) for v in d.values()))
        bad = st.one_of(st.sampled_from([{}, {0: []}, {0: [4], 1: [4]}, {0: [8]}, {9: [4]}, {0: [0]}, {0: (4,)},
                                         {"0": [4]}, {0: [-1]}, {-1: [4]}, {0: [U64 + 1]}, [(0, [4])], None,
                                         {0: [1], 1: [2]}]), good)
        return [("cache", refs(env, *blocks_, *contig), any_ref(env)), ("copy_block_info", good, bad)]
    if method == "swap_blocks":
        mapping = st.dictionaries(st.integers(0, 7), st.integers(0, 7), min_size=1, max_size=4).filter(
            lambda d: len(set(d.values())) == len(d))
        bad_map = st.sampled_from([{}, {8: 0}, {0: 8}, {-1: 0}, {0: 1, 1: 1}, {"0": 1}, [(0, 1)], None])
        pair = st.sampled_from([("hb", "b"), ("b", "hb"), ("hab", "ab"), ("ab", "hab"), ("hb", "ab")])
        return [("src_cache", st.just("PAIR"), st.one_of(any_ref(env), refs(env, "c", "b", "hb"))),
                ("dst_cache", st.just("PAIR"), st.one_of(any_ref(env), refs(env, "c2", "b", "hb"))),
                ("src_to_dst", mapping, bad_map), ("@pair", pair, pair)]
    if method == "remove_cache_key":
        return [("cache_key", cache_key(), st.one_of(blocks_key(), by_id_key(), st.sampled_from([None, 3])))]
    if method == "get_cache_tensors":
        return [("cache", refs(env, *contig, *blocks_), any_ref(env)),
                ("tensor_index", st.integers(0, 3), st.one_of(st.sampled_from([4, -1, 2**31, -2**31 - 1]), NOT_INTS))]
    if method in ("deallocate_cache", "deallocate_blocks_cache"):
        return [("cache", refs(env, *(contig if method == "deallocate_cache" else blocks_)), any_ref(env))]
    if method == "unregister_cache":
        return [("cache_id", st.sampled_from([1, 2, 3, 5, 99]), st.one_of(st.sampled_from([2**63, -2**63 - 1]),
                                                                         NOT_INTS))]
    if method in ("register_cache", "register_blocks_cache", "allocate_cache", "allocate_blocks_cache"):
        return new_cache_params(env, method)
    if method == "check_cache_key":
        return [("cache_key", cache_key(), st.one_of(by_id_key(), blocks_key(), st.sampled_from([None, 1])))]
    raise AssertionError(method)


FRESH = 512          # bytes per tensor of the buffers a drawn registration may use


def descs(generation: int, blocks: bool) -> Tuple[st.SearchStrategy[Ref], st.SearchStrategy[Any]]:
    """CacheDesc descriptions: sound ones and flawed ones (tensor counts, PR-18, shapes
    the core rejects, a pool too small, HOST placement)."""
    def desc(num: int, shape: Tuple[int, ...], placement: int = DEVICE, batch_dim: int = 0) -> Ref:
        return Ref("@desc", "CacheDesc", -1, num, shape, 4, placement, blocks, batch_dim=batch_dim)
    good = st.builds(desc, st.just(4), st.sampled_from([(4, 32), (8, 16), (2, 2, 32), (16, 32)]),
                     st.sampled_from([DEVICE, DEVICE, HOST]))
    bad = st.one_of(
        st.builds(desc, st.sampled_from([0, 3, 5]), st.just((4, 32))),
        st.builds(lambda d: desc(4, (4, 32), batch_dim=d), st.just(1)),
        st.builds(desc, st.just(4), st.sampled_from([(4, 65536), (64, 65536)]), st.sampled_from([DEVICE, HOST])),
        st.sampled_from([None, "desc", 4]))
    return good, bad


def new_cache_params(env: Env, method: str) -> List[Tuple[str, st.SearchStrategy[Any], st.SearchStrategy[Any]]]:
    blocks = "blocks" in method
    good_desc, bad_desc = descs(env.mode.generation, blocks)
    pool = [Key("CacheKey", 1, req_id=20), Key("CacheKey", 1, req_id=21, model_id=1),
            Key("CacheKey", 1, prefix_id=22), Key("CacheKey", 1, model_id=5), *BOUND]
    fresh = st.lists(st.sampled_from(pool[:4]), max_size=4, unique=True)
    bad_keys = st.one_of(st.lists(st.sampled_from(pool), min_size=1, max_size=5),
                         st.sampled_from([None, (Key("CacheKey", 1, req_id=20),), [Key("BlocksCacheKey", 1)], "k"]))
    bkey = st.one_of(st.none(), st.builds(lambda m: Key("BlocksCacheKey", 1, model_id=m), st.sampled_from([4, 6])))
    bad_bkey = st.one_of(st.builds(lambda m: Key("BlocksCacheKey", 1, model_id=m), st.sampled_from([0, 3])),
                         st.sampled_from([Key("CacheKey", 1, req_id=20), "k", 1]))
    keys = (("blocks_cache_key", bkey, bad_bkey) if blocks else ("cache_keys", fresh, bad_keys))
    if method.startswith("allocate"):
        return [("cache_desc", good_desc, bad_desc), keys]
    addrs = env.guarded("new", 5, FRESH)
    good_addrs = st.just(addrs[:4])
    bad_addrs = st.sampled_from([tuple(addrs[:4]), [], addrs[:3], addrs[:5], [addrs[0], 0, addrs[2], addrs[3]],
                                 [addrs[0], "1", addrs[2], addrs[3]], None])
    return [("cache_desc", good_desc, bad_desc), ("addrs", good_addrs, bad_addrs), keys,
            ("remote_accessible", st.sampled_from([None, True, False]), st.sampled_from([1, "yes"]))]


V2_METHODS = ["register_cache", "register_blocks_cache", "unregister_cache", "pull_cache", "pull_blocks",
              "push_cache", "push_blocks", "allocate_cache", "allocate_blocks_cache", "deallocate_cache",
              "deallocate_blocks_cache", "remove_cache_key", "copy_cache", "copy_blocks", "swap_blocks",
              "check_cache_key"]
V1_METHODS = ["allocate_cache", "allocate_blocks_cache", "deallocate_cache", "remove_cache_key", "pull_cache",
              "pull_blocks", "copy_cache", "copy_blocks", "swap_blocks", "get_cache_tensors", "check_cache_key"]
V2_MODES = sorted(m for m in MODES if m.startswith("v2"))
V1_MODES = sorted(m for m in MODES if m.startswith("v1"))


# ---- making the call and comparing --------------------------------------------------------------

def outcome_of(call: Any) -> Tuple[str, Any, str]:
    """What a call did: ("ok", value, "") or the exception kind, status and message."""
    try:
        value = call()
    except LLMException as exc:
        return "LX", exc.status_code, str(exc)
    except TypeError as exc:
        return "T", None, str(exc)
    except ValueError as exc:
        return "V", None, str(exc)
    except AttributeError as exc:
        return "A", None, str(exc)
    return "ok", value, ""


def assert_agrees(verdict: Verdict, got: Tuple[str, Any, str], what: str) -> None:
    kind, status, message = got
    if verdict.kind == "core":
        if verdict.status == S.LLM_SUCCESS:
            assert kind == "ok", f"{what}: expected success ({verdict.rule}), got {kind} {status} {message}"
        else:
            assert (kind, status) == ("LX", verdict.status), \
                f"{what}: expected core {verdict.status.name} ({verdict.rule}), got {kind} {status} {message}"
        return
    expected_status = verdict.status if verdict.kind == "LX" else None
    assert (kind, status) == (verdict.kind, expected_status), \
        f"{what}: expected {verdict.describe()}, got {kind} {status}: {message}"
    if verdict.name and verdict.kind != "A":
        assert verdict.name.lower() in message.lower(), f"{what}: {verdict.name!r} not in {message!r}"


def draw_call(env: Env, data: st.DataObject, method: str) -> Tuple[List[Any], Dict[str, Any]]:
    plist = params(env, method)
    names = [p[0] for p in plist if not p[0].startswith("@")]
    flaws = data.draw(st.one_of(st.just(0), st.just(1), st.just(1), st.just(1), st.integers(2, 3)), label="flaws")
    flawed = set(data.draw(st.permutations(names), label="order")[:flaws])
    values: Dict[str, Any] = {}
    for name, good, bad in plist:
        values[name] = data.draw(bad if name in flawed else good, label=name)
    if "@pair" in values:
        pair = values.pop("@pair")
        for side, nm in (("src_cache", pair[0]), ("dst_cache", pair[1])):
            if values[side] == "PAIR":
                values[side] = env.checks.refs.get(nm, env.checks.refs["b"])
    extra = values.pop("**", {})
    args: List[Any] = []
    kwargs: Dict[str, Any] = {}
    keyword_only = {"src_layer_range", "dst_layer_range", "tensor_num_per_layer", "src_cache_offset",
                    "dst_cache_offset"} if method in ("pull_cache", "pull_blocks") else set()
    for name, value in values.items():
        if name in keyword_only:
            if name in flawed or data.draw(st.booleans(), label=f"give {name}"):
                kwargs[name] = value
        else:
            args.append(value)
    kwargs.update(extra)
    return args, kwargs


def one_call(env: Env, method: str, args: List[Any], kwargs: Dict[str, Any], record: bool = True) -> None:
    real_args = [env.build(a) for a in args]
    real_kwargs = {k: env.build(v) for k, v in kwargs.items()}
    extra: Dict[str, Any] = {"memory": env.memory()} if method == "swap_blocks" else {}
    if method.startswith("register") and "new" in env.buffers and args and isinstance(args[0], Ref):
        size = args[0].desc_size if args[0].num_tensors > 0 else 0
        extra["contents"] = [bytes(b[GUARD:GUARD + size]) for b in env.expected_buffers["new"]]
    verdict = env.checks.run(method, *args, **kwargs, **extra)
    if record:
        event(f"{method}: {verdict.kind} {verdict.status.name if verdict.kind in ('LX', 'core') else ''}")
    call = getattr(env.manager, method)
    got = outcome_of(lambda: call(*real_args, **real_kwargs))
    assert_agrees(verdict, got, f"{method}{tuple(args)} {kwargs}")
    if got[0] == "ok" and (method.startswith("register") or method.startswith("allocate")):
        adopt(env, method, args[0], got[1], verdict)
    env.check_memory()


def adopt(env: Env, method: str, desc: Ref, cache: Any, verdict: Verdict) -> None:
    """A cache the call made: the object the package returned must be what the model made;
    its memory joins the comparison."""
    blocks = "blocks" in method
    assert cache.cache_id == verdict.value, f"cache id {cache.cache_id}, the model says {verdict.value}"
    if env.mode.generation == 2:
        assert (cache.is_blocks_cache, len(cache.tensor_addrs)) == (blocks, desc.num_tensors)
    env.objects["new"] = cache
    cls = "Cache" if env.mode.generation == 2 else "KvCache"
    env.ref("new", cls, cache.cache_id, desc.num_tensors, desc.shape, desc.placement, blocks)
    if method.startswith("register"):
        env.link_payload("new", cache.cache_id, desc.desc_size)
    else:
        env.fill_allocated(cache)


@pytest.mark.parametrize("method", V2_METHODS)
@settings(max_examples=settings.default.max_examples * 2)
@given(data=st.data(), seed=st.integers(0, 2**32 - 1))
def test_cache_manager_calls_agree_with_the_oracle(env: Env, method: str, data: st.DataObject, seed: int) -> None:
    """CacheManager (v2) in direct and server-assisted mode, with and without pools."""
    env.start(data.draw(st.sampled_from(V2_MODES), label="mode"), np.random.default_rng(seed))
    try:
        args, kwargs = draw_call(env, data, method)
        one_call(env, method, args, kwargs)
    finally:
        env.stop()


@pytest.mark.parametrize("method", V1_METHODS)
@settings(max_examples=settings.default.max_examples * 2)
@given(data=st.data(), seed=st.integers(0, 2**32 - 1))
def test_kv_cache_manager_calls_agree_with_the_oracle(env: Env, method: str, data: st.DataObject, seed: int) -> None:
    """KvCacheManager (v1) as a DECODER, PROMPT or MIX engine."""
    env.start(data.draw(st.sampled_from(V1_MODES), label="mode"), np.random.default_rng(seed))
    try:
        args, kwargs = draw_call(env, data, method)
        one_call(env, method, args, kwargs)
    finally:
        env.stop()


# ---- regressions: failures the property tests found, kept as plain tests ----------------------

def test_push_cache_reports_the_vendors_size_error_before_the_pr3_divisor_rule(env: Env) -> None:
    """Found: ``push_cache(..., size="x", tensor_num_per_layer=3)`` on a 4-tensor cache raised
    PR-3's LX, a project rule, before the vendor's TypeError for ``size`` (step 10).
    Fixed in the package: the divisor rule of PR-3 now comes after the vendor's checks."""
    env.start("v2-direct-pools", np.random.default_rng(1))
    try:
        args = [Key("CacheKeyByIdAndIndex", 1, cache_id=1), env.checks.refs["c"], 0, None, None, "x", 3]
        assert env.checks.run("push_cache", *args).kind == "T"
        one_call(env, "push_cache", args, {}, record=False)
    finally:
        env.stop()


def test_pull_blocks_converts_block_lists_before_the_project_rules(env: Env) -> None:
    """Found: ``pull_blocks`` with ``dst_blocks=[1, -1]`` (the binding's TypeError) and
    ``tensor_num_per_layer=8`` on a 4-tensor cache (PR-3) raised PR-3's LX. Fixed in the
    package: block lists are converted before PR-3, V-5 and PR-5."""
    env.start("v2-direct-pools", np.random.default_rng(2))
    try:
        args = [Key("BlocksCacheKey", 1), env.checks.refs["b"], [0, 1], [1, -1]]
        kwargs = {"tensor_num_per_layer": 8}
        assert env.checks.run("pull_blocks", *args, **kwargs).kind == "T"
        one_call(env, "pull_blocks", args, kwargs, record=False)
    finally:
        env.stop()
