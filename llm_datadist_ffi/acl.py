"""The ACL runtime subset (docs/reference/acl.md): device selection, memory, copies, streams.

Users of LLM-DataDist call these functions to pick a device and to allocate and fill
the memory they register as KV caches. On an Ascend host they go to the vendor's
``libacl_rt.so``; on the mock backend to the mock ACL, which copies the vendor's
behaviour (docs/reference/acl.md §6) and adds checks of its own (acl.md §7: exact allocation sizes,
range-checked copies, reported double frees and use after free).

Two tiers over the raw ``acl_lib`` (docs/design.md):

* **Thin**: one function per C function, with the C name (``aclrtMalloc``,
  ``aclrtMemcpy`` …). Pointers and stream handles are plain ``int`` addresses,
  out-parameters become return values, and any status other than ``ACL_SUCCESS``
  raises :class:`AclError` at once, in the calling thread, with the code and the
  thread's ``aclGetRecentErrMsg()`` text. Only this tier touches ``acl_lib``.
* **Pythonic**: ``init``, ``set_device``, ``malloc``, ``memcpy`` … and
  :class:`DeviceBuffer`, which owns one ``aclrtMalloc`` allocation and reads and
  writes it from bytes or numpy arrays. These check argument types and the range of
  each C integer type first (``TypeError``/``ValueError`` naming the parameter);
  every rule of the ACL runtime itself is left to the library, so the codes are the
  library's own.

The current device is per thread, as on a device: call :func:`set_device` in each
thread that allocates or copies. The GIL is released during every C call.
"""
from __future__ import annotations

import operator
import os
import weakref
from typing import TYPE_CHECKING, Any, Callable, Final, NamedTuple, Optional, Union

import numpy as np

from ._core._loader import acl_lib, ffi

if TYPE_CHECKING:
    import numpy.typing as npt

__all__ = [
    "AclError", "code_name", "MemInfo", "DeviceBuffer", "BytesLike",
    # Pythonic tier
    "init", "finalize", "finalize_reference", "recent_error_message",
    "set_device", "reset_device", "reset_device_force", "get_device", "get_device_count",
    "synchronize_device", "malloc", "malloc_host", "free", "free_host", "memcpy", "memcpy_async",
    "memset", "get_mem_info", "create_stream", "destroy_stream", "synchronize_stream",
    "shared_array", "shared_tensor",
    "get_version", "get_soc_name", "has_get_version", "has_get_soc_name",
    # thin tier
    "aclInit", "aclFinalize", "aclFinalizeReference", "aclGetRecentErrMsg",
    "aclrtSetDevice", "aclrtResetDevice", "aclrtResetDeviceForce", "aclrtGetDevice",
    "aclrtGetDeviceCount", "aclrtSynchronizeDevice", "aclrtMalloc", "aclrtMallocHost", "aclrtFree",
    "aclrtFreeHost", "aclrtMemcpy", "aclrtMemcpyAsync", "aclrtMemset", "aclrtGetMemInfo",
    "aclrtCreateStream", "aclrtDestroyStream", "aclrtSynchronizeStream",
    "aclrtSynchronizeStreamWithTimeout", "aclrtGetVersion", "aclrtGetSocName",
]

# ---- constants ------------------------------------------------------------------------------
# Names as in the vendor's headers; values read from the declarations in include/acl/types.h
# (tests/acl/test_acl.py checks that every enumerator there is exported here).

# aclrtMemcpyKind
ACL_MEMCPY_HOST_TO_HOST: Final[int] = acl_lib.ACL_MEMCPY_HOST_TO_HOST
ACL_MEMCPY_HOST_TO_DEVICE: Final[int] = acl_lib.ACL_MEMCPY_HOST_TO_DEVICE
ACL_MEMCPY_DEVICE_TO_HOST: Final[int] = acl_lib.ACL_MEMCPY_DEVICE_TO_HOST
ACL_MEMCPY_DEVICE_TO_DEVICE: Final[int] = acl_lib.ACL_MEMCPY_DEVICE_TO_DEVICE
ACL_MEMCPY_DEFAULT: Final[int] = acl_lib.ACL_MEMCPY_DEFAULT
ACL_MEMCPY_HOST_TO_BUF_TO_DEVICE: Final[int] = acl_lib.ACL_MEMCPY_HOST_TO_BUF_TO_DEVICE
ACL_MEMCPY_INNER_DEVICE_TO_DEVICE: Final[int] = acl_lib.ACL_MEMCPY_INNER_DEVICE_TO_DEVICE
ACL_MEMCPY_INTER_DEVICE_TO_DEVICE: Final[int] = acl_lib.ACL_MEMCPY_INTER_DEVICE_TO_DEVICE

# aclrtMemMallocPolicy (the last three are flags that may be OR-ed with a policy)
ACL_MEM_MALLOC_HUGE_FIRST: Final[int] = acl_lib.ACL_MEM_MALLOC_HUGE_FIRST
ACL_MEM_MALLOC_HUGE_ONLY: Final[int] = acl_lib.ACL_MEM_MALLOC_HUGE_ONLY
ACL_MEM_MALLOC_NORMAL_ONLY: Final[int] = acl_lib.ACL_MEM_MALLOC_NORMAL_ONLY
ACL_MEM_MALLOC_HUGE_FIRST_P2P: Final[int] = acl_lib.ACL_MEM_MALLOC_HUGE_FIRST_P2P
ACL_MEM_MALLOC_HUGE_ONLY_P2P: Final[int] = acl_lib.ACL_MEM_MALLOC_HUGE_ONLY_P2P
ACL_MEM_MALLOC_NORMAL_ONLY_P2P: Final[int] = acl_lib.ACL_MEM_MALLOC_NORMAL_ONLY_P2P
ACL_MEM_MALLOC_HUGE1G_ONLY: Final[int] = acl_lib.ACL_MEM_MALLOC_HUGE1G_ONLY
ACL_MEM_MALLOC_HUGE1G_ONLY_P2P: Final[int] = acl_lib.ACL_MEM_MALLOC_HUGE1G_ONLY_P2P
ACL_MEM_TYPE_LOW_BAND_WIDTH: Final[int] = acl_lib.ACL_MEM_TYPE_LOW_BAND_WIDTH
ACL_MEM_TYPE_HIGH_BAND_WIDTH: Final[int] = acl_lib.ACL_MEM_TYPE_HIGH_BAND_WIDTH
ACL_MEM_ACCESS_USER_SPACE_READONLY: Final[int] = acl_lib.ACL_MEM_ACCESS_USER_SPACE_READONLY

