"""Pulls and pushes of the mock engine (docs/reference/cpp-api.md §6.10-6.11, docs/reference/semantics.md §4-§9, §15):
the check order of semantics.md §8.0, exact bytes against numpy, the table copy of semantics.md §9.7 with PR-7
and PR-32, timeouts (PR-31, PR-35), in one process and between processes over both
data paths (process_vm_readv/writev and the socket fall-back)."""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import numpy as np
import pytest

from llm_datadist_ffi import LLMException
from llm_datadist_ffi import LLMStatusCode as S
from llm_datadist_ffi import lint, mock_control, native
from llm_datadist_ffi.native import Cache, CacheDesc, CacheIndex, KvCacheExtParam
from lint_support import lenient, mode_for, strict
import engine_support as sup


raw = sup.Raw()

P, NX, NL, T = S.LLM_PARAM_INVALID, S.LLM_KV_CACHE_NOT_EXIST, S.LLM_NOT_YET_LINK, S.LLM_TIMEOUT
Engines = Callable[..., native.LlmDataDist]


@dataclass
class World:
    """Cluster 1 (server, listening) and cluster 2 (client), linked by the client, with
    caches registered before the link: ``s[i]``/``c[i]`` are the arrays of cache
    ``sid[i]``/``cid[i]``."""

    server: native.LlmDataDist
    client: native.LlmDataDist
    s: list[list[np.ndarray]] = field(default_factory=list)
    c: list[list[np.ndarray]] = field(default_factory=list)
    sid: list[int] = field(default_factory=list)
    cid: list[int] = field(default_factory=list)

    def snapshot(self) -> list[np.ndarray]:
        return [a.copy() for arrays in self.s + self.c for a in arrays]

    def unchanged(self, snap: list[np.ndarray]) -> bool:
        now = [a for arrays in self.s + self.c for a in arrays]
        return all((a == b).all() for a, b in zip(now, snap))


Shape = tuple[int, ...]


@pytest.fixture
def world(engines: Engines) -> Callable[..., World]:
    def make(server: list[tuple[int, Shape]], client: list[tuple[int, Shape]], options: dict[str, str] | None = None,
             link: bool = True) -> World:
        w = World(engines(1, listen=True, options=options), engines(2, options=options or {}, device_id=1))
        for k, (n, shape) in enumerate(server):
            w.s.append(sup.random_arrays(n, shape, 100 + k))
            w.sid.append(sup.register(w.server, w.s[-1]))
        for k, (n, shape) in enumerate(client):
            w.c.append([np.zeros(shape, np.uint8) for _ in range(n)])
            w.cid.append(sup.register(w.client, w.c[-1]))
        if link:
            assert w.client.link_llm_clusters([sup.cluster(1, w.server.listen_port)])[0] == S.LLM_SUCCESS
        return w
    return make


# ---- contiguous pulls -----------------------------------------------------------------------

@pytest.mark.rules("§2.2", "§8.2", "§8.3", "§8.5", "§8.6")
def test_pull_kv_cache_moves_one_destination_stride_per_tensor(world: Callable[..., World]) -> None:
    w = world([(4, (5, 32))], [(4, (3, 32))])
    w.client.pull_kv_cache(CacheIndex(1, w.sid[0], 4), Cache(w.cid[0]), batch_index=2)
    for src, dst in zip(w.s[0], w.c[0]):
        expected = np.zeros((3, 32), np.uint8)
        expected[2] = src[4]
        assert (dst == expected).all()


@pytest.mark.rules("§6.1")
def test_pull_kv_cache_with_a_size_moves_that_many_bytes(world: Callable[..., World]) -> None:
    w = world([(2, (2, 16))], [(2, (2, 16))])
    w.client.pull_kv_cache(CacheIndex(1, w.sid[0], 1), Cache(w.cid[0]), batch_index=0, size=5)
    for src, dst in zip(w.s[0], w.c[0]):
        assert (dst[0, :5] == src[1, :5]).all() and (dst[0, 5:] == 0).all() and (dst[1] == 0).all()


@pytest.mark.rules("§1.5", "§6.2", "PR-6")
def test_pull_kv_cache_addresses_the_source_batch_with_the_destination_stride(world: Callable[..., World]) -> None:
    # PR-6, as the device: source batch b starts at b x S_dst in the source tensor
    w = world([(2, (4, 48))], [(2, (2, 16))])        # source stride 48, destination stride 16
    w.client.pull_kv_cache(CacheIndex(1, w.sid[0], 3), Cache(w.cid[0]), batch_index=1)
    for src, dst in zip(w.s[0], w.c[0]):
        assert (dst[1] == src.reshape(-1)[48:64]).all() and (dst[0] == 0).all()


@pytest.mark.rules("§6.2", "PR-6")
def test_pull_kv_cache_with_a_larger_destination_stride_reads_a_later_source_batch(
        world: Callable[..., World]) -> None:
    w = world([(2, (4, 16))], [(2, (2, 32))])        # source stride 16, destination stride 32
    w.client.pull_kv_cache(CacheIndex(1, w.sid[0], 1), Cache(w.cid[0]), batch_index=0, size=16)
    for src, dst in zip(w.s[0], w.c[0]):
        assert (dst[0, :16] == src[2]).all() and (dst[0, 16:] == 0).all() and (dst[1] == 0).all()


@pytest.mark.rules("§4.1")
def test_pull_kv_cache_with_layer_ranges_pairs_the_selected_tensors(world: Callable[..., World]) -> None:
    w = world([(6, (2, 8))], [(4, (2, 8))])
    ext = KvCacheExtParam((1, 2), (0, 1), 2)            # source tensors 2..5 -> destination 0..3
    w.client.pull_kv_cache(CacheIndex(1, w.sid[0], 1), Cache(w.cid[0]), 0, -1, ext)
    for i in range(4):
        assert (w.c[0][i][0] == w.s[0][i + 2][1]).all() and (w.c[0][i][1] == 0).all()
    ext = KvCacheExtParam((0, 0), (1, 1), 1)            # tensor 0 -> tensor 1
    w.client.pull_kv_cache(CacheIndex(1, w.sid[0], 0), Cache(w.cid[0]), 1, -1, ext)
    assert (w.c[0][1][1] == w.s[0][0][0]).all()


PULL_CACHE_CASES = [
    # (label, kwargs of raw.pull_cache over the defaults below, status, words in the message)
    ("own cluster", dict(cluster=2, dst=99), P, "own cluster"),
    ("unknown local cache", dict(dst=99), NX, "dst_cache.cache_id 99"),
    ("batch past the local cache", dict(batch=2, cluster=3), P, "batch_index 2"),
    ("size larger than the local stride", dict(size=33), P, "size 33"),
    ("size 0", dict(size=0), P, "size 0"),
    ("n not dividing the local tensor count with a range", dict(ext=((0, 0), (0, 0), 3)), P, "divide"),
    ("destination range past the local cache", dict(ext=((0, 1), (1, 2), 2)), P, "dst_layer_range"),
    ("ranges of different lengths", dict(ext=((0, 1), (0, 0), 2)), P, "selects"),
    ("no link", dict(cluster=3), NL, "not linked"),
    ("unknown remote cache", dict(src=99), NX, "cache 99"),
    ("remote cache id 0", dict(src=0), NX, "PR-20"),
    ("remote cache id -1", dict(src=-1), NX, "PR-20"),
    ("source batch past the remote cache", dict(src_batch=5), NX, "PR-6"),
    ("more bytes than the source stride", dict(src=2), P, "source stride"),
    ("the source batch at the destination stride past the source tensor", dict(src=2, src_batch=3, size=16), P,
     "PR-6"),
    ("different tensor counts without ranges", dict(src=3), P, "tensors"),
    ("source range past the remote cache", dict(ext=((1, 2), (0, 1), 2)), P, "PR-12"),
    ("source first below -1", dict(ext=((-2, 1), (0, 1), 2)), P, "src_layer_range"),
    ("source first above second", dict(ext=((2, 1), (0, 1), 2)), P, "src_layer_range"),
    ("destination first below -1", dict(ext=((0, 1), (-2, 1), 2)), P, "dst_layer_range"),
    ("destination first above second", dict(ext=((0, 1), (1, 0), 2)), P, "dst_layer_range"),
    ("n = 0", dict(ext=((-1, -1), (-1, -1), 0)), P, "tensor_num_per_layer"),
    ("n = 256", dict(ext=((-1, -1), (-1, -1), 256)), P, "uint8_t"),
    ("only one default pair", dict(ext=((0, 0), (-1, -1), 2)), P, "PR-1"),
    ("pair {-1, s}", dict(ext=((-1, 1), (0, 1), 2)), P, "PR-11"),
    ("layer pairs at the int32 maximum", dict(ext=((0, 2**31 - 1), (0, 2**31 - 1), 2)), P, "dst_layer_range"),
    # check order (docs/reference/semantics.md §8.0)
    ("own cluster before the local cache", dict(cluster=2, dst=99, size=0), P, "size 0"),
    ("local batch before the link", dict(cluster=3, batch=7), P, "batch_index 7"),
    ("the link before the remote cache", dict(cluster=3, src=99), NL, "not linked"),
    ("the remote cache before its batch", dict(src=99, src_batch=9), NX, "cache 99"),
    ("the source batch before the source stride", dict(src=2, src_batch=9), NX, "PR-6"),
    ("the source stride before the source tensor's end", dict(src=2, src_batch=3), P, "source stride"),
    # API-layer order (docs/reference/cpp-api.md §6.10 PullKvCache)
    ("size before the layer ranges", dict(size=0, ext=((2, 1), (0, 0), 2)), P, "size 0"),
    ("API checks before the engine's", dict(cluster=2, ext=((2, 1), (0, 0), 2)), P, "src_layer_range"),
]


