"""The vendor's ``llm_datadist.v2.cache_manager``: ``CacheManager`` (v2), and for now
the project's ``KvCacheManager`` (v1).

Stubs: both managers need the native engine and come with the CacheManager
implementation (python-api.md §11, §12). The pure static ``check_cache_key`` of
python-api.md §7.5 is already real on both.
"""
from __future__ import annotations

from typing import Any

from .llm_types import check_cache_key

__all__ = ["CacheManager", "KvCacheManager"]


class CacheManager:
    """The v2 cache manager, from ``LLMDataDist.cache_manager``. Not implemented yet."""

    check_cache_key = staticmethod(check_cache_key)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        """Raises ``NotImplementedError`` until the CacheManager implementation lands."""
        raise NotImplementedError("CacheManager comes with the CacheManager implementation")


class KvCacheManager:
    """The v1 cache manager, from ``LLMDataDist.kv_cache_manager``. Not implemented yet."""

    check_cache_key = staticmethod(check_cache_key)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        """Raises ``NotImplementedError`` until the CacheManager implementation lands."""
        raise NotImplementedError("KvCacheManager comes with the CacheManager implementation")
