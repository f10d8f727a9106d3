"""Tensor memory given as objects instead of bare addresses (an addition to the vendor's API).

The vendor's registration calls take one integer address per tensor, and the library
then reads and writes the tensor's whole byte size there for as long as the cache is
registered: on any backend, the memory must be that large, contiguous, writable and
alive. A bare integer carries none of that, so a mistake (an array smaller than the
description, a strided view, an array garbage-collected while registered) corrupts
memory silently. Both registration APIs therefore also accept, in place of an address:

- a numpy array or any object with the buffer protocol (``bytearray``, ``memoryview``,
  ``array.array``, ...), and objects with DLPack (``__dlpack__``) on the CPU;
- a torch tensor on the CPU (recognised by ``data_ptr``/``is_contiguous``; torch is not
  imported).

Each is checked here (C-contiguous, writable, at least the tensor's byte size) and the
object is kept alive by the engine until the cache is unregistered or the engine is
finalized. Integers pass through unchanged: for them the caller keeps those duties
(docs/user-guide.md, "Registering memory").

A numpy array whose dtype is not the cache description's data type but has its item
size (an ``int16`` array for ``DT_FLOAT16``) is registered as it is, as the device
would, with the lint PR-43 (``ArrayDtypeWarning``): the library reads its bytes as the
description's type, which is rarely what the array's writer meant.
"""
from __future__ import annotations

from typing import Any, List, Optional, Sequence, Tuple

import numpy as np

from .. import lint
from ..data_type import GeDataType

__all__ = ["is_buffer", "tensor_addresses"]


def is_buffer(value: Any) -> bool:
    """Whether ``value`` is tensor memory given as an object (not an integer address)."""
    if isinstance(value, (int, np.integer)):
        return False
    if hasattr(value, "data_ptr") and hasattr(value, "is_contiguous"):
        return True
    if hasattr(value, "__dlpack__"):
        return True
    try:
        memoryview(value)
    except TypeError:
        return False
    return True


# The advice for memory that cannot be registered as it is: a contiguous copy would
# register bytes the model never writes again, and every transfer would move them stale.
_REGISTER_WHAT_THE_MODEL_WRITES = (
    "Allocate the cache contiguous and let the model write into it: the model must write into the registered "
    "memory, so registering a copy of this view would transfer stale bytes")

#: The numpy dtype of each whole-byte ``ge::DataType`` that has one (PR-43).
_NUMPY_DTYPES = {
    GeDataType.DT_FLOAT: "float32", GeDataType.DT_FLOAT16: "float16", GeDataType.DT_INT8: "int8",
    GeDataType.DT_INT32: "int32", GeDataType.DT_UINT8: "uint8", GeDataType.DT_INT16: "int16",
    GeDataType.DT_UINT16: "uint16", GeDataType.DT_UINT32: "uint32", GeDataType.DT_INT64: "int64",
    GeDataType.DT_UINT64: "uint64", GeDataType.DT_DOUBLE: "float64", GeDataType.DT_BOOL: "bool",
}


def _lint_dtype(value: Any, data_type: Optional[int], where: str, tag: str) -> None:
    """PR-43 (lint): a numpy array whose dtype differs from the description's data type
    but has its item size. Types without a numpy counterpart (``DT_BF16``, sub-byte
    types) and arrays of another item size (bytes as ``uint8``) are not linted."""
    if data_type is None or not isinstance(value, np.ndarray) or data_type not in _NUMPY_DTYPES.keys():
        return
    described = GeDataType(data_type)
    expected = np.dtype(_NUMPY_DTYPES[described])
    if value.dtype != expected and value.dtype.itemsize == expected.itemsize:
        lint.lint("PR-43", f"[{tag}] {where} is a numpy array of dtype {value.dtype}, but the cache description says "
                           f"{described.name} ({expected}), of the same item size")


def _torch_like(value: Any, where: str) -> Tuple[int, int]:
    device = getattr(value, "device", None)
    kind = getattr(device, "type", "cpu")
    if kind != "cpu":
        raise ValueError(f"{where} is a tensor on {kind}; only CPU memory can be registered as an object "
                         "(pass the device address as an int)")
    if not value.is_contiguous():
        raise ValueError(f"{where} is not contiguous; registering it would scatter the tensor's rows. "
                         f"{_REGISTER_WHAT_THE_MODEL_WRITES} (.contiguous() makes such a copy)")
    if getattr(value, "requires_grad", False) and getattr(value, "is_leaf", True) is False:
        raise ValueError(f"{where} is a non-leaf tensor that requires grad; register its .detach()")
    return int(value.data_ptr()), int(value.numel()) * int(value.element_size())


def _as_array(value: Any, where: str) -> np.ndarray:
    if isinstance(value, np.ndarray):
        return value
    try:
        return np.asarray(memoryview(value))
    except TypeError:
        pass
    if hasattr(value, "__dlpack__"):
        try:
            return np.from_dlpack(value)
        except (TypeError, ValueError, RuntimeError, BufferError) as exc:
            raise ValueError(f"{where}: its DLPack capsule is not CPU memory numpy can view ({exc})") from None
    raise TypeError(f"{where} must be an int address or an object with the buffer protocol or DLPack, "
                    f"not {type(value).__name__}")


def _address_and_size(value: Any, where: str) -> Tuple[int, int]:
    if hasattr(value, "data_ptr") and hasattr(value, "is_contiguous"):
        return _torch_like(value, where)
    array = _as_array(value, where)
    if not array.flags.c_contiguous:
        raise ValueError(f"{where} is not C-contiguous (a strided view such as arr[::2]); the library would "
                         f"read and write the rows in between. {_REGISTER_WHAT_THE_MODEL_WRITES} "
                         "(np.ascontiguousarray makes such a copy)")
    if not array.flags.writeable:
        raise ValueError(f"{where} is read-only; the library writes into registered memory")
    return int(array.__array_interface__["data"][0]), int(array.nbytes)


def tensor_addresses(values: Sequence[Any], tensor_bytes: int, name: str, data_type: Optional[int] = None,
                     tag: str = "register") -> Tuple[List[Any], List[Any]]:
    """The addresses of ``values`` (ints unchanged, buffer objects checked) and the objects
    to keep alive while the cache is registered. ``data_type`` (the description's
    ``ge::DataType`` number) lets a numpy array of another dtype of the same item size
    warn (PR-43; ``tag`` names the call in the warning).

    Raises:
        TypeError: an element that is neither an int nor a buffer object.
        ValueError: a buffer that is not contiguous, read-only, on another device, or
            smaller than ``tensor_bytes``.
        LLMException: ``LLM_PARAM_INVALID`` for PR-43 in strict mode.
    """
    addresses: List[Any] = []
    keep: List[Any] = []
    for index, value in enumerate(values):
        if not is_buffer(value):
            addresses.append(value)
            continue
        where = f"{name}[{index}]"
        address, size = _address_and_size(value, where)
        if size < tensor_bytes:
            raise ValueError(f"{where} holds {size} bytes; the cache description needs {tensor_bytes} bytes per "
                             "tensor (the library would read and write past its end)")
        _lint_dtype(value, data_type, where, tag)
        addresses.append(address)
        keep.append(value)
    return addresses, keep
