"""``python -m llm_datadist_ffi``: a user's mistake is a message and an exit status,
never a traceback; sizes are checked against memory before anything is allocated;
Ctrl-C stops a command at once; bench's baseline is measured with each row.

Each command runs as a fresh interpreter outside the source tree.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any, List

import pytest

from llm_datadist_ffi import _bench, _cli, _demo

pytestmark = pytest.mark.mock_only(reason="demo and bench run the mock in several processes")


def run(*args: str, timeout: float = 120, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "llm_datadist_ffi", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=tempfile.gettempdir(), env={**os.environ, **env})


# ---- arguments ----------------------------------------------------------------------------

@pytest.mark.parametrize("args, message", [
    ("bench --blocks 0", "argument --blocks: 0 is out of range: must be in [1, 2147483648]"),
    ("bench --blocks -3", "argument --blocks: -3 is out of range: must be in [1, 2147483648]"),
    ("bench --block-bytes 0", "argument --block-bytes: 0 is out of range: must be in [1, 2147483648]"),
    ("bench --repeat 0", "argument --repeat: 0 is out of range: must be in [1, 1000000]"),
    ("bench --tensors 3", "argument --tensors: must be even (K and V of each layer)"),
    ("bench --blocks many", "argument --blocks: 'many' is not an integer"),
    ("demo --blocks 0", "argument --blocks: 0 is out of range: must be in [4, 2147483648]"),
    ("demo --blocks 2", "argument --blocks: 2 is out of range: must be in [4, 2147483648]"),
    ("demo --repeat 0", "argument --repeat: 0 is out of range: must be in [1, 1000000]"),
    ("demo --layers -1", "argument --layers: -1 is out of range: must be in [1, 4096]"),
    ("demo --head-dim 1.5", "argument --head-dim: '1.5' is not an integer"),
])
def test_an_argument_out_of_range_is_a_usage_error_without_a_traceback(args: str, message: str) -> None:
    result = run(*args.split())
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1].endswith(f"error: {message}")
    assert "Traceback" not in result.stderr
    assert result.stdout == ""


@pytest.mark.parametrize("command", ["demo", "bench"])
def test_help_shows_the_whole_first_paragraph_and_every_range(command: str) -> None:
    result = run(command, "--help")
    assert result.returncode == 0
    text = " ".join(result.stdout.split())
    module = _demo if command == "demo" else _bench
    assert _cli.description(module.__doc__) in text
    assert _cli.description(module.__doc__).endswith(".")
    for fragment in (["model layers (K and V each), 1..4096", "blocks per tensor, >= 4", "(default: 128)"]
                     if command == "demo" else ["K and V tensors, even, 2..4096", "(default: 512)", "--json"]):
        assert fragment in text


# ---- memory -------------------------------------------------------------------------------

@pytest.mark.parametrize("args", ["demo --block-size 100000 --blocks 64", "bench --blocks 2147483648 --tensors 4096"])
def test_sizes_that_cannot_fit_in_memory_are_refused_before_anything_is_allocated(args: str) -> None:
    start = time.monotonic()
    result = run(*args.split(), timeout=60)
    assert time.monotonic() - start < 30
    assert result.returncode == 2
    line, = result.stderr.strip().splitlines()
    assert " needs about " in line and "of memory is available (MemAvailable); choose " in line
    assert result.stdout == ""


def test_check_fits_compares_the_need_with_the_available_bytes() -> None:
    _cli.check_fits(1000, "x", "y", available=1000)
    with pytest.raises(_cli.CommandError, match=r"^x needs about 0\.00 GiB \(1001 bytes\) but only 0\.00 GiB of "
                                                r"memory is available \(MemAvailable\); y$"):
        _cli.check_fits(1001, "x", "y", available=1000)


def test_available_memory_is_memavailable_of_proc_meminfo() -> None:
    with open("/proc/meminfo", encoding="ascii") as meminfo:
        kib = [int(line.split()[1]) for line in meminfo if line.startswith("MemAvailable:")]
    got = _cli.available_memory()
    assert got is not None and abs(got - kib[0] * 1024) < 2**30      # it moves between the two reads


# ---- no backend ---------------------------------------------------------------------------

@pytest.mark.parametrize("command", ["info", "demo", "bench"])
def test_a_backend_that_cannot_load_is_one_line_without_a_traceback(command: str) -> None:
    result = run(command, LLM_DATADIST_FFI_BACKEND="ascend", ASCEND_HOME_PATH="", ASCEND_TOOLKIT_HOME="")
    assert result.returncode == 1
    line, = result.stderr.strip().splitlines()
    assert line.startswith(f"python -m llm_datadist_ffi {command}: no backend can be loaded: ")
    assert "neither ASCEND_HOME_PATH nor ASCEND_TOOLKIT_HOME is set" in line


def test_info_json_reports_a_backend_that_cannot_load() -> None:
    result = run("info", "--json", LLM_DATADIST_FFI_BACKEND="nonsense")
    assert result.returncode == 1
    import llm_datadist_ffi
    assert json.loads(result.stdout) == {
        "version": llm_datadist_ffi.__version__, "backend": None,
        "error": "LLM_DATADIST_FFI_BACKEND='nonsense' is not a backend; valid values are mock, ascend, auto"}


# ---- bench --------------------------------------------------------------------------------

def test_bench_json_has_one_row_per_transfer_with_its_own_baseline() -> None:
    result = run("bench", "--tensors", "4", "--blocks", "8", "--block-bytes", "256", "--repeat", "2", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert (report["tensors"], report["blocks"], report["block_bytes"], report["repeat"]) == (4, 8, 256, 2)
    rows = report["rows"]
    assert [row["transfer"] for row in rows] == [
        f"{call} {where}, {shape}" for where in ("in-process", "cross-process")
        for shape in ("contiguous", "scattered") for call in ("pull_kv_blocks", "push_kv_blocks")]
    assert [row["bytes"] for row in rows] == [8 * 256 * 4, 8 * 256 * 4, 4 * 256 * 4, 4 * 256 * 4] * 2
    for row in rows:
        assert row["seconds"] > 0 and row["memcpy_seconds"] > 0
        assert row["x_memcpy"] == pytest.approx(row["memcpy_seconds"] / row["seconds"])
        assert row["gb_per_s"] == pytest.approx(row["bytes"] / row["seconds"] / 1e9)


@pytest.mark.parametrize(("memory", "cross_process_path"), [("user", "process_vm"), ("library", "shared")])
def test_bench_rows_name_the_path_their_memory_took(memory: str, cross_process_path: str) -> None:
    result = run("bench", "--tensors", "2", "--blocks", "4", "--block-bytes", "256", "--repeat", "1",
                 "--memory", memory, "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["memory"] == memory
    assert [row["path"] for row in report["rows"]] == ["same-process"] * 4 + [cross_process_path] * 4


def test_bench_times_a_memcpy_right_after_each_repetition_of_a_transfer(monkeypatch: pytest.MonkeyPatch) -> None:
    events: List[Any] = []
    monkeypatch.setattr(_bench, "memcpy_seconds", lambda nbytes: events.append(("memcpy", nbytes)) or 0.5)
    clock = iter(range(100))
    monkeypatch.setattr(_bench.time, "perf_counter", lambda: float(next(clock)))
    seconds, baseline = _bench._best_interleaved(lambda: events.append("transfer"), 4096, 3)
    assert events == ["transfer"] + ["transfer", ("memcpy", 4096)] * 3
    assert (seconds, baseline) == (1.0, 0.5)


# ---- Ctrl-C -------------------------------------------------------------------------------

BLOCKED = """
import socket, sys
from llm_datadist_ffi import native
from llm_datadist_ffi._cli import run_interruptibly

