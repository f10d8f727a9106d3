"""C integer types as both Python tiers check them: each type's bounds, and the
conversion of one Python value, or the first bad value of a list, into such a type.

The tiers accept different Python types (the C++-shaped tier takes numpy integers too,
the vendor's takes ``int`` and its subclasses only) and word their errors differently
(the vendor tier's words are part of its contract). So a tier makes its converter here
from its own accepted types and error factories; the comparison with the bounds is
this module's alone.

This module is pure Python and imports nothing from the package: the vendor's types
and the configuration classes use it, and importing them must not load the native
library. The conversions that need cffi are in ``_marshal``.
"""
from __future__ import annotations

from typing import Any, Callable, Final, Iterable, NamedTuple, Optional, Sequence, Tuple, Type, Union

__all__ = ["CInt", "UINT16", "UINT32", "UINT64", "INT32", "INT64", "IntError", "IntConverter",
           "int_converter", "first_outside", "plain_ints"]


class CInt(NamedTuple):
    """A C integer type: its name as messages give it (also its ``<name>_t`` in C), and
    its lowest and highest values."""

    name: str
    low: int
    high: int


UINT16: Final = CInt("uint16", 0, 2**16 - 1)
UINT32: Final = CInt("uint32", 0, 2**32 - 1)
UINT64: Final = CInt("uint64", 0, 2**64 - 1)
INT32: Final = CInt("int32", -(2**31), 2**31 - 1)
INT64: Final = CInt("int64", -(2**63), 2**63 - 1)

IntError = Callable[[str, Any, CInt], Exception]
"""The error for a parameter's name, the value given, and the C type that cannot take it."""

IntConverter = Callable[[Any, str, CInt], int]
"""A tier's conversion of a value, named for messages, into an int of a C type."""


def int_converter(integers: Union[Type[Any], Tuple[Type[Any], ...]], not_an_int: IntError,
                  outside: IntError) -> IntConverter:
    """The conversion of a value into an int of a C type, for a tier that accepts
    instances of ``integers`` (``bool`` is an ``int``, so it passes wherever ``int``
    does).

    The converter raises ``not_an_int(name, value, c_type)`` for a value of another
    type and ``outside(name, value, c_type)`` for one beyond the type's bounds; it
    returns ``int(value)``.
    """
    def convert(value: Any, name: str, c_type: CInt) -> int:
        if isinstance(value, integers):
            number = int(value)
            if c_type.low <= number <= c_type.high:
                return number
            raise outside(name, value, c_type)
        raise not_an_int(name, value, c_type)
    return convert


def first_outside(values: Iterable[Any], c_type: CInt) -> Optional[Tuple[int, Any]]:
    """The position and the value of the first of ``values`` (integers, Python's or
    numpy's) that ``c_type`` cannot hold, or None when it holds them all."""
    low, high = c_type.low, c_type.high
    for index, value in enumerate(values):
        if not low <= value <= high:
            return index, value
    return None


_PLAIN = frozenset((int, bool))
# below this length a loop beats building a set of the element types
_TINY_LIST = 4


def plain_ints(values: Sequence[Any]) -> bool:
    """Whether every element of the list or tuple ``values`` is exactly an ``int`` or a
    ``bool``, found in C-level passes (subclasses such as ``IntEnum`` and numpy scalars
    are not plain: the callers' own loops decide about those)."""
    if len(values) <= _TINY_LIST:
        for value in values:
            if type(value) is not int and type(value) is not bool:
                return False
        return True
    return set(map(type, values)) <= _PLAIN
