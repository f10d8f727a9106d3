"""``python -m llm_datadist_ffi``: a user's mistake is a message and an exit status,
never a traceback; sizes are checked against memory before anything is allocated;
Ctrl-C stops a command at once; bench's baseline is measured with each row.

Each command runs as a fresh interpreter outside the source tree.
"""
from __future__ import annotations

import json
import os
import platform
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any, Dict, List

import numpy as np
import pytest

from llm_datadist_ffi import LLMStatusCode, acl, companion
from llm_datadist_ffi._tools import _bench, _bench_measure, _bench_report, _cli, _demo
from llm_datadist_ffi._core import _capi

pytestmark = pytest.mark.mock_only(reason="demo and bench run the mock in several processes")


def run(*args: str, timeout: float = 120, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "llm_datadist_ffi", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=tempfile.gettempdir(), env={**os.environ, **env})


# ---- arguments ----------------------------------------------------------------------------

@pytest.mark.parametrize("args, message", [
    ("bench --sizes 0", "argument --sizes: 0 is out of range: must be in [1, 2147483648] bytes"),
    ("bench --sizes 4K,3G", "argument --sizes: 3G is out of range: must be in [1, 2147483648] bytes"),
    ("bench --sizes 4K,,8K", "argument --sizes: '' is not a byte count (such as 4096, 64K or 4M)"),
    ("bench --sizes 4Q", "argument --sizes: '4Q' is not a byte count (such as 4096, 64K or 4M)"),
    ("bench --bytes -1", "argument --bytes: '-1' is not a byte count (such as 4096, 64K or 4M)"),
    ("bench --bytes 2T", "argument --bytes: 2T is out of range: must be in [1, 1099511627776] bytes"),
    ("bench --paths in-process,tcp", "argument --paths: 'tcp' is not one of in-process, process_vm, socket"),
    ("bench --memory gpu", "argument --memory: 'gpu' is not one of user, library"),
    ("bench --ops copy", "argument --ops: 'copy' is not one of pull, push"),
    ("bench --threads 0", "argument --threads: 0 is out of range: must be in [1, 64]"),
    # the request limit: 2 tensors + 2 entries per run of a scattered list <= 131,064 entries
    ("bench --list-blocks 65532", "argument --list-blocks: 65532 is out of range: must be in [1, 65531]"),
    ("bench --repeat 0", "argument --repeat: 0 is out of range: must be in [1, 1000000]"),
    ("bench --tensors 3", "argument --tensors: must be even (K and V of each layer)"),
    ("bench --calls many", "argument --calls: 'many' is not an integer"),
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
                     if command == "demo" else ["K and V tensors, even, 2..4096", "(default: 4K,16K,64K,256K,1M,4M)",
                                                "--json", "--plot FILE.png", "the request limit with 2 tensors"]):
        assert fragment in text


# ---- memory -------------------------------------------------------------------------------

@pytest.mark.parametrize("args", ["demo --block-size 100000 --blocks 64", "bench --bytes 1T --tensors 4096"])
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


def test_run_of_a_missing_script_is_one_line_and_status_2(tmp_path: Path) -> None:
    missing = tmp_path / "no_such_script.py"
    result = run("run", str(missing))
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == f"python -m llm_datadist_ffi run: {missing}: no such file\n"


@pytest.mark.skipif(companion.vendor_origin() is not None,
                    reason="the vendor's llm_datadist is importable here, so the companion installs")
def test_run_with_the_companion_and_no_vendor_package_is_one_line_and_status_1(tmp_path: Path) -> None:
    script = tmp_path / "serve.py"
    script.write_text("raise SystemExit('the script must not run')\n")
    result = run("run", "--backend", "companion", str(script))
    assert (result.returncode, result.stdout) == (1, "")
    line, = result.stderr.splitlines()
    assert line.startswith("python -m llm_datadist_ffi run: ") and "llm_datadist" in line
    assert "the script must not run" not in result.stderr


def test_sdk_without_its_files_is_one_line_and_status_1(tmp_path: Path) -> None:
    # An install whose SDK is missing, outside a source checkout (which would build it).
    absent = tmp_path / "absent"
    probe = textwrap.dedent(f"""
        import sys
        from pathlib import Path
        from llm_datadist_ffi._core import _loader
        from llm_datadist_ffi._tools import _sdk
        _loader.source_checkout = lambda: None
        _sdk.PREFIX = Path({str(absent)!r})
        sys.exit(_sdk.main(["--cflags"]))
    """)
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120,
                            cwd=tempfile.gettempdir(), check=False)
    assert (result.returncode, result.stdout) == (1, ""), result.stderr
    assert result.stderr == (f"python -m llm_datadist_ffi sdk: the C++ SDK is missing from {absent}; "
                             "reinstall the package with `pip install .`\n")