# aclrtMemAttr
ACL_DDR_MEM: Final[int] = acl_lib.ACL_DDR_MEM
ACL_HBM_MEM: Final[int] = acl_lib.ACL_HBM_MEM
ACL_DDR_MEM_HUGE: Final[int] = acl_lib.ACL_DDR_MEM_HUGE
ACL_DDR_MEM_NORMAL: Final[int] = acl_lib.ACL_DDR_MEM_NORMAL
ACL_HBM_MEM_HUGE: Final[int] = acl_lib.ACL_HBM_MEM_HUGE
ACL_HBM_MEM_NORMAL: Final[int] = acl_lib.ACL_HBM_MEM_NORMAL
ACL_DDR_MEM_P2P_HUGE: Final[int] = acl_lib.ACL_DDR_MEM_P2P_HUGE
ACL_DDR_MEM_P2P_NORMAL: Final[int] = acl_lib.ACL_DDR_MEM_P2P_NORMAL
ACL_HBM_MEM_P2P_HUGE: Final[int] = acl_lib.ACL_HBM_MEM_P2P_HUGE
ACL_HBM_MEM_P2P_NORMAL: Final[int] = acl_lib.ACL_HBM_MEM_P2P_NORMAL
ACL_HBM_MEM_HUGE1G: Final[int] = acl_lib.ACL_HBM_MEM_HUGE1G
ACL_HBM_MEM_P2P_HUGE1G: Final[int] = acl_lib.ACL_HBM_MEM_P2P_HUGE1G
ACL_MEM_NORMAL: Final[int] = acl_lib.ACL_MEM_NORMAL
ACL_MEM_HUGE: Final[int] = acl_lib.ACL_MEM_HUGE
ACL_MEM_HUGE1G: Final[int] = acl_lib.ACL_MEM_HUGE1G
ACL_MEM_P2P_NORMAL: Final[int] = acl_lib.ACL_MEM_P2P_NORMAL
ACL_MEM_P2P_HUGE: Final[int] = acl_lib.ACL_MEM_P2P_HUGE
ACL_MEM_P2P_HUGE1G: Final[int] = acl_lib.ACL_MEM_P2P_HUGE1G

# General status codes (acl_base_rt.h)
ACL_SUCCESS: Final[int] = acl_lib.ACL_SUCCESS
ACL_ERROR_NONE: Final[int] = acl_lib.ACL_ERROR_NONE
ACL_ERROR_INVALID_PARAM: Final[int] = acl_lib.ACL_ERROR_INVALID_PARAM
ACL_ERROR_UNINITIALIZE: Final[int] = acl_lib.ACL_ERROR_UNINITIALIZE
ACL_ERROR_REPEAT_INITIALIZE: Final[int] = acl_lib.ACL_ERROR_REPEAT_INITIALIZE
ACL_ERROR_INVALID_FILE: Final[int] = acl_lib.ACL_ERROR_INVALID_FILE
ACL_ERROR_WRITE_FILE: Final[int] = acl_lib.ACL_ERROR_WRITE_FILE
ACL_ERROR_INVALID_FILE_SIZE: Final[int] = acl_lib.ACL_ERROR_INVALID_FILE_SIZE
ACL_ERROR_PARSE_FILE: Final[int] = acl_lib.ACL_ERROR_PARSE_FILE
ACL_ERROR_WAIT_CALLBACK_TIMEOUT: Final[int] = acl_lib.ACL_ERROR_WAIT_CALLBACK_TIMEOUT
ACL_ERROR_REPEAT_FINALIZE: Final[int] = acl_lib.ACL_ERROR_REPEAT_FINALIZE
ACL_ERROR_BAD_ALLOC: Final[int] = acl_lib.ACL_ERROR_BAD_ALLOC
ACL_ERROR_API_NOT_SUPPORT: Final[int] = acl_lib.ACL_ERROR_API_NOT_SUPPORT
ACL_ERROR_INVALID_DEVICE: Final[int] = acl_lib.ACL_ERROR_INVALID_DEVICE
ACL_ERROR_MEMORY_ADDRESS_UNALIGNED: Final[int] = acl_lib.ACL_ERROR_MEMORY_ADDRESS_UNALIGNED
ACL_ERROR_RESOURCE_NOT_MATCH: Final[int] = acl_lib.ACL_ERROR_RESOURCE_NOT_MATCH
ACL_ERROR_INVALID_RESOURCE_HANDLE: Final[int] = acl_lib.ACL_ERROR_INVALID_RESOURCE_HANDLE
ACL_ERROR_FEATURE_UNSUPPORTED: Final[int] = acl_lib.ACL_ERROR_FEATURE_UNSUPPORTED
ACL_ERROR_STORAGE_OVER_LIMIT: Final[int] = acl_lib.ACL_ERROR_STORAGE_OVER_LIMIT
ACL_ERROR_INTERNAL_ERROR: Final[int] = acl_lib.ACL_ERROR_INTERNAL_ERROR
ACL_ERROR_FAILURE: Final[int] = acl_lib.ACL_ERROR_FAILURE
ACL_ERROR_GE_FAILURE: Final[int] = acl_lib.ACL_ERROR_GE_FAILURE
ACL_ERROR_RT_FAILURE: Final[int] = acl_lib.ACL_ERROR_RT_FAILURE
ACL_ERROR_DRV_FAILURE: Final[int] = acl_lib.ACL_ERROR_DRV_FAILURE
ACL_ERROR_PROFILING_FAILURE: Final[int] = acl_lib.ACL_ERROR_PROFILING_FAILURE

