"""The method map, docs/method-map.md: for every public method of the engine and cache
manager classes, the tests that call it.

The rule map (docs/rule-map.md, ``rule_map.py``) finds tests by rule; this map finds
them by API method: ``pull_blocks`` is checked in many folders, and a change to it
should run all of them. Both the methods and the calls are read with :mod:`ast`, not
by importing anything:

- the methods are the public ones (no leading ``_``, no property) defined in the
  bodies of :data:`CLASSES`, read from the package's sources;
- a call is ``<anything>.<method>(...)`` in a test: in the body of a module-level
  ``test_*`` function, in any method of a module-level class (a Hypothesis state
  machine, a ``Test*`` class: the entry is the class), or in a module-level helper
  function of the same file that such a test calls, directly or through other helpers.

A call through ``getattr`` or a name built at run time is not seen; a call of a
method of the same name on another object is counted (``native`` and the vendor
managers both have ``allocate_cache``: the map names every class that defines it).
The committed page is kept equal to :func:`render` by a test; regenerate it with the
command in :data:`REGENERATE_COMMAND`.
"""
from __future__ import annotations

import ast
import sys
from pathlib import Path
from typing import Dict, Iterator, List, Sequence, Set, Tuple

import rule_map

REPO = Path(__file__).resolve().parents[2]
TESTS = REPO / "tests"
PAGE = REPO / "docs" / "method-map.md"

REGENERATE_COMMAND = "python tests/support/method_map.py > docs/method-map.md"

GENERATED_NOTICE = ("<!-- Generated from the calls of the tests by tests/support/method_map.py; do not edit. "
                    f"Regenerate with: {REGENERATE_COMMAND} -->")

#: (source file under the repository, class): the classes whose public methods are mapped.
CLASSES: Tuple[Tuple[str, str], ...] = (
    ("llm_datadist_ffi/native.py", "LlmDataDist"),
    ("llm_datadist_ffi/_vendor/v2/llm_datadist.py", "LLMDataDist"),
    ("llm_datadist_ffi/_vendor/v2/cache_manager.py", "CacheManager"),
    ("llm_datadist_ffi/_vendor/v1/cache_manager.py", "KvCacheManager"),
)


def public_methods(repo: Path = REPO) -> Dict[str, List[str]]:
    """Method name -> the classes of :data:`CLASSES` that define it (in that order)."""
    methods: Dict[str, List[str]] = {}
    for relative, class_name in CLASSES:
        tree = ast.parse((repo / relative).read_text(encoding="utf-8"), relative)
        classes = [node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == class_name]
        assert len(classes) == 1, f"{relative} defines no class {class_name}"
        for node in classes[0].body:
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or node.name.startswith("_"):
                continue
            if any(isinstance(d, ast.Name) and d.id == "property" for d in node.decorator_list):
                continue            # read, not called: an attribute
            methods.setdefault(node.name, []).append(class_name)
    return methods


def _calls(node: ast.AST) -> Tuple[Set[str], Set[str]]:
    """(attribute names called, plain names called) anywhere inside ``node``."""
    attributes: Set[str] = set()
    names: Set[str] = set()
    for inner in ast.walk(node):
        if isinstance(inner, ast.Call):
            if isinstance(inner.func, ast.Attribute):
                attributes.add(inner.func.attr)
            elif isinstance(inner.func, ast.Name):
                names.add(inner.func.id)
    return attributes, names


def calls_by_test(source: str, methods: Set[str], where: str = "<test>") -> Dict[str, Set[str]]:
    """Test (function or class) name -> the mapped methods it calls, through the
    module's helper functions too."""
    tree = ast.parse(source, where)
    helpers: Dict[str, Tuple[Set[str], Set[str]]] = {}
    entries: Dict[str, Tuple[Set[str], Set[str]]] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            (entries if node.name.startswith("test") else helpers)[node.name] = _calls(node)
        elif isinstance(node, ast.ClassDef):
            entries[node.name] = _calls(node)
    result: Dict[str, Set[str]] = {}
    for name, (attributes, called) in entries.items():
        found = attributes & methods
        seen: Set[str] = set()
        pending = [helper for helper in called if helper in helpers]
        while pending:
            helper = pending.pop()
            if helper in seen:
                continue
            seen.add(helper)
            helper_attributes, helper_called = helpers[helper]
            found |= helper_attributes & methods
            pending.extend(h for h in helper_called if h in helpers and h not in seen)
        if found:
            result[name] = found
    return result


def test_files(tests: Path = TESTS) -> Iterator[Path]:
    yield from sorted(tests.rglob("test_*.py"))


def collect(tests: Path = TESTS, repo: Path = REPO) -> Dict[str, Dict[str, List[str]]]:
    """Method -> test file (relative to ``tests``, no suffix) -> test names."""
    methods = public_methods(repo)
    table: Dict[str, Dict[str, List[str]]] = {method: {} for method in methods}
    for path in test_files(tests):
        module = path.relative_to(tests).with_suffix("").as_posix()
        for test, called in calls_by_test(path.read_text(encoding="utf-8"), set(methods), module).items():
            for method in called:
                table[method].setdefault(module, []).append(test)
    for by_module in table.values():
        for names in by_module.values():
            names.sort()
    return table


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def render(tests: Path = TESTS, repo: Path = REPO) -> str:
    methods = public_methods(repo)
    table = collect(tests, repo)
    lines = [
        GENERATED_NOTICE,
        "",
        "# Method map: the tests that call each API method",
        "",
        "For every public method of the native `LlmDataDist` (`llm_datadist_ffi.native`) and of the",
        "vendor-compatible `LLMDataDist`, `CacheManager` (v2) and `KvCacheManager` (v1), the tests",
        "that call it, by module of `tests/`: a test function, or a class (a Hypothesis state",
        "machine) whose methods call it. A call made by a helper function of the test's own",
        "module counts; a call made by a helper of `tests/support/` does not. The tests of a",
        "rule are in docs/rule-map.md; how the suites are organised, in docs/testing.md.",
        "",
    ]
    called = sum(1 for by_module in table.values() if by_module)
    lines.append(f"{called} of {len(methods)} methods are called by a test.")
    lines.append("")
    lines.append("| Method | Defined by | Test modules |")
    lines.append("|---|---|---|")
    for method in sorted(methods):
        modules = table[method]
        count = sum(len(names) for names in modules.values())
        summary = f"{_count(count, 'test')} in {_count(len(modules), 'module')}" if modules else "no test calls it"
        lines.append(f"| [`{method}`](#{method}) | {', '.join(methods[method])} | {summary} |")
    for method in sorted(methods):
        lines.extend(["", f"## {method}", ""])
        lines.append(f"Defined by {', '.join(f'`{cls}`' for cls in methods[method])}.")
        modules = table[method]
        if not modules:
            lines.extend(["", "No test calls it directly."])
            continue
        lines.append("")
        for module in sorted(modules):
            names = ", ".join(f"`{name}`" for name in modules[module])
            lines.append(f"- `{module}`: {names}")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str]) -> int:
    return rule_map.print_page(argv, render, REGENERATE_COMMAND)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
