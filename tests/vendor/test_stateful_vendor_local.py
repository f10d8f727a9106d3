"""Stateful test: one vendor-compatible engine's local calls follow the model.

A Hypothesis state machine drives one ``LLMDataDist`` in this process (CacheManager mode
with a device and a host pool, in direct or server-assisted mode, or KvCacheManager
mode as a PROMPT or a DECODER) through sequences of the calls that need no peer:
registering and allocating caches with keys, deallocating (blocks caches at once,
contiguous caches deferred while keys are bound, docs/reference/semantics.md §9.8), unregistering
(PR-23 for allocated caches), removing keys (semantics.md §9.6, PR-41), and moving bytes with
``copy_cache``, ``copy_blocks`` and ``swap_blocks``. The caches are a Bundle; each call
goes to the package and to the model (``tests/oracle/vendor_checks.py`` over
``vendor_local.Engine``), which must agree on the outcome, and after every call every
byte of every cache (guard bytes of the registered numpy buffers included, pool
tensors read through the addresses they had when allocated, a deferred cache
included) must equal the model's bytes.

The key bindings are observed through local behaviour: an allocation or registration
with a key that is still bound fails (PR-21, PR-22; v1 ``LLM_FAILED``), removing the
last key of a deallocated cache frees it so that a copy from it then gives
``LLM_KV_CACHE_NOT_EXIST``, and the cache ids (consumed by failures, semantics.md §3.1) must match.
"""
from __future__ import annotations

from typing import Any, Dict, List, Tuple

import numpy as np
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, initialize, invariant, precondition, rule

from oracle.vendor_checks import Key, Ref
from oracle.vendor_local import DEVICE, HOST
from vendor_local_driver import Env, one_call

pytestmark = pytest.mark.mock_only(reason="the vendor-compatible API runs on the mock's extension functions")

#: the keys the machine binds and removes: request keys, a prefix key, a placeholder, two
#: models (docs/reference/semantics.md §9.1)
KEYS = [Key("CacheKey", 1, req_id=1), Key("CacheKey", 1, req_id=2), Key("CacheKey", 1, req_id=1, model_id=1),
        Key("CacheKey", 1, prefix_id=3), Key("CacheKey", 1, model_id=4)]
BLOCKS_KEYS = [Key("BlocksCacheKey", 1, model_id=0), Key("BlocksCacheKey", 1, model_id=1)]
SHAPES = [(4, 32), (2, 64), (8, 16), (4, 16)]
MODES = ["v2-direct-pools", "v2-server-pool", "v1-prompt", "v1-decoder"]
ENV = Env()


def desc(num: int, shape: Tuple[int, ...], placement: int, blocks: bool) -> Ref:
    return Ref("@desc", "CacheDesc", -1, num, shape, 4, placement, blocks)


