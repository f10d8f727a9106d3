"""Property tests: one vendor-compatible engine's local calls, their outcomes and bytes.

Where ``test_property_vendor_checks.py`` draws one call with flawed arguments, these
tests draw short, mostly sound sequences of the calls that need no peer and compare
each outcome and every byte of memory with the model (``tests/oracle/vendor_local.py``
behind ``vendor_checks``), both generations where the call exists:

- the published-table limit of direct mode (docs/reference/semantics.md §15) at allocation, checked
  before the pool (E-22), against pool exhaustion (``OUT_OF_MEMORY``, PR-34);
- key binding at allocation (semantics.md §9.2): PR-22's repeats in v2, "the last one wins" and
  ``LLM_FAILED`` for a bound key in v1, each binding probed afterwards by allocating
  its key again;
- a deallocated cache whose keys are still bound stays usable by local copies until
  its last key is removed (semantics.md §9.6, §9.8), then it is gone (``LLM_KV_CACHE_NOT_EXIST``);
- ``copy_cache`` between caches of different strides, batches, offsets and sizes
  (semantics.md §6.6, §8.8), ``copy_blocks`` (semantics.md §8.9) and ``swap_blocks`` (semantics.md §8.10) with sound mappings.
"""
from __future__ import annotations

from typing import Dict, Iterator, List, Tuple

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from llm_datadist_ffi import LLMStatusCode as S

from oracle.vendor_checks import Key, Ref
from oracle.vendor_local import DEVICE, TABLE_LIMIT
from vendor_local_driver import Env, one_call

pytestmark = pytest.mark.mock_only(reason="the vendor-compatible API runs on the mock's extension functions")

PLACEHOLDER = Key("CacheKey", 1)


@pytest.fixture(scope="module")
def env() -> Iterator[Env]:
    made = Env()
    yield made
    made.stop()


def desc(num: int, shape: Tuple[int, ...], placement: int = DEVICE, blocks: bool = False) -> Ref:
    return Ref("@desc", "CacheDesc", -1, num, shape, 4, placement, blocks)


# ---- the table limit (semantics.md §15, E-22) ---------------------------------------------------------------

@pytest.mark.rules("§3.3", "§3.4", "§15", "E-22", "X-19")
@settings(max_examples=settings.default.max_examples)
@given(mode=st.sampled_from(["v2-direct-pools", "v2-server-pool"]), seed=st.integers(0, 2**32 - 1),
       below=st.integers(-3, 3), keys=st.sampled_from([0, 1, 4]))
@example(mode="v2-direct-pools", seed=0, below=1, keys=1)      # the entry fits, its key binding does not
def test_allocations_at_the_table_limit_are_refused_before_the_pool(env: Env, mode: str, seed: int, below: int,
                                                                    keys: int) -> None:
    """An allocation whose cache entry would just fit, or just not fit, in the 1 MiB table
    of direct mode: past it ``LLM_PARAM_INVALID`` before any pool page is taken (E-22),
    within it the pool runs out (``LLM_OUT_OF_MEMORY``); server-assisted mode has no table.
    Found: an entry that fits but whose key bindings do not is checked after the pool
    (the mock counts the bindings with the keys), so it is ``LLM_OUT_OF_MEMORY`` here;
    the oracle follows that order (a decision where semantics.md §15 and E-22 are silent)."""
    env.start(mode, np.random.default_rng(seed))
    try:
        used = env.checks.engine.table_bytes()
        # N tensors of one byte: the entry adds 64 + 8N bytes and 24 per request key binding
        fit = (TABLE_LIMIT - used - 64 - 24 * keys) // 8
        num = fit + below
        cache_keys = [Key("CacheKey", 1, req_id=100 + k) for k in range(keys)]
        verdict = one_call(env, "allocate_cache", [desc(num, (max(keys, 1),)), cache_keys], {}, record=False)
        assert verdict.status in (S.LLM_PARAM_INVALID, S.LLM_OUT_OF_MEMORY)
    finally:
        env.stop()


# ---- key binding at allocation (semantics.md §9.2, PR-22) ---------------------------------------------------

KEY_POOL = [Key("CacheKey", 1, req_id=1), Key("CacheKey", 1, req_id=2), Key("CacheKey", 1, req_id=1, model_id=1),
            Key("CacheKey", 1, prefix_id=1), PLACEHOLDER, Key("CacheKey", 1, model_id=1)]


