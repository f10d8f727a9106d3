"""Build the ascend shim, ``libllm_datadist_ffi_shim.so``, against an Ascend toolkit.

The shim (``lldd_shim.cpp`` beside this file) implements the project's C ABI over
the vendor's C++ class ``llm_datadist::LlmDataDist``. It is compiled on the host
that will run it, with the flags of ``docs/reference/cpp-api.md`` §8.4, because the vendor
ships a C++ API only. Used by ``setup.py`` during ``pip install`` (standard library
only: it runs inside pip's isolated build environment), by ``.ci/run`` against the
vendor double, and by hand::

    python llm_datadist_ffi/_shim/build_shim.py OUT_DIR [--toolkit ROOT] [--sanitize] [--no-werror]

The toolkit root is, in order: ``--toolkit``; ``LLM_DATADIST_FFI_ASCEND_HOME``;
``ASCEND_HOME_PATH``; ``ASCEND_TOOLKIT_HOME`` (the last two are exported by the
toolkit's ``set_env.sh``). ``CXX`` selects the compiler (default ``g++``);
``CXXFLAGS`` and ``LDFLAGS`` are appended.
"""
from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "lldd_shim.cpp"
#: ``include/`` of a source checkout (setup.py builds from one).
PROJECT_INCLUDE = HERE.parents[1] / "include"
LIB_NAME = "libllm_datadist_ffi_shim.so"

#: Explicit override; unlike the toolkit's own variables it must point at a toolkit.
OVERRIDE_ENV = "LLM_DATADIST_FFI_ASCEND_HOME"
#: Exported by the toolkit's set_env.sh (docs/reference/cpp-api.md §8.1).
TOOLKIT_ENVS = ("ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME")

VENDOR_HEADER = Path("include") / "llm_datadist" / "llm_datadist.h"
VENDOR_LIB = "libllm_datadist.so"

#: docs/reference/cpp-api.md §8.4, verbatim apart from the file names.
HOST_CXXFLAGS = ["-std=c++17", "-O2", "-fPIC", "-shared", "-D_GLIBCXX_USE_CXX11_ABI=0"]
WARNINGS = ["-Wall", "-Wextra"]
#: Additions to cpp-api.md §8.4, both harmless on a real host: export only the C ABI (so that a
#: lookup through the shim can never fall through to a same-named symbol of a
#: dependency), and name libdl for glibc older than 2.34, where dlsym lives there.
EXTRA_CXXFLAGS = ["-fvisibility=hidden", "-fvisibility-inlines-hidden"]
EXTRA_LIBS = ["-ldl"]
SANITIZE = ["-fsanitize=address,undefined", "-fno-sanitize-recover=undefined", "-fno-omit-frame-pointer", "-g"]


class ShimBuildError(RuntimeError):
    """The toolkit is incomplete or the compiler failed; the message says which."""


def find_toolkit_root() -> Path | None:
    """The Ascend toolkit root to build against, or ``None`` when there is none.

    ``LLM_DATADIST_FFI_ASCEND_HOME`` wins and must name an existing directory (an
    explicit request that cannot be met is an error, not a silent skip). Then
    ``ASCEND_HOME_PATH`` and ``ASCEND_TOOLKIT_HOME``; a variable naming a directory
    that does not exist is ignored, as a stale environment on a host without the
    toolkit should not break ``pip install``.

    Raises:
        ShimBuildError: ``LLM_DATADIST_FFI_ASCEND_HOME`` is set to a non-directory.
    """
    override = os.environ.get(OVERRIDE_ENV, "").strip()
    if override:
        root = Path(override).expanduser()
        if not root.is_dir():
            raise ShimBuildError(f"{OVERRIDE_ENV}={override!r} is not a directory")
        return root
    for name in TOOLKIT_ENVS:
        value = os.environ.get(name, "").strip()
        if value and Path(value).expanduser().is_dir():
            return Path(value).expanduser()
    return None


def ascend_string_libs(lib64: Path) -> list[str]:
    """The link flags for the library that defines ``ge::AscendString``.

    Raises:
        ShimBuildError: neither ``libmetadef.so`` nor ``libgraph_base.so`` +
            ``libgraph.so`` is in ``lib64``.
    """
    if (lib64 / "libmetadef.so").exists():
        return ["-lmetadef"]
    if (lib64 / "libgraph_base.so").exists() and (lib64 / "libgraph.so").exists():
        return ["-lgraph_base", "-lgraph"]   # older toolkits (docs/reference/cpp-api.md §8.4)
    raise ShimBuildError(
        f"{lib64} has neither libmetadef.so nor libgraph_base.so + libgraph.so, one of which "
        "defines ge::AscendString; the toolkit installation is incomplete"
    )


