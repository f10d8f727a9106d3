"""Lint: calls the device accepts with a defined result that is almost always a bug.

The package never refuses what the vendor's library accepts (docs/semantics.md §0).
Where the vendor's result is defined but surprising — an empty layer range that means
"all layers", a repeated destination block where the last write wins, a keyword that
is silently ignored — the call does exactly what the device does and emits a warning
of that rule's own ``LintWarning`` subclass, pointing at the caller's line.

Users escalate the warnings the Python way (``-W error::llm_datadist_ffi.LintWarning``,
``warnings.simplefilter("error", LintWarning)``, pytest's ``filterwarnings``), which
raises the warning before the call reaches the library when the Python layer sees
the rule, or after the call when only the engine sees it. ``LLM_DATADIST_FFI_STRICT=1``
(or ``true``, ``yes``, ``on``, in any case; ``0``, ``false``, ``no``, ``off`` or empty
leave it off, and any other value is refused: :func:`strict`) instead turns every lint
into the refusal the rule names (``LLMException`` with
``LLM_PARAM_INVALID`` unless the rule says otherwise), always before anything moves:
the Python layers refuse in place of the warning, and the mock engine reads the same
variable and refuses at its own check.

The mock engine reports the lints that only it can see (they need its cache table
or its peer's) through a per-thread record of the C ABI (``lldd_mock_lint_*``),
which the checked-call path reads after every call (:func:`take_engine_lints`).
"""
from __future__ import annotations

import logging
import os
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterable, Optional, Tuple, Type

from .status import LLMStatusCode, exception_for

__all__ = [
    "LintWarning", "LintRule", "RULES", "STRICT_ENV", "STRICT_TRUE", "STRICT_FALSE", "strict", "strict_value", "lint",
    "warning_class",
    "OneDefaultLayerPairWarning", "EmptyLayerRangeWarning", "TensorNumPerLayerWarning",
    "RepeatedDestinationBlockWarning", "IgnoredArgumentWarning", "HalfDefaultLayerPairWarning",
    "SourceBatchIgnoredWarning", "StrideRoundedDownWarning", "BatchDimIndexWarning", "CacheIdFallbackWarning",
    "KeyBindingWarning", "OwnedCacheUnregisteredWarning", "EmptyMappingWarning",
    "ZeroWaitTimeWarning", "ClusterIdMismatchWarning", "PushTensorCountWarning",
    "PlaceholderKeyWarning", "ArrayDtypeWarning", "UnknownOptionWarning", "check_option_keys",
]

STRICT_ENV = "LLM_DATADIST_FFI_STRICT"
_log = logging.getLogger(__name__)
_PACKAGE_DIR = str(Path(__file__).resolve().parent)


class LintWarning(UserWarning):
    """Base of every lint: the call did what the device does, which is probably a bug.

    ``rule`` is the rule's id in docs/semantics.md (``"PR-5"`` …); ``status_code`` the
    code that ``LLM_DATADIST_FFI_STRICT=1`` refuses the call with.
    """

    rule: str = ""
    status_code: LLMStatusCode = LLMStatusCode.LLM_PARAM_INVALID


# One subclass per rule, so that a user can silence or escalate exactly one of them.

class OneDefaultLayerPairWarning(LintWarning):
    """PR-1: exactly one of the native layer pairs is the default ``{-1, -1}``."""
    rule = "PR-1"


class EmptyLayerRangeWarning(LintWarning):
    """PR-2: an empty Python ``range`` given as a pull's layer range."""
    rule = "PR-2"


class TensorNumPerLayerWarning(LintWarning):
    """PR-3: a push whose default layer range is empty because ``tensor_num_per_layer``
    exceeds the cache's tensor count."""
    rule = "PR-3"


class RepeatedDestinationBlockWarning(LintWarning):
    """PR-5: a destination block listed more than once."""
    rule = "PR-5"


class IgnoredArgumentWarning(LintWarning):
    """PR-8: a keyword argument the call does not read."""
    rule = "PR-8"


class HalfDefaultLayerPairWarning(LintWarning):
    """PR-11: a native layer pair ``{-1, s}`` with ``s >= 0``."""
    rule = "PR-11"


class SourceBatchIgnoredWarning(LintWarning):
    """PR-16: a direct-mode cache-to-blocks pull whose source names a batch other than 0."""
    rule = "PR-16"


class StrideRoundedDownWarning(LintWarning):
    """PR-17: a tensor whose byte size is not a multiple of ``shape[0]``."""
    rule = "PR-17"


