"""Extension ABI, priority 6: rank-table links (lldd_ext_link, lldd_ext_unlink,
lldd_ext_query_register_mem_status; docs/reference/semantics.md §10.6, PR-39) and
lldd_ext_remap_registered_memory (docs/reference/python-api.md §11.7).

Members find each other through the mock's rendezvous directory (one host); the
tests use comm names unique to the test run, so that runs in parallel never meet.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from llm_datadist_ffi import LLMStatusCode as S


import ext_support as xs
pytestmark = pytest.mark.mock_only(reason="raw calls of the mock's extension functions")
OK, PREPARING, FAILED = 0, 1, 2
RANK_TABLE = b'{"version": "1.0", "server_count": "1", "server_list": []}'


def unique(prefix: str) -> bytes:
    return f"{prefix}_{uuid.uuid4().hex[:12]}".encode()


def link(x: Any, engine: Any, name: bytes, members: dict[int, int], table: bytes = RANK_TABLE) -> tuple[int, int]:
    ids = x.u64(members.keys())
    ranks = x.ffi.new("uint32_t[]", list(members.values()))
    out = x.ffi.new("uint64_t *")
    status = int(x.lib.lldd_ext_link(engine, name, ids, ranks, len(members), table, out))
    return status, int(out[0])


def query(x: Any, engine: Any, comm_id: int) -> tuple[int, int]:
    out = x.ffi.new("uint32_t *", 99)
    status = int(x.lib.lldd_ext_query_register_mem_status(engine, comm_id, out))
    return status, int(out[0])


def wait_state(x: Any, engine: Any, comm_id: int, timeout: float = 20) -> int:
    deadline = time.monotonic() + timeout
    while True:
        status, state = query(x, engine, comm_id)
        assert status == 0
        if state != PREPARING or time.monotonic() > deadline:
            return state
        time.sleep(0.02)


def v2(**extra: str) -> dict[str, str]:
    return xs.v2_options(**extra)


# ---- link arguments --------------------------------------------------------------------------


@pytest.mark.parametrize("name, members, table, status, words", [
    (b"", {1: 0, 2: 1}, RANK_TABLE, S.LLM_PARAM_INVALID, "1 to 127"),
    (b"x" * 128, {1: 0, 2: 1}, RANK_TABLE, S.LLM_PARAM_INVALID, "1 to 127"),
    (b"c", {1: 0}, RANK_TABLE, S.LLM_PARAM_INVALID, "2 to 4"),
    (b"c", {1: 0, 2: 1, 3: 2, 4: 3, 5: 4}, RANK_TABLE, S.LLM_PARAM_INVALID, "2 to 4"),
    (b"c", {1: 1, 2: 0}, RANK_TABLE, S.LLM_PARAM_INVALID, "ascending"),
    (b"c", {1: 0, 2: 1}, b"{not json", S.LLM_PARAM_INVALID, "PR-39"),
    (b"c", {5: 0, 6: 1}, RANK_TABLE, S.LLM_PARAM_INVALID, "not a key of cluster_rank_info"),
])
def test_link_checks_its_arguments(x: Any, name: bytes, members: dict[int, int], table: bytes, status: int,
                                   words: str) -> None:
    engine = x.engine(1, v2())
    assert link(x, engine, name, members, table)[0] == status
    assert words in x.last_error()


def test_link_checks_pointers_generation_and_backend(x: Any) -> None:
    engine = x.engine(1, v2())
    out = x.ffi.new("uint64_t *")
    NULL = x.ffi.NULL
    assert x.lib.lldd_ext_link(engine, NULL, x.u64([1, 2]), x.ffi.new("uint32_t[]", 2), 2, RANK_TABLE, out) == \
        S.LLM_PARAM_INVALID
    assert x.lib.lldd_ext_link(engine, b"c", NULL, NULL, 2, RANK_TABLE, out) == S.LLM_PARAM_INVALID
    assert x.lib.lldd_ext_link(engine, b"c", x.u64([1, 2]), x.ffi.new("uint32_t[]", 2), 2, RANK_TABLE, NULL) == \
        S.LLM_PARAM_INVALID
    dup = x.u64([1, 1])
    assert x.lib.lldd_ext_link(engine, b"c", dup, x.ffi.new("uint32_t[]", 2), 2, RANK_TABLE, out) == \
        S.LLM_PARAM_INVALID
    assert "twice" in x.last_error()
    v1 = x.engine(2, xs.v1_options())
    assert link(x, v1, b"c", {1: 0, 2: 1})[0] == S.LLM_PARAM_INVALID
    assert x.lib.lldd_ext_unlink(v1, 1) == S.LLM_PARAM_INVALID
    hixl = x.engine(3, xs.v2_options(port=xs.free_port(), **{"llm.TransferBackend": "hixl"}))
    assert link(x, hixl, b"c", {3: 0, 2: 1})[0] == S.LLM_FEATURE_NOT_ENABLED
    assert query(x, hixl, 1)[0] == S.LLM_FEATURE_NOT_ENABLED


def test_unknown_comm_ids_are_not_yet_link(x: Any) -> None:
    engine = x.engine(1, v2())
    assert query(x, engine, 1)[0] == S.LLM_NOT_YET_LINK
    assert x.lib.lldd_ext_unlink(engine, 1) == S.LLM_NOT_YET_LINK
    assert x.lib.lldd_ext_query_register_mem_status(engine, 1, x.ffi.NULL) == S.LLM_PARAM_INVALID


# ---- the status machine ----------------------------------------------------------------------


def test_two_engines_of_one_process_link_and_transfer(x: Any) -> None:
    p = x.engine(1, v2(role="Prompt"))
    d = x.engine(2, v2())
    src = [np.random.default_rng(1).integers(0, 256, (2, 16), dtype=np.uint8) for _ in range(2)]
    _, src_id = x.register(p, src)
    dst = [np.zeros((2, 16), np.uint8) for _ in range(2)]
    _, dst_id = x.register(d, dst)
    name = unique("pair")
    status, comm_d = link(x, d, name, {1: 0, 2: 1})
    assert (status, comm_d) == (0, 1)
    assert query(x, d, comm_d) == (0, PREPARING)
    assert link(x, d, name, {1: 0, 2: 1})[0] == S.LLM_LINK_FAILED         # already a member under that name
    status, comm_p = link(x, p, name, {1: 0, 2: 1})
    assert (status, comm_p) == (0, 1)
    assert wait_state(x, d, comm_d) == OK and wait_state(x, p, comm_p) == OK
    assert x.pull(d, x.by_id(1, src_id, 1), dst_id) == 0
    assert all((dst[t][0] == src[t][1]).all() for t in range(2))
    assert x.push_layer(p, src_id, x.by_id(2, dst_id, 1)) == 0
    assert all((dst[t][1] == src[t][0]).all() for t in range(2))
    array, count, keep = x.options({})
    assert x.lib.lldd_ext_switch_role(d, xs.MIX, array, count) == S.LLM_EXIST_LINK
    assert x.lib.lldd_ext_unlink(d, comm_d) == 0
    assert query(x, d, comm_d)[0] == S.LLM_NOT_YET_LINK
    assert x.pull(d, x.by_id(1, src_id), dst_id) == S.LLM_NOT_YET_LINK
    assert x.lib.lldd_ext_switch_role(d, xs.MIX, array, count) == 0
    del keep
    assert x.lib.lldd_ext_unlink(p, comm_p) == 0
    status, again = link(x, p, unique("next"), {1: 0, 2: 1})
    assert (status, again) == (0, 2)                                      # ids count on per engine
    assert x.lib.lldd_ext_unlink(p, again) == 0


def test_links_are_unusable_until_every_member_joined_and_dropped_on_failure(x: Any) -> None:
    opts = v2(**{"llm.LinkTotalTime": "2"})
    a, b = x.engine(1, opts), x.engine(2, opts)
    src = [np.ones((2, 16), np.uint8) for _ in range(2)]
    _, src_id = x.register(a, src)
    dst = [np.zeros((2, 16), np.uint8) for _ in range(2)]
    _, dst_id = x.register(b, dst)
    name = unique("three")
    members = {1: 0, 2: 1, 3: 2}                                          # member 3 never comes
    comm_a, comm_b = link(x, a, name, members)[1], link(x, b, name, members)[1]
    deadline = time.monotonic() + 10
    while x.pull(b, x.by_id(1, src_id), dst_id) == S.LLM_NOT_YET_LINK and "must wait" not in x.last_error():
        assert time.monotonic() < deadline, "members 1 and 2 never linked"
        time.sleep(0.02)
    assert "query_register_mem_status" in x.last_error()
    assert query(x, b, comm_b) == (0, PREPARING)
    assert wait_state(x, a, comm_a) == FAILED and wait_state(x, b, comm_b) == FAILED
    assert x.pull(b, x.by_id(1, src_id), dst_id) == S.LLM_NOT_YET_LINK
    assert "is not linked" in x.last_error()
    assert not any(t.any() for t in dst)


def test_a_member_file_of_a_dead_process_does_not_count(x: Any) -> None:
    engine = x.engine(1, v2(**{"llm.LinkTotalTime": "1"}))
    name = unique("ghost")
    status, comm = link(x, engine, name, {1: 0, 2: 1})
    assert status == 0
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    root = Path(os.environ.get("TMPDIR") or "/tmp") / f"lldd-mock-{os.geteuid()}"
    folders = [f for f in root.iterdir() if (f / "1.member").is_file()
               and name.decode() in (f / "1.member").read_text()]
    assert len(folders) == 1
    (folders[0] / "2.member").write_text(f"2 1 {dead.pid} 1 abc\n{name.decode()}\n")
    (folders[0] / "2.ok").write_text("abc\n")
    assert wait_state(x, engine, comm) == FAILED
    assert x.lib.lldd_ext_unlink(engine, comm) == 0
    assert not (folders[0] / "1.member").exists()                        # this member's files are gone
    (folders[0] / "2.member").unlink()
    (folders[0] / "2.ok").unlink()
    folders[0].rmdir()


def test_members_in_another_process(x: Any) -> None:
    name = unique("procs").decode()
    with xs.Peer() as peer:
        assert peer.call("init", cluster_id=3, options=v2()) == 0
        a, b = x.engine(1, v2(role="Prompt")), x.engine(2, v2())
        members = {1: 0, 2: 1, 3: 2}
        comms = [link(x, e, name.encode(), members)[1] for e in (a, b)]
        ids = [1, 2, 3]
        ranks = [0, 1, 2]
        assert peer.call("ext_link", name=name, ids=ids, ranks=ranks) == [0, 1]
        assert wait_state(x, a, comms[0]) == OK and wait_state(x, b, comms[1]) == OK
        deadline = time.monotonic() + 20
        while peer.call("ext_query", comm_id=1) != [0, OK]:
            assert time.monotonic() < deadline
            time.sleep(0.05)


def test_finalize_stops_a_preparing_communicator(x: Any) -> None:
    engine = x.engine(1, v2())
    status, comm = link(x, engine, unique("final"), {1: 0, 2: 1})
    assert status == 0
    x.lib.lldd_finalize(engine)
    assert x.init(engine, v2()) == 0
    assert query(x, engine, comm)[0] == S.LLM_NOT_YET_LINK
    assert link(x, engine, unique("fresh"), {1: 0, 2: 1})[1] == 1          # ids restart with the engine


# ---- remap_registered_memory -------------------------------------------------------------------


def remap(x: Any, engine: Any, pairs: list[tuple[int, int]]) -> int:
    return int(x.lib.lldd_ext_remap_registered_memory(engine, x.u64(a for a, _ in pairs), x.u64(s for _, s in pairs),
                                                      len(pairs)))


def test_remap_registered_memory_rules(x: Any) -> None:
    p, port = x.listening(1, v2(pool=True, role="Prompt"))
    mem = [np.zeros((4, 16), np.uint8)]
    x.register(p, mem)
    status, _, addrs = x.allocate(p, 1, [4, 16])
    base = mem[0].ctypes.data
    assert remap(x, p, []) == S.LLM_PARAM_INVALID
    assert remap(x, p, [(0, 4)]) == S.LLM_PARAM_INVALID
    assert remap(x, p, [(base, 0)]) == S.LLM_PARAM_INVALID
    assert remap(x, p, [(base, 64)]) == S.LLM_NOT_YET_LINK
    d = x.engine(2, v2())
    assert x.link(d, [(1, port)]) == (0, [0])
    assert remap(x, p, [(base, 64), (base + 16, 16)]) == 0
    assert remap(x, p, [(base, 65)]) == S.LLM_FAILED
    assert remap(x, p, [(addrs[0], 16)]) == S.LLM_FAILED                  # pool memory is not registered memory
    assert x.lib.lldd_ext_remap_registered_memory(p, x.ffi.NULL, x.ffi.NULL, 1) == S.LLM_PARAM_INVALID
    v1 = x.engine(3, xs.v1_options())
    assert remap(x, v1, [(base, 64)]) == S.LLM_FEATURE_NOT_ENABLED
