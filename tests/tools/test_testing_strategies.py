"""The public strategies of llm_datadist_ffi.testing.strategies against the mock.

Valid draws must go through real calls and move exactly the bytes a numpy model of the
call says; each invalid kind must be refused with the code docs/reference/semantics.md
gives it (written out here, not taken from the strategies). The engines: a native
Prompt (cluster 1) that holds the sources, and two pullers in this process, a native
Decoder (cluster 2) and a vendor-compatible v2 ``LLMDataDist`` in direct mode
(cluster 3). Caches must exist before the link that reaches them (PR-32), so every
example registers its caches, links, transfers, and unlinks and unregisters again.
"""
from __future__ import annotations

import contextlib
import doctest
import socket
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import llm_datadist_ffi
from llm_datadist_ffi import LLMException, native
from llm_datadist_ffi import LLMStatusCode as S
from llm_datadist_ffi.testing import strategies as lst
from llm_datadist_ffi.vendor import (BlocksCacheKey, CacheDesc, CacheKey, CacheKeyByIdAndIndex, DataType,
                                     LLMClusterInfo, LLMConfig, LLMDataDist, LLMRole)
from llm_datadist_ffi._vendor.v2.cache_manager import CacheManager

PROMPT, DECODER, VENDOR = 1, 2, 3
U8 = native.GeDataType.DT_UINT8

# Bits per element of every ge::DataType value with a size (the table of
# docs/reference/cpp-api.md §2.4, written out here for the expected tensor sizes).
BITS = {0: 32, 1: 16, 2: 8, 3: 32, 4: 8, 6: 16, 7: 16, 8: 32, 9: 64, 10: 64, 11: 64, 12: 8, 13: 128,
        14: 8, 15: 8, 16: 64, 17: 128, 18: 8, 19: 16, 20: 32, 21: 8, 22: 16, 23: 64, 24: 128, 25: 40,
        26: 64, 27: 16, 29: 4, 30: 1, 31: 2, 32: 2, 33: 32, 34: 8, 35: 8, 36: 8, 37: 8, 38: 6, 39: 6,
        40: 4, 41: 4, 42: 4}
SUB_BYTE = {29, 30, 31, 32, 38, 39, 40, 41, 42}


def tensor_size(desc: Any) -> int:
    """Bytes of one tensor: the element count times the element size, rounded up to bytes."""
    value = desc.data_type.value if isinstance(desc.data_type, DataType) else int(desc.data_type)
    return -(-int(np.prod(desc.shape)) * BITS[value] // 8)


def _port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def random_tensors(num_tensors: int, nbytes: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, size=nbytes, dtype=np.uint8) for _ in range(num_tensors)]


def zero_tensors(num_tensors: int, nbytes: int) -> list[np.ndarray]:
    return [np.zeros(nbytes, dtype=np.uint8) for _ in range(num_tensors)]


def code_of(call: Any, *args: Any, **kwargs: Any) -> S:
    """The status a call ends with: LLM_SUCCESS, or the code of its LLMException."""
    try:
        call(*args, **kwargs)
    except LLMException as exc:
        return S(exc.status_code)
    return S.LLM_SUCCESS


