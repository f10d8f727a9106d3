"""Build the mock backend, ``libllm_datadist_mock.so``, from ``mock_libs/*.c``.

Used by ``setup.py`` during ``pip install`` and by ``.ci/run`` for the
sanitizer build. Standard library only, so that it runs inside pip's isolated
build environment.

    python mock_libs/build_mock.py OUT_DIR [--sanitize | --tsan] [--debug]

``--sanitize`` builds with AddressSanitizer and UndefinedBehaviorSanitizer, ``--tsan``
with ThreadSanitizer (the two cannot share one library). Either library is loaded
into an uninstrumented Python by preloading the sanitizer's runtime (see ``.ci/run``).

``CC`` selects the compiler (default ``cc``); ``CFLAGS``/``LDFLAGS`` are appended.
"""
from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
LIB_NAME = "libllm_datadist_mock.so"

WARNINGS = ["-Wall", "-Wextra", "-Werror", "-Wshadow", "-Wstrict-prototypes", "-Wvla"]
SANITIZE = ["-fsanitize=address,undefined", "-fno-sanitize-recover=undefined", "-fno-omit-frame-pointer"]
TSAN = ["-fsanitize=thread", "-fno-omit-frame-pointer"]


def sources() -> list[Path]:
    return sorted(HERE.glob("*.c"))


def build(out_dir: Path, sanitize: bool = False, debug: bool = False, tsan: bool = False) -> Path:
    if sanitize and tsan:
        raise ValueError("AddressSanitizer and ThreadSanitizer cannot be combined in one build")
    out_dir.mkdir(parents=True, exist_ok=True)
    out = out_dir / LIB_NAME
    cc = shlex.split(os.environ.get("CC", "cc"))
    opt = ["-O1", "-g"] if (sanitize or tsan or debug) else ["-O2", "-g"]
    cmd = [
        *cc, "-std=c11", "-D_GNU_SOURCE", "-fPIC", "-shared", "-pthread",
        "-fvisibility=hidden", *opt, *WARNINGS,
        *(SANITIZE if sanitize else []),
        *(TSAN if tsan else []),
        f"-I{ROOT / 'include'}", f"-I{HERE}",
        *map(str, sources()),
        "-o", str(out),
        # Calls inside the library bind to its own definitions, so that a shim that
        # exports the same lldd_* names (the vendor double in tests) cannot interpose.
        "-Wl,-Bsymbolic", "-Wl,--no-undefined", "-pthread",
        *shlex.split(os.environ.get("CFLAGS", "")),
        *shlex.split(os.environ.get("LDFLAGS", "")),
    ]
    subprocess.run(cmd, check=True)
    return out


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_dir", type=Path)
    kind = ap.add_mutually_exclusive_group()
    kind.add_argument("--sanitize", action="store_true", help="AddressSanitizer + UBSan build")
    kind.add_argument("--tsan", action="store_true", help="ThreadSanitizer build")
    ap.add_argument("--debug", action="store_true", help="-O1 -g")
    args = ap.parse_args(argv)
    print(build(args.out_dir, sanitize=args.sanitize, debug=args.debug, tsan=args.tsan))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
