"""The rule map, docs/rule-map.md: for every rule, the tests that check it.

A test names the rules it checks with a marker::

    @pytest.mark.rules("§7.4", "PR-5")
    def test_pull_kv_blocks_refuses_a_repeated_destination(...): ...

and this module collects those markers and prints the page, so the map cannot name a
test that is gone or miss one that was added. The markers are read from the test
sources with :mod:`ast`, not by importing them: collecting needs no backend and takes a
fraction of a second. The committed page is kept equal to :func:`render` by a test;
after changing a marker, regenerate it with the command in :data:`REGENERATE_COMMAND`.

A rule id is one of (each resolves to a heading of the rule documents, and an id that
resolves to none is an error):

- ``§N`` or ``§N.M``: a section of docs/reference/semantics.md;
- ``cpp-api §N.M``, ``python-api §N.M``: a section of docs/reference/cpp-api.md or
  docs/reference/python-api.md;
- ``PR-n``: a project rule (its heading in docs/reference/semantics.md §16.2);
- ``N-n``, ``V-n``, ``E-n``, ``X-n`` and the other decision ids: a decision of
  docs/semantics.md (its heading carries the anchor ``<a id="e-21"></a>``).

The marker is read in two places only, so that no marker is silently left out: as a
decorator of a module-level test function, and as ``test_x = pytest.mark.rules(...)(Machine.TestCase)``
for a Hypothesis state machine. Its arguments must be string literals.
"""
from __future__ import annotations

import ast
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Sequence, Tuple

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
TESTS = REPO / "tests"
PAGE = DOCS / "rule-map.md"

REGENERATE_COMMAND = "python tests/support/rule_map.py > docs/rule-map.md"

GENERATED_NOTICE = ("<!-- Generated from the `rules` markers of the tests by tests/support/rule_map.py; do not edit. "
                    f"Regenerate with: {REGENERATE_COMMAND} -->")

# The rule documents, in the order the map lists them: (file under docs/, what kind of
# heading defines a rule there, the id prefix of its numbered sections, the heading of
# its table in the map).
RULE_DOCUMENTS: Tuple[Tuple[str, str, str, str], ...] = (
    ("reference/semantics.md", "section", "", "Sections of docs/reference/semantics.md"),
    ("reference/cpp-api.md", "section", "cpp-api ", "Sections of docs/reference/cpp-api.md"),
    ("reference/python-api.md", "section", "python-api ", "Sections of docs/reference/python-api.md"),
    ("reference/semantics.md", "project rule", "", "Project rules (docs/reference/semantics.md §16.2)"),
    ("semantics.md", "decision", "", "Decisions of docs/semantics.md"),
)

_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_SECTION = re.compile(r"^(\d+(?:\.\d+)*)\.?\s+(.*)$")
_PROJECT_RULE = re.compile(r"^(PR-\d+)$")
# A decision heading: ``### <a id="e-21"></a>E-21 Linking while holding a link``.
_DECISION = re.compile(r'^<a id="([a-z]+-\d+)"></a>([A-Z]+-\d+)\s+(.*)$')


class RuleMapError(Exception):
    """A marker the map cannot take: not a literal, in a place the map does not read,
    or naming a rule no document defines."""


@dataclass(frozen=True)
class Rule:
    """A rule id, the document that defines it, the anchor of its heading there, and
    the heading's title."""
    rule_id: str
    document: str
    anchor: str
    title: str
    group: int


def github_slug(heading: str, seen: Dict[str, int]) -> str:
    """The anchor GitHub gives a heading: its rendered text (HTML tags dropped, except
    inside code spans, where ``<T>`` is text) without punctuation, lowercased, spaces
    made hyphens; a repeated slug gets ``-1``, ``-2``, … ."""
    parts = re.split(r"(`[^`]*`)", heading)
    text = "".join(p if p.startswith("`") else re.sub(r"<[^>]+>", "", p) for p in parts).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    slug = text.replace(" ", "-")
    count = seen.get(slug, 0)
    seen[slug] = count + 1
    return slug if count == 0 else f"{slug}-{count}"