@pytest.mark.rules("§3.1", "§9.2", "PR-22")
@settings(max_examples=settings.default.max_examples * 2)
@given(mode=st.sampled_from(["v2-direct-pools", "v2-server-pool", "v1-prompt"]), seed=st.integers(0, 2**32 - 1),
       first=st.lists(st.sampled_from(KEY_POOL), max_size=5), second=st.lists(st.sampled_from(KEY_POOL), max_size=3),
       batches=st.sampled_from([2, 4]), release=st.booleans())
@example(mode="v2-direct-pools", seed=0, first=[KEY_POOL[0], KEY_POOL[0]], second=[], batches=4, release=False)
@example(mode="v1-prompt", seed=0, first=[KEY_POOL[0], KEY_POOL[1], KEY_POOL[0]], second=[KEY_POOL[0]], batches=4,
         release=False)
def test_keys_bind_at_allocation_as_the_model_says(env: Env, mode: str, seed: int, first: List[Key],
                                                  second: List[Key], batches: int, release: bool) -> None:
    """Two allocations with drawn key lists (repeats, placeholders, prefix keys, more keys
    than batches), the first maybe deallocated, then every key of the pool probed alone:
    an allocation with a key still bound must fail, with a free key succeed."""
    env.start(mode, np.random.default_rng(seed), bare=True)
    try:
        one_call(env, "allocate_cache", [desc(2, (batches, 16)), first], {}, record=False, name="a")
        if release and "a" in env.objects:
            one_call(env, "deallocate_cache", [env.checks.refs["a"]], {}, record=False)
        one_call(env, "allocate_cache", [desc(2, (batches, 16)), second], {}, record=False, name="b")
        for i, key in enumerate(KEY_POOL):
            one_call(env, "allocate_cache", [desc(1, (1, 16)), [key]], {}, record=False, name=f"probe{i}")
    finally:
        env.stop()


@pytest.mark.rules("§3.1", "§9.3", "PR-21")
@settings(max_examples=settings.default.max_examples * 2)
@given(mode=st.sampled_from(["v2-direct-pools", "v2-server-pool"]), seed=st.integers(0, 2**32 - 1),
       first=st.lists(st.sampled_from(KEY_POOL), max_size=4), batches=st.sampled_from([1, 2, 3]))
@example(mode="v2-direct-pools", seed=0, first=KEY_POOL[:3], batches=2)        # more keys than batches
def test_keys_bind_at_registration_as_the_model_says(env: Env, mode: str, seed: int, first: List[Key],
                                                     batches: int) -> None:
    """``register_cache`` with a drawn key list (PR-21: more keys than batches is refused; a
    key twice or a placeholder that names a bound blocks key binds nothing, with a lint),
    then every key of the pool probed by registering it alone: a key still bound keeps its
    binding with the PR-21 lint, a free one binds (and the next probe shows it)."""
    env.start(mode, np.random.default_rng(seed), bare=True)
    try:
        addrs = env.guarded("r", 2, batches * 16)
        one_call(env, "register_cache", [desc(2, (batches, 16)), addrs, first], {}, record=False, name="r")
        for i, key in enumerate(KEY_POOL):
            probe = env.guarded(f"probe{i}", 1, 16)
            one_call(env, "register_cache", [desc(1, (1, 16)), probe, [key]], {}, record=False, name=f"probe{i}")
    finally:
        env.stop()


# ---- deferred deallocation (semantics.md §9.8) ----------------------------------------------------------------

@pytest.mark.rules("§6.6", "§9.8")
@settings(max_examples=settings.default.max_examples * 2)
@given(mode=st.sampled_from(["v2-direct-pools", "v2-server-pool", "v1-prompt"]), seed=st.integers(0, 2**32 - 1),
       keys=st.lists(st.sampled_from(KEY_POOL[:4]), min_size=1, max_size=4, unique=True), data=st.data())
