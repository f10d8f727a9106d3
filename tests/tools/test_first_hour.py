"""What a newcomer meets in the first hour: install commands, the trace recipe, the
command line, the testing toolkit's defaults, logging, strict mode, the alias.

Each test here holds one finding of the third review ("A newcomer's first hour").
"""
from __future__ import annotations

import importlib.metadata
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Iterator, List, Tuple

import pytest

ROOT = Path(__file__).resolve().parents[2]
TRACE_ENV = "LLM_DATADIST_FFI_TRACE"


def command(*args: str, env: "dict[str, str] | None" = None) -> subprocess.CompletedProcess:
    """``python -m llm_datadist_ffi ARGS`` from the repository root."""
    return subprocess.run([sys.executable, "-m", "llm_datadist_ffi", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, env=env)

# -- item 9: install commands in the documents ------------------------------------------------

_PIP_INSTALL = re.compile(r"pip install\b(?P<args>[^`#\n]*)")
_TOKEN = re.compile(r"'[^']*'|\"[^\"]*\"|\S+")


def _user_documents() -> List[Path]:
    return sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md"), *(ROOT / "examples").rglob("*.md")])


def _pip_arguments() -> Iterator[Tuple[str, str]]:
    """(where, argument) for each argument of every ``pip install`` in the documents;
    an argument keeps its quotes."""
    for path in _user_documents():
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for match in _PIP_INSTALL.finditer(line):
                args = match.group("args").split("&&")[0]
                for token in _TOKEN.findall(args):
                    yield f"{path.relative_to(ROOT)}:{number}", token


def test_the_documents_install_from_a_clone_or_a_wheel_never_by_name_from_an_index() -> None:
    by_name = [(where, token) for where, token in _pip_arguments()
               if re.fullmatch(r"llm_datadist_ffi(\[[^\]]*\])?", token.strip("'\""))]
    assert by_name == []


def test_every_extra_in_an_install_command_is_quoted() -> None:
    unquoted = [(where, token) for where, token in _pip_arguments()
                if "[" in token and token[0] not in "'\"" and "$(" not in token]
    assert unquoted == []


def test_the_user_guide_says_how_to_install_a_built_wheel_with_an_extra() -> None:
    guide = (ROOT / "docs" / "user-guide.md").read_text(encoding="utf-8")
    assert "pip wheel --no-deps -w dist ." in guide
    assert 'pip install "$(ls dist/llm_datadist_ffi-*.whl)[test]"' in guide


# -- item 8: the user guide's trace recipe --------------------------------------------

TRACED_TEST = """
import numpy as np
from llm_datadist_ffi.testing.topology import here

def keep(seed):
    import llm_datadist as ld
    me, a = here(), np.full((4, 16), seed, np.uint8)
    key = ld.BlocksCacheKey(me.cluster_id, 0) if me.role == "prompt" else None
    desc = ld.CacheDesc(1, [4, 16], ld.DataType.DT_UINT8, ld.Placement.DEVICE)
    me.state.update(a=a, c=me.engine.cache_manager.register_blocks_cache(desc, [a.ctypes.data], key))

def pull(prompt):
    import llm_datadist as ld
    me = here()
    me.link(prompt)
    me.engine.cache_manager.pull_blocks(ld.BlocksCacheKey(prompt, 0), me.state["c"], [0, 1], [2, 3])
    return me.state["a"][:, 0].tolist()

def test_pull(topology):
    topo = topology(prompts=1, decoders=1)
    prompt, decoder = topo.prompts[0], topo.decoders[0]
    prompt.call(keep, 7)
    decoder.call(keep, 0)
    assert decoder.call(pull, prompt.cluster_id) == [0, 0, 7, 7]
"""


def _plugin_args(env: "dict[str, str]") -> List[str]:
    """Run a pytest of a new directory with this tree's package: the installed one (its
    ``pytest11`` entry point) when there is one, else the source tree and its plugin."""
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    installed = any(e.name == "llm_datadist_ffi" for e in importlib.metadata.entry_points().select(group="pytest11")) \
        if sys.version_info >= (3, 10) else True
    return [] if installed else ["-p", "llm_datadist_ffi.testing.pytest_plugin"]


@pytest.mark.mock_only(reason="the bytes of a call come from the mock's record")
def test_the_user_guides_trace_recipe_reads_the_per_test_folders_the_plugin_writes(tmp_path: Path) -> None:
    project, traces = tmp_path / "project", tmp_path / "run1"
    project.mkdir()
    (project / "test_traced.py").write_text(textwrap.dedent(TRACED_TEST))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "LLM_DATADIST_FFI_STRICT"))}
    env[TRACE_ENV] = str(traces)
    ran = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *_plugin_args(env)],
                         cwd=project, env=env, capture_output=True, text=True, timeout=180)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    # the recipe of docs/user-guide.md, "Call traces"
    merged = command("trace", "merge", str(traces), "-o", str(tmp_path / "run1.json"))
    assert merged.returncode == 0, merged.stderr
    events = json.loads((tmp_path / "run1.json").read_text())["traceEvents"]
    pulls = [e for e in events if e.get("name") == "CacheManager.pull_blocks"]
    assert [(p["args"]["status"], p["args"]["bytes"]) for p in pulls] == [("LLM_SUCCESS", 2 * 16)]
    tracks = sorted(e["args"]["name"].split(" (pid")[0] for e in events
                    if e.get("ph") == "M" and e.get("name") == "process_name")
    assert tracks == ["DECODER cluster 2", "PROMPT cluster 1"]
    summary = command("trace", "summary", str(traces))
    assert summary.returncode == 0, summary.stderr
    rows = {line.split()[0]: line.split() for line in summary.stdout.splitlines()}
    assert rows["CacheManager.pull_blocks"][1:3] == ["1", "32"]


