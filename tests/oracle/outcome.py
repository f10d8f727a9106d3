"""What a call must do: its outcome, and the bytes it moves."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, FrozenSet, Optional

from .codes import LLMStatusCode as S


@dataclass(frozen=True)
class Copy:
    """``length`` bytes from ``src_offset`` of source tensor ``src_tensor`` to
    ``dst_offset`` of destination tensor ``dst_tensor``."""

    dst_tensor: int
    dst_offset: int
    src_tensor: int
    src_offset: int
    length: int


@dataclass
class Outcome:
    """The outcome of one call.

    ``python_error`` is ``TypeError`` or ``ValueError`` when the Python layer rejects an
    argument before any native call (N-1); otherwise ``status`` is the code: SUCCESS,
    or the ``status_code`` of the ``LLMException`` raised (link calls return it).
    ``copies`` move bytes from cache ``src`` to cache ``dst`` (each ``(cluster_id,
    cache_id)``); ``value`` is the call's result (a cache id, link results, ...);
    ``rule`` names the rule that decided, for failure messages. ``lints`` are the ids of
    the lint rules (docs/semantics.md §0) the call must warn about (none in strict mode,
    where a lint is the refusal the rule names).
    """

    status: S = S.LLM_SUCCESS
    python_error: Optional[type] = None
    rule: str = ""
    copies: list[Copy] = field(default_factory=list)
    src: Optional[tuple[int, int]] = None
    dst: Optional[tuple[int, int]] = None
    value: Any = None
    lints: FrozenSet[str] = frozenset()

    def linted(self, *rules: str) -> "Outcome":
        """The same outcome, with the lint rules the call also warns about."""
        self.lints = self.lints | frozenset(rules)
        return self

    @property
    def ok(self) -> bool:
        return self.python_error is None and self.status == S.LLM_SUCCESS

    def at(self, src: tuple[int, int], dst: tuple[int, int]) -> "Outcome":
        """The same outcome, naming the source and destination caches of its copies."""
        self.src, self.dst = src, dst
        return self

    def describe(self) -> str:
        what = self.python_error.__name__ if self.python_error else self.status.name
        return f"{what} ({self.rule})" if self.rule else what


STRICT_ENV = "LLM_DATADIST_FFI_STRICT"


def strict() -> bool:
    """Whether lints are refusals (``LLM_DATADIST_FFI_STRICT`` set to ``1``, ``true``,
    ``yes`` or ``on``, any case), read per call as the package reads it; the values the
    package refuses never reach a call."""
    return os.environ.get(STRICT_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def fail(status: S, rule: str, copies: Optional[list[Copy]] = None) -> Outcome:
    return Outcome(status=status, rule=rule, copies=copies or [])


def python_error(kind: type, rule: str) -> Outcome:
    return Outcome(status=S.LLM_PARAM_INVALID, python_error=kind, rule=rule)


def success(value: Any = None, copies: Optional[list[Copy]] = None, rule: str = "") -> Outcome:
    return Outcome(value=value, copies=copies or [], rule=rule)


#: the same test under the name the link and pull models use
strict_mode = strict
