"""C text generated from the status table: include/lldd/status.h and the shim's status
names are never stale, and the command that writes them notices and mends a drifted copy."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from llm_datadist_ffi._tools import _codegen
from llm_datadist_ffi.status import STATUS_TABLE
from llm_datadist_ffi._core._loader import acl_lib, const

REPO = Path(__file__).resolve().parents[2]
STATUS_HEADER = Path("include/lldd/status.h")
ACL_TYPES = Path("include/acl/types.h")
SHIM = Path("llm_datadist_ffi/_shim/lldd_shim.cpp")


def committed(relative: Path) -> str:
    return (REPO / relative).read_text(encoding="utf-8")


def test_the_committed_status_header_equals_the_generator_output() -> None:
    assert committed(STATUS_HEADER) == _codegen.render_status_header(), (
        f"{STATUS_HEADER} is stale; regenerate it with `{_codegen.REGENERATE_COMMAND}`"
    )


def test_the_committed_shim_status_names_equal_the_generator_output() -> None:
    shim = committed(SHIM)
    assert shim == _codegen.render_shim_source(shim, committed(ACL_TYPES)), (
        f"the status names of {SHIM} are stale; regenerate them with `{_codegen.REGENERATE_COMMAND}`"
    )


def test_the_header_says_it_is_generated_and_how_to_regenerate_it() -> None:
    header = _codegen.render_status_header()
    assert "do not edit. Regenerate with: python -m llm_datadist_ffi._tools._codegen" in header
    assert "    LLM_NOTIFY_PROMPT_UNLINK_FAILED = 0x5010B00B,\n" in header
    assert header.endswith("    LLM_OUT_OF_MEMORY               = 0x5010B01C\n};\n")


def test_the_shim_names_every_acl_runtime_code_that_cffi_reads_from_the_acl_header() -> None:
    # cffi parses the header on its own, so it is an oracle for the generator's parser.
    # ACL_ERROR_RT_FAILURE (500003) shares the prefix but is a general ACL code.
    declared = {name: int(getattr(acl_lib, name)) for name in dir(acl_lib)
                if name.startswith("ACL_ERROR_RT_") and name != "ACL_ERROR_RT_FAILURE"}
    assert dict(_codegen.acl_runtime_codes(committed(ACL_TYPES))) == declared
    assert len(declared) == 17
    region = committed(SHIM).split(_codegen.SHIM_BEGIN)[1].split(_codegen.SHIM_END)[0]
    for name, value in declared.items():
        assert f'{{{value}U, "{name}"}},' in region


def test_the_shim_names_every_llm_code_of_the_header_through_the_checked_macro() -> None:
    region = committed(SHIM).split(_codegen.SHIM_BEGIN)[1].split(_codegen.SHIM_END)[0]
    names = [line.strip()[len("LLDD_STATUS_NAME("):-2] for line in region.splitlines()
             if line.strip().startswith("LLDD_STATUS_NAME(")]
    assert len(names) == 30
    assert {name: const(name) for name in names} == {
        row.cpp_name: row.value for row in STATUS_TABLE if row.cpp_name in names}
    assert names[:3] == ["LLM_SUCCESS", "LLM_FAILED", "LLM_WAIT_PROC_TIMEOUT"]


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    for relative in (STATUS_HEADER, ACL_TYPES, SHIM):
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(REPO / relative, tmp_path / relative)
    return tmp_path


def test_check_mode_names_each_drifted_file_and_changes_nothing(
        checkout: Path, capsys: pytest.CaptureFixture[str]) -> None:
    header = checkout / STATUS_HEADER
    drifted = header.read_text(encoding="utf-8").replace("= 0x5010B01C", "= 0x5010B01D")
    header.write_text(drifted, encoding="utf-8")
    assert _codegen.main(["--check", "--root", str(checkout)]) == 1
    assert capsys.readouterr().err == (
        "include/lldd/status.h is out of date; regenerate it with: python -m llm_datadist_ffi._tools._codegen\n"
    )
    assert header.read_text(encoding="utf-8") == drifted


def test_the_command_rewrites_a_drifted_shim_table_and_then_checks_clean(
        checkout: Path, capsys: pytest.CaptureFixture[str]) -> None:
    shim = checkout / SHIM
    shim.write_text(committed(SHIM).replace('    LLDD_STATUS_NAME(LLM_TIMEOUT),\n', ""), encoding="utf-8")
    assert _codegen.main(["--root", str(checkout)]) == 0
    assert capsys.readouterr().out == "wrote llm_datadist_ffi/_shim/lldd_shim.cpp\n"
    assert shim.read_text(encoding="utf-8") == committed(SHIM)
    assert _codegen.main(["--check", "--root", str(checkout)]) == 0


def test_a_shim_source_without_the_markers_is_refused() -> None:
    without = committed(SHIM).replace(_codegen.SHIM_END, "")
    with pytest.raises(ValueError, match="must hold one"):
        _codegen.render_shim_source(without, committed(ACL_TYPES))


def test_a_directory_that_is_no_source_checkout_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _codegen.main(["--check", "--root", str(tmp_path)]) == 2
    assert "is not a source checkout" in capsys.readouterr().err
