"""Tensor memory given as objects at registration (llm_datadist_ffi._core._buffers): checked
for contiguity, writability and size, kept alive while registered; ints unchanged."""
from __future__ import annotations

import gc
import re
import weakref
from typing import Any, Iterator

import numpy as np
import pytest

from llm_datadist_ffi import native
from llm_datadist_ffi.native import Cache, CacheDesc, CacheIndex

import vendor_support as vs

DESC = CacheDesc(2, native.DataType.DT_UINT8, [4, 16])          # 2 tensors of 64 bytes


class Pair:
    """A Prompt and a Decoder in this process; ``link()`` after registering (PR-32)."""

    def __init__(self) -> None:
        self.port = vs.free_port()
        self.prompt = native.LlmDataDist(1, native.LlmRole.PROMPT)
        self.prompt.initialize({native.OPTION_DEVICE_ID: "0", native.OPTION_LISTEN_IP_INFO: f"127.0.0.1:{self.port}"})
        self.decoder = native.LlmDataDist(2, native.LlmRole.DECODER)
        self.decoder.initialize({native.OPTION_DEVICE_ID: "1"})

    def link(self) -> None:
        info = native.ClusterInfo(1, 0, [native.IpInfo("127.0.0.1", 0)], [native.IpInfo("127.0.0.1", self.port)])
        assert self.decoder.link_llm_clusters([info])[0] == 0


@pytest.fixture
def prompt_and_decoder() -> Iterator[Pair]:
    made = Pair()
    yield made
    made.decoder.close()
    made.prompt.close()


def test_arrays_register_as_their_memory_and_receive_the_pulled_bytes(prompt_and_decoder: Pair) -> None:
    prompt, decoder = prompt_and_decoder.prompt, prompt_and_decoder.decoder
    src = [np.arange(64, dtype=np.uint8).reshape(4, 16) + 7 * t for t in range(2)]
    dst = [np.zeros((4, 16), np.uint8), bytearray(64)]             # an array and a bytearray
    sid = prompt.register_kv_cache(DESC, src)
    did = decoder.register_kv_cache(DESC, dst)
    prompt_and_decoder.link()
    decoder.pull_kv_blocks(CacheIndex(1, sid), Cache(did), [3, 0], [1, 2])
    expected = np.zeros((2, 4, 16), np.uint8)
    expected[:, 1], expected[:, 2] = np.stack(src)[:, 3], np.stack(src)[:, 0]
    assert (dst[0] == expected[0]).all()
    assert bytes(dst[1]) == expected[1].tobytes()


@pytest.mark.parametrize("memory, error, words", [
    (lambda: np.zeros((4, 15), np.uint8), ValueError, "addrs[0] holds 60 bytes; the cache description needs 64"),
    (lambda: np.zeros((8, 16), np.uint8)[::2], ValueError, "addrs[0] is not C-contiguous"),
    (lambda: np.frombuffer(bytes(64), np.uint8), ValueError, "addrs[0] is read-only"),
    (lambda: "64 bytes", TypeError, "addrs[0] must be an int (uint64), not str"),
])
def test_memory_that_cannot_hold_the_tensor_is_refused_and_nothing_is_registered(
        prompt_and_decoder: Pair, memory: Any, error: type, words: str) -> None:
    decoder = prompt_and_decoder.decoder
    with pytest.raises(error, match=re.escape(words)):
        decoder.register_kv_cache(DESC, [memory(), np.zeros((4, 16), np.uint8)])
    assert decoder.register_kv_cache(DESC, [np.zeros((4, 16), np.uint8) for _ in range(2)]) == 1   # no id taken


