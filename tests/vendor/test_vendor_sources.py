"""Listen port 0 as the vendor's sources define it, through the vendor-compatible API
between two processes (docs/semantics.md E-26, PR-27).

Each test names the decision that records the source it follows. The peer process
(``vendor_peer.py``) holds the other engine; bytes are compared with what the seeds
say the destination must hold.
"""
from __future__ import annotations

import numpy as np
import pytest

from llm_datadist_ffi import LLMException
from llm_datadist_ffi.vendor import BlocksCacheKey, LLMDataDist, LLMRole

import vendor_support as vs
from listeners import listening_ports
from source_pairs import (BLOCK_BYTES, BLOCKS, D_ID, P_ID, TENSORS, Local, S, omni_decoder_options, prompt_blocks,
                          pulled, start_prompt)
from vendor_support import fill, raises

pytestmark = [pytest.mark.mock_only(reason="the vendor-compatible API needs the mock's extension functions"),
              pytest.mark.usefixtures("no_engine_left")]

@pytest.mark.rules("PR-27", "E-5", "E-26")
def test_an_omni_infer_hixl_decoder_with_port_0_is_client_only_and_pulls_exact_bytes() -> None:
    with vs.Peer() as peer:
        port = vs.free_port()
        start_prompt(peer, port, **{"llm.TransferBackend": "hixl"})
        prompt_blocks(peer, "kv", seed=40)
        before = listening_ports()
        local = Local(omni_decoder_options("127.0.0.1", "hixl"))
        try:
            assert listening_ports() == before                       # HIXL with port 0 listens nowhere
            dst, arrays = local.blocks_cache()
            local.link(port)
            local.cm.pull_blocks(BlocksCacheKey(P_ID, 0), dst, [5, 0, 7], [1, 2, 3])
            pulled(arrays, 40, [5, 0, 7], [1, 2, 3])
        finally:
            local.engine.finalize()


@pytest.mark.rules("PR-27", "E-26")
def test_a_default_backend_prompt_with_port_0_listens_on_an_ephemeral_port_that_serves_a_pull() -> None:
    with vs.Peer() as peer:
        before = listening_ports()
        local = Local(omni_decoder_options("127.0.0.1", None), role=LLMRole.PROMPT, cluster_id=P_ID)
        try:
            new = listening_ports() - before
            assert len(new) == 1 and 0 not in new                    # the kernel's choice
            src, _ = local.blocks_cache(seed=60, key=BlocksCacheKey(P_ID, 0))
            peer.run(f"d = LLMDataDist(LLMRole.DECODER, {D_ID}); d.init(support.v2_options()); cm = d.cache_manager; "
                     f"arrays = [np.zeros(({BLOCKS}, {BLOCK_BYTES}), np.uint8) for _ in range({TENSORS})]; "
                     f"dst = cm.register_blocks_cache(CacheDesc({TENSORS}, [{BLOCKS}, {BLOCK_BYTES}], DataType.DT_UINT8), "
                     "[a.ctypes.data for a in arrays]); "
                     f"d.link_clusters([support.cluster_info({P_ID}, {new.pop()})], 5000); "
                     f"cm.pull_blocks(BlocksCacheKey({P_ID}, 0), dst, [2, 6], [0, 4])")
            for t in range(TENSORS):
                expected = np.zeros((BLOCKS, BLOCK_BYTES), np.uint8)
                expected[[0, 4]] = fill(60 + t, (BLOCKS, BLOCK_BYTES))[[2, 6]]
                assert peer.bytes_of(f"arrays[{t}]") == expected.tobytes()
        finally:
            local.engine.finalize()


@pytest.mark.rules("PR-27", "E-26")
def test_port_65536_stays_refused_in_v2() -> None:
    engine = LLMDataDist(LLMRole.DECODER, D_ID)
    raises(LLMException, lambda: engine.init(vs.v2_options(65536)), "PR-27", S.LLM_PARAM_INVALID)
