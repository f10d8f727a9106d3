"""Section citations (``§``) in the repository's comments, docstrings and documents.

A citation names its document: ``docs/semantics.md §5``, ``semantics.md §8.3``,
``cpp-api §6.10``, ``python-api.md §11.2, §12`` (a list or a range after one document
name belongs to it), or in Markdown a link to the section of semantics.md §7.4 written as
``[section 7.4](reference/semantics.md#74-…)`` with the sign in the link text.
A ``§`` that follows no document name is *bare*: two documents number their sections
alike (docs/semantics.md and docs/reference/semantics.md), so a bare one is ambiguous.

Which document a name means:

- a path: ``docs/reference/X.md``, ``reference/X.md``, ``docs/X.md``;
- a reference page by its name, with or without ``.md`` (``semantics``, ``python-api``,
  ``cpp-api``, ``status-codes``, ``acl``, ``usage``): ``docs/reference/<name>.md``, as
  the reference pages are the documents the code and the messages cite by section;
- any other ``X.md``: ``docs/X.md``.

What is read: in Python files, the comments and the docstrings (not other strings: the
messages, the rule ids of ``pytest.mark.rules`` and test data are not citations of a
reader's document); in C and C++ files, the comments; in Markdown, the text outside
code spans and code blocks.
"""
from __future__ import annotations

import ast
import io
import posixpath
import re
import subprocess
import tokenize
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Sequence, Set, Tuple

REPO = Path(__file__).resolve().parents[2]

REFERENCE_PAGES = ("semantics", "python-api", "cpp-api", "status-codes", "acl", "usage")

#: The parts of the repository whose citations are checked. ``mock_libs`` and
#: ``include`` (the C comments) join the list once their citations name documents.
ROOTS: Tuple[str, ...] = ("llm_datadist_ffi", "tests", "examples", "docs", "README.md", "CONTRIBUTING.md")

_SECTION = r"§ ?(\d+(?:\.\d+)*)"
_DOCUMENT = (r"(?<![\w/.-])((?:docs/)?(?:reference/)?[A-Za-z][\w-]*\.md|(?:" + "|".join(REFERENCE_PAGES)
             + r"))")
_SEPARATOR = r"(?:,?\s(?:and|or|to)\s|,\s*|–|-|/|\s–\s)"
#: What may stand between a document and its first section: a closing quote or parenthesis,
#: a comma, spaces, and one line break with the next line's comment marker.
_GAP = r"`{0,2}\)?,?[ \t]*(?:\n[ \t]*(?:#|//|\*(?!/)|\|)?[ \t]*)?"
NAMED = re.compile(_DOCUMENT + _GAP + _SECTION + r"((?:" + _SEPARATOR + _SECTION + r")*)")
LINKED = re.compile(r"\[" + _SECTION + r"[^\]]*\]\(((?:\.\./)?(?:reference/)?[\w-]+\.md)#[^)]*\)")
_MORE = re.compile(_SEPARATOR + _SECTION)
_HEADING = re.compile(r"^#+ (\d+(?:\.\d+)*)\.? ", re.MULTILINE)


@dataclass(frozen=True)
class Citation:
    path: str            # the citing file, relative to the repository
    line: int
    document: str        # the cited document, relative to the repository ("" for a bare one)
    section: str
    text: str


def document_path(name: str) -> str:
    """The repository path of a document name as written in a citation."""
    name = name.strip("`")
    if name.startswith("docs/"):
        return name
    if name.startswith("reference/"):
        return "docs/" + name
    stem = name[:-3] if name.endswith(".md") else name
    if stem in REFERENCE_PAGES:
        return f"docs/reference/{stem}.md"
    return f"docs/{name}"


def link_path(target: str, citing: str) -> str:
    """The repository path of a Markdown link's target, relative to the citing file."""
    return posixpath.normpath(posixpath.join(posixpath.dirname(citing), target))


def tracked_files(roots: Sequence[str] = ROOTS, repo: Path = REPO) -> List[str]:
    listed = subprocess.run(["git", "ls-files", "--", *roots], cwd=repo, capture_output=True, text=True,
                            check=True).stdout.split()
    return [name for name in listed if name.endswith((".py", ".md", ".c", ".h", ".cpp"))
            and (repo / name).is_file()]