def test_registered_memory_stays_alive_until_unregistered_and_until_finalize(prompt_and_decoder: Pair) -> None:
    decoder = prompt_and_decoder.decoder
    arrays = [np.zeros((4, 16), np.uint8) for _ in range(4)]
    refs = [weakref.ref(a) for a in arrays]
    first = decoder.register_kv_cache(DESC, arrays[:2])
    decoder.register_kv_cache(DESC, arrays[2:])
    del arrays
    gc.collect()
    assert all(r() is not None for r in refs)
    decoder.unregister_kv_cache(first)
    gc.collect()
    assert [r() is None for r in refs] == [True, True, False, False]
    decoder.finalize()
    gc.collect()
    assert all(r() is None for r in refs)


class TorchLike:
    """What the package reads of a torch tensor (torch itself is not needed)."""

    def __init__(self, array: np.ndarray, device: str = "cpu", contiguous: bool = True) -> None:
        self.array, self.device, self.contiguous = array, type("Device", (), {"type": device})(), contiguous

    def data_ptr(self) -> int:
        return int(self.array.ctypes.data)

    def is_contiguous(self) -> bool:
        return self.contiguous

    def numel(self) -> int:
        return int(self.array.size)

    def element_size(self) -> int:
        return int(self.array.itemsize)


class DlpackOnly:
    """An object offering only DLPack (no buffer protocol)."""

    def __init__(self, array: np.ndarray) -> None:
        self.array = array

    def __dlpack__(self, **kwargs: Any) -> Any:
        return self.array.__dlpack__(**kwargs)

    def __dlpack_device__(self) -> Any:
        return self.array.__dlpack_device__()


def test_torch_tensors_and_dlpack_objects_register_as_their_memory(prompt_and_decoder: Pair) -> None:
    prompt, decoder = prompt_and_decoder.prompt, prompt_and_decoder.decoder
    src = [np.full((4, 16), 5 + t, np.uint8) for t in range(2)]
    sid = prompt.register_kv_cache(DESC, [TorchLike(src[0]), DlpackOnly(src[1])])
    dst = [np.zeros((4, 16), np.uint8) for _ in range(2)]
    did = decoder.register_kv_cache(DESC, [TorchLike(dst[0]), dst[1]])
    prompt_and_decoder.link()
    decoder.pull_kv_cache(CacheIndex(1, sid, 2), Cache(did), batch_index=3)
    assert (dst[0][3] == 5).all() and (dst[1][3] == 6).all() and not dst[0][:3].any()
    with pytest.raises(ValueError, match=r"addrs\[0\] is a tensor on cuda"):
        decoder.register_kv_cache(DESC, [TorchLike(dst[0], device="cuda"), dst[1]])
    with pytest.raises(ValueError, match=r"addrs\[1\] is not contiguous"):
        decoder.register_kv_cache(DESC, [dst[0], TorchLike(dst[1], contiguous=False)])


@pytest.mark.mock_only(reason="the vendor-compatible API needs the mock's extension functions")
def test_the_vendor_api_takes_memory_objects_as_an_addition() -> None:
    from llm_datadist_ffi.vendor import CacheDesc as VCacheDesc
    from llm_datadist_ffi.vendor import DataType, LLMDataDist, LLMRole
    datadist = LLMDataDist(LLMRole.DECODER, 2)
    datadist.init(vs.v2_options())
    try:
        arrays = [np.zeros((4, 16), np.uint8) for _ in range(2)]
        refs = [weakref.ref(a) for a in arrays]
        desc = VCacheDesc(2, [4, 16], DataType.DT_UINT8)
        cache = datadist.cache_manager.register_cache(desc, arrays)
        assert cache.tensor_addrs == [a.ctypes.data for a in arrays]
        del arrays
        gc.collect()
        assert all(r() is not None for r in refs)
        with pytest.raises(ValueError, match=r"addrs\[1\] holds 32 bytes"):
            datadist.cache_manager.register_blocks_cache(desc, [np.zeros(64, np.uint8), np.zeros(32, np.uint8)])
        datadist.cache_manager.unregister_cache(cache.cache_id)
        gc.collect()
        assert all(r() is None for r in refs)
    finally:
        datadist.finalize()
