"""llm_datadist_ffi: Huawei LLM-DataDist from Python, on Ascend hosts and anywhere else.

``llm_datadist_ffi.native`` is the C++ class ``llm_datadist::LlmDataDist`` in Python;
``llm_datadist_ffi.acl`` the ACL runtime subset; ``llm_datadist_ffi.status`` the
status-code table and exceptions.

The backend (``LLM_DATADIST_FFI_BACKEND``: ``mock``, ``ascend`` or ``auto``) is loaded,
and its ABI version checked, when the first module that needs it is imported
(``native``, ``acl``, the vendor-compatible API) or ``llm_datadist_ffi.backend`` is
read; a bad value or a backend that cannot load is an ``ImportError`` there. The
status table and ``python -m llm_datadist_ffi errors`` work without any backend.
"""
from __future__ import annotations

from typing import Any

from .lint import LintWarning
from .status import LLMException, LLMStatusCode, Status

__version__ = "0.1.0"

__all__ = ["backend", "LintWarning", "LLMException", "LLMStatusCode", "Status", "__version__"]


def __getattr__(name: str) -> Any:
    if name == "backend":
        from ._core._loader import backend

        return backend
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
