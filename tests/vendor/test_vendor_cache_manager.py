"""CacheManager (docs/reference/python-api.md §11) row by row, and transfers between two processes.

The first part checks every method's Python-side checks in the vendor's order, with
the vendor's exception types, and the project rules (PR-2, PR-3, PR-5, PR-8, PR-18,
PR-25, PR-41, numpy block lists, caches of a finalized engine). These need an
initialised engine but no peer: a call that passes them reaches the core, which
answers (e.g. ``LLM_NOT_YET_LINK`` without a link).

The second part moves data between this process (usually the Decoder) and a peer
process (``vendor_peer.py``) over 127.0.0.1 and compares every byte of the
destination with what the seeds say it must hold: pulled bytes equal the source,
all other bytes stay as they were.
"""
from __future__ import annotations

import ctypes
import threading
from typing import Any, Dict, Iterator, List, Optional, Tuple

import numpy as np
import pytest

from llm_datadist_ffi import LLMException, LLMStatusCode, lint
from llm_datadist_ffi import lint as lint_module
from llm_datadist_ffi.vendor import (
    BlocksCacheKey, Cache, CacheDesc, CacheKey, CacheKeyByIdAndIndex, CacheTask, DataType, LayerSynchronizer,
    LLMDataDist, LLMRole, MemInfo, Memtype, Placement, TransferConfig, TransferWithCacheKeyConfig,
)
from llm_datadist_ffi._vendor.v2.cache_manager import CacheManager

import vendor_support as vs
from lint_support import lenient, strict

# The vendor-compatible API runs on the extension functions (include/lldd/ext.h): keys, cache
# kinds and modes that the public C++ class cannot express, so the ascend shim answers
# LLM_FEATURE_NOT_ENABLED for them (docs/ascend.md).
pytestmark = [pytest.mark.mock_only(reason="the vendor-compatible API needs the mock's extension functions"),
              pytest.mark.usefixtures("no_engine_left")]