def command(toolkit_root: Path, out: Path, *, sanitize: bool = False, werror: bool = True,
            project_include: Path = PROJECT_INCLUDE, extra_flags: bool = True) -> list[str]:
    """The compiler command line that builds the shim into ``out``.

    ``extra_flags=False`` gives the bare cpp-api.md §8.4 command (used by the tests to prove
    that the source builds with exactly the vendor-documented flags).

    Raises:
        ShimBuildError: the toolkit lacks the LLM-DataDist header or library.
    """
    root = Path(toolkit_root)
    lib64 = root / "lib64"
    if not (root / VENDOR_HEADER).is_file():
        raise ShimBuildError(
            f"{root / VENDOR_HEADER} is missing: the toolkit at {root} does not ship LLM-DataDist's "
            "C++ API (install a CANN toolkit that includes it, or point "
            f"{OVERRIDE_ENV} at one)"
        )
    if not (lib64 / VENDOR_LIB).exists():
        raise ShimBuildError(f"{lib64 / VENDOR_LIB} is missing: the toolkit at {root} is incomplete")
    cxx = shlex.split(os.environ.get("CXX", "") or "g++")
    flags = list(HOST_CXXFLAGS)
    if sanitize:
        flags = [f if f != "-O2" else "-O1" for f in flags] + SANITIZE
    return [
        *cxx, *flags, *WARNINGS, *(["-Werror"] if werror else []),
        *(EXTRA_CXXFLAGS if extra_flags else []),
        f"-I{root / 'include'}", f"-I{root / 'include' / 'external'}", f"-I{project_include}",
        str(SOURCE), "-o", str(out),
        f"-L{lib64}", "-lllm_datadist", *ascend_string_libs(lib64),
        *(EXTRA_LIBS if extra_flags else []),
        "-Wl,--no-undefined",
        *shlex.split(os.environ.get("CXXFLAGS", "")),
        *shlex.split(os.environ.get("LDFLAGS", "")),
    ]


def build(toolkit_root: Path, out_dir: Path, sanitize: bool = False, *, werror: bool = True) -> Path:
    """Compile the shim against ``toolkit_root`` into ``out_dir``; returns its path.

    The library is written under a temporary name and renamed into place, so a
    failed build never leaves a half-written shim for the loader to find.
    ``werror=False`` keeps warnings visible but not fatal: ``setup.py`` uses it,
    because a toolkit's own headers may warn under ``-Wextra`` on some compilers.

    Raises:
        ShimBuildError: the toolkit is incomplete or the compiler failed.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    final = out_dir / LIB_NAME
    fd, tmp_name = tempfile.mkstemp(prefix=".shim-", suffix=".so", dir=out_dir)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        cmd = command(Path(toolkit_root), tmp, sanitize=sanitize, werror=werror)
        result = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if result.returncode != 0:
            raise ShimBuildError(
                f"compiling the ascend shim against {toolkit_root} failed (exit {result.returncode}):\n"
                f"{shlex.join(cmd)}\n{result.stdout}"
            )
        if result.stdout.strip():
            sys.stderr.write(result.stdout)
        tmp.chmod(0o755)
        tmp.replace(final)
    finally:
        tmp.unlink(missing_ok=True)
    return final


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_dir", type=Path)
    ap.add_argument("--toolkit", type=Path, help="toolkit root (default: from the environment)")
    ap.add_argument("--sanitize", action="store_true", help="AddressSanitizer + UBSan build")
    ap.add_argument("--no-werror", dest="werror", action="store_false", help="warnings are not errors")
    args = ap.parse_args(argv)
    try:
        root = args.toolkit or find_toolkit_root()
        if root is None:
            print(f"no Ascend toolkit: set {OVERRIDE_ENV}, ASCEND_HOME_PATH or ASCEND_TOOLKIT_HOME "
                  "(source the toolkit's set_env.sh)", file=sys.stderr)
            return 2
        print(build(root, args.out_dir, sanitize=args.sanitize, werror=args.werror))
    except ShimBuildError as exc:
        print(f"build_shim: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
