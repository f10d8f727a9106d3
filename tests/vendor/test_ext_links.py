"""Extension ABI, priority 5: v1 links through lldd_link_clusters and
lldd_unlink_clusters (docs/reference/semantics.md §10.5), lldd_ext_switch_role in both generations
(semantics.md §10.7) and lldd_ext_check_link_status (semantics.md §10.8).
"""
from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np
import pytest

from llm_datadist_ffi import LLMStatusCode as S


import ext_support as xs
pytestmark = pytest.mark.mock_only(reason="raw calls of the mock's extension functions")


def prompt(x: Any, cluster: int = 1, **extra: str) -> tuple[Any, int]:
    return x.listening(cluster, xs.v1_options("Prompt", **extra), v1=True)


def check_link(x: Any, engine: Any, cluster: int) -> int:
    return int(x.lib.lldd_ext_check_link_status(engine, cluster))


def switch(x: Any, engine: Any, role: int, options: dict[str, str]) -> int:
    array, count, keep = x.options(options)
    status = int(x.lib.lldd_ext_switch_role(engine, role, array, count))
    del keep
    return status


# ---- v1 link_clusters / unlink_clusters --------------------------------------------------------


def test_v1_links_are_made_by_a_decoder(x: Any) -> None:
    p, port = prompt(x)
    assert x.link(p, [(2, port)]) == (S.LLM_PARAM_INVALID, [])
    assert "only a DECODER" in x.last_error()
    mix = x.engine(3, xs.v1_options("Mix"))
    assert x.link(mix, [(1, port)]) == (S.LLM_PARAM_INVALID, [])
    d = x.engine(2, xs.v1_options())
    assert check_link(x, d, 1) == S.LLM_NOT_YET_LINK
    assert x.link(d, [(1, port)]) == (S.LLM_SUCCESS, [S.LLM_SUCCESS])
    assert check_link(x, d, 1) == S.LLM_SUCCESS
    assert x.link(d, [(1, port)]) == (S.LLM_ALREADY_LINK, [S.LLM_ALREADY_LINK])
    assert x.unlink(p, [(2, 0)], force=True) == (0, [0])                     # any role unlinks
    assert x.unlink(d, [(1, port)]) == (0, [0])
    assert check_link(x, d, 1) == S.LLM_NOT_YET_LINK


def test_v1_call_level_rules(x: Any) -> None:
    d = x.engine(2, xs.v1_options())
    many = [(100 + i, 1) for i in range(17)]
    assert x.link(d, many) == (S.LLM_CLUSTER_NUM_EXCEED_LIMIT, [])
    assert x.unlink(d, many) == (S.LLM_CLUSTER_NUM_EXCEED_LIMIT, [])
    assert x.link(d, [(1, 1)], local=0) == (S.LLM_PARAM_INVALID, [])
    assert x.link(d, [(1, 1)], local=2) == (S.LLM_PARAM_INVALID, [])
    assert "differ in size" in x.last_error()
    infos, keep = x.clusters([(1, 1), (3, 1)])
    other = x.ffi.new("char[]", b"127.0.0.2")
    infos[1].local_ip_infos[0].ip = other
    rets = x.ffi.new("lldd_status[]", 2)
    count = x.ffi.new("size_t *")
    assert x.lib.lldd_link_clusters(d, infos, 2, 1000, rets, count) == S.LLM_PARAM_INVALID and count[0] == 0
    assert "differ from those of clusters[0]" in x.last_error()
    del keep


def test_v1_repeats_failures_and_rollback(x: Any) -> None:
    p, port = prompt(x)
    d = x.engine(2, xs.v1_options())
    assert x.link(d, [(1, port), (1, port)]) == (S.LLM_REPEAT_REQUEST, [S.LLM_SUCCESS, S.LLM_REPEAT_REQUEST])
    dead = xs.free_port()
    status, rets = x.link(d, [(5, dead), (1, port)])
    assert (status, rets) == (S.LLM_LINK_FAILED, [S.LLM_LINK_FAILED, S.LLM_ALREADY_LINK])
    assert check_link(x, d, 5) == S.LLM_NOT_YET_LINK and check_link(x, d, 1) == 0
    assert x.unlink(d, [(5, dead), (1, port)]) == (S.LLM_SUCCESS, [S.LLM_NOT_YET_LINK, S.LLM_SUCCESS])
    assert x.unlink(d, [(1, port), (1, port)]) == (S.LLM_UNLINK_FAILED, [S.LLM_NOT_YET_LINK,
                                                                          S.LLM_REPEAT_REQUEST])


