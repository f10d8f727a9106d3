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
"""
from __future__ import annotations

from typing import Any, List, Sequence, Tuple

import numpy as np

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


def _torch_like(value: Any, where: str) -> Tuple[int, int]:
    device = getattr(value, "device", None)
    kind = getattr(device, "type", "cpu")
    if kind != "cpu":
        raise ValueError(f"{where} is a tensor on {kind}; only CPU memory can be registered as an object "
                         "(pass the device address as an int)")
    if not value.is_contiguous():
        raise ValueError(f"{where} is not contiguous; registering it would scatter the tensor's rows "
                         "(use .contiguous())")
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
                         "read and write the rows in between (use np.ascontiguousarray, and register that copy)")
    if not array.flags.writeable:
        raise ValueError(f"{where} is read-only; the library writes into registered memory")
    return int(array.__array_interface__["data"][0]), int(array.nbytes)


def tensor_addresses(values: Sequence[Any], tensor_bytes: int, name: str) -> Tuple[List[Any], List[Any]]:
    """The addresses of ``values`` (ints unchanged, buffer objects checked) and the objects
    to keep alive while the cache is registered.

    Raises:
        TypeError: an element that is neither an int nor a buffer object.
        ValueError: a buffer that is not contiguous, read-only, on another device, or
            smaller than ``tensor_bytes``.
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
        addresses.append(address)
        keep.append(value)
    return addresses, keep
