"""Build the mock backend, ``libllm_datadist_mock.so``, from ``mock_libs/*/*.c``.

Used by ``setup.py`` during ``pip install`` and by ``.ci/run`` for the
sanitizer build. Standard library only, so that it runs inside pip's isolated
build environment.

    python mock_libs/build_mock.py OUT_DIR [--sanitize | --tsan] [--debug]
    python mock_libs/build_mock.py OUT_DIR --check-unused

``--sanitize`` builds with AddressSanitizer and UndefinedBehaviorSanitizer, ``--tsan``
with ThreadSanitizer (the two cannot share one library). Either library is loaded
into an uninstrumented Python by preloading the sanitizer's runtime (see ``.ci/run``).

``--check-unused`` links a throw-away library with one section per function and lets
the linker drop every function that no exported function reaches; it names each one
and exits with 1 if there is any (``tests/test_abi.py`` runs it in the suite).

``CC`` selects the compiler (default ``cc``); ``CFLAGS``/``LDFLAGS`` are appended.
"""
from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
LIB_NAME = "libllm_datadist_mock.so"

# -Wmissing-prototypes and -Wmissing-declarations: a function that no header declares
# must be static, so that -Wunused-function reports it once nothing in its file calls it.
# Functions that a header declares but nothing calls are what --check-unused finds.
WARNINGS = [
    "-Wall", "-Wextra", "-Werror", "-Wshadow", "-Wstrict-prototypes", "-Wvla",
    "-Wmissing-prototypes", "-Wmissing-declarations",
]
SANITIZE = ["-fsanitize=address,undefined", "-fno-sanitize-recover=undefined", "-fno-omit-frame-pointer"]
TSAN = ["-fsanitize=thread", "-fno-omit-frame-pointer"]
# The linker keeps what the exported functions (default visibility) reach and names,
# one line each, every function section it removes.
GC_FUNCTIONS = ["-ffunction-sections", "-Wl,--gc-sections", "-Wl,--print-gc-sections"]
_GC_REMOVED = re.compile(r"removing unused section '\.text\.(\w+)'")


def sources(src_dir: Path = HERE) -> list[Path]:
    """The C files of the mock: one folder per layer (docs/design.md, "The mock's modules").
    A file names the header of any folder by its folder, ``#include "core/engine.h"``, which
    resolves against ``src_dir``."""
    return sorted(src_dir.rglob("*.c"))


def _compile(out: Path, src_dir: Path, flags: list[str]) -> str:
    """Compiles and links the library at out; returns what the tools wrote to stderr."""
    cc = shlex.split(os.environ.get("CC", "cc"))
    cmd = [
        *cc, "-std=c11", "-D_GNU_SOURCE", "-fPIC", "-shared", "-pthread",
        "-fvisibility=hidden", *flags, *WARNINGS,
        f"-I{ROOT / 'include'}", f"-I{src_dir}",
        *map(str, sources(src_dir)),
        "-o", str(out),
        # Calls inside the library bind to its own definitions, so that a shim that
        # exports the same lldd_* names (the vendor double in tests) cannot interpose.
        "-Wl,-Bsymbolic", "-Wl,--no-undefined", "-pthread",
        *shlex.split(os.environ.get("CFLAGS", "")),
        *shlex.split(os.environ.get("LDFLAGS", "")),
    ]
    # A sanitizer runtime preloaded into the caller (the suite under ASan) must not reach
    # the compiler, which it crashes.
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    done = subprocess.run(cmd, stderr=subprocess.PIPE, text=True, env=env)
    if done.returncode != 0:
        sys.stderr.write(done.stderr)
        raise subprocess.CalledProcessError(done.returncode, cmd, stderr=done.stderr)
    return done.stderr


def build(out_dir: Path, sanitize: bool = False, debug: bool = False, tsan: bool = False) -> Path:
    if sanitize and tsan:
        raise ValueError("AddressSanitizer and ThreadSanitizer cannot be combined in one build")
    out_dir.mkdir(parents=True, exist_ok=True)
    out = out_dir / LIB_NAME
    opt = ["-O1", "-g"] if (sanitize or tsan or debug) else ["-O2", "-g"]
    flags = [*opt, *(SANITIZE if sanitize else []), *(TSAN if tsan else [])]
    sys.stderr.write(_compile(out, HERE, flags))
    return out


def unused_functions(out_dir: Path, src_dir: Path = HERE) -> list[str]:
    """The functions of the sources in src_dir that no exported function reaches."""
    out_dir.mkdir(parents=True, exist_ok=True)
    stderr = _compile(out_dir / "unused-check.so", src_dir, ["-O0", *GC_FUNCTIONS])
    return sorted(set(_GC_REMOVED.findall(stderr)))


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_dir", type=Path)
    kind = ap.add_mutually_exclusive_group()
    kind.add_argument("--sanitize", action="store_true", help="AddressSanitizer + UBSan build")
    kind.add_argument("--tsan", action="store_true", help="ThreadSanitizer build")
    kind.add_argument("--check-unused", action="store_true",
                      help="name the functions that no exported function reaches (exit 1 if any)")
    ap.add_argument("--debug", action="store_true", help="-O1 -g")
    args = ap.parse_args(argv)
    if args.check_unused:
        unused = unused_functions(args.out_dir)
        for name in unused:
            print(f"unused function: {name}")
        return 1 if unused else 0
    print(build(args.out_dir, sanitize=args.sanitize, debug=args.debug, tsan=args.tsan))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