@dataclass
class Engines:
    prompt: native.LlmDataDist
    decoder: native.LlmDataDist
    vendor: LLMDataDist
    port: int
    held: list[Any] = field(default_factory=list)       # numpy memory the caches point at
    registered: list[tuple[Any, int]] = field(default_factory=list)     # (engine or manager, cache id)

    def native_register(self, engine: native.LlmDataDist, desc: native.CacheDesc, arrays: list[np.ndarray]) -> int:
        self.held.append(arrays)
        cache_id = engine.register_kv_cache(desc, [a.ctypes.data for a in arrays])
        self.registered.append((engine, cache_id))
        return cache_id

    def source(self, num_tensors: int, shape: list[int], seed: int) -> tuple[int, list[np.ndarray]]:
        """A uint8 cache of the Prompt, filled with random bytes."""
        arrays = random_tensors(num_tensors, int(np.prod(shape)), seed)
        return self.native_register(self.prompt, native.CacheDesc(num_tensors, U8, shape), arrays), arrays

    def native_target(self, num_tensors: int, shape: list[int]) -> tuple[int, list[np.ndarray]]:
        arrays = zero_tensors(num_tensors, int(np.prod(shape)))
        return self.native_register(self.decoder, native.CacheDesc(num_tensors, U8, shape), arrays), arrays

    def vendor_target(self, num_tensors: int, shape: list[int], blocks: bool) -> tuple[Any, list[np.ndarray]]:
        arrays = zero_tensors(num_tensors, int(np.prod(shape)))
        self.held.append(arrays)
        desc = CacheDesc(num_tensors, shape, DataType.DT_UINT8)
        manager = self.vendor.cache_manager
        register = manager.register_blocks_cache if blocks else manager.register_cache
        cache = register(desc, [a.ctypes.data for a in arrays])
        self.registered.append((manager, cache.cache_id))
        return cache, arrays

    @contextlib.contextmanager
    def linked(self) -> Iterator[None]:
        """Both pullers linked to the Prompt for one example; afterwards every cache goes."""
        try:
            status, per = self.decoder.link_llm_clusters([self._native_cluster()], 2000)
            assert (status, per) == (S.LLM_SUCCESS, [S.LLM_SUCCESS])
            status, per = self.vendor.link_clusters([self._vendor_cluster()], 2000)
            assert (status, per) == (S.LLM_SUCCESS, [S.LLM_SUCCESS])
            yield
        finally:
            self.decoder.unlink_llm_clusters([self._native_cluster()], 2000, force_flag=True)
            self.vendor.unlink_clusters([self._vendor_cluster()], 2000, force=True)
            self.clear()

    def clear(self) -> None:
        for owner, cache_id in self.registered:
            if isinstance(owner, native.LlmDataDist):
                owner.unregister_kv_cache(cache_id)
            else:
                owner.unregister_cache(cache_id)
        self.registered.clear()
        self.held.clear()

    def _native_cluster(self) -> native.ClusterInfo:
        return native.ClusterInfo(PROMPT, 0, [native.IpInfo("127.0.0.1", 0)], [native.IpInfo("127.0.0.1", self.port)])

    def _vendor_cluster(self) -> LLMClusterInfo:
        info = LLMClusterInfo()
        info.remote_cluster_id = PROMPT
        info.append_local_ip_info("127.0.0.1", 0)
        info.append_remote_ip_info("127.0.0.1", self.port)
        return info


@pytest.fixture(scope="module")
def eng() -> Iterator[Engines]:
    if llm_datadist_ffi.backend != "mock":
        # the vendor-compatible engine runs on the mock's extension functions, which the
        # ascend shim answers with LLM_FEATURE_NOT_ENABLED
        pytest.skip("mock_only: the strategies are checked against a vendor-compatible engine of the mock")
    port = _port()
    prompt = native.LlmDataDist(PROMPT, native.LlmRole.PROMPT)
    prompt.initialize({native.OPTION_DEVICE_ID: "0", native.OPTION_LISTEN_IP_INFO: f"127.0.0.1:{port}"})
    decoder = native.LlmDataDist(DECODER, native.LlmRole.DECODER)
    decoder.initialize({native.OPTION_DEVICE_ID: "0"})
    config = LLMConfig()
    config.device_id = 0
    config.enable_cache_manager = True
    config.enable_remote_cache_accessible = True          # direct mode, as the native Prompt
    vendor = LLMDataDist(LLMRole.DECODER, VENDOR)
    vendor.init(config.generate_options())
    try:
        yield Engines(prompt, decoder, vendor, port)
    finally:
        vendor.finalize()
        decoder.close()
        prompt.close()


def stride_of(shape: list[int]) -> int:
    return int(np.prod(shape[1:]))


