"""The user documents a pip-installed package carries, for ``python -m llm_datadist_ffi docs``.

A wheel holds no ``docs/`` folder, so ``setup.py`` copies the pages of :data:`PAGES`
from the repository's ``docs/`` into the package as ``_docs/`` when it builds
(:func:`ship`), as it copies ``include/`` into ``_include/``. :func:`directory` finds
them again: ``_docs/`` of an installed package, or ``docs/`` of the source checkout the
package runs from. The module imports nothing of the package, so that ``setup.py`` can
load it by its path before the package exists.
"""
from __future__ import annotations

import shutil
from pathlib import Path
from typing import Dict, Optional, Tuple

__all__ = ["PAGES", "SHIPPED_DIR", "ship", "directory"]

#: Page name -> (its file under docs/, what it holds).
PAGES: Dict[str, Tuple[str, str]] = {
    "user-guide": ("user-guide.md", "the user guide: install, a first transfer, testing a connector, the alias, "
                   "lint and strict mode, memory, errors, traces"),
    "semantics": ("semantics.md", "where the package does what the device does, lints it or refuses it, and why"),
    "error-codes": ("error-codes.md", "every status code: meaning, recoverable, what to do, which calls return it"),
    "testing": ("testing.md", "the project's own test suites and what each one checks"),
    "testing-tools": ("testing-tools.md", "Hypothesis strategies for the arguments of LLM-DataDist calls"),
    "testing-your-connector": ("testing-your-connector.md",
                               "the pytest plugin: engine topologies, faults, traces of failing tests"),
}

#: The package folder the pages are copied into.
SHIPPED_DIR = "_docs"


def ship(docs: Path, package_dir: Path) -> None:
    """Copy the pages of :data:`PAGES` from ``docs`` into ``package_dir/_docs``."""
    target = package_dir / SHIPPED_DIR
    target.mkdir(parents=True, exist_ok=True)
    for file, _ in PAGES.values():
        shutil.copyfile(docs / file, target / file)


def directory(package_dir: Path) -> Optional[Path]:
    """Where the pages are: the installed copy, else the source checkout's ``docs/``;
    None when neither exists."""
    for candidate in (package_dir / SHIPPED_DIR, package_dir.parent / "docs"):
        if all((candidate / file).is_file() for file, _ in PAGES.values()):
            return candidate
    return None
