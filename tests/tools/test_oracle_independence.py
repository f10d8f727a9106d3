"""The oracle (tests/oracle) is independent of the package it judges: none of its
modules imports ``llm_datadist_ffi`` (or the ``llm_datadist`` name the package installs),
and the vendor's numbers it writes out by hand (``oracle.codes``) are the package's."""
from __future__ import annotations

import ast
from enum import IntEnum
from pathlib import Path

import pytest

from llm_datadist_ffi import LLMStatusCode
from llm_datadist_ffi.native import CachePlacement, GeDataType, LlmRole
from llm_datadist_ffi.vendor import LLMRole
from oracle import codes

ORACLE = Path(__file__).resolve().parents[1] / "oracle"
PACKAGE_NAMES = ("llm_datadist_ffi", "llm_datadist")


def package_imports(source: str) -> list[str]:
    """The modules of the package that ``source`` imports anywhere (top level, in a
    function, under a condition), as ``line: module``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module is not None:
            modules = [node.module]
        else:
            continue
        found += [f"{node.lineno}: {m}" for m in modules if m.split(".")[0] in PACKAGE_NAMES]
    return found


def test_the_scan_finds_imports_of_the_package_wherever_they_are() -> None:
    source = ("import os\nfrom llm_datadist_ffi import LLMStatusCode as S\n"
              "def f():\n    import llm_datadist_ffi.native\n    from llm_datadist import LLMRole\n"
              "from .model import World\nimport llm_datadist_ffi_other\n")
    assert package_imports(source) == ["2: llm_datadist_ffi", "4: llm_datadist_ffi.native", "5: llm_datadist"]


@pytest.mark.parametrize("module", sorted(p.name for p in ORACLE.glob("*.py")))
def test_no_oracle_module_imports_the_package(module: str) -> None:
    assert package_imports((ORACLE / module).read_text(encoding="utf-8")) == []


@pytest.mark.parametrize(("written", "package"), [
    (codes.LLMStatusCode, LLMStatusCode), (codes.Role, LlmRole), (codes.Role, LLMRole),
    (codes.Placement, CachePlacement), (codes.DataType, GeDataType),
], ids=["status", "native role", "vendor role", "placement", "data type"])
def test_the_numbers_written_out_in_the_oracle_are_the_packages(written: type[IntEnum], package: type[IntEnum]) -> None:
    assert {m.name: int(m) for m in written} == {m.name: int(package[m.name]) for m in written}


def test_an_oracle_status_equals_the_packages_member_and_reads_like_it() -> None:
    assert codes.LLMStatusCode.LLM_PARAM_INVALID == LLMStatusCode.LLM_PARAM_INVALID
    assert str(codes.LLMStatusCode.LLM_FAILED) == "LLMStatusCode.LLM_FAILED"
    assert {LLMStatusCode.LLM_TIMEOUT: "found"}[codes.LLMStatusCode.LLM_TIMEOUT] == "found"