def test_v1_link_timeouts_are_wait_proc_timeout_and_roll_back(x: Any) -> None:
    p, port = prompt(x)
    d = x.engine(2, xs.v1_options())
    assert x.lib.lldd_mock_set_serve_delay(p, 600) == 0
    assert x.link(d, [(1, port)], timeout=200) == (S.LLM_LINK_FAILED, [S.LLM_WAIT_PROCESS_TIMEOUT])
    assert x.lib.lldd_mock_set_serve_delay(p, 0) == 0
    time.sleep(0.7)                                          # the prompt's abandoned handshake ends
    assert check_link(x, d, 1) == S.LLM_NOT_YET_LINK
    assert x.link(d, [(1, port)]) == (0, [0])


def test_v1_a_second_link_call_while_one_runs_is_processing_link(x: Any) -> None:
    p, port = prompt(x)
    d = x.engine(2, xs.v1_options())
    assert x.lib.lldd_mock_set_serve_delay(p, 500) == 0
    results: list[Any] = []
    thread = threading.Thread(target=lambda: results.append(x.link(d, [(1, port)], timeout=3000)))
    thread.start()
    time.sleep(0.2)
    assert x.link(d, [(3, port)]) == (S.LLM_PROCESSING_LINK, [])
    assert x.unlink(d, [(1, port)]) == (S.LLM_PROCESSING_LINK, [])
    thread.join()
    assert results == [(0, [0])]


def test_v1_unlink_of_a_busy_link_is_link_busy(x: Any) -> None:
    p, port = prompt(x, **{"llm.SyncKvCacheWaitTime": "3000"})
    status, _, addrs = x.allocate(p, 2, [2, 16], keys=[x.req(1)])
    assert status == 0
    d = x.engine(2, xs.v1_options(**{"llm.SyncKvCacheWaitTime": "3000"}))
    status, dst_id, _ = x.allocate(d, 2, [2, 16])
    assert x.link(d, [(1, port)]) == (0, [0])
    assert x.lib.lldd_mock_set_serve_delay(p, 700) == 0
    results: list[int] = []
    thread = threading.Thread(target=lambda: results.append(x.pull(d, x.req(1, cluster=1), dst_id)))
    thread.start()
    time.sleep(0.3)
    assert x.unlink(d, [(1, port)]) == (S.LLM_UNLINK_FAILED, [S.LLM_LINK_BUSY])
    thread.join()
    assert results == [0]
    assert x.lib.lldd_mock_set_serve_delay(p, 0) == 0
    assert x.unlink(d, [(1, port)]) == (0, [0])


def test_check_link_status_rules(x: Any) -> None:
    v2 = x.engine(1, xs.v2_options())
    assert check_link(x, v2, 2) == S.LLM_PARAM_INVALID
    assert "CacheManager" in x.last_error()
    p, _ = prompt(x, 3)
    assert check_link(x, p, 2) == S.LLM_PARAM_INVALID
    assert "DECODER" in x.last_error()
    assert x.lib.lldd_ext_check_link_status(x.ffi.NULL, 1) == S.LLM_PARAM_INVALID
    fresh = x.create(4)
    assert check_link(x, fresh, 1) == S.LLM_FAILED


# ---- switch_role -------------------------------------------------------------------------------


