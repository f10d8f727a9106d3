"""Tests of the example connector with the pytest plugin of llm_datadist_ffi.

The functions above the tests run inside the engine processes (``topo.decoders[0].call(
pull, …)``): they are module-level, so the process finds them by name. The expected
bytes come from the seeds alone (``prompt_layers``), not from the connector.
"""
from __future__ import annotations

import time
from typing import List, Sequence, Tuple

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from llm_datadist_ffi import LLMStatusCode
from llm_datadist_ffi.testing.strategies import block_pairs
from llm_datadist_ffi.testing.topology import here

LAYERS, BLOCKS, ELEMENTS = 3, 8, 64


def prompt_layers(seed: int) -> List[Tuple[np.ndarray, np.ndarray]]:
    """The (K, V) arrays of every layer of a Prompt seeded ``seed``."""
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal((BLOCKS, ELEMENTS)).astype(np.float16),
             rng.standard_normal((BLOCKS, ELEMENTS)).astype(np.float16)) for _ in range(LAYERS)]


# --- run in the engine processes -------------------------------------------------------

def start_connector(seed: int) -> None:
    """A connector over this engine: a Prompt's caches hold ``prompt_layers(seed)``, a
    Decoder's are zeros."""
    from kv_connector import KVConnector
    me = here()
    if me.role == "prompt":
        layers = prompt_layers(seed)
    else:
        layers = [(np.zeros((BLOCKS, ELEMENTS), np.float16), np.zeros((BLOCKS, ELEMENTS), np.float16))
                  for _ in range(LAYERS)]
    connector = KVConnector(me.engine, me.cluster_id, is_prompt=me.role == "prompt")
    connector.register_layers(layers)
    me.state.update(layers=layers, connector=connector)


def link(*cluster_ids: int) -> None:
    me = here()
    me.state["connector"].link([me.cluster_info(c) for c in cluster_ids])


def pull(request_id: str, cluster_id: int, src_blocks: Sequence[int], dst_blocks: Sequence[int]) -> None:
    here().state["connector"].pull(request_id, cluster_id, src_blocks, dst_blocks)


def zero_caches() -> None:
    for k, v in here().state["layers"]:
        k.fill(0)
        v.fill(0)


def cache_bytes() -> List[Tuple[bytes, bytes]]:
    return [(k.tobytes(), v.tobytes()) for k, v in here().state["layers"]]


def release() -> None:
    here().state["connector"].release()


# --- the oracle ------------------------------------------------------------------------

def expected_after_pull(seed: int, src_blocks: Sequence[int], dst_blocks: Sequence[int],
                        into: List[Tuple[np.ndarray, np.ndarray]]) -> List[Tuple[bytes, bytes]]:
    """``into`` with block ``dst_blocks[i]`` of every tensor replaced by block
    ``src_blocks[i]`` of the Prompt seeded ``seed``."""
    for (k, v), (src_k, src_v) in zip(into, prompt_layers(seed)):
        for s, d in zip(src_blocks, dst_blocks):
            k[d], v[d] = src_k[s], src_v[s]
    return [(k.tobytes(), v.tobytes()) for k, v in into]


def zeros() -> List[Tuple[np.ndarray, np.ndarray]]:
    return [(np.zeros((BLOCKS, ELEMENTS), np.float16), np.zeros((BLOCKS, ELEMENTS), np.float16))
            for _ in range(LAYERS)]


def block_tables() -> "st.SearchStrategy[Tuple[List[int], List[int]]]":
    """A request's block table on the Prompt and on the Decoder: equal lengths, distinct
    Decoder blocks (a Decoder never maps two source blocks onto one), any Prompt blocks,
    as runs and scattered: the package's public strategy."""
    return block_pairs(BLOCKS, BLOCKS, max_size=BLOCKS, containers=["list"])


# --- the tests -------------------------------------------------------------------------

