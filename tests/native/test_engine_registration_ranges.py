"""Registration refuses ranges the engine could never move bytes to or from
(docs/security.md §1.3, docs/semantics.md E-23): a range that wraps past 2^64, one that
starts on a page that is not mapped, one that starts in a freed mock-ACL allocation. The
refusal is
``LLM_PARAM_INVALID`` and nothing is registered (the call still consumes its id,
semantics.md §3.1). A caller's ``lldd_cache`` with a NULL array and a non-zero count is refused
like any NULL array (E-1)."""
from __future__ import annotations

import ctypes
import mmap
from typing import Callable, Iterator

import numpy as np
import pytest

from llm_datadist_ffi import LLMException
from llm_datadist_ffi import LLMStatusCode as S
from llm_datadist_ffi import acl, native
from llm_datadist_ffi._core._loader import ffi, lldd_lib
from llm_datadist_ffi.native import Cache, CacheDesc, DataType

Engines = Callable[..., native.LlmDataDist]
Register = Callable[[native.LlmDataDist, int, int], int]

pytestmark = pytest.mark.mock_only(reason="the mock's registration range checks; CopyKvCache (PR-9) shows the table")

POOL = '{"memory_size": 65536, "page_shift": 12}'
PAGE = mmap.PAGESIZE
UNMAPPED = 0x1000      # below vm.mmap_min_addr: never mapped in a user process


def _register_native(engine: native.LlmDataDist, address: int, nbytes: int) -> int:
    """RegisterKvCache of one tensor of ``nbytes`` bytes at ``address``: the status."""
    try:
        engine.register_kv_cache(CacheDesc(1, DataType.DT_UINT8, [1, nbytes]), [address])
    except LLMException as exc:
        return int(exc.status_code)
    return 0


def _register_ext(engine: native.LlmDataDist, address: int, nbytes: int) -> int:
    """The vendor-compatible API's registration (lldd_ext_register_cache): the status."""
    shape = ffi.new("int64_t[]", [1, nbytes])
    desc = ffi.new("lldd_cache_desc *")
    desc.placement, desc.num_tensors, desc.data_type = 1, 1, DataType.DT_UINT8.value
    desc.shape, desc.shape_len = shape, 2
    addrs = ffi.new("uint64_t[]", [address])
    out = ffi.new("int64_t *")
    return int(lldd_lib.lldd_ext_register_cache(engine._engine(), desc, addrs, 1, 1, 1, ffi.NULL, 0, out))


def _last_error() -> str:
    return str(ffi.string(lldd_lib.lldd_last_error()).decode())


@pytest.fixture(params=[_register_native, _register_ext], ids=["RegisterKvCache", "ext_register_cache"])
def register(request: pytest.FixtureRequest) -> Register:
    return request.param  # type: ignore[no-any-return]


@pytest.fixture
def eng(engines: Engines) -> native.LlmDataDist:
    return engines(1, options={native.OPTION_MOCK_NATIVE_POOL: "1", native.OPTION_MEM_POOL_CONFIG: POOL})


@pytest.fixture
def acl_device(eng: native.LlmDataDist) -> Iterator[None]:
    acl.aclrtSetDevice(0)
    yield
    acl.aclrtResetDevice(0)


def _refused_and_not_registered(engine: native.LlmDataDist, register: Register, address: int, nbytes: int,
                                why: str) -> None:
    """The registration is PARAM_INVALID with ``why`` in the message; the id it consumed
    names no cache, and the next registration gets the id after it."""
    assert register(engine, address, nbytes) == S.LLM_PARAM_INVALID
    assert why in _last_error()
    keep = np.zeros(16, np.uint8)
    probe = engine.allocate_cache(CacheDesc(1, DataType.DT_UINT8, [1, 16]))
    refused_id = probe.cache_id - 1
    with pytest.raises(LLMException) as info:
        engine.copy_kv_cache(Cache(refused_id), probe)
    assert info.value.status_code == S.LLM_KV_CACHE_NOT_EXIST
    assert engine.register_kv_cache(CacheDesc(1, DataType.DT_UINT8, [1, 16]), [keep.ctypes.data]) == refused_id + 2


def test_a_range_that_wraps_past_the_end_of_the_address_space_is_refused(eng: native.LlmDataDist,
                                                                         register: Register) -> None:
    _refused_and_not_registered(eng, register, 2**64 - 16, 32, "tensor 0: [0xfffffffffffffff0, +32) wraps past "
                                                               "the end of the address space")