def test_v2_switch_role_moves_starts_and_stops_the_listener(x: Any) -> None:
    engine = x.engine(1, xs.v2_options(role="Prompt"))
    other = x.engine(2, xs.v2_options())
    assert switch(x, engine, xs.DECODER, {}) == 0                          # no change needed, no listener
    port = xs.free_port()
    assert switch(x, engine, xs.PROMPT, {"llm.ListenIp": "127.0.0.1", "llm.ListenPort": str(port)}) == 0
    assert x.link(other, [(1, port)]) == (0, [0])
    assert switch(x, engine, xs.MIX, {}) == S.LLM_EXIST_LINK
    assert x.unlink(other, [(1, port)]) == (0, [0])
    assert switch(x, engine, xs.MIX, {}) == 0                               # stops listening
    assert x.link(other, [(1, port)])[1] == [S.LLM_LINK_FAILED]
    assert switch(x, engine, 4, {}) == S.LLM_PARAM_INVALID
    assert switch(x, engine, xs.PROMPT, {"llm.ListenIp": "127.0.0.1"}) == S.LLM_PARAM_INVALID
    assert switch(x, engine, xs.PROMPT, {"llm.ListenIp": "127.0.0.1", "llm.ListenPort": "70000"}) == \
        S.LLM_PARAM_INVALID
    assert x.lib.lldd_ext_switch_role(engine, 1, x.ffi.NULL, 2) == S.LLM_PARAM_INVALID


def test_v2_switch_role_with_hixl_cannot_move_the_listener(x: Any) -> None:
    engine = x.engine(1, xs.v2_options(port=xs.free_port(), **{"llm.TransferBackend": "hixl"}))
    port = xs.free_port()
    assert switch(x, engine, xs.PROMPT, {"llm.ListenIp": "127.0.0.1", "llm.ListenPort": str(port)}) == \
        S.LLM_FEATURE_NOT_ENABLED


def test_v1_switch_role_rules(x: Any) -> None:
    locked = x.engine(1, xs.v1_options())
    port = xs.free_port()
    assert switch(x, locked, xs.PROMPT, {"llm.listenIpInfo": f"127.0.0.1:{port}"}) == S.LLM_FEATURE_NOT_ENABLED
    d = x.engine(2, xs.v1_options(**{"llm.EnableSwitchRole": "1"}))
    assert switch(x, d, xs.DECODER, {}) == S.LLM_PARAM_INVALID
    assert "role not changed" in x.last_error()
    assert switch(x, d, xs.PROMPT, {}) == S.LLM_PARAM_INVALID
    assert "llm.listenIpInfo" in x.last_error()
    assert switch(x, d, xs.PROMPT, {"llm.listenIpInfo": "127.0.0.1"}) == S.LLM_PARAM_INVALID


def test_v1_roles_swap_and_the_transfer_reverses(x: Any) -> None:
    p, port = x.listening(1, xs.v1_options("Prompt", **{"llm.EnableSwitchRole": "1"}), v1=True)
    d = x.engine(2, xs.v1_options(**{"llm.EnableSwitchRole": "1"}))
    assert x.link(d, [(1, port)]) == (0, [0])
    assert switch(x, d, xs.PROMPT, {"llm.listenIpInfo": f"127.0.0.1:{xs.free_port()}"}) == S.LLM_EXIST_LINK
    assert x.unlink(d, [(1, port)]) == (0, [0])
    # the decoder becomes the prompt (llm.ListenIp as the vendor's v1 switch_role sends it: the
    # little-endian integer of the address) and the prompt becomes the decoder
    new_port = xs.free_port()
    assert switch(x, d, xs.PROMPT, {"llm.ListenIp": str(127 | 0 << 8 | 0 << 16 | 1 << 24),
                                    "llm.ListenPort": str(new_port)}) == 0
    assert switch(x, p, xs.DECODER, {}) == 0
    status, src_id, addrs = x.allocate(d, 2, [2, 16], keys=[x.req(8)])
    assert status == 0
    for i, a in enumerate(addrs):
        x.view(a, 32)[:] = np.arange(32, dtype=np.uint8) + i
    status, dst_id, dst_addrs = x.allocate(p, 2, [2, 16])
    assert x.link(p, [(2, new_port)]) == (0, [0])
    assert x.pull(p, x.req(8, cluster=2), dst_id) == 0
    for i, a in enumerate(dst_addrs):
        assert (x.view(a, 32)[:16] == np.arange(16, dtype=np.uint8) + i).all()
    assert x.link(d, [(1, port)]) == (S.LLM_PARAM_INVALID, [])           # a PROMPT now
    assert x.pull(d, x.req(8, cluster=1), src_id) == S.LLM_PARAM_INVALID
