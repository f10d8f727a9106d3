"""The vendor's ``llm_datadist.v2`` package: the current generation's modules.

``llm_types`` holds the descriptors, keys, caches and transfer types;
``llm_datadist`` the ``LLMDataDist`` engine class; ``cache_manager`` the
``CacheManager``. Importing this package imports only ``llm_types`` (pure Python), so
that ``from llm_datadist_ffi._vendor.v2.llm_types import CacheDesc`` does not load the native
library.
"""
from __future__ import annotations

from .llm_types import (
    BlocksCacheKey, Cache, CacheDesc, CacheKey, CacheKeyByIdAndIndex, CacheTask, KvCache,
    LayerSynchronizer, MemInfo, Memtype, Placement, PushType, RegisterMemStatus, TransferConfig,
    TransferWithCacheKeyConfig,
)

__all__ = [
    "BlocksCacheKey", "Cache", "CacheDesc", "CacheKey", "CacheKeyByIdAndIndex", "CacheTask", "KvCache",
    "LayerSynchronizer", "MemInfo", "Memtype", "Placement", "PushType", "RegisterMemStatus",
    "TransferConfig", "TransferWithCacheKeyConfig",
]
