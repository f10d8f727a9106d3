"""Backend selection and loading (docs/design.md, "Backend selection"), each case in a fresh interpreter."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

import llm_datadist_ffi


def run_python(code: str, keep_backend: bool = False, **env_overrides: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter; without ``keep_backend`` the backend variables
    of this process are removed first, so the child starts from a plain machine."""
    env = {k: v for k, v in os.environ.items()
           if keep_backend or k not in ("LLM_DATADIST_FFI_BACKEND", "ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME")}
    env.update(env_overrides)
    # Never run in the source tree: '' on sys.path would shadow the installed package.
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          cwd=tempfile.gettempdir(), timeout=120)


def test_an_unknown_backend_name_is_an_import_error_listing_the_valid_values() -> None:
    result = run_python("import llm_datadist_ffi.native", LLM_DATADIST_FFI_BACKEND="cuda")
    assert result.returncode == 1
    assert "ImportError: LLM_DATADIST_FFI_BACKEND='cuda' is not a backend; valid values are mock, ascend, auto" \
        in result.stderr


def test_ascend_without_a_toolkit_says_what_is_missing() -> None:
    result = run_python("import llm_datadist_ffi.native", LLM_DATADIST_FFI_BACKEND="ascend")
    assert result.returncode == 1
    assert "neither ASCEND_HOME_PATH nor ASCEND_TOOLKIT_HOME is set" in result.stderr
    assert "set_env.sh" in result.stderr


def test_ascend_with_a_toolkit_but_no_shim_never_falls_back_to_the_mock(tmp_path: Path) -> None:
    result = run_python("import llm_datadist_ffi.native", LLM_DATADIST_FFI_BACKEND="ascend",
                        ASCEND_HOME_PATH=str(tmp_path),
                        LLM_DATADIST_FFI_SHIM_LIB=str(tmp_path / "missing_shim.so"))
    assert result.returncode == 1
    assert "ImportError" in result.stderr and "was not built" in result.stderr


def test_auto_without_a_toolkit_picks_the_mock_silently() -> None:
    result = run_python("import llm_datadist_ffi as m; print(m.backend)")
    assert result.returncode == 0
    assert result.stdout == "mock\n"
    assert result.stderr == ""


def test_backend_names_are_case_insensitive_and_trimmed() -> None:
    result = run_python("import llm_datadist_ffi as m; print(m.backend)", LLM_DATADIST_FFI_BACKEND=" Mock ")
    assert (result.returncode, result.stdout) == (0, "mock\n")


def test_the_errors_command_works_when_no_backend_can_load() -> None:
    result = run_python("import runpy, sys; sys.argv = ['x', 'errors', '0x5010B005'];"
                        "runpy.run_module('llm_datadist_ffi', run_name='__main__')",
                        LLM_DATADIST_FFI_BACKEND="nonsense")
    assert result.returncode == 0, result.stderr
    assert "LLM_PARAM_INVALID" in result.stdout


def test_a_library_of_another_abi_version_is_rejected_with_a_fix(tmp_path: Path) -> None:
    cc = shutil.which("cc") or shutil.which("gcc")
    assert cc is not None
    source = tmp_path / "old.c"
    source.write_text("unsigned lldd_abi_version(void) { return 99; }\n")
    lib = tmp_path / "libold.so"
    # the compiler is not under test: without the sanitizer runtime a CI stage preloads
    compiler_env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    subprocess.run([cc, "-shared", "-fPIC", str(source), "-o", str(lib)], check=True, env=compiler_env)
    # the child loads no mock, only this stand-in, so it runs without the sanitizer runtime
    # a CI stage preloads: LeakSanitizer's exit-time check crashed in it (3 of 3 CI runs)
    result = run_python("import llm_datadist_ffi.native", LLM_DATADIST_FFI_BACKEND="mock",
                        LLM_DATADIST_FFI_MOCK_LIB=str(lib), LD_PRELOAD="")
    assert result.returncode == 1
    assert "implements C ABI version 99" in result.stderr and "built for version 1" in result.stderr
    assert "pip install ." in result.stderr


def test_a_missing_mock_library_is_an_import_error_saying_how_to_build_it(tmp_path: Path) -> None:
    result = run_python("import llm_datadist_ffi.native", LLM_DATADIST_FFI_BACKEND="mock",
                        LLM_DATADIST_FFI_MOCK_LIB=str(tmp_path / "nothing.so"))
    assert result.returncode == 1
    assert "mock backend library" in result.stderr and "pip install ." in result.stderr


def test_info_names_the_backend_libraries_abi_and_capabilities() -> None:
    result = run_python("import runpy, sys; sys.argv = ['x', 'info', '--json'];"
                        "runpy.run_module('llm_datadist_ffi', run_name='__main__')", keep_backend=True)
    assert result.returncode == 0, result.stderr

    info = json.loads(result.stdout)
    expected_backend = llm_datadist_ffi.backend
    assert info["backend"] == expected_backend == info["backend_name"]
    assert info["abi_version"] == 1
    assert Path(info["llm_datadist_library"]).is_file()
    assert set(info["capabilities"]) == {"register", "allocate", "copy", "cross_process", "mock_control",
                                         "ext_keys"}
    if expected_backend == "mock":
        assert info["capabilities"]["mock_control"] is True
        assert info["acl_version"] == "1.17.0"


@pytest.mark.parametrize("command", ["info", "errors LLM_TIMEOUT"])
def test_the_cli_runs_as_a_module(command: str) -> None:
    result = subprocess.run([sys.executable, "-m", "llm_datadist_ffi", *command.split()], capture_output=True,
                            text=True, cwd=tempfile.gettempdir(), timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() != ""
