"""The v1 generation of the vendor-compatible tier: ``KvCacheManager`` and the tensor
types ``TensorDesc`` and ``Tensor``, which the vendor module resolves lazily
(``llm_datadist_ffi.vendor.KvCacheManager``). Importing this package imports neither.
"""
