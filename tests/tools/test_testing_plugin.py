"""The pytest plugin as a user meets it: pytest run in a new directory, outside the
project, where only the installed package (its ``pytest11`` entry point) provides it."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.mock_only(reason="the user's test pulls between engine processes of the mock")

# The done-when check of the toolkit: a dozen lines, a two-process pull of block tables a
# public strategy draws.
USER_TEST = '''
import numpy as np
from hypothesis import given, settings
from llm_datadist_ffi.testing.strategies import block_pairs
from llm_datadist_ffi.testing.topology import here

def keep(seed):
    import llm_datadist as ld
    me, a = here(), np.full((4, 16), seed, np.uint8)
    key = ld.BlocksCacheKey(me.cluster_id, 0) if me.role == "prompt" else None
    desc = ld.CacheDesc(1, [4, 16], ld.DataType.DT_UINT8, ld.Placement.DEVICE)
    me.state.update(a=a, c=me.engine.cache_manager.register_blocks_cache(desc, [a.ctypes.data], key))

def pull(prompt, src, dst):
    import llm_datadist as ld
    me = here(); me.state.get("linked") or me.link(prompt); me.state["linked"] = True
    me.engine.cache_manager.pull_blocks(ld.BlocksCacheKey(prompt, 0), me.state["c"], src, dst, tensor_num_per_layer=1)
    return me.state["a"][:, 0].tolist()

def test_pull(topology):
    topo = topology(prompts=1, decoders=1)
    prompt, decoder = topo.prompts[0], topo.decoders[0]
    prompt.call(keep, 7); decoder.call(keep, 0)
    @settings(max_examples=5, deadline=None)
    @given(block_pairs(4, 4, containers=["list"]))
    def pulls(table):
        got = decoder.call(pull, prompt.cluster_id, *table)
        assert [got[b] for b in table[1]] == [7] * len(table[1])
    pulls()
'''

LINT_TEST = '''
import warnings
import pytest
from llm_datadist_ffi import LintWarning

def test_lint():
    warnings.warn("a lint", LintWarning)

@pytest.mark.filterwarnings("ignore::llm_datadist_ffi.LintWarning")
def test_lint_its_mark_ignores():
    warnings.warn("a lint", LintWarning)
'''

ALIAS_TEST = '''
import sys

def test_with_the_alias(llm_datadist_alias):
    import llm_datadist
    assert llm_datadist is llm_datadist_alias is sys.modules["llm_datadist_ffi.vendor"]

def test_after_the_alias():
    assert "llm_datadist" not in sys.modules
'''

FAILING_PULL_TEST = '''
import numpy as np
from llm_datadist_ffi.testing.topology import here

def keep(seed):
    import llm_datadist as ld
    me, a = here(), np.full((4, 16), seed, np.uint8)
    key = ld.BlocksCacheKey(me.cluster_id, 0) if me.role == "prompt" else None
    desc = ld.CacheDesc(1, [4, 16], ld.DataType.DT_UINT8, ld.Placement.DEVICE)
    me.state.update(a=a, c=me.engine.cache_manager.register_blocks_cache(desc, [a.ctypes.data], key))

def pull(prompt, src, dst):
    import llm_datadist as ld
    me = here(); me.state.get("linked") or me.link(prompt); me.state["linked"] = True
    me.engine.cache_manager.pull_blocks(ld.BlocksCacheKey(prompt, 0), me.state["c"], src, dst, tensor_num_per_layer=1)

def test_pull_fails(topology):
    topo = topology(prompts=1, decoders=1)
    prompt, decoder = topo.prompts[0], topo.decoders[0]
    prompt.call(keep, 7); decoder.call(keep, 0)
    decoder.call(pull, prompt.cluster_id, [0], [1])
    decoder.call(pull, prompt.cluster_id, [9], [2])     # block 9 of 4: refused
'''

FAILING_TEST = '''
from llm_datadist_ffi.testing.topology import here

def shout():
    print("the prompt says hello")

def test_fails(topology):
    topo = topology(prompts=1, decoders=0)
    topo.prompts[0].call(shout)
    assert False
'''


def run_pytest(directory: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "LLM_DATADIST_FFI_STRICT"))}
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rA", *args],
                          cwd=directory, env=env, capture_output=True, text=True, timeout=120)


def write(directory: Path, name: str, text: str) -> None:
    (directory / name).write_text(textwrap.dedent(text))


def test_a_dozen_line_test_in_a_new_directory_pulls_between_two_processes(tmp_path) -> None:
    write(tmp_path, "test_user.py", USER_TEST)
    write(tmp_path, "test_alias.py", ALIAS_TEST)
    result = run_pytest(tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "3 passed" in result.stdout


def test_lint_warnings_are_errors_unless_the_option_or_a_mark_relaxes_them(tmp_path) -> None:
    write(tmp_path, "test_lint.py", LINT_TEST)
    strict = run_pytest(tmp_path)
    assert strict.returncode == 1 and "FAILED test_lint.py::test_lint - llm_datadist_ffi.lint.LintWarning: a lint" \
        in strict.stdout and "PASSED test_lint.py::test_lint_its_mark_ignores" in strict.stdout, strict.stdout
    warned = run_pytest(tmp_path, "--lldd-lint=warn")
    assert warned.returncode == 0 and "LintWarning: a lint" in warned.stdout, warned.stdout
    ignored = run_pytest(tmp_path, "--lldd-lint=ignore")
    assert ignored.returncode == 0 and "LintWarning" not in ignored.stdout, ignored.stdout


def test_a_failing_test_reports_what_its_engine_processes_wrote(tmp_path) -> None:
    write(tmp_path, "test_failing.py", FAILING_TEST)
    result = run_pytest(tmp_path)
    assert result.returncode == 1
    assert "stderr of prompt0 (cluster 1, pid" in result.stdout and "the prompt says hello" in result.stdout, \
        result.stdout


def test_a_failing_test_with_tracing_on_reports_its_processes_merged_trace(tmp_path) -> None:
    project, traces = tmp_path / "project", tmp_path / "traces"
    project.mkdir()
    write(project, "test_failing.py", FAILING_PULL_TEST)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "LLM_DATADIST_FFI_STRICT"))}
    result = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rA"], cwd=project,
                            env={**env, "LLM_DATADIST_FFI_TRACE": str(traces)}, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 1, result.stdout + result.stderr
    merged = traces / "test_failing.py_test_pull_fails" / "merged.json"
    assert f"merged trace of test_failing.py::test_pull_fails: {merged}" in result.stdout, result.stdout
    summary = result.stdout.split("llm_datadist_ffi trace summary (call)", 1)[1]
    pulls = [line.split() for line in summary.splitlines() if line.startswith("CacheManager.pull_blocks")]
    # two pulls, one block of 16 bytes moved, the refused one by its code (column 3 is the rate)
    assert len(pulls) == 1, summary
    assert pulls[0][:3] + pulls[0][4:] == ["CacheManager.pull_blocks", "2", "16", "LLM_PARAM_INVALID",
                                           "(0x5010b005)", "x1"], summary
    events = json.loads(merged.read_text())["traceEvents"]
    names = {e["args"]["name"].split(" (pid")[0] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    assert names == {"PROMPT cluster 1", "DECODER cluster 2"}