# ---- cache descriptions ---------------------------------------------------------------------------------

@given(desc=lst.cache_descs("native", max_bytes=2048), data=st.data())
def test_valid_native_cache_descs_register_and_move_one_batch_exactly(eng: Engines, desc: native.CacheDesc,
                                                                      data: Any) -> None:
    size = tensor_size(desc)
    assert lst.tensor_bytes(desc) == size and desc.num_tensors * size <= 2048
    stride = size // desc.shape[0]
    assert stride * desc.shape[0] == size                      # the stride tiles the tensor (no PR-17 lint)
    src = random_tensors(desc.num_tensors, size, 5)
    dst = zero_tensors(desc.num_tensors, size)
    sid = eng.native_register(eng.prompt, desc, src)
    did = eng.native_register(eng.decoder, desc, dst)
    b_src, b_dst = data.draw(st.integers(0, desc.shape[0] - 1)), data.draw(st.integers(0, desc.shape[0] - 1))
    with eng.linked():
        eng.decoder.pull_kv_cache(native.CacheIndex(PROMPT, sid, b_src), native.Cache(did), b_dst)
        for s, d in zip(src, dst):
            expected = np.zeros(size, np.uint8)
            expected[b_dst * stride:(b_dst + 1) * stride] = s[b_src * stride:(b_src + 1) * stride]
            assert np.array_equal(d, expected)


@given(desc=lst.cache_descs("native", validity="invalid"))
def test_invalid_native_cache_descs_are_refused_at_registration(eng: Engines, desc: native.CacheDesc) -> None:
    memory = np.zeros(64, np.uint8)
    assert code_of(eng.decoder.register_kv_cache, desc, [memory.ctypes.data] * desc.num_tensors) \
        == S.LLM_PARAM_INVALID


@given(desc=lst.cache_descs("vendor", max_bytes=2048), blocks=st.booleans())
def test_valid_vendor_cache_descs_register_as_caches_and_blocks_caches(eng: Engines, desc: CacheDesc,
                                                                       blocks: bool) -> None:
    size = tensor_size(desc)
    assert desc.batch_dim == 0 and desc.num_tensors * size <= 2048
    memory = zero_tensors(desc.num_tensors, size)
    manager = eng.vendor.cache_manager
    register = manager.register_blocks_cache if blocks else manager.register_cache
    try:
        cache = register(desc, [a.ctypes.data for a in memory])
        eng.registered.append((manager, cache.cache_id))
        assert cache.is_blocks_cache is blocks
        assert cache.tensor_addrs == [a.ctypes.data for a in memory]
        assert desc.size == size
    finally:
        eng.clear()


@given(desc=lst.cache_descs("vendor", validity="invalid"), blocks=st.booleans())
def test_invalid_vendor_cache_descs_are_refused_at_registration(eng: Engines, desc: CacheDesc, blocks: bool) -> None:
    memory = np.zeros(64, np.uint8)
    manager = eng.vendor.cache_manager
    register = manager.register_blocks_cache if blocks else manager.register_cache
    try:
        assert code_of(register, desc, [memory.ctypes.data] * desc.num_tensors) == S.LLM_PARAM_INVALID
    finally:
        eng.clear()


def test_cache_descs_draw_sub_byte_types_for_the_native_api() -> None:
    seen: set[int] = set()

    @given(lst.cache_descs("native", data_types=lst.SUB_BYTE_DATA_TYPES))
    def collect(desc: native.CacheDesc) -> None:
        seen.add(int(desc.data_type))
        assert (int(np.prod(desc.shape[1:])) * BITS[int(desc.data_type)]) % 8 == 0   # whole-byte rows

    collect()
    assert seen and seen <= SUB_BYTE


# ---- block lists and tables ----------------------------------------------------------------------------

ROW = 16


def values(blocks: Any) -> list[int]:
    return [int(b) for b in blocks]


