"""The vendor Python layer's argument checks, as one small set of helpers.

docs/reference/python-api.md §0 describes the vendor's three kinds of check, and their behaviour is
part of the contract that client code sees:

* a *type check* is ``isinstance`` against the listed classes (``bool`` passes where
  ``int`` does, subclasses pass) and lets ``None`` through unless the row says
  otherwise; for "list of int" every element is checked too;
* a *range check* (``uint16``, ``uint32``, ``uint64``, ``int32``, ``int64``) first
  rejects ``None`` and non-ints with ``TypeError``, then an int outside the C type
  with ``ValueError``;
* a *rule check* raises ``LLMException`` with ``LLM_PARAM_INVALID`` and a message
  naming the rule.

The vendor lets a ``None`` through a type check and fails later with whatever the
first use of it raises. The project rule (docs/reference/python-api.md §0) keeps that exception
type but raises it before any native call with a message naming the parameter;
``none_error`` builds those messages so that they read alike everywhere.

Every message names the parameter and the rule. Vendor texts that clients may match
are kept verbatim where docs/reference/python-api.md quotes them.

The bounds of the C integer types and the range conversion itself are shared with
the C++-shaped tier (``_cints``); the words of the errors are this tier's.

This module is pure Python and imports only ``status`` and ``_cints`` from the package.
"""
from __future__ import annotations

import socket
from typing import Any, Final, NoReturn, Sequence, Tuple, Type, Union, cast

from .._core._cints import INT32, INT64, UINT16, UINT32, UINT64, CInt, int_converter, plain_ints
from ..status import LLMException, LLMStatusCode, ParamInvalidError

__all__ = [
    "INT32", "INT64", "UINT16", "UINT32", "UINT64", "INVALID_ID",
    "IntRange", "check_int", "check_type", "check_int_list", "check_int_elements", "check_int_items",
    "check_layer_range",
    "int_to_ip", "ip_to_int", "param_invalid", "raise_param_invalid", "type_name", "none_error",
]

IntRange = CInt
"""A C integer type as (name, lowest, highest)."""

#: The id the vendor uses for "no request / no prefix": ``2**64 - 1``.
INVALID_ID: Final = 2**64 - 1

TypeSpec = Union[Type[Any], Tuple[Type[Any], ...]]


def type_name(value: object) -> str:
    """The class name of ``value`` as messages show it (``None`` for ``None``)."""
    return "None" if value is None else type(value).__name__


def _expected(types: TypeSpec) -> str:
    if isinstance(types, tuple):
        return " | ".join(t.__name__ for t in types)
    return types.__name__


def param_invalid(message: str) -> LLMException:
    """The vendor's rule-check error: ``LLMException`` with ``LLM_PARAM_INVALID``.

    The instance is of the package's ``ParamInvalidError``, a subclass of
    ``LLMException`` and nothing else, so that it is caught exactly where the vendor's
    ``LLMException(message, status_code=LLM_PARAM_INVALID)`` is caught, and alike with
    the core's ``LLM_PARAM_INVALID`` failures.
    """
    return ParamInvalidError(message, status_code=LLMStatusCode.LLM_PARAM_INVALID)


def raise_param_invalid(message: str) -> NoReturn:
    """Raise ``param_invalid(message)``."""
    raise param_invalid(message)


def none_error(name: str, expected: str, exc_type: Type[Exception] = TypeError) -> Exception:
    """The project rule's error for a ``None`` the vendor would fail on later.

    ``exc_type`` is the type the vendor's first use of the ``None`` raises
    (``TypeError`` for ``len()``, iteration, comparison or a native conversion;
    ``AttributeError`` for attribute access).
    """
    return exc_type(f"{name} must be {expected}, not None")


def check_type(value: object, types: TypeSpec, name: str, *, allow_none: bool = True) -> None:
    """The vendor's type check: ``isinstance(value, types)``.

    Raises:
        TypeError: ``value`` is not an instance of ``types`` (``None`` only when
            ``allow_none`` is False).
    """
    if value is None and allow_none:
        return
    if not isinstance(value, types):
        raise TypeError(f"{name} must be {_expected(types)}, not {type_name(value)}")


