"""docs/reference/: the native API page is generated from the docstrings of
``llm_datadist_ffi.native`` and the committed copy is never stale; every reference
page keeps the section numbers that citations use and cites nothing outside the
repository; every ``§`` in a comment, docstring or document names its document, and
that document and section exist (tests/support/citations.py)."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import citations
import pytest

from llm_datadist_ffi._tools import _docgen
from llm_datadist_ffi import native

REPO = Path(__file__).resolve().parents[2]
REFERENCE = REPO / "docs" / "reference"
NATIVE_PAGE = REFERENCE / "native-api.md"

# The methods of the C++ class that the native layer mirrors, written out here rather
# than read from the class, so that a method dropped from the page is noticed.
CPP_METHODS = (
    "initialize", "finalize", "set_role", "link_llm_clusters", "unlink_llm_clusters",
    "register_kv_cache", "unregister_kv_cache", "allocate_cache", "deallocate_cache",
    "pull_kv_cache", "pull_kv_blocks", "push_kv_cache", "push_kv_blocks", "copy_kv_cache", "copy_kv_blocks",
)


def test_the_committed_native_api_page_equals_the_generator_output() -> None:
    committed = NATIVE_PAGE.read_text(encoding="utf-8")
    assert committed == _docgen.render_native_api(), (
        f"docs/reference/native-api.md is stale; regenerate it with `{_docgen.REGENERATE_COMMAND}`"
    )


def test_the_page_starts_with_the_generated_notice_naming_the_command() -> None:
    first = _docgen.render_native_api().splitlines()[0]
    assert "do not edit" in first
    assert "python -m llm_datadist_ffi docs native-api > docs/reference/native-api.md" in first


def test_every_exported_name_of_the_native_module_has_an_entry() -> None:
    page = _docgen.render_native_api()
    for name in native.__all__:
        assert f"`{name}" in page, name


def test_every_mirrored_cpp_method_appears_with_its_signature_and_docstring() -> None:
    page = _docgen.render_native_api()
    assert "### `LlmDataDist(cluster_id: int, role: Union[LlmRole, int])`" in page
    for method in CPP_METHODS:
        heading = re.search(rf"^#### `LlmDataDist\.{method}\((.*)\)( -> .+)?`$", page, re.MULTILINE)
        assert heading is not None, method
        # the method's docstring follows its heading
        first_doc_line = getattr(native.LlmDataDist, method).__doc__.strip().splitlines()[0]
        next_heading = re.compile(r"^#", re.MULTILINE).search(page, heading.end())
        assert next_heading is not None
        assert heading.end() < page.index(first_doc_line, heading.end()) < next_heading.start(), method


def test_properties_are_marked_as_properties() -> None:
    page = _docgen.render_native_api()
    assert "#### `LlmDataDist.link_reasons: tuple[str, tuple[str, ...]]` (property)" in page
    assert "#### `LlmDataDist.cluster_id: int` (property)" in page


def test_dataclass_defaults_read_as_code() -> None:
    page = _docgen.render_native_api()
    assert ("### `CacheDesc(num_tensors: int, data_type: Union[DataType, GeDataType, int], shape: Sequence[int], "
            "placement: CachePlacement = CachePlacement.DEVICE)`") in page
    assert "tensor_addrs: list[int] = list()" in page
    assert "<factory>" not in page


def test_enum_members_are_listed_with_their_values() -> None:
    page = _docgen.render_native_api()
    assert "| `PROMPT` | `1` |\n| `DECODER` | `2` |\n| `MIX` | `3` |" in page
    assert "| `HOST` | `0` |\n| `DEVICE` | `1` |" in page


def test_a_changed_docstring_changes_the_page(monkeypatch: pytest.MonkeyPatch) -> None:
    before = _docgen.render_native_api()
    monkeypatch.setattr(native.LlmDataDist.finalize, "__doc__", "A docstring edited after generation.")
    after = _docgen.render_native_api()
    assert after != before
    assert "A docstring edited after generation." in after


def test_the_command_line_prints_the_page(tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "llm_datadist_ffi", "docs", "native-api"],
                            capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout == NATIVE_PAGE.read_text(encoding="utf-8")


def test_the_command_line_refuses_an_unknown_page_without_a_traceback(tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "llm_datadist_ffi", "docs", "no-such-page"],
                            capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert result.returncode == 2
    assert "invalid choice: 'no-such-page'" in result.stderr
    assert "Traceback" not in result.stderr


# Each reference page keeps the section numbers that code, messages and documents cite
# (`docs/reference/semantics.md §9.7`, `docs/reference/cpp-api.md` §6.10, `semantics §2.3` in C comments), so that
# every such citation names a heading of docs/reference/<page>.md. `docs/semantics.md`
# (the implementation notes) is another page and is not matched.
REFERENCE_PAGES = ("semantics", "python-api", "cpp-api", "status-codes", "acl", "usage")
CITATION = re.compile(
    r"(?:(?<=docs/reference/)|(?<![/\w]))(" + "|".join(REFERENCE_PAGES) + r")(?:\.md)?`?,? ?§ ?(\d+(?:\.\d+)*)")


def _section_headings(page: str) -> set[str]:
    text = (REFERENCE / f"{page}.md").read_text(encoding="utf-8")
    return {m.group(1) for m in re.finditer(r"^#+ (\d+(?:\.\d+)*)\.? ", text, re.MULTILINE)}


def _repository_text_files() -> list[Path]:
    listed = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    paths = [REPO / name for name in listed.splitlines()]
    return [p for p in paths if p.suffix in {".py", ".md", ".c", ".h", ".cpp", ".toml", ".sh", ""} and p.is_file()]


def test_the_citation_pattern_finds_the_cited_page_and_section() -> None:
    text = ("see docs/reference/semantics.md §9.7, `docs/reference/cpp-api.md` §6.10, docs/reference/acl.md §5.1, docs/reference/semantics.md §2.3; "
            "not docs/semantics.md §5.1")
    assert [m.groups() for m in CITATION.finditer(text)] == [
        ("semantics", "9.7"), ("cpp-api", "6.10"), ("acl", "5.1"), ("semantics", "2.3")]


def test_every_section_cited_in_the_repository_is_a_heading_of_its_reference_page() -> None:
    headings = {page: _section_headings(page) for page in REFERENCE_PAGES}
    dangling = set()
    found = 0
    for path in _repository_text_files():
        if path.parent == REFERENCE:
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for match in CITATION.finditer(text):
            found += 1
            page, section = match.groups()
            if section not in headings[page]:
                dangling.add(f"{path.relative_to(REPO)}: {page}.md §{section}")
    assert found > 100              # the pattern still matches the way the code cites
    assert sorted(dangling) == []


def test_the_reference_index_names_every_page() -> None:
    index = (REFERENCE / "README.md").read_text(encoding="utf-8")
    for page in sorted(REFERENCE.glob("*.md")):
        if page.name != "README.md":
            assert f"({page.name})" in index, page.name


def test_the_mock_acl_rules_have_their_own_headings() -> None:
    text = (REFERENCE / "acl.md").read_text(encoding="utf-8")
    assert re.findall(r"^#### (A-\d+)$", text, re.MULTILINE) == [f"A-{n}" for n in range(1, 10)]


def test_every_project_rule_has_its_own_heading_in_the_semantics_reference() -> None:
    text = (REFERENCE / "semantics.md").read_text(encoding="utf-8")
    headings = re.findall(r"^#### (PR-\d+)$", text, re.MULTILINE)
    assert headings == [f"PR-{n}" for n in range(1, 43)]


def test_no_file_of_the_repository_cites_the_developers_inputs() -> None:
    # the developers' input pages live outside the repository; users do not have them
    outside = ("../" + "shared", "shared/" + "spec", "DESIGN" + ".md", "STYLE" + ".md")
    tracked = subprocess.run(["git", "-C", str(REPO), "ls-files"], capture_output=True, text=True,
                             check=True).stdout.split()
    for rel in tracked:
        path = REPO / rel
        if path.suffix not in (".py", ".c", ".h", ".cpp", ".md", ".sh", ".toml") or not path.is_file():
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        for name in outside:
            assert name not in text, f"{rel} cites {name}"


def test_every_decision_id_cited_anywhere_is_defined_in_the_docs() -> None:
    # E-, X-, V-, N-, ACL-, S- decisions are headings of docs/semantics.md (or bold
    # labels of docs/testing.md); A-n are headings of docs/reference/acl.md
    tracked = subprocess.run(["git", "-C", str(REPO), "ls-files"], capture_output=True, text=True,
                             check=True).stdout.split()
    cited: dict[str, str] = {}
    for rel in tracked:
        if rel.endswith((".py", ".c", ".h", ".cpp", ".md")) and (REPO / rel).is_file():
            text = (REPO / rel).read_text(encoding="utf-8", errors="replace")
            for found in re.finditer(r"(?<![\w-])((?:E|X|V|N|ACL|S|A)-\d+)(?![\w-])", text):
                cited.setdefault(found.group(1), rel)
    defined: set[str] = set()
    for rel in ("docs/semantics.md", "docs/testing.md", "docs/reference/acl.md"):
        text = (REPO / rel).read_text(encoding="utf-8")
        defined |= set(re.findall(r"^\*\*((?:E|X|V|N|ACL|S|A)-\d+)\b", text, re.MULTILINE))
        defined |= set(re.findall(r'^#+ (?:<a id="[a-z]+-\d+"></a>)?((?:E|X|V|N|ACL|S|A)-\d+)\b', text, re.MULTILINE))
    assert len(cited) > 50
    assert {rule: where for rule, where in cited.items() if rule not in defined} == {}


# ---- every § names its document (tests/support/citations.py) --------------------------------
# The roots whose comments, docstrings and documents are read are citations.ROOTS; the
# mock's C sources (mock_libs, include) join them once their comments name documents.

def test_every_section_citation_names_an_existing_document_and_section() -> None:
    assert citations.problems() == []


def test_no_file_cites_the_developers_design_notes_by_section() -> None:
    # the developers' design notes are outside the repository; the repository's own
    # documents say the same (docs/design.md "Backend selection", "The C ABI"; docs/ascend.md)
    design = "DESIGN" + " §"
    offenders = [path for path in citations.tracked_files()
                 if design in (REPO / path).read_text(encoding="utf-8", errors="replace")]
    assert offenders == []


@pytest.mark.parametrize("path, text, expected", [
    ("tests/x.py", "# the bounds (§4.2)\n", ["tests/x.py:1: bare §4.2: # the bounds (§4.2)"]),
    ("tests/x.py", '"""Pull rules (semantics.md §4.2, §4.5 and docs/semantics.md §7)."""\n', []),
    ("tests/x.py", '@pytest.mark.rules("§4.2")\ndef test_a():\n    """The §4.2 bounds."""\n',
     ["tests/x.py:3: bare §4.2: \"\"\"The §4.2 bounds.\"\"\""]),
    ("tests/x.py", 'MESSAGE = "see §4.2"\n', []),                  # a string, not a comment or docstring
    ("tests/x.py", "# as docs/security.md\n# §2.2 says; §2.3\nx = 1  # §2.4\n",   # a citation may wrap
     ["tests/x.py:2: bare §2.3: # §2.2 says; §2.3", "tests/x.py:3: bare §2.4: # §2.4"]),
    ("tests/x.py", "# python-api" + ".md §99.1\n",
     ["tests/x.py:1: docs/reference/python-api.md has no §99.1: # python-api" + ".md §99.1"]),
    ("tests/x.py", "# nowhere.md §1\n", ["tests/x.py:1: docs/nowhere.md does not exist: # nowhere.md §1"]),
    ("docs/x.md", "As `cpp-api.md` §6.7 says; §6.8 too.\n`§6.9` in code is no citation.\n"
     "cpp-api.md §6.10, §6.11 and §6.12.\n",
     ["docs/x.md:1: bare §6.8: As `cpp-api.md` §6.7 says; §6.8 too."]),
    ("docs/x.md", "| [§7.4](reference/semantics.md#74-duplicates) | x |\n", []),
    ("mock_libs/x.c", "/* the order of semantics §8.0 */\nint f(void); // §8.0\n",
     ["mock_libs/x.c:2: bare §8.0: // §8.0"]),
])
def test_the_citation_check_reports_bare_and_dangling_citations(tmp_path: Path, path: str, text: str,
                                                                 expected: list[str]) -> None:
    for document in ("reference/semantics.md", "reference/python-api.md", "reference/cpp-api.md", "semantics.md",
                     "security.md"):
        target = tmp_path / "docs" / document
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text((REPO / "docs" / document).read_text(encoding="utf-8"), encoding="utf-8")
    (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / path).write_text(text, encoding="utf-8")
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    subprocess.run(["git", "add", "-A"], cwd=tmp_path, check=True)
    assert citations.problems(roots=(path,), repo=tmp_path) == expected
