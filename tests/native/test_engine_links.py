"""Links of the mock engine (docs/reference/cpp-api.md §6.7-6.8, docs/reference/semantics.md §10, PR-28, PR-29, PR-31,
PR-35, PR-42): argument checks, handshakes over loopback TCP in one process and
between processes, unlink in both forms, peers that go away."""
from __future__ import annotations

import os
import socket
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
import pytest

from llm_datadist_ffi import LLMStatusCode as S
from llm_datadist_ffi import lint, mock_control, native
from llm_datadist_ffi.native import Cache, CacheIndex, ClusterInfo, IpInfo

import engine_support as sup
import wire_support as wire


raw = sup.Raw()

Engines = Callable[..., native.LlmDataDist]

PR28 = "the cluster id check of PR-28 is a lint of the mock's handshake"


@pytest.fixture
def strict(monkeypatch: pytest.MonkeyPatch) -> None:
    """LLM_DATADIST_FFI_STRICT=1: every lint is the refusal the rule used to be."""
    monkeypatch.setenv(lint.STRICT_ENV, "1")


@pytest.fixture
def lenient(monkeypatch: pytest.MonkeyPatch) -> None:
    """The default mode (lints warn), also when the whole suite runs strict."""
    monkeypatch.delenv(lint.STRICT_ENV, raising=False)


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port whose listener accepts connections (in the kernel) and never answers."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(16)
        yield s.getsockname()[1]


@pytest.fixture
def server_and_client(engines: Engines) -> tuple[native.LlmDataDist, native.LlmDataDist]:
    """(server, client): cluster 1 listens, cluster 2 does not."""
    return engines(1, listen=True), engines(2, options={}, device_id=1)


def pullable(client: native.LlmDataDist, server: native.LlmDataDist) -> tuple[int, int]:
    """Registers one 2-tensor cache on each engine: (server cache id, client cache id)."""
    keep: list[Any] = getattr(client, "_test_keep", [])
    arrays_s = sup.random_arrays(2, (2, 4), 1)
    arrays_c = [np.zeros((2, 4), np.uint8) for _ in range(2)]
    keep += [arrays_s, arrays_c]
    client._test_keep = keep  # type: ignore[attr-defined]
    return sup.register(server, arrays_s), sup.register(client, arrays_c)


def pull(engine: native.LlmDataDist, cluster_id: int, src: int, dst: int) -> int:
    return int(sup.status_of(engine.pull_kv_cache, CacheIndex(cluster_id, src), Cache(dst)))


# ---- argument checks ----------------------------------------------------------------------

@pytest.mark.rules("E-3", "§10.2", "§10.3", "cpp-api §6.7", "cpp-api §6.8")
def test_link_checks_timeout_and_addresses_before_any_cluster(server_and_client: Any) -> None:
    server, client = server_and_client
    good = sup.cluster(1, server.listen_port)
    assert client.link_llm_clusters([good], 0) == (S.LLM_PARAM_INVALID, [])
    assert client.link_llm_clusters([good], -5) == (S.LLM_PARAM_INVALID, [])
    bad_remote = ClusterInfo(1, 0, [IpInfo("127.0.0.1", 0)], [IpInfo("", 5)])
    assert client.link_llm_clusters([good, bad_remote]) == (S.LLM_PARAM_INVALID, [])
    assert "clusters[1].remote_ip_infos[0].ip is empty" in raw.last_error()
    bad_local = ClusterInfo(1, 0, [IpInfo("::1", 0)], [IpInfo("127.0.0.1", 5)])
    assert client.link_llm_clusters([bad_local]) == (S.LLM_PARAM_INVALID, [])
    assert "local_ip_infos[0].ip \"::1\" is not an IPv4" in raw.last_error()
    assert client.link_llm_clusters([ClusterInfo(1, 0, [], [IpInfo("host", 5)])]) == (S.LLM_PARAM_INVALID, [])
    assert client.link_llm_clusters([]) == (S.LLM_PARAM_INVALID, [])
    assert client.unlink_llm_clusters([]) == (S.LLM_PARAM_INVALID, [])
    assert client.unlink_llm_clusters([good], 0) == (S.LLM_PARAM_INVALID, [])
    # nothing was linked by the failed calls
    client.set_role(native.LlmRole.MIX)


@pytest.mark.rules("§10.2", "cpp-api §6.7")
def test_link_checks_remote_addresses_before_local_ones(server_and_client: Any) -> None:
    _, client = server_and_client
    both_bad = ClusterInfo(1, 0, [IpInfo("::1", 0)], [IpInfo("", 5)])
    assert client.link_llm_clusters([both_bad]) == (S.LLM_PARAM_INVALID, [])
    assert "clusters[0].remote_ip_infos[0].ip is empty" in raw.last_error()


@pytest.mark.rules("§10.1")
def test_a_link_call_takes_any_number_of_clusters(server_and_client: Any) -> None:
    _, client = server_and_client
    clusters = [sup.cluster(100 + i, sup.free_port()) for i in range(20)]        # nobody listens
    assert client.link_llm_clusters(clusters, 500) == (S.LLM_LINK_FAILED, [S.LLM_LINK_FAILED] * 20)


