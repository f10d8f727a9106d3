"""Lay out a fake Ascend toolkit root whose LLM-DataDist is the vendor double.

The ascend shim is compiled and tested in CI against this root exactly as it is on
an Ascend host (docs/reference/cpp-api.md §8): same include directories, same library names,
same ``set_env.sh`` contract. The layout::

    OUT_ROOT/include/llm_datadist/llm_datadist.h           the double's public header
    OUT_ROOT/include/external/ge_common/api_error_codes.h  ge::Status (+ metadef headers)
    OUT_ROOT/include/external/graph/{types,ascend_string}.h
    OUT_ROOT/lib64/libmetadef.so       ge::AscendString      (ascend_string.cpp)
    OUT_ROOT/lib64/libllm_datadist.so  llm_datadist::LlmDataDist over the mock
    OUT_ROOT/lib64/libacl_rt.so        symlink to the mock library, so that the ACL
                                       memory the user allocates and the engine that
                                       checks it are one mock instance
    OUT_ROOT/set_env.sh                exports ASCEND_HOME_PATH, ASCEND_TOOLKIT_HOME
                                       and LD_LIBRARY_PATH like the toolkit's own

Usage::

    python tests/vendor_double/build_toolkit.py OUT_ROOT [--sanitize] [--mock-lib PATH] [--link-acl]

Without ``--mock-lib`` the mock is built from ``mock_libs/`` into ``OUT_ROOT/mock/``
(with ``--sanitize``, as an ASan/UBSan build). The double's libraries are built with
``-D_GLIBCXX_USE_CXX11_ABI=0 -Wall -Wextra -Werror``; ``CXX`` selects the compiler.
Standard library only.
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROJECT = HERE.parents[1]
PROJECT_INCLUDE = PROJECT / "include"
BUILD_MOCK = PROJECT / "mock_libs" / "build_mock.py"

HEADERS = (
    Path("llm_datadist/llm_datadist.h"),
    Path("external/ge_common/api_error_codes.h"),
    Path("external/graph/types.h"),
    Path("external/graph/ascend_string.h"),
)

CXXFLAGS = ["-std=c++17", "-fPIC", "-shared", "-D_GLIBCXX_USE_CXX11_ABI=0", "-Wall", "-Wextra", "-Werror"]
SANITIZE = ["-fsanitize=address,undefined", "-fno-sanitize-recover=undefined", "-fno-omit-frame-pointer"]

SET_ENV = """\
# Fake Ascend toolkit for the llm_datadist_ffi shim tests (tests/vendor_double).
# Like the real set_env.sh: the root in ASCEND_HOME_PATH and ASCEND_TOOLKIT_HOME,
# its lib64 first on LD_LIBRARY_PATH (the vendor libraries carry no RPATH).
export ASCEND_HOME_PATH={root}
export ASCEND_TOOLKIT_HOME={root}
export LD_LIBRARY_PATH={root}/lib64${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}
"""


def toolkit_env(root: Path, base: dict[str, str] | None = None) -> dict[str, str]:
    """``base`` (default: ``os.environ``) with what ``OUT_ROOT/set_env.sh`` exports."""
    env = dict(os.environ if base is None else base)
    root = Path(root).resolve()
    env["ASCEND_HOME_PATH"] = str(root)
    env["ASCEND_TOOLKIT_HOME"] = str(root)
    previous = env.get("LD_LIBRARY_PATH")
    env["LD_LIBRARY_PATH"] = str(root / "lib64") + (f":{previous}" if previous else "")
    return env


def _build_mock(out_dir: Path, sanitize: bool) -> Path:
    spec = importlib.util.spec_from_file_location("lldd_build_mock", BUILD_MOCK)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return Path(module.build(out_dir, sanitize=sanitize))


def _compile(args: list[str]) -> None:
    cxx = shlex.split(os.environ.get("CXX", "") or "g++")
    cmd = [*cxx, *args]
    result = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"building the vendor double failed:\n{shlex.join(cmd)}\n{result.stdout}")


def build(out_root: Path, sanitize: bool = False, mock_lib: Path | None = None, link_acl: bool = False) -> Path:
    """Create (or refresh) the fake toolkit in ``out_root``; returns the root.

    ``link_acl`` gives the fake ``libllm_datadist.so`` a ``DT_NEEDED`` entry for
    ``libacl_rt.so``, as the real one has. It is off by default: the runtime is then
    outside the dependency tree of whoever loads the shim, so a lookup through the
    shim's handle cannot fall through to the mock's own ``lldd_*`` and
    ``lldd_mock_*`` symbols -- a name the shim does not define is missing, as on a
    device, instead of silently being the mock's (which would then be handed the
    shim's engine handles). The double reaches the mock by ``dlopen`` either way.
    """
    root = Path(out_root).resolve()
    include = root / "include"
    lib64 = root / "lib64"
    lib64.mkdir(parents=True, exist_ok=True)
    for rel in HEADERS:
        target = include / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(HERE / "include" / rel, target)

    mock = Path(mock_lib).resolve() if mock_lib else _build_mock(root / "mock", sanitize).resolve()
    acl = lib64 / "libacl_rt.so"
    if acl.is_symlink() or acl.exists():
        acl.unlink()
    acl.symlink_to(mock)

    flags = [*CXXFLAGS, *(["-O1", "-g", *SANITIZE] if sanitize else ["-O2"])]
    _compile([
        *flags, f"-I{include / 'external'}", str(HERE / "ascend_string.cpp"),
        "-Wl,-soname,libmetadef.so", "-o", str(lib64 / "libmetadef.so"), "-Wl,--no-undefined",
    ])
    # Like the vendor's build: hidden by default, the class exported through
    # ASCEND_FUNC_VISIBILITY (FUNC_VISIBILITY defined).
    _compile([
        *flags, "-fvisibility=hidden", "-DFUNC_VISIBILITY",
        f"-I{include}", f"-I{include / 'external'}", f"-I{PROJECT_INCLUDE}",
        str(HERE / "llm_datadist_double.cpp"),
        "-Wl,-soname,libllm_datadist.so", "-o", str(lib64 / "libllm_datadist.so"),
        f"-L{lib64}", "-lmetadef", *(["-Wl,--no-as-needed", "-lacl_rt", "-Wl,--as-needed"] if link_acl else []),
        "-ldl", "-Wl,--no-undefined",
    ])
    (root / "set_env.sh").write_text(SET_ENV.format(root=shlex.quote(str(root))), encoding="utf-8")
    return root


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_root", type=Path)
    ap.add_argument("--sanitize", action="store_true", help="ASan/UBSan builds of the mock and the double")
    ap.add_argument("--mock-lib", type=Path, help="use this mock library instead of building one")
    ap.add_argument("--link-acl", action="store_true",
                    help="make libllm_datadist.so depend on libacl_rt.so, as the real one does")
    args = ap.parse_args(argv)
    print(build(args.out_root, sanitize=args.sanitize, mock_lib=args.mock_lib, link_acl=args.link_acl))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
