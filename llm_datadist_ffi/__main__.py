"""Command line: ``python -m llm_datadist_ffi {info,errors,demo,bench,docs,trace,run,sdk}``,
and ``--version``. A misspelt command is answered with the closest one.

- ``info``: the live backend, every library loaded and its path, ABI version,
  capabilities, and the ACL runtime's version.
- ``errors [CODE] [--markdown]``: the status-code reference, or one code explained.
- ``demo``: a Prompt process and a Decoder process on 127.0.0.1 move paged KV cache
  and verify every byte (non-zero exit on any mismatch).
- ``bench``: transfer throughput as a ratio of memcpy bandwidth measured in the
  same run.
- ``trace merge DIR [-o FILE]``, ``trace summary DIR``: the call traces written with
  ``LLM_DATADIST_FFI_TRACE=DIR`` as one Chrome trace, or calls, bytes, rate and errors
  per method (``llm_datadist_ffi.testing.trace``).
- ``run [--quiet] SCRIPT [ARGS…]``: a script written for the vendor's ``llm_datadist``,
  unchanged, with the companion over the vendor's package where it is importable and
  on the mock through the compat alias elsewhere (``llm_datadist_ffi/_tools/_run.py``).
- ``sdk --cflags --libs``, ``sdk --prefix``: the C++ SDK over the mock (docs/cpp.md),
  its compiler and linker flags, its prefix (``llm_datadist_ffi._tools._sdk``).
- ``docs [PAGE]``: the documents the package carries (the user guide, the semantics
  decisions, the error codes, the testing guides) and the generated native API
  reference; without PAGE, the list.

A user's mistake (an argument out of range, sizes that do not fit in memory, a
backend that cannot load) is one line on stderr and a non-zero exit status, never a
traceback; Ctrl-C ends any command within a fraction of a second (status 130).
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from typing import Any, Callable, Dict, Sequence

PROG = "python -m llm_datadist_ffi"


def _info_data() -> Dict[str, Any]:
    from . import __version__, acl
    from ._core import _capi
    from ._core._loader import BACKEND_ENV, loaded
    from .native import capabilities

    return {
        "version": __version__,
        "backend": loaded.name,
        "backend_env": os.environ.get(BACKEND_ENV, "(unset: auto)"),
        "llm_datadist_library": loaded.lldd_path,
        "acl_library": loaded.acl_path,
        "abi_version": _capi.lldd_abi_version(),
        "backend_name": _capi.lldd_backend_name(),
        "capabilities": capabilities(),
        "acl_version": ".".join(map(str, acl.get_version())),
        "soc_name": acl.get_soc_name(),
    }


def _info(args: argparse.Namespace) -> int:
    from . import __version__
    from .status import LLMException

    try:
        data = _info_data()
    except (ImportError, LLMException) as exc:
        # No backend loads (or its ACL runtime answers an error): what info is for.
        if args.json:
            print(json.dumps({"version": __version__, "backend": None, "error": str(exc)}, indent=2))
        print(f"{PROG} info: no backend can be loaded: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(data, indent=2))
        return 0
    width = max(map(len, data))
    for key, value in data.items():
        if isinstance(value, dict):
            value = ", ".join(f"{k}={'yes' if v else 'no'}" for k, v in value.items())
        print(f"{key:<{width}}  {value}")
    return 0


# The commands with parsers of their own: each is the `main(argv)` of its module.
_COMMANDS: Dict[str, str] = {
    "errors": "._tools._errors_cli",
    "demo": "._tools._demo",
    "bench": "._tools._bench",
    "docs": "._tools._docgen",
    "trace": ".testing.trace",
    "run": "._tools._run",
    "sdk": "._tools._sdk",
}


def main(argv: Sequence[str] | None = None) -> int:
    from . import __version__
    from ._core._suggest import ArgumentParser

    argv = list(sys.argv[1:] if argv is None else argv)
    parser = ArgumentParser(prog=PROG, description="The llm_datadist_ffi command line.")
    parser.add_argument("--version", action="version", version=f"llm_datadist_ffi {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    info = sub.add_parser("info", help="backend, libraries, ABI version, capabilities")
    info.add_argument("--json", action="store_true", help="print JSON")
    sub.add_parser("errors", help="status-code reference (see `errors --help`)", add_help=False)
    sub.add_parser("demo", help="Prompt -> Decoder transfer across two processes (see `demo --help`)",
                   add_help=False)
    sub.add_parser("bench", help="throughput against memcpy (see `bench --help`)", add_help=False)
    sub.add_parser("docs", help="list or print the package's documents (see `docs --help`)", add_help=False)
    sub.add_parser("trace", help="merge or summarise call traces (see `trace --help`)", add_help=False)
    sub.add_parser("run", help="run a script written for the vendor's llm_datadist with the checks (see `run --help`)",
                   add_help=False)
    sub.add_parser("sdk", help="the C++ SDK: --cflags, --libs, --prefix (see `sdk --help`)", add_help=False)
    try:
        if argv and argv[0] in _COMMANDS:
            # imported only when asked for: `info` and `--help` load none of them
            command: Callable[[Sequence[str]], int] = importlib.import_module(_COMMANDS[argv[0]], __package__).main
            return command(argv[1:])
        args = parser.parse_args(argv)
        return _info(args)
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