def _headings(path: Path) -> Iterator[Tuple[str, str]]:
    """Each heading of a Markdown file outside code fences, with its GitHub anchor."""
    seen: Dict[str, int] = {}
    fenced = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fenced = not fenced
            continue
        match = _HEADING.match(line) if not fenced else None
        if match:
            text = match.group(2)
            yield text, github_slug(text, seen)


def rules_defined(docs: Path = DOCS) -> Dict[str, Rule]:
    """Every rule id the rule documents define, in document order."""
    rules: Dict[str, Rule] = {}

    def add(rule: Rule) -> None:
        if rule.rule_id in rules:
            raise RuleMapError(f"{rule.rule_id} is defined twice: in {rules[rule.rule_id].document} and {rule.document}")
        rules[rule.rule_id] = rule

    for group, (document, kind, prefix, _) in enumerate(RULE_DOCUMENTS):
        for text, slug in _headings(docs / document):
            if kind == "section":
                section = _SECTION.match(text)
                if section:
                    add(Rule(f"{prefix}§{section.group(1)}", document, slug, section.group(2), group))
            elif kind == "project rule":
                if _PROJECT_RULE.match(text):
                    add(Rule(text, document, slug, "", group))
            else:
                decision = _DECISION.match(text)
                if decision:
                    anchor, rule_id, title = decision.groups()
                    if anchor != rule_id.lower():
                        raise RuleMapError(f"{document}: the anchor of {rule_id} is {anchor!r}, not {rule_id.lower()!r}")
                    add(Rule(rule_id, document, anchor, title, group))
    return rules


def _is_rules_marker(node: ast.AST) -> bool:
    """``pytest.mark.rules`` (the attribute, not yet called)."""
    return (isinstance(node, ast.Attribute) and node.attr == "rules"
            and isinstance(node.value, ast.Attribute) and node.value.attr == "mark"
            and isinstance(node.value.value, ast.Name) and node.value.value.id == "pytest")


def _marker_ids(call: ast.Call, where: str) -> List[str]:
    if call.keywords or not all(isinstance(a, ast.Constant) and isinstance(a.value, str) for a in call.args):
        raise RuleMapError(f"{where}: pytest.mark.rules takes rule ids as string literals only")
    if not call.args:
        raise RuleMapError(f"{where}: pytest.mark.rules names no rule")
    return [a.value for a in call.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]


def markers_in(source: str, module: str) -> Dict[str, List[str]]:
    """The rule ids each test of one module names, by test name, in source order."""
    tree = ast.parse(source)
    found: Dict[str, List[str]] = {}
    read: set[int] = set()          # the marker nodes taken, to find any left over
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test_"):
            for decorator in node.decorator_list:
                if isinstance(decorator, ast.Call) and _is_rules_marker(decorator.func):
                    found.setdefault(node.name, []).extend(_marker_ids(decorator, f"{module}::{node.name}"))
                    read.add(id(decorator.func))
        elif (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
              and node.targets[0].id.startswith("test_") and isinstance(node.value, ast.Call)
              and isinstance(node.value.func, ast.Call) and _is_rules_marker(node.value.func.func)):
            name = node.targets[0].id
            found.setdefault(name, []).extend(_marker_ids(node.value.func, f"{module}::{name}"))
            read.add(id(node.value.func.func))
    for node in ast.walk(tree):
        if _is_rules_marker(node) and id(node) not in read:
            line = getattr(node, "lineno", "?")
            raise RuleMapError(f"{module}:{line}: pytest.mark.rules is read only on a module-level test function "
                               "or a `test_x = pytest.mark.rules(...)(Machine.TestCase)` assignment")
    return found