@pytest.mark.rules("§10.2")
def test_link_checks_each_cluster_and_returns_the_last_failure(server_and_client: Any, silent_port: int) -> None:
    server, client = server_and_client
    clusters = [
        sup.cluster(1, server.listen_port),                                  # fine
        ClusterInfo(3, 0, [IpInfo("127.0.0.1", 0)], []),                     # no remote address
        ClusterInfo(4, 0, [IpInfo("127.0.0.1", 0)], [IpInfo("127.0.0.1", server.listen_port)] * 2),  # two
        sup.cluster(5, sup.free_port()),                                     # nobody listens
    ]
    status, rets = client.link_llm_clusters(clusters)
    assert rets == [S.LLM_SUCCESS, S.LLM_PARAM_INVALID, S.LLM_PARAM_INVALID, S.LLM_LINK_FAILED]
    assert status == S.LLM_LINK_FAILED
    assert "remote_cluster_id 5" in raw.last_error() and "refused" in raw.last_error()
    assert client.unlink_llm_clusters([clusters[0]])[0] == S.LLM_SUCCESS
    assert client.link_llm_clusters([clusters[1], clusters[0]]) == (S.LLM_PARAM_INVALID,
                                                                    [S.LLM_PARAM_INVALID, S.LLM_SUCCESS])


@pytest.mark.rules("§10.2")
def test_a_listener_needs_no_local_address_and_a_first_link_generates_the_resource(server_and_client: Any) -> None:
    server, client = server_and_client
    other = client  # client has no listener: its first link needs exactly one local address
    assert server.link_llm_clusters([ClusterInfo(9, 0, [], [IpInfo("127.0.0.1", sup.free_port())])])[1] == \
        [S.LLM_LINK_FAILED]
    two_locals = ClusterInfo(1, 0, [IpInfo("127.0.0.1", 0)] * 2, [IpInfo("127.0.0.1", server.listen_port)])
    assert other.link_llm_clusters([two_locals])[1] == [S.LLM_PARAM_INVALID]
    assert other.link_llm_clusters([sup.cluster(1, server.listen_port)])[1] == [S.LLM_SUCCESS]
    third = ClusterInfo(1, 0, [], [IpInfo("127.0.0.1", server.listen_port)])
    assert other.unlink_llm_clusters([third])[1] == [S.LLM_SUCCESS]
    assert other.link_llm_clusters([third])[1] == [S.LLM_SUCCESS]       # resource generated earlier


@pytest.mark.rules("§10.2")
@pytest.mark.parametrize("res,status", [
    ('{"version": "1.3"}', S.LLM_SUCCESS),
    ('{"version": "1.0", "server_list": []}', S.LLM_SUCCESS),
    ('{"version": "1.1"}', S.LLM_PARAM_INVALID),
    ('{"version": 1.2}', S.LLM_PARAM_INVALID),
    ('["version", "1.3"]', S.LLM_PARAM_INVALID),
    ("rank table", S.LLM_PARAM_INVALID),
])
def test_local_comm_res_is_checked_by_each_link(engines: Engines, res: str, status: int) -> None:
    server = engines(1, listen=True)
    client = engines(2, options={native.OPTION_LOCAL_COMM_RES: res})
    no_local = ClusterInfo(1, 0, [], [IpInfo("127.0.0.1", server.listen_port)])
    assert client.link_llm_clusters([no_local])[1] == [status]
    if status != S.LLM_SUCCESS:
        assert "llm.LocalCommRes" in raw.last_error()


@pytest.mark.rules("§10.2", "§13")
def test_linking_to_a_silent_listener_times_out(server_and_client: Any, silent_port: int) -> None:
    _, client = server_and_client
    start = time.monotonic()
    assert client.link_llm_clusters([sup.cluster(1, silent_port)], 200) == (S.LLM_TIMEOUT, [S.LLM_TIMEOUT])
    assert 0.18 <= time.monotonic() - start < 2


@pytest.mark.rules("§10.1")
def test_clusters_of_one_call_are_linked_concurrently(engines: Engines) -> None:
    client = engines(2, options={})
    listeners = []
    for _ in range(4):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        s.listen(4)
        listeners.append(s)
    try:
        start = time.monotonic()
        status, rets = client.link_llm_clusters([sup.cluster(10 + i, s.getsockname()[1])
                                                 for i, s in enumerate(listeners)], 300)
        elapsed = time.monotonic() - start
    finally:
        for s in listeners:
            s.close()
    assert rets == [S.LLM_TIMEOUT] * 4 and status == S.LLM_TIMEOUT
    assert elapsed < 0.9                                          # not 4 x 300 ms


@pytest.mark.rules("E-15", "§10.2", "§13")
@pytest.mark.mock_only(reason="uses the mock's control interface (fault injection, serve delay, dropped connections, accounting)")
def test_a_serve_delay_makes_the_handshake_time_out(server_and_client: Any) -> None:
    server, client = server_and_client
    mock_control.set_serve_delay(server, 500)
    assert client.link_llm_clusters([sup.cluster(1, server.listen_port)], 100)[1] == [S.LLM_TIMEOUT]
    mock_control.set_serve_delay(server, 0)
    assert client.link_llm_clusters([sup.cluster(1, server.listen_port)], 1000)[1] == [S.LLM_SUCCESS]


