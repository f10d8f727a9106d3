"""The cdef text of the C ABI, read from the header fragments under ``include/``.

The fragments are the single source of the declarations (docs/design.md, "The C ABI"):
the C compiler reads them through the umbrella headers, cffi reads them here, in
this fixed order. Nothing is declared again in Python.

An installed package carries a copy of ``include/`` as ``_include/`` (made by
``setup.py``); a source checkout reads ``include/`` beside the package.
"""
from __future__ import annotations

from pathlib import Path

#: Fragments in the order cffi must read them (types before their users).
LLDD_FRAGMENTS = ("lldd/status.h", "lldd/types.h", "lldd/api.h", "lldd/ext.h", "lldd/mock.h")
ACL_FRAGMENTS = ("acl/types.h", "acl/api.h")

_PACKAGE = Path(__file__).resolve().parent.parent   # llm_datadist_ffi/, this module is in _core/


def include_dir() -> Path:
    """The directory holding the header fragments.

    Raises:
        ImportError: neither the installed copy nor a source checkout's
            ``include/`` is present.
    """
    for candidate in (_PACKAGE / "_include", _PACKAGE.parent / "include"):
        if (candidate / LLDD_FRAGMENTS[0]).is_file():
            return candidate
    raise ImportError(
        "llm_datadist_ffi: the C header fragments are missing (looked in "
        f"{_PACKAGE / '_include'} and {_PACKAGE.parent / 'include'}); reinstall with `pip install .`"
    )


def cdef_text(fragments: tuple[str, ...] = LLDD_FRAGMENTS + ACL_FRAGMENTS) -> str:
    """Concatenate the named fragments, in order, as one cdef source."""
    root = include_dir()
    return "\n".join((root / name).read_text(encoding="utf-8") for name in fragments)
