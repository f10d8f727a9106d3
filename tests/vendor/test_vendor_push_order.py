"""The check order of the extension pushes (push_blocks, push_cache) and of the
transfers by address (transfer_cache_async with a TransferConfig) against the vendor's
layer-wise job (docs/semantics.md X-16, X-17, E-11, docs/reference/semantics.md §8.0).

The vendor's engine looks up the local cache, then the link, then (direct mode) the
local cache's remote access, the destination and its checks, and reads the block
lists last; it has no own-cluster step for pushes or transfers, so one to the engine's
own id goes over a self link when there is one. A transfer by address (server-assisted
mode) checks its source (layer, form, block size, batch, blocks) after the link.
"""
from __future__ import annotations

from typing import Any, List, Optional, Tuple

import numpy as np
import pytest

from llm_datadist_ffi import LLMException
from llm_datadist_ffi.vendor import (
    BlocksCacheKey, Cache, CacheDesc, DataType, LayerSynchronizer, LLMRole, TransferConfig,
)

import vendor_support as vs
from source_pairs import BLOCK_BYTES, BLOCKS, D_ID, P_ID, TENSORS, Local, S, prompt_blocks, start_prompt
from vendor_support import fill, raises

pytestmark = [pytest.mark.mock_only(reason="the vendor-compatible API needs the mock's extension functions"),
              pytest.mark.usefixtures("no_engine_left")]


# ---- item: the check order of pushes (X-16, X-17) --------------------------------------------------

@pytest.mark.rules("X-17", "§8.0")
@pytest.mark.parametrize("src_blocks, dst_blocks", [([], [1]), ([0, 1], [2]), ([], [0, 1, 2])])
def test_a_push_without_a_link_answers_not_yet_link_before_its_block_lists_are_read(
        src_blocks: List[int], dst_blocks: List[int]) -> None:
    local = Local(vs.v2_options())
    try:
        src, _ = local.blocks_cache(seed=1)
        raises(LLMException, lambda: local.cm.push_blocks(BlocksCacheKey(P_ID, 0), src, src_blocks, dst_blocks),
               status=S.LLM_NOT_YET_LINK)
    finally:
        local.engine.finalize()


@pytest.mark.rules("X-16", "§8.0")
def test_a_push_to_the_own_cluster_without_a_self_link_answers_not_yet_link() -> None:
    local = Local(vs.v2_options())
    try:
        src, _ = local.blocks_cache(seed=1)
        raises(LLMException, lambda: local.cm.push_blocks(BlocksCacheKey(D_ID, 0), src, [0], [1]),
               status=S.LLM_NOT_YET_LINK)
    finally:
        local.engine.finalize()


@pytest.mark.rules("X-17", "§8.0")
def test_a_linked_push_looks_the_destination_up_before_it_reads_the_source_block_list() -> None:
    with vs.Peer() as peer:
        port = vs.free_port()
        start_prompt(peer, port)
        prompt_blocks(peer, "kv", seed=70)                           # bound to BlocksCacheKey(1, 0)
        local = Local(vs.v2_options())
        try:
            src, _ = local.blocks_cache(seed=80)
            local.link(port)
            # model 9 is bound to nothing: the destination lookup answers first
            for src_blocks, dst_blocks in [([], [1]), ([0, 1], [2])]:
                raises(LLMException, lambda: local.cm.push_blocks(BlocksCacheKey(P_ID, 9), src, src_blocks, dst_blocks),
                       status=S.LLM_KV_CACHE_NOT_EXIST)
            # a destination block past the peer's cache: the destination's checks come next
            raises(LLMException, lambda: local.cm.push_blocks(BlocksCacheKey(P_ID, 0), src, [], [BLOCKS]),
                   "dst", S.LLM_PARAM_INVALID)
            # then the source's: no source blocks is a cache-to-blocks push, which a push cannot size
            raises(LLMException, lambda: local.cm.push_blocks(BlocksCacheKey(P_ID, 0), src, [], [1]),
                   "src_blocks", S.LLM_PARAM_INVALID)
            raises(LLMException, lambda: local.cm.push_blocks(BlocksCacheKey(P_ID, 0), src, [0, 1], [2]),
                   "src_blocks", S.LLM_PARAM_INVALID)
            for t in range(TENSORS):                                 # nothing moved
                assert peer.bytes_of(f"arrays_kv[{t}]") == fill(70 + t, (BLOCKS, BLOCK_BYTES)).tobytes()
        finally:
            local.engine.finalize()