@pytest.mark.rules("§10.1", "PR-28")
@pytest.mark.mock_only(reason=PR28)
def test_a_wrong_remote_cluster_id_warns_and_keys_the_link_by_the_listeners_id(server_and_client: Any, lenient: None) -> None:
    server, client = server_and_client
    s_src, c_dst = pullable(client, server)
    with pytest.warns(lint.ClusterIdMismatchWarning, match=r"remote_cluster_id 7 .* keys the link by 1 \(PR-28\)"):
        assert client.link_llm_clusters([sup.cluster(7, server.listen_port)]) == (S.LLM_SUCCESS, [S.LLM_SUCCESS])
    assert pull(client, 1, s_src, c_dst) == S.LLM_SUCCESS                # the vendor's key: the listener's id
    assert pull(client, 7, s_src, c_dst) == S.LLM_NOT_YET_LINK
    assert sup.status_of(server.set_role, native.LlmRole.MIX,
                         {native.OPTION_LISTEN_IP_INFO: f"127.0.0.1:{server.listen_port}"}) == S.LLM_EXIST_LINK


@pytest.mark.rules("§10.1", "PR-28")
def test_a_wrong_remote_cluster_id_links_nothing_in_strict_mode(server_and_client: Any, strict: None) -> None:
    server, client = server_and_client
    status, rets = client.link_llm_clusters([sup.cluster(7, server.listen_port)])
    assert (status, rets) == (S.LLM_PARAM_INVALID, [S.LLM_PARAM_INVALID])
    assert "PR-28" in raw.last_error()
    server.set_role(native.LlmRole.MIX, {native.OPTION_LISTEN_IP_INFO: f"127.0.0.1:{server.listen_port}"})
    client.set_role(native.LlmRole.MIX)                                  # no link on either side


@pytest.mark.rules("E-7", "§10.2")
def test_an_engine_links_to_itself_over_loopback(server_and_client: Any) -> None:
    """The vendor's Python tests link an engine to its own listener (E-7); a pull from
    the own cluster id stays refused in v2, by the vendor's pull check."""
    server, _ = server_and_client
    own, other = pullable(server, server)
    itself = sup.cluster(1, server.listen_port)
    assert server.link_llm_clusters([itself]) == (S.LLM_SUCCESS, [S.LLM_SUCCESS])
    assert server.link_llm_clusters([itself]) == (S.LLM_ALREADY_LINK, [S.LLM_ALREADY_LINK])
    assert pull(server, 1, own, other) == S.LLM_PARAM_INVALID
    assert "own cluster" in raw.last_error()
    assert sup.status_of(server.set_role, native.LlmRole.MIX,
                         {native.OPTION_LISTEN_IP_INFO: f"127.0.0.1:{server.listen_port}"}) == S.LLM_EXIST_LINK
    assert server.unlink_llm_clusters([itself]) == (S.LLM_SUCCESS, [S.LLM_SUCCESS])
    server.set_role(native.LlmRole.MIX, {native.OPTION_LISTEN_IP_INFO: f"127.0.0.1:{server.listen_port}"})
    assert server.unlink_llm_clusters([itself]) == (S.LLM_SUCCESS, [S.LLM_SUCCESS])     # never linked: fine
    assert server.link_llm_clusters([itself]) == (S.LLM_SUCCESS, [S.LLM_SUCCESS])       # and again


@pytest.mark.rules("E-7", "§10.2")
def test_two_engines_that_share_a_cluster_id_link(engines: Engines) -> None:
    server, client = engines(1, listen=True), engines(1, options={}, device_id=1)
    assert client.link_llm_clusters([sup.cluster(1, server.listen_port)]) == (S.LLM_SUCCESS, [S.LLM_SUCCESS])
    assert sup.status_of(server.set_role, native.LlmRole.MIX,
                         {native.OPTION_LISTEN_IP_INFO: f"127.0.0.1:{server.listen_port}"}) == S.LLM_EXIST_LINK
    assert client.unlink_llm_clusters([sup.cluster(1, server.listen_port)]) == (S.LLM_SUCCESS, [S.LLM_SUCCESS])
    server.set_role(native.LlmRole.MIX, {native.OPTION_LISTEN_IP_INFO: f"127.0.0.1:{server.listen_port}"})
    client.set_role(native.LlmRole.MIX)


# ---- links and their use -------------------------------------------------------------------

@pytest.mark.rules("§1.2", "§10.1", "PR-10")
def test_a_link_is_usable_in_both_directions(server_and_client: Any) -> None:
    server, client = server_and_client
    s_src, c_dst = pullable(client, server)
    c_src, s_dst = pullable(server, client)
    assert client.link_llm_clusters([sup.cluster(1, server.listen_port)]) == (S.LLM_SUCCESS, [S.LLM_SUCCESS])
    assert pull(client, 1, s_src, c_dst) == 0
    assert pull(server, 2, c_src, s_dst) == 0