@pytest.mark.rules("§4.2", "§4.4", "§4.5", "§5", "§6.1", "§6.2", "§8.0", "§8.1", "§8.12", "§9.4", "cpp-api §6.10",
                   "PR-1", "PR-3", "PR-6", "PR-11", "PR-12", "PR-20", "N-3")
@pytest.mark.parametrize("label,args,status,words", PULL_CACHE_CASES, ids=[c[0] for c in PULL_CACHE_CASES])
def test_pull_kv_cache_checks(world: Callable[..., World], monkeypatch: pytest.MonkeyPatch, label: str, args: dict[str, Any], status: int,
                              words: str) -> None:
    mode_for(monkeypatch, words)
    # remote 1: 4 x (5, 32); remote 2: 4 x (5, 16) (smaller stride); remote 3: 2 x (5, 32); local: 4 x (2, 32)
    w = world([(4, (5, 32)), (4, (5, 16)), (2, (5, 32))], [(4, (2, 32))])
    call = dict(cluster=1, src=w.sid[0], dst=w.cid[0], src_batch=0, batch=0, size=-1, ext=None)
    call.update(args)
    ext = call.pop("ext")
    snap = w.snapshot()
    src = {1: w.sid[0], 2: w.sid[1], 3: w.sid[2]}.get(call["src"], call["src"]) if "src" in args else call["src"]
    got = raw.pull_cache(w.client, call["cluster"], src, call["dst"], call["src_batch"], call["batch"], call["size"],
                         raw.ext(*ext) if ext else None)
    assert got == status, raw.last_error()
    assert words in raw.last_error()
    assert w.unchanged(snap)


@pytest.mark.rules("§2.1", "§2.5")
def test_transfers_compare_byte_sizes_not_data_types_or_shapes(engines: Engines) -> None:
    # semantics.md §2.1: a FLOAT16 cache of shape (3, 4, 2) and a UINT8 cache of shape (2, 16) both have
    # 16-byte batches; semantics.md §2.5: a pull reads only dst_cache.cache_id, a push only the
    # placement and num_tensors of src_cache.cache_desc
    server, client = engines(1, listen=True), engines(2, options={}, device_id=1)
    half = sup.random_arrays(2, (48,), 7)
    byte = [np.zeros((2, 16), np.uint8) for _ in range(2)]
    hid = server.register_kv_cache(sup.desc(2, [3, 4, 2], dtype=int(native.GeDataType.DT_FLOAT16)),
                                   [a.ctypes.data for a in half])
    bid = sup.register(client, byte)
    assert client.link_llm_clusters([sup.cluster(1, server.listen_port)])[0] == S.LLM_SUCCESS
    misleading = Cache(bid, [16, 32, 48], CacheDesc(7, native.GeDataType.DT_INT4, [9, 9], native.CachePlacement.HOST))
    client.pull_kv_cache(CacheIndex(1, hid, 2), misleading, batch_index=1)
    for h, b in zip(half, byte):
        assert (b[1] == h[32:48]).all() and (b[0] == 0).all()
    b_before = [b.copy() for b in byte]
    for b in byte:
        b[0] = 200
    caller = Cache(bid, [1], CacheDesc(2, native.GeDataType.DT_INT64, [5, 5, 5]))
    client.push_kv_cache(caller, CacheIndex(1, hid, 0), src_batch_index=0)
    for h, b in zip(half, b_before):
        assert (h[:16] == 200).all() and (h[32:48] == b[1]).all()


# ---- block pulls -----------------------------------------------------------------------------

@pytest.mark.rules("§2.2", "§7.4", "§8.2", "§8.3", "§8.5", "§8.6", "PR-5")
def test_pull_kv_blocks_copies_each_pair_with_runs_coalesced(world: Callable[..., World]) -> None:
    w = world([(4, (16, 24))], [(4, (10, 24))])
    src_blocks = [3, 4, 5, 9, 9, 0, 15, 1, 2]
    dst_blocks = [0, 1, 2, 3, 4, 9, 8, 6, 7]
    w.client.pull_kv_blocks(CacheIndex(1, w.sid[0]), Cache(w.cid[0]), src_blocks, np.array(dst_blocks))
    for src, dst in zip(w.s[0], w.c[0]):
        expected = np.zeros((10, 24), np.uint8)
        expected[dst_blocks] = src[src_blocks]
        assert (dst == expected).all()


@pytest.mark.rules("§4.1")
def test_pull_kv_blocks_with_layer_ranges(world: Callable[..., World]) -> None:
    w = world([(4, (8, 8))], [(6, (8, 8))])
    ext = KvCacheExtParam((1, 1), (2, 2), 2)           # source tensors 2, 3 -> destination 4, 5
    w.client.pull_kv_blocks(CacheIndex(1, w.sid[0]), Cache(w.cid[0]), [7, 6], [0, 1], ext)
    for i in range(6):
        expected = np.zeros((8, 8), np.uint8)
        if i >= 4:
            expected[[0, 1]] = w.s[0][i - 2][[7, 6]]
        assert (w.c[0][i] == expected).all()


PULL_BLOCKS_CASES = [
    ("source batch index not 0", dict(src_batch=1), P, "batch_index 1"),
    ("empty lists", dict(sblk=[], dblk=[]), P, "not supported"),
    ("lists of different lengths", dict(sblk=[0, 1], dblk=[0]), P, "src_blocks has 2"),
    ("repeated destination block", dict(sblk=[0, 1, 2], dblk=[3, 4, 3]), P, "PR-5"),
    ("destination block past the local cache", dict(sblk=[0, 1], dblk=[6, 7]), P, "dst_blocks[1] = 7"),
    ("source block past the remote cache", dict(sblk=[15, 16], dblk=[0, 1]), P, "src_blocks[1] = 16"),
    ("different block sizes", dict(src=2), P, "PR-13"),
    ("no link", dict(cluster=3), NL, "not linked"),
    ("unknown remote cache", dict(src=99), NX, "cache 99"),
    # check order (docs/reference/semantics.md §8.0)
    ("the link before repeated destinations", dict(cluster=3, sblk=[0, 0], dblk=[1, 1]), NL, "not linked"),
    ("repeated destinations before the remote cache", dict(src=99, sblk=[0, 0], dblk=[1, 1]), P, "PR-5"),
    ("the remote cache before source blocks", dict(src=99, sblk=[99], dblk=[1]), NX, "cache 99"),
    ("source blocks before block sizes", dict(src=2, sblk=[20], dblk=[1]), P, "src_blocks[0] = 20"),
    ("only one default pair", dict(ext=((0, 0), (-1, -1), 2)), P, "PR-1"),
    ("pair {-1, s}", dict(ext=((0, 0), (-1, 0), 2)), P, "PR-11"),
    # API-layer order (docs/reference/cpp-api.md §6.10 PullKvBlocks)
    ("the source batch before the layer ranges", dict(src_batch=1, ext=((1, 0), (0, 0), 2)), P, "batch_index 1"),
    ("the layer ranges before empty lists", dict(sblk=[], dblk=[], ext=((1, 0), (0, 0), 2)), P,
     "src_layer_range"),
    ("an empty source list before the lengths", dict(sblk=[], dblk=[0]), P, "not supported"),
    ("API checks before the engine's", dict(cluster=2, src_batch=1), P, "batch_index 1"),
]