@pytest.mark.rules("X-16", "E-7")
def test_a_push_to_the_own_cluster_goes_over_a_self_link() -> None:
    port = vs.free_port()
    local = Local(vs.v2_options(port), role=LLMRole.PROMPT, cluster_id=P_ID)
    try:
        src, source = local.blocks_cache(seed=90)
        dst, arrays = local.blocks_cache(key=BlocksCacheKey(P_ID, 0))
        local.link(port)                                         # a link to its own listener, under its own id
        local.cm.push_blocks(BlocksCacheKey(P_ID, 0), src, [1, 2], [3, 4])
        for t in range(TENSORS):
            expected = np.zeros((BLOCKS, BLOCK_BYTES), np.uint8)
            expected[[3, 4]] = source[t][[1, 2]]
            assert arrays[t].tobytes() == expected.tobytes()
    finally:
        local.engine.finalize()


@pytest.mark.rules("PR-32", "E-11", "E-5")
@pytest.mark.parametrize("backend", ["hixl", None])
def test_a_push_source_registered_after_the_link_is_refused_where_its_backend_refuses_it(backend: Optional[str]) -> None:
    """HIXL: the client validates the local address when the transfer starts, after the
    destination lookup and checks; default backend: the guard, at the local cache's
    remote-access step (E-12)."""
    with vs.Peer() as peer:
        port = vs.free_port()
        extra = {"llm.TransferBackend": backend} if backend else {}
        peer.run(f"d = LLMDataDist(LLMRole.DECODER, {D_ID}); d.init(support.v2_options({port}, **{extra!r})); "
                 f"cm = d.cache_manager; arrays = [np.zeros(({BLOCKS}, {BLOCK_BYTES}), np.uint8) for _ in "
                 f"range({TENSORS})]; dst = cm.register_blocks_cache(CacheDesc({TENSORS}, [{BLOCKS}, {BLOCK_BYTES}], "
                 f"DataType.DT_UINT8), [a.ctypes.data for a in arrays], BlocksCacheKey({D_ID}, 0))")
        local = Local(vs.v2_options(vs.free_port(), **extra), role=LLMRole.PROMPT, cluster_id=P_ID)
        try:
            local.link(port, D_ID)
            src, _ = local.blocks_cache(seed=5)                  # registered after the link
            unbound = raises(LLMException, lambda: local.cm.push_blocks(BlocksCacheKey(D_ID, 9), src, [0], [1]))
            assert unbound.status_code == (S.LLM_KV_CACHE_NOT_EXIST if backend else S.LLM_PARAM_INVALID)
            raises(LLMException, lambda: local.cm.push_blocks(BlocksCacheKey(D_ID, 0), src, [0], [1]),
                   "registered after link", S.LLM_PARAM_INVALID)
            for t in range(TENSORS):                             # nothing moved
                assert peer.bytes_of(f"arrays[{t}]") == bytes(BLOCKS * BLOCK_BYTES)
        finally:
            local.engine.finalize()


# ---- item: the check order of transfers by address (X-16, X-10) ------------------------------------

ROWS, ROW_BYTES, N = 4, 64, 4          # a contiguous cache: N tensors (2 layers) of ROWS batches


class _Ready(LayerSynchronizer):
    def synchronize_layer(self, layer_index: int, timeout_in_millis: Any) -> bool:
        return True


def _contiguous(local: Local, seed: int = -1) -> Tuple[Cache, List[np.ndarray]]:
    arrays = [fill(seed + t if seed >= 0 else -1, (ROWS, ROW_BYTES)) for t in range(N)]
    local.memory += arrays
    desc = CacheDesc(N, [ROWS, ROW_BYTES], DataType.DT_UINT8)
    return local.cm.register_cache(desc, [a.ctypes.data for a in arrays]), arrays


#: transfers every Python check lets through that the vendor's layer-wise job refuses
#: after the link: (source kind, src_block_indices, dst_block_indices, dst_block_memory_size)
_REFUSED_AFTER_THE_LINK = {
    "a cache-to-blocks transfer with dst_block_memory_size 0": ("cache", None, [0, 1], 0),
    "a cache-to-cache transfer from a blocks cache (PR-15)": ("blocks", None, None, None),
    "a source block past the source cache": ("blocks", [BLOCKS], [0], None),
    "a block size that is not the source's": ("blocks", [0], [1], 2 * BLOCK_BYTES),
}


def _sources(local: Local) -> dict[str, Cache]:
    """A contiguous and a blocks source of layer 0, registered before any link (PR-32)."""
    return {"cache": _contiguous(local, seed=7)[0], "blocks": local.blocks_cache(seed=7)[0]}