# Runtime status codes (rt_error_codes.h)
ACL_RT_SUCCESS: Final[int] = acl_lib.ACL_RT_SUCCESS
ACL_ERROR_RT_PARAM_INVALID: Final[int] = acl_lib.ACL_ERROR_RT_PARAM_INVALID
ACL_ERROR_RT_INVALID_DEVICEID: Final[int] = acl_lib.ACL_ERROR_RT_INVALID_DEVICEID
ACL_ERROR_RT_CONTEXT_NULL: Final[int] = acl_lib.ACL_ERROR_RT_CONTEXT_NULL
ACL_ERROR_RT_STREAM_CONTEXT: Final[int] = acl_lib.ACL_ERROR_RT_STREAM_CONTEXT
ACL_ERROR_RT_WAIT_TIMEOUT: Final[int] = acl_lib.ACL_ERROR_RT_WAIT_TIMEOUT
ACL_ERROR_RT_TASK_TIMEOUT: Final[int] = acl_lib.ACL_ERROR_RT_TASK_TIMEOUT
ACL_ERROR_RT_STREAM_ABORT: Final[int] = acl_lib.ACL_ERROR_RT_STREAM_ABORT
ACL_ERROR_RT_FEATURE_NOT_SUPPORT: Final[int] = acl_lib.ACL_ERROR_RT_FEATURE_NOT_SUPPORT
ACL_ERROR_RT_MEMORY_ALLOCATION: Final[int] = acl_lib.ACL_ERROR_RT_MEMORY_ALLOCATION
ACL_ERROR_RT_MEMORY_FREE: Final[int] = acl_lib.ACL_ERROR_RT_MEMORY_FREE
ACL_ERROR_RT_NO_DEVICE: Final[int] = acl_lib.ACL_ERROR_RT_NO_DEVICE
ACL_ERROR_RT_DEVICE_OOM: Final[int] = acl_lib.ACL_ERROR_RT_DEVICE_OOM
ACL_ERROR_RT_INTERNAL_ERROR: Final[int] = acl_lib.ACL_ERROR_RT_INTERNAL_ERROR
ACL_ERROR_RT_STREAM_SYNC_TIMEOUT: Final[int] = acl_lib.ACL_ERROR_RT_STREAM_SYNC_TIMEOUT
ACL_ERROR_RT_DEVICE_MEM_ERROR: Final[int] = acl_lib.ACL_ERROR_RT_DEVICE_MEM_ERROR
ACL_ERROR_RT_SUSPECT_REMOTE_ERROR: Final[int] = acl_lib.ACL_ERROR_RT_SUSPECT_REMOTE_ERROR
ACL_ERROR_RT_DRV_INTERNAL_ERROR: Final[int] = acl_lib.ACL_ERROR_RT_DRV_INTERNAL_ERROR

__all__ += sorted(name for name in dir() if name.startswith("ACL_"))

_SIZE_MAX: Final[int] = 2 ** (8 * ffi.sizeof("size_t")) - 1
_INT32 = (-(2 ** 31), 2 ** 31 - 1)
_ENUM = (0, 2 ** (8 * ffi.sizeof("aclrtMemcpyKind")) - 1)   # cffi gives these enums an unsigned type


def _status_names() -> dict[int, str]:
    """Value → name of every status enumerator of the declarations.

    Derived from the loaded declarations, so it cannot fall behind the header. Where
    several names share a value, ``ACL_SUCCESS`` and then the alphabetically first
    name is used.
    """
    names: dict[int, str] = {acl_lib.ACL_SUCCESS: "ACL_SUCCESS"}
    for name in sorted(dir(acl_lib)):
        if name.startswith(("ACL_ERROR_", "ACL_RT_")):
            names.setdefault(int(getattr(acl_lib, name)), name)
    return names


_STATUS_NAMES: Final[dict[int, str]] = _status_names()


def code_name(code: int) -> Optional[str]:
    """The vendor's name of an ACL status code, e.g. ``"ACL_ERROR_RT_PARAM_INVALID"``
    for 107000; ``None`` for a value that is not one of the subset's codes."""
    return _STATUS_NAMES.get(code)


class AclError(RuntimeError):
    """A failed ACL call: ``code`` is the ``aclError`` status unchanged, ``name`` its
    vendor name (``None`` for a code outside the subset), ``message`` the calling
    thread's ``aclGetRecentErrMsg()`` text right after the call (``None`` if the
    library recorded none), ``function`` the C function that failed."""

    code: int
    name: Optional[str]
    message: Optional[str]
    function: Optional[str]

    def __init__(self, code: int, message: Optional[str] = None, function: Optional[str] = None) -> None:
        self.code = code
        self.name = code_name(code)
        self.message = message
        self.function = function
        head = f"{function} failed: " if function else ""
        text = f"{head}{self.name or 'unknown ACL status'} ({code})"
        super().__init__(f"{text}: {message}" if message else text)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.code, self.message, self.function))


# ---- thin tier --------------------------------------------------------------------------------

CData = Any
PathLike = Union[str, bytes, "os.PathLike[str]", "os.PathLike[bytes]"]


def _check(status: int, function: str) -> None:
    if status != ACL_SUCCESS:
        raise AclError(int(status), aclGetRecentErrMsg(), function)


# Parsed once here: cffi parses a type named by a string on its first use under the
# FFI's lock, which is not reentrant, and the frees of the safety nets below (run by the
# garbage collector, possibly on a thread that holds that lock) pass addresses through
# _ptr (docs/design.md, "Finalizers").
_VOID_P = ffi.typeof("void *")
_UINTPTR = ffi.typeof("uintptr_t")


def _ptr(address: int) -> CData:
    return ffi.cast(_VOID_P, address)


