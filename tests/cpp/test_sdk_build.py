"""The C++ SDK as a product (docs/cpp.md): what ``python -m llm_datadist_ffi sdk`` prints,
the pkg-config file and the CMake package, what the libraries define and export, and
that the headers of the prefix are the project's own."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Dict, List

import pytest

from ports import free_port
from sdk_support import CPP_TESTS, ROOT, Sdk, program_env

ACL_API = ROOT / "include" / "acl" / "api.h"


def defined(lib: Path, demangle: bool = False) -> List[str]:
    nm = subprocess.run(["nm", "-D", "--defined-only", *(["-C"] if demangle else []), str(lib)],
                        capture_output=True, text=True, check=True).stdout
    return [line.split(maxsplit=2)[2] for line in nm.splitlines() if line.split()[1:2] == ["T"]]


def dirs(flags: List[str], prefix: str) -> List[str]:
    return [os.path.realpath(f[len(prefix):]) for f in flags if f.startswith(prefix)]


def test_cflags_name_both_include_directories(sdk: Sdk) -> None:
    assert dirs(sdk.cflags, "-I")[-2:] == [str((sdk.prefix / "include").resolve()),
                                           str((sdk.prefix / "include" / "external").resolve())]
    for header in ("llm_datadist/llm_datadist.h", "external/ge_common/api_error_codes.h",
                   "external/graph/ascend_string.h", "external/graph/types.h", "acl/acl.h"):
        assert (sdk.prefix / "include" / header).is_file(), header


def test_libs_name_every_library_with_an_rpath_for_each_directory(sdk: Sdk) -> None:
    names = [f[2:] for f in sdk.libs if f.startswith("-l")]
    assert names == ["llm_datadist", "metadef", "acl_rt", "ascendcl", "llm_datadist_mock"]
    rpaths = dirs([f for f in sdk.libs if f.startswith("-Wl,-rpath,")], "-Wl,-rpath,")
    assert dirs(sdk.libs, "-L") == rpaths and len(rpaths) == 2


@pytest.mark.skipif(shutil.which("pkg-config") is None, reason="needs pkg-config on PATH")
def test_pkg_config_and_the_command_line_agree(sdk: Sdk) -> None:
    env = program_env(PKG_CONFIG_PATH=str(sdk.prefix / "lib" / "pkgconfig"))
    pc = {what: subprocess.run(["pkg-config", what, "llm_datadist_mock"], env=env, capture_output=True, text=True,
                               check=True).stdout.split() for what in ("--cflags", "--libs", "--modversion")}
    import llm_datadist_ffi

    assert pc["--modversion"] == [llm_datadist_ffi.__version__]
    assert dirs(pc["--cflags"], "-I") == dirs(sdk.cflags, "-I")[-2:]
    assert dirs(pc["--libs"], "-L") == dirs(sdk.libs, "-L")
    assert [f for f in pc["--libs"] if f.startswith("-l")] == [f for f in sdk.libs if f.startswith("-l")]


@pytest.mark.skipif(shutil.which("cmake") is None, reason="needs cmake on PATH")
def test_a_cmake_project_finds_the_package_builds_and_runs(sdk: Sdk, tmp_path: Path) -> None:
    build = tmp_path / "build"
    env = program_env()
    configure = subprocess.run(["cmake", "-S", str(CPP_TESTS / "cmake_project"), "-B", str(build),
                                f"-DCMAKE_PREFIX_PATH={sdk.prefix}"], env=env, capture_output=True, text=True)
    assert configure.returncode == 0, configure.stdout + configure.stderr
    made = subprocess.run(["cmake", "--build", str(build)], env=env, capture_output=True, text=True)
    assert made.returncode == 0, made.stdout + made.stderr
    ran = subprocess.run([str(build / "conformance"), str(free_port())], env=env, capture_output=True, text=True)
    assert ran.returncode == 0 and "double check: OK" in ran.stdout, ran.stdout + ran.stderr


def acl_functions() -> List[str]:
    names = re.findall(r"^(?:aclError|const char \*)\s*(\w+)\(", ACL_API.read_text(), flags=re.M)
    assert len(names) >= 20          # a parser that found nothing would make the checks below vacuous
    return sorted(names)


@pytest.mark.parametrize("name", ["libacl_rt.so", "libascendcl.so"])
def test_both_acl_libraries_define_every_function_of_the_subset(sdk: Sdk, name: str) -> None:
    exported = set(defined(sdk.prefix / "lib" / name))
    assert exported == {*acl_functions(), "lldd_sdk_forwarded_mock"}


def test_libllm_datadist_exports_the_class_and_nothing_else(sdk: Sdk) -> None:
    exported = {re.sub(r"\(.*", "", symbol) for symbol in defined(sdk.prefix / "lib" / "libllm_datadist.so", True)}
    methods = ["LlmDataDist", "~LlmDataDist", "Initialize", "Finalize", "SetRole", "LinkLlmClusters",
               "UnlinkLlmClusters", "AllocateCache", "DeallocateCache", "PullKvCache", "PullKvBlocks", "CopyKvCache",
               "CopyKvBlocks", "PushKvCache", "PushKvBlocks", "RegisterKvCache", "UnregisterKvCache"]
    assert exported == {f"llm_datadist::LlmDataDist::{m}" for m in methods}


def test_libmetadef_defines_ascend_string_out_of_line(sdk: Sdk) -> None:
    exported = {re.sub(r"\(.*", "", s) for s in defined(sdk.prefix / "lib" / "libmetadef.so", True)}
    assert {"ge::AscendString::AscendString", "ge::AscendString::GetString", "ge::AscendString::operator<",
            "ge::AscendString::operator==", "ge::AscendString::Hash"} <= exported


def test_the_prefix_holds_the_projects_headers(sdk: Sdk) -> None:
    if os.environ.get("LLDD_SDK_PREFIX"):
        pytest.skip("a prefix built elsewhere is not compared with this checkout")
    ours: Dict[str, bytes] = {str(p.relative_to(ROOT / "include")): p.read_bytes()
                              for p in (ROOT / "include").rglob("*.h")}
    shipped = {str(p.relative_to(sdk.prefix / "include")): p.read_bytes()
               for p in (sdk.prefix / "include").rglob("*.h")}
    assert shipped == ours


def test_acl_header_compiles_as_c(sdk: Sdk, tmp_path: Path) -> None:
    source = tmp_path / "use_acl.c"
    source.write_text('#include "acl/acl.h"\nint main(void) { void *p = 0; '
                      'return aclrtMalloc(&p, 64, ACL_MEM_MALLOC_HUGE_ONLY) == ACL_ERROR_RT_CONTEXT_NULL ? 0 : 1; }\n')
    cc = os.environ.get("CC", "cc")
    built = subprocess.run([cc, "-std=c11", "-Wall", "-Wextra", "-Werror", *sdk.cflags, str(source), "-o",
                            str(tmp_path / "use_acl"), *sdk.libs], capture_output=True, text=True, env=program_env())
    assert built.returncode == 0, built.stdout + built.stderr
    # no aclrtSetDevice and no engine: the device's answer, through the forwarding library
    assert subprocess.run([str(tmp_path / "use_acl")], env=program_env()).returncode == 0
