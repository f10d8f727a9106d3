"""Declared options: each option of a configuration class written once.

``LlmConfig`` turns typed attributes into the ``Dict[str, str]`` that
``LLMDataDist.init`` takes. Each of them has a default, a setter check, a getter and a
rule for its entry in that dict. Written as properties they are four things in four
places, the last a table that names attributes in strings; here an option is one class
attribute, an :class:`Option`, and the dict is rendered from the options a class
declares, in the order it declares them (which is the vendor's emission order).

:class:`Checked` is the part without a key: a checked attribute with a docstring, for
the transfer configs and ``LLMClusterInfo``, whose fields the vendor checks the same
way but never turns into options.

Where a value lives: in the instance's ``__dict__``, under the attribute's name with a
leading underscore (``_device_id``). An absent entry means "never set", and the getter
answers it with the default. The vendor keeps that distinction: some options are
emitted once set, whatever the value, and not at all before.
"""
from __future__ import annotations

from typing import (
    Any, Callable, Dict, Final, Generic, Iterable, List, NoReturn, Optional, Tuple, Type, TypeVar, Union, cast,
    overload,
)

from ._vendor_checks import IntRange, check_int, check_type

__all__ = [
    "Check", "Checked", "Option", "Reset", "Rule", "declared_options", "render_options",
    "of_type", "reset_by_none", "int_in",
    "always", "flag_when_set", "verbatim", "when_non_empty", "when_not_none", "when_set", "when_true",
]

S = TypeVar("S")  # what the setter takes
G = TypeVar("G")  # what the check stores
D = TypeVar("D")  # the default; the getter gives a G or a D
T = TypeVar("T")
_Self = TypeVar("_Self", bound="Checked[Any, Any, Any]")


class Reset(Exception):
    """Raised by a check to put the attribute back to "never set" (for some of the
    vendor's options ``None`` does that) instead of storing a value."""


Check = Callable[[str, S], G]
"""``check(name, value)``: the vendor's checks of a setter, raising its exceptions;
returns the value to store (possibly converted), or raises ``Reset``."""

Rule = Callable[[Tuple[str, ...], Any, bool], Iterable[Tuple[str, str]]]
"""``rule(keys, value, is_set)``: an option's entries in the options dict; ``value`` is
the stored value, or the default when ``is_set`` is False."""

# The default of an attribute that has none: reading it before it is set raises
# AttributeError, as a plain attribute would.
_NO_DEFAULT: Final[Any] = object()


class Checked(Generic[S, G, D]):
    """An attribute whose setter runs ``check`` and stores what it returns, and whose
    getter gives the stored value, unconverted (as the vendor's getters do), else the
    default.

    The default is a value, or made by ``factory`` on first read and stored (for a dict
    that callers fill in place), or absent.
    """

    @overload
    def __init__(self, check: Check[S, G], *, doc: str, default: D) -> None: ...

    @overload
    def __init__(self, check: Check[S, G], *, doc: str, factory: Callable[[], D]) -> None: ...

    @overload
    def __init__(self: Checked[S, G, NoReturn], check: Check[S, G], *, doc: str) -> None: ...

    def __init__(self, check: Check[S, G], *, doc: str, default: Any = _NO_DEFAULT,
                 factory: Optional[Callable[[], Any]] = None) -> None:
        self._setup(check, doc, default, factory)

    def _setup(self, check: Check[S, G], doc: str, default: Any, factory: Optional[Callable[[], Any]]) -> None:
        self.check = check
        self.default = default
        self.factory = factory
        self.__doc__ = doc
        self.name = ""
        self.attr = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name
        self.attr = "_" + name

    @overload
    def __get__(self: _Self, instance: None, owner: Optional[type] = None) -> _Self: ...

    @overload
    def __get__(self, instance: object, owner: Optional[type] = None) -> Union[G, D]: ...

    def __get__(self, instance: Optional[object], owner: Optional[type] = None) -> Any:
        if instance is None:
            return self
        return self.value_of(instance)

    def __set__(self, instance: object, value: S) -> None:
        try:
            instance.__dict__[self.attr] = self.check(self.name, value)
        except Reset:
            instance.__dict__.pop(self.attr, None)

    def is_set(self, instance: object) -> bool:
        """Whether ``instance`` holds a value of its own (set, or made by the factory)."""
        return self.attr in instance.__dict__

    def value_of(self, instance: object) -> Union[G, D]:
        """The stored value, else the default."""
        values = instance.__dict__
        if self.attr in values:
            return cast(Union[G, D], values[self.attr])
        if self.factory is not None:
            made: D = self.factory()
            values[self.attr] = made
            return made
        if self.default is _NO_DEFAULT:
            raise AttributeError(f"{type(instance).__name__!r} object has no attribute {self.name!r}")
        return cast(D, self.default)


