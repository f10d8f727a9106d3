"""docs/reference/: the native API page is generated from the docstrings of
``llm_datadist_ffi.native`` and the committed copy is never stale; every reference
page keeps the section numbers that citations use and cites nothing outside the
repository."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from llm_datadist_ffi import _docgen, native

REPO = Path(__file__).resolve().parents[1]
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


# Each reference page keeps the section numbers of the pages the code cites, so that a
# citation `<page>.md §x.y` resolves to a heading of docs/reference/<page>.md.
PAGES_AND_SECTIONS = {
    "semantics.md": ["0.1", "0.3", "1.2", "2.2", "3.6", "4.4", "5", "6.1", "7.4", "8.0", "8.12",
                     "9.7", "10.4", "11", "12.3", "13", "14", "15", "16", "16.1"],
}


@pytest.mark.parametrize("page, sections", sorted(PAGES_AND_SECTIONS.items()))
def test_reference_pages_have_the_cited_section_headings(page: str, sections: list[str]) -> None:
    headings = {m.group(1) for m in re.finditer(r"^#+ (\d+(?:\.\d+)*)\.? ", (REFERENCE / page).read_text(
        encoding="utf-8"), re.MULTILINE)}
    assert [s for s in sections if s not in headings] == []


def test_every_project_rule_has_its_own_heading_in_the_semantics_reference() -> None:
    text = (REFERENCE / "semantics.md").read_text(encoding="utf-8")
    headings = re.findall(r"^#### (PR-\d+)$", text, re.MULTILINE)
    assert headings == [f"PR-{n}" for n in range(1, 43)]


def test_no_reference_page_cites_the_developers_inputs() -> None:
    for page in sorted(REFERENCE.glob("*.md")):
        text = page.read_text(encoding="utf-8")
        assert "../shared" not in text and "shared/spec" not in text, page.name
