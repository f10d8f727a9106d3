"""The companion's lint decisions agree with the mock tier's on the same call sequences.

The mock-backed implementation stands in for the vendor's package here: a module under
a private name holding this project's ``LLMDataDist``, ``LLMException`` and
``LLMStatusCode`` is what the companion is installed over. Each call then meets the
companion's checks first (recorded, not warned) and the mock tier's own checks inside
(warned): the two lists of rules must be equal, in order, for every generated sequence
of pulls, copies, swaps and key removals (Hypothesis, over the public strategies of
``llm_datadist_ffi.testing.strategies``).
"""
from __future__ import annotations

import warnings
from types import ModuleType
from typing import Any, Dict, List, Tuple

import pytest
from hypothesis import given
from hypothesis import strategies as st

from llm_datadist_ffi import companion, lint
from llm_datadist_ffi._core import _lint_rules
from llm_datadist_ffi.testing.strategies import block_lists, layer_ranges
from vendor_support import v2_options

DEVICE_RULES = frozenset(rule for rule, why in _lint_rules.DEVICE.items() if not why)
BLOCKS = 8
INVALID = 2 ** 64 - 1


def _kwargs() -> "st.SearchStrategy[Dict[str, Any]]":
    ranges = st.one_of(layer_ranges(2), st.integers(0, 2).map(lambda k: range(k, k)))
    return st.fixed_dictionaries({}, optional={
        "src_layer_range": ranges, "dst_layer_range": ranges, "tensor_num_per_layer": st.just(2),
        "src_cache_offset": st.just(0), "layer_count": st.just(1)})


def _calls() -> "st.SearchStrategy[List[Tuple[str, Any]]]":
    pull = st.tuples(st.just("pull_blocks"), st.tuples(
        block_lists(BLOCKS, containers=["list"]), block_lists(BLOCKS, unique=False, containers=["list"]), _kwargs()))
    copy = st.tuples(st.just("copy_blocks"), st.dictionaries(
        st.integers(0, BLOCKS - 1), st.lists(st.integers(0, BLOCKS - 1), max_size=3), max_size=3))
    swap = st.tuples(st.just("swap_blocks"), st.dictionaries(
        st.integers(0, BLOCKS - 1), st.integers(0, BLOCKS - 1), max_size=4))
    remove = st.tuples(st.just("remove_cache_key"), st.tuples(st.sampled_from([0, 5, INVALID]),
                                                              st.sampled_from([0, 3, INVALID])))
    return st.lists(st.one_of(pull, copy, swap, remove), min_size=1, max_size=4)


@pytest.mark.rules("PR-2", "PR-5", "PR-8", "PR-25", "PR-41")
def test_companion_and_mock_tier_decide_the_same_lints(monkeypatch: pytest.MonkeyPatch) -> None:
    from llm_datadist_ffi import vendor as mock
    from llm_datadist_ffi.status import LLMException

    monkeypatch.delenv(lint.STRICT_ENV, raising=False)
    engine = mock.LLMDataDist(mock.LLMRole.DECODER, 5)
    engine.init(v2_options(direct=False, pool=True, host_pool=True))
    stand_in = ModuleType("_lldd_mock_tier")
    for name in ("LLMDataDist", "LLMException", "LLMStatusCode"):
        setattr(stand_in, name, getattr(mock, name))
    decided: List[str] = []
    monkeypatch.setattr(companion, "_report", lambda vendor, findings: decided.extend(r for r, _ in findings))
    try:
        manager = engine.cache_manager
        device = manager.allocate_blocks_cache(mock.CacheDesc(4, [BLOCKS, 64], mock.DataType.DT_FLOAT16),
                                               mock.BlocksCacheKey(5, 1))
        host = manager.allocate_blocks_cache(mock.CacheDesc(4, [BLOCKS, 64], mock.DataType.DT_FLOAT16,
                                                            mock.Placement.HOST))
        companion.install(stand_in)
        assert "CacheManager.pull_blocks" in companion.wrapped_methods()

        def agree_on(calls: List[Tuple[str, Any]]) -> List[str]:
            decided.clear()
            warned: List[str] = []
            for method, args in calls:
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    try:
                        if method == "pull_blocks":
                            src, dst, kwargs = args
                            manager.pull_blocks(mock.BlocksCacheKey(9, 0), device, src, dst[:len(src)] or [0],
                                                **kwargs)
                        elif method == "copy_blocks":
                            manager.copy_blocks(device, args)
                        elif method == "swap_blocks":
                            manager.swap_blocks(host, device, args)
                        else:
                            manager.remove_cache_key(mock.CacheKey(9, args[0], prefix_id=args[1]))
                    except LLMException:
                        pass                          # the engine's answer (no peer is linked): not a lint
                warned.extend(w.message.rule for w in caught if isinstance(w.message, lint.LintWarning)
                              and w.message.rule in DEVICE_RULES)
            assert decided == warned
            return warned

        # one sequence that fires every rule the property covers: the comparison is not vacuous
        fired = agree_on([("pull_blocks", ([0, 1], [2, 2], {"src_layer_range": range(1, 1), "bogus": 1})),
                          ("copy_blocks", {}), ("swap_blocks", {0: 3, 1: 3}), ("remove_cache_key", (5, 3))])
        assert fired == ["PR-8", "PR-2", "PR-5", "PR-25", "PR-5", "PR-41"]

        @given(_calls())
        def agree(calls: List[Tuple[str, Any]]) -> None:
            agree_on(calls)

        agree()
    finally:
        companion.uninstall()
        engine.finalize()