def collect(tests: Path = TESTS) -> Dict[str, Dict[str, List[str]]]:
    """Rule ids by module (its path below ``tests/``, ``native/test_engine_caches.py``) and test."""
    markers: Dict[str, Dict[str, List[str]]] = {}
    for path in sorted(tests.rglob("test_*.py")):
        module = path.relative_to(tests).as_posix()
        found = markers_in(path.read_text(encoding="utf-8"), module)
        if found:
            markers[module] = found
    return markers


def tests_by_rule(markers: Dict[str, Dict[str, List[str]]], rules: Dict[str, Rule]) -> Dict[str, Dict[str, List[str]]]:
    """For each rule a test names: the modules and their tests, each list sorted.

    Raises RuleMapError for a rule id no document defines, and for a test that names
    one rule twice."""
    by_rule: Dict[str, Dict[str, List[str]]] = {}
    for module, tests in markers.items():
        for test, ids in tests.items():
            repeated = sorted({i for i in ids if ids.count(i) > 1})
            if repeated:
                raise RuleMapError(f"{module}::{test} names {', '.join(repeated)} more than once")
            for rule_id in ids:
                if rule_id not in rules:
                    raise RuleMapError(f"{module}::{test} names {rule_id!r}, which no rule document defines")
                by_rule.setdefault(rule_id, {}).setdefault(module, []).append(test)
    for modules in by_rule.values():
        for tests in modules.values():
            tests.sort()
    return by_rule


def _link(rule: Rule) -> str:
    # The page sits in docs/, beside the documents it links to.
    return f"[{rule.rule_id}]({rule.document}#{rule.anchor})"


def render(tests: Path = TESTS, docs: Path = DOCS) -> str:
    """The Markdown rule map, as committed."""
    rules = rules_defined(docs)
    markers = collect(tests)
    by_rule = tests_by_rule(markers, rules)
    marked = sum(len(t) for t in markers.values())
    lines = [
        GENERATED_NOTICE, "",
        "# Rule map: the tests that check each rule", "",
        "A test that checks a rule names it with a marker, `@pytest.mark.rules(\"§7.4\", \"PR-5\")`;",
        "this page lists, for every rule some test names, those tests, by module of `tests/`",
        "(one row per test; the rule is named on its first row, a module on the first row of its tests).",
        "A rule is a section of a reference page (docs/reference/), a project rule `PR-n`",
        "(docs/reference/semantics.md §16.2), or a decision of docs/semantics.md; each id",
        "links to its heading. What each native rule says and how it holds is in",
        "docs/semantics.md §7; how the oracle-driven suites reach the rules, in docs/testing.md §10.",
        "",
        f"{marked} tests name {len(by_rule)} rules.",
    ]
    for group, (_, _, _, heading) in enumerate(RULE_DOCUMENTS):
        listed = [r for r in rules.values() if r.group == group and r.rule_id in by_rule]
        if not listed:
            continue
        lines.extend(["", f"## {heading}", "", "| Rule | Module | Test |", "|---|---|---|"])
        for rule in listed:
            # One row per test, the rule named on its first row and each module on the
            # first row of its tests: no cell grows with the number of tests, and a
            # changed marker changes the lines of its own tests only.
            named = f"{_link(rule)} {rule.title}".rstrip()
            modules = by_rule[rule.rule_id]
            for module in sorted(modules):
                shown = f"`{module.removesuffix('.py')}`"
                for test in modules[module]:
                    lines.append(f"| {named} | {shown} | `{test}` |")
                    named = shown = ""
    return "\n".join(lines) + "\n"


def print_page(argv: Sequence[str], render_page: Callable[[], str], command: str) -> int:
    """The command line of a page generator: no arguments, the page on stdout."""
    if argv:
        print(f"usage: {command}", file=sys.stderr)
        return 2
    sys.stdout.write(render_page())
    return 0


def main(argv: Sequence[str]) -> int:
    return print_page(argv, render, REGENERATE_COMMAND)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
