"""C++ programs built against the SDK, run as the vendor's C++ samples are run: two
processes on 127.0.0.1 (pull cache and blocks, push cache and blocks, switch roles; a
fixed port as in the samples, and free ports), a C++ Decoder pulling from a Python Prompt
and the reverse, and what a single process does without thinking (docs/cpp.md).

Every transfer is checked byte for byte against the pattern of programs/sample_util.h,
computed here on its own (``pattern``).
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict, List

import numpy as np
import pytest

from sdk_support import CPP_TESTS as HERE, PROGRAMS, Sdk, compile_program, program_env, python_env
from ports import free_port

from llm_datadist_ffi.testing import trace

TENSORS, BLOCKS, BLOCK = 4, 8, 16
FIXED_PROMPT_PORT, FIXED_DECODER_PORT = 27361, 27362     # the programs' defaults


def pattern(seed: int) -> np.ndarray:
    """[tensor, block, element] int32: element i of tensor t is seed*10^6 + t*10^4 + i."""
    t = np.arange(TENSORS).reshape(TENSORS, 1)
    i = np.arange(BLOCKS * BLOCK).reshape(1, -1)
    values = np.zeros((TENSORS, BLOCKS * BLOCK), dtype=np.int64) if seed == 0 else seed * 1000000 + t * 10000 + i
    return values.astype(np.int32).reshape(TENSORS, BLOCKS, BLOCK)


def dumped(path: Path) -> np.ndarray:
    return np.frombuffer(path.read_bytes(), dtype=np.int32).reshape(TENSORS, BLOCKS, BLOCK)


def expected_pull_or_push(seed: int) -> np.ndarray:
    """What decoder_pull and prompt_push leave in a zeroed cache: blocks 1, 2, 3 of the
    source in blocks 4, 5, 6, and batch 7 of the source in batch 0."""
    source, out = pattern(seed), pattern(0).copy()
    out[:, [4, 5, 6]] = source[:, [1, 2, 3]]
    out[:, 0] = source[:, 7]
    return out


class Peer:
    """A process of a pair, kept in step by lines on its stdin and stdout."""

    def __init__(self, cmd: List[str], env: Dict[str, str]) -> None:
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, env=env)
        self.lines: List[str] = []

    def expect(self, word: str) -> str:
        """The first line starting with ``word`` (the lines before it are kept for the report)."""
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)
            if line.startswith(word):
                return line.split(maxsplit=1)[1].strip() if " " in line.strip() else ""
        raise AssertionError(f"{self.proc.args[0]} ended without {word!r}:\n{''.join(self.lines)}")

    def say(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def finish(self, timeout: float = 60) -> str:
        out, _ = self.proc.communicate(timeout=timeout)
        text = "".join(self.lines) + out
        assert self.proc.returncode == 0, f"{self.proc.args} exited with {self.proc.returncode}:\n{text}"
        return text


def run(cmd: List[str], env: Dict[str, str], timeout: float = 60) -> str:
    done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, timeout=timeout)
    assert done.returncode == 0, f"{cmd} exited with {done.returncode}:\n{done.stdout}"
    return done.stdout


@pytest.mark.parametrize("ports", ["fixed", "free"])
def test_pull_cache_and_blocks(programs: Dict[str, Path], tmp_path: Path, ports: str) -> None:
    # "fixed": the programs' default ports, as the vendor's samples have theirs
    env, out = program_env(), tmp_path / "pulled.bin"
    seed, chosen = ("1", []) if ports == "fixed" else ("5", [str(free_port()), str(free_port())])
    prompt_args = [*chosen[:1], seed] if chosen else []
    prompt = Peer([str(programs["kv_server"]), "prompt", "0", "0", "127.0.0.1", *prompt_args], env)
    cache_id = prompt.expect("READY")
    log = run([str(programs["decoder_pull"]), "2", "127.0.0.1", "127.0.0.1", cache_id, str(out), *chosen], env)
    prompt.say("done")
    prompt.finish()
    assert "[INFO] PullKvBlocks success" in log and "[INFO] PullKvCache success" in log
    np.testing.assert_array_equal(dumped(out), expected_pull_or_push(int(seed)))


def test_push_cache_and_blocks(programs: Dict[str, Path], tmp_path: Path) -> None:
    env = program_env()
    port, out = free_port(), tmp_path / "pushed.bin"
    decoder = Peer([str(programs["kv_server"]), "decoder", "1", "4", "127.0.0.1", str(port), "0", str(out)], env)
    cache_id = decoder.expect("READY")
    log = run([str(programs["prompt_push"]), "0", "127.0.0.1", "127.0.0.1", cache_id, str(port), "2"], env)
    decoder.say("done")
    decoder.finish()
    assert "[INFO] PushKvBlocks success" in log and "[INFO] PushKvCache success" in log
    np.testing.assert_array_equal(dumped(out), expected_pull_or_push(2))


def test_switch_roles_then_push_the_other_way(programs: Dict[str, Path], tmp_path: Path) -> None:
    env = program_env()
    port_a, port_b = free_port(), free_port()
    common = ["0", "127.0.0.1", str(port_a), str(port_b)]
    a = Peer([str(programs["switch_roles"]), "a", *common], env)
    a_cache = a.expect("READY")
    after_pull, after_push = tmp_path / "after_pull.bin", tmp_path / "after_push.bin"
    b = Peer([str(programs["switch_roles"]), "b", *common, a_cache, str(after_pull), str(after_push)], env)
    b_cache = b.expect("SWITCHED")            # B pulled, unlinked, and listens as a Prompt
    a.say("pulled")
    a.expect("SWITCHED")                      # A is a Decoder now; its listener stopped
    a.say(f"go {b_cache}")
    a.finish()                                # A linked to B, pushed, unlinked, finalized
    b.say("pushed")
    b.finish()
    source = pattern(3)
    expected = pattern(0).copy()
    expected[:, [1, 2, 3]] = source[:, [1, 2, 3]]
    expected[:, 0] = source[:, 0]
    np.testing.assert_array_equal(dumped(after_pull), expected)
    expected[:, [2, 3]] = source[:, [0, 1]]
    expected[:, 4] = source[:, 4]
    np.testing.assert_array_equal(dumped(after_push), expected)


def test_cpp_decoder_pulls_from_a_python_prompt(programs: Dict[str, Path], tmp_path: Path) -> None:
    port, out = free_port(), tmp_path / "pulled.bin"
    prompt = Peer([sys.executable, str(HERE / "py_peer.py"), "prompt", str(port), "7"], python_env())
    cache_id = prompt.expect("READY")
    run([str(programs["decoder_pull"]), "0", "127.0.0.1", "127.0.0.1", cache_id, str(out), str(port),
         str(free_port())], program_env())
    prompt.say("done")
    prompt.finish()
    np.testing.assert_array_equal(dumped(out), expected_pull_or_push(7))


def test_python_decoder_pulls_from_a_cpp_prompt_and_the_traces_merge(programs: Dict[str, Path],
                                                                     tmp_path: Path) -> None:
    traces = tmp_path / "traces"
    port, out = free_port(), tmp_path / "pulled.bin"
    prompt = Peer([str(programs["kv_server"]), "prompt", "0", "0", "127.0.0.1", str(port), "9"],
                  program_env(LLM_DATADIST_FFI_TRACE=str(traces)))
    cache_id = prompt.expect("READY")
    run([sys.executable, str(HERE / "py_peer.py"), "decoder", str(port), cache_id, str(out)],
        python_env(LLM_DATADIST_FFI_TRACE=str(traces)))
    prompt.say("done")
    prompt.finish()
    np.testing.assert_array_equal(dumped(out), expected_pull_or_push(9))

    merged = trace.merge(traces)["traceEvents"]
    processes = {e["args"]["name"].split(" (pid")[0] for e in merged if e.get("name") == "process_name"}
    assert processes == {"PROMPT cluster 0", "DECODER cluster 1"}
    calls = [e for e in merged if e.get("ph") == "X"]
    cpp = [e["name"] for e in calls if e["name"].startswith("LlmDataDist::")]
    assert cpp == ["LlmDataDist::LlmDataDist", "LlmDataDist::Initialize", "LlmDataDist::RegisterKvCache",
                   "LlmDataDist::UnregisterKvCache", "LlmDataDist::Finalize"]
    register = next(e for e in calls if e["name"] == "LlmDataDist::RegisterKvCache")
    assert register["args"]["cache_desc"] == {"placement": 1, "num_tensors": 4, "data_type": 3, "shape": [8, 16]}
    assert register["args"]["status"] == "LLM_SUCCESS" and register["args"]["status_code"] == 0
    python_pulls = [e for e in calls if "pull_kv" in e["name"]]
    assert sum(e["args"].get("bytes", 0) for e in python_pulls) == TENSORS * 4 * BLOCK * 4
    assert len({e["pid"] for e in calls}) == 2
    json.dumps(merged)                         # one Chrome trace, serialisable as it is


def behaviour(programs: Dict[str, Path], **env: str) -> tuple[Dict[str, List[str]], str]:
    done = subprocess.run([str(programs["sdk_behaviour"]), str(free_port()), str(free_port())],
                          capture_output=True, text=True, env=program_env(**env), timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    seen: Dict[str, List[str]] = {}
    for line in done.stdout.splitlines():
        name, _, value = line.partition("=")
        seen.setdefault(name, []).append(value)
    return seen, done.stderr


# What the device does (docs/cpp.md, "What the samples do without thinking").
EXPECTED = {
    "prompt_initialize": ["0x0"], "decoder_initialize": ["0x0"],
    "device_after_initialize": ["3"],                # Initialize set OPTION_DEVICE_ID's device
    "malloc_huge_only": ["0x0"] * 8, "memcpy_h2d": ["0x0"] * 8, "memcpy_round_trip": ["equal"] * 8,
    "register": ["0x0", "0x0"],                      # aclrtMalloc memory registers: one mock instance
    "link": ["0x0"],
    "inject_fault": ["0x0"], "pull_under_fault": ["0x5010B01A"], "pull_after_fault": ["0x0"],
    "pulled_batch": ["equal"],
    "pull_one_default_pair": ["0x0"], "after_one_default_pair": ["equal"],   # PR-1: ranges ignored
    "inject_acl_fault": ["0x0"], "malloc_under_fault": [hex(207001).upper().replace("0X", "0x")],
    "unlink": ["0x0"], "unregister": ["0x0"], "unregister_prompt": ["0x0"],
    "pull_after_finalize": ["0xFFFFFFFF"], "free_after_finalize": ["0x0"],
    "live_engines": ["0"], "live_allocations": ["0"],
}


def test_what_the_samples_do_without_thinking_works_as_on_the_device(programs: Dict[str, Path]) -> None:
    seen, stderr = behaviour(programs)
    assert seen == EXPECTED
    assert "lint" not in stderr                      # lints are printed only when asked for


def test_lints_are_printed_on_stderr_when_asked_for(programs: Dict[str, Path]) -> None:
    seen, stderr = behaviour(programs, LLM_DATADIST_FFI_LINTS="1")
    assert seen == EXPECTED
    lints = [line for line in stderr.splitlines() if line.startswith("llm_datadist_ffi lint")]
    assert lints == ["llm_datadist_ffi lint PR-1 in LlmDataDist::PullKvCache: lldd_pull_kv_cache: only one of "
                     "src_layer_range and dst_layer_range is a range (PR-1)"]


def test_strict_mode_refuses_what_would_be_a_lint(programs: Dict[str, Path]) -> None:
    seen, _ = behaviour(programs, LLM_DATADIST_FFI_STRICT="1")
    assert seen == {**EXPECTED, "pull_one_default_pair": ["0x5010B005"], "after_one_default_pair": ["different"]}


def test_the_class_conforms_to_the_vendors_declarations_and_v2_behaviour(programs: Dict[str, Path]) -> None:
    out = run([str(programs["conformance"]), str(free_port())], program_env())
    assert "double check: OK" in out


def test_programs_carry_their_library_path(programs: Dict[str, Path], sdk: Sdk) -> None:
    dynamic = subprocess.run(["readelf", "-d", str(programs["kv_server"])], capture_output=True, text=True).stdout
    assert str(sdk.prefix / "lib") in dynamic and ("RUNPATH" in dynamic or "RPATH" in dynamic)
    for lib in ("libllm_datadist.so", "libmetadef.so", "libacl_rt.so"):
        assert f"[{lib}]" in dynamic


@pytest.mark.parametrize("abi", ["0", "1"])
def test_either_string_abi_links_and_runs(sdk: Sdk, tmp_path: Path, abi: str) -> None:
    # No std::string crosses the API (AscendString keeps its string behind a shared_ptr,
    # with every member out of line), so the flag the vendor sets is not forced on users.
    exe = compile_program(sdk, PROGRAMS / "conformance.cpp", tmp_path / "conformance",
                          [f"-D_GLIBCXX_USE_CXX11_ABI={abi}", "-O0", "-Wall", "-Wextra", "-Werror"])
    assert "double check: OK" in run([str(exe), str(free_port())], program_env())


def test_a_second_mock_instance_is_refused_loudly(programs: Dict[str, Path], sdk: Sdk, tmp_path: Path) -> None:
    # The program links the mock's controls; LLM_DATADIST_FFI_MOCK_LIB names another file of
    # it. Faults, ACL memory and the engine would then live in different instances, and
    # every registration would fail obscurely: the class refuses to work instead.
    mock_dir = Path([f[2:] for f in sdk.libs if f.startswith("-L")][-1])
    copy = tmp_path / "libllm_datadist_mock.so"
    shutil.copyfile(mock_dir / "libllm_datadist_mock.so", copy)
    done = subprocess.run([str(programs["sdk_behaviour"]), str(free_port()), str(free_port())], capture_output=True,
                          text=True, env=program_env(LLM_DATADIST_FFI_MOCK_LIB=str(copy)), timeout=60)
    assert "prompt_initialize=0xFFFFFFFF" in done.stdout.splitlines()
    assert (f"the mock library {copy} is not the one loaded as libllm_datadist_mock.so; ACL memory, the mock's "
            "controls and the engine would live in different mock instances") in done.stderr