def _address(pointer: CData) -> int:
    return int(ffi.cast(_UINTPTR, pointer))


def aclGetRecentErrMsg() -> Optional[str]:
    """The calling thread's most recent ACL error text, or ``None`` if there is none.
    Never raises."""
    text = acl_lib.aclGetRecentErrMsg()
    return None if text == ffi.NULL else ffi.string(text).decode("utf-8", "replace")


def aclInit(config_path: Optional[PathLike]) -> None:
    """Raises:
        AclError: ``ACL_ERROR_REPEAT_INITIALIZE`` when already initialised (the
            reference count still grew by one), ``ACL_ERROR_INVALID_FILE`` for a file
            that cannot be read, ``ACL_ERROR_INVALID_PARAM`` when re-initialising with
            a configuration whose content differs from the first one.
    """
    path = ffi.NULL if config_path is None else os.fsencode(config_path)
    _check(acl_lib.aclInit(path), "aclInit")


def aclFinalize() -> None:
    """Raises:
        AclError: ``ACL_ERROR_REPEAT_FINALIZE`` when already finalised.
    """
    _check(acl_lib.aclFinalize(), "aclFinalize")


def aclFinalizeReference() -> int:
    """Drop one initialisation reference; returns the count left.

    Raises:
        AclError: ``ACL_ERROR_REPEAT_FINALIZE`` when the count is already 0.
    """
    count = ffi.new("uint64_t *")
    _check(acl_lib.aclFinalizeReference(count), "aclFinalizeReference")
    return int(count[0])


def aclrtSetDevice(device_id: int) -> None:
    """Raises:
        AclError: ``ACL_ERROR_RT_INVALID_DEVICEID`` for an id that is not a device.
    """
    _check(acl_lib.aclrtSetDevice(device_id), "aclrtSetDevice")


def aclrtResetDevice(device_id: int) -> None:
    """Raises:
        AclError: ``ACL_ERROR_RT_INVALID_DEVICEID`` for an id that is not a device.
    """
    _check(acl_lib.aclrtResetDevice(device_id), "aclrtResetDevice")


def aclrtResetDeviceForce(device_id: int) -> None:
    """Raises:
        AclError: ``ACL_ERROR_RT_INVALID_DEVICEID`` for an id that is not a device.
    """
    _check(acl_lib.aclrtResetDeviceForce(device_id), "aclrtResetDeviceForce")


def aclrtGetDevice() -> int:
    """Raises:
        AclError: ``ACL_ERROR_RT_CONTEXT_NULL`` when this thread has no current device.
    """
    device = ffi.new("int32_t *")
    _check(acl_lib.aclrtGetDevice(device), "aclrtGetDevice")
    return int(device[0])


def aclrtGetDeviceCount() -> int:
    """Raises:
        AclError: the library's status on failure.
    """
    count = ffi.new("uint32_t *")
    _check(acl_lib.aclrtGetDeviceCount(count), "aclrtGetDeviceCount")
    return int(count[0])


def aclrtSynchronizeDevice() -> None:
    """Raises:
        AclError: ``ACL_ERROR_RT_CONTEXT_NULL`` when this thread has no current device.
    """
    _check(acl_lib.aclrtSynchronizeDevice(), "aclrtSynchronizeDevice")


def aclrtMalloc(size: int, policy: int) -> int:
    """Device memory of ``size`` bytes on the current device; returns its address.

    Raises:
        AclError: ``ACL_ERROR_INVALID_PARAM`` for size 0 or an overflowing size,
            ``ACL_ERROR_RT_CONTEXT_NULL`` without a current device,
            ``ACL_ERROR_RT_MEMORY_ALLOCATION`` when the device has too little free memory.
    """
    out = ffi.new("void **")
    _check(acl_lib.aclrtMalloc(out, size, policy), "aclrtMalloc")
    return _address(out[0])


def aclrtMallocHost(size: int) -> int:
    """Host memory of ``size`` bytes; returns its address.

    Raises:
        AclError: ``ACL_ERROR_INVALID_PARAM`` for size 0, ``ACL_ERROR_RT_CONTEXT_NULL``
            without a current device.
    """
    out = ffi.new("void **")
    _check(acl_lib.aclrtMallocHost(out, size), "aclrtMallocHost")
    return _address(out[0])


def aclrtFree(dev_ptr: int) -> None:
    """Raises:
        AclError: ``ACL_ERROR_INVALID_PARAM`` for 0; on the mock
            ``ACL_ERROR_RT_PARAM_INVALID`` for anything but the start of a live
            ``aclrtMalloc`` allocation (docs/reference/acl.md A-6).
    """
    _check(acl_lib.aclrtFree(_ptr(dev_ptr)), "aclrtFree")


def aclrtFreeHost(host_ptr: int) -> None:
    """Raises:
        AclError: ``ACL_ERROR_INVALID_PARAM`` for 0; on the mock
            ``ACL_ERROR_RT_PARAM_INVALID`` for anything but the start of a live
            ``aclrtMallocHost`` allocation (docs/reference/acl.md A-6).
    """
    _check(acl_lib.aclrtFreeHost(_ptr(host_ptr)), "aclrtFreeHost")


def aclrtMemcpy(dst: int, dest_max: int, src: int, count: int, kind: int) -> None:
    """Copy ``count`` bytes from address ``src`` to address ``dst`` synchronously.

    Raises:
        AclError: ``ACL_ERROR_INVALID_PARAM`` for a null address or an unaccepted
            kind, ``ACL_ERROR_RT_CONTEXT_NULL`` without a current device,
            ``ACL_ERROR_RT_PARAM_INVALID`` when ``count > dest_max`` or
            ``dest_max == 0``, and on the mock for a range outside its allocation
            or on the wrong side for ``kind`` (docs/reference/acl.md A-5).
    """
    _check(acl_lib.aclrtMemcpy(_ptr(dst), dest_max, _ptr(src), count, kind), "aclrtMemcpy")


