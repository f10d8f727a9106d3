"""docs/rule-map.md is generated from the tests' ``rules`` markers (tests/support/rule_map.py):
the committed page is never stale, every marker names a rule some document defines,
the markers the generator reads are the ones pytest sees, and the decisions of
docs/semantics.md are headings that every reference links to."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import rule_map

REPO = Path(__file__).resolve().parents[2]
SEMANTICS = REPO / "docs" / "semantics.md"


def write_tests(directory: Path, source: str, name: str = "test_example.py") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / name).write_text(textwrap.dedent(source), encoding="utf-8")
    return directory


def test_the_committed_rule_map_equals_the_generator_output() -> None:
    committed = rule_map.PAGE.read_text(encoding="utf-8")
    assert committed == rule_map.render(), (
        f"docs/rule-map.md is stale; regenerate it with `{rule_map.REGENERATE_COMMAND}`")


def test_the_map_lists_each_rule_once_with_its_tests_by_module(tmp_path: Path) -> None:
    tests = write_tests(tmp_path / "tests", """
        import pytest

        @pytest.mark.rules("§7.4", "PR-5")
        def test_b(): pass

        @pytest.mark.rules("PR-5")
        @pytest.mark.parametrize("x", [1, 2])
        def test_a(x): pass

        test_machine = pytest.mark.rules("E-21")(Machine.TestCase)

        def test_without_rules(): pass
        """)
    write_tests(tests / "deeper", """
        import pytest

        @pytest.mark.rules("PR-5")
        async def test_c(): pass
        """, name="test_other.py")
    page = rule_map.render(tests=tests).splitlines()
    assert "4 tests name 3 rules." in page
    assert page.count("| [§7.4](reference/semantics.md#74-duplicates) Duplicates |  | `test_example` | `test_b` |") == 1
    # PR-5 is a lint the companion reports on a device: the column says so on its first row
    first = page.index("| [PR-5](reference/semantics.md#pr-5) | yes | `deeper/test_other` | `test_c` |")
    assert page[first + 1:first + 3] == ["|  |  | `test_example` | `test_a` |", "|  |  |  | `test_b` |"]
    assert ("| [E-21](semantics.md#e-21) Linking while holding a link (PR-42) |  | `test_example` | `test_machine` |"
            in page)
    assert not any("test_without_rules" in line for line in page)


def test_a_changed_marker_makes_the_committed_page_stale(tmp_path: Path) -> None:
    # The staleness test compares with a rendering of the current markers: one marker
    # more changes the rendering.
    tests = REPO / "tests"
    changed_module = tests / "native" / "test_engine_links.py"
    source = changed_module.read_text(encoding="utf-8")
    changed = source.replace("@pytest.mark.rules(", '@pytest.mark.rules("§14", ', 1)
    assert changed != source
    for path in sorted(tests.rglob("test_*.py")):
        write_tests(tmp_path / path.parent.relative_to(tests),
                    changed if path == changed_module else path.read_text(encoding="utf-8"), name=path.name)
    assert rule_map.render(tests=tmp_path) != rule_map.PAGE.read_text(encoding="utf-8")


def test_a_rule_no_document_defines_is_an_error_naming_the_test(tmp_path: Path) -> None:
    tests = write_tests(tmp_path, """
        import pytest

        @pytest.mark.rules("PR-5", "PR-99")
        def test_x(): pass
        """)
    with pytest.raises(rule_map.RuleMapError, match=r"test_example.py::test_x names 'PR-99', which no rule document"):
        rule_map.render(tests=tests)


def test_a_rule_named_twice_by_one_test_is_an_error(tmp_path: Path) -> None:
    tests = write_tests(tmp_path, """
        import pytest

        @pytest.mark.rules("PR-5")
        @pytest.mark.rules("§7.4", "PR-5")
        def test_x(): pass
        """)
    with pytest.raises(rule_map.RuleMapError, match=r"test_example.py::test_x names PR-5 more than once"):
        rule_map.render(tests=tests)


@pytest.mark.parametrize("source, message", [
    ('pytestmark = pytest.mark.rules("PR-5")', r"test_example.py:1: pytest.mark.rules is read only on"),
    ('@pytest.mark.parametrize("x", [pytest.param(1, marks=pytest.mark.rules("PR-5"))])\ndef test_x(x): pass',
     r"test_example.py:1: pytest.mark.rules is read only on"),
    ('class TestThing:\n    @pytest.mark.rules("PR-5")\n    def test_x(self): pass',
     r"test_example.py:2: pytest.mark.rules is read only on"),
    ('@pytest.mark.rules("PR-5")\ndef helper(): pass', r"test_example.py:1: pytest.mark.rules is read only on"),
    ('RULES = ("PR-5",)\n@pytest.mark.rules(*RULES)\ndef test_x(): pass', r"string literals only"),
    ('@pytest.mark.rules("PR-5", reason="x")\ndef test_x(): pass', r"string literals only"),
    ("@pytest.mark.rules()\ndef test_x(): pass", r"names no rule"),
], ids=["module pytestmark", "a param's marks", "a method", "not a test", "not a literal", "a keyword", "no id"])
def test_a_marker_the_map_would_not_read_is_an_error(tmp_path: Path, source: str, message: str) -> None:
    tests = write_tests(tmp_path, source + "\n")
    with pytest.raises(rule_map.RuleMapError, match=message):
        rule_map.collect(tests)


def test_rule_ids_resolve_to_the_anchors_github_gives_their_headings() -> None:
    rules = rule_map.rules_defined()
    assert {rule_id: (rules[rule_id].document, rules[rule_id].anchor) for rule_id in (
        "§5", "§7.4", "§10.2", "cpp-api §6.13", "cpp-api §6.8", "python-api §11.7", "PR-42", "E-21", "OPT-1")} == {
        "§5": ("reference/semantics.md", "5-tensor_num_per_layer"),
        "§7.4": ("reference/semantics.md", "74-duplicates"),
        "§10.2": ("reference/semantics.md", "102-link_clusters--linkllmclusters-v2-native"),
        "cpp-api §6.13": ("reference/cpp-api.md", "613-registerkvcache--unregisterkvcache"),
        "cpp-api §6.8": ("reference/cpp-api.md", "68-status-unlinkllmclustersconst-stdvectorclusterinfo-clusters-"
                         "stdvectorstatus-rets-int32_t-timeout_in_millis--1000-bool-force_flag--false"),
        "python-api §11.7": ("reference/python-api.md",
                             "117-remap_registered_memorymem_infos-unionmeminfo-listmeminfo---none"),
        "PR-42": ("reference/semantics.md", "pr-42"),
        "E-21": ("semantics.md", "e-21"),
        "OPT-1": ("semantics.md", "opt-1"),
    }


def test_a_repeated_heading_gets_the_numbered_anchor_github_gives_it() -> None:
    seen: dict[str, int] = {}
    assert [rule_map.github_slug(h, seen) for h in ("Notes", "Notes", "`Notes`")] == ["notes", "notes-1", "notes-2"]


# A plugin for a pytest run in a subprocess: writes, for every collected test, the rule
# ids pytest's own marker machinery finds on it.
PLUGIN = '''
import json, os
import pytest

def pytest_collection_finish(session):
    found = {}
    for item in session.items:
        owner = item.getparent(pytest.Class)
        name = owner.name if owner is not None else item.originalname
        module = item.path.relative_to(os.environ["RULES_TESTS"]).as_posix()
        ids = [i for mark in item.iter_markers("rules") for i in mark.args]
        if ids:
            found.setdefault(module, {})[name] = sorted(ids)
    with open(os.environ["RULES_OUT"], "w") as out:
        json.dump(found, out)
'''


def test_pytest_sees_the_markers_the_map_reads(tmp_path: Path) -> None:
    read = rule_map.collect()
    (tmp_path / "rules_plugin.py").write_text(PLUGIN, encoding="utf-8")
    out = tmp_path / "found.json"
    modules = [str(REPO / "tests" / module) for module in sorted(read)]
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "RULES_OUT": str(out),
           "RULES_TESTS": str(REPO / "tests")}
    result = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                             "-p", "rules_plugin", *modules],
                            cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    seen = json.loads(out.read_text(encoding="utf-8"))
    assert seen == {module: {test: sorted(ids) for test, ids in tests.items()} for module, tests in read.items()}
    assert sum(len(tests) for tests in seen.values()) >= 199


DECISION_IDS = (["OPT-1"] + [f"N-{n}" for n in range(1, 7)] + [f"ACL-{n}" for n in range(1, 10)]
                + [f"S-{n}" for n in range(1, 5)] + [f"V-{n}" for n in range(1, 24)]
                + [f"E-{n}" for n in range(1, 28)] + [f"X-{n}" for n in range(1, 26)])


def test_every_decision_of_the_semantics_page_is_a_heading_with_its_id_as_anchor() -> None:
    text = SEMANTICS.read_text(encoding="utf-8")
    headings = re.findall(r'^#{3,4} <a id="([a-z]+-\d+)"></a>([A-Z]+-\d+) \S', text, re.MULTILINE)
    assert [rule_id for _, rule_id in headings] == DECISION_IDS
    assert all(anchor == rule_id.lower() for anchor, rule_id in headings)
    assert re.findall(r"^\*\*[A-Z]+-\d+", text, re.MULTILINE) == []      # no bold label left


def _docs_pages() -> list[Path]:
    generated = {"rule-map.md", "error-codes.md", "native-api.md"}
    return [p for p in sorted((REPO / "docs").rglob("*.md")) if p.name not in generated]


def _prose(line: str) -> str:
    """A line without its code spans and links."""
    return re.sub(r"\[[^\]]*\]\([^)]*\)", " ", re.sub(r"`[^`]*`", " ", line))


def test_every_reference_to_a_decision_in_the_docs_links_to_its_anchor() -> None:
    anchors = {rule_id.lower() for rule_id in DECISION_IDS}
    decision = re.compile(r"(?<![\w-])(?:" + "|".join(DECISION_IDS) + r")(?![\w-])")
    unlinked, broken = [], []
    for page in _docs_pages():
        fenced = False
        for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            if line.startswith("```"):
                fenced = not fenced
            if fenced or line.startswith("#"):
                continue
            where = f"{page.relative_to(REPO)}:{number}"
            unlinked += [f"{where}: {m.group(0)}" for m in decision.finditer(_prose(line))]
            for target, fragment in re.findall(r"\]\(([^)#]*)#([^)]+)\)", line):
                if (REPO / "docs" / page.parent.relative_to(REPO / "docs") / target).resolve() == SEMANTICS.resolve() \
                        or (not target and page == SEMANTICS):
                    if re.fullmatch(r"[a-z]+-\d+", fragment) and fragment not in anchors:
                        broken.append(f"{where}: #{fragment}")
    assert unlinked == []
    assert broken == []


def test_the_command_line_takes_no_argument(capsys: pytest.CaptureFixture[str]) -> None:
    assert rule_map.main(["--write"]) == 2
    assert rule_map.REGENERATE_COMMAND in capsys.readouterr().err


def test_a_decision_whose_anchor_is_not_its_id_is_an_error(tmp_path: Path) -> None:
    for name in ("reference/semantics.md", "reference/cpp-api.md", "reference/python-api.md", "semantics.md"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text((REPO / "docs" / name).read_text(encoding="utf-8"), encoding="utf-8")
    page = tmp_path / "semantics.md"
    page.write_text(page.read_text(encoding="utf-8").replace('<a id="e-21"></a>E-21', '<a id="e-12"></a>E-21'),
                    encoding="utf-8")
    with pytest.raises(rule_map.RuleMapError, match=r"the anchor of E-21 is 'e-12', not 'e-21'"):
        rule_map.rules_defined(tmp_path)


def test_a_lint_that_needs_the_peers_state_says_why_it_cannot_fire_on_a_device(tmp_path: Path) -> None:
    tests = write_tests(tmp_path / "tests", """
        import pytest

        @pytest.mark.rules("PR-28")
        def test_d(): pass
        """)
    page = rule_map.render(tests=tests).splitlines()
    row = next(line for line in page if line.startswith("| [PR-28]"))
    assert "| no: needs the listener's real cluster id, which only the peer knows |" in row