@pytest.mark.rules("E-21", "§10.1", "§10.2", "PR-42")
def test_linking_again_is_already_link_and_leaves_the_peer_unchanged(server_and_client: Any) -> None:
    server, client = server_and_client
    s_src, c_dst = pullable(client, server)
    c_src, s_dst = pullable(server, client)
    assert client.link_llm_clusters([sup.cluster(1, server.listen_port)])[0] == S.LLM_SUCCESS
    assert client.link_llm_clusters([sup.cluster(1, server.listen_port)]) == (S.LLM_ALREADY_LINK,
                                                                             [S.LLM_ALREADY_LINK])
    assert "already linked" in raw.last_error()
    # the connection comes first: where nobody listens it is LINK_FAILED even so
    assert client.link_llm_clusters([sup.cluster(1, sup.free_port())])[1] == [S.LLM_LINK_FAILED]
    # the peer kept its side: the link works both ways
    assert pull(client, 1, s_src, c_dst) == S.LLM_SUCCESS
    assert pull(server, 2, c_src, s_dst) == S.LLM_SUCCESS


@pytest.mark.rules("E-21", "§10.2", "§10.4", "PR-42")
def test_a_stale_link_to_a_peer_that_stopped_listening_fails_to_connect(server_and_client: Any, silent_port: int) -> None:
    server, client = server_and_client
    port = server.listen_port
    assert client.link_llm_clusters([sup.cluster(1, port)])[0] == S.LLM_SUCCESS
    assert client.link_llm_clusters([sup.cluster(1, silent_port)], 150)[1] == [S.LLM_TIMEOUT]
    server.finalize()
    assert client.link_llm_clusters([sup.cluster(1, port)])[1] == [S.LLM_LINK_FAILED]
    assert sup.status_of(client.set_role, native.LlmRole.MIX) == S.LLM_EXIST_LINK          # still held


@pytest.mark.rules("E-21", "§10.1", "PR-28")
@pytest.mark.mock_only(reason=PR28)
def test_an_existing_link_still_gets_the_cluster_id_check(engines: Engines, lenient: None) -> None:
    server, other = engines(1, listen=True), engines(6, listen=True)
    client = engines(2, options={})
    assert client.link_llm_clusters([sup.cluster(1, server.listen_port)])[0] == S.LLM_SUCCESS
    with pytest.warns(lint.ClusterIdMismatchWarning, match="PR-28"):
        assert client.link_llm_clusters([sup.cluster(1, other.listen_port)])[1] == [S.LLM_ALREADY_LINK]


@pytest.mark.rules("§10.1", "PR-28")
def test_an_existing_link_still_gets_the_cluster_id_check_in_strict_mode(engines: Engines, strict: None) -> None:
    server, other = engines(1, listen=True), engines(6, listen=True)
    client = engines(2, options={})
    assert client.link_llm_clusters([sup.cluster(1, server.listen_port)])[0] == S.LLM_SUCCESS
    assert client.link_llm_clusters([sup.cluster(1, other.listen_port)])[1] == [S.LLM_PARAM_INVALID]
    assert "PR-28" in raw.last_error()


@pytest.mark.rules("§10.1", "PR-29")
def test_a_cluster_repeated_in_one_call_is_processed_in_order(server_and_client: Any) -> None:
    server, client = server_and_client
    info = sup.cluster(1, server.listen_port)
    assert client.link_llm_clusters([info, info, info])[1] == [S.LLM_SUCCESS, S.LLM_ALREADY_LINK,
                                                               S.LLM_ALREADY_LINK]
    assert client.unlink_llm_clusters([info, info]) == (S.LLM_SUCCESS, [S.LLM_SUCCESS, S.LLM_SUCCESS])
    assert client.link_llm_clusters([info])[1] == [S.LLM_SUCCESS]


@pytest.mark.rules("§10.3", "cpp-api §6.8")
def test_a_non_forced_unlink_drops_both_sides(server_and_client: Any) -> None:
    server, client = server_and_client
    s_src, c_dst = pullable(client, server)
    c_src, s_dst = pullable(server, client)
    assert client.link_llm_clusters([sup.cluster(1, server.listen_port)])[0] == S.LLM_SUCCESS
    assert client.unlink_llm_clusters([sup.cluster(1, server.listen_port)]) == (S.LLM_SUCCESS, [S.LLM_SUCCESS])
    assert pull(client, 1, s_src, c_dst) == S.LLM_NOT_YET_LINK
    assert pull(server, 2, c_src, s_dst) == S.LLM_NOT_YET_LINK
    server.set_role(native.LlmRole.MIX, {native.OPTION_LISTEN_IP_INFO: f"127.0.0.1:{server.listen_port}"})


@pytest.mark.rules("§10.3", "cpp-api §6.8")
def test_unlinking_a_cluster_never_linked_succeeds(server_and_client: Any) -> None:
    server, client = server_and_client
    assert client.unlink_llm_clusters([sup.cluster(1, server.listen_port)]) == (S.LLM_SUCCESS, [S.LLM_SUCCESS])
    assert client.unlink_llm_clusters([sup.cluster(8, 1)], force_flag=True) == (S.LLM_SUCCESS, [S.LLM_SUCCESS])