@pytest.fixture(autouse=True)
def _device_behaviour_unless_a_test_asks_for_strict(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests here check the device's behaviour with its lint, or call ``strict()`` for the
    refusal: a strict mode set for the whole run must not change which one they see."""
    lenient(monkeypatch)


raises, lx, fill = vs.raises, vs.lx, vs.fill
S = LLMStatusCode
U64_MAX = 2**64 - 1
BLOCKS, BLOCK_BYTES, TENSORS = 8, 64, 4


class Local:
    """The engine of this process and the numpy memory of its caches."""

    def __init__(self, options: Dict[str, str], cluster_id: int = 2, role: LLMRole = LLMRole.DECODER) -> None:
        self.engine = LLMDataDist(role, cluster_id)
        self.engine.init(options)
        self.cm: CacheManager = self.engine.cache_manager
        self.memory: List[np.ndarray] = []

    def arrays(self, num: int = TENSORS, shape: Tuple[int, ...] = (BLOCKS, BLOCK_BYTES),
               seed: int = -1) -> List[np.ndarray]:
        made = [fill(seed + t if seed >= 0 else -1, shape) for t in range(num)]
        self.memory += made
        return made

    def blocks_cache(self, num: int = TENSORS, shape: Tuple[int, ...] = (BLOCKS, BLOCK_BYTES), seed: int = -1,
                     key: Optional[BlocksCacheKey] = None) -> Tuple[Cache, List[np.ndarray]]:
        arrays = self.arrays(num, shape, seed)
        desc = CacheDesc(num, list(shape), DataType.DT_UINT8)
        return self.cm.register_blocks_cache(desc, [a.ctypes.data for a in arrays], key), arrays

    def cache(self, num: int = TENSORS, shape: Tuple[int, ...] = (4, 128), seed: int = -1,
              keys: Tuple[CacheKey, ...] = ()) -> Tuple[Cache, List[np.ndarray]]:
        arrays = self.arrays(num, shape, seed)
        desc = CacheDesc(num, list(shape), DataType.DT_UINT8)
        return self.cm.register_cache(desc, [a.ctypes.data for a in arrays], keys), arrays


@pytest.fixture
def local() -> Iterator[Local]:
    made = Local(vs.v2_options(pool=True, host_pool=True))
    yield made
    made.engine.finalize()


@pytest.fixture
def server_mode() -> Iterator[Local]:
    made = Local(vs.v2_options(direct=False, pool=True))
    yield made
    made.engine.finalize()


def not_yet_link(call: Any) -> None:
    """The call passed every Python check and reached the core, which has no link."""
    raises(LLMException, call, status=S.LLM_NOT_YET_LINK)


def memory_at(address: int, nbytes: int) -> bytes:
    """Bytes of engine memory (the mock's "device" memory is host memory)."""
    return ctypes.string_at(address, nbytes)


# ---------------------------------------------------------------------------
# python-api.md §11.1 registration
# ---------------------------------------------------------------------------


def test_register_cache_returns_a_registered_contiguous_cache_with_id_one(local: Local) -> None:
    arrays = local.arrays(2, (4, 32))
    desc = CacheDesc(2, [4, 32], DataType.DT_UINT8)
    addrs = [a.ctypes.data for a in arrays]
    cache = local.cm.register_cache(desc, addrs)
    assert (cache.cache_id, cache.is_blocks_cache, cache._is_registered) == (1, False, True)
    assert cache.cache_desc is desc and cache.tensor_addrs is addrs


def test_register_cache_checks_in_the_vendor_order(local: Local) -> None:
    arrays = local.arrays(2, (4, 32))
    addrs = [a.ctypes.data for a in arrays]
    desc = CacheDesc(2, [4, 32], DataType.DT_UINT8)
    cm = local.cm
    raises(TypeError, lambda: cm.register_cache("desc", addrs), "cache_desc")  # type: ignore[arg-type]
    raises(TypeError, lambda: cm.register_cache(desc, tuple(addrs)), "addrs")  # type: ignore[arg-type]
    raises(TypeError, lambda: cm.register_cache(desc, [addrs[0], "x"]), "addrs[1]")  # type: ignore[list-item]
    raises(TypeError, lambda: cm.register_cache(desc, addrs, None), "cache_keys")  # type: ignore[arg-type]
    raises(TypeError, lambda: cm.register_cache(desc, addrs, [BlocksCacheKey(1)]), "cache_keys[0]")  # type: ignore
    raises(TypeError, lambda: cm.register_cache(desc, addrs, remote_accessible=1), "remote_accessible")  # type: ignore
    raises(TypeError, lambda: cm.register_cache(desc, None), "addrs")  # type: ignore[arg-type]
    lx(lambda: cm.register_cache(desc, []), "addrs must not be empty")
    raises(AttributeError, lambda: cm.register_cache(None, addrs), "cache_desc")  # type: ignore[arg-type]
    lx(lambda: cm.register_cache(desc, addrs[:1]), "num_tensors")
    lx(lambda: cm.register_cache(desc, [addrs[0], 0]), "addrs[1] is 0")
    with vs.strict_mode():
        lx(lambda: cm.register_cache(CacheDesc(2, [4, 32], DataType.DT_UINT8, batch_dim_index=1), addrs), "PR-18")
    raises(TypeError, lambda: cm.register_cache(desc, [addrs[0], 2**64]), "uint64")
    # two broken rules: the type of cache_desc (step 1) before the empty addrs (step 6)
    raises(TypeError, lambda: cm.register_cache(1, []), "cache_desc")  # type: ignore[arg-type]


def test_register_cache_binds_keys_to_batches_and_rejects_more_keys_than_batches(local: Local) -> None:
    arrays = local.arrays(2, (2, 32))
    desc = CacheDesc(2, [2, 32], DataType.DT_UINT8)
    addrs = [a.ctypes.data for a in arrays]
    keys = [CacheKey(2, 10), CacheKey(2, 11), CacheKey(2, 12)]
    lx(lambda: local.cm.register_cache(desc, addrs, keys))
    assert local.cm.register_cache(desc, addrs, keys[:2]).cache_id == 2  # the failed call consumed id 1


def test_register_blocks_cache_checks_in_the_vendor_order(local: Local) -> None:
    arrays = local.arrays(2)
    addrs = [a.ctypes.data for a in arrays]
    desc = CacheDesc(2, [BLOCKS, BLOCK_BYTES], DataType.DT_UINT8)
    cm = local.cm
    raises(TypeError, lambda: cm.register_blocks_cache([], addrs), "cache_desc")  # type: ignore[arg-type]
    raises(TypeError, lambda: cm.register_blocks_cache(desc, (1, 2)), "addrs")  # type: ignore[arg-type]
    raises(TypeError, lambda: cm.register_blocks_cache(desc, addrs, CacheKey(1, 1)), "blocks_cache_key")  # type: ignore
    raises(TypeError, lambda: cm.register_blocks_cache(desc, addrs, None, "yes"), "remote_accessible")  # type: ignore
    lx(lambda: cm.register_blocks_cache(desc, []), "addrs must not be empty")
    raises(AttributeError, lambda: cm.register_blocks_cache(None, addrs), "cache_desc")  # type: ignore[arg-type]
    with vs.strict_mode():
        lx(lambda: cm.register_blocks_cache(CacheDesc(2, [8, 64], DataType.DT_UINT8, batch_dim_index=1), addrs),
           "PR-18")
    raises(TypeError, lambda: cm.register_blocks_cache(desc, addrs, BlocksCacheKey(1, -1)), "model_id")
    # the address count is a core check
    lx(lambda: cm.register_blocks_cache(desc, addrs[:1]), "register_blocks_cache")


def test_register_blocks_cache_does_not_mark_the_callers_desc_as_blocks(local: Local) -> None:
    arrays = local.arrays(2, (4, 32))
    addrs = [a.ctypes.data for a in arrays]
    desc = CacheDesc(2, [4, 32], DataType.DT_UINT8)
    assert local.cm.register_blocks_cache(desc, addrs).is_blocks_cache is True
    later = local.cm.register_cache(desc, addrs)
    assert later.is_blocks_cache is False and later.cache_id == 2


def test_after_set_is_call_linked_registrations_are_not_remote_accessible(local: Local) -> None:
    arrays = local.arrays(2)
    desc = CacheDesc(2, [BLOCKS, BLOCK_BYTES], DataType.DT_UINT8)
    addrs = [a.ctypes.data for a in arrays]
    local.cm.set_is_call_linked()
    message = "you can not register remote accessible cache after link."
    lx(lambda: local.cm.register_blocks_cache(desc, addrs, remote_accessible=True), message)
    lx(lambda: local.cm.register_cache(desc, addrs, remote_accessible=True), message)
    # the after-link rule (step 5) comes before the empty addrs (step 6)
    lx(lambda: local.cm.register_cache(desc, [], remote_accessible=True), message)
    assert local.cm.register_blocks_cache(desc, addrs, remote_accessible=False).cache_id == 1
    assert local.cm.register_blocks_cache(desc, addrs).cache_id == 2


def test_unregister_cache_checks_an_int64_and_accepts_an_unknown_id(local: Local) -> None:
    raises(TypeError, lambda: local.cm.unregister_cache("1"), "cache_id")  # type: ignore[arg-type]
    raises(TypeError, lambda: local.cm.unregister_cache(None), "cache_id")  # type: ignore[arg-type]
    raises(ValueError, lambda: local.cm.unregister_cache(2**63), "cache_id")
    assert local.cm.unregister_cache(99) is None
    cache, _ = local.blocks_cache()
    local.cm.unregister_cache(cache.cache_id)


def test_unregister_cache_of_an_allocated_cache_removes_it_and_its_keys_with_a_lint(local: Local) -> None:
    # PR-23: the vendor erases the entry (its keys go with it); deallocate was the call meant
    desc = CacheDesc(2, [4, 64], DataType.DT_UINT8)
    cache = local.cm.allocate_cache(desc, [CacheKey(2, 40)])
    with vs.strict_mode():
        lx(lambda: local.cm.unregister_cache(cache.cache_id), "PR-23")
    lx(lambda: local.cm.allocate_cache(desc, [CacheKey(2, 40)]))               # the key is still bound
    with pytest.warns(lint_module.OwnedCacheUnregisteredWarning, match="PR-23") as record:
        local.cm.unregister_cache(cache.cache_id)
    assert record[0].filename == __file__                                      # points at this line
    raises(LLMException, lambda: local.cm.copy_cache(cache, cache, 1, 0), status=LLMStatusCode.LLM_KV_CACHE_NOT_EXIST)
    again = local.cm.allocate_cache(desc, [CacheKey(2, 40)])                   # the key is free
    local.cm.deallocate_cache(again)


def test_register_cache_binds_a_repeated_or_bound_key_once_with_a_lint(local: Local) -> None:
    # PR-21: the vendor's registration checks no key; a bound key keeps its first binding
    arrays = local.arrays(2, (4, 32))
    addrs = [a.ctypes.data for a in arrays]
    desc = CacheDesc(2, [4, 32], DataType.DT_UINT8)
    with pytest.warns(lint_module.KeyBindingWarning, match="repeats") as record:
        first = local.cm.register_cache(desc, addrs, [CacheKey(2, 50), CacheKey(2, 50)])
    assert record[0].filename == __file__
    more = local.arrays(2, (4, 32))
    with pytest.warns(lint_module.KeyBindingWarning, match="already bound"):
        second = local.cm.register_cache(desc, [a.ctypes.data for a in more], [CacheKey(2, 50)])
    local.cm.unregister_cache(second.cache_id)
    lx(lambda: local.cm.allocate_cache(desc, [CacheKey(2, 50)]))               # still the first cache's
    local.cm.unregister_cache(first.cache_id)
    local.cm.deallocate_cache(local.cm.allocate_cache(desc, [CacheKey(2, 50)]))
    with vs.strict_mode():
        lx(lambda: local.cm.register_cache(desc, addrs, [CacheKey(2, 51), CacheKey(2, 51)]), "PR-21")


# ---------------------------------------------------------------------------
# python-api.md §11.2 pull_cache
# ---------------------------------------------------------------------------


def test_pull_cache_rejects_every_keyword_it_does_not_read_first(local: Local, monkeypatch: pytest.MonkeyPatch) -> None:
    strict(monkeypatch)          # the old refusals of the lint rules (docs/semantics.md §0)
    cache, _ = local.cache()
    key = CacheKeyByIdAndIndex(1, 1)
    lx(lambda: local.cm.pull_cache(key, cache, src_cache_offset=0), "src_cache_offset is ignored in "
                                                                     "CacheManager mode")
    lx(lambda: local.cm.pull_cache(key, cache, dst_cache_offset=4), "dst_cache_offset")
    lx(lambda: local.cm.pull_cache(None, None, src_layer_rnage=range(1)), "'src_layer_rnage'")  # type: ignore


def test_pull_cache_in_direct_mode_takes_only_cache_key_by_id_and_index(local: Local) -> None:
    cache, _ = local.cache()
    raises(TypeError, lambda: local.cm.pull_cache(CacheKey(1, 5), cache), "cache_key")
    raises(TypeError, lambda: local.cm.pull_cache(BlocksCacheKey(1), cache), "cache_key")  # type: ignore[arg-type]
    not_yet_link(lambda: local.cm.pull_cache(CacheKeyByIdAndIndex(1, 1), cache))


def test_pull_cache_in_server_mode_takes_a_cache_key_too(server_mode: Local) -> None:
    cache, _ = server_mode.cache()
    not_yet_link(lambda: server_mode.cm.pull_cache(CacheKey(1, 5), cache))
    not_yet_link(lambda: server_mode.cm.pull_cache(CacheKeyByIdAndIndex(1, 1), cache))


def test_pull_cache_checks_in_the_vendor_order(local: Local) -> None:
    cache, _ = local.cache()
    blocks, _ = local.blocks_cache()
    key = CacheKeyByIdAndIndex(1, 1)
    cm = local.cm
    raises(TypeError, lambda: cm.pull_cache(key, blocks._cache_desc), "cache")  # type: ignore[arg-type]
    raises(TypeError, lambda: cm.pull_cache(key, cache, "0"), "batch_index")  # type: ignore[arg-type]
    raises(ValueError, lambda: cm.pull_cache(key, cache, -1), "batch_index")
    raises(TypeError, lambda: cm.pull_cache(key, cache, 0, None), "size")  # type: ignore[arg-type]
    raises(ValueError, lambda: cm.pull_cache(key, cache, 0, 2**63), "size")
    lx(lambda: cm.pull_cache(key, blocks, 0, 0), "cache can not be blocks cache")
    lx(lambda: cm.pull_cache(key, cache, 0, 0), "size")
    lx(lambda: cm.pull_cache(key, cache, 0, -2), "size")
    raises(TypeError, lambda: cm.pull_cache(key, cache, tensor_num_per_layer="2"), "tensor_num_per_layer")
    raises(ValueError, lambda: cm.pull_cache(key, cache, tensor_num_per_layer=-1), "tensor_num_per_layer")
    lx(lambda: cm.pull_cache(key, cache, tensor_num_per_layer=0), "tensor_num_per_layer (0) is invalid")
    raises(AttributeError, lambda: cm.pull_cache(key, None), "cache")  # type: ignore[arg-type]
    raises(AttributeError, lambda: cm.pull_cache(None, cache), "cache_key")  # type: ignore[arg-type]
    # batch_index (step 3) before size (step 4); size (4) before the blocks check (5)
    raises(ValueError, lambda: cm.pull_cache(key, blocks, -1, 2**63), "batch_index")
    raises(ValueError, lambda: cm.pull_cache(key, blocks, 0, 2**63), "size")


def test_pull_cache_applies_the_key_validity_rule_in_server_mode(server_mode: Local) -> None:
    cache, _ = server_mode.cache()
    cm = server_mode.cm
    lx(lambda: cm.pull_cache(CacheKey(1, U64_MAX), cache), "one of req id and prefix id should contain valid value")
    lx(lambda: cm.pull_cache(CacheKey(1, 3, prefix_id=4), cache), "only one of req id and prefix id")
    not_yet_link(lambda: cm.pull_cache(CacheKey(1, U64_MAX, prefix_id=4), cache))


@pytest.mark.parametrize("kwargs, error, fragment", [
    ({"src_layer_range": [0, 1]}, TypeError, "src_layer_range"),
    ({"dst_layer_range": (0, 1)}, TypeError, "dst_layer_range"),
    ({"src_layer_range": range(0, 2, 2)}, LLMException, "src_layer_range step"),
    ({"dst_layer_range": range(0, 2, 2)}, LLMException, "dst_layer_range step"),
    ({"src_layer_range": range(3, 3)}, LLMException, "is empty (PR-2"),
    ({"dst_layer_range": range(5, 2)}, LLMException, "is empty (PR-2"),
    ({"src_layer_range": range(-1, 1)}, LLMException, "starts below 0"),
    ({"src_layer_range": range(2**32, 2**32 + 1)}, ValueError, "first layer"),
    ({"dst_layer_range": range(0, 2**32 + 1)}, ValueError, "last layer"),
    ({"src_layer_range": range(0, 1), "dst_layer_range": range(0, 1, 3)}, LLMException, "dst_layer_range step"),
])
def test_pull_cache_converts_layer_ranges_as_the_vendor_does(local: Local, monkeypatch: pytest.MonkeyPatch,
                                                              kwargs: Dict[str, Any], error: type,
                                                              fragment: str) -> None:
    strict(monkeypatch)           # an empty range is a lint (PR-2): strict mode refuses it in place
    cache, _ = local.cache()
    call = lambda: local.cm.pull_cache(CacheKeyByIdAndIndex(1, 1), cache, **kwargs)  # noqa: E731
    if error is LLMException:
        lx(call, fragment)
    else:
        raises(error, call, fragment)


def test_pull_cache_checks_tensor_num_per_layer_as_the_v2_engine_does(local: Local) -> None:
    # no upper bound (a pull without a range does not use it); with a range, the v2 engine
    # asks the local tensor count to be a multiple of it: not a lint, the vendor's check
    cache, _ = local.cache(num=4)
    key = CacheKeyByIdAndIndex(1, 1)
    not_yet_link(lambda: local.cm.pull_cache(key, cache, tensor_num_per_layer=5))
    lx(lambda: local.cm.pull_cache(key, cache, tensor_num_per_layer=3, src_layer_range=range(0, 1)),
       "must be a multiple of tensor_num_per_layer 3")
    lx(lambda: local.cm.pull_cache(key, cache, src_layer_range=range(0, 3)), "selects 6 tensors")
    not_yet_link(lambda: local.cm.pull_cache(key, cache, tensor_num_per_layer=3))
    not_yet_link(lambda: local.cm.pull_cache(key, cache, src_layer_range=range(0, 2)))


# ---------------------------------------------------------------------------
# python-api.md §11.2 pull_blocks
# ---------------------------------------------------------------------------


def test_pull_blocks_rejects_keywords_it_does_not_read(local: Local, monkeypatch: pytest.MonkeyPatch) -> None:
    strict(monkeypatch)          # the old refusals of the lint rules (docs/semantics.md §0)
    cache, _ = local.blocks_cache()
    lx(lambda: local.cm.pull_blocks(BlocksCacheKey(1), cache, [0], [0], src_cache_offset=0), "src_cache_offset")
    lx(lambda: local.cm.pull_blocks(BlocksCacheKey(1), cache, [0], [0], timeout=5), "'timeout'")


def test_pull_blocks_checks_in_the_vendor_order(local: Local) -> None:
    blocks, _ = local.blocks_cache()
    cache, _ = local.cache()
    key = BlocksCacheKey(1)
    cm = local.cm
    raises(TypeError, lambda: cm.pull_blocks(TransferConfig(1, [1, 2]), blocks, [0], [0]), "src_cache_key")  # type: ignore
    raises(TypeError, lambda: cm.pull_blocks(key, "cache", [0], [0]), "dst_cache")  # type: ignore[arg-type]
    raises(TypeError, lambda: cm.pull_blocks(key, blocks, {0}, [0]), "src_blocks")  # type: ignore[arg-type]
    raises(TypeError, lambda: cm.pull_blocks(key, blocks, [0], [0.0]), "dst_blocks[0]")  # type: ignore[list-item]
    raises(TypeError, lambda: cm.pull_blocks(key, blocks, [np.int64(0)], [0]), "src_blocks[0]")  # type: ignore
    lx(lambda: cm.pull_blocks(key, cache, [0], [0]), "dst_cache must be a blocks cache")
    lx(lambda: cm.pull_blocks(key, blocks, [0], []), "dst_blocks must not be empty")
    lx(lambda: cm.pull_blocks(key, blocks, [0], [0], tensor_num_per_layer=0), "tensor_num_per_layer")
    lx(lambda: cm.pull_blocks(key, blocks, [], [0]), "src_blocks must not be empty")
    raises(TypeError, lambda: cm.pull_blocks(key, blocks, None, [0]), "src_blocks")
    lx(lambda: cm.pull_blocks(CacheKeyByIdAndIndex(1, 1), blocks, [0], [0]),
       "src_blocks should be empty when src_cache_key is not instance of BlocksCacheKey.")
    raises(AttributeError, lambda: cm.pull_blocks(key, None, [0], [0]), "dst_cache")  # type: ignore[arg-type]
    raises(AttributeError, lambda: cm.pull_blocks(None, blocks, [], [0]), "src_cache_key")  # type: ignore
    lx(lambda: cm.pull_blocks(None, blocks, [0], [0]), "src_blocks should be empty")  # type: ignore[arg-type]
    # dst_cache kind (step 5) before the empty dst_blocks (step 6)
    lx(lambda: cm.pull_blocks(key, cache, [0], []), "dst_cache must be a blocks cache")


def test_pull_blocks_with_a_none_block_list_is_a_type_error_where_the_vendor_takes_its_length(local: Local) -> None:
    blocks, _ = local.blocks_cache()
    cm = local.cm
    raises(TypeError, lambda: cm.pull_blocks(BlocksCacheKey(1), blocks, [0], None), "dst_blocks")
    raises(TypeError, lambda: cm.pull_blocks(BlocksCacheKey(1), blocks, None, [0]), "src_blocks")
    # by id: the vendor's "src_blocks should be empty" check takes len(None) too; no transfer starts
    raises(TypeError, lambda: cm.pull_blocks(CacheKeyByIdAndIndex(1, 1), blocks, None, [0]), "src_blocks")
    raises(TypeError, lambda: cm.pull_blocks(CacheKeyByIdAndIndex(1, 1), blocks, dst_blocks=[0],
                                             src_blocks=None), "src_blocks")


def test_a_none_key_fails_where_the_vendor_packs_it_before_the_layer_ranges(local: Local) -> None:
    cache, _ = local.cache()
    blocks, _ = local.blocks_cache()
    cm = local.cm
    step_2 = range(0, 2, 2)
    raises(AttributeError, lambda: cm.pull_cache(None, cache, src_layer_range=step_2), "cache_key")  # type: ignore
    raises(AttributeError, lambda: cm.pull_cache(None, cache, dst_layer_range=[0]), "cache_key")  # type: ignore
    raises(AttributeError, lambda: cm.pull_blocks(None, blocks, [], [0], src_layer_range=step_2),  # type: ignore
           "src_cache_key")
    # the vendor's own tensor_num_per_layer check comes before it packs the key
    lx(lambda: cm.pull_cache(None, cache, tensor_num_per_layer=0), "tensor_num_per_layer")  # type: ignore
    lx(lambda: cm.pull_blocks(None, blocks, [], [0], tensor_num_per_layer=0), "tensor_num_per_layer")  # type: ignore


def test_pull_blocks_applies_the_key_validity_rule_to_a_cache_key(local: Local) -> None:
    blocks, _ = local.blocks_cache()
    lx(lambda: local.cm.pull_blocks(CacheKey(1, U64_MAX), blocks, (), [0]), "one of req id")
    not_yet_link(lambda: local.cm.pull_blocks(CacheKey(1, 7), blocks, (), [0]))


def test_pull_blocks_rejects_a_repeated_destination_block(local: Local, monkeypatch: pytest.MonkeyPatch) -> None:
    strict(monkeypatch)          # the old refusals of the lint rules (docs/semantics.md §0)
    blocks, _ = local.blocks_cache()
    lx(lambda: local.cm.pull_blocks(BlocksCacheKey(1), blocks, [0, 1, 2], [3, 5, 3]), "block 3 more than once")
    not_yet_link(lambda: local.cm.pull_blocks(BlocksCacheKey(1), blocks, [1, 1], [3, 5]))


def test_pull_blocks_converts_block_indexes_like_the_native_binding(local: Local) -> None:
    blocks, _ = local.blocks_cache()
    raises(TypeError, lambda: local.cm.pull_blocks(BlocksCacheKey(1), blocks, [-1], [0]), "uint64")
    raises(TypeError, lambda: local.cm.pull_blocks(BlocksCacheKey(1), blocks, [0], [2**64]), "uint64")


def test_pull_blocks_accepts_one_dimensional_integer_numpy_arrays(local: Local,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    lenient(monkeypatch)
    blocks, _ = local.blocks_cache()
    cm = local.cm
    for dtype in (np.uint64, np.int64, np.int32, np.uint8):
        not_yet_link(lambda: cm.pull_blocks(BlocksCacheKey(1), blocks, np.array([1, 2], dtype=dtype),
                                            np.array([0, 1], dtype=dtype)))
    raises(TypeError, lambda: cm.pull_blocks(BlocksCacheKey(1), blocks, np.array([[1]]), [0]), "src_blocks")
    raises(TypeError, lambda: cm.pull_blocks(BlocksCacheKey(1), blocks, np.array([1.0]), [0]), "src_blocks")
    raises(TypeError, lambda: cm.pull_blocks(BlocksCacheKey(1), blocks, np.array([-1]), [0]), "uint64")
    with pytest.warns(lint.RepeatedDestinationBlockWarning, match="block 4 more than once"):
        not_yet_link(lambda: cm.pull_blocks(BlocksCacheKey(1), blocks, np.array([1, 2]), np.array([4, 4])))


def test_a_uint64_numpy_block_list_crosses_into_c_without_a_copy(local: Local) -> None:
    from llm_datadist_ffi._vendor import _native

    array = np.array([3, 1, 2], dtype=np.uint64)
    converted = _native.block_list(array, "dst_blocks")
    assert converted.array is array
    assert int(_native.ffi.cast("uintptr_t", converted.pointer)) == array.ctypes.data
    assert _native.block_list([3, 1, 2], "dst_blocks").tolist() == [3, 1, 2]


# ---------------------------------------------------------------------------
# python-api.md §11.3 pushes
# ---------------------------------------------------------------------------


def test_pushes_need_direct_mode(server_mode: Local) -> None:
    cache, _ = server_mode.cache()
    blocks, _ = server_mode.blocks_cache()
    lx(lambda: server_mode.cm.push_cache(CacheKeyByIdAndIndex(1, 1), cache),
       "push_cache is only supported while enable_remote_cache_accessible is True")
    lx(lambda: server_mode.cm.push_blocks(BlocksCacheKey(1), blocks, [0], [0]),
       "push_blocks is only supported while enable_remote_cache_accessible is True")
    # direct mode is checked first, before any argument
    lx(lambda: server_mode.cm.push_cache(None, None), "only supported")  # type: ignore[arg-type]


def test_push_cache_checks_in_the_vendor_order(local: Local, monkeypatch: pytest.MonkeyPatch) -> None:
    strict(monkeypatch)          # the old refusals of the lint rules (docs/semantics.md §0)
    cache, _ = local.cache(num=4)
    blocks, _ = local.blocks_cache()
    key = CacheKeyByIdAndIndex(1, 1)
    cm = local.cm
    raises(TypeError, lambda: cm.push_cache(None, cache), "dst_cache_key")  # type: ignore[arg-type]
    raises(TypeError, lambda: cm.push_cache(BlocksCacheKey(1), cache), "dst_cache_key")  # type: ignore[arg-type]
    raises(TypeError, lambda: cm.push_cache(key, None), "src_cache")  # type: ignore[arg-type]
    raises(ValueError, lambda: cm.push_cache(key, cache, -1), "src_batch_index")
    lx(lambda: cm.push_cache(key, blocks), "src_cache can not be blocks cache")
    lx(lambda: cm.push_cache(key, cache, tensor_num_per_layer=0), "tensor_num_per_layer")
    raises(TypeError, lambda: cm.push_cache(key, cache, src_layer_range=[0]), "src_layer_range")  # type: ignore
    lx(lambda: cm.push_cache(key, cache, src_layer_range=range(0, 2, 2)), "step")
    lx(lambda: cm.push_cache(key, cache, dst_layer_range=range(1, 1)), "0 <= start < stop")
    lx(lambda: cm.push_cache(key, cache, src_layer_range=range(0, 1)), "same length")
    raises(TypeError, lambda: cm.push_cache(key, cache, size=None), "size")  # type: ignore[arg-type]
    lx(lambda: cm.push_cache(key, cache, size=16), "only supports -1")
    lx(lambda: cm.push_cache(key, cache, tensor_num_per_layer=8), "PR-3")
    not_yet_link(lambda: cm.push_cache(key, cache, tensor_num_per_layer=3))    # the engine's check, per layer
    not_yet_link(lambda: cm.push_cache(key, cache))
    not_yet_link(lambda: cm.push_cache(key, cache, 0, range(0, 1), range(1, 2)))


def test_push_blocks_checks_in_the_vendor_order(local: Local, monkeypatch: pytest.MonkeyPatch) -> None:
    strict(monkeypatch)          # the old refusals of the lint rules (docs/semantics.md §0)
    blocks, _ = local.blocks_cache()
    cache, _ = local.cache()
    key = BlocksCacheKey(1)
    cm = local.cm
    raises(TypeError, lambda: cm.push_blocks(CacheKeyByIdAndIndex(1, 1), blocks, [0], [0]), "dst_cache_key")  # type: ignore
    raises(TypeError, lambda: cm.push_blocks(key, "x", [0], [0]), "src_cache")  # type: ignore[arg-type]
    raises(TypeError, lambda: cm.push_blocks(key, blocks, "0", [0]), "src_blocks")  # type: ignore[arg-type]
    raises(TypeError, lambda: cm.push_blocks(key, blocks, [0], ["0"]), "dst_blocks[0]")  # type: ignore[list-item]
    lx(lambda: cm.push_blocks(key, cache, [0], [0]), "src_cache must be a blocks cache")
    lx(lambda: cm.push_blocks(key, blocks, [0], ()), "dst_blocks must not be empty")
    lx(lambda: cm.push_blocks(key, blocks, [0], [0], tensor_num_per_layer=0), "tensor_num_per_layer")
    lx(lambda: cm.push_blocks(key, blocks, [0], [0], range(0, 2), range(0, 3)), "same length")
    lx(lambda: cm.push_blocks(key, blocks, [0], [0], tensor_num_per_layer=5), "PR-3")
    lx(lambda: cm.push_blocks(key, blocks, [0, 1], [2, 2]), "PR-5")
    raises(AttributeError, lambda: cm.push_blocks(key, None, [0], [0]), "src_cache")  # type: ignore[arg-type]
    raises(AttributeError, lambda: cm.push_blocks(None, blocks, [0], [0]), "dst_cache_key")  # type: ignore
    raises(TypeError, lambda: cm.push_blocks(key, blocks, [0], None), "dst_blocks")  # type: ignore[arg-type]
    not_yet_link(lambda: cm.push_blocks(key, blocks, [0], [0]))
    not_yet_link(lambda: cm.push_blocks(key, blocks, np.arange(2), np.arange(2, 4), range(4), range(4), 1))


def test_push_blocks_sends_a_none_source_list_as_an_empty_one_as_the_vendor_does(local: Local) -> None:
    blocks, _ = local.blocks_cache()
    # the vendor hands [] on for src_blocks=None: the Python layer lets the call through
    # and the core (whose function names its message) answers for the empty source list
    raises(LLMException, lambda: local.cm.push_blocks(BlocksCacheKey(1), blocks, None, [0]), "lldd_ext_push_layer")


# ---------------------------------------------------------------------------
# python-api.md §11.5 allocation, deallocation, keys
# ---------------------------------------------------------------------------


def test_allocate_cache_checks_in_the_vendor_order(local: Local) -> None:
    cm = local.cm
    desc = CacheDesc(2, [4, 64], DataType.DT_UINT8)
    raises(TypeError, lambda: cm.allocate_cache("desc"), "cache_desc")  # type: ignore[arg-type]
    raises(TypeError, lambda: cm.allocate_cache(desc, [CacheKeyByIdAndIndex(1, 1)]), "cache_keys[0]")  # type: ignore
    raises(TypeError, lambda: cm.allocate_cache(desc, None), "cache_keys")  # type: ignore[arg-type]
    raises(AttributeError, lambda: cm.allocate_cache(None), "cache_desc")  # type: ignore[arg-type]
    lx(lambda: cm.allocate_cache(CacheDesc(0, [4, 64], DataType.DT_UINT8)), "num_tensors")
    with vs.strict_mode():
        lx(lambda: cm.allocate_cache(CacheDesc(2, [4, 64], DataType.DT_UINT8, batch_dim_index=1)), "PR-18")


@pytest.mark.parametrize("call", ["register_cache", "register_blocks_cache", "allocate_cache",
                                  "allocate_blocks_cache"])
def test_a_batch_dim_other_than_zero_is_accepted_with_a_lint_and_shape_0_counts(local: Local, call: str) -> None:
    # PR-18: the core never sees batch_dim_index; shape[0] = 4 batches or blocks of 64
    # bytes (shape[1] would have made 64 of 4 bytes)
    desc = CacheDesc(2, [4, 64], DataType.DT_UINT8, batch_dim_index=1)
    arrays = local.arrays(2, (4, 64))
    args: Tuple[Any, ...] = (desc, [a.ctypes.data for a in arrays]) if call.startswith("register") else (desc,)
    cache = vs.linted("PR-18", lambda: getattr(local.cm, call)(*args), "batch_dim_index is 1")
    source = [fill(70 + t, 256).tobytes() for t in range(2)]
    for t in range(2):
        _write(cache.tensor_addrs[t], source[t])
    if "blocks" in call:
        local.cm.copy_blocks(cache, {3: [0]})
        lx(lambda: local.cm.copy_blocks(cache, {4: [0]}))
    else:
        other = local.cm.allocate_cache(CacheDesc(2, [4, 64], DataType.DT_UINT8))
        local.cm.copy_cache(other, cache, dst_batch_index=3, src_batch_index=3)
        local.cm.copy_cache(cache, other, dst_batch_index=0, src_batch_index=3)
        lx(lambda: local.cm.copy_cache(other, cache, src_batch_index=4))
    for t in range(2):
        assert memory_at(cache.tensor_addrs[t], 256) == source[t][192:] + source[t][64:]


def test_allocate_needs_the_pool_of_the_placement() -> None:
    no_pool = Local(vs.v2_options())
    try:
        desc = CacheDesc(2, [4, 64], DataType.DT_UINT8)
        message = "you should config memory pool firstly and then set placement that matches it."
        lx(lambda: no_pool.cm.allocate_cache(desc), message)
        lx(lambda: no_pool.cm.allocate_blocks_cache(desc), message)
        raises(LLMException, lambda: no_pool.cm.remove_cache_key(CacheKey(1, 1)), status=S.LLM_FEATURE_NOT_ENABLED)
        registered, _ = no_pool.cache()
        raises(LLMException, lambda: no_pool.cm.deallocate_cache(registered), status=S.LLM_FEATURE_NOT_ENABLED)
    finally:
        no_pool.engine.finalize()
    device_only = Local(vs.v2_options(pool=True))
    try:
        host = CacheDesc(2, [4, 64], DataType.DT_UINT8, Placement.HOST)
        lx(lambda: device_only.cm.allocate_cache(host), "memory pool")
        assert device_only.cm.allocate_cache(CacheDesc(2, [4, 64], DataType.DT_UINT8)).cache_id == 1
    finally:
        device_only.engine.finalize()


def test_allocate_cache_returns_pool_memory_and_deallocate_empties_the_addresses(local: Local) -> None:
    desc = CacheDesc(2, [4, 64], DataType.DT_UINT8)
    cache = local.cm.allocate_cache(desc, [CacheKey(2, 1), CacheKey(2, 2)])
    assert (cache.cache_id, cache.is_blocks_cache, cache._is_registered) == (1, False, False)
    assert len(cache.tensor_addrs) == 2 and all(cache.tensor_addrs)
    local.cm.deallocate_cache(cache)
    assert cache.tensor_addrs == []


def test_allocate_cache_rejects_a_key_already_bound_and_a_repeated_key(local: Local) -> None:
    desc = CacheDesc(1, [4, 64], DataType.DT_UINT8)
    local.cm.allocate_cache(desc, [CacheKey(2, 1)])
    lx(lambda: local.cm.allocate_cache(desc, [CacheKey(2, 1)]))
    lx(lambda: local.cm.allocate_cache(desc, [CacheKey(2, 5), CacheKey(2, 5)]))


def test_allocate_cache_runs_out_of_pool_memory(local: Local) -> None:
    big = CacheDesc(1, [1024, 131072], DataType.DT_UINT8)   # 128 MiB, the pool has 64 MiB
    raises(LLMException, lambda: local.cm.allocate_cache(big), status=S.LLM_OUT_OF_MEMORY)


def test_allocate_blocks_cache_checks_and_binds_one_model_id(local: Local) -> None:
    cm = local.cm
    desc = CacheDesc(2, [8, 64], DataType.DT_UINT8)
    raises(TypeError, lambda: cm.allocate_blocks_cache(desc, CacheKey(1, 1)), "blocks_cache_key")  # type: ignore
    lx(lambda: cm.allocate_blocks_cache(CacheDesc(0, [8, 64], DataType.DT_UINT8)), "num_tensors")
    cache = cm.allocate_blocks_cache(desc, BlocksCacheKey(2, 3))
    assert cache.is_blocks_cache is True and cache._is_registered is False
    lx(lambda: cm.allocate_blocks_cache(desc, BlocksCacheKey(2, 3)))
    lx(lambda: cm.deallocate_cache(cache), "deallocate_blocks_cache")
    cm.deallocate_blocks_cache(cache)
    assert cache.tensor_addrs == []
    assert cm.allocate_blocks_cache(desc, BlocksCacheKey(2, 3)).cache_id == 3


def test_deallocate_checks_type_and_kind(local: Local) -> None:
    contiguous = local.cm.allocate_cache(CacheDesc(1, [4, 64], DataType.DT_UINT8))
    raises(TypeError, lambda: local.cm.deallocate_cache("x"), "cache")  # type: ignore[arg-type]
    raises(AttributeError, lambda: local.cm.deallocate_cache(None), "cache")  # type: ignore[arg-type]
    raises(TypeError, lambda: local.cm.deallocate_blocks_cache(1), "cache")  # type: ignore[arg-type]
    lx(lambda: local.cm.deallocate_blocks_cache(contiguous), "not a blocks cache")


def test_deallocate_cache_of_a_registered_cache_is_a_no_op(local: Local) -> None:
    cache, _ = local.cache()
    local.cm.deallocate_cache(cache)
    assert cache.tensor_addrs == []


def test_remove_cache_key_checks_type_and_lints_the_pull_validity_rule(local: Local) -> None:
    raises(TypeError, lambda: local.cm.remove_cache_key(BlocksCacheKey(1)), "cache_key")  # type: ignore[arg-type]
    raises(AttributeError, lambda: local.cm.remove_cache_key(None), "cache_key")  # type: ignore[arg-type]
    assert vs.linted("PR-41", lambda: local.cm.remove_cache_key(CacheKey(1, U64_MAX))) is None
    assert vs.linted("PR-41", lambda: local.cm.remove_cache_key(CacheKey(1, 2, prefix_id=3))) is None
    with vs.strict_mode():
        lx(lambda: local.cm.remove_cache_key(CacheKey(1, U64_MAX)), "PR-41")
        lx(lambda: local.cm.remove_cache_key(CacheKey(1, 2, prefix_id=3)), "PR-41")
    assert local.cm.remove_cache_key(CacheKey(1, 12345)) is None


def test_a_placeholder_key_unbinds_the_blocks_key_of_an_allocated_blocks_cache_with_a_lint(local: Local) -> None:
    desc = CacheDesc(2, [8, 64], DataType.DT_UINT8)
    cache = local.cm.allocate_blocks_cache(desc, BlocksCacheKey(2, 0))
    with vs.strict_mode():
        lx(lambda: local.cm.remove_cache_key(CacheKey(2, U64_MAX, 0)), "PR-41")
    lx(lambda: local.cm.allocate_blocks_cache(desc, BlocksCacheKey(2, 0)))         # still bound
    vs.linted("PR-41", lambda: local.cm.remove_cache_key(CacheKey(2, U64_MAX, 0)))
    again = local.cm.allocate_blocks_cache(desc, BlocksCacheKey(2, 0))             # the key was free
    local.cm.deallocate_blocks_cache(again)
    local.cm.deallocate_blocks_cache(cache)


# ---------------------------------------------------------------------------
# python-api.md §11.6 copies and swaps
# ---------------------------------------------------------------------------


def _write(address: int, data: bytes) -> None:
    ctypes.memmove(address, data, len(data))


def test_copy_cache_checks_in_the_vendor_order(local: Local) -> None:
    cm = local.cm
    a = cm.allocate_cache(CacheDesc(2, [4, 64], DataType.DT_UINT8))
    b = cm.allocate_cache(CacheDesc(2, [4, 64], DataType.DT_UINT8))
    blocks = cm.allocate_blocks_cache(CacheDesc(2, [4, 64], DataType.DT_UINT8))
    raises(TypeError, lambda: cm.copy_cache("a", b), "dst")  # type: ignore[arg-type]
    raises(TypeError, lambda: cm.copy_cache(a, "b"), "src")  # type: ignore[arg-type]
    raises(ValueError, lambda: cm.copy_cache(a, b, -1), "dst_batch_index")
    raises(ValueError, lambda: cm.copy_cache(a, b, 0, 2**32), "src_batch_index")
    raises(ValueError, lambda: cm.copy_cache(a, b, offset=-1), "offset")
    raises(TypeError, lambda: cm.copy_cache(a, b, size="1"), "size")  # type: ignore[arg-type]
    lx(lambda: cm.copy_cache(a, blocks), "src can not be blocks cache")
    lx(lambda: cm.copy_cache(blocks, a), "dst can not be blocks cache")
    lx(lambda: cm.copy_cache(blocks, blocks, size=0), "src can not be blocks cache")
    lx(lambda: cm.copy_cache(a, b, size=0), "size")
    raises(ValueError, lambda: cm.copy_cache(a, b, req_id=-1), "req_id")
    raises(LLMException, lambda: cm.copy_cache(a, b, 4), status=S.LLM_PARAM_INVALID)


def test_copy_cache_copies_one_range_of_a_batch_in_every_tensor(local: Local) -> None:
    cm = local.cm
    src = cm.allocate_cache(CacheDesc(2, [4, 64], DataType.DT_UINT8))
    dst = cm.allocate_cache(CacheDesc(2, [4, 64], DataType.DT_UINT8))
    source = [fill(40 + t, 256).tobytes() for t in range(2)]
    for t in range(2):
        _write(src.tensor_addrs[t], source[t])
        _write(dst.tensor_addrs[t], bytes(256))
    cm.copy_cache(dst, src, dst_batch_index=3, src_batch_index=1, offset=16, size=32, req_id=7)
    for t in range(2):
        expected = bytearray(256)
        expected[3 * 64 + 16:3 * 64 + 48] = source[t][64 + 16:64 + 48]
        assert memory_at(dst.tensor_addrs[t], 256) == bytes(expected)


def test_copy_blocks_checks_and_copies_one_block_to_several(local: Local) -> None:
    cm = local.cm
    cache = cm.allocate_blocks_cache(CacheDesc(2, [4, 64], DataType.DT_UINT8))
    contiguous = cm.allocate_cache(CacheDesc(2, [4, 64], DataType.DT_UINT8))
    raises(TypeError, lambda: cm.copy_blocks("c", {0: [1]}), "cache")  # type: ignore[arg-type]
    raises(TypeError, lambda: cm.copy_blocks(cache, [(0, [1])]), "copy_block_info")  # type: ignore[arg-type]
    raises(TypeError, lambda: cm.copy_blocks(cache, {"0": [1]}), "copy_block_info")  # type: ignore[dict-item]
    raises(TypeError, lambda: cm.copy_blocks(cache, {0: (1,)}), "copy_block_info[0]")  # type: ignore[dict-item]
    raises(TypeError, lambda: cm.copy_blocks(cache, {0: [1.5]}), "copy_block_info[0][0]")  # type: ignore[list-item]
    lx(lambda: cm.copy_blocks(contiguous, {0: [1]}), "blocks cache")
    with vs.strict_mode():
        lx(lambda: cm.copy_blocks(cache, {}), "PR-25")
        lx(lambda: cm.copy_blocks(cache, {0: []}), "PR-25")
        lx(lambda: cm.copy_blocks(cache, {0: [2], 1: [2]}), "PR-5")
    source = [fill(50 + t, 256).tobytes() for t in range(2)]
    for t in range(2):
        _write(cache.tensor_addrs[t], source[t])
    cm.copy_blocks(cache, {0: [2, 3]})
    for t in range(2):
        expected = source[t][:128] + source[t][:64] + source[t][:64]
        assert memory_at(cache.tensor_addrs[t], 256) == expected


def test_copy_blocks_lints_an_empty_mapping_and_a_repeated_destination(local: Local) -> None:
    cm = local.cm
    cache = cm.allocate_blocks_cache(CacheDesc(2, [4, 64], DataType.DT_UINT8))
    source = [fill(60 + t, 256).tobytes() for t in range(2)]
    for t in range(2):
        _write(cache.tensor_addrs[t], source[t])
    vs.linted("PR-25", lambda: cm.copy_blocks(cache, {}))              # block 0 onto itself: no change
    vs.linted("PR-25", lambda: cm.copy_blocks(cache, {0: [], 1: []}))
    assert [memory_at(cache.tensor_addrs[t], 256) for t in range(2)] == source
    vs.linted("PR-5", lambda: cm.copy_blocks(cache, {0: [2], 1: [2, 3]}), "destination block 2")
    for t in range(2):                                                  # (1, 2) comes after (0, 2)
        assert memory_at(cache.tensor_addrs[t], 256) == source[t][:128] + source[t][64:128] * 2


def test_swap_blocks_checks_in_the_vendor_order(local: Local) -> None:
    cm = local.cm
    device = cm.allocate_blocks_cache(CacheDesc(2, [4, 64], DataType.DT_UINT8))
    host_memory = local.arrays(2, (4, 64))
    host = Cache.create_cpu_cache(CacheDesc(2, [4, 64], DataType.DT_UINT8, Placement.HOST),
                                  [a.ctypes.data for a in host_memory])
    contiguous = cm.allocate_cache(CacheDesc(2, [4, 64], DataType.DT_UINT8))
    raises(TypeError, lambda: cm.swap_blocks("h", device, {0: 0}), "src_cache")  # type: ignore[arg-type]
    raises(TypeError, lambda: cm.swap_blocks(host, 1, {0: 0}), "dst_cache")  # type: ignore[arg-type]
    lx(lambda: cm.swap_blocks(contiguous, device, {0: 0}), "src_cache must be a blocks cache")
    lx(lambda: cm.swap_blocks(host, contiguous, {0: 0}), "dst_cache must be a blocks cache")
    raises(TypeError, lambda: cm.swap_blocks(host, device, [(0, 0)]), "src_to_dst")  # type: ignore[arg-type]
    raises(TypeError, lambda: cm.swap_blocks(host, device, {"0": 0}), "src_to_dst")  # type: ignore[dict-item]
    small = Cache.create_cpu_cache(CacheDesc(2, [4, 32], DataType.DT_UINT8, Placement.HOST), [1, 2])
    lx(lambda: cm.swap_blocks(small, device, {0: 0}), "block sizes differ")
    three = Cache.create_cpu_cache(CacheDesc(3, [4, 64], DataType.DT_UINT8, Placement.HOST), [1, 2, 3])
    lx(lambda: cm.swap_blocks(three, device, {0: 0}), "tensors")
    lx(lambda: cm.swap_blocks(host, device, {4: 0}), "source block 4")
    lx(lambda: cm.swap_blocks(host, device, {0: -1}), "destination block -1")
    lx(lambda: cm.swap_blocks(device, device, {0: 1}), "HOST->DEVICE or DEVICE->HOST")
    with vs.strict_mode():
        lx(lambda: cm.swap_blocks(host, device, {}), "PR-25")
        lx(lambda: cm.swap_blocks(host, device, {0: 1, 1: 1}), "PR-5")


def test_swap_blocks_lints_an_empty_mapping_and_a_repeated_destination(local: Local) -> None:
    cm = local.cm
    device = cm.allocate_blocks_cache(CacheDesc(2, [4, 64], DataType.DT_UINT8))
    host_memory = [np.frombuffer(fill(80 + t, 256).tobytes(), np.uint8).copy() for t in range(2)]
    host = Cache.create_cpu_cache(CacheDesc(2, [4, 64], DataType.DT_UINT8, Placement.HOST),
                                  [a.ctypes.data for a in host_memory])
    for t in range(2):
        _write(device.tensor_addrs[t], bytes(256))
    vs.linted("PR-25", lambda: cm.swap_blocks(host, device, {}))       # success, nothing moves
    assert all(memory_at(device.tensor_addrs[t], 256) == bytes(256) for t in range(2))
    vs.linted("PR-5", lambda: cm.swap_blocks(host, device, {0: 1, 2: 1}), "destination block 1")
    for t in range(2):                                                  # host block 2 is written last
        assert memory_at(device.tensor_addrs[t], 256) == bytes(64) + host_memory[t][128:192].tobytes() + bytes(128)


def test_swap_blocks_moves_blocks_in_and_out_through_a_cpu_cache(local: Local) -> None:
    cm = local.cm
    device = cm.allocate_blocks_cache(CacheDesc(2, [4, 64], DataType.DT_UINT8))
    host_memory = [fill(60 + t, (4, 64)) for t in range(2)]
    local.memory += host_memory
    host = Cache.create_cpu_cache(CacheDesc(2, [4, 64], DataType.DT_UINT8, Placement.HOST),
                                  [a.ctypes.data for a in host_memory])
    for t in range(2):
        _write(device.tensor_addrs[t], bytes(256))
    cm.swap_blocks(host, device, {2: 0, 3: 1, 0: 3})
    for t in range(2):
        rows = host_memory[t]
        expected = rows[2].tobytes() + rows[3].tobytes() + bytes(64) + rows[0].tobytes()
        assert memory_at(device.tensor_addrs[t], 256) == expected
    back = [np.zeros((4, 64), dtype=np.uint8) for _ in range(2)]
    local.memory += back
    out = Cache.create_cpu_cache(CacheDesc(2, [4, 64], DataType.DT_UINT8, Placement.HOST),
                                 [a.ctypes.data for a in back])
    cm.swap_blocks(device, out, {3: 1})
    for t in range(2):
        assert back[t][1].tobytes() == host_memory[t][0].tobytes()
        assert back[t][0].tobytes() == bytes(64) and back[t][2:].tobytes() == bytes(128)


def test_swap_blocks_uses_shape_at_the_batch_dim_with_a_lint(local: Local) -> None:
    # PR-18: swap_blocks is the one call that reads batch_dim_index: blocks are
    # size // shape[batch_dim_index] = 256 // 4 = 64 bytes here
    cm = local.cm
    device = cm.allocate_blocks_cache(CacheDesc(2, [4, 64], DataType.DT_UINT8))
    odd_memory = [np.frombuffer(fill(90 + t, 256).tobytes(), np.uint8).copy() for t in range(2)]
    odd = Cache.create_cpu_cache(CacheDesc(2, [64, 4], DataType.DT_UINT8, Placement.HOST, batch_dim_index=1),
                                 [a.ctypes.data for a in odd_memory])
    for t in range(2):
        _write(device.tensor_addrs[t], bytes(256))
    with vs.strict_mode():
        lx(lambda: cm.swap_blocks(odd, device, {3: 0}), "PR-18")
    assert all(memory_at(device.tensor_addrs[t], 256) == bytes(256) for t in range(2))
    vs.linted("PR-18", lambda: cm.swap_blocks(odd, device, {3: 0}), "src_cache.cache_desc.batch_dim_index is 1")
    for t in range(2):
        assert memory_at(device.tensor_addrs[t], 256) == odd_memory[t][192:].tobytes() + bytes(192)


# ---------------------------------------------------------------------------
# python-api.md §11.7, §11.8
# ---------------------------------------------------------------------------


def test_remap_registered_memory_checks_everything_as_param_invalid(local: Local) -> None:
    cm = local.cm
    good = MemInfo(Memtype.MEM_TYPE_DEVICE, 4096, 64)
    lx(lambda: cm.remap_registered_memory((good,)), "mem_infos")  # type: ignore[arg-type]
    lx(lambda: cm.remap_registered_memory([good, 3]), "mem_infos[1]")  # type: ignore[list-item]
    lx(lambda: cm.remap_registered_memory(MemInfo(Memtype.MEM_TYPE_HOST, 4096, 64)), "MEM_TYPE_DEVICE")
    lx(lambda: cm.remap_registered_memory(MemInfo(Memtype.MEM_TYPE_DEVICE, 0, 64)), "addr is 0")
    lx(lambda: cm.remap_registered_memory(MemInfo(Memtype.MEM_TYPE_DEVICE, 4096, 0)), "size")
    lx(lambda: cm.remap_registered_memory([]), "remap_registered_memory")
    raises(LLMException, lambda: cm.remap_registered_memory(good), status=S.LLM_NOT_YET_LINK)


def test_check_cache_key_is_the_static_validity_rule() -> None:
    assert CacheManager.check_cache_key(CacheKey(1, 2)) is None
    lx(lambda: CacheManager.check_cache_key(CacheKey(1, U64_MAX)), "one of req id")


# ---------------------------------------------------------------------------
# python-api.md §11.4 transfer_cache_async: checks
# ---------------------------------------------------------------------------


class Ready(LayerSynchronizer):
    """Reports each layer ready; records the calls."""

    def __init__(self, answer: Any = True, gate: Optional[threading.Event] = None) -> None:
        self.calls: List[Tuple[int, Optional[int]]] = []
        self.answer = answer
        self.gate = gate

    def synchronize_layer(self, layer_index: int, timeout_in_millis: Optional[int]) -> bool:
        self.calls.append((layer_index, timeout_in_millis))
        if self.gate is not None:
            self.gate.wait(30)
        if isinstance(self.answer, BaseException):
            raise self.answer
        return bool(self.answer)


def test_transfer_cache_async_checks_in_the_vendor_order(local: Local, monkeypatch: pytest.MonkeyPatch) -> None:
    strict(monkeypatch)          # the old refusals of the lint rules (docs/semantics.md §0)
    cache, _ = local.blocks_cache()
    cm = local.cm
    config = TransferWithCacheKeyConfig(BlocksCacheKey(1), range(0, 2), range(0, 2))
    sync = Ready()
    raises(TypeError, lambda: cm.transfer_cache_async(None, sync, [config]), "src_cache")  # type: ignore[arg-type]
    host = Cache.create_cpu_cache(CacheDesc(4, [8, 64], DataType.DT_UINT8, Placement.HOST), [1, 2, 3, 4])
    lx(lambda: cm.transfer_cache_async(host, sync, [config]), "DEVICE")
    raises(TypeError, lambda: cm.transfer_cache_async(cache, sync, [config], [0], ["0"]), "dst_block_indices[0]")
    raises(ValueError, lambda: cm.transfer_cache_async(cache, sync, [config], [-1], [0]), "src_block_indices[0]")
    raises(ValueError, lambda: cm.transfer_cache_async(cache, sync, [config], None, [0], -1), "dst_block_memory_size")
    lx(lambda: cm.transfer_cache_async(cache, sync, [config], [0], []), "transfer from blocks to cache is not "
                                                                         "supported")
    lx(lambda: cm.transfer_cache_async(cache, sync, [config], [0, 1], [0]), "same length")
    lx(lambda: cm.transfer_cache_async(cache, sync, [config], None, [0]), "dst_block_memory_size")
    raises(TypeError, lambda: cm.transfer_cache_async(cache, None, [config]), "layer_synchronizer")  # type: ignore
    raises(TypeError, lambda: cm.transfer_cache_async(cache, sync, None), "transfer_configs")  # type: ignore
    raises(TypeError, lambda: cm.transfer_cache_async(cache, sync, [TransferConfig(1, [1, 2])]),
           "transfer_configs[0]")
    lx(lambda: cm.transfer_cache_async(cache, sync, [config], None, None, 64), "dst_block_indices is empty")
    odd, _ = local.blocks_cache(num=3)
    lx(lambda: cm.transfer_cache_async(odd, sync, [config]), "even")
    far = TransferWithCacheKeyConfig(BlocksCacheKey(1), range(1, 3), range(0, 2))
    lx(lambda: cm.transfer_cache_async(cache, sync, [far]), "0 <= start < stop <= 2")
    batched = TransferWithCacheKeyConfig(CacheKeyByIdAndIndex(1, 1), range(0, 1), range(0, 1), src_batch_index=8)
    lx(lambda: cm.transfer_cache_async(cache, sync, [batched]), "batch count")
    lx(lambda: cm.transfer_cache_async(cache, sync, [config], [0, 1], [3, 3]), "PR-5")
    assert sync.calls == []


def test_transfer_cache_async_in_server_mode_takes_transfer_configs_and_fills_a_missing_range(
        server_mode: Local) -> None:
    cache, _ = server_mode.blocks_cache()
    cm = server_mode.cm
    raises(TypeError, lambda: cm.transfer_cache_async(cache, Ready(), [TransferWithCacheKeyConfig(
        BlocksCacheKey(1), range(0, 1), range(0, 1))]), "transfer_configs[0]")
    config = TransferConfig(1, [1, 2, 3])
    lx(lambda: cm.transfer_cache_async(cache, Ready(), [config]), "2 per layer")
    assert config.src_layer_range == range(0, 2)
    lx(lambda: cm.transfer_cache_async(cache, Ready(), [TransferConfig(1, [1, 2], src_batch_index=1)], [0], [1]),
       "src_batch_index must be 0")


def test_cache_task_reports_the_core_failure_of_a_layer_without_raising(local: Local) -> None:
    cache, _ = local.blocks_cache()
    sync = Ready()
    task = local.cm.transfer_cache_async(cache, sync, [TransferWithCacheKeyConfig(BlocksCacheKey(1), range(0, 2),
                                                                                   range(0, 2))], [0], [1])
    assert isinstance(task, CacheTask)
    assert task.synchronize() == S.LLM_NOT_YET_LINK
    assert task.get_results() == [S.LLM_NOT_YET_LINK]
    assert sync.calls == [(0, None)]


def test_cache_task_stops_with_param_invalid_when_a_layer_is_not_ready(local: Local) -> None:
    cache, _ = local.blocks_cache()
    configs = [TransferWithCacheKeyConfig(BlocksCacheKey(1), range(1, 2), range(0, 1)),
               TransferWithCacheKeyConfig(BlocksCacheKey(3), range(0, 1), range(0, 1))]
    sync = Ready(answer=False)
    task = local.cm.transfer_cache_async(cache, sync, configs, [0], [1])
    assert task.get_results() == [None, S.LLM_PARAM_INVALID]
    assert task.synchronize() == S.LLM_PARAM_INVALID
    assert sync.calls == [(0, None)]


def test_cache_task_records_failed_when_the_synchronizer_raises(local: Local) -> None:
    cache, _ = local.blocks_cache()
    task = local.cm.transfer_cache_async(cache, Ready(answer=RuntimeError("compute died")),
                                         [TransferWithCacheKeyConfig(BlocksCacheKey(1), range(0, 1), range(0, 1))],
                                         [0], [1])
    assert task.synchronize() == S.LLM_FAILED


def test_cache_task_still_running_reports_timeout_for_every_config(local: Local) -> None:
    cache, _ = local.blocks_cache()
    gate = threading.Event()
    configs = [TransferWithCacheKeyConfig(BlocksCacheKey(1), range(0, 1), range(0, 1)),
               TransferWithCacheKeyConfig(BlocksCacheKey(1), range(1, 2), range(1, 2))]
    task = local.cm.transfer_cache_async(cache, Ready(gate=gate), configs, [0], [1])
    raises(TypeError, lambda: task.synchronize("10"), "timeout_in_millis")  # type: ignore[arg-type]
    raises(ValueError, lambda: task.synchronize(-1), "timeout_in_millis")
    assert task.synchronize(20) == S.LLM_TIMEOUT
    assert task.get_results(0) == [S.LLM_TIMEOUT, S.LLM_TIMEOUT]
    gate.set()
    assert task.get_results() == [S.LLM_NOT_YET_LINK, S.LLM_NOT_YET_LINK]


def test_an_empty_transfer_succeeds_without_synchronizing(local: Local) -> None:
    cache, _ = local.blocks_cache()
    sync = Ready()
    task = local.cm.transfer_cache_async(cache, sync, [])
    assert task.synchronize() == S.LLM_SUCCESS and task.get_results() == []
    assert sync.calls == []


# ---------------------------------------------------------------------------
# Caches of a finalized engine (project rule, docs/reference/python-api.md §8.1)
# ---------------------------------------------------------------------------


def test_a_cache_of_a_finalized_engine_is_rejected_by_every_call() -> None:
    first = Local(vs.v2_options(pool=True))
    old_blocks, _ = first.blocks_cache()
    old_cache = first.cm.allocate_cache(CacheDesc(2, [4, 64], DataType.DT_UINT8))
    first.engine.finalize()
    second = Local(vs.v2_options(pool=True))
    try:
        cm = second.cm
        fresh = cm.allocate_cache(CacheDesc(2, [4, 64], DataType.DT_UINT8))
        assert fresh.cache_id == old_blocks.cache_id == 1
        message = "finalized"
        lx(lambda: cm.pull_blocks(BlocksCacheKey(1), old_blocks, [0], [0]), message)
        lx(lambda: cm.pull_cache(CacheKeyByIdAndIndex(1, 1), old_cache), message)
        lx(lambda: cm.push_blocks(BlocksCacheKey(1), old_blocks, [0], [0]), message)
        lx(lambda: cm.push_cache(CacheKeyByIdAndIndex(1, 1), old_cache), message)
        lx(lambda: cm.deallocate_cache(old_cache), message)
        lx(lambda: cm.deallocate_blocks_cache(old_blocks), message)
        lx(lambda: cm.copy_cache(fresh, old_cache), message)
        lx(lambda: cm.copy_blocks(old_blocks, {0: [1]}), message)
        lx(lambda: cm.transfer_cache_async(old_blocks, Ready(), []), message)
        assert fresh.tensor_addrs != []
    finally:
        second.engine.finalize()


# ---------------------------------------------------------------------------
# Two processes over 127.0.0.1
# ---------------------------------------------------------------------------

P_ID, D_ID = 1, 2


def start_prompt(peer: Any, port: Optional[int], options: str = "") -> None:
    listen = "None" if port is None else str(port)
    peer.run(f"p = LLMDataDist(LLMRole.PROMPT, {P_ID}); "
             f"p.init(support.v2_options({listen}{', ' + options if options else ''})); "
             "cm = p.cache_manager; keep = []")


def prompt_blocks(peer: Any, name: str, seed: int, num: int = TENSORS, shape: Tuple[int, ...] = (BLOCKS, BLOCK_BYTES),
                  key: str = "None") -> int:
    """Register a blocks cache in the peer filled from ``seed``; its id."""
    return int(peer.run(f"arrays_{name} = [fill({seed} + t, {shape}) for t in range({num})]; keep.append(arrays_{name}); "
                        f"{name} = cm.register_blocks_cache(CacheDesc({num}, {list(shape)}, DataType.DT_UINT8), "
                        f"[a.ctypes.data for a in arrays_{name}], {key})", f"{name}.cache_id"))


def prompt_cache(peer: Any, name: str, seed: int, num: int, shape: Tuple[int, ...], keys: str = "()") -> int:
    """Register a contiguous cache in the peer filled from ``seed``; its id."""
    return int(peer.run(f"arrays_{name} = [fill({seed} + t, {shape}) for t in range({num})]; keep.append(arrays_{name}); "
                        f"{name} = cm.register_cache(CacheDesc({num}, {list(shape)}, DataType.DT_UINT8), "
                        f"[a.ctypes.data for a in arrays_{name}], {keys})", f"{name}.cache_id"))


def link_to(local: Local, port: int) -> None:
    assert local.engine.link_clusters([vs.cluster_info(P_ID, port)], 5000) == (S.LLM_SUCCESS, [S.LLM_SUCCESS])


def test_pull_blocks_blocks_to_blocks_moves_exactly_the_listed_blocks_of_every_layer() -> None:
    port = vs.free_port()
    with vs.Peer() as peer:
        start_prompt(peer, port)
        prompt_blocks(peer, "kv", seed=100, key="BlocksCacheKey(1, 0)")
        local = Local(vs.v2_options())
        try:
            dst, arrays = local.blocks_cache()
            link_to(local, port)
            local.cm.pull_blocks(BlocksCacheKey(P_ID, 0), dst, [1, 3, 5, 7], [0, 2, 4, 6])
            for t in range(TENSORS):
                source = fill(100 + t, (BLOCKS, BLOCK_BYTES))
                expected = np.zeros_like(source)
                expected[[0, 2, 4, 6]] = source[[1, 3, 5, 7]]
                assert arrays[t].tobytes() == expected.tobytes()
        finally:
            local.engine.finalize()


def test_pull_blocks_with_layer_ranges_moves_only_the_selected_layers() -> None:
    port = vs.free_port()
    with vs.Peer() as peer:
        start_prompt(peer, port)
        prompt_blocks(peer, "kv", seed=200, num=6, key="BlocksCacheKey(1, 0)")
        local = Local(vs.v2_options())
        try:
            dst, arrays = local.blocks_cache(num=4)
            link_to(local, port)
            local.cm.pull_blocks(BlocksCacheKey(P_ID, 0), dst, np.array([2, 3, 4]), [5, 6, 7],
                                 src_layer_range=range(1, 3), dst_layer_range=range(0, 2))
            for t in range(4):
                source = fill(200 + 2 + t, (BLOCKS, BLOCK_BYTES))   # source layer 1 = tensors 2, 3
                expected = np.zeros_like(source)
                expected[[5, 6, 7]] = source[[2, 3, 4]]
                assert arrays[t].tobytes() == expected.tobytes()
            # a single-tensor layout: tensor_num_per_layer 1 over every tensor of the destination
            local.cm.pull_blocks(BlocksCacheKey(P_ID, 0), dst, [0], [0], src_layer_range=range(2, 6),
                                 dst_layer_range=range(0, 4), tensor_num_per_layer=1)
            for t in range(4):
                assert arrays[t][0].tobytes() == fill(200 + 2 + t, (BLOCKS, BLOCK_BYTES))[0].tobytes()
        finally:
            local.engine.finalize()


def test_pull_blocks_cache_to_blocks_cuts_one_source_batch_into_the_destination_blocks() -> None:
    port = vs.free_port()
    with vs.Peer() as peer:
        start_prompt(peer, port)
        cache_id = prompt_cache(peer, "ctx", seed=300, num=4, shape=(2, 4 * BLOCK_BYTES))
        local = Local(vs.v2_options())
        try:
            dst, arrays = local.blocks_cache(num=4)
            link_to(local, port)
            local.cm.pull_blocks(CacheKeyByIdAndIndex(P_ID, cache_id, 0), dst, (), [6, 1, 3, 0])
            for t in range(4):
                batch = fill(300 + t, (2, 4 * BLOCK_BYTES))[0].reshape(4, BLOCK_BYTES)
                expected = np.zeros((BLOCKS, BLOCK_BYTES), dtype=np.uint8)
                expected[[6, 1, 3, 0]] = batch
                assert arrays[t].tobytes() == expected.tobytes()
            # with layer ranges: source layer 1 into destination layer 0 only
            before = [a.copy() for a in arrays]
            local.cm.pull_blocks(CacheKeyByIdAndIndex(P_ID, cache_id, 0), dst, [], [2, 4],
                                 src_layer_range=range(1, 2), dst_layer_range=range(0, 1))
            for t in range(4):
                expected = before[t].copy()
                if t < 2:
                    batch = fill(300 + 2 + t, (2, 4 * BLOCK_BYTES))[0].reshape(4, BLOCK_BYTES)
                    expected[[2, 4]] = batch[:2]
                assert arrays[t].tobytes() == expected.tobytes()
        finally:
            local.engine.finalize()


def test_pull_cache_by_id_and_index_with_batch_index_and_size_in_direct_mode() -> None:
    port = vs.free_port()
    with vs.Peer() as peer:
        start_prompt(peer, port)
        cache_id = prompt_cache(peer, "ctx", seed=400, num=2, shape=(3, 96))
        local = Local(vs.v2_options())
        try:
            dst, arrays = local.cache(num=2, shape=(4, 96))
            link_to(local, port)
            local.cm.pull_cache(CacheKeyByIdAndIndex(P_ID, cache_id, 2), dst, batch_index=1)
            local.cm.pull_cache(CacheKeyByIdAndIndex(P_ID, cache_id, 0), dst, 3, 40)
            for t in range(2):
                source = fill(400 + t, (3, 96))
                expected = np.zeros((4, 96), dtype=np.uint8)
                expected[1] = source[2]
                expected[3, :40] = source[0, :40]
                assert arrays[t].tobytes() == expected.tobytes()
            raises(LLMException, lambda: local.cm.pull_cache(CacheKeyByIdAndIndex(P_ID, cache_id, 3), dst),
                   status=S.LLM_KV_CACHE_NOT_EXIST)
            raises(LLMException, lambda: local.cm.pull_cache(CacheKeyByIdAndIndex(P_ID, 99, 0), dst),
                   status=S.LLM_KV_CACHE_NOT_EXIST)
        finally:
            local.engine.finalize()


def test_direct_mode_pull_cache_addresses_the_source_batch_with_the_local_stride() -> None:
    # PR-6, as the device: batch b of a direct-mode source starts at b x S_dst
    port = vs.free_port()
    with vs.Peer() as peer:
        start_prompt(peer, port)
        cache_id = prompt_cache(peer, "ctx", seed=450, num=2, shape=(4, 32))
        local = Local(vs.v2_options())
        try:
            dst, arrays = local.cache(num=2, shape=(2, 64))
            link_to(local, port)
            local.cm.pull_cache(CacheKeyByIdAndIndex(P_ID, cache_id, 1), dst, 0, 32)    # source bytes 64..96
            for t in range(2):
                expected = np.zeros((2, 64), dtype=np.uint8)
                expected[0, :32] = fill(450 + t, (4, 32))[2]
                assert arrays[t].tobytes() == expected.tobytes()
            # batch 2 at the local stride starts at byte 128, past the 128-byte source tensor: a guard
            raises(LLMException, lambda: local.cm.pull_cache(CacheKeyByIdAndIndex(P_ID, cache_id, 2), dst, 1, 32),
                   "PR-6", status=S.LLM_PARAM_INVALID)
            assert not arrays[0][1].any() and not arrays[1][1].any()
        finally:
            local.engine.finalize()


def test_direct_mode_cache_to_blocks_reads_batch_0_and_warns_when_the_key_names_another(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # PR-16: the device ignores the source batch of a direct cache-to-blocks pull; a lint
    port = vs.free_port()
    with vs.Peer() as peer:
        start_prompt(peer, port)
        cache_id = prompt_cache(peer, "ctx", seed=460, num=4, shape=(2, 2 * BLOCK_BYTES))
        local = Local(vs.v2_options())
        try:
            dst, arrays = local.blocks_cache(num=4)
            link_to(local, port)
            lenient(monkeypatch)
            with pytest.warns(lint.SourceBatchIgnoredWarning, match="batch 1"):
                local.cm.pull_blocks(CacheKeyByIdAndIndex(P_ID, cache_id, 1), dst, [], [5, 2])
            for t in range(4):
                batch0 = fill(460 + t, (2, 2 * BLOCK_BYTES))[0].reshape(2, BLOCK_BYTES)
                expected = np.zeros((BLOCKS, BLOCK_BYTES), dtype=np.uint8)
                expected[[5, 2]] = batch0
                assert arrays[t].tobytes() == expected.tobytes()
            strict(monkeypatch)
            raises(LLMException, lambda: local.cm.pull_blocks(CacheKeyByIdAndIndex(P_ID, cache_id, 1), dst, [], [0]),
                   "PR-16", status=S.LLM_PARAM_INVALID)
            assert not any(a[0].any() for a in arrays)
        finally:
            local.engine.finalize()


def test_server_mode_pull_cache_by_request_key_releases_the_key_and_prefix_keys_stay() -> None:
    port = vs.free_port()
    with vs.Peer() as peer:
        start_prompt(peer, port, "direct=False, pool=True")
        peer.run("ctx = cm.allocate_cache(CacheDesc(2, [3, 64], DataType.DT_UINT8), "
                 "[CacheKey(1, 10), CacheKey(1, 2**64 - 1, prefix_id=20), CacheKey(1, 12)])\n"
                 "import ctypes\n"
                 "for t in range(2): ctypes.memmove(ctx.tensor_addrs[t], fill(500 + t, 192).tobytes(), 192)")
        local = Local(vs.v2_options(direct=False))
        try:
            dst, arrays = local.cache(num=2, shape=(3, 64))
            link_to(local, port)
            local.cm.pull_cache(CacheKey(P_ID, 10), dst, 0)
            local.cm.pull_cache(CacheKey(P_ID, U64_MAX, prefix_id=20), dst, 1)
            local.cm.pull_cache(CacheKey(P_ID, U64_MAX, prefix_id=20), dst, 1)
            for t in range(2):
                source = fill(500 + t, 192).reshape(3, 64)
                assert arrays[t][0].tobytes() == source[0].tobytes()
                assert arrays[t][1].tobytes() == source[1].tobytes()
            raises(LLMException, lambda: local.cm.pull_cache(CacheKey(P_ID, 10), dst), status=S.LLM_KV_CACHE_NOT_EXIST)
            # the prompt deallocates with keys outstanding: the data stays readable through them
            peer.run("cm.deallocate_cache(ctx)")
            local.cm.pull_cache(CacheKey(P_ID, 12), dst, 2)
            for t in range(2):
                assert arrays[t][2].tobytes() == fill(500 + t, 192)[128:].tobytes()
            peer.run("cm.remove_cache_key(CacheKey(1, 2**64 - 1, prefix_id=20))")
            raises(LLMException, lambda: local.cm.pull_cache(CacheKey(P_ID, U64_MAX, prefix_id=20), dst),
                   status=S.LLM_KV_CACHE_NOT_EXIST)
            raises(LLMException, lambda: local.cm.pull_cache(CacheKeyByIdAndIndex(P_ID, 1, 0), dst),
                   status=S.LLM_KV_CACHE_NOT_EXIST)
        finally:
            local.engine.finalize()


def test_server_mode_pull_cache_with_a_layer_range_keeps_the_key_until_every_layer_is_pulled() -> None:
    port = vs.free_port()
    with vs.Peer() as peer:
        start_prompt(peer, port, "direct=False, pool=True")
        peer.run("ctx = cm.allocate_cache(CacheDesc(4, [1, 64], DataType.DT_UINT8), [CacheKey(1, 10)])\n"
                 "import ctypes\n"
                 "for t in range(4): ctypes.memmove(ctx.tensor_addrs[t], fill(600 + t, 64).tobytes(), 64)")
        local = Local(vs.v2_options(direct=False))
        try:
            dst, arrays = local.cache(num=4, shape=(1, 64))
            link_to(local, port)
            local.cm.pull_cache(CacheKey(P_ID, 10), dst, src_layer_range=range(1, 2), dst_layer_range=range(0, 1))
            local.cm.pull_cache(CacheKey(P_ID, 10), dst, src_layer_range=range(0, 1), dst_layer_range=range(1, 2))
            assert [a.tobytes() for a in arrays] == [fill(600 + t, 64).tobytes() for t in (2, 3, 0, 1)]
            raises(LLMException, lambda: local.cm.pull_cache(CacheKey(P_ID, 10), dst), status=S.LLM_KV_CACHE_NOT_EXIST)
        finally:
            local.engine.finalize()


def test_push_blocks_from_the_prompt_over_the_link_the_decoder_opened_from_several_threads() -> None:
    port = vs.free_port()
    with vs.Peer() as peer:
        start_prompt(peer, port)
        prompt_blocks(peer, "k", seed=700, num=3, shape=(32, BLOCK_BYTES))
        prompt_blocks(peer, "v", seed=800, num=3, shape=(32, BLOCK_BYTES))
        local = Local(vs.v2_options())
        try:
            k_dst, k_arrays = local.blocks_cache(num=3, shape=(32, BLOCK_BYTES), key=BlocksCacheKey(D_ID, 0))
            v_dst, v_arrays = local.blocks_cache(num=3, shape=(32, BLOCK_BYTES), key=BlocksCacheKey(D_ID, 1))
            link_to(local, port)
            peer.run("import threading\n"
                     "errors = []\n"
                     "def work(i):\n"
                     "    try:\n"
                     "        src = np.arange(4 * i, 4 * i + 4)\n"
                     "        dst = [31 - b for b in range(4 * i, 4 * i + 4)]\n"
                     "        cm.push_blocks(BlocksCacheKey(2, 0), k, src.tolist(), dst, range(3), range(3), 1)\n"
                     "        cm.push_blocks(BlocksCacheKey(2, 1), v, src, np.array(dst), range(3), range(3), 1)\n"
                     "    except Exception as exc:\n"
                     "        errors.append(repr(exc))\n"
                     "threads = [threading.Thread(target=work, args=(i,)) for i in range(6)]\n"
                     "[t.start() for t in threads]; [t.join() for t in threads]")
            assert peer.run(value="errors") == []
            for t in range(3):
                for seed, arrays in ((700, k_arrays), (800, v_arrays)):
                    source = fill(seed + t, (32, BLOCK_BYTES))
                    expected = np.zeros_like(source)
                    expected[[31 - b for b in range(24)]] = source[:24]
                    assert arrays[t].tobytes() == expected.tobytes()
        finally:
            local.engine.finalize()


def test_push_cache_from_the_prompt_writes_one_batch_layer_by_layer() -> None:
    port = vs.free_port()
    with vs.Peer() as peer:
        start_prompt(peer, port)
        prompt_cache(peer, "ctx", seed=900, num=4, shape=(2, 128))
        local = Local(vs.v2_options())
        try:
            dst, arrays = local.cache(num=4, shape=(3, 128))
            link_to(local, port)
            peer.run(f"cm.push_cache(CacheKeyByIdAndIndex({D_ID}, {dst.cache_id}, 2), ctx, src_batch_index=1)\n"
                     f"cm.push_cache(CacheKeyByIdAndIndex({D_ID}, {dst.cache_id}, 0), ctx, 0, range(1, 2), range(0, 1))")
            for t in range(4):
                source = fill(900 + t, (2, 128))
                expected = np.zeros((3, 128), dtype=np.uint8)
                expected[2] = source[1]
                if t < 2:
                    expected[0] = fill(900 + 2 + t, (2, 128))[0]
                assert arrays[t].tobytes() == expected.tobytes()
            error = peer.error(f"cm.push_cache(CacheKeyByIdAndIndex({D_ID}, {dst.cache_id}, 3), ctx)")
            assert (error.type, error.status) == ("ParamInvalidError", int(S.LLM_PARAM_INVALID))
        finally:
            local.engine.finalize()


def test_push_cache_from_several_threads_writes_each_batch_once() -> None:
    port = vs.free_port()
    with vs.Peer() as peer:
        start_prompt(peer, port)
        prompt_cache(peer, "ctx", seed=950, num=2, shape=(6, 256))
        local = Local(vs.v2_options())
        try:
            dst, arrays = local.cache(num=2, shape=(6, 256))
            link_to(local, port)
            peer.run("import threading\n"
                     "errors = []\n"
                     "def work(b):\n"
                     "    try:\n"
                     f"        cm.push_cache(CacheKeyByIdAndIndex({D_ID}, {dst.cache_id}, 5 - b), ctx, b)\n"
                     "    except Exception as exc:\n"
                     "        errors.append(repr(exc))\n"
                     "threads = [threading.Thread(target=work, args=(b,)) for b in range(6)]\n"
                     "[t.start() for t in threads]; [t.join() for t in threads]")
            assert peer.run(value="errors") == []
            for t in range(2):
                assert arrays[t].tobytes() == fill(950 + t, (6, 256))[::-1].tobytes()
        finally:
            local.engine.finalize()


def test_server_mode_transfer_cache_async_writes_each_layer_to_the_given_addresses() -> None:
    port = vs.free_port()
    with vs.Peer() as peer:
        start_prompt(peer, port, "direct=False")
        prompt_cache(peer, "ctx", seed=980, num=4, shape=(2, 128))
        local = Local(vs.v2_options(direct=False))
        try:
            dst, arrays = local.cache(num=4, shape=(3, 128))
            link_to(local, port)
            # layer 1 of source batch 1 into batch 2 of the destination's layer 0 (the caller offsets the addresses)
            addrs = [arrays[0].ctypes.data + 2 * 128, arrays[1].ctypes.data + 2 * 128]
            peer.run("class Sync(LayerSynchronizer):\n"
                     "    def synchronize_layer(self, layer_index, timeout_in_millis): return True\n"
                     f"config = TransferConfig({D_ID}, {addrs}, range(1, 2), src_batch_index=1)\n"
                     "task = cm.transfer_cache_async(ctx, Sync(), [config])")
            assert peer.run(value="[int(r) for r in task.get_results()]") == [0]
            for t in range(4):
                expected = np.zeros((3, 128), dtype=np.uint8)
                if t < 2:
                    expected[2] = fill(980 + 2 + t, (2, 128))[1]
                assert arrays[t].tobytes() == expected.tobytes()
            # an address outside every destination cache is the peer's PARAM_INVALID (PR-40), reported not raised
            peer.run(f"bad = TransferConfig({D_ID}, [16, 32], range(0, 1))\n"
                     "task = cm.transfer_cache_async(ctx, Sync(), [bad])")
            assert peer.run(value="int(task.synchronize())") == int(S.LLM_PARAM_INVALID)
        finally:
            local.engine.finalize()


def test_transfer_cache_async_pushes_each_layer_when_it_is_ready() -> None:
    port = vs.free_port()
    with vs.Peer() as peer:
        start_prompt(peer, port)
        prompt_blocks(peer, "kv", seed=1000, num=4)
        local = Local(vs.v2_options())
        try:
            dst, arrays = local.blocks_cache(num=4, key=BlocksCacheKey(D_ID, 5))
            link_to(local, port)
            peer.run("class Sync(LayerSynchronizer):\n"
                     "    def __init__(self): self.calls = []\n"
                     "    def synchronize_layer(self, layer_index, timeout_in_millis):\n"
                     "        self.calls.append([layer_index, timeout_in_millis]); return True\n"
                     "sync = Sync()\n"
                     f"config = TransferWithCacheKeyConfig(BlocksCacheKey({D_ID}, 5), range(0, 2), range(0, 2))\n"
                     "task = cm.transfer_cache_async(kv, sync, [config], [0, 1, 2], [7, 6, 5])")
            assert peer.run(value="int(task.synchronize())") == 0
            assert peer.run(value="[int(r) for r in task.get_results()]") == [0]
            assert peer.run(value="sync.calls") == [[0, None], [1, None]]
            for t in range(4):
                source = fill(1000 + t, (BLOCKS, BLOCK_BYTES))
                expected = np.zeros_like(source)
                expected[[7, 6, 5]] = source[[0, 1, 2]]
                assert arrays[t].tobytes() == expected.tobytes()
            # the i-th source layer goes to the i-th destination layer (project rule)
            peer.run(f"task = cm.transfer_cache_async(kv, sync, [TransferWithCacheKeyConfig(BlocksCacheKey({D_ID}, 5), "
                     "range(1, 2), range(0, 1))], [3], [3])")
            assert peer.run(value="int(task.synchronize())") == 0
            for t in range(2):
                assert arrays[t][3].tobytes() == fill(1000 + 2 + t, (BLOCKS, BLOCK_BYTES))[3].tobytes()
            for t in range(2, 4):
                assert arrays[t][3].tobytes() == bytes(BLOCK_BYTES)
        finally:
            local.engine.finalize()


def test_switch_role_then_the_new_decoder_pulls_from_the_new_prompt() -> None:
    port_p, port_d = vs.free_port(), vs.free_port()
    with vs.Peer() as peer:
        start_prompt(peer, port_p)
        prompt_blocks(peer, "kv", seed=1100, key="BlocksCacheKey(1, 0)")
        local = Local(vs.v2_options())
        try:
            mine, arrays = local.blocks_cache(seed=1200, key=BlocksCacheKey(D_ID, 0))
            link_to(local, port_p)
            before = [a.copy() for a in arrays]
            local.cm.pull_blocks(BlocksCacheKey(P_ID, 0), mine, [0], [0])
            assert local.engine.unlink_clusters([vs.cluster_info(P_ID, port_p)], 5000) == (S.LLM_SUCCESS, [S.LLM_SUCCESS])
            local.engine.switch_role(LLMRole.PROMPT, {"llm.listenIpInfo": f"127.0.0.1:{port_d}"})
            peer.run("p.switch_role(LLMRole.DECODER)")
            assert peer.run(f"r = p.link_clusters([support.cluster_info({D_ID}, {port_d})], 5000)",
                            "[int(r[0])] + [int(x) for x in r[1]]") == [0, 0]
            peer.run(f"cm.pull_blocks(BlocksCacheKey({D_ID}, 0), kv, [1, 2], [6, 7])")
            for t in range(TENSORS):
                received = np.frombuffer(peer.bytes_of(f"arrays_kv[{t}]"), dtype=np.uint8).reshape(BLOCKS, BLOCK_BYTES)
                expected = fill(1100 + t, (BLOCKS, BLOCK_BYTES))
                expected[[6, 7]] = before[t][[1, 2]]
                assert received.tobytes() == expected.tobytes()
        finally:
            local.engine.finalize()


def test_a_pull_over_a_link_whose_peer_finalized_times_out() -> None:
    port = vs.free_port()
    with vs.Peer() as peer:
        start_prompt(peer, port)
        prompt_blocks(peer, "kv", seed=1300, key="BlocksCacheKey(1, 0)")
        local = Local(vs.v2_options(**{"llm.SyncKvCacheWaitTime": "1000"}))
        try:
            dst, _ = local.blocks_cache()
            link_to(local, port)
            local.cm.pull_blocks(BlocksCacheKey(P_ID, 0), dst, [0], [0])
            peer.run("p.finalize()")
            raises(LLMException, lambda: local.cm.pull_blocks(BlocksCacheKey(P_ID, 0), dst, [0], [0]),
                   status=S.LLM_TIMEOUT)
        finally:
            local.engine.finalize()


def test_a_destination_registered_after_the_link_is_not_reachable_by_pushes() -> None:
    port = vs.free_port()
    with vs.Peer() as peer:
        start_prompt(peer, port)
        prompt_blocks(peer, "kv", seed=1400)
        local = Local(vs.v2_options())
        try:
            link_to(local, port)
            local.blocks_cache(key=BlocksCacheKey(D_ID, 0))
            error = peer.error(f"cm.push_blocks(BlocksCacheKey({D_ID}, 0), kv, [0], [0])")
            assert error.status == int(S.LLM_PARAM_INVALID)   # PR-32
        finally:
            local.engine.finalize()


# ---------------------------------------------------------------------------
# the lint rules by default: the device's behaviour and a warning (docs/semantics.md §0)
# ---------------------------------------------------------------------------


def test_lint_rules_of_the_pulls_warn_and_the_call_goes_on(local: Local, monkeypatch: pytest.MonkeyPatch) -> None:
    lenient(monkeypatch)
    cache, _ = local.cache()
    blocks, _ = local.blocks_cache()
    key = CacheKeyByIdAndIndex(1, 1)
    with pytest.warns(lint.IgnoredArgumentWarning, match="src_cache_offset is ignored"):
        not_yet_link(lambda: local.cm.pull_cache(key, cache, src_cache_offset=0))
    with pytest.warns(lint.IgnoredArgumentWarning, match="'timeout' is ignored"):
        not_yet_link(lambda: local.cm.pull_blocks(BlocksCacheKey(1), blocks, [0], [0], timeout=5))
    with pytest.warns(lint.EmptyLayerRangeWarning, match=r"range\(3, 3\) is empty"):
        not_yet_link(lambda: local.cm.pull_cache(key, cache, src_layer_range=range(3, 3)))
    with pytest.warns(lint.RepeatedDestinationBlockWarning, match="block 3 more than once"):
        not_yet_link(lambda: local.cm.pull_blocks(BlocksCacheKey(1), blocks, [0, 1, 2], [3, 5, 3]))


def test_a_push_whose_default_range_is_empty_warns_and_moves_nothing(local: Local,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    # the vendor loops over range(0, N // n): with n > N no layer, no native call, success
    lenient(monkeypatch)
    cache, _ = local.cache(num=4)
    blocks, _ = local.blocks_cache()
    with pytest.warns(lint.TensorNumPerLayerWarning, match=r"tensor_num_per_layer \(8\) is larger"):
        local.cm.push_cache(CacheKeyByIdAndIndex(1, 1), cache, tensor_num_per_layer=8)
    with pytest.warns(lint.TensorNumPerLayerWarning):
        local.cm.push_blocks(BlocksCacheKey(1), blocks, [0], [0], tensor_num_per_layer=5)
