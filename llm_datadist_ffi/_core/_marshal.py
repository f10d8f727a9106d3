"""Python values into the structs and arrays of the C ABI, for both Python tiers.

The C++-shaped tier (``native``) and the vendor's (``v2``) sit side by side over
``_capi``. Each checks its arguments its own way, since the order of the checks, the
exception types and their words are part of each tier's contract; then it hands the
checked values to the conversions here. A conversion that can still find a value
wrong (an option that is not a str, a block index outside uint64) raises the error the
caller's factory builds, so the words stay the tier's.

Block lists are converted on every transfer, so they have a fast path (``blocks_converter``):
a C-contiguous ``uint64`` numpy array or a list of plain ints within uint64 reaches C
without a Python loop; anything else takes the caller's own path, which checks the
value and words its errors. ``_blocklists`` holds the numeric helpers beneath (packing,
finding a repeat), ``_cints`` the C integer types.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from .. import lint
from ._blocklists import ints_to_u64, packed_u64, smallest_repeat
from ._capi import ffi
from ._cints import INT64, UINT64, CInt, first_outside

if TYPE_CHECKING:
    import array

__all__ = [
    "CData", "c_array", "OptionError", "c_options", "c_cache_desc", "Endpoint", "ClusterEntry", "c_clusters",
    "BlockError", "Blocks", "U64Buffer", "blocks_converter", "block_pointer", "u64_block_array", "u64_block_list",
    "lint_repeated_blocks",
]

CData = Any
"""A cffi value."""

_U64_ARRAY = ffi.typeof("uint64_t[]")
_U64_DTYPE = np.dtype(np.uint64)


def c_array(c_type: CInt, values: Sequence[int]) -> CData:
    """``values`` (within ``c_type``) as a C array of that type; NULL when empty."""
    return ffi.new(f"{c_type.name}_t[]", values) if values else ffi.NULL


# ---- options ---------------------------------------------------------------------------------

OptionError = Callable[[str, Any, Any], Exception]
"""The error for an option map's name and a key and value that are not both str."""


def c_options(options: Mapping[Any, Any], name: str, refuse: OptionError) -> Tuple[CData, int, List[CData]]:
    """An option map as ``lldd_option[]``, its length, and the strings C points into
    (keep them referenced while C reads the array).

    Raises:
        Exception: ``refuse(name, key, value)`` for the first key or value that is
            not a ``str``.
    """
    keep: List[CData] = []
    array = ffi.new("lldd_option[]", max(len(options), 1))
    for index, (key, value) in enumerate(options.items()):
        if not isinstance(key, str) or not isinstance(value, str):
            raise refuse(name, key, value)
        c_key, c_value = ffi.new("char[]", key.encode()), ffi.new("char[]", value.encode())
        keep += [c_key, c_value]
        array[index].key, array[index].value = c_key, c_value
    return array, len(options), keep


# ---- cache descriptions ----------------------------------------------------------------------

def c_cache_desc(placement: int, num_tensors: int, data_type: int,
                 dims: Sequence[int]) -> Tuple[CData, List[CData]]:
    """A checked cache description as ``lldd_cache_desc *``, and the shape array it
    points to (keep it referenced while C reads the struct)."""
    shape = c_array(INT64, dims)
    desc = ffi.new("lldd_cache_desc *")
    desc.placement, desc.num_tensors, desc.data_type = placement, num_tensors, data_type
    desc.shape, desc.shape_len = shape, len(dims)
    return desc, [shape]


# ---- clusters --------------------------------------------------------------------------------

Endpoint = Tuple[bytes, int]
"""An IPv4 address as the dotted text C reads, and a port."""

ClusterEntry = Tuple[int, int, Sequence[Endpoint], Sequence[Endpoint]]
"""A checked cluster: remote cluster id, remote role type, local and remote endpoints."""


def c_clusters(entries: Sequence[ClusterEntry]) -> Tuple[CData, int, List[CData]]:
    """Checked clusters as ``lldd_cluster_info[]``, their count, and the arrays and
    strings C points into (keep them referenced while C reads the array)."""
    keep: List[CData] = []
    array = ffi.new("lldd_cluster_info[]", max(len(entries), 1))
    for index, (remote_id, role_type, local, remote) in enumerate(entries):
        entry = array[index]
        entry.remote_cluster_id, entry.remote_role_type = remote_id, role_type
        entry.local_ip_infos, entry.num_local_ip_infos = _c_endpoints(local, keep), len(local)
        entry.remote_ip_infos, entry.num_remote_ip_infos = _c_endpoints(remote, keep), len(remote)
    return array, len(entries), keep


