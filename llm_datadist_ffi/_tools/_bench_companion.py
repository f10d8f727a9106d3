"""The bench's companion row: what ``llm_datadist_ffi.companion`` adds to a call.

A valid ``pull_blocks`` of a 16-block list is timed through the companion's wrapper
and through the unwrapped method, interleaved in the same run, on a class with the
vendor's signature whose method does nothing (so only the wrapper's work is measured:
the lint checks of the call, the nesting count, no trace). The row holds the median
per-call time of each and their difference; the goal is at most 2 µs.
"""
from __future__ import annotations

import statistics
import time
from types import SimpleNamespace
from typing import Any, Callable, Dict

from .. import companion
from ..status import LLMException, LLMStatusCode

GOAL_US = 2.0
BLOCKS = 16


class _Manager:
    """The vendor's ``CacheManager.pull_blocks`` signature, doing nothing."""

    def pull_blocks(self, src_cache_key: Any, dst_cache: Any, src_blocks: Any = (), dst_blocks: Any = (),
                    **kwargs: Any) -> None:
        return None


def _batch(call: Callable[[], Any], calls: int) -> float:
    start = time.perf_counter_ns()
    for _ in range(calls):
        call()
    return (time.perf_counter_ns() - start) / calls / 1000.0


def measure(calls: int = 2000, batches: int = 21) -> Dict[str, Any]:
    """The companion row: median µs per call wrapped and unwrapped, and the cost."""
    vendor = companion._Vendor(SimpleNamespace(LLMException=LLMException, LLMStatusCode=LLMStatusCode,  # type: ignore[arg-type]
                                               LLMDataDist=object, __name__="bench"))
    wrapped = companion._wrap(vendor, "CacheManager", "pull_blocks", _Manager.pull_blocks, False)
    manager, key, cache = _Manager(), object(), object()
    src, dst = list(range(BLOCKS)), list(range(BLOCKS, 2 * BLOCKS))

    def plain() -> None:
        manager.pull_blocks(key, cache, src, dst)

    def through() -> None:
        wrapped(manager, key, cache, src, dst)

    saved, companion._TRACER = companion._TRACER, None       # the cost without a trace
    try:
        through()
        plain_us, wrapped_us = [], []
        for _ in range(batches):
            plain_us.append(_batch(plain, calls))
            wrapped_us.append(_batch(through, calls))
    finally:
        companion._TRACER = saved
    unwrapped, with_companion = statistics.median(plain_us), statistics.median(wrapped_us)
    cost = with_companion - unwrapped
    return {"method": "CacheManager.pull_blocks", "blocks": BLOCKS, "us_unwrapped": unwrapped,
            "us_wrapped": with_companion, "us_cost": cost, "goal_us": GOAL_US, "met": cost <= GOAL_US}


def line(row: Dict[str, Any]) -> str:
    """The row as one line of the bench's text report."""
    return (f"companion: {row['method']} of {row['blocks']} blocks costs {row['us_cost']:.2f} us per call "
            f"(median {row['us_wrapped']:.2f} us wrapped, {row['us_unwrapped']:.2f} us unwrapped; goal <= "
            f"{row['goal_us']:g} us: {'met' if row['met'] else 'NOT met'})")