@pytest.mark.parametrize("action", ["merge", "summary"])
def test_a_trace_command_with_nothing_to_read_fails_and_says_what_to_set(tmp_path: Path, action: str) -> None:
    done = command("trace", action, str(tmp_path))
    assert done.returncode == 1
    assert f"no trace files in {tmp_path}" in done.stderr and f"{TRACE_ENV}=" in done.stderr, done.stderr
    assert not (tmp_path / "merged.json").exists()


def test_the_summary_of_an_empty_merged_trace_fails(tmp_path: Path) -> None:
    empty = tmp_path / "merged.json"
    empty.write_text(json.dumps({"traceEvents": []}))
    done = command("trace", "summary", str(empty))
    assert done.returncode == 1 and "no calls traced" in done.stderr, done.stderr


@pytest.mark.parametrize("nbytes, micros, rate", [
    (16, 1000, "16.0kB/s"), (32, 10**6, "32.0B/s"), (3 * 10**6, 1000, "3.00GB/s"), (5 * 10**6, 2 * 10**6, "2.50MB/s"),
    (0, 1000, "-"),
])
def test_the_summary_prints_rates_in_a_unit_that_fits_the_traffic(tmp_path: Path, nbytes: int, micros: int,
                                                                    rate: str) -> None:
    event = {"name": "CacheManager.pull_blocks", "ph": "X", "pid": 7, "tid": 7, "ts": 1, "dur": micros,
             "args": {"status": "LLM_SUCCESS", "status_code": 0, "bytes": nbytes}}
    (tmp_path / "trace-7-1.json").write_text("[\n" + json.dumps(event) + ",\n")
    done = command("trace", "summary", str(tmp_path))
    assert done.returncode == 0, done.stderr
    header, row = done.stdout.splitlines()
    assert header.split() == ["method", "calls", "bytes", "rate", "errors"]
    assert row.split() == ["CacheManager.pull_blocks", "1", str(nbytes), rate, "-"]


# -- item 10: block tables drawn for the vendor API ------------------------------------

def _python_ints(value: object) -> bool:
    return isinstance(value, (list, tuple)) and all(type(item) is int for item in value)