@pytest.mark.rules("§4.4", "§5", "§6.2", "§7.1", "§7.2", "§7.3", "§7.4", "§7.5", "§8.0", "§8.12", "cpp-api §6.10",
                   "PR-1", "PR-3", "PR-4", "PR-5", "PR-11", "PR-13")
@pytest.mark.parametrize("label,args,status,words", PULL_BLOCKS_CASES, ids=[c[0] for c in PULL_BLOCKS_CASES])
def test_pull_kv_blocks_checks(world: Callable[..., World], monkeypatch: pytest.MonkeyPatch, label: str, args: dict[str, Any], status: int,
                               words: str) -> None:
    mode_for(monkeypatch, words)
    # remote 1: 2 x (16, 8); remote 2: 2 x (16, 4); local: 2 x (7, 8)
    w = world([(2, (16, 8)), (2, (16, 4))], [(2, (7, 8))])
    call = dict(cluster=1, src=1, sblk=[0, 1], dblk=[0, 1], src_batch=0, ext=None)
    call.update(args)
    src = {1: w.sid[0], 2: w.sid[1]}.get(call["src"], call["src"])
    ext = call["ext"]
    snap = w.snapshot()
    got = raw.pull_blocks(w.client, call["cluster"], src, w.cid[0], call["sblk"], call["dblk"],
                          raw.ext(*ext) if ext else None, src_batch=call["src_batch"])
    assert got == status, raw.last_error()
    assert words in raw.last_error()
    assert w.unchanged(snap)


@pytest.mark.rules("E-13", "§15")
def test_pull_requests_are_limited_to_131064_entries(world: Callable[..., World]) -> None:
    n = 65532
    w = world([(2, (2 * n, 1))], [(2, (2 * n, 1))])
    # E = tensors + 2 x runs: 2 + 2 x 65531 fits, 2 + 2 x 65532 does not
    every_other = np.arange(0, 2 * n, 2, dtype=np.uint64)
    w.client.pull_kv_blocks(CacheIndex(1, w.sid[0]), Cache(w.cid[0]), every_other[:-1], every_other[:-1])
    for src, dst in zip(w.s[0], w.c[0]):
        assert (dst[every_other[:-1].astype(np.int64)] == src[every_other[:-1].astype(np.int64)]).all()
    assert raw.pull_blocks(w.client, 1, w.sid[0], w.cid[0], every_other.tolist(), every_other.tolist()) == P
    assert "131064" in raw.last_error()


@pytest.mark.rules("E-13", "§8.2", "§8.3", "§8.5", "§8.6")
def test_block_lists_of_100000_entries_work(world: Callable[..., World]) -> None:
    n = 100_000
    w = world([(2, (n, 4)), (2, (n, 4))], [(2, (n, 4)), (2, (n, 4))])
    blocks = np.arange(n, dtype=np.uint64)
    w.client.pull_kv_blocks(CacheIndex(1, w.sid[0]), Cache(w.cid[0]), blocks, blocks)
    for src, dst in zip(w.s[0], w.c[0]):
        assert (dst == src).all()
    shuffled = np.random.default_rng(1).permutation(n).astype(np.uint64)
    w.client.push_kv_blocks(Cache(w.cid[0], cache_desc=CacheDesc(2, 4, [1])), CacheIndex(1, w.sid[1]),
                            blocks, shuffled)
    for src, dst in zip(w.c[0], w.s[1]):
        assert (dst[shuffled.astype(np.int64)] == src).all()


@pytest.mark.rules("§8.2", "§8.3", "§8.5", "§8.6")
def test_large_transfers_with_unaligned_odd_sized_blocks_move_exact_bytes(world: Callable[..., World]) -> None:
    # over 4 MiB in one call: the in-process path streams the regions past the cache
    block = 40003
    w = world([(4, (64, block))], [(4, (64, block))])
    src_blocks = list(range(1, 64, 2))
    dst_blocks = list(range(0, 64, 2))
    w.client.pull_kv_blocks(CacheIndex(1, w.sid[0]), Cache(w.cid[0]), src_blocks, dst_blocks)
    for src, dst in zip(w.s[0], w.c[0]):
        expected = np.zeros((64, block), np.uint8)
        expected[dst_blocks] = src[src_blocks]
        assert (dst == expected).all()
    w.client.push_kv_blocks(Cache(w.cid[0], cache_desc=CacheDesc(4, 4, [1])), CacheIndex(1, w.sid[0]),
                            list(range(64)), list(range(63, -1, -1)))
    for src, dst in zip(w.c[0], w.s[0]):
        assert (dst == src[::-1]).all()


# ---- the table copy (semantics.md §9.7), PR-7, PR-32 --------------------------------------------------------

@pytest.mark.rules("E-11", "E-10", "§3.2", "§9.7", "PR-32")
def test_caches_registered_on_the_peer_after_the_link(world: Callable[..., World]) -> None:
    w = world([(2, (2, 8))], [(2, (2, 8))])
    late = sup.random_arrays(2, (2, 8), 5)
    late_id = sup.register(w.server, late)
    # the first transfer takes the table copy, which has the cache: it was registered after the link
    assert sup.status_of(w.client.pull_kv_cache, CacheIndex(1, late_id), Cache(w.cid[0])) == P
    assert "PR-32" in raw.last_error()
    later = sup.random_arrays(2, (2, 8), 6)
    later_id = sup.register(w.server, later)
    assert sup.status_of(w.client.pull_kv_cache, CacheIndex(1, later_id), Cache(w.cid[0])) == NX
    assert "§9.7" in raw.last_error()
    w.client.pull_kv_cache(CacheIndex(1, w.sid[0]), Cache(w.cid[0]))          # the old cache still works
    # a new link takes a new table copy: every cache registered before it is reachable
    assert w.client.unlink_llm_clusters([sup.cluster(1, w.server.listen_port)])[0] == S.LLM_SUCCESS
    assert w.client.link_llm_clusters([sup.cluster(1, w.server.listen_port)])[0] == S.LLM_SUCCESS
    w.client.pull_kv_cache(CacheIndex(1, later_id, 1), Cache(w.cid[0]))
    assert all((d[0] == s[1]).all() for d, s in zip(w.c[0], later))


@pytest.mark.rules("E-11", "§3.2", "PR-32")
def test_a_local_cache_registered_after_the_link_is_not_reachable(world: Callable[..., World]) -> None:
    w = world([(2, (2, 8))], [])
    local = [np.zeros((2, 8), np.uint8) for _ in range(2)]
    lid = sup.register(w.client, local)
    assert sup.status_of(w.client.pull_kv_cache, CacheIndex(1, w.sid[0]), Cache(lid)) == P
    assert "local cache" in raw.last_error() and "PR-32" in raw.last_error()
    assert sup.status_of(w.client.push_kv_cache, Cache(lid, cache_desc=CacheDesc(2, 4, [1])),
                         CacheIndex(1, w.sid[0])) == P
    assert (local[0] == 0).all()


