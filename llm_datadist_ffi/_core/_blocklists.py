"""Fast paths for the block lists of both Python tiers.

A block list of n entries is checked and converted on every transfer, so its cost must
stay linear with a small constant up to the largest request (docs/reference/semantics.md
§15: about 65,000 blocks in one direct-mode pull). A loop in Python costs about a
microsecond per entry; the helpers here do the common case in C-level passes (``map``,
``array``, numpy) and answer ``None`` when a list is anything but plain: the caller then
takes its element-by-element path, which is the one that words the errors. So the fast
path never decides an error, and every error stays exactly what the slow path says.

This module imports only numpy, the standard library and ``_cints``.
"""
from __future__ import annotations

import array
from typing import Any, Optional, Sequence

import numpy as np

from ._cints import plain_ints

__all__ = ["U64_CODE", "ints_to_u64", "packed_u64", "plain_u64", "smallest_repeat"]

# The array typecode of a uint64: 'Q' is unsigned long long, 8 bytes wherever numpy and
# cffi run; a platform where it is not would send wrong block indexes, so it cannot import.
U64_CODE = "Q"
if array.array(U64_CODE).itemsize != 8:
    raise ImportError(f"llm_datadist_ffi: array typecode {U64_CODE!r} is not 8 bytes on this platform")

# Counting the values costs about 1 ns per entry plus 8 bytes to zero per value up to the
# largest; a sort costs 25-35 ns per entry. While the largest value is below this many
# per entry counting wins in time and stays within 128 bytes of scratch per entry; block
# tables index one cache, so the sort is for lists of scattered, huge indexes.
_COUNT_SPAN_PER_ENTRY = 16
_COUNT_SPAN_FLOOR = 4096
# Each numpy call costs about a microsecond however short the array; short lists (most
# transfers) are cheaper in plain Python.
_SHORT_LIST = 64
# Up to this length a set of the values (about 30 ns per entry) finds whether a list has a
# repeat sooner than numpy's comparisons and counting (several microseconds at any length).
_SET_LIST = 256


def plain_u64(values: Sequence[Any]) -> Optional["np.ndarray[Any, Any]"]:
    """The list or tuple ``values`` as a C-contiguous ``uint64`` array when every element
    is a plain ``int`` or ``bool`` within uint64; otherwise None."""
    if not values:
        return np.empty(0, dtype=np.uint64)
    if not plain_ints(values):
        return None
    if len(values) > _SHORT_LIST:
        return _packed(values)
    # numpy's fixed cost is the smaller one here; ``min`` first, as numpy 1.x wraps a
    # negative int where numpy 2 raises
    try:
        return np.array(values, dtype=np.uint64) if min(values) >= 0 else None
    except OverflowError:   # above 2**64 - 1
        return None


def packed_u64(values: Sequence[Any]) -> Optional["array.array[int]"]:
    """The non-empty list or tuple ``values`` packed as an ``array.array`` of typecode
    ``U64_CODE`` (a buffer C reads as ``uint64_t[]``, no numpy involved) when every
    element is a plain ``int`` or ``bool`` within uint64; otherwise None."""
    if not values or not plain_ints(values):
        return None
    try:
        return array.array(U64_CODE, values)
    except OverflowError:   # below 0 or above 2**64 - 1
        return None


def ints_to_u64(values: Sequence[Any]) -> Optional["np.ndarray[Any, Any]"]:
    """As ``plain_u64`` for a list or tuple whose elements passed an ``int`` type check
    already: a long one is not looked at again before it is packed. ``array.array``
    refuses anything but an integer (Python's or numpy's) within uint64, so the answer is
    None for a value outside uint64 or a non-integer whatever the check said."""
    return _packed(values) if len(values) > _SHORT_LIST else plain_u64(values)


def _packed(values: Sequence[Any]) -> Optional["np.ndarray[Any, Any]"]:
    """``values`` packed by ``array.array`` in one C loop (numpy's own conversion is three
    times slower per element) and used by numpy as it is; None for an element outside
    uint64 or one that is not an integer."""
    try:
        packed = array.array(U64_CODE, values)
    except (OverflowError, TypeError):
        return None
    return np.frombuffer(packed, dtype=np.uint64)


def smallest_repeat(blocks: Any) -> Optional[int]:
    """The smallest value that occurs more than once in the one-dimensional integer
    array ``blocks`` (non-negative values), or None; ``blocks`` may also be an
    ``array.array`` of typecode ``U64_CODE``.

    A short list is put in a set, and sorted only when it holds a repeat. Of longer ones,
    an ascending list has none; other block tables are dense, so their values are
    counted (linear); a list whose largest value is far larger than its length is sorted.
    """
    count = len(blocks)
    if count < 2:
        return None
    if count <= _SET_LIST:
        values = blocks.tolist()
        if len(set(values)) == count:
            return None
        values.sort()
        return next((b for a, b in zip(values, values[1:]) if a == b), None)
    if not isinstance(blocks, np.ndarray):
        blocks = np.frombuffer(blocks, dtype=np.uint64)
    if (blocks[1:] > blocks[:-1]).all():   # ascending, as most block tables are
        return None
    high = int(blocks.max())
    if high < _COUNT_SPAN_PER_ENTRY * count + _COUNT_SPAN_FLOOR:
        # below 2**63 here, so a uint64 array reads the same as int64, which bincount takes
        counts = np.bincount(blocks.view(np.int64) if blocks.dtype == np.uint64 else blocks.astype(np.intp, copy=False))
        repeated = counts > 1
        first = int(repeated.argmax())
        return first if repeated[first] else None
    ordered = np.sort(blocks, kind="stable")
    equal = ordered[1:] == ordered[:-1]
    return int(ordered[1:][equal][0]) if equal.any() else None

