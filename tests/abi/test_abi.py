"""ABI guards: what cffi declares is what the C side compiles and exports.

The declarations come from the header fragments (one source); these tests make sure
that the libraries really export every declared function, and that the C compiler
and cffi agree on every struct's size and field offsets and on every constant.
"""
from __future__ import annotations

import ctypes
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

import llm_datadist_ffi
from llm_datadist_ffi import _capi, _cdef, mock_control
from llm_datadist_ffi._loader import const, ffi, lldd_lib, loaded

INCLUDE = _cdef.include_dir()
REPO = Path(__file__).resolve().parents[2]


def declared_functions(fragment: str) -> list[str]:
    text = (INCLUDE / fragment).read_text()
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    names = []
    for statement in text.split(";"):
        statement = " ".join(statement.split())
        if "(" not in statement or statement.startswith(("typedef", "enum", "struct")) or "{" in statement:
            continue
        names.append(re.search(r"(\w+)\s*\(", statement).group(1))  # type: ignore[union-attr]
    return names


def test_fragments_declare_the_expected_number_of_functions() -> None:
    # A parser that silently found nothing would make the export test vacuous.
    assert len(declared_functions("lldd/api.h")) == 21
    assert len(declared_functions("lldd/ext.h")) == 18
    assert len(declared_functions("acl/api.h")) == 24
    assert len(declared_functions("lldd/mock.h")) == 19      # lint record, link reasons, paths (link, last transfer), link model, bytes, bench floor


@pytest.mark.parametrize("fragment", ["lldd/api.h", "lldd/ext.h", "lldd/mock.h", "acl/api.h"])
def test_every_declared_function_is_exported(fragment: str) -> None:
    if llm_datadist_ffi.backend != "mock" and fragment not in ("lldd/api.h", "lldd/ext.h"):
        lib_path = loaded.acl_path if fragment == "acl/api.h" else None
        if lib_path is None:
            pytest.skip("the ascend shim does not export the mock control interface (by design)")
    else:
        lib_path = loaded.lldd_path
    lib = ctypes.CDLL(lib_path)
    missing = [name for name in declared_functions(fragment) if not hasattr(lib, name)]
    assert missing == []


def _struct_fields(name: str) -> list[str]:
    return [field for field, _ in ffi.typeof(name).fields]


STRUCTS = ["lldd_option", "lldd_ip_info", "lldd_cluster_info", "lldd_cache_desc", "lldd_cache",
           "lldd_cache_index", "lldd_ext_param", "lldd_key"]


@pytest.fixture(scope="module")
def c_layout(tmp_path_factory: pytest.TempPathFactory) -> dict[str, int]:
    """sizeof/offsetof/constant values as the C compiler sees them."""
    cc = shutil.which("cc") or shutil.which("gcc")
    assert cc is not None, "a C compiler is needed for the ABI layout test"
    lines = ['#include <stdio.h>', '#include <stddef.h>', '#include "llm_datadist_ffi_mock.h"',
             '#include "acl_subset.h"', "int main(void) {"]
    for struct in STRUCTS:
        lines.append(f'printf("sizeof {struct} %zu\\n", sizeof({struct}));')
        for field in _struct_fields(struct):
            lines.append(f'printf("offsetof {struct}.{field} %zu\\n", offsetof({struct}, {field}));')
    for name in _integer_constants():
        lines.append(f'printf("const {name} %lld\\n", (long long)({name}));')
    lines += ["return 0;", "}"]
    work = tmp_path_factory.mktemp("abi")
    source = work / "layout.c"
    source.write_text("\n".join(lines))
    exe = work / "layout"
    # the compiler is not under test: without the sanitizer runtime a CI stage preloads
    # (LeakSanitizer would fail it for the compiler's own leaks)
    compiler_env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    subprocess.run([cc, "-std=c11", "-Wall", "-Werror", f"-I{INCLUDE}", str(source), "-o", str(exe)], check=True,
                   env=compiler_env)
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout
    return {key: int(value) for key, value in (line.rsplit(" ", 1) for line in out.splitlines())}


def _integer_constants() -> list[str]:
    names = []
    for fragment in _cdef.LLDD_FRAGMENTS + _cdef.ACL_FRAGMENTS:
        text = re.sub(r"/\*.*?\*/", "", (INCLUDE / fragment).read_text(), flags=re.S)
        for body in re.findall(r"enum\s*\w*\s*\{(.*?)\}", text, flags=re.S):
            names += re.findall(r"(\w+)\s*=", body)
    return names


def test_constants_are_found() -> None:
    names = _integer_constants()
    assert "LLM_PARAM_INVALID" in names and "ACL_ERROR_RT_DEVICE_MEM_ERROR" in names
    # lldd: 30 statuses + ABI version + 3 roles + 2 placements + 6 capabilities + 3 key kinds
    # + 2 cache kinds + 3 register-memory states; the mock's 5 transfer paths;
    # ACL: 8 memcpy kinds + 11 policies + 18 memory attributes + 25 general + 18 runtime codes.
    assert len(names) == 50 + 5 + 80


