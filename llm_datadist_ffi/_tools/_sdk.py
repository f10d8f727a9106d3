"""``python -m llm_datadist_ffi sdk``: where the C++ SDK is and how to build against it.

The SDK (docs/cpp.md) is the vendor's C++ API (``llm_datadist/llm_datadist.h``) and
the ACL subset (``acl/acl.h``) over the mock: headers, ``libllm_datadist.so``,
``libmetadef.so``, ``libacl_rt.so`` and ``libascendcl.so``, a pkg-config file and a
CMake package. ``pip install`` builds it into ``_lib/sdk`` of the package, beside the
mock library; in a source checkout it is built there on first use (and again when its
sources change), as the mock is.

    python -m llm_datadist_ffi sdk --cflags --libs     # g++ prog.cpp $(...) -o prog
    python -m llm_datadist_ffi sdk --prefix            # PREFIX (include/, lib/)
    python -m llm_datadist_ffi sdk --pkg-config-path   # for PKG_CONFIG_PATH
    python -m llm_datadist_ffi sdk --cmake-prefix-path # for CMAKE_PREFIX_PATH

``--libs`` carries an rpath for every directory it names, so the program runs without
``LD_LIBRARY_PATH``.
"""
from __future__ import annotations

import argparse
import fcntl
import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import List, Sequence

from ._cli import CommandError, reports_errors

_PACKAGE_DIR = Path(__file__).resolve().parent.parent      # llm_datadist_ffi/ (this file: _tools/_sdk.py)
LIB_DIR = _PACKAGE_DIR / "_lib"
PREFIX = LIB_DIR / "sdk"
MOCK_LIB = LIB_DIR / "libllm_datadist_mock.so"
LIBS = ("llm_datadist", "metadef", "acl_rt", "ascendcl")
PKG_NAME = "llm_datadist_mock"
CMAKE_NAME = "LlmDataDistMock"


class SdkError(Exception):
    """The SDK is missing and cannot be built here."""


def _build_script(root: Path) -> ModuleType:
    path = root / "mock_libs" / "cpp" / "build_sdk.py"
    spec = importlib.util.spec_from_file_location("lldd_build_sdk", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _stale(script: ModuleType) -> bool:
    marker = PREFIX / "lib" / "libllm_datadist.so"
    if not marker.is_file():
        return True
    built = marker.stat().st_mtime
    inputs: List[Path] = [*script.sources(), MOCK_LIB]
    return any(path.stat().st_mtime > built for path in inputs)


def _build_in_source_tree(root: Path) -> None:
    from .._core import _loader

    _loader._build_in_source_tree(root)              # the mock first: the SDK forwards to it
    script = _build_script(root)
    if not _stale(script):
        return
    with open(LIB_DIR / ".sdk.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)             # another process may be building it right now
        if _stale(script):
            print(f"llm_datadist_ffi: building the C++ SDK into {PREFIX} (a source checkout; done once per "
                  "change of its sources)", file=sys.stderr, flush=True)
            try:
                script.build(PREFIX, MOCK_LIB)
            except RuntimeError as exc:
                raise SdkError(str(exc)) from exc


def prefix() -> Path:
    """The SDK's prefix, built first in a source checkout when missing or stale."""
    from .._core._loader import source_checkout

    root = source_checkout()
    if root is not None:
        _build_in_source_tree(root)
    if not (PREFIX / "lib" / "libllm_datadist.so").is_file():
        raise SdkError(f"the C++ SDK is missing from {PREFIX}; reinstall the package with `pip install .`")
    return PREFIX


def cflags(where: Path) -> List[str]:
    return [f"-I{where / 'include'}", f"-I{where / 'include' / 'external'}"]


def libs(where: Path) -> List[str]:
    lib = where / "lib"
    mock_dir = MOCK_LIB.parent
    return [f"-L{lib}", f"-Wl,-rpath,{lib}", *(f"-l{name}" for name in LIBS),
            f"-L{mock_dir}", f"-Wl,-rpath,{mock_dir}", "-lllm_datadist_mock"]


@reports_errors("python -m llm_datadist_ffi sdk")
def main(argv: Sequence[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m llm_datadist_ffi sdk",
                                 description="The C++ SDK over the mock (docs/cpp.md): paths and compiler flags.")
    ap.add_argument("--prefix", action="store_true", help="the SDK's prefix (include/, lib/)")
    ap.add_argument("--cflags", action="store_true", help="the include directories (include/ and include/external/)")
    ap.add_argument("--libs", action="store_true", help="the libraries to link, with an rpath")
    ap.add_argument("--pkg-config-path", action="store_true", help=f"the directory of {PKG_NAME}.pc")
    ap.add_argument("--cmake-prefix-path", action="store_true",
                    help=f"a CMAKE_PREFIX_PATH entry under which find_package({CMAKE_NAME}) succeeds")
    args = ap.parse_args(list(argv))
    try:
        where = prefix()
    except (SdkError, ImportError) as exc:
        raise CommandError(str(exc), status=1) from None
    out: List[str] = []
    if args.prefix:
        out.append(str(where))
    if args.cflags:
        out.extend(cflags(where))
    if args.libs:
        out.extend(libs(where))
    if args.pkg_config_path:
        out.append(str(where / "lib" / "pkgconfig"))
    if args.cmake_prefix_path:
        out.append(str(where))
    if not out:
        ap.print_help()
        return 2
    print(" ".join(out))
    return 0