@given(data=st.data(), nb_src=st.integers(1, 8), nb_dst=st.integers(1, 8), num_tensors=st.integers(1, 3))
def test_valid_block_pairs_move_each_listed_block_exactly(eng: Engines, data: Any, nb_src: int, nb_dst: int,
                                                          num_tensors: int) -> None:
    src_blocks, dst_blocks = data.draw(lst.block_pairs(nb_src, nb_dst), "table")
    sid, src = eng.source(num_tensors, [nb_src, ROW], 11)
    did, dst = eng.native_target(num_tensors, [nb_dst, ROW])
    with eng.linked():
        eng.decoder.pull_kv_blocks(native.CacheIndex(PROMPT, sid), native.Cache(did), src_blocks, dst_blocks)
        for s, d in zip(src, dst):
            expected = np.zeros((nb_dst, ROW), np.uint8)
            for a, b in zip(values(src_blocks), values(dst_blocks)):
                expected[b] = s.reshape(nb_src, ROW)[a]
            assert np.array_equal(d.reshape(nb_dst, ROW), expected)


@given(data=st.data(), nb_src=st.integers(1, 8), nb_dst=st.integers(1, 8))
def test_invalid_block_pairs_are_refused_by_native_pulls(eng: Engines, data: Any, nb_src: int, nb_dst: int) -> None:
    src_blocks, dst_blocks = data.draw(lst.block_pairs(nb_src, nb_dst, validity="invalid"), "table")
    src_list, dst_list = values(src_blocks), values(dst_blocks)
    # the kinds semantics.md §7.2-§7.3 refuses: empty, lengths differ, an index past its cache
    assert (not dst_list or len(src_list) != len(dst_list) or max(src_list) >= nb_src or max(dst_list) >= nb_dst)
    sid, _ = eng.source(2, [nb_src, ROW], 12)
    did, _ = eng.native_target(2, [nb_dst, ROW])
    with eng.linked():
        assert code_of(eng.decoder.pull_kv_blocks, native.CacheIndex(PROMPT, sid), native.Cache(did),
                       src_blocks, dst_blocks) == S.LLM_PARAM_INVALID


@given(data=st.data(), nb_src=st.integers(1, 8), nb_dst=st.integers(1, 8), layout=st.sampled_from(["runs", "scattered"]))
def test_valid_block_lists_serve_as_native_source_and_destination_lists(eng: Engines, data: Any, nb_src: int,
                                                                        nb_dst: int, layout: Any) -> None:
    dst_blocks = data.draw(lst.block_lists(nb_dst, layout=layout), "dst")
    k = len(dst_blocks)
    src_blocks = data.draw(lst.block_lists(nb_src, min_size=k, max_size=k, unique=False, layout=layout), "src")
    assert len(set(values(dst_blocks))) == k and max(values(dst_blocks)) < nb_dst and max(values(src_blocks)) < nb_src
    sid, src = eng.source(1, [nb_src, ROW], 13)
    did, dst = eng.native_target(1, [nb_dst, ROW])
    with eng.linked():
        eng.decoder.pull_kv_blocks(native.CacheIndex(PROMPT, sid), native.Cache(did), src_blocks, dst_blocks)
    expected = np.zeros((nb_dst, ROW), np.uint8)
    for a, b in zip(values(src_blocks), values(dst_blocks)):
        expected[b] = src[0].reshape(nb_src, ROW)[a]
    assert np.array_equal(dst[0].reshape(nb_dst, ROW), expected)


def test_block_lists_with_the_runs_layout_hold_consecutive_indexes() -> None:
    longest: list[int] = []

    @given(lst.block_lists(32, layout="runs", min_size=2, max_size=8, containers=["list"]))
    def collect(blocks: list[int]) -> None:
        assert len(set(blocks)) == len(blocks) and all(0 <= b < 32 for b in blocks)
        run = best = 1
        for a, b in zip(blocks, blocks[1:]):
            run = run + 1 if b == a + 1 else 1
            best = max(best, run)
        longest.append(best)

    collect()
    assert max(longest) >= 2