@pytest.mark.rules("§10.3", "§13", "cpp-api §6.8")
def test_a_non_forced_unlink_needs_the_peer_and_keeps_the_link_otherwise(server_and_client: Any, silent_port: int) -> None:
    server, client = server_and_client
    s_src, c_dst = pullable(client, server)
    port = server.listen_port
    assert client.link_llm_clusters([sup.cluster(1, port)])[0] == S.LLM_SUCCESS
    assert client.unlink_llm_clusters([sup.cluster(1, silent_port)], 200)[1] == [S.LLM_TIMEOUT]
    assert client.unlink_llm_clusters([ClusterInfo(1, 0, [], [])])[1] == [S.LLM_PARAM_INVALID]
    server.finalize()
    assert client.unlink_llm_clusters([sup.cluster(1, port)]) == (S.LLM_UNLINK_FAILED, [S.LLM_UNLINK_FAILED])
    assert sup.status_of(client.set_role, native.LlmRole.MIX) == S.LLM_EXIST_LINK     # still linked
    assert pull(client, 1, s_src, c_dst) == S.LLM_TIMEOUT                              # ... to a peer gone
    assert client.unlink_llm_clusters([sup.cluster(1, port)], force_flag=True)[1] == [S.LLM_SUCCESS]
    client.set_role(native.LlmRole.MIX)


@pytest.mark.rules("§10.3", "cpp-api §6.8")
def test_unlink_reports_each_cluster_and_returns_the_last_failure(server_and_client: Any) -> None:
    server, client = server_and_client
    assert client.link_llm_clusters([sup.cluster(1, server.listen_port)])[0] == S.LLM_SUCCESS
    refused = sup.cluster(5, sup.free_port())                      # nobody listens there
    no_remote = ClusterInfo(6, 0, [], [])
    status, rets = client.unlink_llm_clusters([refused, sup.cluster(1, server.listen_port), no_remote])
    assert (status, rets) == (S.LLM_PARAM_INVALID, [S.LLM_UNLINK_FAILED, S.LLM_SUCCESS, S.LLM_PARAM_INVALID])
    assert client.unlink_llm_clusters([no_remote, refused]) == (S.LLM_UNLINK_FAILED,
                                                                [S.LLM_PARAM_INVALID, S.LLM_UNLINK_FAILED])
    client.set_role(native.LlmRole.MIX)                           # cluster 1 was unlinked


@pytest.mark.rules("§10.2", "§10.3", "§10.4", "cpp-api §6.8", "PR-31")
def test_the_peer_of_a_forced_unlink_sees_a_dead_link_until_it_unlinks(server_and_client: Any) -> None:
    server, client = server_and_client
    s_src, c_dst = pullable(client, server)
    c_src, s_dst = pullable(server, client)
    info = sup.cluster(1, server.listen_port)
    assert client.link_llm_clusters([info])[0] == S.LLM_SUCCESS
    assert client.unlink_llm_clusters([info], force_flag=True)[1] == [S.LLM_SUCCESS]
    assert pull(server, 2, c_src, s_dst) == S.LLM_TIMEOUT                     # PR-31
    assert "gone" in raw.last_error()
    assert sup.status_of(server.set_role, native.LlmRole.MIX) == S.LLM_EXIST_LINK
    # the side without a link links again: the peer replaces its stale link (semantics.md §10.4)
    assert client.link_llm_clusters([info])[1] == [S.LLM_SUCCESS]
    assert pull(server, 2, c_src, s_dst) == S.LLM_SUCCESS
    assert pull(client, 1, s_src, c_dst) == S.LLM_SUCCESS


@pytest.mark.rules("§10.2", "PR-42")
def test_the_side_still_holding_a_link_gets_already_link_until_it_force_unlinks(server_and_client: Any) -> None:
    server, client = server_and_client
    s_src, c_dst = pullable(client, server)
    assert client.link_llm_clusters([sup.cluster(1, server.listen_port)])[0] == S.LLM_SUCCESS
    assert server.unlink_llm_clusters([sup.cluster(2, 1)], force_flag=True)[1] == [S.LLM_SUCCESS]
    assert client.link_llm_clusters([sup.cluster(1, server.listen_port)])[1] == [S.LLM_ALREADY_LINK]   # PR-42
    assert pull(client, 1, s_src, c_dst) == S.LLM_TIMEOUT
    assert client.unlink_llm_clusters([sup.cluster(1, server.listen_port)], force_flag=True)[1] == [S.LLM_SUCCESS]
    assert client.link_llm_clusters([sup.cluster(1, server.listen_port)])[1] == [S.LLM_SUCCESS]
    assert pull(client, 1, s_src, c_dst) == S.LLM_SUCCESS


@pytest.mark.rules("§10.4", "PR-31")
@pytest.mark.mock_only(reason="uses the mock's control interface (fault injection, serve delay, dropped connections, accounting)")
def test_dropped_connections_leave_dead_links_on_both_sides(server_and_client: Any) -> None:
    server, client = server_and_client
    s_src, c_dst = pullable(client, server)
    c_src, s_dst = pullable(server, client)
    assert client.link_llm_clusters([sup.cluster(1, server.listen_port)])[0] == S.LLM_SUCCESS
    mock_control.drop_connections(server)
    assert pull(client, 1, s_src, c_dst) == S.LLM_TIMEOUT
    assert pull(server, 2, c_src, s_dst) == S.LLM_TIMEOUT
    assert sup.status_of(server.set_role, native.LlmRole.MIX) == S.LLM_EXIST_LINK
    assert sup.status_of(client.set_role, native.LlmRole.MIX) == S.LLM_EXIST_LINK
    assert client.unlink_llm_clusters([sup.cluster(1, server.listen_port)])[1] == [S.LLM_SUCCESS]
    assert client.link_llm_clusters([sup.cluster(1, server.listen_port)])[1] == [S.LLM_SUCCESS]
    assert pull(client, 1, s_src, c_dst) == S.LLM_SUCCESS


