"""Device facts that serving code reports (comments of a vLLM-Ascend HIXL connector),
checked against the vendor's sources and reproduced where the sources confirm them
(docs/semantics.md E-27): a second blocks cache under one ``BlocksCacheKey`` replaces
the first; a direct-mode pull into a destination that is not remote accessible is
``LLM_PARAM_INVALID``."""
from __future__ import annotations

import pytest

from llm_datadist_ffi import LLMException
from llm_datadist_ffi.vendor import BlocksCacheKey

import vendor_support as vs
from source_pairs import P_ID, Local, S, prompt_blocks, pulled, start_prompt
from vendor_support import raises

pytestmark = [pytest.mark.mock_only(reason="the vendor-compatible API needs the mock's extension functions"),
              pytest.mark.usefixtures("no_engine_left")]


@pytest.mark.rules("§9.3", "E-27")
def test_a_second_blocks_cache_under_the_same_key_replaces_the_first_for_pulls() -> None:
    with vs.Peer() as peer:
        port = vs.free_port()
        start_prompt(peer, port)
        prompt_blocks(peer, "first", seed=100)
        prompt_blocks(peer, "second", seed=200)                      # the same BlocksCacheKey(1, 0): last wins
        local = Local(vs.v2_options())
        try:
            dst, arrays = local.blocks_cache()
            local.link(port)
            local.cm.pull_blocks(BlocksCacheKey(P_ID, 0), dst, [0, 3], [4, 5])
            pulled(arrays, 200, [0, 3], [4, 5])
        finally:
            local.engine.finalize()


@pytest.mark.rules("§8.0", "E-27")
def test_a_direct_mode_pull_into_a_destination_not_remote_accessible_is_param_invalid() -> None:
    with vs.Peer() as peer:
        port = vs.free_port()
        start_prompt(peer, port)
        prompt_blocks(peer, "kv", seed=300)
        local = Local(vs.v2_options())
        try:
            dst, arrays = local.blocks_cache(remote_accessible=False)
            local.link(port)
            raises(LLMException, lambda: local.cm.pull_blocks(BlocksCacheKey(P_ID, 0), dst, [1], [1]),
                   "remote accessible", S.LLM_PARAM_INVALID)
            pulled(arrays, 300, [], [])                             # nothing moved
        finally:
            local.engine.finalize()