def test_block_tables_drawn_for_the_vendor_api_are_lists_or_tuples_of_python_ints() -> None:
    from hypothesis import given, settings

    from llm_datadist_ffi.testing import strategies as lst

    @settings(max_examples=60, deadline=None, database=None)
    @given(lst.block_pairs(4, 6), lst.block_lists(8), lst.block_pairs(4, 6, validity="invalid"),
           lst.block_lists(8, validity="any"))
    def drawn(pairs: Tuple[object, object], blocks: object, bad_pairs: Tuple[object, object], any_blocks: object) -> None:
        assert _python_ints(pairs[0]) and _python_ints(pairs[1]) and _python_ints(blocks)
        assert _python_ints(bad_pairs[0]) and _python_ints(bad_pairs[1]) and _python_ints(any_blocks)

    drawn()


@pytest.mark.parametrize("make", [
    lambda lst: lst.block_pairs(4, 6, api="native").map(lambda t: t[0]),
    lambda lst: lst.block_lists(8, api="native"),
    lambda lst: lst.block_lists(8, containers=["array"]),
    lambda lst: lst.block_pairs(4, 6, containers=["list", "array"]).map(lambda t: t[1]),
])
def test_arrays_are_drawn_for_the_native_api_or_where_asked(make: object) -> None:
    import numpy as np
    from hypothesis import find, settings

    from llm_datadist_ffi.testing import strategies as lst

    array = find(make(lst), lambda v: isinstance(v, np.ndarray),  # type: ignore[operator]
                 settings=settings(max_examples=300, database=None))
    assert array.dtype == np.uint64



# -- item 11: library warnings stay out of stderr unless logging is configured ---------

LOGGING_PROBE = """
import logging, sys
import llm_datadist_ffi
from llm_datadist_ffi import lint
if sys.argv[1] == "configured":
    logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s")
logging.getLogger("llm_datadist_ffi.native").warning("a library warning")
print("done")
"""


@pytest.mark.parametrize("mode, stderr", [("unconfigured", ""), ("configured", "llm_datadist_ffi.native: a library warning\n")])
def test_library_warnings_reach_stderr_only_when_logging_is_configured(mode: str, stderr: str) -> None:
    done = subprocess.run([sys.executable, "-c", LOGGING_PROBE, mode], cwd=ROOT, capture_output=True, text=True,
                          timeout=60)
    assert (done.returncode, done.stdout, done.stderr) == (0, "done\n", stderr)


def test_the_package_logger_has_a_null_handler() -> None:
    import logging

    import llm_datadist_ffi  # noqa: F401 - the import installs it
    handlers = logging.getLogger("llm_datadist_ffi").handlers
    assert [type(h) for h in handlers] == [logging.NullHandler]


# -- item 12: LLM_DATADIST_FFI_STRICT's spellings -------------------------------------

STRICT_PROBE = """
import warnings
from llm_datadist_ffi import LLMException, lint
warnings.simplefilter("ignore")
try:
    lint.lint("PR-8", "[probe] an ignored keyword")
except LLMException as exc:
    print("refused", int(exc.status_code))
else:
    print("warned")
"""