@given(data=st.data(), nb_dst=st.integers(1, 8), num_tensors=st.integers(1, 2))
def test_valid_block_lists_are_vendor_cache_to_blocks_destinations(eng: Engines, data: Any, nb_dst: int,
                                                                   num_tensors: int) -> None:
    dst_blocks = data.draw(lst.block_lists(nb_dst), "dst")
    k = len(dst_blocks)
    sid, src = eng.source(num_tensors, [1, 8 * ROW], 14)           # one batch of 8 blocks' bytes
    cache, dst = eng.vendor_target(num_tensors, [nb_dst, ROW], blocks=True)
    with eng.linked():
        eng.vendor.cache_manager.pull_blocks(CacheKeyByIdAndIndex(PROMPT, sid, 0), cache, (), dst_blocks)
        for s, d in zip(src, dst):
            expected = np.zeros((nb_dst, ROW), np.uint8)
            for chunk, b in enumerate(values(dst_blocks)):           # chunk k of the batch into block dst[k]
                expected[b] = s[chunk * ROW:(chunk + 1) * ROW]
            assert k <= 8 and np.array_equal(d.reshape(nb_dst, ROW), expected)


@given(data=st.data(), nb_dst=st.integers(1, 8))
def test_invalid_block_lists_are_refused_by_vendor_pulls(eng: Engines, data: Any, nb_dst: int) -> None:
    dst_blocks = data.draw(lst.block_lists(nb_dst, validity="invalid"), "dst")
    assert len(dst_blocks) == 0 or max(values(dst_blocks)) >= nb_dst
    sid, _ = eng.source(1, [1, 8 * ROW], 15)
    cache, _ = eng.vendor_target(1, [nb_dst, ROW], blocks=True)
    with eng.linked():
        assert code_of(eng.vendor.cache_manager.pull_blocks, CacheKeyByIdAndIndex(PROMPT, sid, 0), cache, (),
                       dst_blocks) == S.LLM_PARAM_INVALID


# ---- layer ranges and tensor_num_per_layer ----------------------------------------------------------------

def moved_tensors(first_src: int, first_dst: int, count: int, n: int) -> list[tuple[int, int]]:
    """(source tensor, destination tensor) pairs of ``count`` layers of ``n`` tensors."""
    return [(first_src * n + i, first_dst * n + i) for i in range(count * n)]


@given(data=st.data(), layers=st.integers(1, 4), n=st.integers(1, 3))
def test_valid_native_layer_pairs_move_exactly_their_layers(eng: Engines, data: Any, layers: int, n: int) -> None:
    src_pair = data.draw(lst.layer_ranges(layers, form="native"), "src")
    if src_pair == (-1, -1):
        dst_pair = src_pair                                   # defaults on both sides or neither (PR-1)
        pairs = moved_tensors(0, 0, layers, n)
    else:
        span = src_pair[1] - src_pair[0]
        first = data.draw(st.integers(0, layers - 1 - span), "dst first")
        dst_pair = (first, first + span)
        pairs = moved_tensors(src_pair[0], first, span + 1, n)
    sid, src = eng.source(layers * n, [2, ROW], 16)
    did, dst = eng.native_target(layers * n, [2, ROW])
    with eng.linked():
        eng.decoder.pull_kv_cache(native.CacheIndex(PROMPT, sid, 1), native.Cache(did), 0, -1,
                                  native.KvCacheExtParam(src_pair, dst_pair, n))
    expected = [np.zeros(2 * ROW, np.uint8) for _ in dst]
    for a, b in pairs:
        expected[b][:ROW] = src[a][ROW:]
    assert all(np.array_equal(d, e) for d, e in zip(dst, expected))


