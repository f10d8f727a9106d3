/* The extension ABI's transfer entry points (lldd/ext.h): pull, push_layer and
 * transfer_layer (engine_ext_xfer.c).
 *
 * An entry takes an injected fault, refuses NULL arguments or wrong options, enters
 * the engine, calls its module's function and leaves the engine: the checks past the
 * arguments, and the order they run in, are the module's. This file belongs to the
 * extension layer (it calls it), not to the core.
 */
#include <stddef.h>
#include <stdint.h>

#include "core/engine.h"
#include "ext/ext.h"
#include "base/mock_internal.h"
#include "core/transfers.h"

MOCK_EXPORT lldd_status lldd_ext_pull(lldd_engine *e, const lldd_key *src, int64_t dst_cache_id, uint32_t batch_index,
                                      int64_t size, const uint64_t *src_blocks, size_t num_src_blocks,
                                      const uint64_t *dst_blocks, size_t num_dst_blocks, const uint64_t *src_tensors,
                                      size_t num_src_tensors, const uint64_t *dst_tensors, size_t num_dst_tensors,
                                      int64_t src_cache_offset, int64_t dst_cache_offset,
                                      uint32_t tensor_num_per_layer)
{
    static const char fn[] = "lldd_ext_pull";
    lldd_status st = engine_args_enter(e, fn, e == NULL ? "engine" : src == NULL ? "src"
                                       : src_blocks == NULL && num_src_blocks > 0 ? "src_blocks (num_src_blocks > 0)"
                                       : dst_blocks == NULL && num_dst_blocks > 0 ? "dst_blocks (num_dst_blocks > 0)"
                                       : src_tensors == NULL && num_src_tensors > 0 ? "src_tensors (num_src_tensors > 0)"
                                       : dst_tensors == NULL && num_dst_tensors > 0 ? "dst_tensors (num_dst_tensors > 0)"
                                       : NULL);
    return ENGINE_RUN(e, st, ext_xfer_pull(e, fn, src, dst_cache_id, batch_index, size, src_blocks, num_src_blocks,
                                           dst_blocks, num_dst_blocks, src_tensors, num_src_tensors, dst_tensors,
                                           num_dst_tensors, src_cache_offset, dst_cache_offset, tensor_num_per_layer));
}

MOCK_EXPORT lldd_status lldd_ext_push_layer(lldd_engine *e, int64_t src_cache_id, uint32_t src_batch_index,
                                            uint32_t src_layer, const lldd_key *dst, uint32_t dst_layer,
                                            uint32_t tensor_num_per_layer, const uint64_t *src_blocks,
                                            size_t num_src_blocks, const uint64_t *dst_blocks, size_t num_dst_blocks)
{
    static const char fn[] = "lldd_ext_push_layer";
    lldd_status st = xfer_call_enter(e, fn, "dst", dst,
                                     NULL, NULL, src_blocks, num_src_blocks, dst_blocks, num_dst_blocks);
    return ENGINE_RUN(e, st,
                      ext_xfer_push_layer(e, fn, src_cache_id, src_batch_index, src_layer, dst, dst_layer,
                                          tensor_num_per_layer, src_blocks, num_src_blocks, dst_blocks,
                                          num_dst_blocks));
}

MOCK_EXPORT lldd_status lldd_ext_transfer_layer(lldd_engine *e, int64_t src_cache_id, uint32_t src_batch_index,
                                                uint32_t layer, uint64_t dst_cluster_id, const uint64_t *dst_addrs,
                                                const uint64_t *src_blocks, size_t num_src_blocks,
                                                const uint64_t *dst_blocks, size_t num_dst_blocks,
                                                uint64_t dst_block_memory_size)
{
    static const char fn[] = "lldd_ext_transfer_layer";
    lldd_status st = xfer_call_enter(e, fn, "dst_addrs (two addresses)", dst_addrs,
                                     NULL, NULL, src_blocks, num_src_blocks, dst_blocks, num_dst_blocks);
    return ENGINE_RUN(e, st,
                      ext_xfer_transfer_layer(e, fn, src_cache_id, src_batch_index, layer, dst_cluster_id, dst_addrs,
                                              src_blocks, num_src_blocks, dst_blocks, num_dst_blocks,
                                              dst_block_memory_size));
}