def test_a_decoder_pulls_exactly_the_blocks_of_its_block_table(topology) -> None:
    topo = topology(prompts=1, decoders=1)
    prompt, decoder = topo.prompts[0], topo.decoders[0]
    prompt.call(start_connector, 7)
    decoder.call(start_connector, 0)
    decoder.call(link, prompt.cluster_id)

    # one topology for every example: each starts from zeroed Decoder caches
    @settings(max_examples=25, deadline=None)
    @given(table=block_tables())
    def pulls_the_table(table: Tuple[List[int], List[int]]) -> None:
        src, dst = table
        decoder.call(zero_caches)
        decoder.call(pull, "r", prompt.cluster_id, src, dst)
        assert decoder.call(cache_bytes) == expected_after_pull(7, src, dst, zeros())

    pulls_the_table()


def test_one_decoder_pulls_two_requests_from_two_prompts(topology) -> None:
    topo = topology(prompts=2, decoders=1)
    (p1, p2), decoder = topo.prompts, topo.decoders[0]
    p1.call(start_connector, 11)
    p2.call(start_connector, 22)
    decoder.call(start_connector, 0)
    decoder.call(link, p1.cluster_id, p2.cluster_id)

    decoder.call(pull, "a", p1.cluster_id, [0, 1, 2], [5, 6, 7])
    decoder.call(pull, "b", p2.cluster_id, [3, 4], [0, 1])

    expected = expected_after_pull(11, [0, 1, 2], [5, 6, 7], zeros())
    expected = expected_after_pull(22, [3, 4], [0, 1],
                                   [(np.frombuffer(k, np.float16).reshape(BLOCKS, ELEMENTS).copy(),
                                     np.frombuffer(v, np.float16).reshape(BLOCKS, ELEMENTS).copy())
                                    for k, v in expected])
    assert decoder.call(cache_bytes) == expected
    decoder.call(release)


def test_a_prompt_killed_mid_pull_is_the_libraries_timeout_of_that_layer(topology, faults,
                                                                          llm_datadist_alias) -> None:
    # llm_datadist_alias: the connector's error (it imports llm_datadist) is unpickled here
    from kv_connector import KVTransferError

    topo = topology(prompts=1, decoders=1)
    prompt, decoder = topo.prompts[0], topo.decoders[0]
    prompt.call(start_connector, 3)
    decoder.call(start_connector, 0)
    decoder.call(link, prompt.cluster_id)
    faults.delay(prompt, 3000)              # the Prompt holds its answer: the pull is in flight
    pending = decoder.start(pull, "r1", prompt.cluster_id, [0, 1], [2, 3])
    time.sleep(0.3)
    faults.kill(prompt)

    try:
        pending.result(timeout=10)
    except KVTransferError as error:
        assert (error.request_id, error.layer, error.cluster_id) == ("r1", 0, prompt.cluster_id)
        assert error.status_code == LLMStatusCode.LLM_TIMEOUT
        assert "the peer's side of the link is gone" in error.detail
    else:
        raise AssertionError("the pull from a killed Prompt succeeded")


def test_an_injected_failure_of_pull_blocks_names_the_layer_and_keeps_its_code(topology, faults,
                                                                                llm_datadist_alias) -> None:
    from kv_connector import KVTransferError

    topo = topology(prompts=1, decoders=1)
    prompt, decoder = topo.prompts[0], topo.decoders[0]
    prompt.call(start_connector, 3)
    decoder.call(start_connector, 0)
    decoder.call(link, prompt.cluster_id)
    # layer 0 goes through, layer 1 fails
    faults.fail("pull_blocks", LLMStatusCode.LLM_LINK_FAILED, count=1, skip=1, on=decoder)

    try:
        decoder.call(pull, "r2", prompt.cluster_id, [0], [0])
    except KVTransferError as error:
        assert (error.layer, error.status_code) == (1, LLMStatusCode.LLM_LINK_FAILED)
    else:
        raise AssertionError("the pull succeeded despite the injected fault")
    assert decoder.call(cache_bytes)[0] == expected_after_pull(3, [0], [0], zeros())[0]