@given(data=st.data(), layers=st.integers(1, 4), invalid_side=st.sampled_from(["src", "dst"]))
def test_invalid_native_layer_pairs_are_refused(eng: Engines, data: Any, layers: int, invalid_side: str) -> None:
    bad = data.draw(lst.layer_ranges(layers, form="native", validity="invalid"), "bad")
    good = data.draw(lst.layer_ranges(layers, form="native", default=False), "good")
    first, last = bad
    assert first < -1 or first > last or last >= layers          # semantics.md §4.4, §4.5
    ext = native.KvCacheExtParam(bad, good, 2) if invalid_side == "src" else native.KvCacheExtParam(good, bad, 2)
    sid, _ = eng.source(layers * 2, [1, ROW], 17)
    did, _ = eng.native_target(layers * 2, [1, ROW])
    with eng.linked():
        assert code_of(eng.decoder.pull_kv_cache, native.CacheIndex(PROMPT, sid), native.Cache(did), 0, -1,
                       ext) == S.LLM_PARAM_INVALID


@given(data=st.data(), layers=st.integers(1, 4), n=st.integers(1, 3))
def test_valid_python_layer_ranges_move_exactly_their_layers(eng: Engines, data: Any, layers: int, n: int) -> None:
    src_range = data.draw(lst.layer_ranges(layers), "src")
    if src_range is None:
        dst_range = None
        pairs = moved_tensors(0, 0, layers, n)
    else:
        first = data.draw(st.integers(0, layers - len(src_range)), "dst first")
        dst_range = range(first, first + len(src_range))
        pairs = moved_tensors(src_range.start, first, len(src_range), n)
    sid, src = eng.source(layers * n, [2, ROW], 18)
    cache, dst = eng.vendor_target(layers * n, [2, ROW], blocks=False)
    with eng.linked():
        eng.vendor.cache_manager.pull_cache(CacheKeyByIdAndIndex(PROMPT, sid, 1), cache, 1,
                                            src_layer_range=src_range, dst_layer_range=dst_range,
                                            tensor_num_per_layer=n)
    expected = [np.zeros(2 * ROW, np.uint8) for _ in dst]
    for a, b in pairs:
        expected[b][ROW:] = src[a][ROW:]
    assert all(np.array_equal(d, e) for d, e in zip(dst, expected))


@given(data=st.data(), layers=st.integers(1, 4), invalid_side=st.sampled_from(["src", "dst"]))
def test_invalid_python_layer_ranges_are_refused(eng: Engines, data: Any, layers: int, invalid_side: str) -> None:
    bad = data.draw(lst.layer_ranges(layers, validity="invalid"), "bad")
    assert bad.step != 1 or (len(bad) and (bad.start < 0 or bad.stop > layers))     # semantics.md §4.2
    good = data.draw(lst.layer_ranges(layers, default=False), "good")
    ranges = {"src_layer_range": bad, "dst_layer_range": good} if invalid_side == "src" else \
        {"src_layer_range": good, "dst_layer_range": bad}
    sid, _ = eng.source(layers * 2, [1, ROW], 19)
    cache, _ = eng.vendor_target(layers * 2, [1, ROW], blocks=False)
    with eng.linked():
        assert code_of(eng.vendor.cache_manager.pull_cache, CacheKeyByIdAndIndex(PROMPT, sid), cache,
                       **ranges) == S.LLM_PARAM_INVALID


@given(data=st.data(), num_tensors=st.integers(1, 12), api=st.sampled_from(["vendor", "native"]))
def test_valid_tensor_nums_per_layer_divide_the_cache_and_move_every_tensor(eng: Engines, data: Any,
                                                                            num_tensors: int, api: Any) -> None:
    n = data.draw(lst.tensor_nums_per_layer(num_tensors, api=api), "n")
    assert num_tensors % n == 0
    layers = num_tensors // n
    sid, src = eng.source(num_tensors, [1, ROW], 20)
    if api == "native":
        did, dst = eng.native_target(num_tensors, [1, ROW])
        with eng.linked():
            eng.decoder.pull_kv_cache(native.CacheIndex(PROMPT, sid), native.Cache(did), 0, -1,
                                      native.KvCacheExtParam((0, layers - 1), (0, layers - 1), n))
    else:
        cache, dst = eng.vendor_target(num_tensors, [1, ROW], blocks=False)
        with eng.linked():
            eng.vendor.cache_manager.pull_cache(CacheKeyByIdAndIndex(PROMPT, sid), cache,
                                                src_layer_range=range(layers), dst_layer_range=range(layers),
                                                tensor_num_per_layer=n)
    assert all(np.array_equal(s, d) for s, d in zip(src, dst))