@pytest.mark.rules("E-10", "§3.2", "§9.7", "PR-32")
def test_a_push_to_a_peer_cache_registered_after_the_link_is_refused(world: Callable[..., World]) -> None:
    w = world([(2, (2, 8))], [(2, (2, 8))])
    for a in w.c[0]:
        a[:] = 9
    late = [np.zeros((2, 8), np.uint8) for _ in range(2)]
    late_id = sup.register(w.server, late)
    assert sup.status_of(w.client.push_kv_cache, push_src(w.cid[0], 2), CacheIndex(1, late_id)) == P
    assert "PR-32" in raw.last_error() and "on cluster 1" in raw.last_error()
    assert sup.status_of(w.client.push_kv_blocks, push_src(w.cid[0], 2), CacheIndex(1, late_id), [0], [1]) == P
    assert "PR-32" in raw.last_error()
    assert all((a == 0).all() for a in late)
    # that first push took the table copy (semantics.md §9.7): a cache registered after it is not found
    later = sup.register(w.server, [np.zeros((2, 8), np.uint8) for _ in range(2)])
    assert sup.status_of(w.client.push_kv_cache, push_src(w.cid[0], 2), CacheIndex(1, later)) == NX
    assert "§9.7" in raw.last_error()
    # a new link: the cache predates it and the same push lands
    assert w.client.unlink_llm_clusters([sup.cluster(1, w.server.listen_port)])[0] == S.LLM_SUCCESS
    assert w.client.link_llm_clusters([sup.cluster(1, w.server.listen_port)])[0] == S.LLM_SUCCESS
    w.client.push_kv_cache(push_src(w.cid[0], 2), CacheIndex(1, late_id, 1))
    assert all((a[1] == 9).all() and (a[0] == 0).all() for a in late)


@pytest.mark.rules("§3.2", "§9.7", "PR-32")
@pytest.mark.mock_only(reason="pool-backed AllocateCache/DeallocateCache/CopyKv* (PR-9): the vendor's C++ class answers FEATURE_NOT_ENABLED")
def test_allocated_caches_are_reachable_whatever_their_age(world: Callable[..., World]) -> None:
    pool = {native.OPTION_MOCK_NATIVE_POOL: "1", native.OPTION_MEM_POOL_CONFIG: '{"memory_size": 65536, "page_shift": 10}'}
    w = world([], [(2, (2, 8))], options=pool)
    fresh = w.server.allocate_cache(CacheDesc(2, 4, [2, 8]))
    for i, addr in enumerate(fresh.tensor_addrs):
        raw.ffi.memmove(raw.ffi.cast("char *", addr), bytes([i + 1]) * 16, 16)
    w.client.pull_kv_cache(CacheIndex(1, fresh.cache_id, 1), Cache(w.cid[0]))
    assert (w.c[0][0][0] == 1).all() and (w.c[0][1][0] == 2).all()
    after_copy = w.server.allocate_cache(CacheDesc(2, 4, [2, 8]))
    assert sup.status_of(w.client.pull_kv_cache, CacheIndex(1, after_copy.cache_id), Cache(w.cid[0])) == NX


@pytest.mark.rules("E-10", "§9.7", "PR-7")
def test_a_peer_cache_that_is_gone_is_never_touched(world: Callable[..., World]) -> None:
    w = world([(2, (2, 8)), (2, (2, 8))], [(2, (2, 8))])
    w.client.pull_kv_cache(CacheIndex(1, w.sid[0]), Cache(w.cid[0]))            # table copy taken
    w.server.unregister_kv_cache(w.sid[1])
    snap = w.snapshot()
    assert sup.status_of(w.client.pull_kv_cache, CacheIndex(1, w.sid[1]), Cache(w.cid[0])) == NX
    assert "PR-7" in raw.last_error()
    assert sup.status_of(w.client.push_kv_blocks, Cache(w.cid[0], cache_desc=CacheDesc(2, 4, [1])),
                         CacheIndex(1, w.sid[1]), [0], [0]) == NX
    assert w.unchanged(snap)


@pytest.mark.rules("§9.7", "PR-7")
@pytest.mark.mock_only(reason="pool-backed AllocateCache/DeallocateCache/CopyKv* (PR-9): the vendor's C++ class answers FEATURE_NOT_ENABLED")
def test_deallocation_during_transfers_is_safe(world: Callable[..., World]) -> None:
    pool = {native.OPTION_MOCK_NATIVE_POOL: "1", native.OPTION_MEM_POOL_CONFIG: '{"memory_size": 1048576, "page_shift": 12}'}
    w = world([], [(2, (4, 4096))], options=pool, link=False)
    caches = [w.server.allocate_cache(CacheDesc(2, 4, [4, 4096])) for _ in range(4)]
    assert w.client.link_llm_clusters([sup.cluster(1, w.server.listen_port)])[0] == S.LLM_SUCCESS
    seen: set[int] = set()
    stop = threading.Event()

    def puller() -> None:
        while not stop.is_set():
            for cache in caches:
                seen.add(sup.status_of(w.client.pull_kv_blocks, CacheIndex(1, cache.cache_id),
                                       Cache(w.cid[0]), [0, 1, 2, 3], [0, 1, 2, 3]))

    threads = [threading.Thread(target=puller) for _ in range(2)]
    for t in threads:
        t.start()
    for cache in caches:
        w.server.deallocate_cache(cache.cache_id)
    stop.set()
    for t in threads:
        t.join()
    assert seen <= {S.LLM_SUCCESS, NX}
    for cache in caches:
        assert sup.status_of(w.client.pull_kv_blocks, CacheIndex(1, cache.cache_id), Cache(w.cid[0]),
                             [0], [0]) == NX


# ---- pushes --------------------------------------------------------------------------------

def push_src(cache_id: int, num_tensors: int) -> Cache:
    return Cache(cache_id, cache_desc=CacheDesc(num_tensors, 4, [1]))


@pytest.mark.rules("§4.4", "§6.5", "cpp-api §6.11")
def test_push_kv_cache_writes_every_layer_by_default(world: Callable[..., World]) -> None:
    w = world([(4, (3, 16))], [(4, (2, 8))])
    for i, a in enumerate(w.c[0]):
        a[:] = i + 1
    w.client.push_kv_cache(push_src(w.cid[0], 4), CacheIndex(1, w.sid[0], 2), src_batch_index=1)
    original = sup.random_arrays(4, (3, 16), 100)
    for i, dst in enumerate(w.s[0]):
        expected = original[i].copy()
        expected[2, :8] = i + 1                 # one source stride (8 bytes) into batch 2
        assert (dst == expected).all()


@pytest.mark.rules("§4.1", "§4.4", "cpp-api §6.11")
def test_push_kv_cache_with_layer_ranges(world: Callable[..., World]) -> None:
    w = world([(6, (2, 8))], [(4, (2, 8))])
    for i, a in enumerate(w.c[0]):
        a[:] = 10 + i
    w.client.push_kv_cache(push_src(w.cid[0], 0), CacheIndex(1, w.sid[0], 1), 0, -1,
                           KvCacheExtParam((0, 1), (1, 2), 2))      # local tensors 0..3 -> remote 2..5
    original = sup.random_arrays(6, (2, 8), 100)
    for i, dst in enumerate(w.s[0]):
        expected = original[i].copy()
        if i >= 2:
            expected[1] = 10 + i - 2
        assert (dst == expected).all()


@pytest.mark.rules("§8.0", "§8.12")
def test_a_push_stops_at_the_first_failing_layer_and_keeps_the_earlier_ones(world: Callable[..., World]) -> None:
    w = world([(8, (1, 4))], [(8, (1, 4))])
    for i, a in enumerate(w.c[0]):
        a[:] = 50 + i
    status = sup.status_of(w.client.push_kv_cache, push_src(w.cid[0], 8), CacheIndex(1, w.sid[0]), 0, -1,
                           KvCacheExtParam((0, 3), (1, 4), 2))       # destination layer 4 does not exist
    assert status == P
    assert "destination layer 4" in raw.last_error()
    original = sup.random_arrays(8, (1, 4), 100)
    for i, dst in enumerate(w.s[0]):
        expected = original[i] if i < 2 else np.full((1, 4), 50 + i - 2, np.uint8)
        assert (dst == expected).all()


