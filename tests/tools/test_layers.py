"""The Python layers of docs/design.md ("Layers"), read from the package's imports.

Every ``import`` and ``from … import`` of the package is read with :mod:`ast` (at module
level, inside functions, under ``TYPE_CHECKING``: all of them), resolved to the module
it names, and checked against the layer rules:

- L-1 the core (``status``, ``lint``, ``acl``, ``data_type``, ``_core/``) imports only
  the core;
- L-2 the native tier (``native``) imports only the core;
- L-3 the vendor-compatible tier (``vendor``, ``compat``, ``_vendor/``) imports only the
  core and itself: the two tiers never import each other;
- L-4 the controls (``mock_control``, ``testing/``) import the core, the tiers and each
  other, never a tool;
- L-5 the tools (``_tools/``) are imported by no module but the tools and the
  dispatcher ``__main__``;
- L-6 inside the vendor tier, the two cache managers (``_vendor/v2/cache_manager.py``
  and ``_vendor/v1/cache_manager.py``) do not import each other, and what they share
  (``_vendor/_managers.py``) imports neither.

The package's ``__init__`` is the core's face: it imports the core only.
"""
from __future__ import annotations

import ast
from pathlib import Path
from typing import Dict, Iterator, List, Set, Tuple

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGE = "llm_datadist_ffi"

CORE, NATIVE, VENDOR, CONTROLS, TOOLS, MAIN = "core", "native tier", "vendor tier", "controls", "tools", "__main__"

#: Layer -> the layers its modules may import (its own included).
ALLOWED: Dict[str, Set[str]] = {
    CORE: {CORE},
    NATIVE: {CORE, NATIVE},
    VENDOR: {CORE, VENDOR},
    CONTROLS: {CORE, NATIVE, VENDOR, CONTROLS},
    TOOLS: {CORE, NATIVE, VENDOR, CONTROLS, TOOLS},
    MAIN: {CORE, NATIVE, VENDOR, CONTROLS, TOOLS},
}

#: Module -> modules it must not import, on top of the layer rules (L-6).
APART: Dict[str, Set[str]] = {
    f"{PACKAGE}._vendor.v2.cache_manager": {f"{PACKAGE}._vendor.v1.cache_manager"},
    f"{PACKAGE}._vendor.v1.cache_manager": {f"{PACKAGE}._vendor.v2.cache_manager"},
    f"{PACKAGE}._vendor._managers": {f"{PACKAGE}._vendor.v1.cache_manager", f"{PACKAGE}._vendor.v2.cache_manager"},
}


def layer_of(module: str) -> str:
    """The layer of a module of the package (a dotted name)."""
    parts = module.split(".")
    assert parts[0] == PACKAGE, module
    head = parts[1] if len(parts) > 1 else ""
    if head in ("", "status", "lint", "acl", "data_type", "_core"):
        return CORE
    if head == "native":
        return NATIVE
    if head in ("vendor", "compat", "_vendor"):
        return VENDOR
    if head in ("mock_control", "testing"):
        return CONTROLS
    if head == "_tools":
        return TOOLS
    if head == "__main__":
        return MAIN
    raise AssertionError(f"{module} belongs to no layer; add it to layer_of and to docs/design.md")


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def package_modules(root: Path) -> Dict[str, Path]:
    """Dotted name -> file, for every module of the package under ``root`` (the folder
    that holds the package). The C++ shim's build script is no module of the package."""
    return {module_name(path, root): path for path in sorted((root / PACKAGE).rglob("*.py"))
            if "_shim" not in path.parts}


def imports_of(module: str, path: Path, known: Set[str]) -> Iterator[Tuple[int, str]]:
    """(line, imported module of the package) for every import in the file; ``from X
    import y`` names the module ``X.y`` when that is a module, else ``X``."""
    is_package = path.name == "__init__.py"
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == PACKAGE:
                    yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != PACKAGE:
                continue
            for alias in node.names:
                child = f"{target}.{alias.name}"
                yield node.lineno, child if child in known else target


