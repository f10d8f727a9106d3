"""The vendor's top-level ``llm_datadist`` module, as ``llm_datadist_ffi.vendor``.

``compat.install()`` maps the name ``llm_datadist`` onto this module (and the
vendor's submodules onto the package's), so that client code written for the
vendor package runs unchanged. The export list is the vendor's ``__all__``
(docs/reference/python-api.md §1.2); the three v1 names ``TensorDesc``, ``Tensor`` and
``KvCacheManager`` are resolved on first access through the module ``__getattr__``,
as in the vendor, but from this package (project rule: no legacy package needed).

The vendor's ``llm_datadist`` is a package; this module has an empty ``__path__``
so that it behaves as one under that name: ``import llm_datadist.<name>`` of a
module the project does not provide fails with the usual ``ModuleNotFoundError``
(not "is not a package"). ``v2_list`` is the vendor's list of its current-generation
names (its ``__all__`` without the three lazy v1 names), which client code uses to
copy the names into its own namespace.

This module is the public face of the vendor-compatible tier, whose modules are in
``llm_datadist_ffi._vendor`` (``v1/``, ``v2/`` and what they share); importing one of
those does not import this module, so it does not have this module's side effect.

Importing this module has the vendor's side effect: the environment variable
``AUTO_USE_UC_MEMORY`` is set to ``"0"`` unless it is already set.
"""
from __future__ import annotations

import os
from typing import Any, List

#: No submodule is found through this path; the package's own submodules are entered
#: in ``sys.modules`` by ``compat.install()`` or found by its finder.
__path__: List[str] = []

os.environ.setdefault("AUTO_USE_UC_MEMORY", "0")

# The vendor's submodules are attributes of its package (llm_datadist.status, ...).
from . import data_type, status  # noqa: E402,F401
from ._vendor import configs, v2  # noqa: E402,F401
from ._vendor.configs import LLMClusterInfo, LLMConfig, LLMRole, LlmConfig  # noqa: E402
from .data_type import DataType  # noqa: E402
from .status import LLMException, LLMStatusCode, Status  # noqa: E402
from ._vendor.v2.llm_datadist import LLMDataDist  # noqa: E402
from ._vendor.v2.llm_types import (  # noqa: E402
    BlocksCacheKey, Cache, CacheDesc, CacheKey, CacheKeyByIdAndIndex, CacheTask, KvCache,
    LayerSynchronizer, MemInfo, Memtype, Placement, RegisterMemStatus, TransferConfig,
    TransferWithCacheKeyConfig,
)

__all__ = [
    "LLMClusterInfo", "LLMStatusCode", "LLMException", "LLMRole", "LlmConfig", "LLMConfig", "DataType",
    "Status", "CacheDesc", "CacheKey", "CacheKeyByIdAndIndex", "KvCache", "Cache", "BlocksCacheKey",
    "LLMDataDist", "Placement", "RegisterMemStatus", "LayerSynchronizer", "TransferConfig", "CacheTask",
    "TransferWithCacheKeyConfig", "Memtype", "MemInfo",
    "TensorDesc", "Tensor", "KvCacheManager",
]

# Lazy name -> (module of this package, attribute).
_LAZY = {
    "TensorDesc": ("llm_datadist_ffi._vendor.v1.tensor", "TensorDesc"),
    "Tensor": ("llm_datadist_ffi._vendor.v1.tensor", "Tensor"),
    "KvCacheManager": ("llm_datadist_ffi._vendor.v1.cache_manager", "KvCacheManager"),
}

#: The vendor's names of the current generation: ``__all__`` without the lazy v1 names.
v2_list = [name for name in __all__ if name not in _LAZY]


def __getattr__(name: str) -> Any:
    """Resolve the lazy v1 names; any other unknown name raises the vendor's error.

    Raises:
        AttributeError: ``"Module 'llm_datadist' has no attribute '<name>'"``.
    """
    target = _LAZY.get(name)
    if target is None:
        raise AttributeError(f"Module 'llm_datadist' has no attribute '{name}'")
    import importlib

    value = getattr(importlib.import_module(target[0]), target[1])
    globals()[name] = value
    return value