silent = socket.socket()                 # accepts connections and never answers
silent.bind(("127.0.0.1", 0))
silent.listen(8)
port = silent.getsockname()[1]

def work():
    with native.LlmDataDist(2, native.LlmRole.DECODER) as engine:
        engine.initialize({"llm.DeviceId": "0"})
        cluster = native.ClusterInfo(1, 0, [native.IpInfo("127.0.0.1", 0)], [native.IpInfo("127.0.0.1", port)])
        print("linking", flush=True)
        engine.link_llm_clusters([cluster], 30000)
    return 0

sys.exit(run_interruptibly("blocked", work))
"""


def _interrupt_after(process: "subprocess.Popen[str]", group: bool) -> float:
    """Send SIGINT (to the process group, as a terminal does, when ``group``) and
    return the seconds until the process ended."""
    start = time.monotonic()
    if group:
        os.killpg(process.pid, signal.SIGINT)
    else:
        process.send_signal(signal.SIGINT)
    process.wait(timeout=20)
    return time.monotonic() - start


def test_ctrl_c_ends_a_native_call_that_would_block_for_its_whole_timeout() -> None:
    with subprocess.Popen([sys.executable, "-c", textwrap.dedent(BLOCKED)], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, cwd=tempfile.gettempdir()) as process:
        assert process.stdout is not None and process.stderr is not None
        assert process.stdout.readline() == "linking\n"
        time.sleep(0.5)                                   # inside the 30 s link call by now
        assert _interrupt_after(process, group=False) < 1.0
        assert process.returncode == 130
        assert process.stderr.read() == "blocked: interrupted\n"


def _children(pid: int) -> List[int]:
    found: List[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(child) for child in (task / "children").read_text().split()]
    return found


def test_ctrl_c_stops_the_demo_and_its_prompt_process_at_once() -> None:
    with subprocess.Popen([sys.executable, "-m", "llm_datadist_ffi", "demo", "--layers", "2", "--blocks", "64",
                           "--repeat", "1000000"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          cwd=tempfile.gettempdir(), start_new_session=True) as process:
        deadline = time.monotonic() + 60
        children: List[int] = []
        while not children and time.monotonic() < deadline:
            time.sleep(0.1)
            children = _children(process.pid)
        assert len(children) == 1
        time.sleep(2.0)                                   # linked and pulling by now
        assert process.poll() is None
        assert _interrupt_after(process, group=True) < 1.0
        assert process.returncode == 130
        _, stderr = process.communicate()
    assert "Traceback" not in stderr
    assert "python -m llm_datadist_ffi demo: interrupted" in stderr.splitlines()
    with pytest.raises(ProcessLookupError):           # the whole group is gone: the Prompt too
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline:
            os.killpg(process.pid, 0)
            time.sleep(0.05)


def test_a_failed_set_up_of_the_demos_prompt_process_is_one_line() -> None:
    # a port that is taken makes the Prompt's init fail
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        result = run("demo", "--serve-prompt", "--port", str(port), "--layers", "1", "--blocks", "4")
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert result.stderr.startswith("python -m llm_datadist_ffi demo: the Prompt's set-up failed: ")


def test_describe_exit_names_the_signal_that_killed_a_child() -> None:
    assert _cli.describe_exit(3) == "exited with status 3"
    assert _cli.describe_exit(-9) == "was killed by SIGKILL (the kernel's out-of-memory killer sends SIGKILL)"
    assert _cli.describe_exit(-15) == "was killed by SIGTERM"
