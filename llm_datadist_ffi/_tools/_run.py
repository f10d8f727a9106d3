"""``python -m llm_datadist_ffi run [--quiet] [--backend auto|mock|companion] SCRIPT [ARGS…]``.

Runs an unchanged script written for the vendor's ``llm_datadist`` package, as
``python SCRIPT ARGS`` would (``runpy``, ``sys.argv`` and ``sys.path[0]`` as the script
expects), with this project's checks in front of it: where the vendor's package is
importable (an Ascend host) the companion wraps it (``llm_datadist_ffi.companion``);
elsewhere the compat alias runs it on the mock (``llm_datadist_ffi.compat``). Which one
was chosen is said on stderr unless ``--quiet``.
"""
from __future__ import annotations

import argparse
import os
import runpy
import sys
from typing import Sequence

from .. import companion
from ._cli import CommandError, reports_errors
from ..companion import BACKENDS, choose

PROG = "python -m llm_datadist_ffi run"


def install(backend: str = "auto") -> str:
    """Install what ``choose(backend)`` names; returns a sentence saying what it is."""
    chosen = choose(backend)
    if chosen == "companion":
        module = companion.install()
        return f"the companion over the vendor's llm_datadist ({getattr(module, '__file__', module.__name__)})"
    from .. import compat

    compat.install()
    return "the mock, through the compat alias (no vendor llm_datadist package is importable)" \
        if backend == "auto" else "the mock, through the compat alias"


@reports_errors(PROG)
def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog=PROG, description="Run a script written for the vendor's llm_datadist "
                                     "with this project's lints, strict mode and traces.")
    parser.add_argument("--quiet", action="store_true", help="do not say on stderr which backend was chosen")
    parser.add_argument("--backend", choices=BACKENDS, default="auto",
                        help="companion (the vendor's package, wrapped), mock (the compat alias), or auto (default)")
    parser.add_argument("script", help="the script to run")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="its arguments")
    options = parser.parse_args(list(argv))
    if not os.path.isfile(options.script):
        raise CommandError(f"{options.script}: no such file", status=2)
    try:
        said = install(options.backend)
    except ImportError as exc:
        raise CommandError(str(exc), status=1) from None
    if not options.quiet:
        print(f"{PROG}: running {options.script} on {said}", file=sys.stderr)
    sys.argv = [options.script, *options.args]
    sys.path.insert(0, os.path.dirname(os.path.abspath(options.script)))
    try:
        runpy.run_path(options.script, run_name="__main__")
    except SystemExit as exc:
        code = exc.code
        if code is None or isinstance(code, int):
            return code or 0
        print(code, file=sys.stderr)
        return 1
    return 0
