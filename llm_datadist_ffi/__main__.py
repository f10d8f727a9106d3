"""Command line: ``python -m llm_datadist_ffi {info,errors,demo,bench,docs,trace}``.

- ``info``: the live backend, every library loaded and its path, ABI version,
  capabilities, and the ACL runtime's version.
- ``errors [CODE] [--markdown]``: the status-code reference, or one code explained.
- ``demo``: a Prompt process and a Decoder process on 127.0.0.1 move paged KV cache
  and verify every byte (non-zero exit on any mismatch).
- ``bench``: transfer throughput as a ratio of memcpy bandwidth measured in the
  same run.
- ``trace merge DIR [-o FILE]``, ``trace summary DIR``: the call traces written with
  ``LLM_DATADIST_FFI_TRACE=DIR`` as one Chrome trace, or calls, bytes, GB/s and errors
  per method (``llm_datadist_ffi.testing.trace``).
- ``docs PAGE``: a generated reference page (``native-api``: the native API from its
  docstrings, committed as docs/reference/native-api.md).

A user's mistake (an argument out of range, sizes that do not fit in memory, a
backend that cannot load) is one line on stderr and a non-zero exit status, never a
traceback; Ctrl-C ends any command within a fraction of a second (status 130).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, Dict, Sequence

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


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog=PROG, description="The llm_datadist_ffi command line.")
    sub = parser.add_subparsers(dest="command", required=True)
    info = sub.add_parser("info", help="backend, libraries, ABI version, capabilities")
    info.add_argument("--json", action="store_true", help="print JSON")
    sub.add_parser("errors", help="status-code reference (see `errors --help`)", add_help=False)
    sub.add_parser("demo", help="Prompt -> Decoder transfer across two processes (see `demo --help`)",
                   add_help=False)
    sub.add_parser("bench", help="throughput against memcpy (see `bench --help`)", add_help=False)
    sub.add_parser("docs", help="print a generated reference page (see `docs --help`)", add_help=False)
    sub.add_parser("trace", help="merge or summarise call traces (see `trace --help`)", add_help=False)
    try:
        if argv and argv[0] in ("errors", "demo", "bench", "docs", "trace"):
            command, rest = argv[0], argv[1:]
            if command == "trace":
                from .testing.trace import main as trace_main
                return trace_main(rest)
            if command == "docs":
                from ._tools._docgen import main as docs_main
                return docs_main(rest)
            if command == "errors":
                from ._tools._errors_cli import main as errors_main
                return errors_main(rest)
            if command == "demo":
                from ._tools._demo import main as demo_main
                return demo_main(rest)
            from ._tools._bench import main as bench_main
            return bench_main(rest)
        args = parser.parse_args(argv)
        return _info(args)
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
