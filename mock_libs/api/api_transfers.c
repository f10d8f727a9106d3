/* The native transfer calls' entry points (lldd/api.h): PullKvCache, PullKvBlocks,
 * PushKvCache and PushKvBlocks.
 *
 * An entry takes an injected fault, refuses NULL arguments, enters the engine, calls
 * the transfer module's function (engine_xfer.c) and leaves the engine: the checks past
 * the arguments, and the order they run in, are the transfer module's.
 */
#include <stddef.h>
#include <stdint.h>

#include "core/engine.h"
#include "base/mock_internal.h"
#include "core/transfers.h"

MOCK_EXPORT lldd_status lldd_pull_kv_cache(lldd_engine *e, const lldd_cache_index *src_cache_index,
                                           const lldd_cache *dst_cache, uint32_t batch_index, int64_t size,
                                           const lldd_ext_param *ext_param)
{
    static const char fn[] = "lldd_pull_kv_cache";
    lldd_status st = xfer_cache_call_enter(e, fn, "src_cache_index", src_cache_index, "dst_cache", dst_cache,
                                           "dst_cache", dst_cache, NULL, 0, NULL, 0);
    return ENGINE_RUN(e, st, xfer_pull_cache(e, fn, src_cache_index, dst_cache, batch_index, size, ext_param));
}

MOCK_EXPORT lldd_status lldd_pull_kv_blocks(lldd_engine *e, const lldd_cache_index *src_cache_index,
                                            const lldd_cache *dst_cache, const uint64_t *src_blocks,
                                            size_t num_src_blocks, const uint64_t *dst_blocks, size_t num_dst_blocks,
                                            const lldd_ext_param *ext_param)
{
    static const char fn[] = "lldd_pull_kv_blocks";
    lldd_status st = xfer_cache_call_enter(e, fn, "src_cache_index", src_cache_index, "dst_cache", dst_cache,
                                           "dst_cache", dst_cache, src_blocks, num_src_blocks, dst_blocks,
                                           num_dst_blocks);
    return ENGINE_RUN(e, st, xfer_pull_blocks(e, fn, src_cache_index, dst_cache, src_blocks, num_src_blocks, dst_blocks,
                                              num_dst_blocks, ext_param));
}

MOCK_EXPORT lldd_status lldd_push_kv_cache(lldd_engine *e, const lldd_cache *src_cache,
                                           const lldd_cache_index *dst_cache_index, uint32_t src_batch_index,
                                           int64_t size, const lldd_ext_param *ext_param)
{
    static const char fn[] = "lldd_push_kv_cache";
    lldd_status st = xfer_cache_call_enter(e, fn, "src_cache", src_cache, "dst_cache_index", dst_cache_index,
                                           "src_cache", src_cache, NULL, 0, NULL, 0);
    return ENGINE_RUN(e, st, xfer_push_cache(e, fn, src_cache, dst_cache_index, src_batch_index, size, ext_param));
}

MOCK_EXPORT lldd_status lldd_push_kv_blocks(lldd_engine *e, const lldd_cache *src_cache,
                                            const lldd_cache_index *dst_cache_index, const uint64_t *src_blocks,
                                            size_t num_src_blocks, const uint64_t *dst_blocks, size_t num_dst_blocks,
                                            const lldd_ext_param *ext_param)
{
    static const char fn[] = "lldd_push_kv_blocks";
    lldd_status st = xfer_cache_call_enter(e, fn, "src_cache", src_cache, "dst_cache_index", dst_cache_index,
                                           "src_cache", src_cache, src_blocks, num_src_blocks, dst_blocks,
                                           num_dst_blocks);
    return ENGINE_RUN(e, st, xfer_push_blocks(e, fn, src_cache, dst_cache_index, src_blocks, num_src_blocks, dst_blocks,
                                              num_dst_blocks, ext_param));
}