@pytest.mark.rules("§10.4", "PR-31")
def test_a_finalized_peer_makes_transfers_time_out(server_and_client: Any) -> None:
    server, client = server_and_client
    s_src, c_dst = pullable(client, server)
    assert client.link_llm_clusters([sup.cluster(1, server.listen_port)])[0] == S.LLM_SUCCESS
    server.finalize()
    assert pull(client, 1, s_src, c_dst) == S.LLM_TIMEOUT


@pytest.mark.rules("§10.3", "§14", "cpp-api §6.8")
@pytest.mark.mock_only(reason="uses the mock's control interface (fault injection, serve delay, dropped connections, accounting)")
def test_unlink_waits_for_a_transfer_in_flight(server_and_client: Any) -> None:
    server, client = server_and_client
    s_src, c_dst = pullable(client, server)
    assert client.link_llm_clusters([sup.cluster(1, server.listen_port)])[0] == S.LLM_SUCCESS
    mock_control.set_serve_delay(server, 400)
    done: dict[str, Any] = {}
    started = threading.Event()

    def run() -> None:
        started.set()
        done["status"] = pull(client, 1, s_src, c_dst)
        done["at"] = time.monotonic()

    t = threading.Thread(target=run)
    t.start()
    started.wait()
    time.sleep(0.15)                                     # the pull holds the link, waiting for the peer
    assert client.unlink_llm_clusters([sup.cluster(1, 0)], force_flag=True)[1] == [S.LLM_SUCCESS]
    unlinked_at = time.monotonic()
    t.join()
    assert done["status"] == S.LLM_SUCCESS
    assert done["at"] <= unlinked_at


# ---- between processes --------------------------------------------------------------------

@pytest.fixture
def peer() -> Iterator[Any]:
    p = sup.PeerProcess()
    yield p
    p.close()


@pytest.mark.rules("§10.2", "PR-42")
def test_engines_of_two_processes_link_and_unlink(engines: Engines, peer: Any) -> None:
    port = sup.free_port()
    peer.call("init", cluster_id=1, role=1, options={"llm.DeviceId": "0", "llm.ListenIpInfo": f"127.0.0.1:{port}"})
    client = engines(2, listen=True)
    assert client.link_llm_clusters([sup.cluster(1, port)]) == (S.LLM_SUCCESS, [S.LLM_SUCCESS])
    assert client.link_llm_clusters([sup.cluster(1, port)])[1] == [S.LLM_ALREADY_LINK]
    # the peer process holds its side: it cannot link back, and its unlink reaches us
    assert peer.call("link", clusters=[[2, client.listen_port]]) == [S.LLM_ALREADY_LINK, S.LLM_ALREADY_LINK]
    assert peer.call("unlink", clusters=[[2, client.listen_port]]) == [0, 0]
    client.set_role(native.LlmRole.MIX, {native.OPTION_LISTEN_IP_INFO: f"127.0.0.1:{client.listen_port}"})


@pytest.mark.rules("E-18", "§10.4", "PR-31")
def test_a_peer_process_that_dies_is_noticed(engines: Engines, peer: Any) -> None:
    port = sup.free_port()
    peer.call("init", cluster_id=1, role=1, options={"llm.DeviceId": "0", "llm.ListenIpInfo": f"127.0.0.1:{port}"})
    src = peer.call("register", num_tensors=2, shape=[2, 8], seed=3)
    client = engines(2, options={})
    dst = [np.zeros((2, 8), np.uint8) for _ in range(2)]
    did = sup.register(client, dst)
    assert client.link_llm_clusters([sup.cluster(1, port)])[0] == S.LLM_SUCCESS
    assert pull(client, 1, src, did) == S.LLM_SUCCESS
    peer.kill()
    assert pull(client, 1, src, did) == S.LLM_TIMEOUT
    assert pull(client, 1, src, did) == S.LLM_TIMEOUT
    assert client.unlink_llm_clusters([sup.cluster(1, port)])[1] == [S.LLM_UNLINK_FAILED]
    assert client.unlink_llm_clusters([sup.cluster(1, port)], force_flag=True)[1] == [S.LLM_SUCCESS]


def test_the_peer_process_runs_the_package_under_test(peer: Any) -> None:
    import llm_datadist_ffi
    assert peer.call("package") == str(Path(llm_datadist_ffi.__file__).resolve())