def aclrtMemcpyAsync(dst: int, dest_max: int, src: int, count: int, kind: int, stream: int) -> None:
    """Copy on ``stream`` (0 is the default stream); synchronise before using the data.

    Raises:
        AclError: as :func:`aclrtMemcpy`; also ``ACL_ERROR_RT_PARAM_INVALID`` for a
            stream that is not live and device-to-device copies on one device whose
            addresses are not 64-byte aligned, ``ACL_ERROR_RT_STREAM_CONTEXT`` for a
            stream of another device.
    """
    _check(acl_lib.aclrtMemcpyAsync(_ptr(dst), dest_max, _ptr(src), count, kind, _ptr(stream)),
           "aclrtMemcpyAsync")


def aclrtMemset(dev_ptr: int, max_count: int, value: int, count: int) -> None:
    """Set ``count`` bytes at ``dev_ptr`` to ``value & 0xFF``.

    Raises:
        AclError: ``ACL_ERROR_INVALID_PARAM`` for a null address,
            ``ACL_ERROR_RT_CONTEXT_NULL`` without a current device,
            ``ACL_ERROR_RT_PARAM_INVALID`` for ``count > max_count`` and on the mock
            for a range outside its allocation (docs/reference/acl.md A-5).
    """
    _check(acl_lib.aclrtMemset(_ptr(dev_ptr), max_count, value, count), "aclrtMemset")


def aclrtGetMemInfo(attr: int) -> tuple[int, int]:
    """``(free, total)`` bytes of the current device for memory attribute ``attr``.

    Raises:
        AclError: ``ACL_ERROR_RT_CONTEXT_NULL`` without a current device,
            ``ACL_ERROR_RT_PARAM_INVALID`` for an ``attr`` outside the enum.
    """
    free_bytes = ffi.new("size_t *")
    total_bytes = ffi.new("size_t *")
    _check(acl_lib.aclrtGetMemInfo(attr, free_bytes, total_bytes), "aclrtGetMemInfo")
    return int(free_bytes[0]), int(total_bytes[0])


def aclrtCreateStream() -> int:
    """A new stream on the current device; returns its handle.

    Raises:
        AclError: ``ACL_ERROR_RT_CONTEXT_NULL`` without a current device.
    """
    out = ffi.new("aclrtStream *")
    _check(acl_lib.aclrtCreateStream(out), "aclrtCreateStream")
    return _address(out[0])


def aclrtDestroyStream(stream: int) -> None:
    """Raises:
        AclError: ``ACL_ERROR_INVALID_PARAM`` for 0, ``ACL_ERROR_RT_PARAM_INVALID`` for
            a stream that is not live.
    """
    _check(acl_lib.aclrtDestroyStream(_ptr(stream)), "aclrtDestroyStream")


def aclrtSynchronizeStream(stream: int) -> None:
    """Wait for ``stream`` (0 is the default stream).

    Raises:
        AclError: ``ACL_ERROR_RT_PARAM_INVALID`` for a stream that is not live.
    """
    _check(acl_lib.aclrtSynchronizeStream(_ptr(stream)), "aclrtSynchronizeStream")


def aclrtSynchronizeStreamWithTimeout(stream: int, timeout: int) -> None:
    """Wait for ``stream`` at most ``timeout`` ms (-1: indefinitely, 0: check once).

    Raises:
        AclError: ``ACL_ERROR_RT_STREAM_SYNC_TIMEOUT`` when the time runs out,
            ``ACL_ERROR_RT_PARAM_INVALID`` for a stream that is not live,
            ``ACL_ERROR_INVALID_PARAM`` for a timeout below -1.
    """
    _check(acl_lib.aclrtSynchronizeStreamWithTimeout(_ptr(stream), timeout),
           "aclrtSynchronizeStreamWithTimeout")


def _exported(name: str) -> bool:
    try:
        getattr(acl_lib, name)
    except AttributeError:       # cffi: declared but not exported by this library
        return False
    return True


#: Whether the loaded ACL library exports the optional functions (docs/reference/acl.md §3).
has_get_version: Final[bool] = _exported("aclrtGetVersion")
has_get_soc_name: Final[bool] = _exported("aclrtGetSocName")


def _not_exported(name: str) -> AclError:
    return AclError(ACL_ERROR_API_NOT_SUPPORT, f"the loaded ACL library does not export {name}", name)


def aclrtGetVersion() -> tuple[int, int, int]:
    """``(major, minor, patch)`` of the ACL runtime.

    Raises:
        AclError: ``ACL_ERROR_API_NOT_SUPPORT`` when the library does not export the
            function (``has_get_version`` is false); the library's status on failure.
    """
    if not has_get_version:
        raise _not_exported("aclrtGetVersion")
    numbers = ffi.new("int32_t[3]")
    _check(acl_lib.aclrtGetVersion(numbers, numbers + 1, numbers + 2), "aclrtGetVersion")
    return int(numbers[0]), int(numbers[1]), int(numbers[2])


def aclrtGetSocName() -> Optional[str]:
    """The SoC name, or ``None`` when the runtime cannot tell (it returned NULL).

    Raises:
        AclError: ``ACL_ERROR_API_NOT_SUPPORT`` when the library does not export the
            function (``has_get_soc_name`` is false).
    """
    if not has_get_soc_name:
        raise _not_exported("aclrtGetSocName")
    name = acl_lib.aclrtGetSocName()
    return None if name == ffi.NULL else ffi.string(name).decode("utf-8", "replace")


# ---- Pythonic tier ----------------------------------------------------------------------------

def _integer(name: str, value: Any, low: int, high: int) -> int:
    """``value`` as an int within ``[low, high]`` (the range of its C type)."""
    try:
        number = operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an int, not {type(value).__name__}") from None
    if not low <= number <= high:
        raise ValueError(f"{name} must be in [{low}, {high}], got {number}")
    return number


