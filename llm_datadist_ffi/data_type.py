"""Data types: the vendor's Python ``DataType`` and the full ``ge::DataType`` set.

``DataType`` is the vendor's plain ``Enum`` (not an ``IntEnum``: members do not
compare equal to ints) with its 14 members in the vendor's declaration order
(docs/reference/python-api.md §2). The native layer also accepts every ``ge::DataType`` value,
including the sub-byte types the Python enum lacks; ``GeDataType`` names them all
(docs/reference/cpp-api.md §2.4). Element sizes are the LLM-DataDist core's; the mock checks them
in C, this table is for documentation and for ``CacheDesc.size``.

numpy is imported only when one of the numpy helpers is first used, as in the
vendor module.
"""
from __future__ import annotations

from enum import Enum, IntEnum
from typing import Any


class DataType(Enum):
    """The vendor's ``llm_datadist.DataType``."""

    DT_FLOAT = 0
    DT_FLOAT16 = 1
    DT_BF16 = 27
    DT_INT8 = 2
    DT_INT16 = 6
    DT_UINT16 = 7
    DT_UINT8 = 4
    DT_INT32 = 3
    DT_INT64 = 9
    DT_UINT32 = 8
    DT_UINT64 = 10
    DT_BOOL = 12
    DT_DOUBLE = 11
    DT_STRING = 13


class GeDataType(IntEnum):
    """Every ``ge::DataType`` enumerator the C++ API knows (docs/reference/cpp-api.md §2.4)."""

    DT_FLOAT = 0
    DT_FLOAT16 = 1
    DT_INT8 = 2
    DT_INT32 = 3
    DT_UINT8 = 4
    DT_INT16 = 6
    DT_UINT16 = 7
    DT_UINT32 = 8
    DT_INT64 = 9
    DT_UINT64 = 10
    DT_DOUBLE = 11
    DT_BOOL = 12
    DT_STRING = 13
    DT_DUAL_SUB_INT8 = 14
    DT_DUAL_SUB_UINT8 = 15
    DT_COMPLEX64 = 16
    DT_COMPLEX128 = 17
    DT_QINT8 = 18
    DT_QINT16 = 19
    DT_QINT32 = 20
    DT_QUINT8 = 21
    DT_QUINT16 = 22
    DT_RESOURCE = 23
    DT_STRING_REF = 24
    DT_DUAL = 25
    DT_VARIANT = 26
    DT_BF16 = 27
    DT_UNDEFINED = 28
    DT_INT4 = 29
    DT_UINT1 = 30
    DT_INT2 = 31
    DT_UINT2 = 32
    DT_COMPLEX32 = 33
    DT_HIFLOAT8 = 34
    DT_FLOAT8_E5M2 = 35
    DT_FLOAT8_E4M3FN = 36
    DT_FLOAT8_E8M0 = 37
    DT_FLOAT6_E3M2 = 38
    DT_FLOAT6_E2M3 = 39
    DT_FLOAT4_E2M1 = 40
    DT_FLOAT4_E1M2 = 41
    DT_HIFLOAT4 = 42
    DT_HIFLOAT4_SCALE = 43


#: Bits per element as the LLM-DataDist core computes sizes; types without an
#: entry (DT_UNDEFINED, value 5, DT_HIFLOAT4_SCALE) are rejected at register time.
ELEMENT_BITS: dict[int, int] = {
    0: 32, 1: 16, 2: 8, 3: 32, 4: 8, 6: 16, 7: 16, 8: 32, 9: 64, 10: 64, 11: 64, 12: 8,
    13: 128, 14: 8, 15: 8, 16: 64, 17: 128, 18: 8, 19: 16, 20: 32, 21: 8, 22: 16,
    23: 64, 24: 128, 25: 40, 26: 64, 27: 16, 29: 4, 30: 1, 31: 2, 32: 2, 33: 32,
    34: 8, 35: 8, 36: 8, 37: 8, 38: 6, 39: 6, 40: 4, 41: 4, 42: 4,
}


def data_type_value(data_type: "DataType | GeDataType | int", name: str = "data_type") -> int:
    """The ``ge::DataType`` number of a ``DataType`` member, ``GeDataType`` or int.

    Raises:
        TypeError: not a ``DataType``, ``GeDataType`` or ``int``.
        ValueError: an int outside int32.
    """
    if isinstance(data_type, DataType):
        return int(data_type.value)
    if isinstance(data_type, int):
        value = int(data_type)
        if not -(2**31) <= value < 2**31:
            raise ValueError(f"{name} {value} is outside int32")
        return value
    raise TypeError(f"{name} must be a DataType, GeDataType or int, not {type(data_type).__name__}")


_NP_NAMES = {
    DataType.DT_FLOAT: "float32", DataType.DT_FLOAT16: "float16", DataType.DT_INT8: "int8",
    DataType.DT_INT32: "int32", DataType.DT_UINT8: "uint8", DataType.DT_INT16: "int16",
    DataType.DT_UINT16: "uint16", DataType.DT_UINT32: "uint32", DataType.DT_INT64: "int64",
    DataType.DT_UINT64: "uint64", DataType.DT_DOUBLE: "double", DataType.DT_BOOL: "bool_",
    DataType.DT_STRING: "bytes_", DataType.DT_BF16: "float16",
}


def __getattr__(name: str) -> Any:
    # The vendor module builds these lazily so that importing it does not import numpy.
    if name == "dtype_to_np_dtype":
        import numpy as np

        return {dt: getattr(np, np_name) for dt, np_name in _NP_NAMES.items()}
    if name == "valid_np_dtypes":
        return list(__getattr__("dtype_to_np_dtype").values())
    if name == "np_dtype_to_dtype":
        import numpy as np

        return {getattr(np, np_name): dt for dt, np_name in _NP_NAMES.items() if dt is not DataType.DT_BF16}
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
