"""Extension ABI, priority 3: lldd_ext_push_layer (one layer of push_cache,
push_blocks or a TransferWithCacheKeyConfig; direct mode; docs/reference/semantics.md §8.0 push order,
semantics.md §8.5, §8.6, PR-4, PR-5, PR-13, PR-14, PR-15, PR-19, PR-20, PR-32) and
lldd_ext_transfer_layer (one layer of a TransferConfig to raw peer addresses;
server-assisted v2 and v1; semantics.md §8.7, PR-16, PR-40).
"""
from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np
import pytest

from llm_datadist_ffi import LLMStatusCode as S


import ext_support as xs
from lint_support import lenient, mode_for, strict
pytestmark = pytest.mark.mock_only(reason="raw calls of the mock's extension functions")
SA, DIRECT, V1 = "server-assisted", "direct", "v1"


def options(mode: str, role: str, **extra: str) -> dict[str, str]:
    if mode == V1:
        return xs.v1_options(role, **extra)
    return xs.v2_options(direct=mode == DIRECT, role=role, **extra)


def rand(n: int, shape: tuple[int, ...], seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, size=shape, dtype=np.uint8) for _ in range(n)]


def zeros(n: int, shape: tuple[int, ...]) -> list[np.ndarray]:
    return [np.zeros(shape, dtype=np.uint8) for _ in range(n)]


class Pair:
    """D (cluster 2) listens, P (cluster 1) links to it and pushes (the Prompt pushes
    over a link the Decoder could as well have opened: links work both ways)."""

    def __init__(self, x: Any, mode: str, p_extra: dict[str, str] | None = None,
                 d_extra: dict[str, str] | None = None) -> None:
        self.x = x
        self.d, self.port = x.listening(2, options(mode, "Decoder", **(d_extra or {})), v1=False)
        self.p = x.engine(1, options(mode, "Prompt", **(p_extra or {})))

    def link(self) -> None:
        assert self.x.link(self.p, [(2, self.port)]) == (0, [0]), self.x.last_error()


# ---- push_layer -------------------------------------------------------------------------------


def test_a_contiguous_push_moves_one_layer_of_a_batch(x: Any) -> None:
    pair = Pair(x, DIRECT)
    src = rand(4, (3, 16), 1)
    _, src_id = x.register(pair.p, src)
    dst = rand(6, (2, 24), 2)
    before = [a.copy() for a in dst]
    _, dst_id = x.register(pair.d, dst)
    pair.link()
    assert x.push_layer(pair.p, src_id, x.by_id(2, dst_id, 1), src_layer=1, dst_layer=2, src_batch=2) == 0
    for t in range(6):
        expect = before[t].copy()
        if t in (4, 5):
            expect[1, :16] = src[t - 2][2]                 # S_src bytes into destination batch 1
        assert (dst[t] == expect).all()


def test_a_block_push_moves_runs_of_one_layer_through_a_blocks_key(x: Any) -> None:
    pair = Pair(x, DIRECT)
    src = rand(2, (6, 8), 3)
    _, src_id = x.register(pair.p, src, xs.KIND_BLOCKS)
    dst = rand(4, (5, 8), 4)
    before = [a.copy() for a in dst]
    assert x.register(pair.d, dst, xs.KIND_BLOCKS, keys=[x.blocks_key(model=3)])[0] == 0
    pair.link()
    sblk, dblk = [5, 0, 1, 1], [0, 2, 3, 4]
    assert x.push_layer(pair.p, src_id, x.blocks_key(2, 3), src_layer=0, dst_layer=1, src_blocks=sblk,
                        dst_blocks=dblk) == 0
    for t in range(4):
        expect = before[t].copy()
        if t >= 2:
            for s, d in zip(sblk, dblk):
                expect[d] = src[t - 2][s]
        assert (dst[t] == expect).all()


@pytest.mark.parametrize("mode, status, words", [(SA, S.LLM_PARAM_INVALID, "enable_remote_cache_accessible"),
                                                 (V1, S.LLM_FEATURE_NOT_ENABLED, "v1")])
def test_pushes_need_direct_mode(x: Any, mode: str, status: int, words: str) -> None:
    engine = x.engine(1, options(mode, "Prompt", **({"llm.listenIpInfo": f"127.0.0.1:{xs.free_port()}"}
                                                   if mode == V1 else {})))
    assert x.push_layer(engine, 1, x.by_id(2, 1)) == status
    assert words in x.last_error()