def _size(name: str, value: Any) -> int:
    return _integer(name, value, 0, _SIZE_MAX)


def _device(value: Any) -> int:
    return _integer("device_id", value, *_INT32)


def _enum(name: str, value: Any) -> int:
    return _integer(name, value, *_ENUM)


def init(config_path: Optional[PathLike] = None) -> bool:
    """Initialise ACL (``aclInit``); ``config_path`` names an optional JSON
    configuration file. Returns ``True`` when this call initialised ACL and ``False``
    when it was already initialised (``ACL_ERROR_REPEAT_INITIALIZE``, which callers
    treat as success; the reference count still grew by one).

    Raises:
        TypeError: ``config_path`` is not a path.
        AclError: ``ACL_ERROR_INVALID_FILE`` for a file that cannot be read,
            ``ACL_ERROR_INVALID_PARAM`` when re-initialising with different content.
    """
    if config_path is not None and not isinstance(config_path, (str, bytes, os.PathLike)):
        raise TypeError(f"config_path must be a path or None, not {type(config_path).__name__}")
    try:
        aclInit(config_path)
    except AclError as exc:
        if exc.code == ACL_ERROR_REPEAT_INITIALIZE:
            return False
        raise
    return True


def finalize() -> None:
    """Finalise ACL (``aclFinalize``): the reference count drops to 0 at once.

    Raises:
        AclError: ``ACL_ERROR_REPEAT_FINALIZE`` when already finalised.
    """
    aclFinalize()


def finalize_reference() -> int:
    """Drop one ``aclInit`` reference; ACL is finalised when none is left. Returns the
    references left.

    Raises:
        AclError: ``ACL_ERROR_REPEAT_FINALIZE`` when no reference is left.
    """
    return aclFinalizeReference()


def recent_error_message() -> Optional[str]:
    """The calling thread's most recent ACL error text (``aclGetRecentErrMsg``), or
    ``None``. On the mock this includes LLM-DataDist failures (docs/reference/acl.md A-8)."""
    return aclGetRecentErrMsg()


def set_device(device_id: int) -> None:
    """Make ``device_id`` the calling thread's current device; adds one reference.

    Raises:
        TypeError, ValueError: ``device_id`` is not an ``int32_t``.
        AclError: ``ACL_ERROR_RT_INVALID_DEVICEID`` for an id that is not a device.
    """
    aclrtSetDevice(_device(device_id))


def reset_device(device_id: int) -> None:
    """Release one reference to ``device_id``; the last one releases its streams.

    Raises:
        TypeError, ValueError: ``device_id`` is not an ``int32_t``.
        AclError: ``ACL_ERROR_RT_INVALID_DEVICEID`` for an id that is not a device.
    """
    aclrtResetDevice(_device(device_id))


def reset_device_force(device_id: int) -> None:
    """Release ``device_id`` whatever its reference count.

    Raises:
        TypeError, ValueError: ``device_id`` is not an ``int32_t``.
        AclError: ``ACL_ERROR_RT_INVALID_DEVICEID`` for an id that is not a device.
    """
    aclrtResetDeviceForce(_device(device_id))


def get_device() -> int:
    """The calling thread's current device.

    Raises:
        AclError: ``ACL_ERROR_RT_CONTEXT_NULL`` when this thread has none.
    """
    return aclrtGetDevice()


def get_device_count() -> int:
    """The number of devices.

    Raises:
        AclError: the library's status on failure.
    """
    return aclrtGetDeviceCount()


def synchronize_device() -> None:
    """Wait for all work on the current device.

    Raises:
        AclError: ``ACL_ERROR_RT_CONTEXT_NULL`` when this thread has no current device.
    """
    aclrtSynchronizeDevice()


def malloc(size: int, policy: int = ACL_MEM_MALLOC_HUGE_FIRST) -> int:
    """``size`` bytes of device memory on the current device; returns the address.
    Free it with :func:`free`, or use :class:`DeviceBuffer`.

    Raises:
        TypeError, ValueError: ``size`` is not a ``size_t`` or ``policy`` not an enum value.
        AclError: see :func:`aclrtMalloc`.
    """
    return aclrtMalloc(_size("size", size), _enum("policy", policy))


def malloc_host(size: int) -> int:
    """``size`` bytes of host memory from the runtime; free with :func:`free_host`.

    Raises:
        TypeError, ValueError: ``size`` is not a ``size_t``.
        AclError: see :func:`aclrtMallocHost`.
    """
    return aclrtMallocHost(_size("size", size))


def free(ptr: int) -> None:
    """Free memory from :func:`malloc`.

    Raises:
        TypeError, ValueError: ``ptr`` is not an address.
        AclError: see :func:`aclrtFree`.
    """
    aclrtFree(_size("ptr", ptr))


def free_host(ptr: int) -> None:
    """Free memory from :func:`malloc_host`.

    Raises:
        TypeError, ValueError: ``ptr`` is not an address.
        AclError: see :func:`aclrtFreeHost`.
    """
    aclrtFreeHost(_size("ptr", ptr))


def memcpy(dst: int, dest_max: int, src: int, count: int, kind: int) -> None:
    """Copy ``count`` bytes from address ``src`` to address ``dst`` (room for
    ``dest_max``), synchronously; ``kind`` is an ``ACL_MEMCPY_*`` value.

    Raises:
        TypeError, ValueError: an argument is outside its C type.
        AclError: see :func:`aclrtMemcpy`.
    """
    aclrtMemcpy(_size("dst", dst), _size("dest_max", dest_max), _size("src", src), _size("count", count),
                _enum("kind", kind))


def memcpy_async(dst: int, dest_max: int, src: int, count: int, kind: int, stream: Optional[int] = None) -> None:
    """:func:`memcpy` on ``stream`` (``None``: the default stream); call
    :func:`synchronize_stream` before using the data.

    Raises:
        TypeError, ValueError: an argument is outside its C type.
        AclError: see :func:`aclrtMemcpyAsync`.
    """
    aclrtMemcpyAsync(_size("dst", dst), _size("dest_max", dest_max), _size("src", src), _size("count", count),
                     _enum("kind", kind), 0 if stream is None else _size("stream", stream))


