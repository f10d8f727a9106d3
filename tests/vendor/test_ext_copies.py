"""Extension ABI, priority 4: lldd_ext_copy_cache (docs/reference/semantics.md §6.6, §8.8),
lldd_ext_copy_blocks (semantics.md §8.9) and lldd_ext_swap_blocks (semantics.md §8.10), with the guard PR-24
and the lints PR-5 and PR-25 (LLM_DATADIST_FFI_STRICT=1 refuses them); swap addresses are checked against this engine's caches and the mock ACL's
allocations where they lie in one.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from llm_datadist_ffi import LLMStatusCode as S
from llm_datadist_ffi import lint


import ext_support as xs
pytestmark = pytest.mark.mock_only(reason="raw calls of the mock's extension functions")


def rand(n: int, shape: tuple[int, ...], seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, size=shape, dtype=np.uint8) for _ in range(n)]


def copy_cache(x: Any, engine: Any, dst: int, src: int, dst_batch: int = 0, src_batch: int = 0, offset: int = 0,
               size: int = -1) -> int:
    return int(x.lib.lldd_ext_copy_cache(engine, dst, src, dst_batch, src_batch, offset, size))


def copy_blocks(x: Any, engine: Any, cache_id: int, pairs: list[tuple[int, int]]) -> int:
    flat = [v for pair in pairs for v in pair]
    return int(x.lib.lldd_ext_copy_blocks(engine, cache_id, x.u64(flat), len(pairs)))


def swap(x: Any, engine: Any, src: list[int], dst: list[int], block: int, pairs: list[tuple[int, int]],
         swap_in: int = 1) -> int:
    flat = [v for pair in pairs for v in pair]
    return int(x.lib.lldd_ext_swap_blocks(engine, x.u64(src), x.u64(dst), len(src), block, x.u64(flat), len(pairs),
                                          swap_in))


# ---- copy_cache -------------------------------------------------------------------------------


def test_copy_cache_copies_one_range_of_a_batch_in_every_tensor(x: Any) -> None:
    engine = x.engine(1, xs.v2_options())
    src = rand(3, (4, 16), 1)
    dst = rand(3, (2, 32), 2)
    before = [a.copy() for a in dst]
    _, src_id = x.register(engine, src)
    _, dst_id = x.register(engine, dst)
    assert copy_cache(x, engine, dst_id, src_id, dst_batch=1, src_batch=3, offset=4, size=9) == 0
    for t in range(3):
        expect = before[t].copy()
        expect[1, 4:13] = src[t][3, 4:13]
        assert (dst[t] == expect).all()
    assert copy_cache(x, engine, dst_id, src_id, offset=2) == 0                  # size -1: S_src - offset
    for t in range(3):
        assert (dst[t][0, 2:16] == src[t][0, 2:16]).all() and (dst[t][0, 16:] == before[t][0, 16:]).all()


@pytest.mark.parametrize("args, status, words", [
    ((2, 1, 0, 0, 0, 0), S.LLM_PARAM_INVALID, "size 0"),
    ((2, 9, 0, 0, 0, -1), S.LLM_KV_CACHE_NOT_EXIST, "src_cache_id 9"),
    ((9, 1, 0, 0, 0, -1), S.LLM_KV_CACHE_NOT_EXIST, "dst_cache_id 9"),
    ((4, 1, 0, 0, 0, -1), S.LLM_PARAM_INVALID, "blocks-only"),
    ((3, 1, 0, 0, 0, -1), S.LLM_PARAM_INVALID, "tensors"),
    ((2, 1, 2, 0, 0, -1), S.LLM_PARAM_INVALID, "dst_batch_index 2"),
    ((2, 1, 0, 4, 0, -1), S.LLM_PARAM_INVALID, "src_batch_index 4"),
    ((2, 1, 0, 0, 16, -1), S.LLM_PARAM_INVALID, "offset 16"),
    ((2, 1, 0, 0, 8, 9), S.LLM_PARAM_INVALID, "do not fit"),
    ((1, 1, 1, 1, 0, -1), S.LLM_PARAM_INVALID, "PR-24"),
])
def test_copy_cache_checks(x: Any, args: tuple[int, ...], status: int, words: str) -> None:
    engine = x.engine(1, xs.v2_options())
    src = rand(2, (4, 16), 3)
    dst = [np.zeros((2, 32), np.uint8) for _ in range(2)]
    x.register(engine, src)                                        # 1
    x.register(engine, dst)                                        # 2
    x.register(engine, [np.zeros((2, 32), np.uint8) for _ in range(3)])   # 3: three tensors
    x.register(engine, [np.zeros((4, 16), np.uint8) for _ in range(2)], xs.KIND_BLOCKS)   # 4
    before = [a.copy() for a in src]
    assert copy_cache(x, engine, *args) == status
    assert words in x.last_error()
    assert not any(a.any() for a in dst) and all((a == b).all() for a, b in zip(src, before))


def test_copy_cache_within_one_cache_and_of_a_deallocated_cache_with_keys(x: Any) -> None:
    engine = x.engine(1, xs.v2_options(pool=True, role="Prompt"))
    status, cache_id, addrs = x.allocate(engine, 2, [4, 16], keys=[x.req(1)])
    views = [x.view(a, 64).reshape(4, 16) for a in addrs]
    for v, data in zip(views, rand(2, (4, 16), 4)):
        v[:] = data
    assert x.deallocate(engine, cache_id) == 0                   # deferred: key 1 is bound
    assert copy_cache(x, engine, cache_id, cache_id, dst_batch=3, src_batch=0, offset=8, size=8) == 0
    assert all((v[3, 8:] == v[0, 8:]).all() for v in views)
    assert copy_cache(x, engine, cache_id, cache_id, dst_batch=0, src_batch=0, offset=8, size=8) == \
        S.LLM_PARAM_INVALID


def test_v1_copy_cache_works_on_device_caches(x: Any) -> None:
    engine = x.engine(1, xs.v1_options())
    _, a_id, a_addrs = x.allocate(engine, 1, [2, 16])
    _, b_id, b_addrs = x.allocate(engine, 1, [2, 16])
    x.view(a_addrs[0], 32)[:] = np.arange(32, dtype=np.uint8)
    assert copy_cache(x, engine, b_id, a_id, dst_batch=1, src_batch=0) == 0
    assert (x.view(b_addrs[0], 32)[16:] == np.arange(16, dtype=np.uint8)).all()
    assert copy_cache(x, engine, b_id, 42) == S.LLM_KV_CACHE_NOT_EXIST


# ---- copy_blocks ------------------------------------------------------------------------------


def test_copy_blocks_copies_one_block_to_several(x: Any) -> None:
    engine = x.engine(1, xs.v2_options())
    blocks = rand(2, (6, 8), 5)
    before = [a.copy() for a in blocks]
    _, cache_id = x.register(engine, blocks, xs.KIND_BLOCKS)
    assert copy_blocks(x, engine, cache_id, [(0, 3), (0, 4), (1, 5)]) == 0
    for t in range(2):
        expect = before[t].copy()
        expect[3] = expect[4] = before[t][0]
        expect[5] = before[t][1]
        assert (blocks[t] == expect).all()


@pytest.mark.parametrize("cache, pairs, status, words", [
    (9, [(0, 1)], S.LLM_KV_CACHE_NOT_EXIST, "cache_id 9"),
    (9, [], S.LLM_KV_CACHE_NOT_EXIST, "cache_id 9"),
    (2, [(0, 1)], S.LLM_PARAM_INVALID, "has no blocks"),
    (1, [(6, 1)], S.LLM_PARAM_INVALID, "source block 6"),
    (1, [(0, 6)], S.LLM_PARAM_INVALID, "destination block 6"),
    (1, [(0, 2), (2, 3)], S.LLM_PARAM_INVALID, "PR-24"),
])
def test_copy_blocks_checks(x: Any, cache: int, pairs: list[tuple[int, int]], status: int, words: str) -> None:
    engine = x.engine(1, xs.v2_options())
    blocks = rand(2, (6, 8), 6)
    before = [a.copy() for a in blocks]
    x.register(engine, blocks, xs.KIND_BLOCKS)                      # 1
    x.register(engine, rand(2, (6, 8), 7))                          # 2: contiguous
    assert copy_blocks(x, engine, cache, pairs) == status
    assert words in x.last_error()
    assert all((a == b).all() for a, b in zip(blocks, before))


def test_copy_blocks_with_no_pair_does_the_vendors_self_copy_of_block_0_with_a_lint(x: Any) -> None:
    # PR-25: the vendor's core takes its contiguous path: block 0 onto itself
    engine = x.engine(1, xs.v2_options())
    blocks = rand(2, (6, 8), 6)
    before = [a.copy() for a in blocks]
    x.register(engine, blocks, xs.KIND_BLOCKS)
    x.take_lints()
    assert copy_blocks(x, engine, 1, []) == 0
    assert x.take_lints() == [25]
    assert all((a == b).all() for a, b in zip(blocks, before))


def test_copy_blocks_writes_a_repeated_destination_last_with_a_lint(x: Any) -> None:
    engine = x.engine(1, xs.v2_options())
    blocks = rand(2, (6, 8), 6)
    before = [a.copy() for a in blocks]
    x.register(engine, blocks, xs.KIND_BLOCKS)
    x.take_lints()
    assert copy_blocks(x, engine, 1, [(0, 2), (1, 2), (0, 3)]) == 0
    assert x.take_lints() == [5]                                   # one lint per call
    for t in range(2):
        expect = before[t].copy()
        expect[2], expect[3] = before[t][1], before[t][0]          # the last pair naming block 2 wins
        assert (blocks[t] == expect).all()


@pytest.mark.parametrize("pairs, words", [([], "PR-25"), ([(0, 2), (1, 2)], "PR-5")])
def test_strict_mode_refuses_the_copy_blocks_lints(x: Any, monkeypatch: pytest.MonkeyPatch,
                                                   pairs: list[tuple[int, int]], words: str) -> None:
    engine = x.engine(1, xs.v2_options())
    blocks = rand(2, (6, 8), 6)
    before = [a.copy() for a in blocks]
    x.register(engine, blocks, xs.KIND_BLOCKS)
    monkeypatch.setenv(lint.STRICT_ENV, "1")
    assert copy_blocks(x, engine, 1, pairs) == S.LLM_PARAM_INVALID
    assert words in x.last_error() and x.take_lints() == []
    assert all((a == b).all() for a, b in zip(blocks, before))


def test_copy_blocks_checks_its_pointers(x: Any) -> None:
    engine = x.engine(1, xs.v2_options())
    assert x.lib.lldd_ext_copy_blocks(engine, 1, x.ffi.NULL, 2) == S.LLM_PARAM_INVALID
    assert x.lib.lldd_ext_copy_blocks(engine, 1, x.u64([0, 1]), 2**63) == S.LLM_PARAM_INVALID
    assert x.lib.lldd_ext_copy_blocks(x.ffi.NULL, 1, x.u64([0, 1]), 1) == S.LLM_PARAM_INVALID


# ---- swap_blocks ------------------------------------------------------------------------------


def test_swap_in_and_out_between_host_memory_and_a_device_cache(x: Any) -> None:
    engine = x.engine(1, xs.v2_options())
    host = rand(2, (6, 16), 8)                          # a CPU cache: memory the engine does not know
    device = [np.zeros((5, 16), np.uint8) for _ in range(2)]
    x.register(engine, device, xs.KIND_BLOCKS)
    haddr, daddr = [a.ctypes.data for a in host], [a.ctypes.data for a in device]
    pairs = [(1, 0), (2, 1), (3, 2), (5, 4)]                     # a run of three and one single block
    assert swap(x, engine, haddr, daddr, 16, pairs, swap_in=1) == 0
    for t in range(2):
        assert (device[t][0:3] == host[t][1:4]).all() and (device[t][4] == host[t][5]).all()
        assert not device[t][3].any()
    back = [np.zeros((6, 16), np.uint8) for _ in range(2)]
    assert swap(x, engine, daddr, [a.ctypes.data for a in back], 16, [(4, 0)], swap_in=0) == 0
    assert all((back[t][0] == host[t][5]).all() and not back[t][1:].any() for t in range(2))


def test_swap_checks_the_ranges_the_mock_knows(x: Any) -> None:
    from llm_datadist_ffi import acl
    engine = x.engine(1, xs.v2_options())
    device = [np.zeros((4, 16), np.uint8) for _ in range(2)]
    x.register(engine, device, xs.KIND_BLOCKS)
    registered_host = [np.zeros((4, 16), np.uint8) for _ in range(2)]
    x.register(engine, registered_host, xs.KIND_BLOCKS, remote=0, placement=xs.HOST)
    host = rand(2, (8, 16), 9)
    haddr, daddr = [a.ctypes.data for a in host], [a.ctypes.data for a in device]
    assert swap(x, engine, haddr, daddr, 16, [(0, 4)]) == S.LLM_PARAM_INVALID             # past the cache tensor
    assert "run past the end of tensor" in x.last_error()
    assert swap(x, engine, daddr, daddr, 16, [(0, 1)]) == S.LLM_PARAM_INVALID             # DEVICE as a swap-in source
    assert "DEVICE-placed" in x.last_error()
    assert swap(x, engine, haddr, [a.ctypes.data for a in registered_host], 16, [(0, 1)]) == S.LLM_PARAM_INVALID
    acl.aclrtSetDevice(0)
    dev = acl.aclrtMalloc(64, 0)
    pinned_host = acl.aclrtMallocHost(64)
    try:
        assert swap(x, engine, haddr[:1], [dev], 16, [(0, 4)]) == S.LLM_PARAM_INVALID      # past the allocation
        assert "aclrtMalloc allocation" in x.last_error()
        assert swap(x, engine, haddr[:1], [pinned_host], 16, [(0, 1)]) == S.LLM_PARAM_INVALID
        assert "aclrtMallocHost" in x.last_error()
        assert swap(x, engine, [pinned_host], [dev], 16, [(0, 3)]) == 0
    finally:
        acl.aclrtFree(dev)
        acl.aclrtFreeHost(pinned_host)
    assert swap(x, engine, haddr[:1], [dev], 16, [(0, 1)]) == S.LLM_PARAM_INVALID          # freed since
    assert "freed" in x.last_error()
    acl.aclrtResetDevice(0)
    assert not any(a.any() for a in device)


@pytest.mark.parametrize("kwargs, words", [
    ({"block": 0}, "block_size is 0"),
    ({"swap_in": 2}, "swap_in 2"),
    ({"pairs": [(0, 2**62)]}, "overflows"),
    ({"overlap": True}, "PR-24"),
    ({"zero": True}, "is 0"),
])
def test_swap_argument_checks(x: Any, kwargs: dict[str, Any], words: str) -> None:
    engine = x.engine(1, xs.v2_options())
    a, b = rand(1, (8, 16), 10)[0], np.zeros((8, 16), np.uint8)
    before = a.copy()
    src = [a.ctypes.data]
    dst = [a.ctypes.data] if kwargs.get("overlap") else [0] if kwargs.get("zero") else [b.ctypes.data]
    status = swap(x, engine, src, dst, kwargs.get("block", 16), kwargs.get("pairs", [(0, 1), (1, 2)]),
                  kwargs.get("swap_in", 1))
    assert status == S.LLM_PARAM_INVALID
    assert words in x.last_error()
    assert not b.any() and (a == before).all()


def test_swap_with_an_empty_mapping_succeeds_and_moves_nothing_with_a_lint(x: Any) -> None:
    engine = x.engine(1, xs.v2_options())
    a, b = rand(1, (8, 16), 10)[0], np.zeros((8, 16), np.uint8)
    x.take_lints()
    assert swap(x, engine, [a.ctypes.data], [b.ctypes.data], 16, []) == 0
    assert x.take_lints() == [25] and not b.any()


def test_swap_writes_a_repeated_destination_last_with_a_lint(x: Any) -> None:
    engine = x.engine(1, xs.v2_options())
    a, b = rand(1, (8, 16), 10)[0], np.zeros((8, 16), np.uint8)
    x.take_lints()
    assert swap(x, engine, [a.ctypes.data], [b.ctypes.data], 16, [(0, 1), (2, 1), (3, 2)]) == 0
    assert x.take_lints() == [5]
    expect = np.zeros((8, 16), np.uint8)
    expect[1], expect[2] = a[2], a[3]                               # pair (2, 1) comes after (0, 1)
    assert (b == expect).all()


@pytest.mark.parametrize("pairs, words", [([], "PR-25"), ([(0, 1), (2, 1)], "PR-5")])
def test_strict_mode_refuses_the_swap_lints(x: Any, monkeypatch: pytest.MonkeyPatch,
                                            pairs: list[tuple[int, int]], words: str) -> None:
    engine = x.engine(1, xs.v2_options())
    a, b = rand(1, (8, 16), 10)[0], np.zeros((8, 16), np.uint8)
    monkeypatch.setenv(lint.STRICT_ENV, "1")
    assert swap(x, engine, [a.ctypes.data], [b.ctypes.data], 16, pairs) == S.LLM_PARAM_INVALID
    assert words in x.last_error() and x.take_lints() == [] and not b.any()


def test_swap_checks_its_pointers_and_the_engine(x: Any) -> None:
    engine = x.create(1)
    a = np.zeros(16, np.uint8)
    assert swap(x, engine, [a.ctypes.data], [a.ctypes.data + 8], 8, [(0, 1)]) == S.LLM_FAILED   # not initialised
    assert x.init(engine, xs.v2_options()) == 0
    assert x.lib.lldd_ext_swap_blocks(engine, x.ffi.NULL, x.ffi.NULL, 1, 8, x.u64([0, 1]), 1, 1) == \
        S.LLM_PARAM_INVALID
    assert x.lib.lldd_ext_swap_blocks(engine, x.u64([1]), x.u64([2]), 1, 8, x.ffi.NULL, 1, 1) == S.LLM_PARAM_INVALID
    assert x.lib.lldd_ext_swap_blocks(engine, x.u64([1]), x.u64([2]), 2**62, 8, x.u64([0, 1]), 1, 1) == \
        S.LLM_PARAM_INVALID
