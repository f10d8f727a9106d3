"""Lay out a fake Ascend toolkit root whose LLM-DataDist is the vendor double.

The ascend shim is compiled and tested in CI against this root exactly as it is on
an Ascend host (docs/reference/cpp-api.md §8): same include directories, same library names,
same ``set_env.sh`` contract. The layout::

    OUT_ROOT/include/llm_datadist/llm_datadist.h           the double's public header
    OUT_ROOT/include/external/ge_common/api_error_codes.h  ge::Status (+ metadef headers)
    OUT_ROOT/include/external/graph/{types,ascend_string}.h
    OUT_ROOT/lib64/libmetadef.so       ge::AscendString      (the C++ SDK's, mock_libs/cpp)
    OUT_ROOT/lib64/libllm_datadist.so  llm_datadist::LlmDataDist over the mock (the SDK's)
    OUT_ROOT/lib64/libacl_rt.so        symlink to the mock library, so that the ACL
                                       memory the user allocates and the engine that
                                       checks it are one mock instance
    OUT_ROOT/set_env.sh                exports ASCEND_HOME_PATH, ASCEND_TOOLKIT_HOME
                                       and LD_LIBRARY_PATH like the toolkit's own

Usage::

    python tests/vendor_double/build_toolkit.py OUT_ROOT [--sanitize] [--mock-lib PATH] [--link-acl]

Without ``--mock-lib`` the mock is built from ``mock_libs/`` into ``OUT_ROOT/mock/``
(with ``--sanitize``, as an ASan/UBSan build). The headers are the project's own
(``include/``, as the C++ SDK ships them) and the libraries are built from the SDK's
sources by ``mock_libs/cpp/build_sdk.py``, except that this ``libllm_datadist.so`` finds
the mock as ``libacl_rt.so`` on the loader's path, as a toolkit's library would.
``CXX`` selects the compiler. Standard library only.
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import shlex
import shutil
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
PROJECT = HERE.parents[1]
PROJECT_INCLUDE = PROJECT / "include"
BUILD_MOCK = PROJECT / "mock_libs" / "build_mock.py"
BUILD_SDK = PROJECT / "mock_libs" / "cpp" / "build_sdk.py"

HEADERS = (
    Path("llm_datadist/llm_datadist.h"),
    Path("external/ge_common/api_error_codes.h"),
    Path("external/graph/types.h"),
    Path("external/graph/ascend_string.h"),
)

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


def _load(path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(f"lldd_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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
        shutil.copyfile(PROJECT_INCLUDE / rel, target)

    mock = Path(mock_lib).resolve() if mock_lib else Path(_load(BUILD_MOCK).build(root / "mock", sanitize=sanitize))
    acl = lib64 / "libacl_rt.so"
    if acl.is_symlink() or acl.exists():
        acl.unlink()
    acl.symlink_to(mock)

    sdk = _load(BUILD_SDK)
    flags = [*sdk.CXXFLAGS, *(["-O1", "-g", *sdk.SANITIZE] if sanitize else ["-O2"])]
    includes = [include, include / "external"]
    sdk.build_metadef(lib64, includes, flags)
    sdk.build_llm_datadist(lib64, includes, flags,
                           link=["-Wl,--no-as-needed", "-lacl_rt", "-Wl,--as-needed"] if link_acl else [])
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
