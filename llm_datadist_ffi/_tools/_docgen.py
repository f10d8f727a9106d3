"""``python -m llm_datadist_ffi docs native-api``: the native API reference page.

The page is built from what ``llm_datadist_ffi.native`` exports (``__all__``) and from
the docstrings and signatures of those objects, so the reference cannot say something
the code does not. It is committed as docs/reference/native-api.md, and a test keeps
the committed page equal to :func:`render_native_api`: change a docstring or a
signature, then regenerate with the command in :data:`REGENERATE_COMMAND`.

Only public names appear: for a class, its constructor signature, its docstring, its
public methods and properties (names without a leading underscore, plus
``__enter__``/``__exit__`` when defined, which make the class a context manager); for
an enum, its members and values; for a constant, its value.
"""
from __future__ import annotations

import argparse
import dataclasses
import enum
import inspect
import sys
import typing
from typing import Any, Callable, Dict, List, Sequence

__all__ = ["GENERATED_NOTICE", "PAGES", "REGENERATE_COMMAND", "main", "render_native_api"]

REGENERATE_COMMAND = "python -m llm_datadist_ffi docs native-api > docs/reference/native-api.md"

GENERATED_NOTICE = (
    "<!-- Generated from the docstrings of llm_datadist_ffi.native by llm_datadist_ffi/_tools/_docgen.py; "
    f"do not edit. Regenerate with: {REGENERATE_COMMAND} -->"
)

# Dunder methods worth a line in the reference: they change how the class is used.
_DUNDERS_SHOWN = ("__enter__", "__exit__")


def _doc(obj: Any) -> str:
    """The object's own docstring, dedented; "" when it has none of its own."""
    text = obj.__dict__.get("__doc__") if isinstance(obj, type) else getattr(obj, "__doc__", None)
    return inspect.cleandoc(text) if text else ""


def _default(value: Any) -> str:
    # An enum member reads as it is written in code, not as its repr.
    if isinstance(value, enum.Enum):
        return f"{type(value).__name__}.{value.name}"
    return repr(value)


def _signature(func: Callable[..., Any], skip_self: bool, factories: Dict[str, str] | None = None) -> str:
    """``(a: int, b: str = 'x') -> int`` from the function's own annotations (strings,
    as this package postpones their evaluation), so the text does not depend on the
    Python version's repr of typing objects."""
    sig = inspect.signature(func)
    parts: List[str] = []
    star_done = False
    for index, param in enumerate(sig.parameters.values()):
        if skip_self and index == 0:
            continue
        text = param.name
        if param.kind is param.VAR_POSITIONAL:
            text, star_done = "*" + text, True
        elif param.kind is param.VAR_KEYWORD:
            text = "**" + text
        elif param.kind is param.KEYWORD_ONLY and not star_done:
            parts.append("*")
            star_done = True
        if param.annotation is not param.empty:
            text += f": {_annotation(param.annotation)}"
        if param.default is not param.empty:
            shown = (factories or {}).get(param.name) or _default(param.default)
            text += f" = {shown}" if param.annotation is not param.empty else f"={shown}"
        parts.append(text)
    result = f"({', '.join(parts)})"
    if sig.return_annotation is not sig.empty:
        result += f" -> {_annotation(sig.return_annotation)}"
    return result


def _annotation(annotation: Any) -> str:
    if isinstance(annotation, str):
        # a quoted forward reference inside a postponed annotation: 'LlmDataDist'
        quoted = len(annotation) > 1 and annotation[0] == annotation[-1] and annotation[0] in "'\""
        return annotation[1:-1] if quoted else annotation
    return _typing_text(annotation)


def _typing_text(obj: Any) -> str:
    """A typing object as it is written in code; typing's own repr changes between
    Python versions (``ForwardRef``), and the page must not."""
    if isinstance(obj, typing.ForwardRef):
        return obj.__forward_arg__
    args = typing.get_args(obj)
    origin = typing.get_origin(obj)
    if origin is typing.Union:
        return f"Union[{', '.join(_typing_text(a) for a in args)}]"
    if origin is not None:
        name = getattr(origin, "__name__", str(origin))
        return f"{name}[{', '.join(_typing_text(a) for a in args)}]" if args else name
    return getattr(obj, "__name__", repr(obj))


def _block(lines: List[str], text: str) -> None:
    if text:
        lines.extend([text, ""])