PUSH_CACHE_CASES = [
    ("caller placement HOST", dict(placement=0), P, "placement"),
    ("size not -1", dict(size=8), P, "size only support -1"),
    ("spans differ", dict(ext=((0, 1), (0, 0), 2)), P, "span"),
    ("default range with 0 tensors", dict(num_tensors=0), P, "num_tensors is 0"),
    ("pair {-1, s}", dict(ext=((-1, 0), (0, 1), 2)), P, "src_layer_range {-1, 0} is neither a range nor the default {-1, -1} (PR-11)"),
    ("only one default pair", dict(ext=((0, 0), (-1, -1), 2)), P, "PR-1"),
    ("n = 0", dict(ext=((-1, -1), (-1, -1), 0)), P, "tensor_num_per_layer"),
    ("caller tensor count differs", dict(num_tensors=2), P, "PR-33"),
    ("unknown local cache", dict(src=99), NX, "src_cache.cache_id 99"),
    ("no link", dict(cluster=3), NL, "not linked"),
    ("unknown remote cache", dict(dst=99), NX, "cache 99"),
    ("remote id 0", dict(dst=0), NX, "PR-20"),
    ("destination batch past the remote cache", dict(dst_batch=3), P, "dst_cache_index.batch_index 3"),
    ("source stride larger than the destination's", dict(dst=2), P, "PR-14"),
    ("source batch past the local cache", dict(src_batch=2), P, "src_batch_index 2"),
    ("n not dividing the local tensor count", dict(ext=((0, 0), (0, 0), 3)), P, "must divide"),
    ("destination layer past the remote cache", dict(ext=((1, 1), (2, 2), 2)), P, "destination layer 2"),
    ("source layer past the local cache", dict(ext=((2, 2), (0, 0), 2)), P, "source layer 2"),
    ("n larger than the local tensor count", dict(dst=3, ext=((0, 0), (0, 0), 5)), P, "source layer 0"),
    ("n not dividing the local tensor count, default ranges", dict(ext=((-1, -1), (-1, -1), 3)), P, "must divide"),
    ("dst pair {-1, s}", dict(ext=((1, 3), (-1, 1), 1)), P, "PR-11"),
    # check order (docs/reference/semantics.md §8.0, push)
    ("local cache before the link", dict(src=99, cluster=3), NX, "src_cache"),
    ("the link before the remote cache", dict(cluster=3, dst=99), NL, "not linked"),
    ("destination checks before source checks", dict(dst_batch=3, src_batch=2), P, "dst_cache_index"),
    # API-layer order (docs/reference/cpp-api.md §6.11 PushKvCache)
    ("placement before size", dict(placement=0, size=8), P, "placement"),
    ("size before the layer ranges", dict(size=8, ext=((2, 1), (0, 0), 2)), P, "size only support -1"),
    ("malformed ranges before the default-range tensor count", dict(num_tensors=0, ext=((-1, -1), (-2, -1), 2)),
     P, "dst_layer_range"),
    ("the default-range tensor count before PR-1", dict(num_tensors=0, ext=((-1, -1), (0, 0), 2)), P,
     "num_tensors is 0"),
    ("API checks before the engine's", dict(src=99, ext=((0, 0), (-1, -1), 2)), P, "PR-1"),
]


@pytest.mark.rules("E-12", "§2.5", "§2.6", "§4.3", "§4.4", "§4.5", "§5", "§6.2", "§6.5", "§8.0", "§8.5", "§8.12", "§9.4",
                   "cpp-api §6.11", "PR-1", "PR-3", "PR-11", "PR-14", "PR-20", "PR-33")
@pytest.mark.parametrize("label,args,status,words", PUSH_CACHE_CASES, ids=[c[0] for c in PUSH_CACHE_CASES])
def test_push_kv_cache_checks(world: Callable[..., World], monkeypatch: pytest.MonkeyPatch, label: str, args: dict[str, Any], status: int,
                              words: str) -> None:
    mode_for(monkeypatch, words)
    # remote 1: 4 x (3, 16); remote 2: 4 x (3, 8) (smaller stride); remote 3: 8 x (3, 16); local: 4 x (2, 16)
    w = world([(4, (3, 16)), (4, (3, 8)), (8, (3, 16))], [(4, (2, 16))])
    call = dict(cluster=1, src=w.cid[0], dst=1, num_tensors=4, src_batch=0, dst_batch=0, size=-1, ext=None,
                placement=1)
    call.update(args)
    ext = call.pop("ext")
    dst = {1: w.sid[0], 2: w.sid[1], 3: w.sid[2]}.get(call["dst"], call["dst"])
    snap = w.snapshot()
    got = raw.push_cache(w.client, call["cluster"], call["src"], dst, call["num_tensors"], call["src_batch"],
                         call["dst_batch"], call["size"], raw.ext(*ext) if ext else None, call["placement"])
    assert got == status, raw.last_error()
    assert words in raw.last_error()
    assert w.unchanged(snap)