def violations(root: Path) -> List[str]:
    """Every import of the package under ``root`` that breaks a rule, as text."""
    modules = package_modules(root)
    known = set(modules)
    found: List[str] = []
    for module, path in modules.items():
        layer = layer_of(module)
        where = path.relative_to(root)
        for line, target in imports_of(module, path, known):
            target_layer = layer_of(target)
            if target_layer not in ALLOWED[layer]:
                found.append(f"{where}:{line}: {module} ({layer}) imports {target} ({target_layer})")
            if target in APART.get(module, set()):
                found.append(f"{where}:{line}: {module} imports {target}, which it must stay apart from")
    return found


def test_every_import_of_the_package_follows_the_layer_rules() -> None:
    assert violations(REPO) == []


def test_the_rules_read_every_module_and_a_fair_number_of_imports() -> None:
    modules = package_modules(REPO)
    known = set(modules)
    layers = {layer_of(module) for module in modules}
    assert layers == {CORE, NATIVE, VENDOR, CONTROLS, TOOLS, MAIN}
    count = sum(1 for module, path in modules.items() for _ in imports_of(module, path, known))
    assert count > 150


def _planted(tmp_path: Path, relative: str, line: str) -> List[str]:
    """The violations of a copy of the package with ``line`` appended to one module."""
    copy = tmp_path / "copy"
    for path in package_modules(REPO).values():
        target = copy / path.relative_to(REPO)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(path.read_text(encoding="utf-8"), encoding="utf-8")
    planted = copy / PACKAGE / relative
    planted.write_text(planted.read_text(encoding="utf-8") + line + "\n", encoding="utf-8")
    return violations(copy)


@pytest.mark.parametrize("relative, line, expected", [
    ("native.py", "from ._vendor import _native as _vendor_native",
     "native.py:{n}: llm_datadist_ffi.native (native tier) imports llm_datadist_ffi._vendor._native (vendor tier)"),
    ("_vendor/v2/llm_types.py", "from ... import native",
     "_vendor/v2/llm_types.py:{n}: llm_datadist_ffi._vendor.v2.llm_types (vendor tier) imports "
     "llm_datadist_ffi.native (native tier)"),
    ("_core/_marshal.py", "from ..native import LlmDataDist",
     "_core/_marshal.py:{n}: llm_datadist_ffi._core._marshal (core) imports llm_datadist_ffi.native (native tier)"),
    ("status.py", "import llm_datadist_ffi.vendor",
     "status.py:{n}: llm_datadist_ffi.status (core) imports llm_datadist_ffi.vendor (vendor tier)"),
    ("testing/topology.py", "from .._tools import _cli",
     "testing/topology.py:{n}: llm_datadist_ffi.testing.topology (controls) imports llm_datadist_ffi._tools._cli "
     "(tools)"),
    ("_vendor/v2/cache_manager.py", "from ..v1 import cache_manager as _v1",
     "_vendor/v2/cache_manager.py:{n}: llm_datadist_ffi._vendor.v2.cache_manager imports "
     "llm_datadist_ffi._vendor.v1.cache_manager, which it must stay apart from"),
    ("_vendor/_managers.py", "def _f() -> None:\n    from .v2.cache_manager import CacheManager  # noqa: F401",
     "_vendor/_managers.py:{n}: llm_datadist_ffi._vendor._managers imports "
     "llm_datadist_ffi._vendor.v2.cache_manager, which it must stay apart from"),
])
def test_a_planted_import_across_the_rules_is_reported(tmp_path: Path, relative: str, line: str,
                                                       expected: str) -> None:
    source = (REPO / PACKAGE / relative).read_text(encoding="utf-8")
    import_line = source.count("\n") + 1 + line.count("\n")
    found = _planted(tmp_path, relative, line)
    assert found == [expected.format(n=import_line).replace(relative, f"{PACKAGE}/{relative}", 1)]


def test_a_module_outside_every_layer_is_an_error() -> None:
    with pytest.raises(AssertionError, match="belongs to no layer"):
        layer_of(f"{PACKAGE}.helpers")