@pytest.mark.rules("E-8", "§10.3", "cpp-api §6.8")
@pytest.mark.mock_only(reason=PR28)
def test_a_non_forced_unlink_at_another_clusters_address_warns_and_drops_the_named_link(engines: Engines, lenient: None) -> None:
    """The vendor's disconnect carries the caller's own id only: the listener drops its
    link to the caller (it has none), the caller drops its link to the id it named."""
    server, other = engines(1, listen=True), engines(6, listen=True)
    client = engines(2, options={})
    assert client.link_llm_clusters([sup.cluster(1, server.listen_port)])[0] == S.LLM_SUCCESS
    with pytest.warns(lint.ClusterIdMismatchWarning, match="cluster 6's listener"):
        assert client.unlink_llm_clusters([sup.cluster(1, other.listen_port)]) == (S.LLM_SUCCESS, [S.LLM_SUCCESS])
    client.set_role(native.LlmRole.MIX)                                   # the client's side is gone
    assert sup.status_of(server.set_role, native.LlmRole.MIX,
                         {native.OPTION_LISTEN_IP_INFO: f"127.0.0.1:{server.listen_port}"}) == S.LLM_EXIST_LINK


@pytest.mark.rules("E-8", "§10.3", "cpp-api §6.8")
def test_a_non_forced_unlink_checks_the_peer_cluster_id_in_strict_mode(engines: Engines, strict: None) -> None:
    server, other = engines(1, listen=True), engines(6, listen=True)
    client = engines(2, options={})
    assert client.link_llm_clusters([sup.cluster(1, server.listen_port)])[0] == S.LLM_SUCCESS
    # cluster 6, not cluster 1, answers at that address: refused, and the link stays
    status, rets = client.unlink_llm_clusters([sup.cluster(1, other.listen_port)])
    assert (status, rets) == (S.LLM_PARAM_INVALID, [S.LLM_PARAM_INVALID])
    assert "mismatch" in raw.last_error()
    assert sup.status_of(client.set_role, native.LlmRole.MIX) == S.LLM_EXIST_LINK
    assert client.unlink_llm_clusters([sup.cluster(1, server.listen_port)])[1] == [S.LLM_SUCCESS]
    client.set_role(native.LlmRole.MIX)


# ---- the handshake protocol (mock transport) -------------------------------------------------

def handshake(port: int, mode: int, cluster_id: int, expected: int, hixl: int = 0, strict_ids: int = 1
              ) -> tuple[int, str]:
    peer = wire.RawLink(port, cluster_id=cluster_id, expected=expected)
    try:
        hello = peer.hello(mode=mode, hixl=hixl, strict_ids=strict_ids)
    finally:
        peer.close()
    return hello.reply.status, hello.reply.text


@pytest.mark.rules("§1.3", "§1.4", "§10.1", "PR-28")
def test_a_peer_in_another_transfer_mode_is_refused(server_and_client: Any) -> None:
    server, _ = server_and_client
    status, text = handshake(server.listen_port, 2, 9, 1)          # 2: server-assisted
    assert status == S.LLM_PARAM_INVALID and "transfer modes differ" in text
    status, text = handshake(server.listen_port, 1, 9, 4)
    assert status == S.LLM_PARAM_INVALID and "PR-28" in text
    status, text = handshake(server.listen_port, 1, 9, 1, hixl=1)
    assert status == S.LLM_LINK_FAILED and "transfer backends differ" in text
    status, text = handshake(server.listen_port, 1, 9, 1)          # accepted, then abandoned: no REVERSE
    assert status == S.LLM_SUCCESS
    server.set_role(native.LlmRole.MIX, {native.OPTION_LISTEN_IP_INFO: f"127.0.0.1:{server.listen_port}"})


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _threads() -> int:
    return len(os.listdir("/proc/self/task"))


@pytest.mark.rules("§6.5", "§12.1", "cpp-api §6.2")
def test_finalize_leaves_no_socket_or_thread_behind() -> None:
    fds, threads = _open_fds(), _threads()
    server, client = native.LlmDataDist(1, 1), native.LlmDataDist(2, 2)
    port = sup.free_port()
    server.initialize({native.OPTION_DEVICE_ID: "0", native.OPTION_LISTEN_IP_INFO: f"127.0.0.1:{port}"})
    client.initialize({native.OPTION_DEVICE_ID: "0", native.OPTION_LISTEN_IP_INFO: f"127.0.0.1:{sup.free_port()}"})
    for _ in range(3):
        assert client.link_llm_clusters([sup.cluster(1, port)])[0] == S.LLM_SUCCESS
        assert client.unlink_llm_clusters([sup.cluster(1, port)])[0] == S.LLM_SUCCESS
    assert client.link_llm_clusters([sup.cluster(1, port)])[0] == S.LLM_SUCCESS
    assert _threads() > threads and _open_fds() > fds
    client.close()
    server.close()
    assert (_open_fds(), _threads()) == (fds, threads)


# ---- the HIXL backend (PR-42, E-5) ------------------------------------------------------------

def hixl_engine(engines: Engines, cluster_id: int, device_id: int = 0) -> native.LlmDataDist:
    return engines(cluster_id, options={native.OPTION_TRANSFER_BACKEND: "hixl"}, listen=True, device_id=device_id)


