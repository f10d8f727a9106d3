"""Run code written for the vendor's ``llm_datadist`` package on this one.

``install()`` makes ``import llm_datadist`` and the vendor's submodule paths resolve
to this package's modules::

    import llm_datadist_ffi.compat
    llm_datadist_ffi.compat.install()

    import llm_datadist                                  # llm_datadist_ffi.vendor
    from llm_datadist.v2.llm_types import CacheDesc      # llm_datadist_ffi._vendor.v2.llm_types

How: every vendor module name in ``ALIASES`` is entered into ``sys.modules`` as the
very module object of this package, so each class is one object whichever path
imports it (``llm_datadist.CacheDesc is llm_datadist_ffi._vendor.v2.llm_types.CacheDesc``).
A meta-path finder, first in ``sys.meta_path`` while installed, does the same for a
vendor name that is not (or no longer) in ``sys.modules`` — an ``ALIASES`` entry
that someone removed, or a further module under ``llm_datadist.v2`` — so that no
second copy of a module is ever executed under a vendor name.

``llm_datadist`` is a package, as the vendor's is: ``import llm_datadist.<name>`` of a
module this package does not provide (the vendor's internal ``utils``, its native
wrappers) raises the usual ``ModuleNotFoundError`` naming that module.

Nothing named ``llm_datadist`` is touched until ``install()`` is called, so the
vendor's package can be installed side by side. ``install()`` refuses to replace a
``llm_datadist`` module that is already imported from elsewhere. ``uninstall()``
removes exactly what ``install()`` and the finder added.
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import threading
from types import ModuleType
from typing import Dict, Optional, Sequence, Set

__all__ = ["ALIASES", "install", "uninstall", "is_installed"]

VENDOR = "llm_datadist"
PACKAGE = "llm_datadist_ffi"

#: Vendor module name -> the module of this package that stands for it.
ALIASES: Dict[str, str] = {
    "llm_datadist": "llm_datadist_ffi.vendor",
    "llm_datadist.status": "llm_datadist_ffi.status",
    "llm_datadist.configs": "llm_datadist_ffi._vendor.configs",
    "llm_datadist.data_type": "llm_datadist_ffi.data_type",
    "llm_datadist.v2": "llm_datadist_ffi._vendor.v2",
    "llm_datadist.v2.llm_types": "llm_datadist_ffi._vendor.v2.llm_types",
    "llm_datadist.v2.llm_datadist": "llm_datadist_ffi._vendor.v2.llm_datadist",
    "llm_datadist.v2.cache_manager": "llm_datadist_ffi._vendor.v2.cache_manager",
}

_V2_PREFIX = "llm_datadist.v2."

#: The modules that stand for vendor packages (they have a ``__path__``).
_PACKAGES = (PACKAGE + ".vendor", PACKAGE + "._vendor.v2")

_lock = threading.RLock()
_added: Set[str] = set()  # sys.modules names this module entered


def _target_of(fullname: str) -> Optional[str]:
    """This package's module for a vendor module name, or None when there is none."""
    if fullname in ALIASES:
        return ALIASES[fullname]
    if fullname.startswith(_V2_PREFIX):
        return PACKAGE + "._vendor.v2." + fullname[len(_V2_PREFIX):]
    return None


class _AliasLoader(importlib.abc.Loader):
    """Hands the import system an already-imported module of this package."""

    def __init__(self, alias: str, target: str) -> None:
        self._alias = alias
        self._target = target
        self._own_spec: Optional[importlib.machinery.ModuleSpec] = None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        module = importlib.import_module(self._target)
        self._own_spec = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        # The import system has just set module.__spec__ to the alias spec; the module
        # keeps its own, so that reload() and pickling see the real name.
        module.__spec__ = self._own_spec
        with _lock:
            _added.add(self._alias)


class _AliasFinder(importlib.abc.MetaPathFinder):
    """Finds vendor module names while ``install()`` is in effect."""

    def find_spec(self, fullname: str, path: Optional[Sequence[str]] = None,
                  target: Optional[ModuleType] = None) -> Optional[importlib.machinery.ModuleSpec]:
        own_name = _target_of(fullname)
        if own_name is None:
            return None
        if own_name not in sys.modules and importlib.util.find_spec(own_name) is None:
            return None
        loader = _AliasLoader(fullname, own_name)
        is_package = own_name in _PACKAGES
        return importlib.machinery.ModuleSpec(fullname, loader, is_package=is_package)


_FINDER = _AliasFinder()


def install() -> None:
    """Make ``llm_datadist`` and its submodules resolve to this package. Idempotent.

    Importing the vendor module has the vendor's side effect of setting
    ``AUTO_USE_UC_MEMORY=0`` unless it is set.

    Raises:
        ImportError: a module named ``llm_datadist`` (or one of the vendor submodule
            names) is already imported from somewhere else, e.g. the vendor's own
            package; call ``install()`` before anything imports ``llm_datadist``.
    """
    with _lock:
        modules = {alias: importlib.import_module(own) for alias, own in ALIASES.items()}
        for alias, module in modules.items():
            current = sys.modules.get(alias)
            if current is not None and current is not module:
                where = getattr(current, "__file__", None) or repr(current)
                raise ImportError(
                    f"{alias} is already imported from {where}; call "
                    f"llm_datadist_ffi.compat.install() before anything imports {VENDOR}")
        for alias, module in modules.items():
            if alias not in sys.modules:
                sys.modules[alias] = module
                _added.add(alias)
        if _FINDER not in sys.meta_path:
            sys.meta_path.insert(0, _FINDER)


def uninstall() -> None:
    """Undo ``install()``: remove the finder and every vendor name it entered.

    Names that meanwhile point at other modules are left alone. Idempotent.
    """
    with _lock:
        while _FINDER in sys.meta_path:
            sys.meta_path.remove(_FINDER)
        for alias in sorted(_added, key=len, reverse=True):
            own = _target_of(alias)
            module = sys.modules.get(alias)
            if own is not None and module is not None and module is sys.modules.get(own):
                del sys.modules[alias]
        _added.clear()


def is_installed() -> bool:
    """Whether ``install()`` is in effect."""
    return _FINDER in sys.meta_path