def test_a_command_error_is_its_line_and_its_status_and_other_errors_propagate(
        capsys: pytest.CaptureFixture[str]) -> None:
    @_cli.reports_errors("prog x")
    def refuses(argv: Any) -> int:
        raise _cli.CommandError(f"no {argv[0]}", status=7)

    @_cli.reports_errors("prog y")
    def breaks(argv: Any) -> int:
        raise KeyError(argv[0])

    assert refuses(["thing"]) == 7
    assert capsys.readouterr().err == "prog x: no thing\n"
    with pytest.raises(KeyError):
        breaks(["k"])
    assert capsys.readouterr().err == ""

def test_info_json_reports_a_backend_that_cannot_load() -> None:
    result = run("info", "--json", LLM_DATADIST_FFI_BACKEND="nonsense")
    assert result.returncode == 1
    import llm_datadist_ffi
    assert json.loads(result.stdout) == {
        "version": llm_datadist_ffi.__version__, "backend": None,
        "error": "LLM_DATADIST_FFI_BACKEND='nonsense' is not a backend; valid values are mock, ascend, auto"}


# ---- bench --------------------------------------------------------------------------------

SMALL_BENCH = ["--sizes", "4K,8K", "--bytes", "64K", "--repeat", "1", "--threads", "2", "--calls", "5",
               "--list-blocks", "16"]


def _identified(path: str, memory: str) -> bool:
    """The peer without LLDD_MOCK_NO_PROCESS_VM: process_vm, or for library memory the
    shared mapping where the backend offers one."""
    return path == "process_vm" or (memory == "library" and path == "shared")


def test_bench_json_has_every_row_the_suite_promises_with_its_floors() -> None:
    result = run("bench", *SMALL_BENCH, "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert set(report) == {"machine", "settings", "seconds", "paths", "transfers", "per_call", "block_lists", "goals",
                           "companion"}
    companion = report["companion"]                 # the companion's cost per pull_blocks (docs/ascend.md §6)
    assert companion["blocks"] == 16 and companion["goal_us"] == 2.0
    assert companion["us_cost"] == pytest.approx(companion["us_wrapped"] - companion["us_unwrapped"])
    machine = report["machine"]
    assert machine["cores"] == os.cpu_count()
    assert machine["kernel"] == f"{platform.system()} {platform.release()}"
    assert isinstance(machine["cpu_model"], str) and machine["cpu_model"]
    assert report["settings"]["sizes"] == [4096, 8192] and report["settings"]["bytes"] == 65536
    assert set(report["paths"]) == {"in-process", "process_vm", "socket", "shared"}

    got = sorted((r["op"], "identified" if _identified(r["path"], r["memory"]) else r["path"], r["memory"],
                  r["shape"], r["block_bytes"], r["threads"]) for r in report["transfers"])
    expected = sorted((op, path, memory, shape, size, threads)
                      for size in (4096, 8192) for path in ("in-process", "identified", "socket")
                      for memory in ("user", "library") for shape in ("contiguous", "scattered")
                      for op in ("pull", "push")
                      for threads in ((1, 2) if op == "pull" and shape == "scattered" else (1,)))
    assert got == expected
    for row in report["transfers"]:
        assert row["bytes"] == 65536                        # 64 KiB over 2 tensors: every block, either shape
        assert row["gb_per_s"] == pytest.approx(row["bytes"] / row["seconds"] / 1e9)
        assert row["x_memcpy"] == pytest.approx(row["memcpy_seconds"] / row["seconds"])
        if row["path"] == "in-process":
            assert row["raw_seconds"] is None and row["x_raw"] is None
        else:
            assert row["x_raw"] == pytest.approx(row["raw_seconds"] / row["seconds"])

    calls = sorted((r["path"] if r["path"] != "shared" else "process_vm", r["memory"]) for r in report["per_call"])
    assert calls == sorted((p, m) for p in ("in-process", "process_vm", "socket") for m in ("user", "library"))
    for row in report["per_call"]:
        assert row["block_bytes"] == 4096
        assert row["us_python"] == pytest.approx(row["us_per_call"] - row["us_c_call"])
        assert (row["us_raw_process_vm"] is None) == (row["path"] == "in-process")
    assert [(r["blocks"], r["form"]) for r in report["block_lists"]] == [(1, "list"), (1, "numpy"),
                                                                          (16, "list"), (16, "numpy")]
    assert [g["goal"].split(".")[0] for g in report["goals"]] == ["1", "1", "2", "2", "2", "3", "4", "5"]
    assert all(g["status"] in ("met", "not met", "not measured") for g in report["goals"])


