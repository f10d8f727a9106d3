"""``python -m llm_datadist_ffi errors [CODE] [--markdown]``: the status-code reference.

Without CODE it prints every code of the table in ``status.py`` (value in hex and
decimal, names, recoverable, short meaning); with CODE (hex such as ``0x5010B005``,
decimal, or a C++ or Python name) it explains that one code: names, meaning, what each
vendor document says about recovering, the remedy, and which calls return it in v2 and
v1. ``--markdown`` prints the same as Markdown; the full Markdown reference is committed
as docs/error-codes.md, and a test keeps that file equal to ``render_markdown()``.

Everything printed here is derived from ``STATUS_TABLE`` and the exception classes;
nothing about a code is written in this file.
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from typing import Iterable, Sequence

from ._cli import CommandError, reports_errors
from ..status import (
    EXCEPTION_CLASSES,
    LLM_CODE_BASE,
    STATUS_TABLE,
    LLMException,
    StatusInfo,
    exception_class_for,
    info_for,
)

__all__ = ["GENERATED_NOTICE", "main", "render_code", "render_markdown", "render_table"]

REGENERATE_COMMAND = "python -m llm_datadist_ffi errors --markdown > docs/error-codes.md"

GENERATED_NOTICE = (
    "<!-- Generated from the status table in llm_datadist_ffi/status.py; do not edit. "
    f"Regenerate with: {REGENERATE_COMMAND} -->"
)

_WIDTH = 88


# ---------------------------------------------------------------------------
# Derived facts shared by both formats
# ---------------------------------------------------------------------------


def _lineage(cls: type[LLMException]) -> list[str]:
    """Class names from ``cls`` up to and including ``LLMException``."""
    names = []
    for klass in cls.__mro__:
        names.append(klass.__name__)
        if klass is LLMException:
            break
    return names


def _raised_as(row: StatusInfo) -> str:
    """How Python raises this code: class, its bases, status_code and raw_status."""
    if row.value == 0:
        return (
            "never raised for a status; an LLMException created without status_code "
            "carries it (the vendor's default)"
        )
    lineage = _lineage(exception_class_for(row.value))
    raised = f"{lineage[0]} (bases: {', '.join(lineage[1:])})" if len(lineage) > 1 else lineage[0]
    raised += f" with status_code {row.mapped}"
    if row.member is None:
        return f"{raised} and raw_status {row.value}"
    if row.member is not row.mapped:
        own = _lineage(EXCEPTION_CLASSES[row.member])
        return (
            f"never: the mapping rule does not give {row.member.name}, so a native "
            f"{row.value} is raised as {raised} and raw_status {row.value}; "
            f"{own[0]} exists for client code that constructs it"
        )
    return raised


def _python_member(row: StatusInfo) -> str:
    if row.member is None:
        return f"none (Python reports {row.mapped})"
    return str(row.member)


def _cpp_name(row: StatusInfo) -> str:
    if row.cpp_name is None:
        return "none (Python only)"
    text = row.cpp_name
    if row.cpp_aliases:
        text += " (ge: " + ", ".join(row.cpp_aliases) + ")"
    if row.in_cpp_header:
        text += "; restated in the public C++ header"
    return text


def _documents(row: StatusInfo) -> str:
    return "; ".join(f"{name}: {opinion.value}" for name, opinion in row.documents.items())


def _resolved(row: StatusInfo) -> str:
    text = row.recoverable_text
    source = row.recoverable_source
    if source is not None:
        text += f", as the {source} says"
    elif text != "n/a":
        text += ": no document lists it, so the project treats it as not recoverable"
    return text


def _generation(row: StatusInfo, generation: str) -> tuple[list[str], str]:
    """The producer lines of one generation and its note."""
    if generation == "v2":
        producers, note = row.v2_producers, row.v2_note
    else:
        producers, note = row.v1_producers, row.v1_note
    return [f"{p.call}: {p.condition}" for p in producers], note


def _decimal(row: StatusInfo) -> str:
    return str(row.value)


# ---------------------------------------------------------------------------
# Plain text
# ---------------------------------------------------------------------------


def render_table() -> str:
    """Every code of the table, one line each, as aligned plain text."""
    header = ("hex", "decimal", "C++ name", "Python member", "recoverable", "meaning")
    lines = [
        (
            row.hex,
            _decimal(row),
            row.cpp_name or "-",
            row.python_name or "- (LLM_FAILED)",
            row.recoverable_text,
            row.meaning,
        )
        for row in STATUS_TABLE
    ]
    widths = [max(len(cells[i]) for cells in [header, *lines]) for i in range(len(header) - 1)]

    def format_line(cells: Sequence[str]) -> str:
        padded = [cell.ljust(width) for cell, width in zip(cells, widths)]
        return "  ".join([*padded, cells[-1]]).rstrip()

    out = [format_line(header), format_line(["-" * w for w in widths] + ["-" * 7])]
    out += [format_line(cells) for cells in lines]
    out.append("")
    out.append(
        "Explain one code: python -m llm_datadist_ffi errors CODE  "
        "(hex, decimal or name)"
    )
    return "\n".join(out) + "\n"


def _field(label: str, text: str) -> list[str]:
    indent = " " * 14
    return textwrap.wrap(
        text,
        width=_WIDTH,
        initial_indent=f"{label:<14}",
        subsequent_indent=indent,
        break_on_hyphens=False,
    ) or [label]


def _bullets(lines: Iterable[str]) -> list[str]:
    out: list[str] = []
    for line in lines:
        out += textwrap.wrap(
            line,
            width=_WIDTH,
            initial_indent="  - ",
            subsequent_indent="    ",
            break_on_hyphens=False,
        )
    return out


def render_code(row: StatusInfo) -> str:
    """One code explained in plain text."""
    out = [f"{row.name}  {row.hex} ({_decimal(row)})", ""]
    out += _field("C++ name", _cpp_name(row))
    out += _field("Python", _python_member(row))
    out += _field("Raised as", _raised_as(row))
    out += _field("Meaning", f"{row.meaning}. {row.detail}".strip())
    out += _field("Recoverable", _resolved(row))
    out += _field("Documents", _documents(row) + (f". {row.doc_notes}" if row.doc_notes else ""))
    out += _field("Remedy", row.remedy)
    for generation in ("v2", "v1"):
        producers, note = _generation(row, generation)
        heading = f"Returned in {generation}:" + ("" if producers else " none")
        if note:
            heading += f" ({note})"
        out.append("")
        out += textwrap.wrap(
            heading.rstrip(),
            width=_WIDTH,
            subsequent_indent="    ",
            break_on_hyphens=False,
        )
        out += _bullets(producers)
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------------------
# Markdown
# ---------------------------------------------------------------------------


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _markdown_code(row: StatusInfo) -> str:
    out = [f"### `{row.name}` — {row.hex} ({_decimal(row)})", ""]
    out.append(f"- **C++ name:** {_cell(_cpp_name(row))}")
    out.append(f"- **Python:** {_python_member(row)}")
    out.append(f"- **Raised as:** {_raised_as(row)}")
    out.append(f"- **Meaning:** {row.meaning}. {row.detail}".rstrip())
    out.append(f"- **Recoverable:** {_resolved(row)}")
    documents = _documents(row) + (f". {row.doc_notes}" if row.doc_notes else "")
    out.append(f"- **Vendor documents:** {documents}")
    out.append(f"- **Remedy:** {row.remedy}")
    for generation in ("v2", "v1"):
        producers, note = _generation(row, generation)
        if producers:
            out.append(f"- **Returned in {generation}:**" + (f" ({note})" if note else ""))
            out += [f"  - {line}" for line in producers]
        else:
            out.append(f"- **Returned in {generation}:** none" + (f" ({note})" if note else ""))
    return "\n".join(out) + "\n"


def _markdown_exceptions() -> list[str]:
    out = [
        "| Python member | exception class | bases up to LLMException |",
        "|---|---|---|",
    ]
    for row in STATUS_TABLE:
        if row.member is None:
            continue
        lineage = _lineage(EXCEPTION_CLASSES.get(row.member, LLMException))
        bases = ", ".join(f"`{name}`" for name in lineage[1:]) or "–"
        out.append(f"| `{row.member.name}` | `{lineage[0]}` | {bases} |")
    out += [
        "",
        "`exception_for(raw, message)` raises the class of `map_status(raw)`: a value "
        "without a member gives `FailedError` with the value in `raw_status`, so "
        "`UnknownError` is never raised by the package (it exists for client code), and "
        "`LLM_SUCCESS` has no class of its own. Family classes (`LinkError`, "
        "`LLMTimeoutError`, `LLMMemoryError`, `PrefixError`) catch all their members.",
    ]
    return out


def render_markdown(rows: Sequence[StatusInfo] | None = None) -> str:
    """The Markdown reference: the whole table, or only ``rows`` when given."""
    if rows is not None:
        return "\n".join(_markdown_code(row) for row in rows)
    out = [
        GENERATED_NOTICE,
        "",
        "# Error-code reference",
        "",
        "Every status code that LLM-DataDist can return or raise: value, names, meaning, "
        "whether it is recoverable, what to do, and which calls return it in each "
        "generation (v2: CacheManager mode and the current C++ class; v1: KvCacheManager "
        "and the older C++ class). The same text is printed by "
        "`python -m llm_datadist_ffi errors CODE`.",
        "",
        f"- LLM codes are unsigned 32-bit values `0x{LLM_CODE_BASE:08X} | v`; `LLM_FAILED` "
        "is `0xFFFFFFFF` (4294967295), never -1.",
        "- Python reports a native value through the vendor's mapping rule: a value with "
        "an `LLMStatusCode` member gives that member, any other value (codes 20-23, ACL "
        "codes other than 507053 and 507057, -1) gives `LLM_FAILED`. The exception's "
        "`raw_status` keeps the native value.",
        "- **Recoverable** resolves the vendor documents: the current Python document "
        "decides for the codes it lists, then the v1 Python document, then the C++ "
        "document. A code that no document lists counts as not recoverable.",
        "- Every exception is an `LLMException` (a `RuntimeError`) and nothing else: "
        "never a `ValueError`, `TypeError`, `TimeoutError` or `MemoryError`.",
        "",
        "## Summary",
        "",
        "| hex | decimal | C++ name | Python member | recoverable | meaning |",
        "|---|---|---|---|---|---|",
    ]
    for row in STATUS_TABLE:
        cpp = f"`{row.cpp_name}`" if row.cpp_name else "–"
        python = f"`{row.python_name}`" if row.python_name else "– (`LLM_FAILED`)"
        out.append(
            f"| {row.hex} | {_decimal(row)} | {cpp} | {python} | "
            f"{row.recoverable_text} | {_cell(row.meaning)} |"
        )
    out += ["", "## Exception classes", ""]
    out += _markdown_exceptions()
    out += ["", "## Codes", ""]
    out.append("\n".join(_markdown_code(row) for row in STATUS_TABLE).rstrip("\n"))
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------------------
# Entry point
# ---------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m llm_datadist_ffi errors",
        description="The LLM-DataDist status-code reference, or one code explained.",
    )
    parser.add_argument(
        "code",
        nargs="?",
        metavar="CODE",
        help="a status code: hex (0x5010B005), decimal (1343270917) or a C++ or "
        "Python name, in any case (LLM_PARAM_INVALID)",
    )
    parser.add_argument(
        "--markdown",
        action="store_true",
        help="print Markdown (the full reference without CODE)",
    )
    return parser


@reports_errors("python -m llm_datadist_ffi errors")
def main(argv: Sequence[str]) -> int:
    """Run the ``errors`` command; returns the exit status.

    0 on success, 2 for bad arguments or a code that is not in the table (the message
    goes to stderr). Never raises for user input.
    """
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exc:  # argparse has printed usage or help already
        return exc.code if isinstance(exc.code, int) else 2
    if args.code is None:
        sys.stdout.write(render_markdown() if args.markdown else render_table())
        return 0
    try:
        row = info_for(args.code)
    except ValueError as exc:
        raise CommandError(str(exc), status=2) from None
    sys.stdout.write(render_markdown([row]) if args.markdown else render_code(row))
    return 0


if __name__ == "__main__":  # pragma: no cover - the package's __main__ is the entry
    sys.exit(main(sys.argv[1:]))