def _python_text(source: str) -> Iterator[Tuple[int, str]]:
    """(first line, text) of every comment and docstring of a Python source."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
                    and isinstance(first.value.value, str):
                yield first.lineno, ast.get_source_segment(source, first) or first.value.value
    # consecutive comment lines are one text, so that a citation may wrap
    run: List[Tuple[int, str]] = []
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type != tokenize.COMMENT:
            continue
        if run and token.start[0] != run[-1][0] + 1:
            yield run[0][0], "\n".join(text for _, text in run)
            run = []
        run.append((token.start[0], token.string))
    if run:
        yield run[0][0], "\n".join(text for _, text in run)


_C_COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.DOTALL)


def _c_text(source: str) -> Iterator[Tuple[int, str]]:
    """Every comment; consecutive ``//`` lines are one text."""
    run: List[Tuple[int, str]] = []
    for match in _C_COMMENT.finditer(source):
        line = source.count("\n", 0, match.start()) + 1
        text = match.group(0)
        if run and (not text.startswith("//") or line != run[-1][0] + 1):
            yield run[0][0], "\n".join(t for _, t in run)
            run = []
        if text.startswith("//"):
            run.append((line, text))
        else:
            yield line, text
    if run:
        yield run[0][0], "\n".join(t for _, t in run)


_FENCE = re.compile(r"^```.*?^```[^\n]*$", re.MULTILINE | re.DOTALL)
_CODE_SPAN = re.compile(r"`[^`\n]*`")


def _markdown_text(source: str) -> Iterator[Tuple[int, str]]:
    """The text outside code blocks, with code spans blanked (same length, so that the
    positions and the line numbers stay)."""
    def blank(match: "re.Match[str]") -> str:
        text = match.group(0)
        if "§" in text and re.fullmatch(r"`[^`]*\.md`?", text) is None and not re.search(r"\.md`? ?§", text):
            return re.sub(r"[^\n]", " ", text)
        return text
    text = _FENCE.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), source)
    text = _CODE_SPAN.sub(blank, text)
    yield 1, text


def texts(path: str, source: str) -> Iterator[Tuple[int, str]]:
    if path.endswith(".py"):
        yield from _python_text(source)
    elif path.endswith((".c", ".h", ".cpp")):
        yield from _c_text(source)
    else:
        yield from _markdown_text(source)


def citations(path: str, source: str) -> Iterator[Citation]:
    """Every ``§`` of the file's comments, docstrings or text, named or bare."""
    for first_line, text in texts(path, source):
        named: Set[int] = set()
        found: List[Tuple[int, str, str]] = []
        for match in NAMED.finditer(text):
            document = document_path(match.group(1))
            found.append((match.start(2), document, match.group(2)))
            named.update(range(match.start(), match.end()))
            for more in _MORE.finditer(match.group(3) or ""):
                found.append((match.start(3) + more.start(), document, more.group(1)))
        for match in (LINKED.finditer(text) if path.endswith(".md") else ()):
            found.append((match.start(), link_path(match.group(2), path), match.group(1)))
            named.update(range(match.start(), match.end()))
        for position, character in enumerate(text):
            if character == "§" and position not in named:
                if text[position - 1:position] in ("'", '"') and text[position - 2:position - 1] not in ("'", '"'):
                    continue                    # a quoted rule id (``rules("§7.4")``), not a citation
                section = re.match(_SECTION, text[position:])
                if section is not None:         # not a placeholder such as ``§x.y`` or ``§N``
                    found.append((position, "", section.group(1)))
        for position, document, section in found:
            line = first_line + text.count("\n", 0, position)
            yield Citation(path, line, document, section, text.splitlines()[text.count("\n", 0, position)].strip())


def headings(document: str, repo: Path = REPO) -> Optional[Set[str]]:
    """The section numbers of a document's headings; None when there is no such file."""
    path = repo / document
    if not path.is_file():
        return None
    return set(_HEADING.findall(path.read_text(encoding="utf-8")))


def problems(roots: Sequence[str] = ROOTS, repo: Path = REPO) -> List[str]:
    """Every bare citation, and every citation of a missing file or section."""
    cache: Dict[str, Optional[Set[str]]] = {}
    found: List[str] = []
    for path in tracked_files(roots, repo):
        source = (repo / path).read_text(encoding="utf-8", errors="replace")
        if "§" not in source:
            continue
        for citation in citations(path, source):
            where = f"{citation.path}:{citation.line}"
            if not citation.document:
                found.append(f"{where}: bare §{citation.section}: {citation.text}")
                continue
            if citation.document not in cache:
                cache[citation.document] = headings(citation.document, repo)
            sections = cache[citation.document]
            if sections is None:
                found.append(f"{where}: {citation.document} does not exist: {citation.text}")
            elif citation.section not in sections:
                found.append(f"{where}: {citation.document} has no §{citation.section}: {citation.text}")
    return found