@given(data=st.data(), num_tensors=st.integers(1, 12), api=st.sampled_from(["vendor", "native"]))
def test_invalid_tensor_nums_per_layer_are_refused(eng: Engines, data: Any, num_tensors: int, api: Any) -> None:
    n = data.draw(lst.tensor_nums_per_layer(num_tensors, api=api, validity="invalid"), "n")
    assert n == 0 or (api == "native" and n > 255)                  # semantics.md §5
    sid, _ = eng.source(num_tensors, [1, ROW], 21)
    if api == "native":
        did, _ = eng.native_target(num_tensors, [1, ROW])
        with eng.linked():
            assert code_of(eng.decoder.pull_kv_cache, native.CacheIndex(PROMPT, sid), native.Cache(did), 0, -1,
                           native.KvCacheExtParam(tensor_num_per_layer=n)) == S.LLM_PARAM_INVALID
    else:
        cache, _ = eng.vendor_target(num_tensors, [1, ROW], blocks=False)
        with eng.linked():
            assert code_of(eng.vendor.cache_manager.pull_cache, CacheKeyByIdAndIndex(PROMPT, sid), cache,
                           tensor_num_per_layer=n) == S.LLM_PARAM_INVALID


# ---- cache keys ------------------------------------------------------------------------------------------

@given(data=st.data(), batches=st.integers(1, 4), api=st.sampled_from(["vendor", "native"]))
def test_valid_by_index_keys_pull_the_batch_they_name(eng: Engines, data: Any, batches: int, api: Any) -> None:
    sid, src = eng.source(2, [batches, ROW], 22)
    kind = "CacheIndex" if api == "native" else "CacheKeyByIdAndIndex"
    key = data.draw(lst.cache_keys(PROMPT, api=api, kinds=[kind], cache_id=sid, num_batches=batches), "key")
    assert (key.cluster_id, key.cache_id) == (PROMPT, sid) and 0 <= key.batch_index < batches
    if api == "native":
        did, dst = eng.native_target(2, [1, ROW])
        with eng.linked():
            eng.decoder.pull_kv_cache(key, native.Cache(did))
    else:
        cache, dst = eng.vendor_target(2, [1, ROW], blocks=False)
        with eng.linked():
            eng.vendor.cache_manager.pull_cache(key, cache)
    b = key.batch_index
    assert all(np.array_equal(d, s[b * ROW:(b + 1) * ROW]) for s, d in zip(src, dst))


@given(data=st.data(), batches=st.integers(1, 4), api=st.sampled_from(["vendor", "native"]))
def test_invalid_by_index_keys_name_no_cache(eng: Engines, data: Any, batches: int, api: Any) -> None:
    sid, _ = eng.source(2, [batches, ROW], 23)
    kind = "CacheIndex" if api == "native" else "CacheKeyByIdAndIndex"
    key = data.draw(lst.cache_keys(PROMPT, api=api, kinds=[kind], cache_id=sid, num_batches=batches,
                                   validity="invalid"), "key")
    assert key.batch_index >= batches
    if api == "native":
        did, _ = eng.native_target(2, [1, ROW])
        with eng.linked():
            assert code_of(eng.decoder.pull_kv_cache, key, native.Cache(did)) == S.LLM_KV_CACHE_NOT_EXIST
    else:
        cache, _ = eng.vendor_target(2, [1, ROW], blocks=False)
        with eng.linked():
            assert code_of(eng.vendor.cache_manager.pull_cache, key, cache) == S.LLM_KV_CACHE_NOT_EXIST


