"""Stand-in for the vendor's separate v1 package."""
from llm_datadist_v1.kv_cache_manager import KvCacheManager


class TensorDesc:
    pass


class Tensor:
    pass


__all__ = ["KvCacheManager", "TensorDesc", "Tensor"]
