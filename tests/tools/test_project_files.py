"""The project's own files: one version source, the licence, the changelog, the linter.

The wheel's tag (``py3-none-<platform>``) is checked by ``.ci/run``, which builds one.
"""
from __future__ import annotations

import importlib.metadata
import re
import subprocess
import sys
from pathlib import Path

import llm_datadist_ffi

ROOT = Path(__file__).resolve().parents[2]


def _toml_section(name: str) -> str:
    """The lines of one ``[section]`` of pyproject.toml (up to the next header)."""
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    match = re.search(rf"^\[{re.escape(name)}\]\n(.*?)(?=^\[|\Z)", text, re.M | re.S)
    assert match is not None, f"pyproject.toml has no [{name}]"
    return match.group(1)


def test_the_version_is_written_once_in_the_package_and_read_by_pyproject() -> None:
    project = _toml_section("project")
    assert re.search(r"^version\s*=", project, re.M) is None
    assert 'dynamic = ["version"]' in project
    assert 'version = { attr = "llm_datadist_ffi.__version__" }' in _toml_section("tool.setuptools.dynamic")
    init = (ROOT / "llm_datadist_ffi" / "__init__.py").read_text(encoding="utf-8")
    assert re.findall(r'^__version__ = "([^"]+)"$', init, re.M) == [llm_datadist_ffi.__version__]


def test_every_folder_of_python_modules_is_a_package_that_pyproject_installs() -> None:
    # pip install . copies exactly the packages pyproject lists: a folder of modules left
    # out of the list is missing from the wheel, and one without __init__.py is only a
    # namespace package. _shim holds the build script of the C++ shim, run by setup.py.
    listed = re.search(r"^packages = \[(.*?)\]", _toml_section("tool.setuptools"), re.M | re.S)
    assert listed is not None
    packages = set(re.findall(r'"([^"]+)"', listed.group(1)))
    package_root = ROOT / "llm_datadist_ffi"
    folders = {path.parent for path in package_root.rglob("*.py")} - {package_root / "_shim"}
    found = {".".join(folder.relative_to(ROOT).parts) for folder in folders}
    assert packages == found
    assert all((folder / "__init__.py").is_file() for folder in folders)


def test_the_installed_metadata_carries_the_package_version() -> None:
    assert importlib.metadata.version("llm_datadist_ffi") == llm_datadist_ffi.__version__


def test_the_changelog_has_a_heading_for_the_current_version() -> None:
    headings = re.findall(r"^## (.+)$", (ROOT / "CHANGELOG.md").read_text(encoding="utf-8"), re.M)
    assert headings[0] == "Unreleased"
    assert llm_datadist_ffi.__version__ in headings


def test_the_licence_file_is_the_apache_licence_pyproject_declares() -> None:
    head = (ROOT / "LICENSE").read_text(encoding="utf-8").split()[:5]
    assert head == ["Apache", "License", "Version", "2.0,", "January"]
    assert 'license = { text = "Apache-2.0" }' in _toml_section("project")


def test_ci_runs_a_pinned_ruff_over_the_repository() -> None:
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert re.search(r"pip install --quiet 'ruff==\d+\.\d+\.\d+'", ci)
    assert "\nruff check .\n" in ci
    assert 'select = ["E", "F", "W"]' in _toml_section("tool.ruff.lint")


def test_the_test_helpers_are_a_package_and_the_children_still_find_them_by_name(tmp_path: Path) -> None:
    # tests/support is the package ``support`` for a program with tests/ on its path,
    # and paths.helper_env() still gives a child both folders, so ``import paths`` works
    import paths

    program = ("import support, support.paths, paths; "
               "print(support.paths.SUPPORT == paths.SUPPORT, support.__file__.endswith('__init__.py'))")
    done = subprocess.run([sys.executable, "-c", program], cwd=tmp_path, env=paths.helper_env(),
                          capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout, done.stderr) == (0, "True True\n", "")
