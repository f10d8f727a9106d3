"""Call traces (``LLM_DATADIST_FFI_TRACE``) and their tools (``llm_datadist_ffi.testing.trace``,
``python -m llm_datadist_ffi trace``).

A Prompt and a Decoder process run with the variable set; the merged trace must load as
a Chrome trace with one track per process, each process's calls in order, the exact
bytes of each pull (from the cache layout: 512-byte blocks of fp16 [8, 256] tensors, two
tensors per cache) and the failed pull with its status code.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Dict, Iterator, List

import pytest

import vendor_support as vs
from lint_support import STRICT_ENV
from llm_datadist_ffi._core import _trace
from llm_datadist_ffi.testing import trace

pytestmark = pytest.mark.mock_only(reason="the bytes of a call come from the mock's record")

PROMPT, DECODER = 1, 2
BLOCK = 256 * 2                      # bytes of one block of one tensor
DESC = "CacheDesc(2, [8, 256], DataType.DT_FLOAT16, Placement.DEVICE)"
PARAM_INVALID = 0x5010B005


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "llm_datadist_ffi", "trace", *args], capture_output=True,
                          text=True, timeout=120)


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dict[str, Any]]:
    """One traced two-process run: link, two good pulls, one refused pull, finalize."""
    directory = tmp_path_factory.mktemp("trace")
    env = {STRICT_ENV: "", _trace.TRACE_ENV: str(directory)}
    port = vs.free_port()
    with vs.Peer(env) as prompt, vs.Peer(env) as decoder:
        prompt.run(f"dist = LLMDataDist(LLMRole.PROMPT, {PROMPT})\n"
                   f"dist.init(support.v2_options({port}, direct=False))\ncm = dist.cache_manager\n"
                   "k, v = fill(1, (8, 512)), fill(2, (8, 512))\n"
                   f"cache = cm.register_blocks_cache({DESC}, [k.ctypes.data, v.ctypes.data], "
                   f"BlocksCacheKey({PROMPT}, 0))")
        decoder.run(f"dist = LLMDataDist(LLMRole.DECODER, {DECODER})\n"
                    "dist.init(support.v2_options(direct=False))\ncm = dist.cache_manager\n"
                    "k, v = fill(-1, (8, 512)), fill(-1, (8, 512))\n"
                    f"cache = cm.register_blocks_cache({DESC}, [k.ctypes.data, v.ctypes.data])")
        assert decoder.run(value=f"int(dist.link_clusters([support.cluster_info({PROMPT}, {port})], 5000)[0])") == 0
        decoder.run(f"cm.pull_blocks(BlocksCacheKey({PROMPT}, 0), cache, [0, 1, 2], [4, 5, 6])")
        decoder.run(f"cm.pull_blocks(BlocksCacheKey({PROMPT}, 0), cache, [3], [7], src_layer_range=range(0, 1), "
                    "dst_layer_range=range(0, 1), tensor_num_per_layer=1)")
        refused = decoder.error(f"cm.pull_blocks(BlocksCacheKey({PROMPT}, 0), cache, [99], [0])")
        assert refused.status == PARAM_INVALID
        addresses = {prompt.run(value=f"{name}.ctypes.data") for name in ("k", "v")} | \
                    {decoder.run(value=f"{name}.ctypes.data") for name in ("k", "v")}
        pids = {"prompt": prompt.run(value="__import__('os').getpid()"),
                "decoder": decoder.run(value="__import__('os').getpid()")}
        decoder.run("dist.finalize()")
        prompt.run("dist.finalize()")
    yield {"directory": directory, "pids": pids, "addresses": addresses}


@pytest.fixture(scope="module")
def merged(session: Dict[str, Any]) -> Dict[str, Any]:
    out = session["directory"].parent / "merged-two-process.json"
    done = cli("merge", str(session["directory"]), "-o", str(out))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(out)
    data: Dict[str, Any] = json.loads(out.read_text())
    return data


def calls_of(data: Dict[str, Any], pid: int) -> List[Dict[str, Any]]:
    return [e for e in data["traceEvents"] if e["ph"] == "X" and e["pid"] == pid]


def test_a_two_process_run_merges_into_one_trace_with_one_named_track_per_process(
        session: Dict[str, Any], merged: Dict[str, Any]) -> None:
    pids = session["pids"]
    assert {e["pid"] for e in merged["traceEvents"] if e["ph"] == "X"} == {pids["prompt"], pids["decoder"]}
    names = {e["pid"]: e["args"]["name"] for e in merged["traceEvents"]
             if e["ph"] == "M" and e["name"] == "process_name"}
    assert names == {pids["prompt"]: f"PROMPT cluster 1 (pid {pids['prompt']})",
                     pids["decoder"]: f"DECODER cluster 2 (pid {pids['decoder']})"}
    assert all(e["cat"] == "llm_datadist_ffi" and e["dur"] >= 0 for e in merged["traceEvents"] if e["ph"] == "X")


def test_each_process_shows_its_calls_in_order(session: Dict[str, Any], merged: Dict[str, Any]) -> None:
    pids = session["pids"]
    assert [e["name"] for e in calls_of(merged, pids["prompt"])] == [
        "LLMDataDist.__init__", "LLMDataDist.init", "CacheManager.register_blocks_cache", "LLMDataDist.finalize"]
    assert [e["name"] for e in calls_of(merged, pids["decoder"])] == [
        "LLMDataDist.__init__", "LLMDataDist.init", "CacheManager.register_blocks_cache",
        "LLMDataDist.link_clusters", "CacheManager.pull_blocks", "CacheManager.pull_blocks",
        "CacheManager.pull_blocks", "LLMDataDist.finalize"]
    starts = [e["ts"] for e in calls_of(merged, pids["decoder"])]
    assert starts == sorted(starts)


def test_the_pulls_carry_their_shape_exact_bytes_and_status(session: Dict[str, Any],
                                                            merged: Dict[str, Any]) -> None:
    pulls = [e["args"] for e in calls_of(merged, session["pids"]["decoder"]) if e["name"].endswith("pull_blocks")]
    key = {"type": "BlocksCacheKey", "cluster_id": PROMPT, "model_id": 0}
    assert pulls[0]["src_cache_key"] == key
    assert (pulls[0]["src_blocks"], pulls[0]["dst_blocks"]) == ({"count": 3}, {"count": 3})
    assert pulls[0]["bytes"] == 3 * BLOCK * 2                   # three blocks of both tensors
    assert (pulls[0]["status"], pulls[0]["status_code"]) == ("LLM_SUCCESS", 0)
    assert pulls[1]["src_layer_range"] == {"range": [0, 1]} and pulls[1]["tensor_num_per_layer"] == 1
    assert pulls[1]["bytes"] == BLOCK                           # one block of layer 0's one tensor
    assert (pulls[2]["status"], pulls[2]["status_code"], pulls[2]["bytes"]) == ("LLM_PARAM_INVALID", PARAM_INVALID, 0)


def test_a_link_call_carries_the_status_of_each_cluster(session: Dict[str, Any], merged: Dict[str, Any]) -> None:
    (link,) = [e["args"] for e in calls_of(merged, session["pids"]["decoder"]) if e["name"].endswith("link_clusters")]
    assert link["clusters"] == [{"type": "LLMClusterInfo", "remote_cluster_id": PROMPT}]
    assert link["cluster_statuses"] == ["LLM_SUCCESS"] and link["status"] == "LLM_SUCCESS"


def test_no_memory_address_gets_into_the_trace(session: Dict[str, Any], merged: Dict[str, Any]) -> None:
    numbers: List[int] = []

    def collect(value: Any) -> None:
        if isinstance(value, dict):
            for item in value.values():
                collect(item)
        elif isinstance(value, list):
            for item in value:
                collect(item)
        elif isinstance(value, int):
            numbers.append(value)

    for event in merged["traceEvents"]:
        collect(event.get("args"))
    assert not session["addresses"] & set(numbers)
    registers = [e["args"] for e in merged["traceEvents"] if e["name"].endswith("register_blocks_cache")]
    assert {json.dumps(r["addrs"]) for r in registers} == {'{"count": 2}'}


def test_the_summary_prints_calls_bytes_rate_and_errors_per_method(session: Dict[str, Any],
                                                                   merged: Dict[str, Any]) -> None:
    done = cli("summary", str(session["directory"]))
    assert done.returncode == 0, done.stderr
    rows = {line.split()[0]: line.split() for line in done.stdout.splitlines()[1:]}
    pull_seconds = sum(e["dur"] for e in merged["traceEvents"] if e["name"] == "CacheManager.pull_blocks") / 1e6
    assert rows["CacheManager.pull_blocks"] == [
        "CacheManager.pull_blocks", "3", str(4 * BLOCK * 2 - BLOCK), f"{(7 * BLOCK) / pull_seconds / 1e9:.3f}",
        "LLM_PARAM_INVALID", "(0x5010b005)", "x1"]
    assert rows["LLMDataDist.__init__"][1:] == ["2", "0", "-", "-"]
    assert rows["CacheManager.register_blocks_cache"][1:] == ["2", "0", "-", "-"]
    assert done.stdout.splitlines()[0].split() == ["method", "calls", "bytes", "GB/s", "errors"]
    assert trace.summary(session["directory"].parent / "merged-two-process.json") == done.stdout.rstrip("\n")


def test_a_killed_process_leaves_the_calls_it_finished(tmp_path: Path) -> None:
    directory = tmp_path / "trace"
    with vs.Peer({_trace.TRACE_ENV: str(directory)}) as peer:
        peer.run("dist = LLMDataDist(LLMRole.DECODER, 5)\ndist.init(support.v2_options())")
        peer.process.send_signal(signal.SIGKILL)
        peer.process.wait()
        assert peer.process.stdin is not None
        peer.process.stdin.close()
    (path,) = directory.iterdir()
    with path.open("a") as cut:
        cut.write('{"name":"LLMDataDist.finalize","ph":"X","ts":1')     # a write the kill cut short
    events = trace.merge(directory)["traceEvents"]
    assert [e["name"] for e in events if e["ph"] == "X"] == ["LLMDataDist.__init__", "LLMDataDist.init"]
    assert path.read_text().startswith("[\n")                  # Chrome's array form, open at the end


def test_the_native_api_is_traced_with_its_own_names(tmp_path: Path) -> None:
    directory = tmp_path / "trace"
    program = textwrap.dedent("""
        import numpy as np
        from llm_datadist_ffi import LLMException, native
        from llm_datadist_ffi.native import Cache, CacheIndex, ClusterInfo, IpInfo, LlmDataDist, LlmRole
        import socket
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        prompt = LlmDataDist(1, LlmRole.PROMPT)
        prompt.initialize({"llm.DeviceId": "0", "llm.ListenIpInfo": f"127.0.0.1:{port}"})
        decoder = LlmDataDist(2, LlmRole.DECODER)
        decoder.initialize({"llm.DeviceId": "1"})
        src = [np.full((4, 100), 7, np.uint8) for _ in range(2)]
        dst = [np.zeros((4, 100), np.uint8) for _ in range(2)]
        desc = native.CacheDesc(2, native.DataType.DT_UINT8, [4, 100])
        sid = prompt.register_kv_cache(desc, [a.ctypes.data for a in src])
        did = decoder.register_kv_cache(desc, [a.ctypes.data for a in dst])
        decoder.link_llm_clusters([ClusterInfo(1, 0, [IpInfo("127.0.0.1", 0)], [IpInfo("127.0.0.1", port)])])
        decoder.pull_kv_blocks(CacheIndex(1, sid), Cache(did), [0, 1], [2, 3])
        try:
            decoder.pull_kv_blocks(CacheIndex(1, 99), Cache(did), [0], [0])
        except LLMException:
            pass
        decoder.close()
        prompt.close()
    """)
    done = subprocess.run([sys.executable, "-c", program], env={**os.environ, _trace.TRACE_ENV: str(directory)},
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    events = [e for e in trace.merge(directory)["traceEvents"] if e["ph"] == "X"]
    assert [e["name"] for e in events] == [
        "LlmDataDist.__init__", "LlmDataDist.initialize", "LlmDataDist.__init__", "LlmDataDist.initialize",
        "LlmDataDist.register_kv_cache", "LlmDataDist.register_kv_cache", "LlmDataDist.link_llm_clusters",
        "LlmDataDist.pull_kv_blocks", "LlmDataDist.pull_kv_blocks", "LlmDataDist.close", "LlmDataDist.close"]
    good, bad = (e["args"] for e in events if e["name"] == "LlmDataDist.pull_kv_blocks")
    assert good["src_cache_index"] == {"type": "CacheIndex", "cluster_id": 1, "cache_id": 1, "batch_index": 0}
    assert good["ext_param"] is None and good["bytes"] == 2 * 100 * 2
    assert (bad["status"], bad["status_code"], bad["bytes"]) == ("LLM_KV_CACHE_NOT_EXIST", 0x5010B002, 0)


def test_without_the_variable_the_classes_are_left_untouched() -> None:
    program = textwrap.dedent("""
        import sys
        from llm_datadist_ffi import native
        from llm_datadist_ffi._vendor.v1 import cache_manager as v1_cache_manager
        from llm_datadist_ffi._vendor.v2 import llm_datadist, cache_manager, llm_types
        classes = [native.LlmDataDist, llm_datadist.LLMDataDist, cache_manager.CacheManager,
                   v1_cache_manager.KvCacheManager, llm_types.CacheTask]
        wrapped = sorted({f"{c.__name__}.{n}" for c in classes for n, m in vars(c).items()
                          if callable(m) and getattr(getattr(m, "__code__", None), "co_filename", "").endswith("_trace.py")})
        print(" ".join(wrapped))
    """)
    env = {k: v for k, v in os.environ.items() if k != _trace.TRACE_ENV}
    off = subprocess.run([sys.executable, "-c", program], env=env, capture_output=True, text=True, timeout=120)
    on = subprocess.run([sys.executable, "-c", program], env={**env, _trace.TRACE_ENV: "/nonexistent/never-written"},
                        capture_output=True, text=True, timeout=120)
    assert off.returncode == 0 and on.returncode == 0, off.stderr + on.stderr
    assert off.stdout.split() == []
    wrapped = set(on.stdout.split())
    assert {"LlmDataDist.__init__", "LlmDataDist.pull_kv_blocks", "LlmDataDist.close", "LLMDataDist.__init__",
            "LLMDataDist.link_clusters", "CacheManager.pull_blocks", "CacheManager.transfer_cache_async",
            "KvCacheManager.pull_cache", "CacheTask.synchronize"} <= wrapped
    # constructors of what the engine hands out are not calls the user makes; nor are helpers
    assert not {"CacheManager.__init__", "CacheTask.__init__", "LlmDataDist._held", "LLMDataDist.cache_manager"} & wrapped


def test_attach_to_report_adds_the_merged_trace_and_the_summary_to_a_failed_report(
        session: Dict[str, Any]) -> None:
    item = SimpleNamespace(nodeid="tests/test_connector.py::test_pull")
    report = SimpleNamespace(failed=True, when="call", sections=[], user_properties=[])
    path = trace.attach_to_report(item, report, session["directory"])
    assert path == session["directory"] / "merged.json"
    assert [title for title, _ in report.sections] == ["llm_datadist_ffi trace (call)",
                                                       "llm_datadist_ffi trace summary (call)"]
    assert str(path) in report.sections[0][1] and "tests/test_connector.py::test_pull" in report.sections[0][1]
    assert report.sections[1][1] == trace.summary(session["directory"])
    assert report.user_properties == [("llm_datadist_ffi_trace", str(path))]
    assert json.loads(path.read_text())["traceEvents"]


def test_attach_to_report_leaves_a_passing_report_and_an_empty_directory_alone(tmp_path: Path,
                                                                              session: Dict[str, Any]) -> None:
    passed = SimpleNamespace(failed=False, when="call", sections=[], user_properties=[])
    assert trace.attach_to_report(SimpleNamespace(nodeid="t"), passed, session["directory"]) is None
    failed = SimpleNamespace(failed=True, when="call", sections=[], user_properties=[])
    assert trace.attach_to_report(SimpleNamespace(nodeid="t"), failed, tmp_path) is None
    assert passed.sections == failed.sections == []


def test_merge_keeps_two_processes_that_had_the_same_pid_apart(tmp_path: Path) -> None:
    for start in (100, 200):
        (tmp_path / f"trace-42-{start}.json").write_text(
            "[\n" + json.dumps({"ph": "X", "name": "LlmDataDist.finalize", "pid": 42, "tid": 1, "ts": start,
                                "dur": 1.0, "args": {}}) + ",\n")
    events = trace.merge(tmp_path)["traceEvents"]
    assert len({e["pid"] for e in events}) == 2 and [e["ts"] for e in events] == [100, 200]


def test_the_trace_command_reports_a_missing_directory() -> None:
    done = cli("merge", "/nonexistent/trace-dir")
    assert done.returncode == 1
    assert done.stderr.strip() == "python -m llm_datadist_ffi trace merge: /nonexistent/trace-dir is not a directory"


def test_a_finalizer_that_runs_while_a_call_is_written_neither_deadlocks_nor_gets_its_own_event(
        tmp_path: Path) -> None:
    # The garbage collector may run a cache's __del__ (a traced call) at any allocation,
    # also while the trace of the call that just ended is encoded; that once deadlocked.
    # Here the "finalizer" runs exactly there, every time.
    directory = tmp_path / "trace"
    program = textwrap.dedent("""
        from llm_datadist_ffi import native
        from llm_datadist_ffi._core import _trace
        encode = _trace._Recorder._line
        def line(event):
            if event.get("name") == "LlmDataDist.__init__" and event["args"]["cluster_id"] == 5:
                native.LlmDataDist(7, 1).close()         # what a finalizer would do at this point
            return encode(event)
        _trace._Recorder._line = staticmethod(line)
        native.LlmDataDist(5, 1).close()
    """)
    done = subprocess.run([sys.executable, "-c", program], env={**os.environ, _trace.TRACE_ENV: str(directory)},
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    events = [e for e in trace.merge(directory)["traceEvents"] if e["ph"] == "X"]
    assert [(e["name"], e["args"].get("cluster_id")) for e in events] == [("LlmDataDist.__init__", 5),
                                                                        ("LlmDataDist.close", None)]


def test_each_test_gets_a_trace_directory_of_its_own_under_the_root(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    nodeid = "tests/test_x.py::test_pull[v2-2]"
    assert trace.directory_for(nodeid, tmp_path) == tmp_path / "tests_test_x.py_test_pull_v2-2"
    monkeypatch.setenv(_trace.TRACE_ENV, str(tmp_path / "root"))
    assert trace.directory_for(nodeid) == tmp_path / "root" / "tests_test_x.py_test_pull_v2-2"
    monkeypatch.delenv(_trace.TRACE_ENV)
    assert trace.directory_for(nodeid) is None


def test_option_maps_are_traced_without_their_secrets() -> None:
    options = {"llm.ListenIpInfo": "127.0.0.1:26000", "llm_datadist_ffi.mock.LinkSecret": "hunter2"}
    assert _trace.describe(options, "options") == {"llm.ListenIpInfo": "127.0.0.1:26000",
                                                   "llm_datadist_ffi.mock.LinkSecret": "(secret)"}


def test_a_trace_that_cannot_be_written_fails_no_call_and_says_so_once(tmp_path: Path) -> None:
    blocked = tmp_path / "not-a-directory"
    blocked.write_text("")
    program = textwrap.dedent("""
        import logging
        logging.basicConfig(level=logging.WARNING)
        from llm_datadist_ffi import native
        for cluster_id in (5, 6):
            native.LlmDataDist(cluster_id, 1).close()
        print("calls done")
    """)
    done = subprocess.run([sys.executable, "-c", program], env={**os.environ, _trace.TRACE_ENV: str(blocked)},
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout == "calls done\n", done.stderr
    warnings = [line for line in done.stderr.splitlines() if "cannot write the call trace" in line]
    assert len(warnings) == 1 and str(blocked) in warnings[0]