def memset(dev_ptr: int, max_count: int, value: int, count: int) -> None:
    """Set ``count`` bytes at ``dev_ptr`` (room for ``max_count``) to ``value & 0xFF``.

    Raises:
        TypeError, ValueError: an argument is outside its C type.
        AclError: see :func:`aclrtMemset`.
    """
    aclrtMemset(_size("dev_ptr", dev_ptr), _size("max_count", max_count), _integer("value", value, *_INT32),
                _size("count", count))


class MemInfo(NamedTuple):
    free: int
    total: int


def get_mem_info(attr: int = ACL_HBM_MEM) -> MemInfo:
    """Free and total bytes of the current device for ``attr`` (an ``ACL_*_MEM*`` value).

    Raises:
        TypeError, ValueError: ``attr`` is outside its C type.
        AclError: see :func:`aclrtGetMemInfo`.
    """
    free_bytes, total_bytes = aclrtGetMemInfo(_enum("attr", attr))
    return MemInfo(free_bytes, total_bytes)


def create_stream() -> int:
    """A new stream on the current device (its handle); destroy it with :func:`destroy_stream`.

    Raises:
        AclError: see :func:`aclrtCreateStream`.
    """
    return aclrtCreateStream()


def destroy_stream(stream: int) -> None:
    """Destroy a stream from :func:`create_stream`.

    Raises:
        TypeError, ValueError: ``stream`` is not a handle.
        AclError: see :func:`aclrtDestroyStream`.
    """
    aclrtDestroyStream(_size("stream", stream))


def synchronize_stream(stream: Optional[int] = None, timeout_ms: Optional[int] = None) -> None:
    """Wait for ``stream`` (``None``: the default stream), at most ``timeout_ms``
    milliseconds when given (-1 waits indefinitely).

    Raises:
        TypeError, ValueError: an argument is outside its C type.
        AclError: see :func:`aclrtSynchronizeStream` and
            :func:`aclrtSynchronizeStreamWithTimeout`.
    """
    handle = 0 if stream is None else _size("stream", stream)
    if timeout_ms is None:
        aclrtSynchronizeStream(handle)
    else:
        aclrtSynchronizeStreamWithTimeout(handle, _integer("timeout_ms", timeout_ms, *_INT32))


def get_version() -> tuple[int, int, int]:
    """``(major, minor, patch)`` of the ACL runtime (``(1, 17, 0)`` on the mock).

    Raises:
        AclError: see :func:`aclrtGetVersion`.
    """
    return aclrtGetVersion()


def get_soc_name() -> str:
    """The SoC name (a fixed name on the mock).

    Raises:
        AclError: ``ACL_ERROR_API_NOT_SUPPORT`` when the library lacks the function;
            ``ACL_ERROR_FAILURE`` when the runtime returns no name.
    """
    name = aclrtGetSocName()
    if name is None:
        raise AclError(ACL_ERROR_FAILURE, aclGetRecentErrMsg() or "aclrtGetSocName returned NULL",
                       "aclrtGetSocName")
    return name


# ---- DeviceBuffer -----------------------------------------------------------------------------

BytesLike = Union[bytes, bytearray, memoryview, "npt.NDArray[Any]"]


def _free_quietly(free: Callable[[int], None], address: int) -> None:
    # The safety nets below run from the garbage collector or at exit, where an exception
    # has nowhere to go; a failure means the memory was already freed through another
    # path, which the library has reported in this thread's error message.
    try:
        free(address)
    except AclError:
        pass


def _free_abandoned(address: int) -> None:
    # Safety net for a DeviceBuffer that was never closed.
    _free_quietly(aclrtFree, address)


