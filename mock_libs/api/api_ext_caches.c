/* The extension ABI's cache entry points (lldd/ext.h): register_cache / unregister_cache,
 * allocate_cache / deallocate_cache / remove_cache_key (engine_ext_cache.c) and
 * copy_cache / copy_blocks / swap_blocks (engine_ext_copy.c).
 *
 * An entry takes an injected fault, refuses NULL arguments, enters the engine, calls
 * its module's function and leaves the engine: the checks past the arguments, and the
 * order they run in, are the module's. This file belongs to the extension layer (it
 * calls it), not to the core.
 */
#include <stddef.h>
#include <stdint.h>

#include "core/cache_table.h"
#include "core/engine.h"
#include "ext/ext.h"
#include "base/mock_internal.h"

MOCK_EXPORT lldd_status lldd_ext_register_cache(lldd_engine *e, const lldd_cache_desc *desc, const uint64_t *addrs,
                                                size_t num_addrs, uint32_t kind, uint32_t remote_accessible,
                                                const lldd_key *keys, size_t num_keys, int64_t *cache_id)
{
    static const char fn[] = "lldd_ext_register_cache";
    lldd_status st = engine_args_enter(e, fn, e == NULL ? "engine" : desc == NULL ? "cache_desc"
                                       : cache_id == NULL ? "cache_id"
                                       : addrs == NULL && num_addrs > 0 ? "addrs (num_addrs > 0)"
                                       : keys == NULL && num_keys > 0 ? "keys (num_keys > 0)"
                                       : desc->shape == NULL && desc->shape_len > 0 ? "cache_desc.shape (shape_len > 0)"
                                       : NULL);
    return ENGINE_RUN(e, st,
                      ext_cache_register(e, fn, desc, addrs, num_addrs, kind, remote_accessible, keys, num_keys,
                                         cache_id));
}

MOCK_EXPORT lldd_status lldd_ext_unregister_cache(lldd_engine *e, int64_t cache_id)
{
    static const char fn[] = "lldd_ext_unregister_cache";
    lldd_status st = engine_call_enter(e, fn);
    return ENGINE_RUN(e, st, ext_cache_unregister(e, fn, cache_id));
}

MOCK_EXPORT lldd_status lldd_ext_allocate_cache(lldd_engine *e, const lldd_cache_desc *desc, uint32_t kind,
                                                const lldd_key *keys, size_t num_keys, int64_t *cache_id,
                                                uint64_t *tensor_addrs, size_t addrs_capacity)
{
    static const char fn[] = "lldd_ext_allocate_cache";
    lldd_status st = engine_args_enter(e, fn, e == NULL ? "engine" : desc == NULL ? "cache_desc"
                                       : cache_id == NULL ? "cache_id"
                                       : keys == NULL && num_keys > 0 ? "keys (num_keys > 0)"
                                       : desc->shape == NULL && desc->shape_len > 0 ? "cache_desc.shape (shape_len > 0)"
                                       : NULL);
    return ENGINE_RUN(e, st,
                      ext_cache_allocate(e, fn, desc, kind, keys, num_keys, cache_id, tensor_addrs, addrs_capacity));
}

MOCK_EXPORT lldd_status lldd_ext_deallocate_cache(lldd_engine *e, int64_t cache_id)
{
    static const char fn[] = "lldd_ext_deallocate_cache";
    lldd_status st = engine_call_enter(e, fn);
    return ENGINE_RUN(e, st, ext_cache_deallocate(e, fn, cache_id));
}

MOCK_EXPORT lldd_status lldd_ext_remove_cache_key(lldd_engine *e, const lldd_key *key)
{
    static const char fn[] = "lldd_ext_remove_cache_key";
    lldd_status st = engine_args_enter(e, fn, e == NULL ? "engine" : key == NULL ? "key" : NULL);
    return ENGINE_RUN(e, st, ext_cache_remove_key(e, fn, key));
}

MOCK_EXPORT lldd_status lldd_ext_copy_blocks(lldd_engine *e, int64_t cache_id, const uint64_t *pairs, size_t num_pairs)
{
    static const char fn[] = "lldd_ext_copy_blocks";
    uint32_t code;
    if (mock_fault_take(fn, &code))
        return code;
    if (e == NULL || (pairs == NULL && num_pairs > 0) || num_pairs > SIZE_MAX / 2 / sizeof(uint64_t)) {
        mock_set_error("%s: %s", fn, e == NULL ? "engine must not be NULL"
                       : pairs == NULL && num_pairs > 0 ? "pairs is NULL but num_pairs > 0"
                       : "num_pairs is too large for an array of pairs");
        return LLM_PARAM_INVALID;
    }
    lldd_status st = engine_enter(e, fn);
    return ENGINE_RUN(e, st, ext_copy_blocks(e, fn, cache_id, pairs, num_pairs));
}

MOCK_EXPORT lldd_status lldd_ext_swap_blocks(lldd_engine *e, const uint64_t *src_addrs, const uint64_t *dst_addrs,
                                             size_t num_tensors, uint64_t block_size, const uint64_t *pairs,
                                             size_t num_pairs, uint32_t swap_in)
{
    static const char fn[] = "lldd_ext_swap_blocks";
    uint32_t code;
    if (mock_fault_take(fn, &code))
        return code;
    if (e == NULL || ((src_addrs == NULL || dst_addrs == NULL) && num_tensors > 0) ||
        (pairs == NULL && num_pairs > 0) || num_pairs > SIZE_MAX / 2 / sizeof(uint64_t) ||
        num_tensors > SIZE_MAX / 2 / sizeof(mcache *)) {
        mock_set_error("%s: %s", fn, e == NULL ? "engine must not be NULL"
                       : (src_addrs == NULL || dst_addrs == NULL) && num_tensors > 0
                           ? "src_addrs and dst_addrs must not be NULL when num_tensors > 0"
                       : pairs == NULL && num_pairs > 0 ? "pairs is NULL but num_pairs > 0"
                       : "num_pairs or num_tensors is too large");
        return LLM_PARAM_INVALID;
    }
    lldd_status st = engine_enter(e, fn);
    return ENGINE_RUN(e, st,
                      ext_swap_blocks(e, fn, src_addrs, dst_addrs, num_tensors, block_size, pairs, num_pairs, swap_in));
}

MOCK_EXPORT lldd_status lldd_ext_copy_cache(lldd_engine *e, int64_t dst_cache_id, int64_t src_cache_id,
                                            uint32_t dst_batch_index, uint32_t src_batch_index, uint64_t offset,
                                            int64_t size)
{
    static const char fn[] = "lldd_ext_copy_cache";
    lldd_status st = engine_call_enter(e, fn);
    return ENGINE_RUN(e, st, cache_copy(e, fn, src_cache_id, dst_cache_id, src_batch_index, dst_batch_index, offset,
                                        size, e->gen == GEN_V1, "src_cache_id", "dst_cache_id"));
}
