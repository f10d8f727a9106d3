"""The vendor's ``llm_datadist.v2.llm_datadist``: the ``LLMDataDist`` engine class.

Stub: ``LLMDataDist`` needs the native engine and comes with the CacheManager
implementation (python-api.md §10). The class exists now so that
``llm_datadist.LLMDataDist`` is an ordinary, patchable attribute
(``unittest.mock.patch("llm_datadist.LLMDataDist")``) and the module path resolves.
"""
from __future__ import annotations

from typing import Any, ClassVar, Optional

__all__ = ["LLMDataDist"]

_PENDING = "LLMDataDist comes with the CacheManager implementation"


class LLMDataDist:
    """The engine: ``LLMDataDist(role: LLMRole, cluster_id: int)``. Not implemented yet."""

    llm_engine_instance: ClassVar[Optional["LLMDataDist"]] = None
    """The currently initialised instance, or ``None``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        """Raises ``NotImplementedError`` until the CacheManager implementation lands."""
        raise NotImplementedError(_PENDING)
