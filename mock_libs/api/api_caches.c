/* The native cache calls' entry points (lldd/api.h): RegisterKvCache, UnregisterKvCache
 * and the PR-9 calls AllocateCache, DeallocateCache, CopyKvCache, CopyKvBlocks.
 *
 * An entry takes an injected fault, refuses NULL arguments, enters the engine, calls
 * the cache table's function (engine_cache.c) and leaves the engine: the checks past
 * the arguments, and the order they run in, are the cache table's.
 */
#include <stddef.h>
#include <stdint.h>

#include "core/cache_table.h"
#include "core/engine.h"
#include "base/mock_internal.h"

MOCK_EXPORT lldd_status lldd_register_kv_cache(lldd_engine *e, const lldd_cache_desc *desc, const uint64_t *addrs,
                                               size_t num_addrs, int64_t *cache_id)
{
    static const char fn[] = "lldd_register_kv_cache";
    lldd_status st = engine_args_enter(e, fn, e == NULL ? "engine" : desc == NULL ? "cache_desc"
                                       : cache_id == NULL ? "cache_id"
                                       : addrs == NULL && num_addrs > 0 ? "addrs (num_addrs > 0)"
                                       : desc->shape == NULL && desc->shape_len > 0 ? "cache_desc.shape (shape_len > 0)"
                                       : NULL);
    return ENGINE_RUN(e, st, cache_register(e, fn, desc, addrs, num_addrs, cache_id));
}

MOCK_EXPORT lldd_status lldd_unregister_kv_cache(lldd_engine *e, int64_t cache_id)
{
    static const char fn[] = "lldd_unregister_kv_cache";
    lldd_status st = engine_call_enter(e, fn);
    return ENGINE_RUN(e, st, cache_unregister(e, fn, cache_id));
}

MOCK_EXPORT lldd_status lldd_allocate_cache(lldd_engine *e, const lldd_cache_desc *desc, int64_t *cache_id,
                                            uint64_t *tensor_addrs, size_t addrs_capacity)
{
    static const char fn[] = "lldd_allocate_cache";
    lldd_status st = engine_args_check(fn, e == NULL ? "engine" : desc == NULL ? "cache_desc"
                                       : cache_id == NULL ? "cache_id"
                                       : desc->shape == NULL && desc->shape_len > 0 ? "cache_desc.shape (shape_len > 0)"
                                       : NULL);
    if (st == LLM_SUCCESS)
        st = pool_call_enter(e, fn);
    return ENGINE_RUN(e, st, cache_allocate(e, fn, desc, cache_id, tensor_addrs, addrs_capacity));
}

MOCK_EXPORT lldd_status lldd_deallocate_cache(lldd_engine *e, int64_t cache_id)
{
    static const char fn[] = "lldd_deallocate_cache";
    lldd_status st = engine_args_check(fn, e == NULL ? "engine" : NULL);
    if (st == LLM_SUCCESS)
        st = pool_call_enter(e, fn);
    if (st != LLM_SUCCESS)
        return st;
    cache_deallocate(e, cache_id);
    engine_leave(e);
    return LLM_SUCCESS;
}

MOCK_EXPORT lldd_status lldd_copy_kv_cache(lldd_engine *e, const lldd_cache *src_cache, const lldd_cache *dst_cache,
                                           uint32_t src_batch_index, uint32_t dst_batch_index, uint64_t offset,
                                           int64_t size)
{
    static const char fn[] = "lldd_copy_kv_cache";
    lldd_status st = engine_args_check(fn, e == NULL ? "engine" : src_cache == NULL ? "src_cache"
                                       : dst_cache == NULL ? "dst_cache" : NULL);
    if (st == LLM_SUCCESS)
        st = cache_arg_check(fn, "src_cache", src_cache);
    if (st == LLM_SUCCESS)
        st = cache_arg_check(fn, "dst_cache", dst_cache);
    if (st == LLM_SUCCESS)
        st = pool_call_enter(e, fn);
    return ENGINE_RUN(e, st, cache_copy(e, fn, src_cache->cache_id, dst_cache->cache_id, src_batch_index,
                                        dst_batch_index, offset, size, 0, "src_cache.cache_id", "dst_cache.cache_id"));
}

MOCK_EXPORT lldd_status lldd_copy_kv_blocks(lldd_engine *e, const lldd_cache *src_cache, const lldd_cache *dst_cache,
                                            const uint64_t *src_blocks, size_t num_src_blocks,
                                            const uint64_t *dst_blocks_flat, const size_t *dst_list_lens,
                                            size_t num_dst_lists)
{
    static const char fn[] = "lldd_copy_kv_blocks";
    uint32_t code;
    if (mock_fault_take(fn, &code))
        return code;
    size_t total = 0;
    int lens_ok = 1;
    if (dst_list_lens != NULL)
        for (size_t k = 0; k < num_dst_lists && lens_ok; k++)
            lens_ok = !__builtin_add_overflow(total, dst_list_lens[k], &total);
    if (e == NULL || src_cache == NULL || dst_cache == NULL || (src_blocks == NULL && num_src_blocks > 0) ||
        (dst_list_lens == NULL && num_dst_lists > 0) || !lens_ok || (dst_blocks_flat == NULL && total > 0)) {
        mock_set_error("%s: %s", fn,
                       e == NULL ? "engine must not be NULL" : src_cache == NULL ? "src_cache must not be NULL"
                       : dst_cache == NULL ? "dst_cache must not be NULL"
                       : src_blocks == NULL && num_src_blocks > 0 ? "src_blocks is NULL but num_src_blocks > 0"
                       : dst_list_lens == NULL && num_dst_lists > 0 ? "dst_list_lens is NULL but num_dst_lists > 0"
                       : !lens_ok ? "dst_list_lens overflow" : "dst_blocks_flat is NULL but the lists are not empty");
        return LLM_PARAM_INVALID;
    }
    lldd_status st = cache_arg_check(fn, "src_cache", src_cache);
    if (st == LLM_SUCCESS)
        st = cache_arg_check(fn, "dst_cache", dst_cache);
    if (st == LLM_SUCCESS)
        st = pool_call_enter(e, fn);
    return ENGINE_RUN(e, st, cache_copy_blocks(e, fn, src_cache, dst_cache, src_blocks, num_src_blocks, dst_blocks_flat,
                                               dst_list_lens, num_dst_lists, total));
}
