"""The vendor's top-level ``llm_datadist`` module, as ``llm_datadist_ffi.vendor``.

``compat.install()`` maps the name ``llm_datadist`` onto this module (and the
vendor's submodules onto the package's), so that client code written for the
vendor package runs unchanged. The export list is the vendor's ``__all__``
(python-api.md §1.2); the three v1 names ``TensorDesc``, ``Tensor`` and
``KvCacheManager`` are resolved on first access through the module ``__getattr__``,
as in the vendor, but from this package (project rule: no legacy package needed).

Importing this module has the vendor's side effect: the environment variable
``AUTO_USE_UC_MEMORY`` is set to ``"0"`` unless it is already set.
"""
from __future__ import annotations

import os
from typing import Any

os.environ.setdefault("AUTO_USE_UC_MEMORY", "0")

# The vendor's submodules are attributes of its package (llm_datadist.status, ...).
from . import configs, data_type, status, v2  # noqa: E402,F401
from .configs import LLMClusterInfo, LLMConfig, LLMRole, LlmConfig  # noqa: E402
from .data_type import DataType  # noqa: E402
from .status import LLMException, LLMStatusCode, Status  # noqa: E402
from .v2.llm_datadist import LLMDataDist  # noqa: E402
from .v2.llm_types import (  # noqa: E402
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
    "TensorDesc": ("llm_datadist_ffi.tensor", "TensorDesc"),
    "Tensor": ("llm_datadist_ffi.tensor", "Tensor"),
    "KvCacheManager": ("llm_datadist_ffi.v2.cache_manager", "KvCacheManager"),
}

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
