"""The C structs a transfer's arguments become are kept per distinct value and reused:
a reused struct holds exactly what a fresh conversion would, a value that only equals a
kept one (``1.0`` equals ``1``) is refused as before, an object changed between calls
converts to its new values, and the lints of a layer pair are reported on every call.

The expected field values are written out here, never read back from a conversion.
"""
from __future__ import annotations

import re
from typing import Any, Callable

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

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


# ---- kept or fresh: the same outcome for any field values --------------------------------------

FIELDS = st.one_of(st.integers(-3, 9), st.sampled_from([2**31, 2**32, 2**63, 2**64, -(2**63) - 1]), st.booleans(),
                   st.sampled_from([1.0, 5.0, np.int64(5), np.uint32(2), CachePlacement.HOST, "5", None]))


def _plain(value: Any) -> Any:
    """The int twin of a look-alike value (1.0 for 1), else the value."""
    return int(value) if isinstance(value, (float, np.integer)) and float(value).is_integer() else value


def _outcome(convert: Callable[[], Any], fields: Callable[[Any], Any]) -> Any:
    try:
        return ("ok", fields(convert()))
    except (TypeError, ValueError) as exc:
        return (type(exc), str(exc))


@given(FIELDS, FIELDS, FIELDS)
def test_a_kept_cache_index_is_what_a_fresh_conversion_gives(cluster_id: Any, cache_id: Any, batch: Any) -> None:
    index = CacheIndex(cluster_id, cache_id, batch)
    twin = CacheIndex(_plain(cluster_id), _plain(cache_id), _plain(batch))
    native._index_structs.clear()
    fresh = _outcome(lambda: index._to_c("src"), _index_fields)
    _outcome(lambda: twin._to_c("src"), _index_fields)            # kept, when the twin converts
    assert _outcome(lambda: index._to_c("src"), _index_fields) == fresh
    assert _outcome(lambda: index._to_c("src"), _index_fields) == fresh


@given(FIELDS, st.lists(FIELDS, max_size=3), st.one_of(st.none(), st.tuples(FIELDS, FIELDS, st.lists(FIELDS, max_size=3),
                                                                                   FIELDS)))
def test_a_kept_cache_is_what_a_fresh_conversion_gives(cache_id: Any, addrs: list[Any], desc: Any) -> None:
    def make(plain: Callable[[Any], Any]) -> Cache:
        cache_desc = None if desc is None else CacheDesc(plain(desc[0]), plain(desc[1]), [plain(d) for d in desc[2]],
                                                         plain(desc[3]))
        return Cache(plain(cache_id), [plain(a) for a in addrs], cache_desc)

    cache, twin = make(lambda v: v), make(_plain)
    native._cache_structs.clear()
    fresh = _outcome(lambda: cache._to_c("dst")[0], _cache_fields)
    _outcome(lambda: twin._to_c("dst")[0], _cache_fields)
    assert _outcome(lambda: cache._to_c("dst")[0], _cache_fields) == fresh
    assert _outcome(lambda: cache._to_c("dst")[0], _cache_fields) == fresh


BASE_FIELDS = {"cache_id": 5, "addrs": [4096], "placement": 1, "num_tensors": 2, "data_type": 4, "shape": [4, 8]}


@pytest.mark.parametrize("change,expected", [
    ({"cache_id": 6}, {"cache_id": 6}),
    ({"tensor_addrs": [8192]}, {"addrs": [8192]}),
    ({"num_tensors": 1}, {"num_tensors": 1}),
    ({"data_type": DataType.DT_INT8}, {"data_type": 2}),
    ({"shape": [4, 16]}, {"shape": [4, 16]}),
    ({"placement": CachePlacement.HOST}, {"placement": 0}),
], ids=lambda v: ",".join(v) if isinstance(v, dict) else v)
def test_every_field_of_a_cache_tells_kept_structs_apart(change: dict[str, Any], expected: dict[str, Any]) -> None:
    def make(**fields: Any) -> Cache:
        desc = CacheDesc(fields.get("num_tensors", 2), fields.get("data_type", DataType.DT_UINT8),
                         fields.get("shape", [4, 8]), fields.get("placement", CachePlacement.DEVICE))
        return Cache(fields.get("cache_id", 5), fields.get("tensor_addrs", [4096]), desc)

    assert _cache_fields(make()._to_c("dst")[0]) == BASE_FIELDS
    assert _cache_fields(make(**change)._to_c("dst")[0]) == {**BASE_FIELDS, **expected}


@pytest.mark.parametrize("index,expected", [(CacheIndex(4, 7, 0), (4, 7, 0)), (CacheIndex(3, 8, 0), (3, 8, 0)),
                                            (CacheIndex(3, 7, 1), (3, 7, 1))])
def test_every_field_of_a_cache_index_tells_kept_structs_apart(index: CacheIndex,
                                                               expected: tuple[int, int, int]) -> None:
    assert _index_fields(CacheIndex(3, 7, 0)._to_c("src")) == (3, 7, 0)
    assert _index_fields(index._to_c("src")) == expected


@pytest.mark.parametrize("ext,expected", [(KvCacheExtParam((1, 2), (0, 1), 2), (1, 2, 0, 1, 2)),
                                          (KvCacheExtParam((0, 3), (0, 1), 2), (0, 3, 0, 1, 2)),
                                          (KvCacheExtParam((0, 2), (1, 1), 2), (0, 2, 1, 1, 2)),
                                          (KvCacheExtParam((0, 2), (0, 2), 2), (0, 2, 0, 2, 2)),
                                          (KvCacheExtParam((0, 2), (0, 1), 1), (0, 2, 0, 1, 1))])
def test_every_field_of_an_ext_param_tells_kept_structs_apart(engines: Engines, ext: KvCacheExtParam,
                                                              expected: tuple[int, ...]) -> None:
    engine = engines(2, options={})
    assert _ext_fields(engine._ext(KvCacheExtParam((0, 2), (0, 1), 2), "t")) == (0, 2, 0, 1, 2)
    assert _ext_fields(engine._ext(ext, "t")) == expected