class BatchDimIndexWarning(LintWarning):
    """PR-18: ``batch_dim_index != 0``, which the core ignores."""
    rule = "PR-18"


class CacheIdFallbackWarning(LintWarning):
    """PR-20: a by-id reference with ``cache_id <= 0`` resolved by the direct-mode fallback."""
    rule = "PR-20"
    status_code = LLMStatusCode.LLM_KV_CACHE_NOT_EXIST


class KeyBindingWarning(LintWarning):
    """PR-21: a registration key that repeats or is already bound."""
    rule = "PR-21"


class OwnedCacheUnregisteredWarning(LintWarning):
    """PR-23: ``unregister`` of a cache the library allocated (deallocate is the call meant)."""
    rule = "PR-23"


class EmptyMappingWarning(LintWarning):
    """PR-25: an empty block mapping of ``copy_blocks`` / ``swap_blocks``."""
    rule = "PR-25"


class ZeroWaitTimeWarning(LintWarning):
    """PR-26: ``llm.SyncKvCacheWaitTime`` of 0."""
    rule = "PR-26"


class ClusterIdMismatchWarning(LintWarning):
    """PR-28: the listener's cluster id is not the ``remote_cluster_id`` a link or a
    non-forced unlink named."""
    rule = "PR-28"


class PushTensorCountWarning(LintWarning):
    """PR-33: a native push whose caller-side cache description disagrees with the cache."""
    rule = "PR-33"


class PlaceholderKeyWarning(LintWarning):
    """PR-41: ``remove_cache_key`` of a placeholder-shaped key, which unbinds a blocks key."""
    rule = "PR-41"


class ArrayDtypeWarning(LintWarning):
    """PR-43: tensor memory given as a numpy array whose dtype is not the cache
    description's data type but has its item size."""
    rule = "PR-43"


class UnknownOptionWarning(LintWarning):
    """OPT-1: an option key close to one the library reads, but not it (a misspelling,
    which the library ignores)."""
    rule = "OPT-1"


@dataclass(frozen=True)
class LintRule:
    """One lint rule: its id, its warning class, and what the device does."""

    rule: str
    category: Type[LintWarning]
    device: str


RULES: Dict[str, LintRule] = {r.rule: r for r in (
    LintRule("PR-1", OneDefaultLayerPairWarning,
             "pulls ignore both pairs and move every layer; pushes ignore the destination pair"),
    LintRule("PR-2", EmptyLayerRangeWarning, "an empty range means no range: every layer moves"),
    LintRule("PR-3", TensorNumPerLayerWarning, "the push loops over no layer and moves nothing"),
    LintRule("PR-5", RepeatedDestinationBlockWarning, "every pair is copied; the last write wins"),
    LintRule("PR-8", IgnoredArgumentWarning, "the argument is ignored"),
    LintRule("PR-11", HalfDefaultLayerPairWarning, "the pair means every layer; its second member is ignored"),
    LintRule("PR-16", SourceBatchIgnoredWarning,
             "a direct-mode cache-to-blocks pull reads source batch 0; the batch the source names is ignored"),
    LintRule("PR-17", StrideRoundedDownWarning,
             "the stride is rounded down, so the last bytes of each tensor never move"),
    LintRule("PR-18", BatchDimIndexWarning,
             "the core uses shape[0] as the batch or block count regardless"),
    LintRule("PR-20", CacheIdFallbackWarning,
             "direct mode resolves the reference as the blocks key of model_id 0"),
    LintRule("PR-21", KeyBindingWarning,
             "a bound key keeps its binding; a key repeated in the call binds once, at its last slot"),
    LintRule("PR-23", OwnedCacheUnregisteredWarning,
             "the cache entry and its keys go and its pool memory returns to the pool; the addresses the "
             "caller holds are stale"),
    LintRule("PR-25", EmptyMappingWarning, "the copy or swap has the vendor's degenerate effect"),
    LintRule("PR-26", ZeroWaitTimeWarning, "every transfer wait ends at once"),
    LintRule("PR-28", ClusterIdMismatchWarning,
             "the link is made, keyed by the listener's real id (by the id given with HIXL); "
             "a non-forced unlink drops the listener's link to the caller"),
    LintRule("PR-33", PushTensorCountWarning, "only the caller's description is checked"),
    LintRule("PR-41", PlaceholderKeyWarning, "the placeholder-shaped key unbinds a blocks key"),
    LintRule("PR-43", ArrayDtypeWarning,
             "the memory is registered as it is; its bytes are read as the description's data type"),
    LintRule("OPT-1", UnknownOptionWarning, "an option key it does not read is ignored"),
)}