@pytest.mark.parametrize("value, outcome", [
    ("1", "refused"), ("true", "refused"), ("TRUE", "refused"), ("yes", "refused"), ("On", "refused"),
    (" true ", "refused"), ("0", "warned"), ("false", "warned"), ("No", "warned"), ("off", "warned"), ("", "warned"),
])
def test_strict_mode_accepts_the_usual_spellings_of_true_and_false(value: str, outcome: str) -> None:
    env = {**os.environ, "LLM_DATADIST_FFI_STRICT": value}
    done = subprocess.run([sys.executable, "-c", STRICT_PROBE], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[0] == outcome


def test_strict_mode_refuses_a_value_it_cannot_read_as_the_backend_variable_does(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from llm_datadist_ffi import lint

    monkeypatch.setenv("LLM_DATADIST_FFI_STRICT", "maybe")
    with pytest.raises(ValueError, match=r"^LLM_DATADIST_FFI_STRICT='maybe' is not a truth value; valid values are "
                                         r"1, true, yes, on \(strict\) and 0, false, no, off or empty \(not strict\), "
                                         r"in any case$"):
        lint.strict()
    env = {**os.environ, "LLM_DATADIST_FFI_STRICT": "maybe"}
    info = command("info", env=env)
    assert info.returncode == 1
    assert "LLM_DATADIST_FFI_STRICT='maybe' is not a truth value" in info.stderr, info.stderr


@pytest.mark.mock_only(reason="the mock engine reads LLM_DATADIST_FFI_STRICT for the lints only it sees")
@pytest.mark.parametrize("value, refused", [("yes", True), ("TRUE", True), ("on", True), ("off", False), ("0", False)])
def test_the_mock_engine_reads_the_same_spellings(monkeypatch: pytest.MonkeyPatch, value: str, refused: bool) -> None:
    import warnings

    import numpy as np

    from llm_datadist_ffi import LLMException, native
    from llm_datadist_ffi.data_type import GeDataType

    monkeypatch.setenv("LLM_DATADIST_FFI_STRICT", value)
    engine = native.LlmDataDist(7, native.LlmRole.DECODER)
    engine.initialize({native.OPTION_DEVICE_ID: "0"})
    try:
        memory = np.zeros(8, np.uint8)
        # 15 int4 elements over 3 batches: 7.5 bytes, a stride the engine rounds down (PR-17, an engine lint)
        desc = native.CacheDesc(1, int(GeDataType.DT_INT4), [3, 5])
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            if refused:
                with pytest.raises(LLMException):
                    engine.register_kv_cache(desc, [memory.ctypes.data])
            else:
                engine.register_kv_cache(desc, [memory.ctypes.data])
        assert [str(w.category.__name__) for w in caught] == ([] if refused else ["StrideRoundedDownWarning"])
    finally:
        engine.finalize()


# -- item 17: the alias's names ---------------------------------------------------------

VENDOR_ALL = {
    "LLMClusterInfo", "LLMStatusCode", "LLMException", "LLMRole", "LlmConfig", "LLMConfig", "DataType", "Status",
    "CacheDesc", "CacheKey", "CacheKeyByIdAndIndex", "KvCache", "Cache", "BlocksCacheKey", "LLMDataDist", "Placement",
    "RegisterMemStatus", "LayerSynchronizer", "TransferConfig", "CacheTask", "TransferWithCacheKeyConfig", "Memtype",
    "MemInfo", "TensorDesc", "Tensor", "KvCacheManager",
}


def test_dir_of_the_alias_lists_the_vendors_public_names_only() -> None:
    from llm_datadist_ffi import compat

    was = compat.is_installed()
    compat.install()
    try:
        import llm_datadist
        public = {name for name in dir(llm_datadist) if not name.startswith("_")}
        # the vendor's __all__, its v2_list and its submodules, nothing of the implementation
        assert public == VENDOR_ALL | {"v2_list", "configs", "data_type", "status", "v2"}
        assert set(llm_datadist.__all__) == VENDOR_ALL
        for name in public:
            getattr(llm_datadist, name)          # every listed name resolves
    finally:
        if not was:
            compat.uninstall()


# -- item 13: documentation for a pip-installed user -----------------------------------

SHIPPED_DOCS = {"user-guide": "user-guide.md", "semantics": "semantics.md", "error-codes": "error-codes.md",
                "testing": "testing.md", "testing-tools": "testing-tools.md",
                "testing-your-connector": "testing-your-connector.md"}


def test_the_docs_command_lists_the_user_documents_and_prints_one() -> None:
    listed = command("docs")
    assert listed.returncode == 0, listed.stderr
    names = [line.split()[0] for line in listed.stdout.splitlines() if line.strip() and not line.startswith(" ")]
    assert set(SHIPPED_DOCS) | {"native-api"} <= set(names), listed.stdout
    for name, file in SHIPPED_DOCS.items():
        shown = command("docs", name)
        assert shown.returncode == 0, shown.stderr
        assert shown.stdout == (ROOT / "docs" / file).read_text(encoding="utf-8")


def test_a_misspelt_page_is_refused_with_the_closest_name() -> None:
    done = command("docs", "user-guid")
    assert done.returncode == 2 and "did you mean 'user-guide'?" in done.stderr, done.stderr


def test_the_metadata_carries_project_urls_and_no_registry_host() -> None:
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    section = re.search(r"^\[project\.urls\]\n(.*?)(?=^\[|\Z)", text, re.M | re.S)
    assert section is not None
    urls = re.findall(r'^\s*"?[^=\n]+"?\s*=\s*"(https://[^"]+)"', section.group(1), re.M)
    assert urls and not any(host in url for url in urls for host in ("pypi", "python.org"))


@pytest.mark.slow
def test_the_wheel_carries_the_user_documents(tmp_path: Path) -> None:
    import shutil
    import zipfile

    # a copy of the tree: building leaves build/ and an egg-info where it builds
    source = tmp_path / "source"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(".git", "build", "*.egg-info", "_lib", ".*cache",
                                                                 ".hypothesis", "__pycache__", ".venv*"))
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
                            "-w", str(tmp_path), str(source)], capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stderr
    wheel, = tmp_path.glob("llm_datadist_ffi-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        for file in SHIPPED_DOCS.values():
            assert archive.read(f"llm_datadist_ffi/_docs/{file}").decode() == \
                (ROOT / "docs" / file).read_text(encoding="utf-8")


# -- item 14: the testing toolkit's corners ---------------------------------------------

def test_faults_fail_refuses_an_unknown_status_code_and_names_the_closest() -> None:
    from llm_datadist_ffi import LLMStatusCode
    from llm_datadist_ffi.testing.faults import Faults

    faults = Faults()
    with pytest.raises(ValueError, match=r"^1343270999 \(0x5010B057\) is not a status code of the table"):
        faults.fail("pull_blocks", 0x5010B057)
    with pytest.raises(ValueError, match=r"^unknown status code name 'LLM_TIMEOUTT'.*did you mean 'LLM_TIMEOUT'\?"):
        faults.fail("pull_blocks", "LLM_TIMEOUTT")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"did you mean 'pull_blocks'\?"):
        faults.fail("pul_blocks", LLMStatusCode.LLM_TIMEOUT)
    with pytest.raises(TypeError, match="a status code is an int or a str"):
        faults.fail("pull_blocks", 1.5)  # type: ignore[arg-type]


