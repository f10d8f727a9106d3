"""What a newcomer meets in the first hour: install commands, the trace recipe, the
command line, the testing toolkit's defaults, logging, strict mode, the alias.

Each test here holds one finding of the third review ("A newcomer's first hour").
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Iterator, List, Tuple

ROOT = Path(__file__).resolve().parents[2]

# -- install commands in the documents ------------------------------------------------

_PIP_INSTALL = re.compile(r"pip install\b(?P<args>[^`#\n]*)")
_TOKEN = re.compile(r"'[^']*'|\"[^\"]*\"|\S+")


def _user_documents() -> List[Path]:
    return sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md"), *(ROOT / "examples").rglob("*.md")])


def _pip_arguments() -> Iterator[Tuple[str, str]]:
    """(where, argument) for each argument of every ``pip install`` in the documents;
    an argument keeps its quotes."""
    for path in _user_documents():
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for match in _PIP_INSTALL.finditer(line):
                args = match.group("args").split("&&")[0]
                for token in _TOKEN.findall(args):
                    yield f"{path.relative_to(ROOT)}:{number}", token


def test_the_documents_install_from_a_clone_or_a_wheel_never_by_name_from_an_index() -> None:
    by_name = [(where, token) for where, token in _pip_arguments()
               if re.fullmatch(r"llm_datadist_ffi(\[[^\]]*\])?", token.strip("'\""))]
    assert by_name == []


def test_every_extra_in_an_install_command_is_quoted() -> None:
    unquoted = [(where, token) for where, token in _pip_arguments()
                if "[" in token and token[0] not in "'\"" and "$(" not in token]
    assert unquoted == []


def test_the_user_guide_says_how_to_install_a_built_wheel_with_an_extra() -> None:
    guide = (ROOT / "docs" / "user-guide.md").read_text(encoding="utf-8")
    assert "pip wheel --no-deps -w dist ." in guide
    assert 'pip install "$(ls dist/llm_datadist_ffi-*.whl)[test]"' in guide
