"""``python -m llm_datadist_ffi._tools._codegen [--check]``: C text written from the status table.

``STATUS_TABLE`` in ``llm_datadist_ffi/status.py`` is the one hand-written list of
status codes. Two C sources need part of it, and this module writes both, so that a
code added to the table reaches C by running one command rather than by three edits:

* ``include/lldd/status.h``, the whole file: the enum of every ``LLM_*`` code (the
  declaration cffi reads and the C and C++ compilers include).
* the status-name table of the ascend shim, ``llm_datadist_ffi/_shim/lldd_shim.cpp``,
  between its ``BEGIN GENERATED`` and ``END GENERATED`` lines: the same ``LLM_*`` codes,
  then the ACL runtime codes. Those come from the runtime enum of
  ``include/acl/types.h``, which is where the project declares the ACL codes.

Without ``--check`` the command rewrites what is stale in a source checkout; with it,
it changes nothing and exits 1 naming each stale file. tests/tools/test_codegen.py runs the
same comparison, so a table edit without a regeneration fails the suite.
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Callable, Dict, List, Sequence, Tuple

from ..status import STATUS_TABLE

__all__ = [
    "GENERATED_FILES", "REGENERATE_COMMAND", "SHIM_BEGIN", "SHIM_END", "acl_runtime_codes", "main",
    "render_shim_source", "render_status_header", "stale_files",
]

REGENERATE_COMMAND = "python -m llm_datadist_ffi._tools._codegen"

#: The lines that enclose the generated part of the shim; everything else there is hand-written.
SHIM_BEGIN = f"// BEGIN GENERATED from the status table by llm_datadist_ffi/_tools/_codegen.py ({REGENERATE_COMMAND})"
SHIM_END = "// END GENERATED"

_STATUS_HEADER = Path("include") / "lldd" / "status.h"
_ACL_TYPES_HEADER = Path("include") / "acl" / "types.h"
_SHIM_SOURCE = Path("llm_datadist_ffi") / "_shim" / "lldd_shim.cpp"


def _llm_codes() -> List[Tuple[str, int]]:
    """(C name, value) of every ``LLM_*`` code of the table, in table order."""
    return [(row.cpp_name, row.value) for row in STATUS_TABLE
            if row.cpp_name is not None and row.cpp_name.startswith("LLM_")]


def render_status_header() -> str:
    """The full text of ``include/lldd/status.h``."""
    codes = _llm_codes()
    width = max(len(name) for name, _ in codes)
    enumerators = ",\n".join(f"    {name:<{width}} = 0x{value:08X}" for name, value in codes)
    return (
        "/* LLM-DataDist status values, identical to the vendor's (docs/reference/status-codes.md §2).\n"
        " *\n"
        " * Generated from STATUS_TABLE in llm_datadist_ffi/status.py by\n"
        f" * llm_datadist_ffi/_tools/_codegen.py; do not edit. Regenerate with: {REGENERATE_COMMAND}\n"
        " *\n"
        " * Directive-free declaration fragment: read verbatim by cffi's cdef and included\n"
        " * by include/llm_datadist_ffi.h for C and C++ compilers.\n"
        " */\n"
        "\n"
        "typedef uint32_t lldd_status;\n"
        "\n"
        "enum {\n"
        f"{enumerators}\n"
        "};\n"
    )


def acl_runtime_codes(acl_types_header: str) -> List[Tuple[str, int]]:
    """(name, value) of the ACL runtime error codes declared in ``acl_types_header``.

    The runtime enum is the one whose first enumerator is ``ACL_RT_SUCCESS``; its
    success value is left out (the shim names 0 ``LLM_SUCCESS``).

    Raises:
        ValueError: the text has no such enum.
    """
    text = re.sub(r"/\*.*?\*/", "", acl_types_header, flags=re.S)
    for body in re.findall(r"enum\s*\{(.*?)\}", text, flags=re.S):
        pairs = re.findall(r"(\w+)\s*=\s*(\d+)", body)
        if pairs and pairs[0][0] == "ACL_RT_SUCCESS":
            return [(name, int(value)) for name, value in pairs if name.startswith("ACL_ERROR_RT_")]
    raise ValueError("no enum starting with ACL_RT_SUCCESS (the ACL runtime codes) was found")


def _shim_region(acl_types_header: str) -> str:
    # LLM codes go through the shim's LLDD_STATUS_NAME macro, so that the compiler
    # checks each name against status.h; the ACL header is never included in the
    # shim, so its codes are written as numbers.
    lines = [SHIM_BEGIN, "constexpr StatusName kStatusNames[] = {"]
    lines += [f"    LLDD_STATUS_NAME({name})," for name, _ in _llm_codes()]
    lines += [f'    {{{value}U, "{name}"}},' for name, value in acl_runtime_codes(acl_types_header)]
    lines += ["};", SHIM_END]
    return "\n".join(lines)


def render_shim_source(current: str, acl_types_header: str) -> str:
    """``current`` (the shim's source) with its generated region written afresh.

    Raises:
        ValueError: the markers are missing, repeated or out of order.
    """
    begin = current.find(SHIM_BEGIN)
    end = current.find(SHIM_END)
    if begin < 0 or end < begin or current.count(SHIM_BEGIN) != 1 or current.count(SHIM_END) != 1:
        raise ValueError(f"{_SHIM_SOURCE} must hold one {SHIM_BEGIN!r} line followed by one {SHIM_END!r} line")
    return current[:begin] + _shim_region(acl_types_header) + current[end + len(SHIM_END):]


def _read(root: Path, relative: Path) -> str:
    return (root / relative).read_text(encoding="utf-8")


#: Each generated file, relative to the source root, with the function that writes it
#: from the root's current files.
GENERATED_FILES: Dict[Path, Callable[[Path], str]] = {
    _STATUS_HEADER: lambda root: render_status_header(),
    _SHIM_SOURCE: lambda root: render_shim_source(_read(root, _SHIM_SOURCE), _read(root, _ACL_TYPES_HEADER)),
}


def stale_files(root: Path) -> List[Path]:
    """The generated files under ``root`` whose committed text differs from the generator's."""
    return [relative for relative, render in GENERATED_FILES.items() if _read(root, relative) != render(root)]


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(
        prog=REGENERATE_COMMAND,
        description="Write the C text that restates the status table (include/lldd/status.h and the "
                    "shim's status names) in a source checkout.")
    parser.add_argument("--check", action="store_true",
                        help="change nothing; exit 1 and name each file that is out of date")
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[2],
                        help="the source checkout (default: the one this package is imported from)")
    args = parser.parse_args(list(argv))
    root: Path = args.root
    if not (root / _STATUS_HEADER).is_file():
        print(f"{REGENERATE_COMMAND}: {root} is not a source checkout (no {_STATUS_HEADER})", file=sys.stderr)
        return 2
    stale = stale_files(root)
    for relative in stale:
        if args.check:
            print(f"{relative} is out of date; regenerate it with: {REGENERATE_COMMAND}", file=sys.stderr)
        else:
            (root / relative).write_text(GENERATED_FILES[relative](root), encoding="utf-8")
            print(f"wrote {relative}")
    return 1 if stale and args.check else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
