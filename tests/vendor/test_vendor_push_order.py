"""The check order of the extension pushes (push_blocks, push_cache) against the
vendor's layer-wise job (docs/semantics.md X-16, X-17, E-11, docs/reference/semantics.md §8.0).

The vendor's engine looks up the local cache, then the link, then (direct mode) the
local cache's remote access, the destination and its checks, and reads the block
lists last; it has no own-cluster step for pushes, so a push to the engine's own id
goes over a self link when there is one.
"""
from __future__ import annotations

from typing import List, Optional

import numpy as np
import pytest

from llm_datadist_ffi import LLMException
from llm_datadist_ffi.vendor import BlocksCacheKey, LLMRole

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
