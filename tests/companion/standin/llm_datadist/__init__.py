"""A recording stand-in for the vendor's ``llm_datadist`` package (tests only; written
for the project from the vendor's documented layout, names and signatures)."""
from llm_datadist.status import LLMStatusCode, LLMException
from llm_datadist.configs import LLMClusterInfo, LLMRole
from llm_datadist.data_type import DataType
from llm_datadist.v2.llm_types import (BlocksCacheKey, Cache, CacheDesc, CacheKey, CacheKeyByIdAndIndex, KvCache,
                                       Placement, TransferConfig, CacheTask)
from llm_datadist.v2.llm_datadist import LLMDataDist

__all__ = ["LLMStatusCode", "LLMException", "LLMClusterInfo", "LLMRole", "DataType", "BlocksCacheKey", "Cache",
           "CacheDesc", "CacheKey", "CacheKeyByIdAndIndex", "KvCache", "Placement", "TransferConfig", "CacheTask",
           "LLMDataDist", "TensorDesc", "Tensor", "KvCacheManager"]


def __getattr__(name):
    if name not in ("TensorDesc", "Tensor", "KvCacheManager"):
        raise AttributeError(f"Module 'llm_datadist' has no attribute '{name}'")
    import llm_datadist_v1

    return getattr(llm_datadist_v1, name)
