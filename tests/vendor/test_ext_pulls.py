"""Extension ABI, priority 2: lldd_ext_pull in both generations and both v2 modes
(docs/reference/semantics.md §1.3, §4.2, §6, §7, §8.0-§8.4, §8.11, §9.4, §9.5, §9.7, §11, §15; PR-3,
PR-4, PR-5, PR-6, PR-7, PR-8, PR-12, PR-13, PR-15, PR-16, PR-19, PR-20, PR-32,
PR-38).

Two engines of this process (a Prompt listening, a Decoder linked to it) unless the
test says otherwise; the last tests run the Prompt in another process. Expected bytes
come from numpy copies of the caches; untouched bytes are compared too.
"""
from __future__ import annotations

import threading
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


def linked(x: Any, mode: str, prompt: dict[str, str] | None = None,
           decoder: dict[str, str] | None = None) -> tuple[Any, Any, Any]:
    """(P, D, go): P (cluster 1) listens; go() links D (cluster 2) to it. Caches are
    registered before go(): a cache registered after the link is not reachable
    through it (PR-32)."""
    p, port = x.listening(1, options(mode, "Prompt", **(prompt or {})), v1=mode == V1)
    d = x.engine(2, options(mode, "Decoder", **(decoder or {})))

    def go() -> None:
        assert x.link(d, [(1, port)]) == (0, [0]), x.last_error()
    return p, d, go


def rand(n: int, shape: tuple[int, ...], seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, size=shape, dtype=np.uint8) for _ in range(n)]


def zeros(n: int, shape: tuple[int, ...]) -> list[np.ndarray]:
    return [np.zeros(shape, dtype=np.uint8) for _ in range(n)]


def alloc_filled(x: Any, engine: Any, n: int, shape: tuple[int, ...], seed: int, kind: int = xs.KIND_CACHE,
                 keys: Any = ()) -> tuple[int, list[np.ndarray]]:
    """An allocated cache filled with random bytes: its id and numpy views of it."""
    status, cache_id, addrs = x.allocate(engine, n, list(shape), kind, list(keys))
    assert status == 0, x.last_error()
    views = [x.view(a, int(np.prod(shape))).reshape(shape) for a in addrs]
    for v, data in zip(views, rand(n, shape, seed)):
        v[:] = data
    return cache_id, views


# ---- server-assisted and v1: pulls by key, and what they release (semantics.md §9.4, §9.5) ----------------


@pytest.mark.parametrize("mode", [SA, V1])
def test_a_pull_by_request_key_reads_the_bound_slot_and_releases_the_key(x: Any, mode: str) -> None:
    pool = {"llm.MemPoolConfig": xs.v2_options(pool=True)["llm.MemPoolConfig"]} if mode == SA else None
    p, d, go = linked(x, mode, prompt=pool)
    src_id, src = alloc_filled(x, p, 4, (3, 32), 1, keys=[x.placeholder(), x.req(7)])
    if mode == SA:
        dst = rand(4, (2, 32), 2)
        _, dst_id = x.register(d, dst)
    else:
        dst_id, dst = alloc_filled(x, d, 4, (2, 32), 2)              # v1 has no registration
    before = [a.copy() for a in dst]
    go()
    assert x.pull(d, x.req(7, cluster=1), dst_id, batch_index=1, size=20) == S.LLM_SUCCESS
    for t in range(4):
        expect = before[t].copy()
        expect[1, :20] = src[t][1, :20]                       # slot 1 of the key, 20 bytes into batch 1
        assert (dst[t] == expect).all()
    assert x.pull(d, x.req(7, cluster=1), dst_id) == S.LLM_KV_CACHE_NOT_EXIST     # released
    assert "request key" in x.last_error()
    assert x.pull(d, x.by_id(1, src_id, 1), dst_id) == S.LLM_SUCCESS             # the cache itself stays


def test_server_assisted_partial_pulls_release_when_every_tensor_was_read(x: Any) -> None:
    p, d, go = linked(x, SA, prompt={"llm.MemPoolConfig": xs.v2_options(pool=True)["llm.MemPoolConfig"]})
    src_id, src = alloc_filled(x, p, 4, (2, 16), 3, keys=[x.req(1), x.req(2)])
    dst = zeros(4, (2, 16))
    _, dst_id = x.register(d, dst)
    go()
    assert x.pull(d, x.req(1, cluster=1), dst_id, src_tensors=[0, 1], dst_tensors=[2, 3]) == 0
    assert (dst[2][0] == src[0][0]).all() and (dst[3][0] == src[1][0]).all() and not dst[0].any()
    assert x.pull(d, x.req(1, cluster=1), dst_id, src_tensors=[0, 1], dst_tensors=[0, 1]) == 0   # R = {2, 3}
    assert x.pull(d, x.req(1, cluster=1), dst_id, src_tensors=[2, 3], dst_tensors=[0, 1]) == 0   # R = {}: released
    assert x.pull(d, x.req(1, cluster=1), dst_id) == S.LLM_KV_CACHE_NOT_EXIST
    # R is shared and not reset: a partial pull through the other key releases it too
    assert x.pull(d, x.req(2, cluster=1), dst_id, src_tensors=[0, 1], dst_tensors=[0, 1]) == 0
    assert x.pull(d, x.req(2, cluster=1), dst_id) == S.LLM_KV_CACHE_NOT_EXIST


def test_a_pull_by_id_on_a_slot_bound_to_a_key_is_a_pull_through_that_key(x: Any) -> None:
    p, d, go = linked(x, SA, prompt={"llm.MemPoolConfig": xs.v2_options(pool=True)["llm.MemPoolConfig"]})
    src_id, src = alloc_filled(x, p, 2, (2, 16), 4, keys=[x.placeholder(), x.req(9)])
    dst = zeros(2, (2, 16))
    _, dst_id = x.register(d, dst)
    go()
    assert x.pull(d, x.by_id(1, src_id, 0), dst_id) == 0                  # slot 0: no key, nothing released
    assert x.pull(d, x.by_id(1, src_id, 1), dst_id) == 0                  # slot 1: key 9 released
    assert (dst[0][0] == src[0][1]).all()
    assert x.pull(d, x.req(9, cluster=1), dst_id) == S.LLM_KV_CACHE_NOT_EXIST
    assert x.pull(d, x.by_id(1, src_id, 2), dst_id) == S.LLM_KV_CACHE_NOT_EXIST   # past the batches