@pytest.mark.mock_only(reason="faults are the mock's")
def test_faults_fail_takes_a_status_name_too() -> None:
    from llm_datadist_ffi.testing.faults import Faults

    faults = Faults()
    try:
        assert faults.fail("pull_blocks", "LLM_TIMEOUT") == ("lldd_ext_pull",)  # type: ignore[arg-type]
    finally:
        faults.clear()


def test_the_connector_guide_names_each_fault_parameter_as_the_code_does() -> None:
    import inspect

    from llm_datadist_ffi.testing.faults import Faults

    guide = (ROOT / "docs" / "testing-your-connector.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| `faults\.(\w+)\(([^)]*)\)`", guide, re.M)
    assert {name for name, _ in rows} >= {"fail", "delay", "drop_links", "stop", "kill"}
    for name, params in rows:
        written = [p.split("=")[0].strip() for p in params.split(",") if p.strip() and p.strip() != "..."]
        actual = [p for p in inspect.signature(getattr(Faults, name)).parameters if p != "self"]
        assert written == actual[:len(written)], (name, written, actual)


def test_the_connector_guide_documents_peers_and_info_for() -> None:
    import dataclasses

    from llm_datadist_ffi import status
    from llm_datadist_ffi.testing.topology import PeerAddress

    guide = (ROOT / "docs" / "testing-your-connector.md").read_text(encoding="utf-8")
    peers = guide[guide.index("`here().peers`"):][:600]
    for field in dataclasses.fields(PeerAddress):
        assert f"`{field.name}`" in peers, field.name
    assert "`llm_datadist_ffi.status.info_for(code)`" in guide
    info = guide[guide.index("`llm_datadist_ffi.status.info_for(code)`"):][:900]
    documented = re.findall(r"`\.(\w+)`", info)
    assert len(documented) >= 5
    row = status.info_for("LLM_TIMEOUT")
    for attribute in documented:
        getattr(row, attribute)


# -- item 15: the command line -----------------------------------------------------------

def test_version() -> None:
    import llm_datadist_ffi

    done = command("--version")
    assert (done.returncode, done.stdout) == (0, f"llm_datadist_ffi {llm_datadist_ffi.__version__}\n")


