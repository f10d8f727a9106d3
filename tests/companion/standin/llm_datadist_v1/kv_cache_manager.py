"""Stand-in v1 ``KvCacheManager`` (records as the v2 manager does)."""
from llm_datadist.v2.cache_manager import CALLS, _record
from llm_datadist.v2.llm_types import KvCache


class KvCacheManager:
    def __init__(self, role):
        self._role = role

    @staticmethod
    def check_cache_key(cache_key):
        CALLS.append(("check_cache_key", (cache_key,), {}))

    def is_initialized(self):
        return True

    def allocate_cache(self, cache_desc, cache_keys=()):
        _record("allocate_cache", cache_desc, cache_keys)
        return KvCache(7, cache_desc, [], False)

    def allocate_blocks_cache(self, cache_desc, blocks_cache_key=None):
        _record("allocate_blocks_cache", cache_desc, blocks_cache_key)
        return KvCache(8, cache_desc, [], True)

    def deallocate_cache(self, cache):
        _record("deallocate_cache", cache)

    def remove_cache_key(self, cache_key):
        _record("remove_cache_key", cache_key)

    def pull_cache(self, cache_key, kv_cache, batch_index=0, size=-1, **kwargs):
        KvCacheManager.check_cache_key(cache_key)
        _record("pull_cache", cache_key, kv_cache, batch_index, size, **kwargs)

    def pull_blocks(self, prompt_cache_key, decoder_kv_cache, prompt_blocks, decoder_blocks, **kwargs):
        _record("pull_blocks", prompt_cache_key, decoder_kv_cache, prompt_blocks, decoder_blocks, **kwargs)

    def copy_cache(self, dst, src, dst_batch_index=0, src_batch_index=0, offset=0, size=-1, req_id=None):
        _record("copy_cache", dst, src, dst_batch_index, src_batch_index, offset, size, req_id)

    def copy_blocks(self, cache, copy_block_info):
        _record("copy_blocks", cache, copy_block_info)

    def swap_blocks(self, src, dst, src_to_dst):
        _record("swap_blocks", src, dst, src_to_dst)

    def get_cache_tensors(self, cache, tensor_index=0):
        return []

    def transfer_cache_async(self, src_cache, layer_synchronizer, transfer_configs, src_block_indices=None,
                             dst_block_indices=None, dst_block_memory_size=None):
        _record("transfer_cache_async", src_cache, layer_synchronizer, transfer_configs)