def test_a_deallocated_cache_lives_until_its_last_key_is_removed(env: Env, mode: str, seed: int, keys: List[Key],
                                                                 data: st.DataObject) -> None:
    """Allocate with keys, deallocate (deferred), then copy from it and remove its keys in
    a drawn order, copying after each removal: the copies work while a key is bound, and
    after the last removal the cache is gone (``LLM_KV_CACHE_NOT_EXIST``)."""
    env.start(mode, np.random.default_rng(seed), bare=True)
    try:
        one_call(env, "allocate_cache", [desc(2, (4, 32)), keys], {}, record=False, name="keyed")
        one_call(env, "allocate_cache", [desc(2, (4, 32))], {}, record=False, name="plain")
        keyed, plain = env.checks.refs["keyed"], env.checks.refs["plain"]
        one_call(env, "deallocate_cache", [keyed], {}, record=False)
        for key in data.draw(st.permutations(keys), label="removal order"):
            batch = data.draw(st.integers(0, 3), label="batch")
            one_call(env, "copy_cache", [plain, keyed, batch, batch, 0, -1], {}, record=False)
            one_call(env, "remove_cache_key", [key], {}, record=False)
        verdict = one_call(env, "copy_cache", [plain, keyed, 0, 1, 0, -1], {}, record=False)
        assert verdict.status == S.LLM_KV_CACHE_NOT_EXIST
    finally:
        env.stop()


# ---- copies and swaps with sound arguments (semantics.md §6.6, §8.8–§8.10) ------------------------------------

@pytest.mark.rules("§6.6", "§7.3", "§8.8", "§8.9", "§8.10", "PR-4", "PR-24")
@settings(max_examples=settings.default.max_examples * 2)
@given(mode=st.sampled_from(["v2-direct-pools", "v2-server-pool", "v1-prompt", "v1-decoder"]),
       seed=st.integers(0, 2**32 - 1), data=st.data())
def test_copies_and_swaps_move_the_bytes_the_model_moves(env: Env, mode: str, seed: int,
                                                         data: st.DataObject) -> None:
    """A few copies between the standard caches (strides 32 and 64, registered and pool
    caches) and blocks copies and swaps between blocks caches, every byte compared."""
    env.start(mode, np.random.default_rng(seed))
    try:
        refs = env.checks.refs
        contiguous = [n for n in ("c", "c4", "ac") if n in refs]      # four tensors each, strides 32 and 64
        blocks = [n for n in ("b", "ab") if n in refs]
        hosts = [n for n in ("hb", "hab") if n in refs]
        for _ in range(data.draw(st.integers(1, 4), label="calls")):
            what = data.draw(st.sampled_from(["copy_cache", "copy_blocks", "swap_blocks"]), label="call")
            if what == "copy_cache":
                dst, src = (refs[data.draw(st.sampled_from(contiguous), label=s)] for s in ("dst", "src"))
                strides = sorted({dst.desc_size // dst.shape[0], src.desc_size // src.shape[0]})
                # offsets and lengths up to, at and just past both strides (semantics.md §6.6)
                offset = data.draw(st.one_of(st.integers(0, strides[0] - 1), st.sampled_from(
                    [strides[0], strides[-1] - 1, strides[-1]])), label="offset")
                size = data.draw(st.one_of(st.just(-1), st.integers(1, strides[-1] + 1),
                                           st.just(max(strides[0] - offset, 1))), label="size")
                args = [dst, src, data.draw(st.integers(0, dst.shape[0] - 1), label="dst batch"),
                        data.draw(st.integers(0, src.shape[0] - 1), label="src batch"), offset, size]
                one_call(env, what, args, {}, record=False)
            elif what == "copy_blocks":
                # indexes up to the block count (8), one past the last block (semantics.md §7.3)
                sources = data.draw(st.lists(st.integers(0, 8), min_size=1, max_size=3, unique=True), label="srcs")
                dsts = data.draw(st.lists(st.integers(0, 8), min_size=len(sources), max_size=len(sources),
                                          unique=True), label="dsts")
                mapping: Dict[int, List[int]] = {s: [d] for s, d in zip(sources, dsts)}
                one_call(env, what, [refs[data.draw(st.sampled_from(blocks), label="cache")], mapping], {},
                         record=False)
            else:
                pair = [refs[data.draw(st.sampled_from(hosts), label="host")],
                        refs[data.draw(st.sampled_from(blocks), label="device")]]
                if data.draw(st.booleans(), label="swap out"):
                    pair.reverse()
                keys = data.draw(st.lists(st.integers(0, 8), min_size=1, max_size=5, unique=True), label="from")
                values = data.draw(st.lists(st.integers(0, 8), min_size=len(keys), max_size=len(keys),
                                            unique=True), label="to")
                one_call(env, what, [*pair, dict(zip(keys, values))], {}, record=False)
    finally:
        env.stop()
