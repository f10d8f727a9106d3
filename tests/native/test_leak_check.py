"""The ``engines`` fixture of tests/conftest.py fails a test that leaves an engine or a
mock-ACL allocation alive, and passes one that cleans up after itself."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]

LEAKY_TESTS = '''
from llm_datadist_ffi import acl, native

KEPT = []


def test_closes_what_it_makes(engines):
    engines(1)
    acl.aclrtSetDevice(0)
    acl.aclrtFree(acl.aclrtMalloc(64, 0))


def test_keeps_an_acl_allocation(engines):
    engines(1)
    acl.aclrtSetDevice(0)
    KEPT.append(acl.aclrtMalloc(64, 0))


def test_keeps_an_engine_of_its_own(engines):
    engines(1)
    KEPT.append(native.LlmDataDist(2, 1))
'''


@pytest.mark.mock_only(reason="counts the mock's live engines and allocations")
def test_the_engines_fixture_fails_a_test_that_leaks_an_engine_or_an_allocation(tmp_path: Path) -> None:
    shutil.copyfile(TESTS / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "test_leaky.py").write_text(LEAKY_TESTS, encoding="utf-8")
    # -c /dev/null: the copied conftest alone, without the project's pytest configuration.
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-c", "/dev/null",
                          "--rootdir", str(tmp_path), "-rA", str(tmp_path / "test_leaky.py")],
                         capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert "PASSED test_leaky.py::test_closes_what_it_makes" in run.stdout, run.stdout
    assert "ERROR test_leaky.py::test_keeps_an_engine_of_its_own" in run.stdout, run.stdout
    assert "ERROR test_leaky.py::test_keeps_an_acl_allocation" in run.stdout, run.stdout
    # In file order: the allocation is still there when the engine test starts.
    leaked = "AssertionError: the test leaked engines or mock-ACL allocations: "
    assert (leaked + "{'engines': 0, 'allocations': 0} before, {'engines': 0, 'allocations': 1} after"
            in run.stdout), run.stdout
    assert (leaked + "{'engines': 0, 'allocations': 1} before, {'engines': 1, 'allocations': 1} after"
            in run.stdout), run.stdout
    assert run.returncode == 1