def test_prefix_keys_registered_caches_and_block_pulls_release_nothing(x: Any) -> None:
    p, d, go = linked(x, SA, prompt={"llm.MemPoolConfig": xs.v2_options(pool=True)["llm.MemPoolConfig"]})
    alloc_filled(x, p, 2, (2, 16), 5, keys=[x.prefix(3)])
    src = rand(2, (2, 16), 6)
    assert x.register(p, src, keys=[x.req(4)])[0] == 0
    assert x.register(p, rand(2, (4, 16), 7), kind=xs.KIND_BLOCKS, keys=[x.blocks_key(model=1)])[0] == 0
    dst = zeros(2, (2, 16))
    _, dst_id = x.register(d, dst)
    blocks = zeros(2, (4, 16))
    _, blocks_id = x.register(d, blocks, kind=xs.KIND_BLOCKS)
    go()
    for _ in range(2):
        assert x.pull(d, x.prefix(3, cluster=1), dst_id) == 0
        assert x.pull(d, x.req(4, cluster=1), dst_id) == 0
        assert x.pull(d, x.blocks_key(1, 1), blocks_id, src_blocks=[0, 1], dst_blocks=[2, 3]) == 0
    assert all((dst[t][0] == src[t][0]).all() and not dst[t][1].any() for t in range(2))


def test_deallocate_with_keys_then_pull_frees_the_cache(x: Any) -> None:
    p, d, go = linked(x, SA, prompt={"llm.MemPoolConfig": '{"memory_size": 65536, "page_shift": 12}'})
    src_id, src = alloc_filled(x, p, 1, (2, 32768), 8, keys=[x.req(1), x.req(2)])   # the whole pool
    expect = [a.copy() for a in src]
    assert x.deallocate(p, src_id) == 0                               # deferred: two keys bound
    dst = zeros(1, (2, 32768))
    _, dst_id = x.register(d, dst)
    go()
    assert x.pull(d, x.req(1, cluster=1), dst_id, n=1) == 0
    assert x.allocate(p, 1, [1, 4096])[0] == S.LLM_OUT_OF_MEMORY        # key 2 still holds it
    assert x.pull(d, x.by_id(1, src_id, 1), dst_id, batch_index=1, n=1) == 0   # through key 2: the last one
    assert (dst[0] == expect[0]).all()
    assert x.pull(d, x.by_id(1, src_id, 0), dst_id, n=1) == S.LLM_KV_CACHE_NOT_EXIST
    assert x.allocate(p, 1, [1, 4096])[0] == 0


def test_a_failed_pull_releases_nothing(x: Any) -> None:
    p, d, go = linked(x, SA, prompt={"llm.MemPoolConfig": xs.v2_options(pool=True)["llm.MemPoolConfig"]})
    alloc_filled(x, p, 2, (2, 16), 9, keys=[x.req(1)])
    _, dst_id = x.register(d, zeros(2, (2, 8)))
    go()
    assert x.pull(d, x.req(1, cluster=1), dst_id, size=9) == S.LLM_PARAM_INVALID        # > destination stride
    _, big_id = x.register(d, zeros(2, (2, 32)))
    assert x.pull(d, x.req(1, cluster=1), big_id) == S.LLM_PARAM_INVALID                # 32 > source stride
    assert x.pull(d, x.req(1, cluster=1), dst_id) == 0


# ---- direct mode: the table copy (semantics.md §9.7, PR-7, PR-19) -----------------------------------------


def test_direct_mode_resolves_against_the_table_copy_and_releases_nothing(x: Any) -> None:
    p, d, go = linked(x, DIRECT, prompt={"llm.MemPoolConfig": xs.v2_options(pool=True)["llm.MemPoolConfig"]})
    src_id, src = alloc_filled(x, p, 2, (2, 16), 10, keys=[x.req(1), x.prefix(2)])
    blocks = zeros(2, (4, 8))
    _, blocks_id = x.register(d, blocks, kind=xs.KIND_BLOCKS)
    go()
    assert x.pull(d, x.req(1, cluster=1), blocks_id, dst_blocks=[3, 1]) == 0        # C2B through slot 0
    assert (blocks[0][3] == src[0][0, :8]).all() and (blocks[0][1] == src[0][0, 8:]).all()
    assert x.pull(d, x.req(1, cluster=1), blocks_id, dst_blocks=[0]) == 0           # never released
    assert x.pull(d, x.prefix(2, cluster=1), blocks_id, dst_blocks=[0]) == S.LLM_KV_CACHE_NOT_EXIST
    assert "never published" in x.last_error()
    # after the copy: a new cache, a new binding, a released key are not found
    later_id, _ = alloc_filled(x, p, 2, (2, 16), 11, keys=[x.req(5)])
    assert x.pull(d, x.by_id(1, later_id), blocks_id, dst_blocks=[0]) == S.LLM_KV_CACHE_NOT_EXIST
    assert "copy" in x.last_error()
    assert x.pull(d, x.req(5, cluster=1), blocks_id, dst_blocks=[0]) == S.LLM_KV_CACHE_NOT_EXIST
    assert x.remove_key(p, x.req(1)) == 0
    assert x.pull(d, x.req(1, cluster=1), blocks_id, dst_blocks=[0]) == S.LLM_KV_CACHE_NOT_EXIST
    # a new link takes a new copy
    assert x.unlink(d, [(1, 0)], force=True)[0] == 0


