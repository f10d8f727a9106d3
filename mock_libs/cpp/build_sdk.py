"""Build the C++ SDK: the vendor's C++ API and the ACL subset over the mock (docs/cpp.md).

Used by ``setup.py`` (``pip install .`` and ``pip install -e .``), by
``python -m llm_datadist_ffi sdk`` in a source checkout (built on first use), by the
fake toolkit of ``tests/vendor_double`` and by ``.ci/run``'s sanitizer stage. Standard
library only, so that it runs inside pip's isolated build environment.

    python mock_libs/cpp/build_sdk.py PREFIX --mock-lib MOCK [--sanitize]

The SDK is a prefix of its own, relocatable with the mock library beside it (the
package puts it in ``_lib/sdk`` and the mock in ``_lib``)::

    PREFIX/include/                   the project's include/ (llm_datadist/llm_datadist.h,
                                      external/graph/ascend_string.h, acl/acl.h, ...)
    PREFIX/lib/libllm_datadist.so     llm_datadist::LlmDataDist over the mock
    PREFIX/lib/libmetadef.so          ge::AscendString
    PREFIX/lib/libacl_rt.so           the ACL subset, forwarded to the mock
    PREFIX/lib/libascendcl.so         the same functions under the legacy name
    PREFIX/lib/pkgconfig/llm_datadist_mock.pc
    PREFIX/lib/cmake/LlmDataDistMock/LlmDataDistMockConfig.cmake

Every library finds the mock at its path relative to ``PREFIX/lib`` (recorded at build
time), or at ``$LLM_DATADIST_FFI_MOCK_LIB``. ``CXX`` selects the compiler.
"""
from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Sequence

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
INCLUDE = ROOT / "include"

# As the vendor builds its libraries and compiles its samples: C++17 (the header's
# anonymous-namespace constexpr needs C++11; the sources use C++17), the old libstdc++
# string ABI (no std::string crosses the API, so consumers of either ABI link), the
# class exported through ASCEND_FUNC_VISIBILITY (FUNC_VISIBILITY defined), all else hidden.
CXXFLAGS = ["-std=c++17", "-fPIC", "-shared", "-D_GLIBCXX_USE_CXX11_ABI=0", "-Wall", "-Wextra", "-Werror"]
SANITIZE = ["-fsanitize=address,undefined", "-fno-sanitize-recover=undefined", "-fno-omit-frame-pointer"]
HIDDEN = ["-fvisibility=hidden", "-DFUNC_VISIBILITY"]

PKG_NAME = "llm_datadist_mock"
CMAKE_NAME = "LlmDataDistMock"
# What a program links, in this order (docs/cpp.md): the class, AscendString (its
# constructor and operator< are called from the program's own code, so the library must
# be named), both ACL names (libacl_rt.so first: a program linked with --as-needed then
# depends on it, the name the vendor recommends), and the mock itself for its control
# functions (lldd_mock_*).
LINK_LIBS = ("llm_datadist", "metadef", "acl_rt", "ascendcl")
MOCK_LINK = "llm_datadist_mock"


def _cxx() -> list[str]:
    return shlex.split(os.environ.get("CXX", "") or "g++")


def compile_library(out: Path, sources: Sequence[Path], flags: Sequence[str], link: Sequence[str] = ()) -> Path:
    """One shared library with soname ``out.name``; raises RuntimeError with the compiler's output."""
    cmd = [*_cxx(), *flags, *map(str, sources), f"-Wl,-soname,{out.name}", "-o", str(out),
           *link, "-Wl,--no-undefined"]
    # a sanitizer runtime preloaded into the caller must not reach the compiler
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    result = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    if result.returncode != 0:
        raise RuntimeError(f"building {out.name} failed:\n{shlex.join(cmd)}\n{result.stdout}")
    return out