@pytest.mark.rules("§2.5", "§2.6", "PR-33")
def test_pushes_of_a_host_cache_are_refused_only_in_strict_mode(world: Callable[..., World],
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    strict(monkeypatch)
    w = world([(2, (2, 8))], [], link=False)
    host = [np.zeros((2, 8), np.uint8) for _ in range(2)]
    hid = sup.register(w.client, host, placement=0)
    assert w.client.link_llm_clusters([sup.cluster(1, w.server.listen_port)])[0] == S.LLM_SUCCESS
    assert raw.push_cache(w.client, 1, hid, w.sid[0], 2) == P
    assert "HOST" in raw.last_error() and "PR-33" in raw.last_error()


@pytest.mark.rules("§7.4", "§8.2", "§8.3", "§8.5", "§8.6", "PR-5")
def test_push_kv_blocks_copies_each_pair(world: Callable[..., World]) -> None:
    w = world([(2, (12, 16))], [(2, (6, 16))])
    for i, a in enumerate(w.c[0]):
        a[:] = np.arange(6, dtype=np.uint8)[:, None] + 10 * i
    src_blocks, dst_blocks = [0, 1, 2, 5, 5], [3, 4, 5, 0, 11]
    w.client.push_kv_blocks(push_src(w.cid[0], 2), CacheIndex(1, w.sid[0]), src_blocks, dst_blocks)
    original = sup.random_arrays(2, (12, 16), 100)
    for i, dst in enumerate(w.s[0]):
        expected = original[i].copy()
        expected[dst_blocks] = w.c[0][i][src_blocks]
        assert (dst == expected).all()


PUSH_BLOCKS_CASES = [
    ("empty lists", dict(sblk=[], dblk=[]), P, "src_blocks is empty"),
    ("lists of different lengths", dict(sblk=[0], dblk=[0, 1]), P, "src_blocks has 1"),
    ("destination batch index not 0", dict(dst_batch=1), P, "batch_index 1"),
    ("repeated destination block", dict(sblk=[0, 1], dblk=[2, 2]), P, "PR-5"),
    ("destination block past the remote cache", dict(sblk=[0, 1], dblk=[11, 12]), P, "dst_blocks[1] = 12"),
    ("source block past the local cache", dict(sblk=[5, 6], dblk=[0, 1]), P, "src_blocks[1] = 6"),
    ("different block sizes", dict(dst=2), P, "PR-13"),
    ("no link", dict(cluster=3), NL, "not linked"),
    ("unknown remote cache", dict(dst=99), NX, "cache 99"),
    ("caller placement HOST", dict(placement=0), P, "placement"),
    ("caller tensor count differs", dict(num_tensors=1), P, "PR-33"),
    ("only one default pair", dict(ext=((-1, -1), (0, 0), 1)), P, "PR-1"),
    # API-layer order (docs/reference/cpp-api.md §6.11 PushKvBlocks)
    ("placement before empty lists", dict(placement=0, sblk=[], dblk=[]), P, "placement"),
    ("empty lists before the destination batch", dict(sblk=[], dblk=[], dst_batch=1), P, "src_blocks is empty"),
    ("lengths before the destination batch", dict(sblk=[0], dblk=[0, 1], dst_batch=1), P, "src_blocks has 1"),
    ("the destination batch before the layer ranges", dict(dst_batch=1, ext=((1, 0), (0, 0), 2)), P,
     "batch_index 1"),
    ("spans before the engine's checks", dict(dst=99, ext=((0, 1), (0, 0), 1)), P, "span"),
]


@pytest.mark.rules("E-12", "§2.5", "§2.6", "§4.4", "§6.2", "§7.1", "§7.2", "§7.3", "§7.4", "§7.5", "§8.12", "cpp-api §6.11",
                   "PR-1", "PR-4", "PR-5", "PR-13", "PR-33")
@pytest.mark.parametrize("label,args,status,words", PUSH_BLOCKS_CASES, ids=[c[0] for c in PUSH_BLOCKS_CASES])
def test_push_kv_blocks_checks(world: Callable[..., World], monkeypatch: pytest.MonkeyPatch, label: str, args: dict[str, Any], status: int,
                               words: str) -> None:
    mode_for(monkeypatch, words)
    # remote 1: 2 x (12, 16); remote 2: 2 x (12, 8); local: 2 x (6, 16)
    w = world([(2, (12, 16)), (2, (12, 8))], [(2, (6, 16))])
    call = dict(cluster=1, dst=1, sblk=[0, 1], dblk=[0, 1], dst_batch=0, ext=None, num_tensors=2, placement=1)
    call.update(args)
    dst = {1: w.sid[0], 2: w.sid[1]}.get(call["dst"], call["dst"])
    ext = call["ext"]
    snap = w.snapshot()
    got = raw.push_blocks(w.client, call["cluster"], w.cid[0], dst, call["num_tensors"], call["sblk"], call["dblk"],
                          raw.ext(*ext) if ext else None, dst_batch=call["dst_batch"], placement=call["placement"])
    assert got == status, raw.last_error()
    assert words in raw.last_error()
    assert w.unchanged(snap)


@pytest.mark.rules("§11", "cpp-api §6.2", "cpp-api §6.3")
def test_the_role_restricts_no_call(engines: Engines) -> None:
    # semantics.md §11: a DECODER links and pushes, a MIX engine pulls and pushes (v1 would refuse
    # pushes by a DECODER and links and pulls by anything but a DECODER); the world
    # fixture's engines are PROMPTs, which link and pull in the tests above
    server = engines(1, native.LlmRole.MIX, listen=True)
    client = engines(2, native.LlmRole.DECODER, options={}, device_id=1)
    s_src, s_dst = sup.random_arrays(2, (2, 8), 1), [np.zeros((2, 8), np.uint8) for _ in range(2)]
    c_src, c_dst = sup.random_arrays(2, (2, 8), 2), [np.zeros((2, 8), np.uint8) for _ in range(2)]
    ss, sd, cs, cd = sup.register(server, s_src), sup.register(server, s_dst), sup.register(client, c_src), \
        sup.register(client, c_dst)
    assert client.link_llm_clusters([sup.cluster(1, server.listen_port)])[0] == S.LLM_SUCCESS
    client.push_kv_cache(push_src(cs, 2), CacheIndex(1, sd, 1))
    client.push_kv_blocks(push_src(cs, 2), CacheIndex(1, sd), [1], [0])
    server.pull_kv_cache(CacheIndex(2, cs, 1), Cache(sd), batch_index=1)
    assert all((d == s[[1, 1]]).all() for d, s in zip(s_dst, c_src))
    server.push_kv_blocks(push_src(ss, 2), CacheIndex(2, cd), [0, 1], [1, 0])
    client.pull_kv_blocks(CacheIndex(1, ss), Cache(cd), [1], [1])
    assert all((d == s[[1, 1]]).all() for d, s in zip(c_dst, s_src))


# ---- timeouts (PR-31, PR-35) ------------------------------------------------------------------

@pytest.mark.rules("E-15", "§10.4", "§13", "PR-35")
@pytest.mark.mock_only(reason="uses the mock's control interface (fault injection, serve delay, dropped connections, accounting)")
def test_a_slow_peer_times_out_and_poisons_the_link(world: Callable[..., World]) -> None:
    options = {native.OPTION_SYNC_CACHE_WAIT_TIME: "150"}
    w = world([(2, (2, 8))], [(2, (2, 8))], options=options)
    mock_control.set_serve_delay(w.server, 100)
    w.client.pull_kv_cache(CacheIndex(1, w.sid[0]), Cache(w.cid[0]))            # 100 ms < 150 ms
    mock_control.set_serve_delay(w.server, 400)
    assert sup.status_of(w.client.pull_kv_cache, CacheIndex(1, w.sid[0]), Cache(w.cid[0])) == T
    mock_control.set_serve_delay(w.server, 0)
    assert sup.status_of(w.client.pull_kv_cache, CacheIndex(1, w.sid[0]), Cache(w.cid[0])) == T
    assert "PR-35" in raw.last_error()
    assert sup.status_of(w.client.push_kv_blocks, push_src(w.cid[0], 2), CacheIndex(1, w.sid[0]), [0], [0]) == T
    assert w.client.unlink_llm_clusters([sup.cluster(1, w.server.listen_port)])[0] == S.LLM_SUCCESS
    assert w.client.link_llm_clusters([sup.cluster(1, w.server.listen_port)])[0] == S.LLM_SUCCESS
    w.client.pull_kv_cache(CacheIndex(1, w.sid[0], 1), Cache(w.cid[0]))
    assert all((d[0] == s[1]).all() for d, s in zip(w.c[0], w.s[0]))


@pytest.mark.rules("§13")
@pytest.mark.mock_only(reason="uses the mock's control interface (fault injection, serve delay, dropped connections, accounting)")
def test_the_sync_wait_time_defaults_to_1000_ms(world: Callable[..., World]) -> None:
    w = world([(2, (2, 8))], [(2, (2, 8))])                   # no llm.SyncKvCacheWaitTime
    mock_control.set_serve_delay(w.server, 1300)
    start = time.monotonic()
    assert sup.status_of(w.client.pull_kv_cache, CacheIndex(1, w.sid[0]), Cache(w.cid[0])) == T
    assert 0.95 <= time.monotonic() - start < 1.25
    assert "llm.SyncKvCacheWaitTime = 1000 ms" in raw.last_error()
    mock_control.set_serve_delay(w.server, 0)
    assert w.client.unlink_llm_clusters([sup.cluster(1, w.server.listen_port)])[0] == S.LLM_SUCCESS
    assert w.client.link_llm_clusters([sup.cluster(1, w.server.listen_port)])[0] == S.LLM_SUCCESS
    mock_control.set_serve_delay(w.server, 700)
    w.client.pull_kv_cache(CacheIndex(1, w.sid[0]), Cache(w.cid[0]))
    assert all((d[0] == s[0]).all() and (d[1] == 0).all() for d, s in zip(w.c[0], w.s[0]))


@pytest.mark.rules("E-9", "§10.4", "PR-31")
@pytest.mark.mock_only(reason="uses the mock's control interface (fault injection, serve delay, dropped connections, accounting)")
def test_a_timed_out_link_is_dead_on_the_peer_side_too(world: Callable[..., World]) -> None:
    # decision E-9 (docs/semantics.md §5): the side that timed out drops its request
    # connection; the peer notices and its own transfers over the link time out (PR-31)
    w = world([(2, (2, 8)), (2, (2, 8))], [(2, (2, 8))], options={native.OPTION_SYNC_CACHE_WAIT_TIME: "150"})
    mock_control.set_serve_delay(w.server, 400)
    assert sup.status_of(w.client.pull_kv_cache, CacheIndex(1, w.sid[0]), Cache(w.cid[0])) == T
    mock_control.set_serve_delay(w.server, 0)
    deadline = time.monotonic() + 5
    status = sup.status_of(w.server.pull_kv_cache, CacheIndex(2, w.cid[0]), Cache(w.sid[1]))
    while status == S.LLM_SUCCESS and time.monotonic() < deadline:   # the peer notices the closed connection
        time.sleep(0.01)
        status = sup.status_of(w.server.pull_kv_cache, CacheIndex(2, w.cid[0]), Cache(w.sid[1]))
    assert status == T
    assert sup.status_of(w.server.push_kv_cache, push_src(w.sid[0], 2), CacheIndex(2, w.cid[0])) == T
    assert sup.status_of(w.server.pull_kv_cache, CacheIndex(2, w.cid[0]), Cache(w.sid[1])) == T
    assert (w.c[0][0] == 0).all()
    assert w.client.unlink_llm_clusters([sup.cluster(1, w.server.listen_port)])[0] == S.LLM_SUCCESS
    assert w.client.link_llm_clusters([sup.cluster(1, w.server.listen_port)])[0] == S.LLM_SUCCESS
    w.server.push_kv_cache(push_src(w.sid[0], 2), CacheIndex(2, w.cid[0], 1), src_batch_index=1)
    assert all((d[1] == s[1]).all() for d, s in zip(w.c[0], w.s[0]))


@pytest.mark.rules("§14")
def test_concurrent_transfers_over_one_and_several_links(engines: Engines) -> None:
    servers = [engines(10 + k, listen=True) for k in range(2)]
    client = engines(2, options={})
    src = [sup.random_arrays(2, (32, 64), k) for k in range(2)]
    sids = [sup.register(s, a) for s, a in zip(servers, src)]
    dst = [[np.zeros((32, 64), np.uint8) for _ in range(2)] for _ in range(8)]
    dids = [sup.register(client, a) for a in dst]
    for k, s in enumerate(servers):
        assert client.link_llm_clusters([sup.cluster(10 + k, s.listen_port)])[0] == S.LLM_SUCCESS
    errors: list[int] = []

    def run(j: int) -> None:
        k = j % 2
        for r in range(20):
            blocks = [(j + r + b) % 32 for b in range(8)]
            status = sup.status_of(client.pull_kv_blocks, CacheIndex(10 + k, sids[k]), Cache(dids[j]),
                                   blocks, blocks)
            if status:
                errors.append(status)

    threads = [threading.Thread(target=run, args=(j,)) for j in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    for j in range(8):
        touched = sorted({(j + r + b) % 32 for r in range(20) for b in range(8)})
        for d, s in zip(dst[j], src[j % 2]):
            assert (d[touched] == s[touched]).all()


# ---- lint rules the native layer sees: checked before any backend call ---------------------------

ALL_RULE_CASES = [
    # (rule, C function, the call on client c with its cache lid and the server's cache rid)
    ("PR-1", "lldd_pull_kv_cache",
     lambda c, lid, rid: c.pull_kv_cache(CacheIndex(1, rid), Cache(lid), 0, -1, KvCacheExtParam((0, 0), (-1, -1)))),
    ("PR-11", "lldd_push_kv_cache",
     lambda c, lid, rid: c.push_kv_cache(push_src(lid, 4), CacheIndex(1, rid), 0, -1,
                                         KvCacheExtParam((-1, 0), (0, 0)))),
    ("PR-5", "lldd_pull_kv_blocks",
     lambda c, lid, rid: c.pull_kv_blocks(CacheIndex(1, rid), Cache(lid), [0, 1], [2, 2])),
    ("PR-5", "lldd_push_kv_blocks",
     lambda c, lid, rid: c.push_kv_blocks(push_src(lid, 4), CacheIndex(1, rid), [0, 1], np.array([3, 3], np.uint64))),
]


@pytest.mark.rules("§2.5", "§2.6", "§4.4", "§5", "§7.4", "PR-1", "PR-3", "PR-5", "PR-11", "PR-33")
@pytest.mark.mock_only(reason="uses the mock's control interface (fault injection, serve delay, dropped connections, accounting)")
@pytest.mark.parametrize("rule,function,call", ALL_RULE_CASES,
                         ids=[f"{c[0]} {c[1]}" for c in ALL_RULE_CASES])
def test_the_native_layer_checks_the_all_rules_before_the_backend(world: Callable[..., World],
                                                                  monkeypatch: pytest.MonkeyPatch, rule: str,
                                                                  function: str, call: Any) -> None:
    # strict mode: an injected fault answers the first backend call of that function: the
    # rule must be decided before it, and the fault is still armed for the next (valid) call
    strict(monkeypatch)
    w = world([(4, (4, 8))], [(4, (4, 8))])
    with mock_control.fault(function, S.LLM_WAIT_PROCESS_TIMEOUT):
        with pytest.raises(LLMException) as info:
            call(w.client, w.cid[0], w.sid[0])
        assert info.value.status_code == P
        assert f"({rule};" in str(info.value)
        valid = raw.pull_blocks(w.client, 1, w.sid[0], w.cid[0], [0], [0]) if "blocks" in function else \
            raw.pull_cache(w.client, 1, w.sid[0], w.cid[0])
        if "push" in function:
            valid = raw.push_blocks(w.client, 1, w.cid[0], w.sid[0], 4, [0], [0]) if "blocks" in function else \
                raw.push_cache(w.client, 1, w.cid[0], w.sid[0], 4)
        assert valid == S.LLM_WAIT_PROCESS_TIMEOUT and "injected" in raw.last_error()


@pytest.mark.rules("§14")
@pytest.mark.mock_only(reason="uses the mock's control interface (fault injection, serve delay, dropped connections, accounting)")
def test_transfers_over_one_link_are_serialized_and_over_two_links_are_not(engines: Engines) -> None:
    # semantics.md §14: each transfer waits 300 ms for its (slow) peer while it holds its link
    servers = [engines(10 + k, listen=True) for k in range(2)]
    client = engines(2, options={})
    # the arrays live as long as their caches: the pulls read and write them
    sources = [sup.random_arrays(2, (2, 8), k) for k in range(2)]
    targets = [[np.zeros((2, 8), np.uint8) for _ in range(2)] for _ in range(2)]
    sids = [sup.register(s, sources[k]) for k, s in enumerate(servers)]
    dids = [sup.register(client, t) for t in targets]
    for k, s in enumerate(servers):
        assert client.link_llm_clusters([sup.cluster(10 + k, s.listen_port)])[0] == S.LLM_SUCCESS
        client.pull_kv_cache(CacheIndex(10 + k, sids[k]), Cache(dids[k]))       # table copies taken
        mock_control.set_serve_delay(s, 300)

    def elapsed(peers: list[int]) -> float:
        statuses: list[int] = []
        threads = [threading.Thread(target=lambda j=j, k=k: statuses.append(
            sup.status_of(client.pull_kv_cache, CacheIndex(10 + k, sids[k]), Cache(dids[j]))))
            for j, k in enumerate(peers)]
        start = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert statuses == [S.LLM_SUCCESS] * 2
        return time.monotonic() - start

    assert elapsed([0, 0]) >= 0.58               # one link: one after the other
    assert elapsed([0, 1]) < 0.55                # two links: side by side


# ---- between processes ------------------------------------------------------------------------

@pytest.fixture(params=["process_vm", "socket"])
def remote(request: pytest.FixtureRequest, engines: Engines, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """A server engine in another process with caches 1: 4 x (8, 32) (seed 1) and
    2: 4 x (8, 32) zeros, linked from a client here with caches 1: 4 x (8, 32) zeros and
    2: 4 x (8, 32) (seed 2). ``socket``: both sides move bytes over the link's socket."""
    env = {}
    if request.param == "socket":
        env = {"LLDD_MOCK_NO_PROCESS_VM": "1"}
        monkeypatch.setenv("LLDD_MOCK_NO_PROCESS_VM", "1")
    peer = sup.PeerProcess(env)
    try:
        port = sup.free_port()
        peer.call("init", cluster_id=1, role=1,
                  options={"llm.DeviceId": "0", "llm.ListenIpInfo": f"127.0.0.1:{port}"})
        assert peer.call("register", num_tensors=4, shape=[8, 32], seed=1) == 1
        assert peer.call("register", num_tensors=4, shape=[8, 32], seed=-1) == 2
        client = engines(2, listen=True, options={native.OPTION_SYNC_CACHE_WAIT_TIME: "300"})
        zeros = [np.zeros((8, 32), np.uint8) for _ in range(4)]
        ones = [a.reshape(8, 32) for a in sup.fill(4, [8, 32], 2)]
        assert sup.register(client, zeros) == 1 and sup.register(client, ones) == 2
        assert client.link_llm_clusters([sup.cluster(1, port)])[0] == S.LLM_SUCCESS
        yield peer, client, zeros, ones, [a.reshape(8, 32) for a in sup.fill(4, [8, 32], 1)]
    finally:
        peer.close()


@pytest.mark.rules("E-19", "E-18", "§8.2", "§8.3", "§8.5", "§8.6")
def test_transfers_between_processes_move_exact_bytes(remote: Any) -> None:
    peer, client, zeros, ones, theirs = remote
    client.pull_kv_cache(CacheIndex(1, 1, 6), Cache(1), batch_index=2)
    client.pull_kv_blocks(CacheIndex(1, 1), Cache(1), [0, 1, 2, 7], [4, 5, 6, 0])
    for d, s in zip(zeros, theirs):
        expected = np.zeros((8, 32), np.uint8)
        expected[2] = s[6]
        expected[[4, 5, 6, 0]] = s[[0, 1, 2, 7]]
        assert (d == expected).all()
    client.push_kv_cache(push_src(2, 4), CacheIndex(1, 2, 3), src_batch_index=5)
    client.push_kv_blocks(push_src(2, 4), CacheIndex(1, 2), [1, 2, 3], [5, 6, 7])
    got = np.frombuffer(peer.cache_bytes(2), np.uint8).reshape(4, 8, 32)
    for i, s in enumerate(ones):
        expected = np.zeros((8, 32), np.uint8)
        expected[3] = s[5]
        expected[[5, 6, 7]] = s[[1, 2, 3]]
        assert (got[i] == expected).all()
    # the peer pulls from this process over the same link
    assert peer.call("pull_blocks", cluster=2, src=2, dst=1, src_blocks=[0, 1], dst_blocks=[0, 1]) is None
    got = np.frombuffer(peer.cache_bytes(1), np.uint8).reshape(4, 8, 32)
    for i, s in enumerate(ones):
        assert (got[i][[0, 1]] == s[[0, 1]]).all() and (got[i][2:] == theirs[i][2:]).all()


@pytest.mark.rules("§3.2", "§9.7", "PR-7", "PR-32")
def test_peer_caches_between_processes_follow_the_table_copy(remote: Any) -> None:
    peer, client, zeros, _, _ = remote
    late = peer.call("register", num_tensors=4, shape=[8, 32], seed=3)
    assert sup.status_of(client.pull_kv_cache, CacheIndex(1, late), Cache(1)) == P         # PR-32
    later = peer.call("register", num_tensors=4, shape=[8, 32], seed=4)
    assert sup.status_of(client.pull_kv_cache, CacheIndex(1, later), Cache(1)) == NX        # semantics.md §9.7
    peer.call("unregister", cache_id=1)
    assert sup.status_of(client.pull_kv_cache, CacheIndex(1, 1), Cache(1)) == NX            # PR-7
    assert all((a == 0).all() for a in zeros)


@pytest.mark.rules("E-9", "§10.4", "§13", "PR-35")
@pytest.mark.mock_only(reason="uses the mock's control interface (fault injection, serve delay, dropped connections, accounting)")
def test_a_slow_peer_process_times_out(remote: Any) -> None:
    peer, client, zeros, _, theirs = remote
    client.pull_kv_cache(CacheIndex(1, 1), Cache(1))
    peer.call("serve_delay", ms=600)
    assert sup.status_of(client.pull_kv_blocks, CacheIndex(1, 1), Cache(1), [0], [0]) == T
    peer.call("serve_delay", ms=0)
    assert sup.status_of(client.pull_kv_blocks, CacheIndex(1, 1), Cache(1), [0], [0]) == T  # PR-35
    # the peer can still deallocate what the timed-out transfer had pinned
    assert peer.call("unregister", cache_id=1) is None


# ---- device-faithful by default: what the vendor accepts, with its lint (docs/semantics.md §0) ----

def test_a_pull_without_ranges_ignores_a_tensor_num_per_layer_above_the_tensor_count(
        world: Callable[..., World], monkeypatch: pytest.MonkeyPatch) -> None:
    # the vendor's pull_blocks samples: caches of one tensor, the default tensor_num_per_layer 2
    lenient(monkeypatch)
    w = world([(1, (4, 8))], [(1, (4, 8))])
    w.client.pull_kv_blocks(CacheIndex(1, w.sid[0]), Cache(w.cid[0]), [0, 1], [0, 1], KvCacheExtParam())
    w.client.pull_kv_cache(CacheIndex(1, w.sid[0], 3), Cache(w.cid[0]), 3, -1, KvCacheExtParam(tensor_num_per_layer=9))
    assert (w.c[0][0][[0, 1, 3]] == w.s[0][0][[0, 1, 3]]).all() and (w.c[0][0][2] == 0).all()


def test_a_ranged_pull_whose_tensor_num_does_not_divide_is_refused_by_the_engine(
        world: Callable[..., World], monkeypatch: pytest.MonkeyPatch) -> None:
    # the v2 engine's own check, in both modes: not a lint
    lenient(monkeypatch)
    w = world([(1, (4, 8))], [(1, (4, 8))])
    snap = w.snapshot()
    assert raw.pull_blocks(w.client, 1, w.sid[0], w.cid[0], [0], [0], raw.ext((0, 0), (0, 0), 2)) == P
    assert "must divide the local cache's 1 tensors" in raw.last_error() and w.unchanged(snap)


def test_a_repeated_destination_block_warns_and_the_last_write_wins(world: Callable[..., World],
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    lenient(monkeypatch)
    w = world([(2, (6, 8))], [(2, (4, 8))])
    with pytest.warns(lint.RepeatedDestinationBlockWarning, match=r"dst_blocks contains block 2 more than once"):
        w.client.pull_kv_blocks(CacheIndex(1, w.sid[0]), Cache(w.cid[0]), [0, 5, 1], [2, 3, 2])
    for src, dst in zip(w.s[0], w.c[0]):
        assert (dst[2] == src[1]).all() and (dst[3] == src[5]).all() and (dst[[0, 1]] == 0).all()
    with pytest.warns(lint.RepeatedDestinationBlockWarning):
        w.client.push_kv_blocks(push_src(w.cid[0], 2), CacheIndex(1, w.sid[0]), [3, 2], [4, 4])
    for src, dst in zip(w.c[0], w.s[0]):
        assert (dst[4] == src[2]).all()


def test_a_pull_with_one_default_pair_moves_every_layer_with_a_lint(world: Callable[..., World],
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    lenient(monkeypatch)
    w = world([(4, (2, 8))], [(4, (2, 8))])
    with pytest.warns(lint.OneDefaultLayerPairWarning) as record:
        w.client.pull_kv_cache(CacheIndex(1, w.sid[0], 1), Cache(w.cid[0]), 0, -1, KvCacheExtParam((1, 1), (-1, -1)))
    assert record[0].filename == __file__          # the warning points at the caller's line
    for src, dst in zip(w.s[0], w.c[0]):          # both pairs ignored: tensor i -> tensor i
        assert (dst[0] == src[1]).all() and (dst[1] == 0).all()
    with pytest.warns(lint.LintWarning) as record:       # {-1, 0} is a default, so one pair is
        w.client.pull_kv_cache(CacheIndex(1, w.sid[0], 0), Cache(w.cid[0]), 1, -1, KvCacheExtParam((-1, 0), (0, 0)))
    assert [r.category for r in record] == [lint.HalfDefaultLayerPairWarning, lint.OneDefaultLayerPairWarning]
    for src, dst in zip(w.s[0], w.c[0]):
        assert (dst[1] == src[0]).all()


@pytest.mark.mock_only(reason="the engine reports this lint through the mock's lint record")
def test_a_push_whose_caller_description_disagrees_pushes_the_callers_layers_with_a_lint(
        world: Callable[..., World], monkeypatch: pytest.MonkeyPatch) -> None:
    # the vendor counts the layers of a default-range push from the caller's num_tensors
    lenient(monkeypatch)
    w = world([(4, (2, 8))], [(4, (2, 8))])
    for i, a in enumerate(w.c[0]):
        a[:] = i + 1
    before = w.snapshot()[:4]
    with pytest.warns(lint.PushTensorCountWarning, match=r"num_tensors 2 differs from the 4 tensors"):
        w.client.push_kv_cache(push_src(w.cid[0], 2), CacheIndex(1, w.sid[0], 1))
    assert all((w.s[0][i][1] == i + 1).all() for i in range(2))          # layer 0 only
    assert all((w.s[0][i] == before[i]).all() for i in range(2, 4))
