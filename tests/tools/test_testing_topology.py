"""The topology of engine processes and the fault table of llm_datadist_ffi.testing."""
from __future__ import annotations

import importlib
import os
import re
import select
import time
from pathlib import Path

import pytest

import topology_support as ts
from llm_datadist_ffi import LLMException, LLMStatusCode, mock_control
from llm_datadist_ffi.testing.faults import FAULT_POINTS, c_functions
from llm_datadist_ffi.testing.topology import (API_NATIVE, DECODER, PROMPT, EngineSpec, RemoteError, RemotePeer,
                                               RemoteTraceback, Topology, TopologyError)

pytestmark = pytest.mark.mock_only(reason="engine processes pull through the mock; faults are the mock's")


def expected_pull(seed: int, src: list, dst: list) -> bytes:
    result = ts.content(-1)
    source = ts.content(seed)
    for s, d in zip(src, dst):
        result[d] = source[s]
    return result.tobytes()


def ended(pid: int) -> bool:
    """The process ``pid`` no longer runs (gone, or a zombie nobody reaped yet)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return True
    return state in ("Z", "X")


def wait_ended(pid: int, seconds: float = 5.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if ended(pid):
            return True
        time.sleep(0.05)
    return ended(pid)


# --- the topology ----------------------------------------------------------------------

def test_a_topology_numbers_prompts_then_decoders_and_tells_each_its_peers(topology) -> None:
    topo = topology(prompts=2, decoders=1)
    assert [p.call(ts.identity)[:3] for p in topo] == [["prompt", 1, "v2"], ["prompt", 2, "v2"], ["decoder", 3, "v2"]]
    assert [p.call(ts.identity)[4] for p in topo] == [[2, 3], [1, 3], [1, 2]]
    pids = {p.call(ts.identity)[3] for p in topo}
    assert pids == {p.pid for p in topo} and os.getpid() not in pids


@pytest.mark.parametrize("api", ["v2", API_NATIVE])
def test_a_decoder_pulls_a_prompts_blocks_in_another_process(topology, api) -> None:
    topo = topology(prompts=1, decoders=1, api=api)
    prompt, decoder = topo.prompts[0], topo.decoders[0]
    src_id = prompt.call(ts.register, 5)
    dst_id = decoder.call(ts.register, -1)
    decoder.call(ts.link, prompt.cluster_id)
    got = decoder.call(ts.pull_blocks, prompt.cluster_id, src_id, dst_id, [1, 6, 2], [0, 3, 7])
    assert got == expected_pull(5, [1, 6, 2], [0, 3, 7])


def test_calls_pass_arguments_and_keywords_and_return_values(topology) -> None:
    topo = topology(prompts=1, decoders=0)
    assert topo.prompts[0].call(ts.add, 2, 3, times=4) == 20


def test_an_exception_in_a_process_is_raised_with_its_type_message_and_the_remote_traceback(topology) -> None:
    topo = topology(prompts=1, decoders=0)
    with pytest.raises(ValueError, match="^wrong block 7$") as info:
        topo.prompts[0].call(ts.raise_value_error, "wrong block 7")
    assert isinstance(info.value.__cause__, RemoteTraceback)
    assert "raise_value_error" in str(info.value.__cause__)


def test_an_exception_that_cannot_be_pickled_arrives_as_a_remote_error_with_its_type_and_message(topology) -> None:
    topo = topology(prompts=1, decoders=0)
    with pytest.raises(RemoteError) as info:
        topo.prompts[0].call(ts.raise_unpicklable, "holds a lock")
    assert (info.value.type_name, info.value.message) == ("topology_support.Unpicklable", "holds a lock")


def test_a_library_error_in_a_process_keeps_its_status_code(topology) -> None:
    topo = topology(prompts=1, decoders=1)
    decoder = topo.decoders[0]
    decoder.call(ts.register, -1)
    with pytest.raises(LLMException) as info:       # cluster 1 is known but not linked
        decoder.call(ts.pull_blocks, 1, 0, 0, [0], [0])
    assert info.value.status_code == LLMStatusCode.LLM_NOT_YET_LINK


def test_a_local_function_is_refused_before_it_is_sent(topology) -> None:
    topo = topology(prompts=1, decoders=0)

    def nested() -> None:
        pass

    with pytest.raises(TypeError, match="module-level function"):
        topo.prompts[0].call(nested)


def test_an_engine_that_fails_to_start_fails_the_topology_with_its_own_error() -> None:
    with pytest.raises(LLMException, match="device 99 does not exist") as info:
        Topology.start(1, 0, options={"ge.exec.deviceId": "99"})
    assert info.value.status_code == LLMStatusCode.LLM_FAILED


def test_a_process_that_does_not_report_ready_in_time_fails_with_its_stderr() -> None:
    slow = ["sh", "-c", 'echo "still importing" >&2; exec sleep 30', "sh"]
    started = time.monotonic()
    with pytest.raises(TopologyError, match="(?s)startup of prompt0.*still importing"):
        Topology.start(specs=[EngineSpec(PROMPT, 1, launcher=slow)], startup_timeout=1.0)
    assert time.monotonic() - started < 10


def test_close_ends_a_hung_process_and_what_it_started(topology) -> None:
    topo = Topology.start(1, 0, grace=0.5)
    prompt = topo.prompts[0]
    prompt.start(ts.sleep_forever_with_a_child)
    deadline = time.monotonic() + 10
    while "PIDS" not in prompt.stderr() and time.monotonic() < deadline:
        time.sleep(0.05)
    pid, grandchild = map(int, re.search(r"PIDS (\d+) (\d+)", prompt.stderr()).groups())
    topo.close()
    assert ended(pid) and wait_ended(grandchild)


def test_close_kills_a_process_that_ignores_sigterm() -> None:
    topo = Topology.start(1, 0, grace=0.3)
    prompt = topo.prompts[0]
    prompt.start(ts.ignore_sigterm_and_hang)
    deadline = time.monotonic() + 10
    while "IGNORING" not in prompt.stderr() and time.monotonic() < deadline:
        time.sleep(0.05)
    started = time.monotonic()
    topo.close()
    assert prompt.process.returncode == -9 and time.monotonic() - started < 5


def test_a_call_that_outlives_its_timeout_kills_the_process() -> None:
    with Topology.start(1, 0, call_timeout=0.5) as topo:
        with pytest.raises(TopologyError, match="no answer within the time allowed"):
            topo.prompts[0].call(ts.ignore_sigterm_and_hang)
        assert topo.prompts[0].process.returncode == -9


def test_remote_peers_are_known_to_every_process_and_force_the_socket_path() -> None:
    with Topology.start(1, 0, remote=[RemotePeer("10.9.8.7:26000", 42, DECODER)]) as topo:
        assert topo.prompts[0].call(ts.identity)[4] == [42]
        assert topo.prompts[0].call(os.getenv, "LLDD_MOCK_NO_PROCESS_VM") == "1"


def test_loopback_topologies_keep_the_process_vm_path() -> None:
    with Topology.start(1, 0) as topo:
        assert topo.prompts[0].call(os.getenv, "LLDD_MOCK_NO_PROCESS_VM") is None


def test_two_engines_with_one_cluster_id_are_refused() -> None:
    with pytest.raises(ValueError, match="cluster ids must differ"):
        Topology.start(1, 0, remote=[RemotePeer("10.0.0.2:26000", 1)])


# --- faults ----------------------------------------------------------------------------

def test_every_function_of_the_fault_table_is_one_the_mock_can_fail() -> None:
    for function in sorted({p.function for p in FAULT_POINTS}):
        mock_control.inject_fault(function, LLMStatusCode.LLM_FAILED, count=0)   # count 0 arms nothing
    with pytest.raises(LLMException):
        mock_control.inject_fault("lldd_no_such_function", LLMStatusCode.LLM_FAILED, count=0)


def test_every_method_of_the_fault_table_exists_on_its_class() -> None:
    for point in FAULT_POINTS:
        module, _, name = point.owner.rpartition(".")
        assert callable(getattr(getattr(importlib.import_module(module), name), point.method)), point


@pytest.mark.parametrize(("name", "functions"), [
    ("pull_blocks", ("lldd_ext_pull",)),
    ("pull_kv_blocks", ("lldd_pull_kv_blocks",)),
    ("link_clusters", ("lldd_link_clusters",)),
    ("LlmDataDist.allocate_cache", ("lldd_allocate_cache",)),
    ("allocate_cache", ("lldd_ext_allocate_cache", "lldd_allocate_cache")),
    ("transfer_cache_async", ("lldd_ext_push_layer", "lldd_ext_transfer_layer")),
    ("aclrtMalloc", ("aclrtMalloc",)),
])
def test_a_fault_is_named_by_method_or_by_c_function(name, functions) -> None:
    assert c_functions(name) == functions


def test_an_unknown_fault_name_is_refused() -> None:
    with pytest.raises(ValueError, match="'pull_everything' is neither"):
        c_functions("pull_everything")


@pytest.mark.parametrize("api", ["v2", API_NATIVE])
def test_a_fault_by_method_name_fails_that_method_in_the_process(topology, faults, api) -> None:
    topo = topology(prompts=1, decoders=1, api=api)
    prompt, decoder = topo.prompts[0], topo.decoders[0]
    src_id, dst_id = prompt.call(ts.register, 5), decoder.call(ts.register, -1)
    decoder.call(ts.link, prompt.cluster_id)
    faults.fail("pull_blocks" if api == "v2" else "pull_kv_blocks", LLMStatusCode.LLM_TIMEOUT, on=decoder)
    with pytest.raises(LLMException) as info:
        decoder.call(ts.pull_blocks, prompt.cluster_id, src_id, dst_id, [1], [2])
    assert info.value.status_code == LLMStatusCode.LLM_TIMEOUT
    # one call failed; the next goes through
    assert decoder.call(ts.pull_blocks, prompt.cluster_id, src_id, dst_id, [1], [2]) == expected_pull(5, [1], [2])


def test_a_fault_on_link_clusters_fails_the_link(topology, faults) -> None:
    topo = topology(prompts=1, decoders=1)
    faults.fail("link_clusters", LLMStatusCode.LLM_LINK_FAILED, on=topo.decoders[0])
    with pytest.raises(LLMException) as info:
        topo.decoders[0].call(ts.link, 1)
    assert info.value.status_code == LLMStatusCode.LLM_LINK_FAILED


def test_a_delayed_peer_makes_a_pull_time_out(topology, faults) -> None:
    topo = topology(prompts=1, decoders=1, options={"llm.SyncKvCacheWaitTime": "300"})
    prompt, decoder = topo.prompts[0], topo.decoders[0]
    src_id, dst_id = prompt.call(ts.register, 5), decoder.call(ts.register, -1)
    decoder.call(ts.link, prompt.cluster_id)
    faults.delay(prompt, 1000)
    with pytest.raises(LLMException) as info:
        decoder.call(ts.pull_blocks, prompt.cluster_id, src_id, dst_id, [1], [2])
    assert info.value.status_code == LLMStatusCode.LLM_TIMEOUT


@pytest.mark.parametrize("api", ["v2", API_NATIVE])
def test_a_dropped_link_fails_the_next_pull_as_a_vanished_peer(topology, faults, api) -> None:
    topo = topology(prompts=1, decoders=1, api=api)
    prompt, decoder = topo.prompts[0], topo.decoders[0]
    src_id, dst_id = prompt.call(ts.register, 5), decoder.call(ts.register, -1)
    decoder.call(ts.link, prompt.cluster_id)
    faults.drop_links(prompt)
    with pytest.raises(LLMException, match=r"the peer's side of the link is gone \(PR-31\)") as info:
        decoder.call(ts.pull_blocks, prompt.cluster_id, src_id, dst_id, [1], [2])
    assert info.value.status_code == LLMStatusCode.LLM_TIMEOUT


def test_the_environment_of_a_topology_reaches_its_processes() -> None:
    with Topology.start(1, 1, env={"LLDD_TOPOLOGY_TEST": "seen"}) as topo:
        assert [p.call(os.getenv, "LLDD_TOPOLOGY_TEST") for p in topo] == ["seen", "seen"]


def test_a_stopped_peer_answers_again_once_resumed(topology, faults) -> None:
    topo = topology(prompts=1, decoders=0)
    prompt = topo.prompts[0]
    faults.stop(prompt)
    pending = prompt.start(ts.add, 1, 1)
    time.sleep(0.3)
    assert select.select([prompt.process.stdout], [], [], 0)[0] == []     # frozen: no answer
    faults.resume(prompt)
    assert pending.result(timeout=10) == 2


def test_faults_are_cleared_after_the_test_in_every_process_they_touched(topology) -> None:
    from llm_datadist_ffi.testing.faults import Faults
    topo = topology(prompts=1, decoders=1)
    prompt, decoder = topo.prompts[0], topo.decoders[0]
    src_id, dst_id = prompt.call(ts.register, 5), decoder.call(ts.register, -1)
    decoder.call(ts.link, prompt.cluster_id)
    injected = Faults()
    injected.fail("pull_blocks", LLMStatusCode.LLM_TIMEOUT, count=5, on=decoder)
    injected.clear()
    assert decoder.call(ts.pull_blocks, prompt.cluster_id, src_id, dst_id, [3], [4]) == expected_pull(5, [3], [4])
