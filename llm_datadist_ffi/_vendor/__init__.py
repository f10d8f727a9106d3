"""The vendor-compatible tier: the modules behind the public face ``llm_datadist_ffi.vendor``
(the vendor's top-level ``llm_datadist`` module) and the ``llm_datadist.*`` aliases that
``llm_datadist_ffi.compat.install()`` enters.

``v2/`` holds the vendor's current generation (``llm_types``, ``llm_datadist``,
``cache_manager``); ``v1/`` the project's ``KvCacheManager`` and the tensor types;
beside them ``configs`` (``LLMConfig``, ``LLMRole``, ``LLMClusterInfo``), the option
declarations (``_options``), the vendor's argument checks (``_vendor_checks``), the one
live engine (``_native``) and what the two cache managers share (``_managers``).
Importing this package imports none of them, and does not import ``vendor``, whose
import sets ``AUTO_USE_UC_MEMORY`` as the vendor's does.
"""
