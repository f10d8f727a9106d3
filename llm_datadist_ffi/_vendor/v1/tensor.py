"""``Tensor`` and ``TensorDesc``: the vendor's v1 tensor types (docs/reference/python-api.md §13).

They are the lazy names ``llm_datadist.Tensor``/``llm_datadist.TensorDesc``; in the
vendor they come from the legacy v1 package, here they are the package's own
(project rule, docs/reference/python-api.md §1.2). A ``Tensor`` wraps either a C-contiguous numpy
array (kept by reference, not copied) or a native tensor handle as
``KvCacheManager.get_cache_tensors`` returns it; reading the data of a handle tensor
copies the engine memory it addresses out into a new array.
"""
from __future__ import annotations

from typing import Any, List, Optional, Tuple, Union

import numpy as np

from .._vendor_checks import check_int_list, check_type, none_error, type_name
from ...data_type import DataType

__all__ = ["Tensor", "TensorDesc"]

_STRING_KINDS = "SU"


def _np_type(dtype: Any) -> Any:
    """The numpy scalar type of a ``DataType`` (the vendor's ``dtype_to_np_dtype``)."""
    from ...data_type import dtype_to_np_dtype

    return dtype_to_np_dtype.get(dtype)


def _copy_out(address: int, out: "np.ndarray[Any, Any]") -> None:
    """Copy ``out.nbytes`` bytes of engine memory at ``address`` into ``out``.

    On the mock backend "device" memory is host memory and is read directly; on
    the ascend backend the ACL runtime copies device to host (the calling thread
    needs a current device, ``acl.set_device``).
    """
    from ..._core._loader import backend

    if backend == "mock":
        from ..._core._capi import ffi

        out[:] = np.frombuffer(ffi.buffer(ffi.cast("char *", address), out.nbytes), dtype=np.uint8)
        return
    from ... import acl

    acl.memcpy(int(out.ctypes.data), out.nbytes, address, out.nbytes, acl.ACL_MEMCPY_DEVICE_TO_HOST)


class TensorDesc:
    """A tensor's element type and shape: ``TensorDesc(dtype, shape)``."""

    def __init__(self, dtype: DataType, shape: Union[List[int], Tuple[int, ...]]) -> None:
        """Raises ``TypeError`` unless ``dtype`` is a ``DataType`` and ``shape`` a
        list/tuple of int (``None`` shape included: the vendor copies it into a list)."""
        check_type(dtype, DataType, "dtype")
        check_int_list(shape, "shape")
        if shape is None:
            raise none_error("shape", "a list or tuple of int")
        self._dtype = dtype
        self._shape = list(shape)

    @property
    def dtype(self) -> DataType:
        """The element type."""
        return self._dtype

    @property
    def shape(self) -> List[int]:
        """The shape, as a new list on every access."""
        return list(self._shape)

    def __repr__(self) -> str:
        return f"TensorDesc(dtype={self._dtype}, shape={self._shape})"