# Rules the Python layers check themselves before the engine sees the call: the
# engine's record of them is not reported again.
PYTHON_RULES = frozenset({"PR-1", "PR-2", "PR-3", "PR-5", "PR-8", "PR-11", "PR-18", "PR-25", "PR-26",
                          "PR-41", "PR-43", "OPT-1"})

# The engine reports rules by number: PR-n is n, OPT-1 is 1001.
_ENGINE_RULE_IDS: Dict[int, str] = {
    **{int(r[3:]): r for r in RULES if r.startswith("PR-")},
    1001: "OPT-1",
}


def warning_class(rule: str) -> Type[LintWarning]:
    """The ``LintWarning`` subclass of ``rule`` (``KeyError`` for an unknown rule)."""
    return RULES[rule].category


#: The spellings of ``LLM_DATADIST_FFI_STRICT`` (any case, spaces around ignored).
STRICT_TRUE = ("1", "true", "yes", "on")
STRICT_FALSE = ("0", "false", "no", "off", "")


def strict_value(value: Optional[str]) -> bool:
    """Whether ``value``, a value of ``LLM_DATADIST_FFI_STRICT``, turns strict mode on
    (``None``, the variable unset, does not).

    Raises:
        ValueError: a value that is neither a true nor a false spelling.
    """
    text = (value or "").strip().lower()
    if text in STRICT_TRUE:
        return True
    if text in STRICT_FALSE:
        return False
    raise ValueError(f"{STRICT_ENV}={value!r} is not a truth value; valid values are {', '.join(STRICT_TRUE)} "
                     f"(strict) and {', '.join(STRICT_FALSE[:-1])} or empty (not strict), in any case")


def strict() -> bool:
    """Whether ``LLM_DATADIST_FFI_STRICT`` turns lints into refusals (read per call;
    ``1``/``true``/``yes``/``on`` do, in any case).

    Raises:
        ValueError: a value that is neither a true nor a false spelling (the backend's
            loading refuses it first, as an ``ImportError``).
    """
    return strict_value(os.environ.get(STRICT_ENV))


def _caller_stacklevel() -> int:
    """The ``stacklevel`` that makes a warning point at the first frame outside the package."""
    frame = sys._getframe(2)         # stacklevel 2 of the function that warns: its caller
    level = 2
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE_DIR):
        frame = frame.f_back          # type: ignore[assignment]
        level += 1
    return level


def message(rule: str, text: str) -> str:
    """``text`` with the rule's id and what the device does."""
    return f"{text} ({rule}; the device: {RULES[rule].device})"


def lint(rule: str, text: str) -> None:
    """Report lint ``rule`` about ``text`` (which names the parameter and the value).

    Raises:
        LLMException: the rule's refusal in strict mode (:func:`strict`).
    """
    full = message(rule, text)
    if strict():
        _log.info("refused in strict mode: %s", full)
        raise exception_for(int(RULES[rule].category.status_code), full)
    _log.info("lint: %s", full)
    warnings.warn(RULES[rule].category(full), stacklevel=_caller_stacklevel())


def lint_engine_records(records: Iterable[Tuple[int, str]], skip: Iterable[str] = ()) -> None:
    """Warn once for each lint the engine recorded during the last call.

    ``skip`` names rules the Python layer of that call already reported itself (the
    engine checks them again for C callers). An engine rule number this table does not
    know is reported as the base ``LintWarning``, never dropped.
    """
    skipped = set(skip)
    level = _caller_stacklevel()
    for number, text in records:
        rule = _ENGINE_RULE_IDS.get(number)
        if rule in skipped:
            continue
        category: Type[LintWarning] = RULES[rule].category if rule else LintWarning
        _log.info("lint (engine): %s", text)
        warnings.warn(category(text if rule else f"{text} (engine rule {number})"), stacklevel=level)


def check_option_keys(options: Iterable[str], known: Iterable[str], tag: str) -> None:
    """OPT-1: warn for each key that is not one of ``known`` but looks like one (the same
    key in another case, or a close spelling), naming the key it resembles.

    Keys that resemble none of ``known`` are left alone: the vendor's libraries read
    many more options (``ge.*`` among them) than a binding can list.
    """
    from ._core._lint_rules import option_keys

    for rule, text in option_keys(options, known, tag):
        lint(rule, text)