@pytest.mark.rules("E-5", "§10.2", "§10.3", "cpp-api §6.8", "PR-42")
def test_hixl_links_belong_to_the_client_one_per_direction(engines: Engines) -> None:
    a, b = hixl_engine(engines, 1), hixl_engine(engines, 2, device_id=1)
    b_src, a_dst = pullable(a, b)
    a_src, b_dst = pullable(b, a)
    assert a.link_llm_clusters([sup.cluster(2, b.listen_port)]) == (S.LLM_SUCCESS, [S.LLM_SUCCESS])
    assert pull(a, 2, b_src, a_dst) == S.LLM_SUCCESS
    assert pull(b, 1, a_src, b_dst) == S.LLM_NOT_YET_LINK                 # the listener holds no link
    assert b.link_llm_clusters([sup.cluster(1, a.listen_port)]) == (S.LLM_SUCCESS, [S.LLM_SUCCESS])
    assert pull(b, 1, a_src, b_dst) == S.LLM_SUCCESS
    # one link per remote address, found before connecting
    assert a.link_llm_clusters([sup.cluster(7, b.listen_port)]) == (S.LLM_ALREADY_LINK, [S.LLM_ALREADY_LINK])
    # the unlink ignores force and addresses: the client's link goes, the other stays
    assert a.unlink_llm_clusters([ClusterInfo(2, 0, [], [])]) == (S.LLM_SUCCESS, [S.LLM_SUCCESS])
    assert pull(a, 2, b_src, a_dst) == S.LLM_NOT_YET_LINK
    assert pull(b, 1, a_src, b_dst) == S.LLM_SUCCESS
    assert b.unlink_llm_clusters([ClusterInfo(1, 0, [], [])], force_flag=True) == (S.LLM_SUCCESS, [S.LLM_SUCCESS])
    assert b.unlink_llm_clusters([ClusterInfo(1, 0, [], [])]) == (S.LLM_SUCCESS, [S.LLM_SUCCESS])  # none: fine
    assert pull(b, 1, a_src, b_dst) == S.LLM_NOT_YET_LINK


@pytest.mark.rules("E-5")
def test_hixl_refuses_to_connect_to_its_own_listen_address(engines: Engines) -> None:
    a = hixl_engine(engines, 1)
    assert a.link_llm_clusters([sup.cluster(5, a.listen_port)]) == (S.LLM_PARAM_INVALID, [S.LLM_PARAM_INVALID])
    assert "own listen address" in raw.last_error()


@pytest.mark.rules("E-5")
def test_hixl_and_the_default_backend_do_not_link(engines: Engines) -> None:
    a, b = hixl_engine(engines, 1), engines(2, listen=True, device_id=1)
    assert a.link_llm_clusters([sup.cluster(2, b.listen_port)])[1] == [S.LLM_LINK_FAILED]
    assert "transfer backends differ" in raw.last_error()


@pytest.mark.rules("§10.1", "PR-28")
@pytest.mark.mock_only(reason=PR28)
def test_a_hixl_link_is_keyed_by_the_id_the_client_gave(engines: Engines, lenient: None) -> None:
    a, b = hixl_engine(engines, 1), hixl_engine(engines, 2, device_id=1)
    b_src, a_dst = pullable(a, b)
    with pytest.warns(lint.ClusterIdMismatchWarning, match="keys the link by 9"):
        assert a.link_llm_clusters([sup.cluster(9, b.listen_port)]) == (S.LLM_SUCCESS, [S.LLM_SUCCESS])
    assert pull(a, 9, b_src, a_dst) == S.LLM_SUCCESS
    assert pull(a, 2, b_src, a_dst) == S.LLM_NOT_YET_LINK


@pytest.mark.mock_only(reason="the engine reports the PR-28 lint through the mock's lint record")
def test_a_hixl_link_under_a_linked_id_to_another_address_replaces_it_under_that_id(engines: Engines, lenient: None) -> None:
    """HIXL keys the link table by the id given and its connections by address: the old
    connection stays (its address is still linked) but the id names the new one."""
    a, b = hixl_engine(engines, 1), hixl_engine(engines, 2, device_id=1)
    c = hixl_engine(engines, 3, device_id=2)
    b_src, a_dst = pullable(a, b)
    pullable(a, c)
    c_src, _ = pullable(a, c)                                  # cache 2 of c; b has only cache 1
    assert a.link_llm_clusters([sup.cluster(2, b.listen_port)]) == (S.LLM_SUCCESS, [S.LLM_SUCCESS])
    assert pull(a, 2, c_src, a_dst) == S.LLM_KV_CACHE_NOT_EXIST
    with pytest.warns(lint.ClusterIdMismatchWarning):
        assert a.link_llm_clusters([sup.cluster(2, c.listen_port)]) == (S.LLM_SUCCESS, [S.LLM_SUCCESS])
    assert pull(a, 2, c_src, a_dst) == S.LLM_SUCCESS                        # id 2 now names c's listener
    assert a.link_llm_clusters([sup.cluster(2, b.listen_port)]) == (S.LLM_ALREADY_LINK, [S.LLM_ALREADY_LINK])
    assert a.unlink_llm_clusters([ClusterInfo(2, 0, [], [])]) == (S.LLM_SUCCESS, [S.LLM_SUCCESS])
    assert pull(a, 2, b_src, a_dst) == S.LLM_NOT_YET_LINK
