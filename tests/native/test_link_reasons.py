"""Why a link or unlink gave what it gave: per-cluster reasons on the engine and in the
log (an addition to both APIs), and the remedy after a peer crash."""
from __future__ import annotations

import logging
import subprocess
import sys

import pytest

from llm_datadist_ffi import LLMStatusCode as S
from llm_datadist_ffi import native

import vendor_support as vs


def cluster(cluster_id: int, port: int, ip: str = "127.0.0.1") -> native.ClusterInfo:
    return native.ClusterInfo(cluster_id, 0, [native.IpInfo("127.0.0.1", 0)], [native.IpInfo(ip, port)])


@pytest.fixture
def decoder() -> native.LlmDataDist:
    engine = native.LlmDataDist(2, native.LlmRole.DECODER)
    engine.initialize({native.OPTION_DEVICE_ID: "0"})
    yield engine
    engine.close()


@pytest.mark.mock_only(reason="per-cluster texts come from the mock's reason record; other backends give the "
                              "call's last error for each failed cluster")
def test_each_cluster_of_a_link_has_its_reason_and_a_log_line(decoder: native.LlmDataDist,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    server = native.LlmDataDist(1, native.LlmRole.PROMPT)
    port, closed = vs.free_port(), vs.free_port()
    server.initialize({native.OPTION_DEVICE_ID: "1", native.OPTION_LISTEN_IP_INFO: f"127.0.0.1:{port}"})
    try:
        with caplog.at_level(logging.INFO, logger="llm_datadist_ffi"):
            status, rets = decoder.link_llm_clusters([cluster(1, port), cluster(9, closed)])
        assert rets == [S.LLM_SUCCESS, S.LLM_LINK_FAILED] and status == S.LLM_LINK_FAILED
        call_error, reasons = decoder.link_reasons
        assert reasons[0] == ""
        assert f"cannot connect to 127.0.0.1:{closed}: connection refused" in reasons[1]
        assert "cannot connect" in call_error
        lines = [(r.name, r.levelname, r.getMessage()) for r in caplog.records]
        assert ("llm_datadist_ffi.native", "INFO", "link cluster 1: success") in lines
        assert any(name == "llm_datadist_ffi.native" and level == "WARNING" and
                   message.startswith("link cluster 9: LLM_LINK_FAILED: cannot connect to")
                   for name, level, message in lines)
    finally:
        server.close()


def test_a_call_refused_as_a_whole_says_why(decoder: native.LlmDataDist, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="llm_datadist_ffi"):
        assert decoder.link_llm_clusters([cluster(1, 26000, ip="localhost")]) == (S.LLM_PARAM_INVALID, [])
    call_error, reasons = decoder.link_reasons
    assert reasons == () and '"localhost" is not an IPv4 address' in call_error
    assert any("LLM_PARAM_INVALID" in r.getMessage() and "localhost" in r.getMessage() for r in caplog.records)


def test_the_errors_command_gives_the_remedy_after_a_peer_crash() -> None:
    for name in ("LLM_UNLINK_FAILED", "LLM_ALREADY_LINK"):
        out = subprocess.run([sys.executable, "-m", "llm_datadist_ffi", "errors", name], capture_output=True,
                             text=True, timeout=60, check=True).stdout
        assert "force=True" in " ".join(out.split()), name


def test_a_failed_cluster_has_a_reason_on_every_backend(decoder: native.LlmDataDist) -> None:
    closed = vs.free_port()
    status, rets = decoder.link_llm_clusters([cluster(9, closed)])
    assert rets == [S.LLM_LINK_FAILED]
    call_error, reasons = decoder.link_reasons
    assert len(reasons) == 1 and str(closed) in reasons[0] and "connect" in reasons[0]
