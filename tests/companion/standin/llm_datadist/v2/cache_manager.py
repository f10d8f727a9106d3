"""Stand-in v2 ``CacheManager``: vendor signatures; every public method records its
arguments (``CALLS``, the very objects) and answers the status tests set (``STATUS``)."""
from llm_datadist import llm_datadist_wrapper as _w
from llm_datadist.status import LLMException, LLMStatusCode, check_status
from llm_datadist.v2.llm_types import BlocksCacheKey, Cache, CacheKey, CacheTask

#: (method, args, kwargs) of every call that reached a method of the stand-in
CALLS = []
_next_id = [1]


def _record(name, *args, **kwargs):
    CALLS.append((name, args, kwargs))
    check_status(_w.native(name), f"[{name}]")


def _blocks(name, value):
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, int) for v in value):
        raise TypeError(f"{name} must be a list or tuple of int")


class CacheManager:
    def __init__(self, options):
        self._options = options
        self._is_call_linked = False

    @staticmethod
    def check_cache_key(cache_key):
        if isinstance(cache_key, CacheKey):
            valid = [0 <= v != 2 ** 64 - 1 for v in (cache_key.req_id, cache_key.prefix_id)]
            if valid[0] == valid[1]:
                raise LLMException("invalid cache key", status_code=LLMStatusCode.LLM_PARAM_INVALID)

    def set_is_call_linked(self):
        CALLS.append(("set_is_call_linked", (), {}))
        self._is_call_linked = True

    def _new(self, cache_desc, blocks):
        cache = Cache(_next_id[0], cache_desc, [0x1000 * i for i in range(cache_desc.num_tensors)], blocks)
        _next_id[0] += 1
        return cache

    def register_cache(self, cache_desc, addrs, cache_keys=(), remote_accessible=None):
        _record("register_cache", cache_desc, addrs, cache_keys, remote_accessible)
        return self._new(cache_desc, False)

    def register_blocks_cache(self, cache_desc, addrs, blocks_cache_key=None, remote_accessible=None):
        _record("register_blocks_cache", cache_desc, addrs, blocks_cache_key, remote_accessible)
        return self._new(cache_desc, True)

    def unregister_cache(self, cache_id):
        _record("unregister_cache", cache_id)

    def allocate_cache(self, cache_desc, cache_keys=()):
        _record("allocate_cache", cache_desc, cache_keys)
        return self._new(cache_desc, False)

    def allocate_blocks_cache(self, cache_desc, blocks_cache_key=None):
        _record("allocate_blocks_cache", cache_desc, blocks_cache_key)
        return self._new(cache_desc, True)

    def deallocate_cache(self, cache):
        _record("deallocate_cache", cache)

    def deallocate_blocks_cache(self, cache):
        _record("deallocate_blocks_cache", cache)

    def remove_cache_key(self, cache_key):
        _record("remove_cache_key", cache_key)

    def pull_cache(self, cache_key, cache, batch_index=0, size=-1, **kwargs):
        if not isinstance(cache, Cache):
            raise TypeError("cache must be Cache")
        CacheManager.check_cache_key(cache_key)
        _record("pull_cache", cache_key, cache, batch_index, size, **kwargs)

    def pull_blocks(self, src_cache_key, dst_cache, src_blocks=(), dst_blocks=(), **kwargs):
        _blocks("src_blocks", src_blocks)
        _blocks("dst_blocks", dst_blocks)
        if not isinstance(src_cache_key, BlocksCacheKey):
            CacheManager.check_cache_key(src_cache_key)
        _record("pull_blocks", src_cache_key, dst_cache, src_blocks, dst_blocks, **kwargs)

    def push_cache(self, dst_cache_key, src_cache, src_batch_index=0, src_layer_range=None, dst_layer_range=None,
                   size=-1, tensor_num_per_layer=2):
        _record("push_cache", dst_cache_key, src_cache, src_batch_index, src_layer_range, dst_layer_range, size,
                tensor_num_per_layer)

    def push_blocks(self, dst_cache_key, src_cache, src_blocks=(), dst_blocks=(), src_layer_range=None,
                    dst_layer_range=None, tensor_num_per_layer=2):
        _blocks("dst_blocks", dst_blocks)
        _record("push_blocks", dst_cache_key, src_cache, src_blocks, dst_blocks, src_layer_range, dst_layer_range,
                tensor_num_per_layer)

    def transfer_cache_async(self, src_cache, layer_synchronizer, transfer_configs, src_block_indices=None,
                             dst_block_indices=None, dst_block_memory_size=None):
        _record("transfer_cache_async", src_cache, layer_synchronizer, transfer_configs, src_block_indices,
                dst_block_indices, dst_block_memory_size)
        return CacheTask([LLMStatusCode.LLM_SUCCESS for _ in transfer_configs])

    def copy_cache(self, dst, src, dst_batch_index=0, src_batch_index=0, offset=0, size=-1, req_id=None):
        _record("copy_cache", dst, src, dst_batch_index, src_batch_index, offset, size, req_id)

    def copy_blocks(self, cache, copy_block_info):
        _record("copy_blocks", cache, copy_block_info)

    def swap_blocks(self, src_cache, dst_cache, src_to_dst):
        _record("swap_blocks", src_cache, dst_cache, src_to_dst)

    def remap_registered_memory(self, mem_infos):
        _record("remap_registered_memory", mem_infos)