class Tensor:
    """A tensor: ``Tensor(data, tensor_desc=None)``.

    ``data`` is a C-contiguous ``numpy.ndarray`` (wrapped without a copy), another
    ``Tensor`` (cloned: an array is copied, a handle shared) or an ``int`` native
    handle (as built by ``from_tensor_tuple``).
    """

    def __init__(self, data: Union["np.ndarray[Any, Any]", "Tensor", int],
                 tensor_desc: Optional[TensorDesc] = None) -> None:
        """Raises:
            TypeError: ``tensor_desc`` not a ``TensorDesc``; ``data`` of another type.
            RuntimeError: an array whose shape or dtype does not match ``tensor_desc``;
                without a desc, an array whose dtype is not in ``valid_np_dtypes`` nor
                a string dtype; an array that is not C-contiguous.
        """
        check_type(tensor_desc, TensorDesc, "tensor_desc")
        self._array: Optional["np.ndarray[Any, Any]"] = None
        self._handle: Optional[int] = None
        if isinstance(data, Tensor):
            self._array = None if data._array is None else data._array.copy()
            self._handle = data._handle
            self._desc: Optional[TensorDesc] = data._desc
        elif isinstance(data, np.ndarray):
            self._desc = self._check_array(data, tensor_desc)
            self._array = data
        elif isinstance(data, int) and not isinstance(data, bool):
            self._handle = int(data)
            self._desc = tensor_desc
        else:
            raise TypeError(f"data must be a numpy.ndarray, a Tensor or an int handle, not {type_name(data)}")

    @staticmethod
    def _check_array(array: "np.ndarray[Any, Any]", desc: Optional[TensorDesc]) -> TensorDesc:
        is_string = array.dtype.kind in _STRING_KINDS
        if desc is not None:
            expected = _np_type(desc.dtype)
            if desc.dtype is DataType.DT_STRING:
                dtype_ok = is_string
            else:
                dtype_ok = expected is not None and array.dtype == np.dtype(expected)
            if list(array.shape) != desc.shape or not dtype_ok:
                raise RuntimeError(f"numpy array (shape {list(array.shape)}, dtype {array.dtype}) does not match "
                                   f"tensor_desc (shape {desc.shape}, dtype {desc.dtype})")
            checked = desc
        else:
            from ...data_type import np_dtype_to_dtype

            if is_string:
                dtype = DataType.DT_STRING
            elif array.dtype.type in np_dtype_to_dtype:
                dtype = np_dtype_to_dtype[array.dtype.type]
            else:
                raise RuntimeError(f"numpy dtype {array.dtype} is not supported; use one of valid_np_dtypes "
                                   f"or a string dtype")
            checked = TensorDesc(dtype, list(array.shape))
        if not array.flags.c_contiguous:
            raise RuntimeError("numpy array must be C-contiguous; use numpy.ascontiguousarray")
        return checked

    @property
    def tensor_desc(self) -> Optional[TensorDesc]:
        """The tensor's description (``None`` for a handle without one)."""
        return self._desc

    def numpy(self, copy: bool = False) -> "np.ndarray[Any, Any]":
        """The data as a numpy array: the wrapped array itself unless ``copy``.

        BF16 data is widened to float32 (always a new array); FP16 is float16.

        Raises:
            TypeError: ``copy`` is not a ``bool``.
            RuntimeError: a string tensor without ``copy=True``.
            RuntimeError: a handle tensor without a ``TensorDesc`` or of a type
                without a size, or whose memory cannot be read.

        A handle tensor (from ``KvCacheManager.get_cache_tensors``) addresses cache
        memory of the engine; its data is always copied out into a new array, so
        the result stays valid after the cache is freed. Write into a cache with
        ``copy_cache`` or through the addresses the manager hands out.
        """
        check_type(copy, bool, "copy")
        if self._array is None:
            return self._read_handle()
        desc = self._desc
        if desc is not None and desc.dtype is DataType.DT_STRING and not copy:
            raise RuntimeError("a string tensor can only be read with numpy(copy=True)")
        if desc is not None and desc.dtype is DataType.DT_BF16:
            bits = self._array.view(np.uint16).astype(np.uint32) << 16
            return bits.view(np.float32)
        return self._array.copy() if copy else self._array

    def _read_handle(self) -> "np.ndarray[Any, Any]":
        from ...data_type import ELEMENT_BITS

        desc = self._desc
        if desc is None or desc.dtype.value not in ELEMENT_BITS or desc.dtype is DataType.DT_STRING:
            raise RuntimeError(f"cannot read tensor handle {self._handle:#x}: it has no readable tensor_desc ({desc})")
        shape = desc.shape
        count = int(np.prod(shape)) if shape else 1
        nbytes = (count * ELEMENT_BITS[desc.dtype.value] + 7) // 8
        data = np.empty(nbytes, dtype=np.uint8)
        if nbytes:
            _copy_out(int(self._handle or 0), data)
        if desc.dtype is DataType.DT_BF16:
            bits = data.view(np.uint16).astype(np.uint32) << 16
            return bits.view(np.float32).reshape(shape)
        result: "np.ndarray[Any, Any]" = data.view(_np_type(desc.dtype)).reshape(shape)
        return result

    @staticmethod
    def from_tensor_tuple(tensor_tuple: Tuple[int, int, List[int]]) -> "Tensor":
        """A handle ``Tensor`` from a native ``(handle, dtype int, shape)`` tuple.

        Raises:
            ValueError: the dtype int is not a ``DataType`` value.
            TypeError: the handle is not an int or the shape not a list of int.
        """
        handle, dtype, shape = tensor_tuple
        return Tensor(handle, TensorDesc(DataType(dtype), shape))

    def __repr__(self) -> str:
        source = "handle" if self._array is None else "array"
        return f"Tensor({source}, tensor_desc={self._desc!r})"
