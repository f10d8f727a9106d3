"""The C structs a transfer's arguments become are kept per distinct value and reused:
a reused struct holds exactly what a fresh conversion would, a value that only equals a
kept one (``1.0`` equals ``1``) is refused as before, an object changed between calls
converts to its new values, and the lints of a layer pair are reported on every call.

The expected field values are written out here, never read back from a conversion.
"""
from __future__ import annotations

import re
from typing import Any, Callable

import pytest

from llm_datadist_ffi import LLMException, lint, native
from llm_datadist_ffi.native import Cache, CacheDesc, CacheIndex, CachePlacement, DataType, GeDataType, \
    KvCacheExtParam

from lint_support import lenient, strict

Engines = Callable[..., native.LlmDataDist]


def _index_fields(index: Any) -> tuple[int, int, int]:
    return (int(index.cluster_id), int(index.cache_id), int(index.batch_index))


def _cache_fields(cache: Any) -> dict[str, Any]:
    desc = cache.cache_desc
    return {"cache_id": int(cache.cache_id),
            "addrs": [int(cache.tensor_addrs[i]) for i in range(cache.num_tensor_addrs)],
            "placement": int(desc.placement), "num_tensors": int(desc.num_tensors), "data_type": int(desc.data_type),
            "shape": [int(desc.shape[i]) for i in range(desc.shape_len)]}


def _ext_fields(ext: Any) -> tuple[int, int, int, int, int]:
    return (int(ext.src_layer_first), int(ext.src_layer_second), int(ext.dst_layer_first),
            int(ext.dst_layer_second), int(ext.tensor_num_per_layer))


def test_a_cache_index_converts_to_its_own_values_on_every_call() -> None:
    for _ in range(3):
        assert _index_fields(CacheIndex(3, 7, 2)._to_c("src")) == (3, 7, 2)
        assert _index_fields(CacheIndex(3, 8)._to_c("src")) == (3, 8, 0)


@pytest.mark.parametrize("convert,exc_type,message", [
    (lambda: CacheIndex(3.0, 7)._to_c("src"), TypeError,  # type: ignore[arg-type]
     "src.cluster_id must be an int (uint64), not float"),
    (lambda: CacheIndex(3, 7, 0.0)._to_c("src"), TypeError,  # type: ignore[arg-type]
     "src.batch_index must be an int (uint32), not float"),
    (lambda: Cache(7.0)._to_c("dst"), TypeError, "dst.cache_id must be an int (int64), not float"),  # type: ignore[arg-type]
    (lambda: Cache(7, [16.0])._to_c("dst"), TypeError,
     "dst.tensor_addrs[0] must be an int (uint64), not float"),
    (lambda: Cache(7, [16], CacheDesc(1.0, DataType.DT_UINT8, [4, 8]))._to_c("dst"), TypeError,  # type: ignore[arg-type]
     "dst.cache_desc.num_tensors must be an int (uint32), not float"),
    (lambda: Cache(7, [16], CacheDesc(1, DataType.DT_UINT8, [4.0, 8]))._to_c("dst"), TypeError,
     "dst.cache_desc.shape[0] must be an int (int64), not float"),
    (lambda: KvCacheExtParam((0.0, 1), (0, 1))._to_c(), TypeError,  # type: ignore[arg-type]
     "ext_param.src_layer_range[0] must be an int (int32), not float"),
])
def test_a_value_only_equal_to_a_kept_one_is_refused_as_before(convert: Callable[[], Any], exc_type: type,
                                                               message: str) -> None:
    # the int-valued twins, converted first so that their structs are kept
    CacheIndex(3, 7)._to_c("src")
    Cache(7)._to_c("dst")
    Cache(7, [16])._to_c("dst")
    Cache(7, [16], CacheDesc(1, DataType.DT_UINT8, [4, 8]))._to_c("dst")
    KvCacheExtParam((0, 1), (0, 1))._to_c()
    with pytest.raises(exc_type, match=f"^{re.escape(message)}$"):
        convert()


def test_a_value_that_failed_once_fails_every_time() -> None:
    for _ in range(2):
        with pytest.raises(ValueError, match=r"^src\.cluster_id 18446744073709551616 is outside uint64 "):
            CacheIndex(2**64, 7)._to_c("src")