def _render_enum(name: str, cls: "type[enum.Enum]", lines: List[str]) -> None:
    base = "IntEnum" if issubclass(cls, int) else "Enum"
    lines.extend([f"### `{name}`", "", f"*{base}* (`{cls.__module__}.{cls.__qualname__}`)", ""])
    _block(lines, _doc(cls))
    lines.extend(["| member | value |", "|---|---|"])
    for member in cls:
        lines.append(f"| `{member.name}` | `{member.value!r}` |")
    lines.append("")


def _members(cls: type) -> List[str]:
    names = []
    for attr, value in cls.__dict__.items():
        if attr.startswith("_") and attr not in _DUNDERS_SHOWN:
            continue
        if isinstance(value, (property, staticmethod, classmethod)) or inspect.isfunction(value):
            names.append(attr)
    return names


def _factories(cls: type) -> Dict[str, str]:
    """A dataclass field built by a factory reads as the factory call (``list()``)
    instead of inspect's placeholder."""
    if not dataclasses.is_dataclass(cls):
        return {}
    return {f.name: f"{getattr(f.default_factory, '__name__', 'factory')}()" for f in dataclasses.fields(cls)
            if f.default_factory is not dataclasses.MISSING}


def _render_class(name: str, cls: type, lines: List[str]) -> None:
    constructor = getattr(cls, "__init__")      # the class's own, unbound: its first parameter is self
    signature = _signature(constructor, skip_self=True, factories=_factories(cls))
    signature = signature.removesuffix(" -> None")      # a constructor returns the instance
    lines.extend([f"### `{name}{signature}`", ""])
    _block(lines, _doc(cls))
    for attr in _members(cls):
        value = cls.__dict__[attr]
        if isinstance(value, property):
            returns = inspect.signature(value.fget).return_annotation if value.fget else inspect.Signature.empty
            kind = f": {_annotation(returns)}" if returns is not inspect.Signature.empty else ""
            lines.extend([f"#### `{name}.{attr}{kind}` (property)", ""])
            _block(lines, _doc(value.fget) if value.fget else "")
            continue
        func = value.__func__ if isinstance(value, (staticmethod, classmethod)) else value
        skip = not isinstance(value, staticmethod)
        lines.extend([f"#### `{name}.{attr}{_signature(func, skip_self=skip)}`", ""])
        _block(lines, _doc(func))


def render_native_api() -> str:
    """The Markdown reference of ``llm_datadist_ffi.native``, as committed."""
    from .. import native

    lines: List[str] = [GENERATED_NOTICE, "", "# The native API: `llm_datadist_ffi.native`", ""]
    _block(lines, _doc(native))
    enums: List[str] = []
    classes: List[str] = []
    functions: List[str] = []
    constants: List[str] = []
    for name in native.__all__:
        obj = getattr(native, name)
        if isinstance(obj, type) and issubclass(obj, enum.Enum):
            enums.append(name)
        elif isinstance(obj, type):
            classes.append(name)
        elif inspect.isfunction(obj):
            functions.append(name)
        else:
            constants.append(name)
    lines.extend(["## Contents", ""])
    for title, names in (("Enums", enums), ("Classes", classes), ("Functions", functions),
                         ("Constants and aliases", constants)):
        if names:
            lines.append(f"- {title}: " + ", ".join(f"`{n}`" for n in names))
    lines.append("")
    if classes:
        lines.extend(["## Classes", ""])
        for name in classes:
            _render_class(name, getattr(native, name), lines)
    if enums:
        lines.extend(["## Enums", ""])
        for name in enums:
            _render_enum(name, getattr(native, name), lines)
    if functions:
        lines.extend(["## Functions", ""])
        for name in functions:
            func = getattr(native, name)
            lines.extend([f"### `{name}{_signature(func, skip_self=False)}`", ""])
            _block(lines, _doc(func))
    if constants:
        lines.extend(["## Constants and aliases", "", "| name | value |", "|---|---|"])
        for name in constants:
            value = getattr(native, name)
            shown = repr(value) if isinstance(value, (str, int)) else _typing_text(value)
            lines.append(f"| `{name}` | `{shown}` |")
        lines.append("")
    while lines and lines[-1] == "":
        lines.pop()
    return "\n".join(lines) + "\n"


#: Every page this module generates, by the name the command line takes.
PAGES: Dict[str, Callable[[], str]] = {"native-api": render_native_api}


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m llm_datadist_ffi docs",
        description="Print a generated reference page (Markdown) on standard output.",
        epilog=f"The committed page is regenerated with: {REGENERATE_COMMAND}")
    parser.add_argument("page", choices=sorted(PAGES), help="the page to print")
    args = parser.parse_args(list(argv))
    sys.stdout.write(PAGES[args.page]())
    return 0