def check_int_list(value: object, name: str, *, containers: TypeSpec = (list, tuple),
                   allow_none: bool = True) -> None:
    """The vendor's type check for "a ``containers`` of ``int``": the container, then
    every element.

    Raises:
        TypeError: not one of ``containers`` (``None`` only when ``allow_none`` is
            False), or an element that is not an ``int``.
    """
    check_type(value, containers, name, allow_none=allow_none)
    if value is not None:
        check_int_elements(cast(Sequence[Any], value), name)


def check_int_elements(items: Sequence[Any], name: str) -> None:
    """The vendor's type check of the elements of a list or tuple of ``int``.

    Raises:
        TypeError: an element that is not an ``int``, named ``name[index]``.
    """
    if plain_ints(items):   # the common case in C-level passes
        return
    for index, item in enumerate(items):
        if not isinstance(item, int):
            raise TypeError(f"{name}[{index}] must be int, not {type_name(item)}")


def check_int_items(values: object, name: str, int_range: IntRange) -> None:
    """``check_int`` on every element of a list or tuple (``None`` is an empty one),
    ``name[index]`` naming the element; the first failing element decides the error.

    Raises:
        TypeError: an element that is ``None`` or not an ``int``.
        ValueError: an element outside the C type's range.
    """
    items: Any = values or ()
    # block lists reach 65,000 entries; plain ints in range are decided by three C-level
    # passes, anything else by the loop that words the error
    if plain_ints(items) and (not items or int_range.low <= min(items) <= max(items) <= int_range.high):
        return
    for index, item in enumerate(items):
        check_int(item, f"{name}[{index}]", int_range)


def _not_an_int(name: str, value: Any, int_range: IntRange) -> TypeError:
    return TypeError(f"{name} must be an int ({int_range.name}), not {type_name(value)}")


def _int_outside(name: str, value: Any, int_range: IntRange) -> ValueError:
    return ValueError(f"{name} is {value}, outside the {int_range.name} range [{int_range.low}, {int_range.high}]")


check_int: Final = int_converter(int, _not_an_int, _int_outside)
"""``check_int(value, name, int_range)``: the vendor's range check for a C integer
type; returns the value as an int.

Raises:
    TypeError: ``value`` is ``None`` or not an ``int`` (``bool`` is an int).
    ValueError: ``value`` lies outside the C type's range.
"""


def check_layer_range(value: object, name: str, *, allow_none: bool = True) -> None:
    """The layer-range check of pushes and async transfers (docs/reference/python-api.md §9.1).

    ``None`` passes unless ``allow_none`` is False; otherwise the value must be a
    ``range`` with step 1 and ``0 <= start < stop``.

    Raises:
        TypeError: not a ``range`` (``None`` when ``allow_none`` is False).
        LLMException: ``LLM_PARAM_INVALID`` for a step other than 1, or a range that
            is empty, descending or starts below 0.
    """
    if value is None and allow_none:
        return
    if not isinstance(value, range):
        raise TypeError(f"{name} must be a range, not {type_name(value)}")
    if value.step != 1:
        raise_param_invalid(f"{name} step must be 1, got {value!r}")
    if not 0 <= value.start < value.stop:
        raise_param_invalid(f"{name} must satisfy 0 <= start < stop, got {value!r}")


def ip_to_int(ip: str) -> int:
    """The vendor's IPv4 conversion (docs/reference/python-api.md §5): ``inet_aton``, little-endian.

    ``"a.b.c.d"`` becomes ``a | b << 8 | c << 16 | d << 24``; the C library's shorthand
    forms (``"127.1"``) are accepted.

    Raises:
        RuntimeError: ``"Can not parse ip str:<ip>"`` (a plain ``RuntimeError``, not
            an ``LLMException``) when the C library cannot parse ``ip``.
    """
    try:
        packed = socket.inet_aton(ip)
    except (OSError, ValueError):  # OSError: unparsable; ValueError: embedded NUL
        raise RuntimeError(f"Can not parse ip str:{ip}") from None
    return int.from_bytes(packed, "little")


def int_to_ip(ip: int) -> str:
    """The inverse of ``ip_to_int``: the dotted text of a vendor ip integer.

    Raises:
        OverflowError: ``ip`` does not fit 32 bits (callers check the range first).
    """
    return socket.inet_ntoa(ip.to_bytes(4, "little"))
