"""Data types and the byte layout of one tensor (docs/reference/semantics.md §2.2, §2.3, PR-17).

PR-17: a tensor whose byte size is not a multiple of ``shape[0]`` gets the stride
rounded down, as the vendor computes it (a lint; a refusal under strict mode); one
smaller than ``shape[0]`` (a stride of 0) and a sub-byte tensor above 2^31 - 1 bits
are refused (guards).

Written from the table of docs/reference/cpp-api.md §2.4: byte types have an element size in bytes,
sub-byte types a number of bits; value 5, DT_UNDEFINED, DT_HIFLOAT4_SCALE and
anything outside the enum have no size and are rejected at register/allocate.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence, Union

from .codes import DataType as G
from .outcome import strict

INT64_MAX = 2**63 - 1
SUB_BYTE_BIT_LIMIT = 2**31 - 1          # PR-17: E × bits of a sub-byte tensor

#: bytes per element of the byte types (DT_STRING and DT_STRING_REF count 16).
ELEMENT_BYTES: dict[int, int] = {
    G.DT_FLOAT: 4, G.DT_FLOAT16: 2, G.DT_INT8: 1, G.DT_INT32: 4, G.DT_UINT8: 1,
    G.DT_INT16: 2, G.DT_UINT16: 2, G.DT_UINT32: 4, G.DT_INT64: 8, G.DT_UINT64: 8,
    G.DT_DOUBLE: 8, G.DT_BOOL: 1, G.DT_STRING: 16, G.DT_DUAL_SUB_INT8: 1,
    G.DT_DUAL_SUB_UINT8: 1, G.DT_COMPLEX64: 8, G.DT_COMPLEX128: 16, G.DT_QINT8: 1,
    G.DT_QINT16: 2, G.DT_QINT32: 4, G.DT_QUINT8: 1, G.DT_QUINT16: 2, G.DT_RESOURCE: 8,
    G.DT_STRING_REF: 16, G.DT_DUAL: 5, G.DT_VARIANT: 8, G.DT_BF16: 2, G.DT_COMPLEX32: 4,
    G.DT_HIFLOAT8: 1, G.DT_FLOAT8_E5M2: 1, G.DT_FLOAT8_E4M3FN: 1, G.DT_FLOAT8_E8M0: 1,
}

#: bits per element of the sub-byte types.
ELEMENT_BITS: dict[int, int] = {
    G.DT_INT4: 4, G.DT_UINT1: 1, G.DT_INT2: 2, G.DT_UINT2: 2, G.DT_FLOAT6_E3M2: 6,
    G.DT_FLOAT6_E2M3: 6, G.DT_FLOAT4_E2M1: 4, G.DT_FLOAT4_E1M2: 4, G.DT_HIFLOAT4: 4,
}


@dataclass(frozen=True)
class Layout:
    """One tensor of a cache: ``TS`` bytes, ``D = shape[0]`` batches (and blocks) of
    ``stride = TS / D`` bytes each."""

    tensor_size: int
    count: int
    stride: int
    rounded: bool = False        # PR-17 lint: TS is not a multiple of D, the stride is TS // D


def tensor_layout(shape: Sequence[int], data_type: Union[int, G]) -> Union[Layout, str]:
    """The layout of one tensor, or the reason it is ``PARAM_INVALID`` (semantics.md §2.3, PR-17).

    The shape rank (1..31) is checked by the callers, at its own place in the order.
    """
    dims = [int(d) for d in shape]
    if any(d <= 0 for d in dims):
        return f"a dim of {dims} is not > 0"
    elements = 1
    for d in dims:
        elements *= d
    if elements > INT64_MAX:
        return f"the element count of {dims} overflows int64"
    dt = int(data_type)
    if dt in ELEMENT_BYTES:
        size = elements * ELEMENT_BYTES[dt]
        if size > INT64_MAX:
            return f"the byte size of {dims} x {ELEMENT_BYTES[dt]} B overflows int64"
    elif dt in ELEMENT_BITS:
        bits = elements * ELEMENT_BITS[dt]
        if bits > SUB_BYTE_BIT_LIMIT:
            return f"{elements} elements x {ELEMENT_BITS[dt]} bits exceed 2^31 - 1 bits (PR-17)"
        size = -(-bits // 8)
    else:
        return f"data type {dt} has no size"
    if size < dims[0]:
        return f"tensor size {size} is below shape[0] = {dims[0]}: a stride of 0 (PR-17 guard)"
    if size % dims[0] and strict():
        return f"tensor size {size} is not a multiple of shape[0] = {dims[0]} (PR-17, strict)"
    return Layout(size, dims[0], size // dims[0], size % dims[0] != 0)