@pytest.mark.parametrize("args, suggestion", [
    (["errros"], "did you mean 'errors'?"),
    (["tarce", "summary", "x"], "did you mean 'trace'?"),
    (["errors", "LLM_TIMEOUTT"], "did you mean 'LLM_TIMEOUT'?"),
    (["errors", "PARAM_INVALD"], "did you mean 'LLM_PARAM_INVALID'?"),
])
def test_a_misspelt_name_gets_the_closest_one(args: List[str], suggestion: str) -> None:
    done = command(*args)
    assert done.returncode == 2 and suggestion in done.stderr, done.stderr


SMALLEST_BENCH = ["bench", "--sizes", "4K", "--paths", "in-process", "--memory", "user", "--repeat", "1",
                  "--threads", "1", "--calls", "1", "--list-blocks", "1"]


@pytest.mark.mock_only(reason="bench runs the mock")
def test_bench_refuses_bytes_below_two_blocks_per_tensor() -> None:
    done = command(*SMALLEST_BENCH, "--bytes", "16383", "--tensors", "2")
    assert done.returncode == 2 and done.stdout == "", done.stdout
    assert done.stderr.strip().splitlines()[-1] == (
        "python -m llm_datadist_ffi bench: error: argument --bytes: 16383 is below the minimum of these "
        "settings, 2 blocks of 4 KiB for each of 2 tensors: 16384 bytes (give --bytes 16K or more, or smaller "
        "--sizes or --tensors)")


@pytest.mark.mock_only(reason="bench runs the mock")
def test_bench_says_how_long_it_will_take_and_shows_progress() -> None:
    done = command(*SMALLEST_BENCH, "--bytes", "16K")
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert re.fullmatch(r"bench: 4 transfer rows at 1 block size, 1 per-call row, 2 block-list rows, best of 1; "
                        r"expect about \d+ s( \(\d+ min\))?", lines[0]), lines
    assert re.fullmatch(r"bench \[1/2\] 4 KiB blocks: done after \d+ s; about \d+ s left", lines[1]), lines
    assert re.fullmatch(r"bench \[2/2\] block lists: done after \d+ s", lines[2]), lines
    assert len(lines) == 3
    assert "NOT MET" not in done.stdout


def test_a_goal_short_of_its_target_is_worded_as_a_figure_not_a_failure() -> None:
    from llm_datadist_ffi._tools import _bench_report

    goal = {"goal": "4. threads pulling disjoint blocks", "target": ">= 1.5x", "measured": "0.23x", "status": "not met",
            "note": ""}
    assert _bench_report.goal_line(goal) == ("- 4. threads pulling disjoint blocks: target >= 1.5x; measured 0.23x: "
                                             "short of the target on this machine")


# -- item 16: registration ---------------------------------------------------------------

@pytest.fixture
def native_engine() -> Iterator[object]:
    from llm_datadist_ffi import native

    engine = native.LlmDataDist(9, native.LlmRole.DECODER)
    engine.initialize({native.OPTION_DEVICE_ID: "0"})
    try:
        yield engine
    finally:
        engine.finalize()


def test_a_strided_view_is_refused_with_advice_that_keeps_transfers_current(native_engine: object) -> None:
    import numpy as np

    from llm_datadist_ffi import native

    rows = np.zeros((8, 64), np.uint8)
    desc = native.CacheDesc(1, native.DataType.DT_UINT8, [4, 64])
    with pytest.raises(ValueError) as info:
        native_engine.register_kv_cache(desc, [rows[::2]])  # type: ignore[attr-defined]
    text = str(info.value)
    assert "register that copy" not in text
    assert "the model must write into the registered memory" in text and "a copy" in text


@pytest.mark.rules("PR-43")
@pytest.mark.parametrize("dtype, lints", [("int16", True), ("uint16", True), ("float16", False), ("uint8", False),
                                          ("float32", False)])
