"""Stand-in types: the vendor's names and attributes, as plain Python."""
from enum import Enum

from llm_datadist import llm_datadist_wrapper as _w


class Placement(Enum):
    HOST = 0
    DEVICE = 1


class CacheDesc:
    def __init__(self, num_tensors, shape, data_type, placement=Placement.DEVICE, batch_dim_index=0,
                 seq_len_dim_index=-1, kv_tensor_format=None):
        if not isinstance(shape, (list, tuple)):
            raise TypeError("shape must be a list or tuple")
        self._num_tensors = num_tensors
        self._shape = shape
        self._data_type = data_type
        self._placement = placement
        self._batch_dim = batch_dim_index

    num_tensors = property(lambda self: self._num_tensors)
    shape = property(lambda self: self._shape)
    data_type = property(lambda self: self._data_type)
    placement = property(lambda self: self._placement)
    batch_dim = property(lambda self: self._batch_dim)

    @property
    def size(self):
        # a native call in the vendor's layer: the recorder shows whether anyone made it
        return _w.calc_tensor_size(self._shape, self._data_type.value)


class CacheKey:
    def __init__(self, prompt_cluster_id, req_id, model_id=0, prefix_id=2 ** 64 - 1):
        self.prompt_cluster_id = prompt_cluster_id
        self.req_id = req_id
        self.model_id = model_id
        self.prefix_id = prefix_id


class CacheKeyByIdAndIndex:
    def __init__(self, cluster_id, cache_id, batch_index=0):
        self.cluster_id = cluster_id
        self.cache_id = cache_id
        self.batch_index = batch_index


class BlocksCacheKey:
    def __init__(self, prompt_cluster_id, model_id=0):
        self.prompt_cluster_id = prompt_cluster_id
        self.model_id = model_id


class Cache:
    def __init__(self, cache_id, cache_desc, tensor_addrs, is_blocks):
        self._cache_id = cache_id
        self._cache_desc = cache_desc
        self._tensor_addrs = tensor_addrs
        self.is_blocks_cache = is_blocks

    cache_id = property(lambda self: self._cache_id)
    cache_desc = property(lambda self: self._cache_desc)
    tensor_addrs = property(lambda self: self._tensor_addrs)


class KvCache(Cache):
    pass


class TransferConfig:
    def __init__(self, dst_cluster_id, dst_addrs, src_layer_range=None, src_batch_index=0):
        self.dst_cluster_id = dst_cluster_id
        self.dst_addrs = dst_addrs
        self.src_layer_range = src_layer_range
        self.src_batch_index = src_batch_index


class CacheTask:
    def __init__(self, statuses):
        self._statuses = statuses

    def synchronize(self, timeout_in_millis=None):
        return self._statuses[0] if self._statuses else 0

    def get_results(self, timeout_in_millis=None):
        return list(self._statuses)
