"""llm_datadist_ffi: Huawei LLM-DataDist from Python, on Ascend hosts and anywhere else.

Importing the package loads one backend (``LLM_DATADIST_FFI_BACKEND``:
``mock``, ``ascend`` or ``auto``), checks its ABI version and exports its name as
``llm_datadist_ffi.backend``. ``llm_datadist_ffi.native`` is the C++ class
``llm_datadist::LlmDataDist`` in Python; ``llm_datadist_ffi.acl`` the ACL runtime
subset; ``llm_datadist_ffi.status`` the status-code table and exceptions.
"""
from __future__ import annotations

from ._loader import backend
from .status import LLMException, LLMStatusCode, Status

__version__ = "0.1.0"

__all__ = ["backend", "LLMException", "LLMStatusCode", "Status", "__version__"]