def test_an_array_of_another_dtype_of_the_same_size_gets_a_lint_native(native_engine: object, dtype: str,
                                                                       lints: bool) -> None:
    import warnings

    import numpy as np

    from llm_datadist_ffi import lint, native

    desc = native.CacheDesc(1, native.DataType.DT_FLOAT16, [4, 16])          # 128 bytes
    memory = np.zeros(128 // np.dtype(dtype).itemsize, dtype)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        native_engine.register_kv_cache(desc, [memory])  # type: ignore[attr-defined]
    got = [(w.category, str(w.message)) for w in caught]
    if lints:
        assert got == [(lint.warning_class("PR-43"),
                        f"[LlmDataDist.register_kv_cache] addrs[0] is a numpy array of dtype {dtype}, but the cache "
                        f"description says DT_FLOAT16 (float16), of the same item size (PR-43; the device: the "
                        f"memory is registered as it is; its bytes are read as the description's data type)")]
    else:
        assert got == []


@pytest.mark.mock_only(reason="the vendor-compatible API runs on the mock only (docs/ascend.md)")
@pytest.mark.rules("PR-43")
def test_an_array_of_another_dtype_of_the_same_size_gets_a_lint_vendor_and_strict_refuses(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import warnings

    import numpy as np

    from llm_datadist_ffi import LLMException, LLMStatusCode, lint
    from llm_datadist_ffi.vendor import CacheDesc, DataType, LLMConfig, LLMDataDist, LLMRole

    monkeypatch.delenv("LLM_DATADIST_FFI_STRICT", raising=False)
    config = LLMConfig()
    config.device_id = 0
    config.enable_cache_manager = True
    dist = LLMDataDist(LLMRole.DECODER, 11)
    dist.init(config.generate_options())
    try:
        desc = CacheDesc(1, [4, 16], DataType.DT_INT32)
        memory = np.zeros(64, np.float32)
        with pytest.warns(lint.warning_class("PR-43"), match=r"dtype float32, but the cache description says "
                                                              r"DT_INT32 \(int32\)"):
            cache = dist.cache_manager.register_cache(desc, [memory])
        dist.cache_manager.unregister_cache(cache.cache_id)
        monkeypatch.setenv("LLM_DATADIST_FFI_STRICT", "1")
        with pytest.raises(LLMException) as info:
            dist.cache_manager.register_cache(desc, [memory])
        assert info.value.status_code == LLMStatusCode.LLM_PARAM_INVALID and "(PR-43;" in str(info.value)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            cache = dist.cache_manager.register_cache(desc, [np.zeros(64, np.int32)])
        dist.cache_manager.unregister_cache(cache.cache_id)
    finally:
        dist.finalize()


# -- item 15: a pull's message names the destination -----------------------------------

@pytest.mark.mock_only(reason="the vendor-compatible API runs on the mock only (docs/ascend.md)")
@pytest.mark.parametrize("manager", ["cache_manager", "kv_cache_manager"])
def test_a_pulls_source_range_too_long_for_the_destination_names_the_destination(manager: str) -> None:
    import numpy as np

    from llm_datadist_ffi import LLMException, LLMStatusCode
    from llm_datadist_ffi.vendor import BlocksCacheKey, CacheDesc, DataType, LLMConfig, LLMDataDist, LLMRole

    config = LLMConfig()
    config.device_id = 0
    config.enable_cache_manager = manager == "cache_manager"
    dist = LLMDataDist(LLMRole.DECODER, 12)
    dist.init(config.generate_options())
    try:
        memory = [np.zeros((4, 16), np.uint8) for _ in range(4)]
        desc = CacheDesc(4, [4, 16], DataType.DT_UINT8)
        if manager == "cache_manager":
            cache = dist.cache_manager.register_blocks_cache(desc, [m.ctypes.data for m in memory])
            pull = dist.cache_manager.pull_blocks
        else:
            cache = dist.kv_cache_manager.allocate_blocks_cache(desc)
            pull = dist.kv_cache_manager.pull_blocks
        with pytest.raises(LLMException) as info:
            pull(BlocksCacheKey(1, 0), cache, [0], [0], src_layer_range=range(0, 4), tensor_num_per_layer=2)
        assert info.value.status_code == LLMStatusCode.LLM_PARAM_INVALID
        text = str(info.value)
        assert "src_layer_range range(0, 4) selects 8 tensors (tensor_num_per_layer 2)" in text
        assert "local cache" not in text and "the destination cache has 4" in text, text
    finally:
        dist.finalize()