def _transfer(local: Local, src: Cache, cluster: int, addrs: List[int], src_blocks: Optional[List[int]],
              dst_blocks: Optional[List[int]], block_size: Optional[int]) -> Tuple[S, List[Optional[S]]]:
    """``transfer_cache_async`` of layer 0 of ``src`` to ``addrs`` on ``cluster``: what the
    task's ``synchronize()`` and ``get_results()`` say."""
    task = local.cm.transfer_cache_async(src, _Ready(), [TransferConfig(cluster, addrs, range(0, 1))], src_blocks,
                                         dst_blocks, block_size)
    return task.synchronize(), task.get_results()


@pytest.mark.rules("X-16", "X-10", "§8.7", "PR-15", "PR-16")
@pytest.mark.parametrize("case", ["the own cluster id", *_REFUSED_AFTER_THE_LINK])
def test_a_transfer_by_address_without_a_link_answers_not_yet_link(case: str) -> None:
    local = Local(vs.v2_options(direct=False))
    try:
        kind, src_blocks, dst_blocks, block_size = _REFUSED_AFTER_THE_LINK.get(case, ("cache", None, None, None))
        cluster = D_ID if case == "the own cluster id" else P_ID
        assert _transfer(local, _sources(local)[kind], cluster, [4096, 8192], src_blocks, dst_blocks, block_size) == \
            (S.LLM_NOT_YET_LINK, [S.LLM_NOT_YET_LINK])
    finally:
        local.engine.finalize()


@pytest.mark.rules("X-16", "X-10", "§8.7", "PR-15", "PR-16")
def test_a_linked_transfer_by_address_refuses_its_source_after_the_link() -> None:
    with vs.Peer() as peer:
        port = vs.free_port()
        peer.run(f"p = LLMDataDist(LLMRole.PROMPT, {P_ID}); p.init(support.v2_options({port}, direct=False)); "
                 f"cm = p.cache_manager; arrays = [np.zeros(({ROWS}, {ROW_BYTES}), np.uint8) for _ in range({N})]; "
                 f"dst = cm.register_cache(CacheDesc({N}, [{ROWS}, {ROW_BYTES}], DataType.DT_UINT8), "
                 "[a.ctypes.data for a in arrays])")
        addrs = [int(a) for a in peer.run(value="[a.ctypes.data for a in arrays][:2]")]
        local = Local(vs.v2_options(direct=False))
        try:
            sources = _sources(local)
            local.link(port)
            for case, (kind, src_blocks, dst_blocks, block_size) in _REFUSED_AFTER_THE_LINK.items():
                assert _transfer(local, sources[kind], P_ID, addrs, src_blocks, dst_blocks, block_size) == \
                    (S.LLM_PARAM_INVALID, [S.LLM_PARAM_INVALID]), case
            # a link to another cluster is no link under the own id
            assert _transfer(local, sources["cache"], D_ID, addrs, None, None, None) == \
                (S.LLM_NOT_YET_LINK, [S.LLM_NOT_YET_LINK])
            for t in range(N):                                       # nothing moved
                assert peer.bytes_of(f"arrays[{t}]") == bytes(ROWS * ROW_BYTES)
            # the same source and addresses in a well-formed transfer: the bytes move
            assert _transfer(local, sources["cache"], P_ID, addrs, None, None, None) == (S.LLM_SUCCESS, [S.LLM_SUCCESS])
            assert [peer.bytes_of(f"arrays[{t}][0]") for t in range(2)] == \
                [fill(7 + t, (ROWS, ROW_BYTES))[0].tobytes() for t in range(2)]
        finally:
            local.engine.finalize()


@pytest.mark.rules("X-16", "E-7", "§8.7")
def test_a_transfer_by_address_to_the_own_cluster_goes_over_a_self_link() -> None:
    port = vs.free_port()
    local = Local(vs.v2_options(port, direct=False), role=LLMRole.PROMPT, cluster_id=P_ID)
    try:
        src, source = _contiguous(local, seed=300)
        dst, arrays = _contiguous(local)
        local.link(port)                                         # a link to its own listener, under its own id
        # layer 1 of source batch 2 into batch 3 of the destination (the caller offsets the addresses)
        addrs = [arrays[2].ctypes.data + 3 * ROW_BYTES, arrays[3].ctypes.data + 3 * ROW_BYTES]
        task = local.cm.transfer_cache_async(src, _Ready(), [TransferConfig(P_ID, addrs, range(1, 2), 2)])
        assert (task.synchronize(), task.get_results()) == (S.LLM_SUCCESS, [S.LLM_SUCCESS])
        for t in range(N):
            expected = np.zeros((ROWS, ROW_BYTES), np.uint8)
            if t >= 2:
                expected[3] = source[t][2]
            assert arrays[t].tobytes() == expected.tobytes()
    finally:
        local.engine.finalize()