def _c_endpoints(endpoints: Sequence[Endpoint], keep: List[CData]) -> CData:
    infos = ffi.new("lldd_ip_info[]", max(len(endpoints), 1))
    keep.append(infos)
    for index, (ip, port) in enumerate(endpoints):
        text = ffi.new("char[]", ip)
        keep.append(text)
        infos[index].ip, infos[index].port = text, port
    return infos


# ---- block lists -----------------------------------------------------------------------------

BlockError = Callable[[str, Optional[int], Any], Exception]
"""The error for a block list's name, the position of a block index outside uint64
(None for a numpy array's smallest value) and that index."""

Blocks = Tuple[CData, int, Any]
"""A block list for C: the ``uint64_t`` pointer (NULL when empty), the count, and the
object that holds the values (keep it referenced while C reads the pointer)."""

U64Buffer = Union["np.ndarray[Any, Any]", "array.array[int]"]


def blocks_converter(general: Callable[[Any, str], U64Buffer]) -> Callable[[Any, str], Blocks]:
    """A tier's conversion of a block list, named for messages, for C.

    A non-empty, C-contiguous one-dimensional ``uint64`` numpy array is used as it is,
    without a copy; a non-empty list or tuple of plain ints within uint64 is packed in
    one C loop, without numpy (which would add about a microsecond however short the
    list, and most transfers name a few blocks). Anything else goes to
    ``general(value, name)``, the tier's own path, which checks the value, raises the
    tier's errors, and returns it as a C-contiguous ``uint64`` numpy array or
    ``array.array``.
    """
    # A closure rather than a function taking ``general``: it is called on every
    # transfer, and a partial application would add a call's cost.
    def convert(value: Any, name: str) -> Blocks:
        # each fast case is taken only when nothing in it can fail
        if type(value) is np.ndarray:
            if value.dtype is _U64_DTYPE and value.ndim == 1 and value.size and value.flags.c_contiguous:
                return ffi.from_buffer(_U64_ARRAY, value), int(value.size), value
        elif type(value) is list or type(value) is tuple:
            packed = packed_u64(value)
            if packed is not None:
                return ffi.from_buffer(_U64_ARRAY, packed), len(packed), packed
        return block_pointer(general(value, name))
    return convert


def block_pointer(blocks: U64Buffer) -> Blocks:
    """A converted block list (a C-contiguous ``uint64`` numpy array or ``array.array``)
    for C."""
    if len(blocks) == 0:
        return ffi.NULL, 0, blocks
    return ffi.from_buffer(_U64_ARRAY, blocks), len(blocks), blocks


def u64_block_array(value: "np.ndarray[Any, Any]", name: str, refuse: BlockError) -> "np.ndarray[Any, Any]":
    """A one-dimensional integer numpy array as a C-contiguous ``uint64`` one (itself
    when it is one already).

    Raises:
        Exception: ``refuse(name, None, smallest)`` when it holds a negative value.
    """
    if value.dtype == np.uint64:
        return value if value.flags.c_contiguous else np.ascontiguousarray(value)
    if value.size and int(value.min()) < 0:
        raise refuse(name, None, int(value.min()))
    return np.ascontiguousarray(value, dtype=np.uint64)


def u64_block_list(values: Sequence[Any], name: str, refuse: BlockError) -> U64Buffer:
    """A list or tuple of integers (Python's or numpy's, their types checked by the
    caller) as a C-contiguous ``uint64`` array.

    Raises:
        Exception: ``refuse(name, position, value)`` for the first value outside uint64.
    """
    packed = ints_to_u64(values)
    if packed is not None:
        return packed
    bad = first_outside(values, UINT64)
    if bad is not None:
        raise refuse(name, *bad)
    return np.array(values, dtype=np.uint64)


def lint_repeated_blocks(blocks: U64Buffer, name: str, tag: str) -> None:
    """PR-5 (lint): a destination block listed twice; the last write wins on the device.
    ``blocks`` is a converted block list (the third member of ``Blocks``)."""
    repeated = smallest_repeat(blocks)
    if repeated is not None:
        lint.lint("PR-5", f"[{tag}] {name} contains block {repeated} more than once")

