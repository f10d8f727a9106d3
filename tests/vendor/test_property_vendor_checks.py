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

The oracle (``tests/oracle/vendor_checks.py``, written from docs/reference/python-api.md and
docs/reference/semantics.md alone) says which exception the package must raise, in the vendor's
order, with which ``status_code`` and naming which parameter, or that the call passes
the Python checks; then the single-engine core model answers (a pull without a link
ends in ``LLM_NOT_YET_LINK`` once its local checks pass, docs/reference/semantics.md §8.0). After every
call every byte of every cache, guard bytes included, equals the model's bytes:
nothing is written by a call that fails, and local copies write exactly what the
model wrote.

``LLMDataDist``'s own calls are drawn the same way: ``init``'s options,
``link_clusters`` / ``unlink_clusters`` / ``check_link_status`` of clusters where
nothing listens, and ``switch_role`` (1 to 3 calls on an engine without links, whose
new role must then govern v1's ``check_link_status`` and whose listener must run exactly
where the role and options put one); one plain test with a peer process covers what
needs a listener or a live link (EXIST_LINK, docs/reference/semantics.md §10.3 and §10.7).
"""
from __future__ import annotations

import socket
from typing import Any, Dict, Iterator, List, Tuple

import numpy as np
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from llm_datadist_ffi import LLMException, LLMStatusCode as S
from llm_datadist_ffi.testing import strategies as lst
from llm_datadist_ffi._vendor.v2.cache_manager import CacheManager
from llm_datadist_ffi._vendor.v1.cache_manager import KvCacheManager
from llm_datadist_ffi.vendor import (
    CacheDesc, CacheKeyByIdAndIndex, DataType, LayerSynchronizer, LLMClusterInfo, LLMDataDist, LLMRole, MemInfo,
    Memtype, TransferConfig, TransferWithCacheKeyConfig,
)

from oracle.vendor_checks import (
    Cfg, Cluster, Key, Mem, Mode, Ref, check_link_status, init_selection, link_clusters, remap_registered_memory,
    switch_role, transfer_cache_async, unlink_clusters)
from listeners import listening_ports
from oracle.vendor_local import DEVICE, HOST
from vendor_local_driver import (
    BOUND, CLUSTER, I64, MODES, U32, U64, Env, _free_port, assert_agrees, one_call, options, outcome_of)

pytestmark = pytest.mark.mock_only(reason="the vendor-compatible API runs on the mock's extension functions")


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
    # valid ranges and the default, ranges the core refuses (past the last layer), and
    # the malformed ones the Python layer refuses
    bad = st.sampled_from([range(2, 2), range(3, 1), range(0, 4, 2), range(-1, 1), range(2**32, 2**32 + 1),
                           range(0, 2**32 - 1), [0, 1], (0, 1), "0:1", range(0, 5)])
    return st.one_of(lst.layer_ranges(n_layers), lst.layer_ranges(n_layers, validity="invalid"), bad)


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
    good = lst.block_lists(limit, max_size=4, unique=False, containers=["list"])
    bad = st.one_of(st.just([]), lst.block_lists(limit, validity="any", max_size=4, unique=False, containers=["tuple"]),
                    st.sampled_from([[0, -1], [U64 + 1], [0, "1"], [np.int64(1)], None, "01", 3]),
                    lst.block_lists(limit, max_size=4, unique=False, containers=["array"]),
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
    contig, blocks_ = ("c", "ac", "c2", "c4"), ("b", "ab")
    n_small = st.sampled_from([1, 2, 4])
    n_bad = st.one_of(st.sampled_from([0, -1, 3, 5, 255, U32, U32 + 1]), NOT_INTS)
    if method == "pull_cache":
        keys = by_id_key() if (g == 2 and env.mode.direct) else st.one_of(cache_key(), by_id_key())
        out = [("cache_key", keys, any_key()), ("cache", refs(env, *contig), any_ref(env)),
               ("batch_index", st.integers(0, 3), u32(st.integers(4, 9))),
               ("size", st.sampled_from([-1, 1, 16, 32]),
                st.one_of(st.sampled_from([0, -2]), i64(st.sampled_from([0, -2, 33, 64, I64])))),
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
                ("size", st.sampled_from([-1, 8, 16]),
                 st.one_of(st.sampled_from([0, -2]), i64(st.sampled_from([0, -2, 24, 32, 64])))),
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


@pytest.mark.rules("§1.3", "§2.4", "§2.6", "§3.3", "§3.4", "§3.5", "§4.1", "§4.2", "§4.3", "§5", "§6.1", "§6.2", "§6.4",
                   "§6.6", "§7.1", "§7.2", "§7.3", "§7.5", "§7.6", "§8.0", "§8.8", "§8.9", "§8.10", "§9.1", "§9.2",
                   "§9.3", "§9.6", "python-api §14", "PR-2", "PR-3", "PR-4", "PR-5", "PR-6", "PR-8", "PR-15", "PR-18",
                   "PR-21", "PR-22", "PR-23", "PR-24", "PR-25", "PR-41", "V-5", "X-18")
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


@pytest.mark.rules("§2.4", "§2.6", "§3.3", "§3.4", "§4.1", "§4.2", "§5", "§6.1", "§6.2", "§6.3", "§6.6", "§7.1", "§7.2",
                   "§7.3", "§7.5", "§7.6", "§8.0", "§8.8", "§8.9", "§8.10", "§8.11", "§9.1", "§9.2", "§9.6", "§11",
                   "PR-2", "PR-3", "PR-4", "PR-5", "PR-6", "PR-15", "PR-18", "PR-22", "PR-24", "PR-25", "PR-38",
                   "PR-41", "V-5", "X-18")
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

@pytest.mark.rules("§5", "PR-3")
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


@pytest.mark.rules("§7.1", "§7.2", "PR-5", "PR-25")
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


# ---- LLMDataDist.init: which manager, which mode (docs/reference/semantics.md §1.1, §1.3) -------------------------

OPTION_VALUES = {
    "llm.EnableCacheManager": [None, "1", "0", "true"],
    "llm.LocalCommRes": [None, "", '{"version": "1.3"}'],
    "llm.TransferBackend": [None, None, "hixl"],
    "llm.EnableRemoteCacheAccessible": [None, "1", "0"],
    "llm.listenIpInfo": [None, "LISTEN"],
}


@pytest.mark.rules("§1.1")
@settings(max_examples=settings.default.max_examples * 2)
@given(data=st.data(), role=st.sampled_from(["PROMPT", "DECODER", "MIX"]))
def test_init_selects_the_generation_and_mode_the_oracle_selects(data: st.DataObject, role: str) -> None:
    """Options drawn around llm.EnableCacheManager, llm.LocalCommRes, llm.TransferBackend,
    llm.EnableRemoteCacheAccessible and llm.listenIpInfo: ``init`` raises LX where python-api.md §10.2
    steps 8, 9 and 11 say so; otherwise exactly one manager is available (the other
    property raises LX) and in v2 the transfer mode shows in ``push_cache`` (LX outside
    direct mode, the core's NOT_YET_LINK in it)."""
    options = {"ge.exec.deviceId": "0"}
    for key, values in OPTION_VALUES.items():
        value = data.draw(st.sampled_from(values), label=key)
        if value is not None:
            options[key] = f"127.0.0.1:{_free_port()}" if value == "LISTEN" else value
    given_options = dict(options)
    expected, detail = init_selection(options, role)
    dd = LLMDataDist(LLMRole[role], CLUSTER)
    try:
        if expected == "LX":
            with pytest.raises(LLMException) as info:
                dd.init(options)
            assert info.value.status_code == S.LLM_PARAM_INVALID, f"{detail}: {info.value}"
            assert LLMDataDist.llm_engine_instance is None
            return
        dd.init(options)
        assert options == given_options, "init changed the caller's options (§10.2 step 5 works on a copy)"
        if expected == "v2":
            assert isinstance(dd.cache_manager, CacheManager)
            with pytest.raises(LLMException) as info:
                dd.kv_cache_manager
            assert info.value.status_code == S.LLM_PARAM_INVALID
            buffers = [np.zeros(64, np.uint8) for _ in range(2)]
            cache = dd.cache_manager.register_cache(CacheDesc(2, [2, 32], DataType.DT_UINT8),
                                                    [b.ctypes.data for b in buffers])
            with pytest.raises(LLMException) as info:
                dd.cache_manager.push_cache(CacheKeyByIdAndIndex(CLUSTER + 1, 1, 0), cache)
            if detail == "direct":
                assert info.value.status_code == S.LLM_NOT_YET_LINK, str(info.value)
            else:
                assert info.value.status_code == S.LLM_PARAM_INVALID and "push_cache is only supported" in \
                    str(info.value)
        else:
            assert isinstance(dd.kv_cache_manager, KvCacheManager)
            with pytest.raises(LLMException) as info:
                dd.cache_manager
            assert info.value.status_code == S.LLM_PARAM_INVALID
    finally:
        dd.finalize()


# ---- links without a peer (docs/reference/python-api.md §10.5, §10.7) ------------------------------------------

def cluster_info(c: Cluster, port: int) -> LLMClusterInfo:
    info = LLMClusterInfo()
    if c.remote_cluster_id is not None:
        info.remote_cluster_id = c.remote_cluster_id
    for _ in range(c.local_ips):
        info.append_local_ip_info("127.0.0.1", 0)
    for _ in range(c.remote_ips):
        info.append_remote_ip_info("127.0.0.1", port)
    return info


CLUSTERS = st.builds(Cluster, st.sampled_from([None, 1, 2, CLUSTER]), st.sampled_from([1, 1, 0, 2]),
                     st.sampled_from([1, 1, 0, 2]))


@pytest.mark.rules("§10.2", "§10.3", "§10.4", "§10.5", "§10.7", "§10.8", "PR-36", "X-12", "X-13", "X-24")
@settings(max_examples=settings.default.max_examples * 2)
@given(mode=st.sampled_from(["v2-direct-pools", "v2-server-pool", "v1-decoder", "v1-prompt"]), data=st.data(),
       seed=st.integers(0, 2**32 - 1))
def test_link_clusters_and_check_link_status_agree_with_the_oracle(env: Env, mode: str, data: st.DataObject,
                                                                  seed: int) -> None:
    """``link_clusters`` with drawn cluster lists (unset ids, the own cluster id, zero or
    two ip entries) and timeouts, to addresses where nothing listens: the Python checks
    raise as the oracle says; otherwise the call returns the overall and per-cluster
    codes (python-api.md §10.5). Then ``check_link_status`` (python-api.md §10.7)."""
    env.start(mode, np.random.default_rng(seed), bare=True)
    try:
        port = _free_port()
        drawn = CLUSTERS
        if env.mode.generation == 2:
            # two local entries: the mock keeps the first link attempt's local resource for
            # later clusters (docs/semantics.md §7, its row for semantics.md §10.2), which the oracle does not model
            drawn = CLUSTERS.filter(lambda c: c.local_ips < 2)
        clusters = data.draw(st.one_of(st.lists(drawn, max_size=3), st.lists(drawn, max_size=3).map(tuple),
                                       st.sampled_from([None, "clusters", [Cluster(1), "x"]])), label="clusters")
        timeout = data.draw(st.one_of(st.sampled_from([500, 3000]), st.sampled_from([0, -1, 2**31, "1", None])),
                            label="timeout")
        verdict = link_clusters(env.mode, clusters, timeout)
        real: Any = clusters
        if isinstance(clusters, (list, tuple)):
            real = type(clusters)(cluster_info(c, port) if isinstance(c, Cluster) else c for c in clusters)
        with_ = env.dd
        assert with_ is not None
        got = outcome_of(lambda: with_.link_clusters(real, timeout))
        if verdict.kind == "core":
            assert got[0] == "ok", f"{clusters} {timeout}: expected {verdict.value}, got {got}"
            status, rets = got[1]
            assert (status, list(rets)) == verdict.value, f"{clusters}: {got[1]} != {verdict.value}"
        else:
            assert_agrees(verdict, got, f"link_clusters({clusters}, {timeout})")
        rid = data.draw(st.one_of(st.sampled_from([1, CLUSTER]), st.sampled_from([-1, 2**64, "1", None])),
                        label="remote_cluster_id")
        verdict = check_link_status(env.mode, rid)
        assert_agrees(verdict, outcome_of(lambda: with_.check_link_status(rid)), f"check_link_status({rid!r})")
    finally:
        env.stop()


@pytest.mark.rules("§10.3", "X-12")
@settings(max_examples=settings.default.max_examples * 2)
@given(mode=st.sampled_from(["v2-direct-pools", "v2-server-pool", "v1-decoder", "v1-prompt", "v1-mix"]),
       data=st.data(), seed=st.integers(0, 2**32 - 1))
def test_unlink_clusters_of_clusters_never_linked_agrees_with_the_oracle(env: Env, mode: str, data: st.DataObject,
                                                                        seed: int) -> None:
    """``unlink_clusters`` with drawn cluster lists (unset ids, the own cluster id,
    repeats, zero or two ip entries, seventeen clusters), timeouts and ``force`` values,
    of clusters this engine never linked and where nothing listens: the Python checks
    raise as the oracle says (python-api.md §10.5); otherwise the call returns the overall and
    per-cluster codes: v2 forced SUCCESS, non-forced UNLINK_FAILED or PARAM_INVALID
    (semantics.md §10.3); v1 NOT_YET_LINK per cluster with overall SUCCESS (X-12)."""
    env.start(mode, np.random.default_rng(seed), bare=True)
    try:
        port = _free_port()
        some = st.lists(st.one_of(st.builds(Cluster, st.sampled_from([1, 2, 3, CLUSTER])), CLUSTERS), max_size=3)
        many = st.lists(st.builds(Cluster, st.sampled_from([1, 2, 3])), min_size=17, max_size=17)
        clusters = data.draw(st.one_of(some, some.map(tuple), many,
                                       st.sampled_from([None, "clusters", [Cluster(1), "x"]])), label="clusters")
        # usually valid, so that most examples reach the core
        timeout = data.draw(st.sampled_from([500, 3000] * 4 + [0, -1, 2**31, "1", None]), label="timeout")
        force = data.draw(st.sampled_from([False, True] * 4 + [None, 1, "True"]), label="force")
        verdict = unlink_clusters(env.mode, clusters, timeout, force)
        event(f"unlink: {verdict.kind} {verdict.rule}")
        real: Any = clusters
        if isinstance(clusters, (list, tuple)):
            real = type(clusters)(cluster_info(c, port) if isinstance(c, Cluster) else c for c in clusters)
        with_ = env.dd
        assert with_ is not None
        got = outcome_of(lambda: with_.unlink_clusters(real, timeout, force=force))
        what = f"unlink_clusters({clusters}, {timeout}, force={force!r})"
        if verdict.kind == "core":
            assert got[0] == "ok", f"{what}: expected {verdict.value}, got {got}"
            status, rets = got[1]
            assert (status, list(rets)) == verdict.value, f"{what}: {got[1]} != {verdict.value} ({verdict.rule})"
        else:
            assert_agrees(verdict, got, what)
    finally:
        env.stop()


# ---- switch_role without a link (docs/reference/python-api.md §10.6, docs/reference/semantics.md §10.7, X-13) -------------------

def role_outcome(call: Any) -> Tuple[str, Any, str]:
    """``outcome_of``, and the ``KeyError`` of V-4 and the ``RuntimeError`` of the IPv4 rule."""
    try:
        return outcome_of(call)
    except KeyError as exc:
        return "K", None, str(exc)
    except RuntimeError as exc:
        return "RT", None, str(exc)


def listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(2)
        return s.connect_ex(("127.0.0.1", port)) == 0


LISTEN_VALUES = ["127.0.0.1:{port}", "127.0.0.1:{port}", "127.0.0.1", "127.0.0.1:1:2", "127.0.0.1:x", "127.0.0.1:0",
                 "127.0.0.1:65536", "no-ip:{port}", "300.1.1.1:{port}"]
ROLES = [LLMRole.PROMPT, LLMRole.DECODER, LLMRole.MIX] * 2 + [None, "PROMPT", 1]


@pytest.mark.rules("§10.7", "§10.8", "X-13", "X-24")
@settings(max_examples=settings.default.max_examples * 2)
@given(mode=st.sampled_from(["v2-direct-pools", "v2-server-pool", "v1-decoder", "v1-prompt", "v1-mix"]),
       enable=st.booleans(), data=st.data())
def test_switch_role_agrees_with_the_oracle(env: Env, mode: str, enable: bool, data: st.DataObject) -> None:
    """An engine without links (v1 with or without ``llm.EnableSwitchRole="1"``) makes 1
    to 3 ``switch_role`` calls with drawn roles (each ``LLMRole``, ``None``, a role name,
    an int) and options (``None``, empty, a listen address free, malformed, with a bad
    port or ip; not a dict): each raises as the oracle says or ends in the core's
    answer (python-api.md §10.6, §10.7). After each call the role the engine has governs v1's
    ``check_link_status`` (DECODER only), and a listener runs exactly where the new role
    and options put one (v2: the options' address; v1: a PROMPT's, X-13)."""
    env.stop()
    model = Mode(**MODES[mode].__dict__)
    opts = options(model)
    if enable and model.generation == 1:
        opts["llm.EnableSwitchRole"] = "1"
    port = int(opts["llm.listenIpInfo"].split(":")[1]) if "llm.listenIpInfo" in opts else None
    dd = LLMDataDist(LLMRole[model.role], CLUSTER)
    dd.init(opts)
    try:
        for _ in range(data.draw(st.integers(1, 3), label="calls")):
            role = data.draw(st.sampled_from(ROLES), label="role")
            listen = data.draw(st.sampled_from(LISTEN_VALUES), label="listen").format(port=_free_port())
            switch_options = data.draw(st.sampled_from([None, {}, {"llm.listenIpInfo": listen},
                                                        {"llm.listenIpInfo": listen}, "options",
                                                        [("llm.listenIpInfo", listen)]]), label="switch_options")
            verdict = switch_role(model, role, switch_options, enable)
            event(f"switch_role v{model.generation}: {verdict.kind} {verdict.status.name} {verdict.rule}")
            before = listening_ports()
            got = role_outcome(lambda: dd.switch_role(role, switch_options))
            assert_agrees(verdict, got, f"switch_role({role!r}, {switch_options!r}) as {model.role}")
            if verdict.kind == "core" and verdict.status == S.LLM_SUCCESS:
                model.role = verdict.value
                if model.generation == 1 and model.role != "PROMPT":
                    new = None          # any other role stops it (and v1 does not read the address)
                else:
                    new = int(listen.split(":")[1]) if isinstance(switch_options, dict) and switch_options else None
                if new == 0:
                    # E-26: port 0 listens on a port the kernel picks; the same text again keeps it
                    fresh = listening_ports() - before
                    new = fresh.pop() if fresh else port
                if port is not None and port != new:
                    assert not listening(port), f"the listener at {port} still runs after {verdict.rule}"
                if new is not None:
                    assert listening(new), f"no listener at {new} after switch_role({role!r}, {switch_options!r})"
                port = new
            rid = data.draw(st.sampled_from([1, CLUSTER]), label="remote_cluster_id")
            assert_agrees(check_link_status(model, rid), outcome_of(lambda: dd.check_link_status(rid)),
                          f"check_link_status({rid}) as {model.role}")
    finally:
        dd.finalize()


@pytest.mark.rules("§10.3", "§10.7", "§10.8", "X-12", "X-13", "X-24")
def test_switch_role_is_exist_link_while_a_link_lives_and_unlink_needs_only_a_listener(env: Env) -> None:
    """With a peer process listening (v2): a non-forced unlink of a cluster never linked
    is SUCCESS once its listener is reachable (docs/reference/semantics.md §10.3); while the link lives,
    ``switch_role`` is ``LLM_EXIST_LINK`` (semantics.md §10.7) whatever the role; a non-forced unlink
    drops both sides (semantics.md §10.3), after which both engines switch roles."""
    import vendor_support as vs

    env.stop()                                    # V-1: one engine per process
    port = vs.free_port()
    dd = LLMDataDist(LLMRole.DECODER, CLUSTER)
    dd.init({"llm.EnableCacheManager": "1", "llm.EnableRemoteCacheAccessible": "1", "ge.exec.deviceId": "0"})
    try:
        with vs.Peer() as peer:
            peer.run(f"p = LLMDataDist(LLMRole.PROMPT, 1); p.init(support.v2_options({port}))")
            assert dd.unlink_clusters([vs.cluster_info(1, port)], 3000) == (S.LLM_SUCCESS, [S.LLM_SUCCESS])
            assert dd.link_clusters([vs.cluster_info(1, port)], 3000) == (S.LLM_SUCCESS, [S.LLM_SUCCESS])
            for role in (LLMRole.DECODER, LLMRole.PROMPT):
                got = role_outcome(lambda: dd.switch_role(role))
                assert got[:2] == ("LX", S.LLM_EXIST_LINK), f"switch_role({role}) with a live link: {got}"
            assert peer.error("p.switch_role(LLMRole.MIX)").status == int(S.LLM_EXIST_LINK)
            assert dd.unlink_clusters([vs.cluster_info(1, port)], 3000, force=False) == \
                (S.LLM_SUCCESS, [S.LLM_SUCCESS])
            dd.switch_role(LLMRole.PROMPT)
            peer.run(f"p.switch_role(LLMRole.MIX, {{'llm.listenIpInfo': '127.0.0.1:{port}'}}); p.finalize()")
    finally:
        dd.finalize()


@pytest.mark.rules("python-api §11.7", "V-12")
@settings(max_examples=settings.default.max_examples * 2)
@given(mode=st.sampled_from(["v2-direct-pools", "v2-server-pool"]), data=st.data(), seed=st.integers(0, 2**32 - 1))
def test_remap_registered_memory_agrees_with_the_oracle(env: Env, mode: str, data: st.DataObject, seed: int) -> None:
    """``remap_registered_memory`` (python-api.md §11.7): the vendor's LX checks, V-12's conversion, then
    the core: an empty list ``LLM_PARAM_INVALID``, otherwise ``LLM_NOT_YET_LINK`` (one engine
    has no link); nothing in memory changes."""
    env.start(mode, np.random.default_rng(seed))
    try:
        base = env.addrs["c"][1]                      # tensor 1 of the registered cache "c" (128 bytes)
        pool_base = env.addrs["ac"][0]                # an allocated tensor: not registered memory
        mems = st.one_of(
            st.builds(lambda off, size: Mem(True, base + off, size, off + size <= 128), st.integers(0, 127),
                      st.integers(1, 130)),
            st.builds(lambda size: Mem(True, pool_base, size), st.integers(1, 64)),
            st.sampled_from([Mem(False, base, 8, True), Mem(True, 0, 8), Mem(True, base, 0, True),
                             Mem(True, base, -1, True), Mem(True, base, None), Mem(True, None, 8)]))
        mem_infos = data.draw(st.one_of(mems, st.lists(mems, max_size=3),
                                        st.sampled_from([(), None, "m", [Mem(True, base, 8, True), 3]])),
                              label="mem_infos")
        verdict = remap_registered_memory(env.mode, mem_infos)

        def build(m: Any) -> Any:
            if isinstance(m, Mem):
                return MemInfo(Memtype.MEM_TYPE_DEVICE if m.device else Memtype.MEM_TYPE_HOST, m.addr, m.size)
            return m
        real = [build(m) for m in mem_infos] if isinstance(mem_infos, list) else build(mem_infos)
        assert_agrees(verdict, outcome_of(lambda: env.manager.remap_registered_memory(real)),
                      f"remap_registered_memory({mem_infos})")
        env.check_memory()
    finally:
        env.stop()


# ---- transfer_cache_async without a peer (docs/reference/python-api.md §11.4, V-9) --------------------------------

class _Ready(LayerSynchronizer):
    def synchronize_layer(self, layer_index: int, timeout_in_millis: Any) -> bool:
        return True


def _config(c: Cfg, env: Env) -> Any:
    if c.key is None:
        return TransferConfig(c.dst_cluster_id, [4096 * (i + 1) for i in range(c.addrs)], c.src_layer_range,
                              c.src_batch_index)
    return TransferWithCacheKeyConfig(env.build(c.key), c.src_layer_range, c.dst_layer_range, c.src_batch_index)


@pytest.mark.rules("§2.6", "§4.3", "§7.1", "§7.2", "§8.7", "python-api §14", "PR-5", "PR-25", "PR-40", "V-9")
@settings(max_examples=settings.default.max_examples * 3)
@given(mode=st.sampled_from(["v2-direct-pools", "v2-server-pool"]), data=st.data(), seed=st.integers(0, 2**32 - 1))
def test_transfer_cache_async_agrees_with_the_oracle(env: Env, mode: str, data: st.DataObject, seed: int) -> None:
    """``transfer_cache_async``'s checks in the vendor's order (python-api.md §11.4 steps 1–10, V-9, PR-5),
    and, for a call that passes them, the task's ``synchronize()`` and ``get_results()``
    without a link: the first covered layer's config fails and the thread stops (semantics.md §8.7)."""
    env.start(mode, np.random.default_rng(seed))
    try:
        refs = env.checks.refs
        ranges = st.sampled_from([None, range(0, 1), range(1, 2), range(0, 2)])
        if env.mode.direct:
            keys = st.one_of(by_id_key(), blocks_key())
            cfg = st.builds(lambda k, r, b: Cfg(key=k, src_layer_range=r or range(0, 1),
                                                dst_layer_range=r or range(0, 1),
                                                src_batch_index=0 if k.kind == "BlocksCacheKey" else b),
                            keys, ranges, st.sampled_from([0, 0, 1, 5]))
        else:
            cfg = st.builds(lambda c, n, r, b: Cfg(dst_cluster_id=c, addrs=n, src_layer_range=r, src_batch_index=b),
                            st.sampled_from([1, 2, CLUSTER]), st.sampled_from([2, 2, 4, 3]), ranges,
                            st.sampled_from([0, 0, 1, 5]))
        src = data.draw(st.one_of(refs_of(env, "c", "c", "c2", "b"), st.sampled_from([refs["hb"], None, "c"])),
                        label="src_cache")
        sync = data.draw(st.sampled_from(["SYNC", "SYNC", "SYNC", None, "sync"]), label="layer_synchronizer")
        configs = data.draw(st.one_of(st.lists(cfg, min_size=1, max_size=3), st.lists(cfg, max_size=2).map(tuple),
                                      st.sampled_from([None, [Cfg(key=None)], [Cfg(key=Key("BlocksCacheKey"),
                                                       src_layer_range=range(0, 1), dst_layer_range=range(0, 1))]])),
                            label="transfer_configs")
        # block lists: none, empty, or flawed (the Python checks decide); the C2B and B2B forms'
        # own engine rules (PR-16, semantics.md §7.5) are not modelled without a peer
        blocks = st.one_of(st.none(), st.none(), st.just([]), st.sampled_from([[0, -1], [U64 + 1], "1", [1, 1]]))
        src_blocks = data.draw(blocks, label="src_block_indices")
        dst_blocks = data.draw(blocks, label="dst_block_indices")
        block_size = data.draw(st.sampled_from([None, None, 0, 16, -1, "16"]), label="dst_block_memory_size")
        verdict = transfer_cache_async(env.mode, src, sync, configs, src_blocks, dst_blocks, block_size)
        real_configs = type(configs)(_config(c, env) if isinstance(c, Cfg) else c for c in configs) \
            if isinstance(configs, (list, tuple)) else configs
        real_sync = _Ready() if sync == "SYNC" else sync
        got = outcome_of(lambda: env.manager.transfer_cache_async(env.build(src), real_sync, real_configs, src_blocks,
                                                                  dst_blocks, block_size))
        what = f"transfer_cache_async({src}, {sync}, {configs}, {src_blocks}, {dst_blocks}, {block_size})"
        if verdict.kind != "core":
            assert_agrees(verdict, got, what)
        else:
            assert got[0] == "ok", f"{what}: expected a task, got {got}"
            task = got[1]
            assert (task.synchronize(), task.get_results()) == verdict.value, what
        env.check_memory()
    finally:
        env.stop()


def refs_of(env: Env, *names: str) -> st.SearchStrategy[Any]:
    return st.sampled_from([env.checks.refs[n] for n in names])


@pytest.mark.rules("§4.1", "§4.2", "PR-2", "V-5")
def test_pull_ranges_are_checked_one_after_the_other(env: Env) -> None:
    """Found by the thorough profile: ``src_layer_range=range(2**32, 2**32 + 1)`` (V: not
    uint32) with an empty ``dst_layer_range`` (PR-2) is the ValueError: the oracle had put
    PR-2 of both ranges first; the conversion checks src completely, then dst."""
    env.start("v2-direct-nopool", np.random.default_rng(3))
    try:
        args = [Key("CacheKeyByIdAndIndex", 1, cache_id=1), env.checks.refs["c"]]
        kwargs = {"src_layer_range": range(2**32, 2**32 + 1), "dst_layer_range": range(2, 2)}
        assert env.checks.run("pull_cache", *args, **kwargs).kind == "V"
        one_call(env, "pull_cache", args, kwargs, record=False)
    finally:
        env.stop()