def test_push_argument_checks(x: Any) -> None:
    pair = Pair(x, DIRECT)
    _, src_id = x.register(pair.p, rand(2, (4, 8), 5), xs.KIND_BLOCKS)
    pair.link()
    p = pair.p
    assert x.push_layer(p, src_id, x.req(1, cluster=2)) == S.LLM_PARAM_INVALID
    assert "dst.kind 1" in x.last_error()
    assert x.push_layer(p, src_id, x.by_id(2, 1), n=0) == S.LLM_PARAM_INVALID
    assert x.push_layer(p, src_id, x.by_id(2, 1), src_blocks=[0], dst_blocks=[0]) == S.LLM_PARAM_INVALID
    # no source blocks, or lists of different lengths: read after the destination,
    # which no key names on the peer here
    assert x.push_layer(p, src_id, x.blocks_key(2), dst_blocks=[0]) == S.LLM_KV_CACHE_NOT_EXIST
    assert x.push_layer(p, src_id, x.blocks_key(2), src_blocks=[0]) == S.LLM_PARAM_INVALID
    assert x.push_layer(p, src_id, x.blocks_key(2), src_blocks=[0, 1], dst_blocks=[0]) == S.LLM_KV_CACHE_NOT_EXIST
    # the own cluster is a link id like another: no link under it
    assert x.push_layer(p, src_id, x.blocks_key(1), src_blocks=[0], dst_blocks=[0]) == S.LLM_NOT_YET_LINK
    assert x.push_layer(p, 99, x.blocks_key(2), src_blocks=[0], dst_blocks=[0]) == S.LLM_KV_CACHE_NOT_EXIST
    assert x.push_layer(p, src_id, x.blocks_key(7), src_blocks=[0], dst_blocks=[0]) == S.LLM_NOT_YET_LINK
    assert x.lib.lldd_ext_push_layer(p, src_id, 0, 0, x.ffi.NULL, 0, 2, x.ffi.NULL, 0, x.ffi.NULL, 0) == \
        S.LLM_PARAM_INVALID
    assert x.lib.lldd_ext_push_layer(p, src_id, 0, 0, x.blocks_key(2), 0, 2, x.ffi.NULL, 1, x.ffi.NULL, 0) == \
        S.LLM_PARAM_INVALID