class DeviceBuffer:
    """Device memory from ``aclrtMalloc``, owned by this object.

    ``with DeviceBuffer(n) as buf:`` frees it on exit; :meth:`close` frees it
    explicitly (a forgotten buffer is freed when collected). ``ptr`` is the address
    to register as a KV cache; keep the buffer open while anything may still read
    it. Reads and writes go through ``aclrtMemcpy`` and need a current device in the
    calling thread, like any copy.
    """

    def __init__(self, size: int, policy: int = ACL_MEM_MALLOC_HUGE_FIRST) -> None:
        """Raises:
            TypeError, ValueError: ``size`` or ``policy`` is outside its C type.
            AclError: see :func:`aclrtMalloc` (no current device, size 0, too little
                free memory).
        """
        self._size = _size("size", size)
        self._ptr: Optional[int] = malloc(self._size, policy)
        self._finalizer = weakref.finalize(self, _free_abandoned, self._ptr)

    @property
    def ptr(self) -> int:
        """The device address. Raises ``ValueError`` once the buffer is closed."""
        if self._ptr is None:
            raise ValueError("the DeviceBuffer is closed")
        return self._ptr

    @property
    def size(self) -> int:
        """The size in bytes, as requested."""
        return self._size

    @property
    def closed(self) -> bool:
        return self._ptr is None

    def close(self) -> None:
        """Free the memory (``aclrtFree``); a second call does nothing.

        Raises:
            AclError: ``aclrtFree`` failed; the buffer stays open.
        """
        if self._ptr is None:
            return
        aclrtFree(self._ptr)
        self._finalizer.detach()
        self._ptr = None

    def __enter__(self) -> DeviceBuffer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        where = "closed" if self._ptr is None else f"ptr=0x{self._ptr:x}"
        return f"DeviceBuffer(size={self._size}, {where})"

    def _span(self, offset: Any, nbytes: int) -> int:
        start = _size("offset", offset)
        if start > self._size or nbytes > self._size - start:
            raise ValueError(f"offset {start} + {nbytes} bytes exceeds the buffer size {self._size}")
        return start

    def write(self, data: BytesLike, offset: int = 0) -> None:
        """Copy ``data`` (bytes-like or a C-contiguous numpy array) to ``ptr + offset``.

        Raises:
            TypeError: ``data`` does not support the buffer protocol.
            ValueError: the buffer is closed, ``data`` is not C-contiguous, or it does
                not fit at ``offset``.
            AclError: ``aclrtMemcpy`` failed (e.g. no current device).
        """
        base = self.ptr
        view = memoryview(data)   # type: ignore[arg-type]
        if not view.c_contiguous:
            raise ValueError("data must be C-contiguous")
        start = self._span(offset, view.nbytes)
        if view.nbytes == 0:
            return
        source = ffi.from_buffer(view)
        aclrtMemcpy(base + start, self._size - start, _address(source), view.nbytes, ACL_MEMCPY_HOST_TO_DEVICE)

    def read(self, nbytes: Optional[int] = None, offset: int = 0) -> bytes:
        """``nbytes`` bytes from ``ptr + offset`` (default: up to the end).

        Raises:
            ValueError: the buffer is closed or the range exceeds it.
            AclError: ``aclrtMemcpy`` failed (e.g. no current device).
        """
        base = self.ptr
        start = _size("offset", offset)
        count = (self._size - min(start, self._size)) if nbytes is None else _size("nbytes", nbytes)
        start = self._span(start, count)
        out = bytearray(count)
        if count:
            target = ffi.from_buffer(out)
            aclrtMemcpy(_address(target), count, base + start, count, ACL_MEMCPY_DEVICE_TO_HOST)
        return bytes(out)

    def to_numpy(self, dtype: npt.DTypeLike, shape: Union[int, tuple[int, ...]], offset: int = 0) -> npt.NDArray[Any]:
        """A new numpy array of ``dtype`` and ``shape`` filled from ``ptr + offset``.

        Raises:
            ValueError: the buffer is closed or the array does not fit at ``offset``.
            AclError: ``aclrtMemcpy`` failed (e.g. no current device).
        """
        base = self.ptr
        array = np.empty(shape, dtype=dtype)
        start = self._span(offset, array.nbytes)
        if array.nbytes:
            target = ffi.from_buffer(array, require_writable=True)
            aclrtMemcpy(_address(target), array.nbytes, base + start, array.nbytes, ACL_MEMCPY_DEVICE_TO_HOST)
        return array


# ---- arrays in library memory -----------------------------------------------------------------

def _free_host_abandoned(address: int) -> None:
    # Safety net for host memory whose last array went (see _free_quietly).
    _free_quietly(aclrtFreeHost, address)


class _HostMemory:
    """One ``aclrtMallocHost`` allocation, exposed to numpy by ``__array_interface__``.

    numpy keeps the object an array was made from as the array's ``base`` (and every
    view keeps its array), so the allocation lives exactly as long as some array over
    it does; then the finalizer frees it.
    """

    def __init__(self, shape: tuple[int, ...], dtype: np.dtype[Any]) -> None:
        nbytes = dtype.itemsize
        for extent in shape:
            nbytes *= extent
        self.nbytes = nbytes
        # aclrtMallocHost refuses 0 bytes; an empty array still gets an address of its own
        self.ptr = aclrtMallocHost(max(nbytes, 1))
        self._finalizer = weakref.finalize(self, _free_host_abandoned, self.ptr)
        self.__array_interface__ = {"shape": shape, "typestr": dtype.str, "data": (self.ptr, False),
                                    "version": 3}


def _shape(shape: Union[int, tuple[int, ...], list[int]]) -> tuple[int, ...]:
    dims = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
    for extent in dims:
        if not isinstance(extent, (int, np.integer)) or isinstance(extent, bool):
            raise TypeError(f"shape must be integers, got {extent!r}")
        if extent < 0:
            raise ValueError(f"shape must not be negative, got {dims}")
    return tuple(int(extent) for extent in dims)


def shared_array(shape: Union[int, tuple[int, ...], list[int]], dtype: npt.DTypeLike = np.uint8) -> npt.NDArray[Any]:
    """A zero-filled numpy array in host memory of the ACL runtime (``aclrtMallocHost``).

    On the mock backend this memory is shared library memory (docs/security.md §2.7):
    registered as a KV cache on both ends of a link between two processes of the same
    user, transfers copy straight between the processes' mappings instead of going
    through ``process_vm``. The array (and every view of it) keeps the allocation
    alive, and so does a registration that was given the array itself rather than its
    address; the memory is freed when the last of them goes. Like ``aclrtMallocHost``
    it needs a current device in the calling thread (:func:`set_device`).

    Raises:
        TypeError, ValueError: ``shape`` is not a sequence of non-negative integers or
            ``dtype`` is not a numpy data type with a fixed size.
        AclError: see :func:`aclrtMallocHost`.
    """
    dims = _shape(shape)
    kind = np.dtype(dtype)
    if kind.itemsize == 0 or kind.hasobject:
        raise ValueError(f"dtype must have a fixed size and hold no Python objects, got {kind}")
    array = np.asarray(_HostMemory(dims, kind))
    array.fill(0)   # memory the runtime reuses may hold an earlier allocation's bytes
    return array


def shared_tensor(shape: Union[int, tuple[int, ...], list[int]], dtype: Any = None) -> Any:
    """A torch tensor over :func:`shared_array` memory (torch is imported only here).

    ``dtype`` is a torch dtype (default ``torch.uint8``). The tensor keeps the memory
    alive through the numpy array it was made from.

    Raises:
        ImportError: torch is not installed.
        TypeError, ValueError, AclError: see :func:`shared_array`.
    """
    import importlib

    torch: Any = importlib.import_module("torch")   # an optional dependency, untyped here
    kind = torch.uint8 if dtype is None else dtype
    numpy_kind = torch.empty(0, dtype=kind).numpy().dtype
    return torch.from_numpy(shared_array(shape, numpy_kind))