class VendorLocalMachine(RuleBasedStateMachine):
    """Caches of one engine and the model of them."""

    caches = Bundle("caches")

    def __init__(self) -> None:
        super().__init__()
        self.env = ENV
        self.count = 0

    @initialize(mode=st.sampled_from(MODES), seed=st.integers(0, 2**32 - 1))
    def start(self, mode: str, seed: int) -> None:
        self.env.start(mode, np.random.default_rng(seed), bare=True)

    @property
    def v2(self) -> bool:
        return self.env.mode.generation == 2

    def name(self) -> str:
        self.count += 1
        return f"k{self.count}"

    def ref(self, name: str) -> Ref:
        return self.env.checks.refs[name]

    # ---- making caches ------------------------------------------------------------------------

    @precondition(lambda self: self.env.mode.generation == 2)
    @rule(target=caches, blocks=st.booleans(), num=st.sampled_from([2, 4]), shape=st.sampled_from(SHAPES),
          placement=st.sampled_from([DEVICE, HOST]), keys=st.lists(st.sampled_from(KEYS), max_size=3),
          bkey=st.sampled_from([None, *BLOCKS_KEYS]))
    def register(self, blocks: bool, num: int, shape: Tuple[int, ...], placement: int, keys: List[Key],
                 bkey: Any) -> str:
        name = self.name()
        addrs = self.env.guarded(name, num, shape[0] * shape[1])
        if blocks:
            one_call(self.env, "register_blocks_cache", [desc(num, shape, placement, True), addrs, bkey], {}, name=name)
        else:
            one_call(self.env, "register_cache", [desc(num, shape, placement, False), addrs, keys], {}, name=name)
        return name

    @rule(target=caches, blocks=st.booleans(), num=st.sampled_from([2, 4]), shape=st.sampled_from(SHAPES),
          placement=st.sampled_from([DEVICE, DEVICE, HOST]), keys=st.lists(st.sampled_from(KEYS), max_size=3),
          bkey=st.sampled_from([None, *BLOCKS_KEYS]))
    def allocate(self, blocks: bool, num: int, shape: Tuple[int, ...], placement: int, keys: List[Key],
                 bkey: Any) -> str:
        name = self.name()
        if not self.v2:
            placement = DEVICE
            if self.env.mode.role != "PROMPT":
                keys, bkey = [], (None if self.env.mode.role == "DECODER" else bkey)
        if blocks:
            one_call(self.env, "allocate_blocks_cache", [desc(num, shape, placement, True), bkey], {}, name=name)
        else:
            one_call(self.env, "allocate_cache", [desc(num, shape, placement, False), keys], {}, name=name)
        return name

    # ---- releasing caches and keys ------------------------------------------------------------

    @rule(cache=caches, right_call=st.booleans())
    def deallocate(self, cache: str, right_call: bool) -> None:
        if cache not in self.env.objects:
            return                                   # the call that made it failed
        ref = self.ref(cache)
        method = "deallocate_cache"
        if self.v2 and ref.blocks == right_call:
            method = "deallocate_blocks_cache"
        one_call(self.env, method, [ref], {})

    @precondition(lambda self: self.env.mode.generation == 2)
    @rule(cache=caches)
    def unregister(self, cache: str) -> None:
        if cache in self.env.objects:
            one_call(self.env, "unregister_cache", [self.ref(cache).cache_id], {})

    @rule(key=st.sampled_from(KEYS + [Key("CacheKey", 1, req_id=1, prefix_id=3)]))
    def remove_cache_key(self, key: Key) -> None:
        one_call(self.env, "remove_cache_key", [key], {})

    # ---- moving bytes -------------------------------------------------------------------------

    @rule(dst=caches, src=caches, dst_batch=st.integers(0, 4), src_batch=st.integers(0, 4),
          offset=st.sampled_from([0, 0, 8, 16, 32]), size=st.sampled_from([-1, -1, 8, 16, 24, 64]))
    def copy_cache(self, dst: str, src: str, dst_batch: int, src_batch: int, offset: int, size: int) -> None:
        if dst in self.env.objects and src in self.env.objects:
            one_call(self.env, "copy_cache", [self.ref(dst), self.ref(src), dst_batch, src_batch, offset, size], {})

    @rule(cache=caches, mapping=st.dictionaries(st.integers(0, 8), st.lists(st.integers(0, 8), min_size=1,
                                                                            max_size=3), max_size=3))
    def copy_blocks(self, cache: str, mapping: Dict[int, List[int]]) -> None:
        if cache in self.env.objects:
            one_call(self.env, "copy_blocks", [self.ref(cache), mapping], {})

    @rule(data=st.data(), src=caches, mapping=st.dictionaries(st.integers(0, 8), st.integers(0, 8), max_size=4))
    def swap_blocks(self, data: st.DataObject, src: str, mapping: Dict[int, int]) -> None:
        if src not in self.env.objects:
            return
        other = data.draw(st.sampled_from(sorted(self.env.objects)), label="other cache")
        pair = [self.ref(src), self.ref(other)]
        if data.draw(st.booleans(), label="reversed"):
            pair.reverse()
        if any(r.deallocated for r in pair):
            return                                   # no addresses left to swap with (semantics.md §3.4)
        followed = self.env.memory()
        if any(r.name not in followed for r in pair):
            return                                   # a pool cache whose pages went back (PR-23): bytes undefined
        one_call(self.env, "swap_blocks", [*pair, mapping], {})

    @invariant()
    def memory_matches_the_model(self) -> None:
        if self.env.dd is not None:
            self.env.check_memory()

    def teardown(self) -> None:
        self.env.stop()


VendorLocalMachine.TestCase.settings = settings(max_examples=settings.default.max_examples * 3,
                                                stateful_step_count=30, deadline=None)
test_vendor_engines_follow_the_model = pytest.mark.rules(
    "§3.1", "§3.3", "§3.4", "§3.5", "§6.6", "§7.3", "§8.8", "§8.9", "§8.10", "§9.2", "§9.3", "§9.6", "§9.8", "PR-4",
    "PR-21", "PR-22", "PR-23", "PR-24", "PR-41")(VendorLocalMachine.TestCase)