def test_direct_mode_pull_by_id_and_pr6(x: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    lenient(monkeypatch)
    p, d, go = linked(x, DIRECT)
    src = rand(2, (3, 16), 12)
    _, src_id = x.register(p, src)
    dst = zeros(2, (2, 32))
    _, dst_id = x.register(d, dst)
    go()
    # source batch 1 starts at 1 x S_dst = 32: the device reads the source's batch 2 (PR-6)
    assert x.pull(d, x.by_id(1, src_id, 1), dst_id, batch_index=1, size=16) == 0
    assert (dst[1][1, :16] == src[1][2]).all() and not dst[1][0].any() and not dst[1][1, 16:].any()
    # batch 2 starts at 64, past the 48-byte source tensor: a guard (PR-6)
    assert x.pull(d, x.by_id(1, src_id, 2), dst_id, size=16) == S.LLM_PARAM_INVALID
    assert "PR-6" in x.last_error() and "past the source tensor" in x.last_error()
    assert x.pull(d, x.by_id(1, src_id, 3), dst_id, size=16) == S.LLM_KV_CACHE_NOT_EXIST
    assert "PR-6" in x.last_error()
    assert not dst[0][0].any() and not dst[1][0].any()
    # PR-20: the device looks an id <= 0 up as the blocks key of model_id 0 (none here)
    assert x.pull(d, x.by_id(1, 0), dst_id) == S.LLM_KV_CACHE_NOT_EXIST
    assert "blocks key of model_id 0" in x.last_error()
    strict(monkeypatch)
    assert x.pull(d, x.by_id(1, 0), dst_id) == S.LLM_KV_CACHE_NOT_EXIST
    assert "PR-20" in x.last_error()
    assert x.pull(d, x.by_id(1, src_id), dst_id) == S.LLM_PARAM_INVALID                # 32 > 16 source bytes


@pytest.mark.parametrize("mode", [SA, DIRECT])
def test_a_freed_peer_cache_is_never_read(x: Any, mode: str) -> None:
    p, d, go = linked(x, mode)
    src = rand(2, (2, 16), 13)
    _, src_id = x.register(p, src)
    _, dst_id = x.register(d, zeros(2, (2, 16)))
    go()
    assert x.pull(d, x.by_id(1, src_id), dst_id) == 0
    assert x.unregister(p, src_id) == 0
    assert x.pull(d, x.by_id(1, src_id), dst_id) == S.LLM_KV_CACHE_NOT_EXIST


def test_direct_mode_needs_both_caches_remote_accessible(x: Any) -> None:
    p, d, go = linked(x, DIRECT)
    _, hidden = x.register(p, rand(2, (2, 16), 14), remote=0)
    _, shown = x.register(p, rand(2, (2, 16), 15))
    _, dst_id = x.register(d, zeros(2, (2, 16)))
    _, dst_hidden = x.register(d, zeros(2, (2, 16)), remote=0)
    go()
    assert x.pull(d, x.by_id(1, hidden), dst_id) == S.LLM_PARAM_INVALID
    assert "remote accessible" in x.last_error()
    assert x.pull(d, x.by_id(1, shown), dst_hidden) == S.LLM_PARAM_INVALID
    sa_p, port = x.listening(3, options(SA, "Prompt"))
    sa_d = x.engine(4, options(SA, "Decoder"))
    _, sa_src = x.register(sa_p, rand(2, (2, 16), 14), remote=0)
    _, sa_dst = x.register(sa_d, zeros(2, (2, 16)), remote=0)
    assert x.link(sa_d, [(3, port)]) == (0, [0])
    assert x.pull(sa_d, x.by_id(3, sa_src), sa_dst) == 0                 # not required in server-assisted mode


@pytest.mark.parametrize("mode", [SA, DIRECT])
def test_a_cache_registered_after_the_link_is_not_reachable_through_it(x: Any, mode: str) -> None:
    p, d, go = linked(x, mode)
    go()
    _, src_id = x.register(p, rand(2, (2, 16), 16))
    _, dst_id = x.register(d, zeros(2, (2, 16)))
    assert x.pull(d, x.by_id(1, src_id), dst_id) == S.LLM_PARAM_INVALID
    assert "PR-32" in x.last_error()


# ---- block pulls (semantics.md §7, §8.3, §8.4) -----------------------------------------------------------


@pytest.mark.parametrize("mode", [SA, DIRECT, V1])
def test_blocks_to_blocks_by_blocks_key(x: Any, mode: str) -> None:
    if mode == V1:
        p, port = x.listening(1, options(V1, "Prompt"), v1=True)
        src_id, src = alloc_filled(x, p, 4, (6, 8), 17, xs.KIND_BLOCKS, [x.blocks_key(model=2)])
        d = x.engine(2, options(V1, "Decoder"))
        assert x.link(d, [(1, port)]) == (0, [0])
        dst_id, dst = alloc_filled(x, d, 4, (5, 8), 18, xs.KIND_BLOCKS)
    else:
        p, port = x.listening(1, options(mode, "Prompt"))
        src = rand(4, (6, 8), 17)
        assert x.register(p, src, xs.KIND_BLOCKS, keys=[x.blocks_key(model=2)])[0] == 0
        d = x.engine(2, options(mode, "Decoder"))
        dst = rand(4, (5, 8), 18)
        _, dst_id = x.register(d, dst, xs.KIND_BLOCKS)
        assert x.link(d, [(1, port)]) == (0, [0])
    before = [a.copy() for a in dst]
    sblk, dblk = [0, 1, 2, 5, 5], [4, 0, 1, 2, 3]
    assert x.pull(d, x.blocks_key(1, 2), dst_id, src_blocks=sblk, dst_blocks=dblk,
                  src_tensors=[2, 3], dst_tensors=[0, 1]) == 0
    for t in range(4):
        expect = before[t].copy()
        if t < 2:
            for s, dd in zip(sblk, dblk):
                expect[dd] = src[t + 2][s]
        assert (dst[t] == expect).all()
    assert x.pull(d, x.blocks_key(1, 3), dst_id, src_blocks=[0], dst_blocks=[0]) == S.LLM_KV_CACHE_NOT_EXIST


@pytest.mark.parametrize("sblk, dblk, status, words", [
    ([0, 1], [0], S.LLM_PARAM_INVALID, "src_blocks has 2 entries"),
    ([0, 1], [1, 1], S.LLM_PARAM_INVALID, "PR-5"),
    ([0], [5], S.LLM_PARAM_INVALID, "dst_blocks[0] = 5"),
    ([6], [0], S.LLM_PARAM_INVALID, "src_blocks[0] = 6"),
    ([5, 6], [0, 1], S.LLM_PARAM_INVALID, "PR-4"),
    ([0], [], S.LLM_PARAM_INVALID, "discrete memory to continuous"),
])
def test_block_list_rules(x: Any, monkeypatch: pytest.MonkeyPatch, sblk: list[int], dblk: list[int], status: int,
                          words: str) -> None:
    mode_for(monkeypatch, words)
    p, port = x.listening(1, options(SA, "Prompt"))
    x.register(p, rand(2, (6, 8), 19), xs.KIND_BLOCKS, keys=[x.blocks_key()])
    d = x.engine(2, options(SA, "Decoder"))
    dst = zeros(2, (5, 8))
    _, dst_id = x.register(d, dst, xs.KIND_BLOCKS)
    assert x.link(d, [(1, port)]) == (0, [0])
    assert x.pull(d, x.blocks_key(1), dst_id, src_blocks=sblk, dst_blocks=dblk) == status
    assert words in x.last_error()
    assert not any(a.any() for a in dst)


def test_block_sizes_must_agree(x: Any) -> None:
    p, port = x.listening(1, options(DIRECT, "Prompt"))
    x.register(p, rand(2, (4, 16), 20), xs.KIND_BLOCKS, keys=[x.blocks_key()])
    d = x.engine(2, options(DIRECT, "Decoder"))
    _, dst_id = x.register(d, zeros(2, (8, 8)), xs.KIND_BLOCKS)
    assert x.link(d, [(1, port)]) == (0, [0])
    assert x.pull(d, x.blocks_key(1), dst_id, src_blocks=[0], dst_blocks=[0]) == S.LLM_PARAM_INVALID
    assert "PR-13" in x.last_error()


def test_cache_to_blocks_cuts_one_source_batch_into_chunks(x: Any) -> None:
    p, d, go = linked(x, SA, prompt={"llm.MemPoolConfig": xs.v2_options(pool=True)["llm.MemPoolConfig"]})
    src_id, src = alloc_filled(x, p, 2, (3, 20), 21, keys=[x.placeholder(), x.req(1), x.req(2)])
    dst = rand(2, (6, 8), 22)
    before = [a.copy() for a in dst]
    _, dst_id = x.register(d, dst, xs.KIND_BLOCKS)
    _, big_id = x.register(d, zeros(2, (2, 32)), xs.KIND_BLOCKS)
    go()
    assert x.pull(d, x.req(1, cluster=1), dst_id, dst_blocks=[5, 0, 2]) == 0          # chunks 8, 8, 4 bytes
    for t in range(2):
        expect = before[t].copy()
        expect[5] = src[t][1, 0:8]
        expect[0] = src[t][1, 8:16]
        expect[2, :4] = src[t][1, 16:20]                                              # the rest untouched
        assert (dst[t] == expect).all()
    assert x.pull(d, x.req(1, cluster=1), dst_id, dst_blocks=[0]) == S.LLM_KV_CACHE_NOT_EXIST   # released
    assert x.pull(d, x.req(2, cluster=1), dst_id, dst_blocks=[0, 1, 2, 3]) == S.LLM_PARAM_INVALID
    assert "PR-16" in x.last_error()
    assert x.pull(d, x.req(2, cluster=1), big_id, dst_blocks=[0]) == S.LLM_PARAM_INVALID
    assert "tensor size < required size" in x.last_error()


def test_direct_cache_to_blocks_reads_batch_0_whatever_the_key_names(x: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # PR-16: the device ignores the source batch of a direct cache-to-blocks pull (a lint)
    lenient(monkeypatch)
    p, d, go = linked(x, DIRECT)
    src = rand(2, (3, 16), 23)
    _, src_id = x.register(p, src)
    dst = zeros(2, (4, 8))
    _, dst_id = x.register(d, dst, xs.KIND_BLOCKS)
    go()
    lib = x.lib
    lib.lldd_mock_lint_clear()
    assert x.pull(d, x.by_id(1, src_id, 1), dst_id, dst_blocks=[2, 0]) == 0
    assert lib.lldd_mock_lint_count() == 1 and lib.lldd_mock_lint_rule(0) == 16
    for t in range(2):
        assert (dst[t][2] == src[t][0, 0:8]).all() and (dst[t][0] == src[t][0, 8:16]).all()
        assert not dst[t][1].any() and not dst[t][3].any()
    lib.lldd_mock_lint_clear()
    strict(monkeypatch)
    assert x.pull(d, x.by_id(1, src_id, 1), dst_id, dst_blocks=[1]) == S.LLM_PARAM_INVALID
    assert "PR-16" in x.last_error()
    assert lib.lldd_mock_lint_count() == 0
    assert not dst[0][1].any() and not dst[1][1].any()
    assert x.pull(d, x.by_id(1, src_id, 0), dst_id, dst_blocks=[1]) == 0          # batch 0: nothing to lint


@pytest.mark.parametrize("mode", [SA, DIRECT])
def test_the_kinds_of_both_caches_must_fit_the_form(x: Any, mode: str) -> None:
    p, port = x.listening(1, options(mode, "Prompt"))
    _, contiguous = x.register(p, rand(2, (4, 8), 24))
    _, blocks = x.register(p, rand(2, (4, 8), 25), xs.KIND_BLOCKS, keys=[x.blocks_key()])
    d = x.engine(2, options(mode, "Decoder"))
    _, dst_cache = x.register(d, zeros(2, (4, 8)))
    _, dst_blocks = x.register(d, zeros(2, (4, 8)), xs.KIND_BLOCKS)
    assert x.link(d, [(1, port)]) == (0, [0])
    assert x.pull(d, x.by_id(1, contiguous), dst_blocks) == S.LLM_PARAM_INVALID        # C2C into blocks
    assert "non-blocks" in x.last_error()
    assert x.pull(d, x.blocks_key(1), dst_cache, src_blocks=[0], dst_blocks=[0]) == S.LLM_PARAM_INVALID
    assert "expect local cache is blocks" in x.last_error()
    assert x.pull(d, x.by_id(1, contiguous), dst_blocks, src_blocks=[0], dst_blocks=[0]) == S.LLM_PARAM_INVALID
    assert "PR-15" in x.last_error()
    assert x.pull(d, x.by_id(1, blocks), dst_cache) == S.LLM_PARAM_INVALID
    assert "PR-15" in x.last_error()


# ---- tensors, sizes, arguments ---------------------------------------------------------------


@pytest.mark.parametrize("kwargs, words", [
    ({"n": 0}, "tensor_num_per_layer (0)"),
    ({"n": 3, "src_tensors": [0, 1, 2]}, "must be a multiple of tensor_num_per_layer 3"),
    ({"dst_tensors": [0, 1, 2, 3, 4]}, "selects 5 tensors"),
    ({"dst_tensors": [4]}, "selects tensor 4"),
    ({"dst_tensors": [1, 1]}, "repeats dst tensor index[0]"),
    ({"src_tensors": [0, 1], "dst_tensors": [0]}, "selects 2 tensors and dst_layer_range 1"),
    ({"src_tensors": [0, 1]}, "all 4 local tensors receive"),
    ({"src_tensors": [4, 5], "dst_tensors": [0, 1]}, "source cache has 4"),
    ({"dst_tensors": [0, 1]}, "all 4 source tensors are sent"),
    ({"size": 0}, "size 0"),
    ({"size": 17}, "larger than the destination stride"),
    ({"batch_index": 2}, "batch_index 2"),
    ({"src_offset": 0}, "PR-8"),
    ({"dst_offset": 3}, "PR-8"),
])
def test_argument_and_tensor_rules(x: Any, kwargs: dict[str, Any], words: str) -> None:
    p, d, go = linked(x, SA)
    _, src_id = x.register(p, rand(4, (2, 16), 26))
    dst = zeros(4, (2, 16))
    _, dst_id = x.register(d, dst)
    go()
    assert x.pull(d, x.by_id(1, src_id), dst_id, **kwargs) == S.LLM_PARAM_INVALID
    assert words in x.last_error()
    assert not any(a.any() for a in dst)


def test_pull_checks_in_the_engine_order(x: Any) -> None:
    p, d, go = linked(x, SA)
    _, src_id = x.register(p, rand(2, (2, 16), 27))
    _, dst_id = x.register(d, zeros(2, (2, 16)))
    go()
    assert x.pull(d, x.by_id(2, src_id), dst_id) == S.LLM_PARAM_INVALID                 # own cluster
    assert x.pull(d, x.by_id(1, src_id), 99) == S.LLM_KV_CACHE_NOT_EXIST               # local cache
    assert x.pull(d, x.by_id(7, src_id), dst_id) == S.LLM_NOT_YET_LINK                  # no link
    assert x.pull(d, x.by_id(1, 99), dst_id) == S.LLM_KV_CACHE_NOT_EXIST                # remote cache
    assert x.pull(d, x.key(4, 1), dst_id) == S.LLM_PARAM_INVALID                        # key kind
    assert x.pull(d, x.key(xs.KEY_CACHE, 1), dst_id) == S.LLM_PARAM_INVALID             # placeholder
    assert x.pull(d, x.key(xs.KEY_CACHE, 1, req=1, prefix=1), dst_id) == S.LLM_PARAM_INVALID
    assert x.pull(d, x.by_id(1, src_id), dst_id, src_blocks=[0], dst_blocks=[0], size=16) == S.LLM_PARAM_INVALID
    assert x.lib.lldd_ext_pull(d, x.ffi.NULL, dst_id, 0, -1, x.ffi.NULL, 0, x.ffi.NULL, 0, x.ffi.NULL, 0,
                               x.ffi.NULL, 0, -1, -1, 2) == S.LLM_PARAM_INVALID
    assert x.lib.lldd_ext_pull(d, x.by_id(1, src_id), dst_id, 0, -1, x.ffi.NULL, 3, x.ffi.NULL, 0, x.ffi.NULL, 0,
                               x.ffi.NULL, 0, -1, -1, 2) == S.LLM_PARAM_INVALID
    assert x.lib.lldd_ext_pull(d, x.by_id(1, src_id), dst_id, 0, -1, x.ffi.NULL, 0, x.ffi.NULL, 0, x.ffi.NULL,
                               2**62, x.ffi.NULL, 0, -1, -1, 2) == S.LLM_PARAM_INVALID


@pytest.mark.parametrize("tensors, status", [(2043, S.LLM_SUCCESS), (2044, S.LLM_PARAM_INVALID)])
def test_server_assisted_request_limit_on_tensors(x: Any, tensors: int, status: int) -> None:
    p, d, go = linked(x, SA)
    src = [np.full(1, i % 251 + 1, dtype=np.uint8) for i in range(tensors)]
    dst = [np.zeros(1, dtype=np.uint8) for _ in range(tensors)]
    _, src_id = x.register(p, src, shape=[1])
    _, dst_id = x.register(d, dst, shape=[1])
    go()
    assert x.pull(d, x.by_id(1, src_id), dst_id, n=1) == status
    if status == 0:
        assert all((a == b).all() for a, b in zip(src, dst))
    else:
        assert "docs/reference/semantics.md §15" in x.last_error()


def test_server_assisted_request_limit_on_entries(x: Any) -> None:
    p, d, go = linked(x, SA)
    _, src_id = x.register(p, rand(2, (1, 8000), 28))
    _, dst_id = x.register(d, zeros(2, (8000, 1)), xs.KIND_BLOCKS)
    go()
    assert x.pull(d, x.by_id(1, src_id), dst_id, dst_blocks=list(range(3579))) == 0     # 2 + 2 x 3579 = 7160
    assert x.pull(d, x.by_id(1, src_id), dst_id, dst_blocks=list(range(3580))) == S.LLM_PARAM_INVALID


def test_direct_request_limit_on_entries(x: Any) -> None:
    p, port = x.listening(1, options(DIRECT, "Prompt"))
    x.register(p, rand(1, (131072, 1), 29), xs.KIND_BLOCKS, keys=[x.blocks_key()])
    d = x.engine(2, options(DIRECT, "Decoder"))
    _, dst_id = x.register(d, zeros(1, (131072, 1)), xs.KIND_BLOCKS)
    assert x.link(d, [(1, port)]) == (0, [0])
    sblk = list(range(0, 2 * 65532, 2))                                        # 65532 runs: 1 + 2 x 65532 entries
    assert x.pull(d, x.blocks_key(1), dst_id, src_blocks=sblk[:65531], dst_blocks=sblk[:65531], n=1) == 0
    assert x.pull(d, x.blocks_key(1), dst_id, src_blocks=sblk, dst_blocks=sblk, n=1) == S.LLM_PARAM_INVALID


# ---- placements in server-assisted mode (semantics.md §1.3) -----------------------------------------------


def test_server_assisted_placement_pairs(x: Any) -> None:
    p, d, go = linked(x, SA)
    _, host_src = x.register(p, rand(1, (2, 16), 30), placement=xs.HOST)
    _, dev_src = x.register(p, rand(1, (2, 16), 31))
    _, host_dst = x.register(d, zeros(1, (2, 16)), placement=xs.HOST)
    _, dev_dst = x.register(d, zeros(1, (2, 16)))
    go()
    assert x.pull(d, x.by_id(1, host_src), host_dst, n=1) == S.LLM_FEATURE_NOT_ENABLED
    assert x.pull(d, x.by_id(1, dev_src), host_dst, n=1) == S.LLM_PARAM_INVALID      # no device pool here
    assert "llm.MemPoolConfig" in x.last_error()
    assert x.pull(d, x.by_id(1, host_src), dev_dst, n=1) == S.LLM_PARAM_INVALID      # none on the host side
    assert x.pull(d, x.by_id(1, dev_src), dev_dst, n=1) == 0


def test_a_device_to_host_pull_stages_through_the_device_pool(x: Any) -> None:
    small = '{"memory_size": 33554432, "page_shift": 16}'                       # room for one buffer only
    big = '{"memory_size": 134217728, "page_shift": 16}'
    p, port = x.listening(1, options(SA, "Prompt", **{"llm.MemPoolConfig": small}))
    src = rand(1, (2, 16), 32)
    _, src_id = x.register(p, src)
    d_small = x.engine(2, options(SA, "Decoder", **{"llm.MemPoolConfig": small}))
    d_big = x.engine(3, options(SA, "Decoder", **{"llm.MemPoolConfig": big}))
    dst = zeros(1, (2, 16))
    _, small_dst = x.register(d_small, dst, placement=xs.HOST)
    _, big_dst = x.register(d_big, dst, placement=xs.HOST)
    for d in (d_small, d_big):
        assert x.link(d, [(1, port)]) == (0, [0])
    assert x.pull(d_small, x.by_id(1, src_id), small_dst, n=1) == S.LLM_OUT_OF_MEMORY
    assert not dst[0].any()
    assert x.pull(d_big, x.by_id(1, src_id), big_dst, n=1) == 0
    assert (dst[0][0] == src[0][0]).all()
    assert x.allocate(d_big, 1, [1, 134217728])[0] == 0                          # the staging went back


# ---- v1 (semantics.md §6.3, §8.11, §11, PR-38) ------------------------------------------------------------


def test_v1_offsets_move_exactly_l_bytes_and_keep_the_key(x: Any) -> None:
    p, d, go = linked(x, V1)
    src_id, src = alloc_filled(x, p, 2, (2, 32), 33, keys=[x.req(1), x.req(2)])
    dst_id, dst = alloc_filled(x, d, 2, (2, 32), 34)
    before = [a.copy() for a in dst]
    go()
    assert x.pull(d, x.req(1, cluster=1), dst_id, batch_index=1, src_offset=4, dst_offset=10) == 0
    for t in range(2):
        expect = before[t].copy()
        expect[1, 10:32] = src[t][0, 4:26]                     # size -1: 32 - 10 bytes, from offset 4
        assert (dst[t] == expect).all()
    assert x.pull(d, x.req(1, cluster=1), dst_id, src_offset=0) == 0          # an offset keeps the key
    assert x.pull(d, x.req(1, cluster=1), dst_id, size=8, src_offset=0, dst_offset=0) == 0
    assert x.pull(d, x.req(1, cluster=1), dst_id) == 0                        # no offset: released
    assert x.pull(d, x.req(1, cluster=1), dst_id) == S.LLM_KV_CACHE_NOT_EXIST
    assert x.pull(d, x.req(2, cluster=1), dst_id, size=8, src_offset=25) == S.LLM_PARAM_INVALID
    assert "srcCacheOffset" in x.last_error()
    assert x.pull(d, x.req(2, cluster=1), dst_id, size=8, dst_offset=25) == S.LLM_PARAM_INVALID
    assert x.pull(d, x.req(2, cluster=1), dst_id, dst_offset=32) == S.LLM_PARAM_INVALID
    assert x.pull(d, x.req(2, cluster=1), dst_id, dst_offset=-2) == S.LLM_PARAM_INVALID


def test_v1_pulls_are_for_a_decoder_and_cannot_cut_a_cache_into_blocks(x: Any) -> None:
    p, d, go = linked(x, V1)
    src_id, _ = alloc_filled(x, p, 2, (2, 32), 35, keys=[x.req(1)])
    dst_id, _ = alloc_filled(x, d, 2, (2, 32), 36, xs.KIND_BLOCKS)
    go()
    assert x.pull(d, x.req(1, cluster=1), dst_id, dst_blocks=[0]) == S.LLM_PARAM_INVALID
    assert "v1" in x.last_error()
    mix = x.engine(3, options(V1, "Mix"))
    assert x.pull(mix, x.req(1, cluster=1), 1) == S.LLM_PARAM_INVALID
    assert "only a DECODER" in x.last_error()
    assert x.pull(d, x.by_id(1, src_id, 2), dst_id) == S.LLM_KV_CACHE_NOT_EXIST


def test_a_v1_pull_from_the_own_cluster_id_runs_the_local_checks_then_needs_a_link(x: Any) -> None:
    """v1 has no own-cluster step (E-7, X-18): the local checks run, then the link named
    by that id decides (none: NOT_YET_LINK; the vendor's v1 sample pair shares id 0)."""
    d = x.engine(2, options(V1, "Decoder"))
    dst_id, dst = alloc_filled(x, d, 2, (2, 32), 37)
    assert x.pull(d, x.req(1, cluster=2), 99) == S.LLM_KV_CACHE_NOT_EXIST
    assert x.pull(d, x.req(1, cluster=2), dst_id, batch_index=5) == S.LLM_PARAM_INVALID
    assert x.pull(d, x.req(1, cluster=2), dst_id) == S.LLM_NOT_YET_LINK
    p, port = x.listening(2, options(V1, "Prompt"), v1=True)
    src_id, src = alloc_filled(x, p, 2, (2, 32), 38, keys=[x.req(1, cluster=2)])
    assert x.link(d, [(2, port)]) == (0, [0]), x.last_error()
    assert x.pull(d, x.req(1, cluster=2), dst_id) == S.LLM_SUCCESS
    for t in range(2):
        assert np.array_equal(dst[t][0], src[t][0])


def test_v1_repeated_keys_bind_the_last_slot(x: Any) -> None:
    p, d, go = linked(x, V1)
    src_id, src = alloc_filled(x, p, 1, (3, 8), 37, keys=[x.req(1), x.placeholder(), x.req(1)])
    dst_id, dst = alloc_filled(x, d, 1, (3, 8), 38)
    go()
    assert x.pull(d, x.req(1, cluster=1), dst_id, n=1) == 0
    assert (dst[0][0] == src[0][2]).all()


# ---- timeouts and dead peers ------------------------------------------------------------------


@pytest.mark.parametrize("mode, code", [(SA, S.LLM_TIMEOUT), (V1, S.LLM_WAIT_PROCESS_TIMEOUT)])
def test_a_slow_peer_times_out_and_poisons_the_link(x: Any, mode: str, code: int) -> None:
    extra = {"llm.SyncKvCacheWaitTime": "200"}
    p, d, go = linked(x, mode, prompt=extra, decoder=extra)
    if mode == V1:
        alloc_filled(x, p, 1, (2, 8), 39, keys=[x.req(1)])
        dst_id, _ = alloc_filled(x, d, 1, (2, 8), 40)
    else:
        x.register(p, rand(1, (2, 8), 39), keys=[x.req(1)])
        _, dst_id = x.register(d, zeros(1, (2, 8)))
    assert x.lib.lldd_mock_set_serve_delay(p, 400) == 0
    go()
    assert x.pull(d, x.req(1, cluster=1), dst_id, n=1) == code
    assert x.lib.lldd_mock_set_serve_delay(p, 0) == 0
    assert x.pull(d, x.req(1, cluster=1), dst_id, n=1) == code                  # PR-35


@pytest.mark.parametrize("p_mode, d_mode", [(SA, DIRECT), (DIRECT, SA), (V1, SA), (SA, V1), (V1, DIRECT)])
def test_engines_in_different_modes_cannot_link(x: Any, p_mode: str, d_mode: str) -> None:
    p, port = x.listening(1, options(p_mode, "Prompt"), v1=p_mode == V1)
    d = x.engine(2, options(d_mode, "Decoder"))
    assert x.link(d, [(1, port)]) == (S.LLM_PARAM_INVALID, [S.LLM_PARAM_INVALID])
    assert "modes differ" in x.last_error()


def test_concurrent_pulls_move_the_right_bytes(x: Any) -> None:
    p, port = x.listening(1, options(SA, "Prompt", **{"llm.MemPoolConfig": xs.v2_options(pool=True)[
        "llm.MemPoolConfig"]}))
    caches = [alloc_filled(x, p, 2, (4, 64), 60 + i, keys=[x.req(200 + i)]) for i in range(8)]
    decoders = [x.engine(2 + i, options(SA, "Decoder")) for i in range(2)]
    dsts = [zeros(2, (4, 64)) for _ in range(8)]
    ids = [x.register(decoders[i % 2], dsts[i])[1] for i in range(8)]
    for d in decoders:
        assert x.link(d, [(1, port)]) == (0, [0])
    results: dict[int, int] = {}

    def work(i: int) -> None:
        results[i] = x.pull(decoders[i % 2], x.req(200 + i, cluster=1), ids[i], batch_index=i % 4)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i in range(8):
        assert results[i] == 0
        for t in range(2):
            assert (dsts[i][t][i % 4] == caches[i][1][t][0]).all()
            assert sum(int(dsts[i][t][b].any()) for b in range(4)) == 1


# ---- across processes ------------------------------------------------------------------------


def _peer_prompt(x: Any, peer: Any, mode: str, pool: bool = True) -> int:
    for _ in range(10):
        port = xs.free_port()
        opts = options(mode, "Prompt", **({"llm.MemPoolConfig": xs.v2_options(pool=True)["llm.MemPoolConfig"]}
                                         if pool and mode != V1 else {}))
        if mode == V1:
            opts["llm.listenIpInfo"] = f"127.0.0.1:{port}"
        else:
            opts["llm.ListenIp"], opts["llm.ListenPort"] = "127.0.0.1", str(port)
        if peer.call("init", cluster_id=1, options=opts) == 0:
            return port
    raise RuntimeError("no port")


@pytest.fixture(params=["process_vm", "socket"])
def data_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Both cross-process data paths: process_vm_readv/writev, and the link's socket."""
    if request.param == "socket":
        monkeypatch.setenv("LLDD_MOCK_NO_PROCESS_VM", "1")
        return {"LLDD_MOCK_NO_PROCESS_VM": "1"}
    monkeypatch.delenv("LLDD_MOCK_NO_PROCESS_VM", raising=False)
    return {}


@pytest.mark.parametrize("mode", [SA, V1])
def test_across_processes_a_pull_by_key_releases_and_frees_on_the_peer(x: Any, mode: str,
                                                                        data_path: dict[str, str]) -> None:
    with xs.Peer(data_path) as peer:
        port = _peer_prompt(x, peer, mode)
        status, src_id = peer.call("allocate", num_tensors=2, shape=[3, 64], seed=70,
                                   keys=[{"kind": 1, "req": 2**64 - 1}, {"kind": 1, "req": 5},
                                         {"kind": 1, "req": 6}])
        assert status == 0
        expect = xs.fill(2, 3 * 64, 70)
        assert peer.call("deallocate", cache_id=src_id) == 0                 # deferred: keys 5 and 6
        d = x.engine(2, options(mode, "Decoder"))
        if mode == V1:
            dst_id, dst = alloc_filled(x, d, 2, (3, 64), 0)
            for a in dst:
                a[:] = 0
        else:
            dst = zeros(2, (3, 64))
            _, dst_id = x.register(d, dst)
        assert x.link(d, [(1, port)]) == (0, [0])
        assert x.pull(d, x.req(5, cluster=1), dst_id, batch_index=2) == 0
        assert x.pull(d, x.req(5, cluster=1), dst_id) == S.LLM_KV_CACHE_NOT_EXIST
        assert x.pull(d, x.by_id(1, src_id, 2), dst_id) == 0                # through key 6: the last reference
        for t in range(2):
            assert (dst[t][2] == expect[t][64:128]).all()
            assert (dst[t][0] == expect[t][128:192]).all()
            assert not dst[t][1].any()
        assert x.pull(d, x.by_id(1, src_id, 0), dst_id) == S.LLM_KV_CACHE_NOT_EXIST   # freed on the peer


def test_across_processes_direct_block_and_cache_to_block_pulls(x: Any, data_path: dict[str, str]) -> None:
    with xs.Peer(data_path) as peer:
        port = _peer_prompt(x, peer, DIRECT)
        status, blocks_id = peer.call("register", num_tensors=2, shape=[8, 16], seed=71, kind=2,
                                      keys=[{"kind": 3, "model": 4}])
        assert status == 0
        status, cache_id = peer.call("register", num_tensors=2, shape=[1, 40], seed=72,
                                     keys=[{"kind": 1, "req": 9}])
        assert status == 0
        d = x.engine(2, options(DIRECT, "Decoder"))
        dst = zeros(2, (8, 16))
        _, dst_id = x.register(d, dst, xs.KIND_BLOCKS)
        assert x.link(d, [(1, port)]) == (0, [0])
        assert x.pull(d, x.blocks_key(1, 4), dst_id, src_blocks=[7, 0, 1], dst_blocks=[0, 5, 6]) == 0
        blocks = [a.reshape(8, 16) for a in xs.fill(2, 128, 71)]
        cache = [a.reshape(1, 40) for a in xs.fill(2, 40, 72)]
        for t in range(2):
            assert (dst[t][0] == blocks[t][7]).all() and (dst[t][5:7] == blocks[t][0:2]).all()
        assert x.pull(d, x.req(9, cluster=1), dst_id, dst_blocks=[1, 2, 3]) == 0
        for t in range(2):
            assert (dst[t][1] == cache[t][0, 0:16]).all() and (dst[t][2] == cache[t][0, 16:32]).all()
            assert (dst[t][3, :8] == cache[t][0, 32:40]).all() and not dst[t][3, 8:].any()
        assert x.pull(d, x.req(9, cluster=1), dst_id, dst_blocks=[4]) == 0        # direct: never released
        for t in range(2):                                  # one chunk, cut to TS mod 16 = 8 bytes (PR-16)
            assert (dst[t][4, :8] == cache[t][0, 0:8]).all() and not dst[t][4, 8:].any()
        assert peer.call("unregister", cache_id=cache_id) == 0
        assert x.pull(d, x.req(9, cluster=1), dst_id, dst_blocks=[4]) == S.LLM_KV_CACHE_NOT_EXIST   # PR-19
        assert x.pull(d, x.by_id(1, cache_id), dst_id, dst_blocks=[4]) == S.LLM_KV_CACHE_NOT_EXIST  # PR-7


def test_across_processes_a_peer_that_dies_gives_timeout(x: Any) -> None:
    peer = xs.Peer()
    try:
        port = _peer_prompt(x, peer, SA, pool=False)
        status, src_id = peer.call("register", num_tensors=1, shape=[2, 8], seed=73, keys=[{"kind": 1, "req": 1}])
        d = x.engine(2, options(SA, "Decoder"))
        _, dst_id = x.register(d, zeros(1, (2, 8)))
        assert x.link(d, [(1, port)]) == (0, [0])
        assert x.pull(d, x.req(1, cluster=1), dst_id, n=1) == 0
    finally:
        peer.proc.kill()
        peer.proc.wait()
        peer.close()
    assert x.pull(d, x.by_id(1, src_id), dst_id, n=1) == S.LLM_TIMEOUT
