"""The C sources cite documents by name: every `§` in a comment of mock_libs/ or include/
follows the name of the document whose section it is (`semantics.md §9.7`,
`docs/security.md §2.8`, `docs/reference/python-api.md §12, §11.2`), and that document
has that numbered heading.

A name without a directory is a reference page when docs/reference/ has one of that name
(the convention tests/tools/test_docs_reference.py reads citations by: `semantics.md §9.7`
is docs/reference/semantics.md), else a page of docs/. Two documents number their
sections alike (docs/semantics.md and docs/reference/semantics.md), so a bare `§9.7`
says nothing.
"""
from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SECTION = r"\d+(?:\.\d+)*"
DOCUMENT = r"(?:[\w.-]+/)*[\w-]+\.md"
# a document, then one or more sections: `x.md §1.2, §3`, `x.md §6.10-6.11`, `x.md §4.2 and §5`
RUN = re.compile(rf"({DOCUMENT})`?,?\s*(§\s*{SECTION}(?:\s*(?:,|and|or|/|-|–)\s*(?:§\s*)?{SECTION}\b)*)")
COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)


def resolve(name: str, root: Path = REPO) -> Path | None:
    """The document a citation names, or None if there is no such file."""
    if "/" in name:
        candidates = [root / name]
    else:
        candidates = [root / "docs" / "reference" / name, root / "docs" / name]
    return next((path for path in candidates if path.is_file()), None)


def headings(document: Path) -> set[str]:
    text = document.read_text(encoding="utf-8")
    return {m.group(1) for m in re.finditer(rf"^#+ ({SECTION})\.? ", text, re.MULTILINE)}


def citation_faults(path: Path, text: str, root: Path = REPO) -> list[str]:
    """Every `§` of the C comments in text that names no document, names one that does
    not exist, or a section that document does not have; one line each."""
    faults = []
    for comment in COMMENT.finditer(text):
        # one line of prose: the leading ` * ` of continuation lines goes
        flat = re.sub(r"\n\s*\*(?!/) ?", " ", comment.group(0))
        covered: set[int] = set()
        for run in RUN.finditer(flat):
            covered.update(range(run.start(), run.end()))
            document = resolve(run.group(1), root)
            if document is None:
                faults.append(f"{path}: {run.group(0)!r}: no document {run.group(1)}")
                continue
            missing = [s for s in re.findall(SECTION, run.group(2)) if s not in headings(document)]
            faults += [f"{path}: {run.group(0)!r}: {document.relative_to(root)} has no §{s}" for s in missing]
        for mark in re.finditer("§", flat):
            if mark.start() not in covered:
                faults.append(f"{path}: {flat[max(0, mark.start() - 40):mark.start() + 12]!r}: names no document")
    return faults


def _c_files() -> list[Path]:
    return sorted([*(REPO / "mock_libs").rglob("*.[ch]"), *(REPO / "include").rglob("*.h")])


def test_every_section_the_c_sources_cite_names_an_existing_document_and_heading() -> None:
    faults = []
    cited = 0
    for path in _c_files():
        text = path.read_text(encoding="utf-8")
        cited += text.count("§")
        faults += citation_faults(path.relative_to(REPO), text)
    assert faults == []
    assert cited > 200          # not vacuous: the sources do cite sections


def test_a_bare_section_an_unknown_document_and_a_missing_heading_are_named() -> None:
    text = ("/* the table copy (§9.7), see semantics.md §9.7, §99.1 and\n"
            " * docs/nowhere.md §1; docs/security.md §2.8 and\n"
            " * docs/semantics.md §0.1 */\n"
            "int f(void); // as python-api.md §11.2, §12 say; DESIGN §2.1\n")
    assert citation_faults(Path("x.c"), text) == [
        "x.c: 'semantics.md §9.7, §99.1': docs/reference/semantics.md has no §99.1",
        "x.c: 'docs/nowhere.md §1': no document docs/nowhere.md",
        "x.c: '/* the table copy (§9.7), see s': names no document",
        "x.c: 'as python-api.md §11.2, §12 say; DESIGN §2.1': names no document",
    ]
    # a name without a directory is the reference page of that name, else a page of docs/
    assert resolve("semantics.md") == REPO / "docs" / "reference" / "semantics.md"
    assert resolve("security.md") == REPO / "docs" / "security.md"
    assert resolve("docs/semantics.md") == REPO / "docs" / "semantics.md"