INVALID_ID = 2**64 - 1


@given(key=lst.cache_keys(PROMPT, kinds=["CacheKey", "BlocksCacheKey"]))
def test_valid_request_and_blocks_keys_reach_the_engine(eng: Engines, key: Any) -> None:
    """A valid key passes every Python check; the Prompt binds no key (its caches are
    native), so the engine answers that no cache is bound to it."""
    if isinstance(key, CacheKey):
        assert (key.req_id == INVALID_ID) != (key.prefix_id == INVALID_ID)       # python-api.md §7.5
        CacheManager.check_cache_key(key)
    else:
        assert isinstance(key, BlocksCacheKey) and 0 <= key.model_id < 2**64
    cache, _ = eng.vendor_target(2, [4, ROW], blocks=True)
    src_blocks = [0] if isinstance(key, BlocksCacheKey) else ()
    with eng.linked():
        assert code_of(eng.vendor.cache_manager.pull_blocks, key, cache, src_blocks, [0]) == S.LLM_KV_CACHE_NOT_EXIST


@given(key=lst.cache_keys(PROMPT, kinds=["CacheKey"], validity="invalid"))
def test_invalid_request_keys_are_refused_before_the_engine(eng: Engines, key: CacheKey) -> None:
    assert (key.req_id == INVALID_ID) == (key.prefix_id == INVALID_ID)
    assert code_of(CacheManager.check_cache_key, key) == S.LLM_PARAM_INVALID
    cache, _ = eng.vendor_target(2, [4, ROW], blocks=True)
    with eng.linked():
        assert code_of(eng.vendor.cache_manager.pull_blocks, key, cache, (), [0]) == S.LLM_PARAM_INVALID


# ---- the strategies' own contract ------------------------------------------------------------------------

def test_every_public_strategy_documents_an_example_that_runs() -> None:
    strategies = [lst.cache_descs, lst.block_lists, lst.block_pairs, lst.layer_ranges, lst.tensor_nums_per_layer,
                  lst.cache_keys]
    for strategy in strategies:
        assert strategy.__doc__ is not None and ">>> " in strategy.__doc__, strategy.__name__
    finder = doctest.DocTestFinder()
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    ran = set()
    for test in finder.find(lst):
        if test.examples:
            runner.run(test)
            ran.add(test.name.rsplit(".", 1)[-1])
    assert runner.failures == 0
    assert {s.__name__ for s in strategies} <= ran


@pytest.mark.parametrize("call", [
    lambda: lst.block_lists(0),
    lambda: lst.block_lists(2, min_size=3),
    lambda: lst.block_pairs(0, 4),
    lambda: lst.layer_ranges(0, default=False),
    lambda: lst.cache_keys(1, kinds=["BlocksCacheKey"], validity="invalid"),
    lambda: lst.cache_keys(1, api="native", kinds=["CacheKey"]),
    lambda: lst.cache_descs("vendor", data_types=[native.GeDataType.DT_INT4]),
    lambda: lst.block_lists(4, validity="sometimes"),  # type: ignore[arg-type]
])
def test_strategies_refuse_arguments_that_leave_nothing_to_draw(call: Any) -> None:
    with pytest.raises(ValueError):
        call()


def test_the_package_imports_without_hypothesis_and_the_strategies_say_how_to_get_it(tmp_path: Path) -> None:
    probe = (
        "import sys\n"
        "sys.modules['hypothesis'] = None\n"          # makes `import hypothesis` raise ImportError
        "import llm_datadist_ffi, llm_datadist_ffi.testing, llm_datadist_ffi.vendor, llm_datadist_ffi.native\n"
        "try:\n"
        "    import llm_datadist_ffi.testing.strategies\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
        "else:\n"
        "    print('imported')\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120,
                          cwd=str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert "pip install llm_datadist_ffi[test]" in done.stdout