def test_bench_text_lists_each_goal_with_its_target_and_status() -> None:
    result = run("bench", *SMALL_BENCH, "--paths", "in-process", "--memory", "user", "--threads", "1")
    assert result.returncode == 0, result.stderr
    goals = result.stdout.split("\nGoals (this machine's figures against the project's targets; a figure short of "
                                "its target is not a failure)\n")[1].splitlines()
    assert goals[0].startswith("- 1. library memory moves as a plain copy (shared mapping): target >= 0.95x memcpy")
    assert goals[0].endswith("NOT MEASURED (no link of this run offered a shared mapping; no cross-process library "
                             "memory row >= 16 KiB was selected)")
    # 2 sizes x 2 shapes x pull and push
    assert goals[-1].startswith("companion: CacheManager.pull_blocks of 16 blocks costs ")
    assert goals[-2] == ("- 5. the benchmark suite: target every goal's figure as a ratio in one run; measured "
                         "8 transfer rows, every one's bytes checked: MET")
    assert "socket: not selected (--paths)" in result.stdout


def _small_bench_in_this_process(*extra: str) -> int:
    return _bench.main(["--sizes", "4K", "--bytes", "16K", "--paths", "in-process", "--memory", "user",
                        "--repeat", "1", "--threads", "1", "--list-blocks", "1", "--calls", "1", *extra])