def _unmapped_page() -> int:
    """The address of a page that was mapped a moment ago and is not any more."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    base = libc.mmap(None, PAGE, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
    assert base not in (None, ctypes.c_void_p(-1).value)
    assert libc.munmap(base, PAGE) == 0
    return int(base)


@pytest.mark.parametrize("where", ["below mmap_min_addr", "unmapped by munmap"])
def test_an_address_that_is_not_mapped_is_refused(eng: native.LlmDataDist, register: Register, where: str) -> None:
    address = UNMAPPED if where == "below mmap_min_addr" else _unmapped_page() + 64
    _refused_and_not_registered(eng, register, address, 32, f"tensor 0: {address:#x} is not mapped in this process")


def test_a_freed_acl_allocation_is_refused(eng: native.LlmDataDist, register: Register, acl_device: None) -> None:
    base = acl.aclrtMalloc(4096, 0)
    acl.aclrtFree(base)
    _refused_and_not_registered(eng, register, base + 64, 32, f"tensor 0: {base + 64:#x} lies in the aclrtMalloc "
                                                              f"allocation [{base:#x}, +4096), which was freed")


# ---- lldd_cache arguments with a NULL array and a count (E-1) -----------------------------

def _cache_arg(num_tensor_addrs: int = 0, shape_len: int = 0) -> object:
    cache = ffi.new("lldd_cache *")
    cache.cache_id = 1
    cache.tensor_addrs, cache.num_tensor_addrs = ffi.NULL, num_tensor_addrs
    cache.cache_desc.placement, cache.cache_desc.num_tensors = 1, 2
    cache.cache_desc.shape, cache.cache_desc.shape_len = ffi.NULL, shape_len
    return cache


def _index() -> object:
    index = ffi.new("lldd_cache_index *")
    index.cluster_id, index.cache_id = 2, 1
    return index


CALLS = {
    "lldd_push_kv_cache": lambda h, c: lldd_lib.lldd_push_kv_cache(h, c, _index(), 0, -1, ffi.NULL),
    "lldd_push_kv_blocks": lambda h, c: lldd_lib.lldd_push_kv_blocks(h, c, _index(), ffi.new("uint64_t[]", [0]), 1,
                                                                     ffi.new("uint64_t[]", [0]), 1, ffi.NULL),
    "lldd_pull_kv_cache": lambda h, c: lldd_lib.lldd_pull_kv_cache(h, _index(), c, 0, -1, ffi.NULL),
    "lldd_pull_kv_blocks": lambda h, c: lldd_lib.lldd_pull_kv_blocks(h, _index(), c, ffi.new("uint64_t[]", [0]), 1,
                                                                     ffi.new("uint64_t[]", [0]), 1, ffi.NULL),
    "lldd_copy_kv_cache": lambda h, c: lldd_lib.lldd_copy_kv_cache(h, c, _cache_arg(), 0, 0, 0, -1),
}
CACHE_PARAM = {"lldd_push_kv_cache": "src_cache", "lldd_push_kv_blocks": "src_cache",
               "lldd_pull_kv_cache": "dst_cache", "lldd_pull_kv_blocks": "dst_cache",
               "lldd_copy_kv_cache": "src_cache"}


@pytest.mark.parametrize("initialised", [True, False], ids=["initialised", "not-initialised"])
@pytest.mark.parametrize("function", sorted(CALLS))
def test_a_cache_argument_with_a_null_array_and_a_count_is_param_invalid(
        engines: Engines, function: str, initialised: bool) -> None:
    engine = engines(1, options={native.OPTION_MOCK_NATIVE_POOL: "1", native.OPTION_MEM_POOL_CONFIG: POOL}) if initialised else engines(1)
    name = CACHE_PARAM[function]
    assert CALLS[function](engine._engine(), _cache_arg(num_tensor_addrs=5)) == S.LLM_PARAM_INVALID
    assert _last_error() == f"{function}: {name}.tensor_addrs is NULL but num_tensor_addrs is 5"
    assert CALLS[function](engine._engine(), _cache_arg(shape_len=3)) == S.LLM_PARAM_INVALID
    assert _last_error() == f"{function}: {name}.cache_desc.shape is NULL but shape_len is 3"

