"""Lint modes for tests (docs/semantics.md §0).

A lint rule's call does what the device does and warns; under
``LLM_DATADIST_FFI_STRICT=1`` it refuses instead. Tests that check one of the two
behaviours set the mode themselves, so the suite passes with the variable set or not:
``strict(monkeypatch)`` before a check of the refusal, ``lenient(monkeypatch)`` before a
check of the device's result and the warning. ``mode_for(monkeypatch, words)`` picks
strict for a table row whose expected message names a lint rule.
"""
from __future__ import annotations

import re

import pytest

STRICT_ENV = "LLM_DATADIST_FFI_STRICT"

# The rules of docs/semantics.md whose refusal became a lint (by id, independent of the package).
LINT_RULE_IDS = ("PR-1", "PR-2", "PR-3", "PR-5", "PR-8", "PR-11", "PR-16", "PR-17", "PR-18", "PR-20", "PR-21", "PR-23",
                 "PR-25", "PR-26", "PR-28", "PR-33", "PR-41", "OPT-1")
_LINT_RE = re.compile(r"\b(" + "|".join(re.escape(r) for r in LINT_RULE_IDS) + r")(?!\d)")


def strict(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(STRICT_ENV, "1")


def lenient(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(STRICT_ENV, raising=False)


def names_lint_rule(text: str) -> bool:
    return _LINT_RE.search(text) is not None


def mode_for(monkeypatch: pytest.MonkeyPatch, words: str) -> None:
    """Strict when the expected message ``words`` names a lint rule, else lenient."""
    (strict if names_lint_rule(words) else lenient)(monkeypatch)