class Option(Checked[S, G, D]):
    """A :class:`Checked` attribute that is also an engine option: ``emit`` gives its
    entries of the options dict under ``keys`` (one key for most; ``device_id`` has
    two, ``ge_options`` brings its own)."""

    @overload
    def __init__(self, *keys: str, check: Check[S, G], emit: Rule, doc: str, default: D) -> None: ...

    @overload
    def __init__(self, *keys: str, check: Check[S, G], emit: Rule, doc: str, factory: Callable[[], D]) -> None: ...

    def __init__(self, *keys: str, check: Check[S, G], emit: Rule, doc: str, default: Any = _NO_DEFAULT,
                 factory: Optional[Callable[[], Any]] = None) -> None:
        self._setup(check, doc, default, factory)
        self.keys = keys
        self.emit = emit

    def render(self, instance: object) -> List[Tuple[str, str]]:
        """This option's entries for ``instance``, in order."""
        return list(self.emit(self.keys, self.value_of(instance), self.is_set(instance)))


def declared_options(cls: Type[Any]) -> Tuple[Option[Any, Any, Any], ...]:
    """The options ``cls`` declares, base classes first, each in declaration order."""
    found: Dict[str, Option[Any, Any, Any]] = {}
    for klass in reversed(cls.__mro__):
        for name, value in vars(klass).items():
            if isinstance(value, Option):
                found[name] = value
    return tuple(found.values())


def render_options(instance: object, options: Dict[str, str]) -> Dict[str, str]:
    """Add the entries of every option of ``instance`` to ``options``, in declaration
    order, and return it: a later entry overwrites an earlier one of the same key,
    which keeps its position, and no key is removed."""
    for option in declared_options(type(instance)):
        for key, value in option.render(instance):
            options[key] = value
    return options


# ---- checks -------------------------------------------------------------------------


def of_type(*kinds: Type[T]) -> Check[Optional[T], Optional[T]]:
    """The vendor's type check: ``isinstance(value, kinds)``; ``None`` passes and is stored."""
    def check(name: str, value: Optional[T]) -> Optional[T]:
        check_type(value, kinds, name)
        return value
    return check


def reset_by_none(kind: Type[T]) -> Check[Optional[T], T]:
    """The vendor's type check, and ``None`` puts the option back to unset."""
    def check(name: str, value: Optional[T]) -> T:
        check_type(value, kind, name)
        if value is None:
            raise Reset
        return value
    return check


def int_in(int_range: IntRange) -> Check[int, int]:
    """The vendor's range check of a C integer type (``None`` and non-ints: ``TypeError``;
    outside the range: ``ValueError``); stores ``int(value)``."""
    def check(name: str, value: int) -> int:
        return check_int(value, name, int_range)
    return check


# ---- emission rules -----------------------------------------------------------------
# Each is one of the vendor's "emitted when" conditions; the value text is str(value)
# except where the vendor emits the stored text as it is.


def when_not_none(keys: Tuple[str, ...], value: Any, is_set: bool) -> List[Tuple[str, str]]:
    """``str(value)`` unless the value is ``None``."""
    return [] if value is None else [(keys[0], str(value))]


def when_non_empty(keys: Tuple[str, ...], value: Any, is_set: bool) -> List[Tuple[str, str]]:
    """The text as stored, when it is not empty (a stored ``None`` counts as empty)."""
    return [(keys[0], value)] if value else []


def when_set(keys: Tuple[str, ...], value: Any, is_set: bool) -> List[Tuple[str, str]]:
    """``str(value)`` once set, also for a value equal to the default."""
    return [(keys[0], str(value))] if is_set else []


def flag_when_set(keys: Tuple[str, ...], value: Any, is_set: bool) -> List[Tuple[str, str]]:
    """``"1"``/``"0"`` once set, also for ``False``."""
    return [(keys[0], "1" if value else "0")] if is_set else []


def when_true(keys: Tuple[str, ...], value: Any, is_set: bool) -> List[Tuple[str, str]]:
    """``"1"`` for the value ``True`` only."""
    return [(keys[0], "1")] if value is True else []


def always(keys: Tuple[str, ...], value: Any, is_set: bool) -> List[Tuple[str, str]]:
    """``str(value)``, the default included."""
    return [(keys[0], str(value))]


def verbatim(keys: Tuple[str, ...], value: Any, is_set: bool) -> List[Tuple[str, str]]:
    """Every entry of a dict value, as it is (pass-through options)."""
    return list(value.items())