def test_struct_sizes_agree_between_cffi_and_c(c_layout: dict[str, int]) -> None:
    for struct in STRUCTS:
        assert ffi.sizeof(struct) == c_layout[f"sizeof {struct}"], struct


def test_struct_field_offsets_agree_between_cffi_and_c(c_layout: dict[str, int]) -> None:
    for struct in STRUCTS:
        for field in _struct_fields(struct):
            assert ffi.offsetof(struct, field) == c_layout[f"offsetof {struct}.{field}"], f"{struct}.{field}"


def test_constants_agree_between_cffi_and_c(c_layout: dict[str, int]) -> None:
    for name in _integer_constants():
        # C prints through long long: an unsigned 0xFFFFFFFF enumerator stays positive.
        assert const(name) == c_layout[f"const {name}"], name


def test_status_values_are_the_vendor_values() -> None:
    # Literal values from docs/reference/status-codes.md §2, as an independent check of the header.
    assert const("LLM_FAILED") == 0xFFFFFFFF
    assert const("LLM_PARAM_INVALID") == 0x5010B005
    assert const("LLM_OUT_OF_MEMORY") == 0x5010B01C


def test_abi_version_of_library_matches_headers() -> None:
    from llm_datadist_ffi import _capi
    assert _capi.lldd_abi_version() == const("LLDD_ABI_VERSION") == 1


# Declared functions that cannot fail with a status: version and capability queries,
# text getters, and the calls that release (the vendor's Finalize returns nothing).
NEVER_FAILING = ("lldd_abi_version", "lldd_capabilities", "lldd_backend_name", "lldd_last_error",
                 "lldd_destroy", "lldd_finalize", "aclGetRecentErrMsg", "aclrtGetSocName")


def fallible_functions() -> list[str]:
    declared = declared_functions("lldd/api.h") + declared_functions("lldd/ext.h") + declared_functions("acl/api.h")
    return [name for name in declared if name not in NEVER_FAILING]


def mock_fault_names() -> list[str]:
    """The names of the mock's fault table (k_fault_names in mock_libs/faults.c)."""
    text = (REPO / "mock_libs" / "faults.c").read_text()
    table = re.search(r"k_fault_names\[\] = \{(.*?)\};", text, flags=re.S)
    assert table is not None, "mock_libs/faults.c has no k_fault_names table"
    return re.findall(r'"(\w+)"', table.group(1))


def test_the_fault_table_names_exactly_the_functions_that_can_fail() -> None:
    names = mock_fault_names()
    assert len(names) == len(set(names)) == 15 + 18 + 22
    assert sorted(names) == sorted(fallible_functions())


@pytest.mark.mock_only(reason="fault injection is part of the mock's control interface")
def test_every_failing_function_can_be_given_an_injected_fault() -> None:
    try:
        for name in fallible_functions():
            mock_control.inject_fault(name, 0x5010B005, count=0)
    finally:
        mock_control.clear_faults()


@pytest.mark.mock_only(reason="fault injection is part of the mock's control interface")
@pytest.mark.parametrize("name", [n for n in fallible_functions() if n.startswith("lldd_")])
def test_an_injected_fault_is_what_the_function_returns_first(name: str) -> None:
    # Arguments are all NULL or zero: the fault is answered before any of them is read.
    # (tests/acl/test_acl.py makes every ACL function of the table fail the same way.)
    function = getattr(lldd_lib, name)
    args = [ffi.NULL if arg.kind == "pointer" else 0 for arg in ffi.typeof(function).args]
    with mock_control.fault(name, 0x5010B01A, count=1):
        assert function(*args) == 0x5010B01A
        assert _capi.last_error() == f"{name}: injected fault, status 0x5010B01A"


@pytest.mark.mock_only(reason="fault injection is part of the mock's control interface")
@pytest.mark.parametrize("name", NEVER_FAILING)
def test_a_function_that_cannot_fail_takes_no_injected_fault(name: str) -> None:
    with pytest.raises(llm_datadist_ffi.LLMException, match="is not a function that can fail"):
        mock_control.inject_fault(name, 0x5010B005)


@pytest.mark.mock_only(reason="fault injection is part of the mock's control interface")
def test_injecting_a_fault_into_an_unknown_function_is_rejected() -> None:
    with pytest.raises(llm_datadist_ffi.LLMException) as info:
        mock_control.inject_fault("lldd_no_such_function", 0x5010B005)
    assert info.value.status_code == llm_datadist_ffi.LLMStatusCode.LLM_PARAM_INVALID
    assert "lldd_no_such_function" in str(info.value)