def build_metadef(lib_dir: Path, include_dirs: Sequence[Path], flags: Sequence[str]) -> Path:
    """``libmetadef.so``: ge::AscendString."""
    return compile_library(lib_dir / "libmetadef.so", [HERE / "ascend_string.cpp"],
                           [*flags, *(f"-I{d}" for d in include_dirs)])


def build_llm_datadist(lib_dir: Path, include_dirs: Sequence[Path], flags: Sequence[str],
                       mock_relpath: str | None = None, link: Sequence[str] = ()) -> Path:
    """``libllm_datadist.so`` in ``lib_dir`` beside its ``libmetadef.so``. Without
    ``mock_relpath`` it opens the mock as ``libacl_rt.so`` (the fake toolkit's layout)."""
    where = [f"-DLLDD_SDK_MOCK_RELPATH=\"{mock_relpath}\""] if mock_relpath else []
    return compile_library(
        lib_dir / "libllm_datadist.so",
        [HERE / "llm_datadist.cpp", HERE / "sdk_mock.cpp", HERE / "sdk_report.cpp"],
        [*flags, *HIDDEN, *where, *(f"-I{d}" for d in include_dirs), f"-I{INCLUDE}", f"-I{HERE}"],
        [f"-L{lib_dir}", "-lmetadef", *link, "-ldl", "-pthread"])


def build_acl(lib_dir: Path, name: str, flags: Sequence[str], mock_relpath: str) -> Path:
    """``libacl_rt.so`` or ``libascendcl.so``: the ACL subset forwarded to the mock."""
    return compile_library(
        lib_dir / name, [HERE / "acl_forward.cpp", HERE / "sdk_mock.cpp"],
        [*flags, *HIDDEN, f"-DLLDD_SDK_MOCK_RELPATH=\"{mock_relpath}\"", f"-I{INCLUDE}", f"-I{HERE}"], ["-ldl"])


def _version() -> str:
    text = (ROOT / "llm_datadist_ffi" / "__init__.py").read_text(encoding="utf-8")
    found = re.search(r'^__version__ = "([^"]+)"', text, flags=re.M)
    return found.group(1) if found else "0"


def _pkg_config(mock_rel_to_prefix: str) -> str:
    libs = " ".join(f"-l{name}" for name in LINK_LIBS)
    return f"""\
# The llm_datadist_ffi C++ SDK: the vendor's LLM-DataDist C++ API and ACL subset over the
# mock (docs/cpp.md). Relocatable: every path is relative to this file.
prefix=${{pcfiledir}}/../..
libdir=${{prefix}}/lib
includedir=${{prefix}}/include
mockdir=${{prefix}}/{mock_rel_to_prefix}

Name: {PKG_NAME}
Description: LLM-DataDist C++ API and ACL runtime subset over the llm_datadist_ffi mock
Version: {_version()}
Cflags: -I${{includedir}} -I${{includedir}}/external
Libs: -L${{libdir}} -Wl,-rpath,${{libdir}} {libs} -L${{mockdir}} -Wl,-rpath,${{mockdir}} -l{MOCK_LINK}
"""


