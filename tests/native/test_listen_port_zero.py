"""A listen address with port 0 (docs/semantics.md PR-27, E-5, E-26), native API.

The vendor's parser takes any port up to 2^32 - 1, 0 included. What an engine does with
0 depends on its transfer backend: the default backend binds the address as given, so
the kernel picks an ephemeral port nobody is told about; a HIXL engine starts its
server only for a port above 0, so it listens nowhere and only makes links (a
client-only engine). Ports above 65535 stay refused (PR-27)."""
from __future__ import annotations

from typing import Callable

import numpy as np
import pytest

from llm_datadist_ffi import LLMStatusCode as S
from llm_datadist_ffi import native
from llm_datadist_ffi.native import Cache, CacheDesc, CacheIndex

import engine_support as sup
from listeners import listening_ports

Engines = Callable[..., native.LlmDataDist]
DESC = CacheDesc(2, native.DataType.DT_UINT8, [4, 16])          # 2 tensors of 4 blocks of 16 bytes
raw = sup.Raw()


def pull_four_blocks(server: native.LlmDataDist, client: native.LlmDataDist, port: int) -> None:
    """The client links to the server at ``port`` and pulls blocks [3, 0] into [1, 2]: exact bytes."""
    src = [np.arange(64, dtype=np.uint8).reshape(4, 16) + 11 * t for t in range(2)]
    dst = [np.zeros((4, 16), np.uint8) for _ in range(2)]
    sid = server.register_kv_cache(DESC, src)
    did = client.register_kv_cache(DESC, dst)
    assert client.link_llm_clusters([sup.cluster(1, port)])[0] == S.LLM_SUCCESS
    client.pull_kv_blocks(CacheIndex(1, sid), Cache(did), [3, 0], [1, 2])
    for t in range(2):
        expected = np.zeros((4, 16), np.uint8)
        expected[1], expected[2] = src[t][3], src[t][0]
        assert dst[t].tobytes() == expected.tobytes()


@pytest.mark.rules("PR-27", "E-26")
def test_port_0_on_the_default_backend_listens_on_an_ephemeral_port_that_links_and_serves(engines: Engines) -> None:
    before = listening_ports()
    server = engines(1, options={native.OPTION_LISTEN_IP_INFO: "127.0.0.1:0"})
    new = listening_ports() - before
    assert len(new) == 1 and 0 not in new                 # the kernel's choice, reported by nobody
    client = engines(2, role=native.LlmRole.DECODER, options={})
    pull_four_blocks(server, client, new.pop())


@pytest.mark.rules("PR-27", "E-5", "E-26")
def test_port_0_with_hixl_makes_a_client_only_engine_that_links_and_pulls(engines: Engines) -> None:
    server = engines(1, options={native.OPTION_TRANSFER_BACKEND: "hixl"}, listen=True)
    before = listening_ports()
    client = engines(2, role=native.LlmRole.DECODER,
                     options={native.OPTION_TRANSFER_BACKEND: "hixl", native.OPTION_LISTEN_IP_INFO: "127.0.0.1:0"})
    assert listening_ports() == before                    # nothing listens
    pull_four_blocks(server, client, server.listen_port)
    # the HIXL role switch compares the address with the one given at init: the same is no change
    client.set_role(native.LlmRole.MIX, {native.OPTION_LISTEN_IP_INFO: "127.0.0.1:0"})
    assert client.role == native.LlmRole.MIX and listening_ports() == before


@pytest.mark.rules("PR-27", "E-26")
def test_set_role_to_port_0_moves_a_default_listener_to_an_ephemeral_port(engines: Engines) -> None:
    e = engines(1, listen=True)
    before = listening_ports()
    assert e.listen_port in before
    e.set_role(native.LlmRole.MIX, {native.OPTION_LISTEN_IP_INFO: "127.0.0.1:0"})
    now = listening_ports()
    assert e.listen_port not in now and len(now - before) == 1
    e.set_role(native.LlmRole.PROMPT, {native.OPTION_LISTEN_IP_INFO: "127.0.0.1:0"})   # the same port text: kept
    assert listening_ports() == now


@pytest.mark.rules("PR-27", "E-26")
@pytest.mark.parametrize("value", ["127.0.0.1:65536", "127.0.0.1:4294967295"])
def test_ports_above_65535_stay_refused_at_init_and_set_role(engines: Engines, value: str) -> None:
    with native.LlmDataDist(1, 1) as e:
        assert raw.initialize(e, [("llm.DeviceId", "0"), ("llm.ListenIpInfo", value)]) == S.LLM_PARAM_INVALID
        assert "(PR-27)" in raw.last_error()
    e = engines(2, options={})
    assert raw.set_role(e, 2, [("llm.ListenIpInfo", value)]) == S.LLM_PARAM_INVALID
    assert "(PR-27)" in raw.last_error()