@pytest.mark.parametrize("op", ["pull", "push"])
def test_a_transfer_that_moves_wrong_bytes_makes_the_bench_fail(op: str, monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    from llm_datadist_ffi import native

    monkeypatch.setattr(native.LlmDataDist, f"{op}_kv_blocks", lambda self, *args: None)   # moves nothing
    assert _small_bench_in_this_process("--ops", op) == 1
    out, err = capsys.readouterr()
    announced, failed = err.splitlines()           # the plan, announced before the first row, then the failure
    assert announced.startswith("bench: ")
    assert failed == (f"python -m llm_datadist_ffi bench: a {op} (in-process, user memory, contiguous, 4096 B blocks"
                      f"{', 1 threads' if op == 'pull' else ''}) moved wrong bytes")
    assert out == ""


def test_rows_carry_the_path_the_mock_reports_and_a_selected_path_no_link_took_is_named(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from llm_datadist_ffi import mock_control

    monkeypatch.setattr(mock_control, "link_path", lambda engine, cluster_id: "socket")
    monkeypatch.setattr(mock_control, "last_transfer_path", lambda engine, cluster_id: "socket")
    assert _small_bench_in_this_process("--json") == 0
    report = json.loads(capsys.readouterr().out)
    assert {row["path"] for row in report["transfers"]} == {"socket"}
    assert report["paths"] == {
        "socket": "measured", "in-process": "selected, but no link of this run took it (see the rows' paths)",
        "process_vm": "not selected (--paths)",
        "shared": "not available: no link of this run reported it (the backend has no shared mapping)"}


def test_plot_without_matplotlib_names_the_extra_before_measuring(monkeypatch: pytest.MonkeyPatch,
                                                                  capsys: pytest.CaptureFixture[str],
                                                                  tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)     # what an absent package looks like to import
    measured: List[Any] = []
    monkeypatch.setattr(_bench, "_run", lambda args: measured.append(args))
    assert _small_bench_in_this_process("--plot", str(tmp_path / "bench.png")) == 2
    out, err = capsys.readouterr()
    assert err == ("python -m llm_datadist_ffi bench: --plot needs matplotlib, which is not installed: "
                   "install the package's plot extra (pip install '.[plot]' in a clone; docs/user-guide.md §1)\n")
    assert (out, measured, list(tmp_path.iterdir())) == ("", [], [])


def test_plot_draws_a_png_from_a_report(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="matplotlib is the optional [plot] extra")
    rows = [{"op": "pull", "threads": 1, "shape": shape, "path": path, "memory": "user", "block_bytes": size,
             "gb_per_s": 1.0, "memcpy_gb_per_s": 4.0, "raw_gb_per_s": None if path == "in-process" else 2.0}
            for shape in ("contiguous", "scattered") for path in ("in-process", "process_vm")
            for size in (4096, 65536)]
    report = {"transfers": rows, "settings": {"bytes": 2**20}, "machine": {"cores": 2, "cpu_model": "cpu"}}
    _bench_report.plot(report, str(tmp_path / "bench.png"))
    assert (tmp_path / "bench.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("text, expected", [("4096", 4096), ("64K", 65536), ("4m", 4 * 2**20), ("1G", 2**30)])
def test_byte_counts_take_binary_suffixes(text: str, expected: int) -> None:
    assert _bench.byte_size(1, 2**40)(text) == expected


@pytest.mark.parametrize("most, counts", [(1, [1]), (2, [1, 2]), (3, [1, 2, 3]), (8, [1, 2, 4, 8]),
                                          (12, [1, 2, 4, 8, 12])])
def test_thread_rows_double_up_to_the_count_asked_for(most: int, counts: List[int]) -> None:
    assert _bench.thread_counts(most) == counts


def test_block_sizes_are_sorted_and_distinct() -> None:
    assert _bench.sizes_list("1M,4K,4096,16K") == [4096, 16384, 2**20]


def _row(x_memcpy: float, size: int, shape: str = "scattered", path: str = "shared", memory: str = "library",
         threads: int = 1, gb_per_s: float = 1.0, memcpy_gb_per_s: float = 1.0) -> Dict[str, Any]:
    return {"op": "pull", "path": path, "memory": memory, "shape": shape, "block_bytes": size, "threads": threads,
            "x_memcpy": x_memcpy, "gb_per_s": gb_per_s, "memcpy_gb_per_s": memcpy_gb_per_s}


def test_the_shared_memory_goal_is_judged_by_its_worst_row_from_16_kib() -> None:
    rows = [_row(0.50, 4096), _row(0.97, 16384), _row(0.96, 2**20, "contiguous")]
    goal = _bench_report.goals(rows, [], [], cores=2)[0]
    assert (goal["measured"], goal["status"]) == ("0.96x (worst: pull shared library contiguous 1 MiB)", "met")
    goal = _bench_report.goals(rows + [_row(0.94, 65536)], [], [], cores=2)[0]
    assert (goal["measured"], goal["status"]) == ("0.94x (worst: pull shared library scattered 64 KiB)", "not met")


def test_without_a_shared_mapping_the_library_goal_reports_the_process_vm_rows_as_not_met() -> None:
    rows = [_row(0.30, 65536, path="process_vm"), _row(0.05, 65536, path="socket"), _row(0.9, 65536, path="in-process")]
    goal = _bench_report.goals(rows, [], [], cores=2)[0]
    assert (goal["measured"], goal["status"]) == ("0.30x", "not met")
    assert goal["note"] == ("no link of this run offered a shared mapping; library memory in another process took "
                            "the process_vm path, worst pull process_vm library scattered 64 KiB")


def test_the_thread_goal_compares_with_the_best_memcpy_of_the_run_and_applies_from_four_cores() -> None:
    user = {"path": "process_vm", "memory": "user"}
    rows = [_row(1.0, 65536, gb_per_s=5.0, memcpy_gb_per_s=10.0, **user),
            _row(4.0, 65536, threads=4, gb_per_s=16.0, memcpy_gb_per_s=4.0, **user),   # its floor was caught low
            _row(1.4, 2**20, threads=4, gb_per_s=14.0, memcpy_gb_per_s=10.0, **user)]
    goal = [g for g in _bench_report.goals(rows, [], [], cores=4) if g["goal"].startswith("4.")][0]
    assert (goal["measured"], goal["status"]) == \
        ("1.60x: 16.00 GB/s with 4 threads on 4 cores (pull process_vm user scattered 64 KiB) against the run's "
         "best memcpy, 10.00 GB/s", "met")
    goal = [g for g in _bench_report.goals(rows, [], [], cores=2) if g["goal"].startswith("4.")][0]
    assert (goal["status"], goal["note"]) == ("not measured", "this machine has 2 cores; the target applies from 4")


def test_a_python_part_below_zero_is_noise_not_a_met_goal() -> None:
    calls = [{"path": "process_vm", "memory": "user", "us_per_call": 40.0, "us_c_call": 45.0, "us_python": -5.0}]
    goal = [g for g in _bench_report.goals([], calls, [], cores=2) if g["goal"] == "2. ... of which in Python"][0]
    assert (goal["measured"], goal["status"]) == ("-5.0 us at most (C call alone: 45.0 us in the slowest row)",
                                                  "not measured")
    assert goal["note"].startswith("the C call alone measured slower than the whole method")


def test_the_one_block_goal_is_decided_by_the_slowest_one_sided_path() -> None:
    calls = [{"path": "shared", "memory": "library", "us_per_call": 8.0, "us_c_call": 4.0, "us_python": 4.0},
             {"path": "process_vm", "memory": "user", "us_per_call": 12.0, "us_c_call": 7.5, "us_python": 4.5},
             {"path": "socket", "memory": "user", "us_per_call": 50.0, "us_c_call": 45.0, "us_python": 5.0}]
    goals = {g["goal"]: g for g in _bench_report.goals([], calls, [], cores=2)}
    call = goals["2. one-block pull through the native API"]
    assert (call["measured"], call["status"], call["note"]) == (
        "12.0 us (process_vm, user memory)", "not met", "shared, library memory: 8.0 us")
    assert goals["2. ... of which in Python"]["status"] == "met"            # 4.5 us at most, the socket row aside
    calls[1]["us_per_call"] = 9.5
    assert [g for g in _bench_report.goals([], calls, [], cores=2)
            if g["goal"] == "2. one-block pull through the native API"][0]["status"] == "met"


def _list_rows(fixed_us: float, per_block_us: Dict[str, float]) -> List[Dict[str, Any]]:
    """Block-list rows with made-up timings: per form, a call costs ``fixed_us`` plus
    ``per_block_us[form]`` per block in Python, over a C call of 2 us plus 0.05 us per block."""
    rows = []
    for count in (1, 16, 256, 4096):
        for form, slope in per_block_us.items():
            c_us = 2.0 + 0.05 * count
            python = fixed_us + slope * count
            rows.append({"blocks": count, "form": form, "us_per_call": c_us + python, "us_c_call": c_us,
                         "us_python": python, "us_c_per_block": c_us / count})
    return rows


def _block_list_goal(rows: List[Dict[str, Any]]) -> Dict[str, Any]:
    return [g for g in _bench_report.goals([], [], rows, cores=2) if g["goal"].startswith("3.")][0]


@pytest.mark.parametrize("per_block, status", [(0.3, "not met"), (0.21, "not met"), (0.1, "met"), (0.0, "met")])
def test_the_block_list_goal_is_judged_by_what_each_extra_block_costs_in_python(per_block: float,
                                                                                 status: str) -> None:
    goal = _block_list_goal(_list_rows(3.0, {"list": per_block, "numpy": 0.0}))
    assert goal["status"] == status
    assert goal["measured"].startswith(f"{per_block:.3f} us in Python per extra block (worst: list, 1 to ")


def test_the_fixed_cost_of_a_call_is_not_charged_to_the_blocks() -> None:
    # 16 us per call spread over 16 blocks was "1 us per block"; each extra block adds 0.1 us
    goal = _block_list_goal(_list_rows(16.0, {"list": 0.1, "numpy": 0.1}))
    assert goal["status"] == "met"
    assert goal["measured"] == ("0.100 us in Python per extra block (worst: list, 1 to 16 blocks); C, with the "
                                "64 B copies: 0.050 us per block at 4096 blocks")
    assert goal["note"].startswith("the Python cost of the call itself, 16.1 us with 1 block(s), is goal 2's")


def test_a_form_slow_only_on_long_lists_fails_the_block_list_goal() -> None:
    rows = _list_rows(3.0, {"list": 0.05, "numpy": 0.05})
    for row in rows:
        if row["form"] == "numpy" and row["blocks"] == 4096:
            row["us_python"] += 0.3 * 4095       # only the longest list pays 0.35 us per block
            row["us_per_call"] += 0.3 * 4095
    goal = _block_list_goal(rows)
    assert goal["status"] == "not met"
    assert goal["measured"].startswith("0.350 us in Python per extra block (worst: numpy, 1 to 4096 blocks)")


def test_the_block_list_goal_needs_two_lengths_and_a_python_part_above_zero() -> None:
    one_length = [r for r in _list_rows(3.0, {"list": 0.1}) if r["blocks"] == 1]
    goal = _block_list_goal(one_length)
    assert (goal["status"], goal["note"]) == ("not measured", "needs block lists of two lengths (--list-blocks 2 or more)")
    noisy = _list_rows(3.0, {"list": 0.1})
    noisy[0]["us_python"] = -1.0
    assert _block_list_goal(noisy)["status"] == "not measured"


def test_the_whole_call_and_the_c_call_are_timed_in_alternating_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    events: List[str] = []
    clock = iter(range(100))
    monkeypatch.setattr(_bench_measure.time, "perf_counter", lambda: float(next(clock)))
    whole, c_only = _bench_measure.per_call_pair(lambda: events.append("whole"), lambda: events.append("c"), 2,
                                                 batches=2)
    assert events == ["whole", "c"] + ["whole", "whole", "c", "c"] * 2
    assert (whole, c_only) == (0.5, 0.5)           # every batch: one clock tick over 2 calls


def test_bench_times_the_floors_right_after_each_repetition_of_a_transfer(monkeypatch: pytest.MonkeyPatch) -> None:
    events: List[Any] = []
    monkeypatch.setattr(_bench_measure, "memcpy_seconds", lambda nbytes: events.append(("memcpy", nbytes)) or 0.5)
    clock = iter(range(100))
    monkeypatch.setattr(_bench_measure.time, "perf_counter", lambda: float(next(clock)))
    best = _bench_measure.best_interleaved(lambda: events.append("transfer"), 4096, 3,
                                           raw=lambda: events.append("raw"))
    assert events == ["transfer", "raw"] + ["transfer", ("memcpy", 4096), "raw"] * 3
    assert best == {"transfer": 1.0, "memcpy": 0.5, "raw": 1.0, "regions": None}
    events.clear()
    best = _bench_measure.best_interleaved(lambda: events.append("transfer"), 4096, 2,
                                           raw=lambda: events.append("raw"), regions=lambda: events.append("regions"))
    assert events == ["transfer", "raw", "regions"] + ["transfer", ("memcpy", 4096), "raw", "regions"] * 2
    assert best == {"transfer": 1.0, "memcpy": 0.5, "raw": 1.0, "regions": 1.0}


def test_the_regions_floor_copies_exactly_the_listed_blocks_between_library_memory() -> None:
    order = np.array([5, 0, 3], dtype=np.uint64)
    acl.set_device(0)
    floor = _bench_measure.RegionsMemcpy(2, 8, 64, order)
    try:
        for t, (src, dst) in enumerate(zip(floor._src.views, floor._dst.views)):
            src[:] = (np.arange(8, dtype=np.uint8) * 16 + t)[:, None]
            dst[:] = 0xEE
        floor()
        for t, dst in enumerate(floor._dst.views):
            expected = np.full((8, 64), 0xEE, dtype=np.uint8)
            for block in (5, 0, 3):
                expected[block] = block * 16 + t
            assert np.array_equal(dst, expected)
    finally:
        floor.close()


def test_the_mock_refuses_a_copy_of_blocks_outside_its_allocations() -> None:
    copy = _capi.mock_function("lldd_mock_copy_blocks")
    acl.set_device(0)
    a, b = acl.malloc(256), acl.malloc(256)
    try:
        offsets = _capi.ffi.new("uint64_t[]", [0, 193])          # 193 + 64 runs one byte past 256
        assert copy(_capi.ffi.cast("void *", a), _capi.ffi.cast("void *", b), offsets, 2, 64) == \
            LLMStatusCode.LLM_PARAM_INVALID
        assert "live mock-ACL allocation" in _capi.last_error()
        scratch = np.zeros(256, dtype=np.uint8)                  # numpy memory is no mock allocation
        offsets = _capi.ffi.new("uint64_t[]", [0])
        assert copy(_capi.ffi.cast("void *", scratch.ctypes.data), _capi.ffi.cast("void *", b), offsets, 1, 64) == \
            LLMStatusCode.LLM_PARAM_INVALID
    finally:
        acl.free(a)
        acl.free(b)


# ---- Ctrl-C -------------------------------------------------------------------------------

BLOCKED = """
import socket, sys
from llm_datadist_ffi import native
from llm_datadist_ffi._tools._cli import run_interruptibly

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