def _cmake_config(mock_rel_to_prefix: str) -> str:
    imported = "\n".join(
        f"""if(NOT TARGET {CMAKE_NAME}::{name})
  add_library({CMAKE_NAME}::{name} SHARED IMPORTED)
  set_target_properties({CMAKE_NAME}::{name} PROPERTIES IMPORTED_LOCATION "{location}/lib{name}.so")
endif()"""
        for name, location in [*((n, "${_lldd_prefix}/lib") for n in LINK_LIBS), (MOCK_LINK, "${_lldd_mockdir}")])
    targets = ";".join(f"{CMAKE_NAME}::{name}" for name in (*LINK_LIBS, MOCK_LINK))
    return f"""\
# find_package({CMAKE_NAME}) for the llm_datadist_ffi C++ SDK (docs/cpp.md).
# Gives the imported targets {CMAKE_NAME}::llm_datadist, ::metadef, ::ascendcl, ::acl_rt,
# ::{MOCK_LINK} (the mock's control functions), and {CMAKE_NAME}::sdk, which carries
# them all and both include directories. Relocatable: paths are relative to this file.
get_filename_component(_lldd_prefix "${{CMAKE_CURRENT_LIST_DIR}}/../../.." ABSOLUTE)
get_filename_component(_lldd_mockdir "${{_lldd_prefix}}/{mock_rel_to_prefix}" ABSOLUTE)
set({CMAKE_NAME}_VERSION "{_version()}")
set({CMAKE_NAME}_INCLUDE_DIRS "${{_lldd_prefix}}/include" "${{_lldd_prefix}}/include/external")
{imported}
if(NOT TARGET {CMAKE_NAME}::sdk)
  add_library({CMAKE_NAME}::sdk INTERFACE IMPORTED)
  set_target_properties({CMAKE_NAME}::sdk PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "${{{CMAKE_NAME}_INCLUDE_DIRS}}"
    INTERFACE_LINK_LIBRARIES "{targets}")
endif()
set({CMAKE_NAME}_FOUND TRUE)
"""


def build(prefix: Path, mock_lib: Path, sanitize: bool = False) -> Path:
    """Build the SDK into ``prefix`` (replaced) for the mock library ``mock_lib``; returns ``prefix``."""
    prefix = Path(prefix).resolve()
    mock_lib = Path(mock_lib).resolve()
    if mock_lib.name != f"lib{MOCK_LINK}.so":
        raise ValueError(f"the mock library must be named lib{MOCK_LINK}.so, not {mock_lib.name}")
    scratch = prefix.with_name(f"{prefix.name}.build-{os.getpid()}")
    shutil.rmtree(scratch, ignore_errors=True)
    lib_dir = scratch / "lib"
    lib_dir.mkdir(parents=True)
    shutil.copytree(INCLUDE, scratch / "include")
    relpath = os.path.relpath(mock_lib, prefix / "lib")
    flags = [*CXXFLAGS, *(["-O1", "-g", *SANITIZE] if sanitize else ["-O2", "-g"])]
    includes = [INCLUDE, INCLUDE / "external"]
    with ThreadPoolExecutor(max_workers=2) as pool:   # the ACL libraries need nothing else
        acl = [pool.submit(build_acl, lib_dir, name, flags, relpath) for name in ("libacl_rt.so", "libascendcl.so")]
        build_metadef(lib_dir, includes, flags)
        build_llm_datadist(lib_dir, includes, flags, relpath)
        for job in acl:
            job.result()
    mock_rel_to_prefix = os.path.relpath(mock_lib.parent, prefix)
    (lib_dir / "pkgconfig").mkdir()
    (lib_dir / "pkgconfig" / f"{PKG_NAME}.pc").write_text(_pkg_config(mock_rel_to_prefix), encoding="utf-8")
    cmake_dir = lib_dir / "cmake" / CMAKE_NAME
    cmake_dir.mkdir(parents=True)
    (cmake_dir / f"{CMAKE_NAME}Config.cmake").write_text(_cmake_config(mock_rel_to_prefix), encoding="utf-8")
    if prefix.exists():
        shutil.rmtree(prefix)
    os.replace(scratch, prefix)
    return prefix


def sources() -> list[Path]:
    """What the SDK is built from (a newer file means a stale SDK)."""
    return [*HERE.glob("*.[ch]*"), Path(__file__).resolve(), *INCLUDE.rglob("*.h")]


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("prefix", type=Path)
    ap.add_argument("--mock-lib", type=Path, required=True, help="the mock library the SDK forwards to")
    ap.add_argument("--sanitize", action="store_true", help="ASan/UBSan builds of the SDK's libraries")
    args = ap.parse_args(argv)
    print(build(args.prefix, args.mock_lib, sanitize=args.sanitize))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