def test_push_destination_lookup_in_the_table_copy(x: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    lenient(monkeypatch)
    pair = Pair(x, DIRECT, d_extra={"llm.MemPoolConfig": xs.v2_options(pool=True)["llm.MemPoolConfig"]})
    _, src_id = x.register(pair.p, rand(2, (4, 8), 6), xs.KIND_BLOCKS)
    _, cache_src = x.register(pair.p, rand(2, (4, 8), 7))
    pair.link()
    d = pair.d
    assert x.push_layer(pair.p, src_id, x.blocks_key(2), src_blocks=[0], dst_blocks=[0]) == \
        S.LLM_KV_CACHE_NOT_EXIST                                               # no blocks key bound there
    status, late_id, _ = x.allocate(d, 2, [4, 8], xs.KIND_BLOCKS, [x.blocks_key()])
    assert status == 0                                                          # bound after the copy
    assert x.push_layer(pair.p, src_id, x.blocks_key(2), src_blocks=[0], dst_blocks=[0]) == \
        S.LLM_KV_CACHE_NOT_EXIST
    assert "PR-19" in x.last_error()
    assert x.push_layer(pair.p, cache_src, x.by_id(2, late_id)) == S.LLM_KV_CACHE_NOT_EXIST
    # PR-20: the device looks an id <= 0 up as the blocks key of model_id 0, which the
    # destination bound after this link's table copy: not in the copy (PR-19)
    assert x.push_layer(pair.p, cache_src, x.by_id(2, 0)) == S.LLM_KV_CACHE_NOT_EXIST
    assert "PR-19" in x.last_error()
    strict(monkeypatch)
    assert x.push_layer(pair.p, cache_src, x.by_id(2, 0)) == S.LLM_KV_CACHE_NOT_EXIST
    assert "PR-20" in x.last_error()


def test_push_destination_and_source_checks_in_order(x: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    pair = Pair(x, DIRECT)
    p, d = pair.p, pair.d
    _, blocks_src = x.register(p, rand(4, (4, 8), 8), xs.KIND_BLOCKS)
    _, cache_src = x.register(p, rand(4, (4, 8), 9))
    _, wide_src = x.register(p, rand(4, (4, 16), 10))
    _, hidden_src = x.register(p, rand(4, (4, 8), 11), remote=0)
    _, odd_src = x.register(p, rand(3, (4, 8), 12))
    dst = zeros(4, (4, 8))
    _, dst_cache = x.register(d, dst)
    _, dst_blocks = x.register(d, zeros(4, (4, 8)), xs.KIND_BLOCKS, keys=[x.blocks_key()])
    _, dst_hidden = x.register(d, zeros(4, (4, 8)), remote=0)
    _, dst_wide_blocks = x.register(d, zeros(4, (2, 16)), xs.KIND_BLOCKS, keys=[x.blocks_key(model=1)])
    pair.link()
    cases = [
        (cache_src, x.by_id(2, dst_hidden), {}, "remote cache"),
        (hidden_src, x.by_id(2, dst_cache), {}, "local cache"),
        (cache_src, x.by_id(2, dst_cache), {"dst_layer": 2}, "destination layer 2"),
        (cache_src, x.by_id(2, dst_cache, 4), {}, "dst.batch_index 4"),
        (cache_src, x.by_id(2, dst_blocks), {}, "PR-15"),
        (wide_src, x.by_id(2, dst_cache), {}, "PR-14"),
        (blocks_src, x.blocks_key(2, 1), {"src_blocks": [0], "dst_blocks": [0]}, "PR-13"),
        (blocks_src, x.blocks_key(2), {"src_blocks": [0], "dst_blocks": [4]}, "dst_blocks[0] = 4"),
        (blocks_src, x.blocks_key(2), {"src_blocks": [0, 1], "dst_blocks": [1, 1]}, "PR-5"),
        (cache_src, x.by_id(2, dst_cache), {"src_layer": 2}, "source layer 2"),
        (odd_src, x.by_id(2, dst_cache), {"n": 1, "src_layer": 0, "dst_layer": 0}, None),
        (cache_src, x.by_id(2, dst_cache), {"n": 3}, "must divide"),
        (cache_src, x.by_id(2, dst_cache), {"src_batch": 4}, "src_batch_index 4"),
        (blocks_src, x.by_id(2, dst_cache), {}, "local cache 1 is a blocks cache"),
        (cache_src, x.blocks_key(2), {"src_blocks": [0], "dst_blocks": [0]}, "has no blocks"),
        (blocks_src, x.blocks_key(2), {"src_blocks": [4], "dst_blocks": [0]}, "src_blocks[0] = 4"),
    ]
    for src_id, key, kwargs, words in cases:
        mode_for(monkeypatch, words or "")
        status = x.push_layer(p, src_id, key, **kwargs)
        if words is None:
            assert status == 0
            continue
        assert status == S.LLM_PARAM_INVALID, words
        assert words in x.last_error()
    assert all(not a[1:].any() for a in dst)


def test_a_cache_registered_after_the_link_cannot_be_pushed_to(x: Any) -> None:
    pair = Pair(x, DIRECT)
    _, src_id = x.register(pair.p, rand(2, (4, 8), 13))
    _, first_id = x.register(pair.d, zeros(2, (4, 8)))
    pair.link()
    _, dst_id = x.register(pair.d, zeros(2, (4, 8)))
    assert x.push_layer(pair.p, src_id, x.by_id(2, dst_id)) == S.LLM_PARAM_INVALID   # the first push takes the copy
    assert "PR-32" in x.last_error()
    _, later_id = x.register(pair.d, zeros(2, (4, 8)))
    assert x.push_layer(pair.p, src_id, x.by_id(2, later_id)) == S.LLM_KV_CACHE_NOT_EXIST   # not in the copy
    assert x.push_layer(pair.p, src_id, x.by_id(2, first_id)) == 0
    pair2 = Pair(x, DIRECT)
    pair2.link()
    _, late_src = x.register(pair2.p, rand(2, (4, 8), 14))
    assert x.push_layer(pair2.p, late_src, x.by_id(2, 1)) == S.LLM_PARAM_INVALID
    assert "PR-32" in x.last_error()


def test_pushes_from_several_threads_at_once(x: Any) -> None:
    pair = Pair(x, DIRECT)
    srcs = [rand(2, (4, 32), 20 + i) for i in range(8)]
    ids = [x.register(pair.p, s)[1] for s in srcs]
    dst = zeros(2, (8, 32))
    _, dst_id = x.register(pair.d, dst)
    pair.link()
    results: dict[int, int] = {}

    def push(i: int) -> None:
        results[i] = x.push_layer(pair.p, ids[i], x.by_id(2, dst_id, i), src_batch=i % 4)

    threads = [threading.Thread(target=push, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == {i: 0 for i in range(8)}
    for i in range(8):
        for t in range(2):
            assert (dst[t][i] == srcs[i][t][i % 4]).all()


@pytest.fixture(params=["process_vm", "socket"])
def data_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    if request.param == "socket":
        monkeypatch.setenv("LLDD_MOCK_NO_PROCESS_VM", "1")
        return {"LLDD_MOCK_NO_PROCESS_VM": "1"}
    monkeypatch.delenv("LLDD_MOCK_NO_PROCESS_VM", raising=False)
    return {}


def _peer_listening(peer: Any, mode: str, cluster: int = 2, role: str = "Decoder") -> int:
    for _ in range(10):
        port = xs.free_port()
        opts = options(mode, role)
        if mode == V1:
            opts["llm.listenIpInfo"] = f"127.0.0.1:{port}"
        else:
            opts["llm.ListenIp"], opts["llm.ListenPort"] = "127.0.0.1", str(port)
        if peer.call("init", cluster_id=cluster, options=opts) == 0:
            return port
    raise RuntimeError("no port")


def test_across_processes_pushes_to_a_decoder(x: Any, data_path: dict[str, str]) -> None:
    with xs.Peer(data_path) as peer:
        port = _peer_listening(peer, DIRECT)
        status, dst_cache = peer.call("register", num_tensors=2, shape=[4, 16], seed=-1)
        assert status == 0
        status, dst_blocks = peer.call("register", num_tensors=2, shape=[6, 8], seed=-1, kind=2,
                                       keys=[{"kind": 3, "model": 5}])
        assert status == 0
        p = x.engine(1, options(DIRECT, "Prompt"))
        src = rand(2, (4, 16), 30)
        _, src_id = x.register(p, src)
        blocks = rand(2, (3, 8), 31)
        _, blocks_id = x.register(p, blocks, xs.KIND_BLOCKS)
        assert x.link(p, [(2, port)]) == (0, [0])
        assert x.push_layer(p, src_id, x.by_id(2, dst_cache, 3), src_batch=1, n=2) == 0
        assert x.push_layer(p, blocks_id, x.blocks_key(2, 5), src_blocks=[2, 0, 1], dst_blocks=[5, 1, 2]) == 0
        got = np.frombuffer(peer.cache_bytes(dst_cache), dtype=np.uint8).reshape(2, 4, 16)
        got_blocks = np.frombuffer(peer.cache_bytes(dst_blocks), dtype=np.uint8).reshape(2, 6, 8)
        for t in range(2):
            assert (got[t][3] == src[t][1]).all() and not got[t][:3].any()
            assert (got_blocks[t][5] == blocks[t][2]).all() and (got_blocks[t][1:3] == blocks[t][0:2]).all()
            assert not got_blocks[t][0].any() and not got_blocks[t][3:5].any()
        assert peer.call("unregister", cache_id=dst_cache) == 0
        assert x.push_layer(p, src_id, x.by_id(2, dst_cache, 3), n=2) == S.LLM_KV_CACHE_NOT_EXIST   # PR-7


# ---- transfer_layer (TransferConfig) ------------------------------------------------------------


def test_a_transfer_config_writes_one_layer_to_the_given_addresses(x: Any) -> None:
    pair = Pair(x, SA)
    src = rand(4, (3, 16), 40)
    _, src_id = x.register(pair.p, src)
    dst = rand(2, (4, 16), 41)
    before = [a.copy() for a in dst]
    x.register(pair.d, dst)
    pair.link()
    addrs = [dst[0].ctypes.data + 2 * 16, dst[1].ctypes.data + 3 * 16]          # pre-offset batches 2 and 3
    assert x.transfer_layer(pair.p, src_id, 1, 2, addrs, src_batch=1) == 0
    expect = [a.copy() for a in before]
    expect[0][2] = src[2][1]
    expect[1][3] = src[3][1]
    assert all((a == b).all() for a, b in zip(dst, expect))


def test_a_transfer_config_cuts_a_batch_into_destination_blocks(x: Any) -> None:
    pair = Pair(x, SA)
    src = rand(2, (3, 20), 42)                   # TS 60: the chunk listed last is cut to 60 mod 8 = 4 bytes
    _, src_id = x.register(pair.p, src)
    dst = rand(2, (8, 8), 43)
    before = [a.copy() for a in dst]
    x.register(pair.d, dst, xs.KIND_BLOCKS)
    pair.link()
    addrs = [dst[0].ctypes.data, dst[1].ctypes.data]
    assert x.transfer_layer(pair.p, src_id, 0, 2, addrs, src_batch=1, dst_blocks=[6, 1, 3], block_size=8) == 0
    for t in range(2):
        expect = before[t].copy()
        expect[6] = src[t][1, 0:8]
        expect[1] = src[t][1, 8:16]
        expect[3, :4] = src[t][1, 16:20]
        assert (dst[t] == expect).all()
    assert x.transfer_layer(pair.p, src_id, 0, 2, addrs, dst_blocks=[0, 1, 2, 4], block_size=8) == \
        S.LLM_PARAM_INVALID
    assert "PR-16" in x.last_error()


def test_a_transfer_config_cuts_the_chunk_listed_last_even_when_the_batch_goes_on(x: Any) -> None:
    # PR-16, as the device: one chunk of a 20-byte batch, but cut to TS mod 8 = 60 mod 8 = 4 bytes
    pair = Pair(x, SA)
    src = rand(2, (3, 20), 46)
    _, src_id = x.register(pair.p, src)
    dst = rand(2, (8, 8), 47)
    before = [a.copy() for a in dst]
    x.register(pair.d, dst, xs.KIND_BLOCKS)
    pair.link()
    addrs = [dst[0].ctypes.data, dst[1].ctypes.data]
    assert x.transfer_layer(pair.p, src_id, 0, 2, addrs, src_batch=2, dst_blocks=[5], block_size=8) == 0
    for t in range(2):
        expect = before[t].copy()
        expect[5, :4] = src[t][2, 0:4]
        assert (dst[t] == expect).all()


def test_a_transfer_config_refuses_chunks_that_run_past_the_source_batch(x: Any) -> None:
    # TS 40 is a multiple of 8, so the device reads a full last chunk: bytes 36..44 of a
    # 40-byte tensor for batch 1 (PR-16, guard)
    pair = Pair(x, SA)
    _, src_id = x.register(pair.p, rand(2, (2, 20), 48))
    dst = rand(2, (8, 8), 49)
    before = [a.copy() for a in dst]
    x.register(pair.d, dst, xs.KIND_BLOCKS)
    pair.link()
    addrs = [dst[0].ctypes.data, dst[1].ctypes.data]
    assert x.transfer_layer(pair.p, src_id, 0, 2, addrs, src_batch=1, dst_blocks=[6, 1, 3], block_size=8) == \
        S.LLM_PARAM_INVALID
    assert "PR-16" in x.last_error()
    assert all((a == b).all() for a, b in zip(dst, before))
    assert x.transfer_layer(pair.p, src_id, 0, 2, addrs, src_batch=1, dst_blocks=[6, 1], block_size=8) == 0


def test_a_transfer_config_needs_a_block_size_below_the_source_tensor_size(x: Any) -> None:
    pair = Pair(x, SA)
    _, src_id = x.register(pair.p, rand(2, (1, 8), 50))
    dst = rand(2, (4, 8), 51)
    x.register(pair.d, dst, xs.KIND_BLOCKS)
    pair.link()
    addrs = [dst[0].ctypes.data, dst[1].ctypes.data]
    assert x.transfer_layer(pair.p, src_id, 0, 2, addrs, dst_blocks=[0], block_size=8) == S.LLM_PARAM_INVALID
    assert "dst_block_memory_size 8" in x.last_error()
    assert x.transfer_layer(pair.p, src_id, 0, 2, addrs, dst_blocks=[0], block_size=4) == 0


def test_a_transfer_config_moves_block_runs(x: Any) -> None:
    pair = Pair(x, SA)
    src = rand(2, (5, 8), 44)
    _, src_id = x.register(pair.p, src, xs.KIND_BLOCKS)
    dst = rand(2, (6, 8), 45)
    before = [a.copy() for a in dst]
    x.register(pair.d, dst, xs.KIND_BLOCKS)
    pair.link()
    addrs = [dst[0].ctypes.data, dst[1].ctypes.data]
    assert x.transfer_layer(pair.p, src_id, 0, 2, addrs, src_blocks=[0, 1, 4], dst_blocks=[3, 4, 0]) == 0
    for t in range(2):
        expect = before[t].copy()
        expect[3:5] = src[t][0:2]
        expect[0] = src[t][4]
        assert (dst[t] == expect).all()
    assert x.transfer_layer(pair.p, src_id, 0, 2, addrs, src_blocks=[0], dst_blocks=[1], block_size=16) == \
        S.LLM_PARAM_INVALID


def test_transfer_destinations_must_lie_in_one_live_remote_accessible_tensor(x: Any) -> None:
    pair = Pair(x, SA)
    _, src_id = x.register(pair.p, rand(2, (2, 16), 46))
    dst = zeros(2, (2, 16))
    _, dst_id = x.register(pair.d, dst)
    hidden = zeros(2, (2, 16))
    x.register(pair.d, hidden, remote=0)
    stranger = zeros(1, (64,))
    pair.link()
    base = [dst[0].ctypes.data, dst[1].ctypes.data]
    assert x.transfer_layer(pair.p, src_id, 0, 2, [base[0] + 17, base[1]]) == S.LLM_PARAM_INVALID   # past the end
    assert "PR-40" in x.last_error()
    assert x.transfer_layer(pair.p, src_id, 0, 2, [stranger[0].ctypes.data, base[1]]) == S.LLM_PARAM_INVALID
    assert x.transfer_layer(pair.p, src_id, 0, 2, [hidden[0].ctypes.data, base[1]]) == S.LLM_PARAM_INVALID
    assert not any(a.any() for a in dst)
    assert x.transfer_layer(pair.p, src_id, 0, 2, [base[0] + 16, base[1]]) == 0
    assert x.unregister(pair.d, dst_id) == 0
    assert x.transfer_layer(pair.p, src_id, 0, 2, base) == S.LLM_PARAM_INVALID                      # freed


def test_transfer_argument_checks(x: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    pair = Pair(x, SA)
    _, src_id = x.register(pair.p, rand(4, (2, 16), 47))
    _, odd_id = x.register(pair.p, rand(3, (2, 16), 48))
    _, host_id = x.register(pair.p, rand(2, (2, 16), 49), placement=xs.HOST)
    dst = zeros(2, (2, 16))
    x.register(pair.d, dst)
    pair.link()
    addrs = [dst[0].ctypes.data, dst[1].ctypes.data]
    p = pair.p
    cases = [
        ({"src_blocks": [0]}, "blocks to cache"),
        ({"src_blocks": [0, 1], "dst_blocks": [0]}, "src_blocks has 2"),
        ({"dst_blocks": [0]}, "must > 0"),
        ({"block_size": 8}, "without dst_blocks"),
        ({"src_blocks": [0], "dst_blocks": [0], "src_batch": 1}, "must be 0"),
        ({"dst_blocks": [0, 0], "block_size": 8}, "PR-5"),
        ({"src_batch": 2}, "src_batch_index 2"),
    ]
    for kwargs, words in cases:
        mode_for(monkeypatch, words)
        assert x.transfer_layer(p, src_id, 0, 2, addrs, **kwargs) == S.LLM_PARAM_INVALID, words
        assert words in x.last_error()
    assert x.transfer_layer(p, src_id, 2, 2, addrs) == S.LLM_PARAM_INVALID
    assert x.transfer_layer(p, odd_id, 0, 2, addrs) == S.LLM_PARAM_INVALID
    assert x.transfer_layer(p, host_id, 0, 2, addrs) == S.LLM_PARAM_INVALID
    # the own cluster is a link id like another: no link under it
    assert x.transfer_layer(p, src_id, 0, 1, addrs) == S.LLM_NOT_YET_LINK
    assert x.transfer_layer(p, 99, 0, 2, addrs) == S.LLM_KV_CACHE_NOT_EXIST
    assert x.transfer_layer(p, src_id, 0, 9, addrs) == S.LLM_NOT_YET_LINK
    assert x.lib.lldd_ext_transfer_layer(p, src_id, 0, 0, 2, x.ffi.NULL, x.ffi.NULL, 0, x.ffi.NULL, 0, 0) == \
        S.LLM_PARAM_INVALID
    assert not any(a.any() for a in dst)
    direct = x.engine(5, options(DIRECT, "Prompt"))
    assert x.transfer_layer(direct, 1, 0, 2, addrs) == S.LLM_PARAM_INVALID
    assert "TransferWithCacheKeyConfig" in x.last_error()


def _v1_pair(x: Any, **extra: str) -> tuple[Any, Any, int]:
    p, port = x.listening(1, options(V1, "Prompt", **extra), v1=True)
    d = x.engine(2, options(V1, "Decoder", **extra))
    assert x.link(d, [(1, port)]) == (0, [0])
    return p, d, port


def _alloc(x: Any, engine: Any, n: int, shape: tuple[int, ...], seed: int,
           keys: Any = ()) -> tuple[int, list[np.ndarray]]:
    status, cache_id, addrs = x.allocate(engine, n, list(shape), xs.KIND_CACHE, list(keys))
    assert status == 0, x.last_error()
    views = [x.view(a, int(np.prod(shape))).reshape(shape) for a in addrs]
    for v, data in zip(views, rand(n, shape, seed)):
        v[:] = data
    return cache_id, views


def test_v1_transfers_are_for_a_prompt_over_the_decoders_link(x: Any) -> None:
    p, d, _ = _v1_pair(x)
    src_id, src = _alloc(x, p, 2, (2, 16), 50)
    dst_id, dst = _alloc(x, d, 2, (2, 16), 51)
    before = [a.copy() for a in dst]
    assert x.transfer_layer(p, src_id, 0, 2, [dst[0].ctypes.data + 16, dst[1].ctypes.data]) == 0
    assert (dst[0][1] == src[0][0]).all() and (dst[0][0] == before[0][0]).all()
    assert (dst[1][0] == src[1][0]).all() and (dst[1][1] == before[1][1]).all()
    assert x.transfer_layer(d, dst_id, 0, 1, [src[0].ctypes.data, src[1].ctypes.data]) == S.LLM_PARAM_INVALID
    assert "PROMPT only" in x.last_error()


@pytest.mark.rules("X-16", "E-7")
def test_a_v1_transfer_to_the_own_cluster_id_takes_the_link_under_that_id(x: Any) -> None:
    """The vendor's v1 sample pair gives both engines cluster id 0: the Prompt's transfer
    to cluster 0 looks the link up by that id, as any other (no own-cluster step)."""
    p, port = x.listening(0, options(V1, "Prompt"), v1=True)
    d = x.engine(0, options(V1, "Decoder"))
    src_id, src = _alloc(x, p, 2, (2, 16), 56)
    _, dst = _alloc(x, d, 2, (2, 16), 57)
    before = [a.copy() for a in dst]
    addrs = [dst[0].ctypes.data + 16, dst[1].ctypes.data]
    assert x.transfer_layer(p, src_id, 0, 0, addrs) == S.LLM_NOT_YET_LINK
    assert all((a == b).all() for a, b in zip(dst, before))
    assert x.link(d, [(0, port)]) == (0, [0])
    assert x.transfer_layer(p, src_id, 0, 0, addrs) == 0, x.last_error()
    assert (dst[0][1] == src[0][0]).all() and (dst[0][0] == before[0][0]).all()
    assert (dst[1][0] == src[1][0]).all() and (dst[1][1] == before[1][1]).all()


@pytest.mark.rules("X-16", "X-17")
def test_a_v1_cache_to_blocks_transfer_is_refused_before_the_cache_lookup(x: Any) -> None:
    """v1 has no cache-to-blocks transfer: its host side wants block lists of one length
    (hicann/ge cache_engine.cc, CacheEngine::TransferCache) before it looks the source up,
    so an unknown source id is PARAM_INVALID too, and over a link nothing moves."""
    p, d, _ = _v1_pair(x)
    src_id, _ = _alloc(x, p, 2, (2, 16), 60)
    _, dst = _alloc(x, d, 2, (4, 8), 61)
    before = [a.copy() for a in dst]
    addrs = [dst[0].ctypes.data, dst[1].ctypes.data]
    for cache_id in (src_id, 9999):
        assert x.transfer_layer(p, cache_id, 0, 2, addrs, dst_blocks=[1, 2], block_size=8) == S.LLM_PARAM_INVALID
        assert "cache to blocks" in x.last_error()
    assert all((a == b).all() for a, b in zip(dst, before))


@pytest.mark.rules("X-16")
def test_v1_block_transfer_checks_come_in_the_devices_order_before_the_link(x: Any) -> None:
    """CacheManager::TransferCache (hicann/ge cache_manager.cpp): a block size above the
    batch stride, then the source blocks against the batch count, then a block size that is
    not the stride; all PARAM_INVALID before the link lookup (no link here: the Decoder of
    cluster 2 never linked to this Prompt)."""
    p, _ = x.listening(1, options(V1, "Prompt"), v1=True)
    src_id, _ = _alloc(x, p, 2, (4, 16), 62)
    addrs = [4096, 8192]
    assert x.transfer_layer(p, src_id, 0, 2, addrs, src_blocks=[7], dst_blocks=[0], block_size=32) == \
        S.LLM_PARAM_INVALID
    assert "larger than the source batch stride 16" in x.last_error()
    assert x.transfer_layer(p, src_id, 0, 2, addrs, src_blocks=[4], dst_blocks=[0], block_size=8) == \
        S.LLM_PARAM_INVALID
    assert "src_block_indices" in x.last_error()
    assert x.transfer_layer(p, src_id, 0, 2, addrs, src_blocks=[3], dst_blocks=[0], block_size=8) == \
        S.LLM_PARAM_INVALID
    assert "differs from the source block size 16" in x.last_error()
    for size in (0, 16):
        assert x.transfer_layer(p, src_id, 0, 2, addrs, src_blocks=[3], dst_blocks=[0], block_size=size) == \
            S.LLM_NOT_YET_LINK


@pytest.mark.rules("X-16")
def test_a_v1_block_transfer_reads_a_contiguous_caches_batches_as_blocks(x: Any) -> None:
    """The v1 device knows no cache kinds: source blocks index the batches of its cache
    (checked against the batch count) and are a batch stride long."""
    p, d, _ = _v1_pair(x)
    src_id, src = _alloc(x, p, 2, (4, 16), 63)
    _, dst = _alloc(x, d, 2, (4, 16), 64)
    before = [a.copy() for a in dst]
    addrs = [dst[0].ctypes.data, dst[1].ctypes.data]
    assert x.transfer_layer(p, src_id, 0, 2, addrs, src_blocks=[3, 0], dst_blocks=[1, 2]) == 0, x.last_error()
    for j in range(2):
        want = before[j].copy()
        want[1], want[2] = src[j][3], src[j][0]
        assert (dst[j] == want).all()


def test_v1_timeouts_are_wait_proc_timeout(x: Any) -> None:
    p, d, _ = _v1_pair(x, **{"llm.SyncKvCacheWaitTime": "200"})
    src_id, _ = _alloc(x, p, 2, (2, 16), 52)
    dst_id, dst = _alloc(x, d, 2, (2, 16), 53)
    assert x.lib.lldd_mock_set_serve_delay(d, 400) == 0
    assert x.transfer_layer(p, src_id, 0, 2, [dst[0].ctypes.data, dst[1].ctypes.data]) == \
        S.LLM_WAIT_PROCESS_TIMEOUT


def test_a_v1_pull_while_the_prompt_transfers_over_the_link_is_link_busy(x: Any) -> None:
    p, d, _ = _v1_pair(x, **{"llm.SyncKvCacheWaitTime": "3000"})
    src_id, _ = _alloc(x, p, 2, (2, 16), 54, keys=[x.req(1)])
    dst_id, dst = _alloc(x, d, 2, (2, 16), 55)
    assert x.lib.lldd_mock_set_serve_delay(d, 800) == 0              # the prompt's transfer waits on the decoder
    result: list[int] = []
    started = threading.Event()

    def transfer() -> None:
        started.set()
        result.append(x.transfer_layer(p, src_id, 0, 2, [dst[0].ctypes.data, dst[1].ctypes.data]))

    thread = threading.Thread(target=transfer)
    thread.start()
    started.wait()
    time.sleep(0.3)
    assert x.pull(d, x.req(1, cluster=1), dst_id) == S.LLM_LINK_BUSY
    thread.join()
    assert result == [0]
    assert x.lib.lldd_mock_set_serve_delay(d, 0) == 0
    assert x.pull(d, x.req(1, cluster=1), dst_id) == 0


def test_across_processes_a_transfer_config_to_a_decoder(x: Any, data_path: dict[str, str]) -> None:
    with xs.Peer(data_path) as peer:
        port = _peer_listening(peer, SA)
        status, dst_id = peer.call("register", num_tensors=2, shape=[4, 16], seed=-1, kind=2)
        assert status == 0
        p = x.engine(1, options(SA, "Prompt"))
        src = rand(4, (2, 16), 56)
        _, src_id = x.register(p, src)
        assert x.link(p, [(2, port)]) == (0, [0])
        base = _peer_tensor_addresses(peer, dst_id)                # the decoder's raw tensor addresses
        assert x.transfer_layer(p, src_id, 1, 2, [base[0] + 16, base[1]], dst_blocks=[2, 0], block_size=8) == 0
        got = np.frombuffer(peer.cache_bytes(dst_id), dtype=np.uint8).reshape(2, 4, 16)
        # chunk k of the layer's batch goes to dst_addr + dst_blocks[k] * 8
        assert (got[0][2, 0:8] == src[2][0, 0:8]).all() and (got[0][1, 0:8] == src[2][0, 8:16]).all()
        assert (got[1][1, 0:8] == src[3][0, 0:8]).all() and (got[1][0, 0:8] == src[3][0, 8:16]).all()
        assert int(got.sum()) == int(src[2][0].sum()) + int(src[3][0].sum())
        assert x.transfer_layer(p, src_id, 1, 2, [base[0] + 64, base[1]]) == S.LLM_PARAM_INVALID   # PR-40


def _peer_tensor_addresses(peer: Any, cache_id: int) -> list[int]:
    return [int(a) for a in peer.call("addresses", cache_id=cache_id)]
