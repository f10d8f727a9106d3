"""The package works when it is imported from its source tree.

``python -m …`` puts the current directory first on ``sys.path``, so in the
repository's root the unbuilt source tree shadows the installed package. These tests
copy the source tree, without any built library, to a fresh directory and run the
README's commands there: the package must compile its mock into its own ``_lib/``
and work (docs/user-guide.md, "Running from the repository root").
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import pytest

from llm_datadist_ffi._core import _loader

ROOT = Path(__file__).resolve().parents[2]
LIB = Path("llm_datadist_ffi") / "_lib" / _loader.MOCK_LIB_NAME
IGNORED = shutil.ignore_patterns("_lib", "__pycache__", ".hypothesis", ".pytest_cache", "*.so", "*.egg-info")

pytestmark = pytest.mark.mock_only(reason="the source tree builds the mock backend")


def _env() -> dict[str, str]:
    """This environment without the choices of backend and library made by the caller
    (the sanitizer stage names its own mock build), so that the copy decides."""
    dropped = (_loader.BACKEND_ENV, _loader.MOCK_LIB_ENV, "LD_PRELOAD", "ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME")
    return {k: v for k, v in os.environ.items() if k not in dropped}


@pytest.fixture(scope="module")
def source_tree(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A copy of the repository's source files with no built library in it."""
    root = tmp_path_factory.mktemp("checkout") / "llm_datadist_ffi-src"
    for name in ("llm_datadist_ffi", "include", "mock_libs", "tests", "examples"):
        shutil.copytree(ROOT / name, root / name, ignore=IGNORED)
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy2(ROOT / name, root / name)
    assert not (root / LIB).exists()
    yield root


def run_in(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], cwd=root, env=_env(), capture_output=True, text=True,
                          timeout=300)


def test_info_in_the_root_of_an_unbuilt_source_tree_builds_and_loads_its_own_mock(source_tree: Path) -> None:
    result = run_in(source_tree, "-m", "llm_datadist_ffi", "info", "--json")
    assert result.returncode == 0, result.stderr
    info = json.loads(result.stdout)
    assert info["backend"] == "mock"
    assert Path(info["llm_datadist_library"]) == source_tree / LIB
    assert "Traceback" not in result.stderr


def test_python_m_pytest_runs_in_the_root_of_a_source_tree(source_tree: Path) -> None:
    result = run_in(source_tree, "-m", "pytest", "-p", "no:cacheprovider", "tests/native/test_engine_lifecycle.py",
                    "-k", "test_live_engine_count_follows_create_and_destroy")
    assert result.returncode == 0, result.stdout + result.stderr
    # conftest's report header names the package and library the run used: the copy's
    assert f"llm_datadist_ffi {source_tree / 'llm_datadist_ffi' / '__init__.py'}: backend=mock " \
        f"lldd={source_tree / LIB}" in result.stdout
    assert " 1 passed" in result.stdout.strip().splitlines()[-1]


def test_the_demo_runs_in_the_root_of_a_source_tree(source_tree: Path) -> None:
    result = run_in(source_tree, "-m", "llm_datadist_ffi", "demo", "--layers", "1", "--blocks", "8",
                    "--repeat", "1")
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip().splitlines()[-1].startswith("demo: every byte verified")


def test_a_library_older_than_any_c_source_or_header_is_stale(tmp_path: Path) -> None:
    for name in ("mock_libs/core/engine.c", "mock_libs/core/engine.h", "include/lldd/api.h"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("")
    lib = tmp_path / "lib.so"
    assert _loader._is_stale(lib, tmp_path)                 # missing
    lib.write_text("")
    now = time.time()
    for source in ("mock_libs/core/engine.c", "mock_libs/core/engine.h", "include/lldd/api.h"):
        os.utime(tmp_path / source, (now - 100, now - 100))
    os.utime(lib, (now - 50, now - 50))
    assert not _loader._is_stale(lib, tmp_path)
    for source in ("mock_libs/core/engine.h", "include/lldd/api.h"):
        os.utime(tmp_path / source, (now, now))
        assert _loader._is_stale(lib, tmp_path)
        os.utime(tmp_path / source, (now - 100, now - 100))