def test_a_cache_changed_between_calls_converts_to_its_new_values() -> None:
    cache = Cache(5, [4096, 8192], CacheDesc(2, DataType.DT_UINT8, [4, 8]))
    assert _cache_fields(cache._to_c("dst")[0]) == {"cache_id": 5, "addrs": [4096, 8192], "placement": 1,
                                                     "num_tensors": 2, "data_type": 4, "shape": [4, 8]}
    cache.cache_id = 6
    cache.tensor_addrs.append(12288)
    assert cache.cache_desc is not None
    cache.cache_desc.shape[0] = 16
    cache.cache_desc.placement = CachePlacement.HOST
    assert _cache_fields(cache._to_c("dst")[0]) == {"cache_id": 6, "addrs": [4096, 8192, 12288], "placement": 0,
                                                     "num_tensors": 2, "data_type": 4, "shape": [16, 8]}


def test_equal_values_of_the_accepted_kinds_convert_alike() -> None:
    by_int = Cache(9, [], CacheDesc(1, 4, [2], 0))._to_c("dst")[0]
    by_enum = Cache(9, [], CacheDesc(1, GeDataType.DT_UINT8, [2], CachePlacement.HOST))._to_c("dst")[0]
    by_vendor_enum = Cache(9, [], CacheDesc(1, DataType.DT_UINT8, [2], CachePlacement.HOST))._to_c("dst")[0]
    expected = {"cache_id": 9, "addrs": [], "placement": 0, "num_tensors": 1, "data_type": 4, "shape": [2]}
    assert _cache_fields(by_int) == _cache_fields(by_enum) == _cache_fields(by_vendor_enum) == expected


def test_a_cache_without_a_description_is_the_cpp_default() -> None:
    cache = Cache(3)._to_c("dst")[0]
    assert (int(cache.cache_id), int(cache.num_tensor_addrs), int(cache.cache_desc.placement),
            int(cache.cache_desc.data_type)) == (3, 0, 1, int(GeDataType.DT_UNDEFINED))


def test_the_kept_structs_stay_within_the_table_size() -> None:
    for cache_id in range(native._TABLE_SIZE + 10):
        CacheIndex(1, cache_id)._to_c("src")
        Cache(cache_id)._to_c("dst")
        KvCacheExtParam((0, cache_id % 2**31), (0, cache_id % 2**31))._to_c()
    assert 0 < len(native._index_structs) <= native._TABLE_SIZE
    assert 0 < len(native._cache_structs) <= native._TABLE_SIZE
    assert _index_fields(CacheIndex(1, 5)._to_c("src")) == (1, 5, 0)


def test_no_ext_param_is_every_layer_with_two_tensors_per_layer(engines: Engines) -> None:
    engine = engines(2, options={})
    assert _ext_fields(engine._ext(None, "t")) == (-1, -1, -1, -1, 2)
    assert _ext_fields(engine._ext(KvCacheExtParam((0, 3), (1, 4), 1), "t")) == (0, 3, 1, 4, 1)
    assert _ext_fields(engine._ext(KvCacheExtParam((0, 3), (1, 4), 1), "t")) == (0, 3, 1, 4, 1)


def _pull_unlinked(engine: native.LlmDataDist, ext: KvCacheExtParam) -> None:
    engine.pull_kv_blocks(CacheIndex(1, 1), Cache(1), [0], [0], ext)


def test_a_layer_pair_that_lints_warns_on_every_call(engines: Engines, monkeypatch: pytest.MonkeyPatch) -> None:
    lenient(monkeypatch)
    engine = engines(2, options={})
    for _ in range(3):
        with pytest.warns(lint.HalfDefaultLayerPairWarning, match=r"ext_param\.src_layer_range \{-1, 1\}"):
            with pytest.raises(LLMException):           # not linked: the backend refuses after the lint
                _pull_unlinked(engine, KvCacheExtParam((-1, 1), (-1, -1)))


def test_a_layer_pair_that_lints_is_refused_on_every_call_in_strict_mode(engines: Engines,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    strict(monkeypatch)
    engine = engines(2, options={})
    for _ in range(3):
        with pytest.raises(LLMException, match=r"ext_param\.src_layer_range \{-1, 1\}.*\(PR-11;"):
            _pull_unlinked(engine, KvCacheExtParam((-1, 1), (-1, -1)))


def test_a_layer_pair_that_lints_is_not_reported_before_initialize(engines: Engines,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    strict(monkeypatch)
    engine = engines(2)
    for _ in range(2):
        with pytest.raises(LLMException, match="LLM_FAILED") as info:
            _pull_unlinked(engine, KvCacheExtParam((-1, 1), (-1, -1)))
        assert "PR-11" not in str(info.value)
