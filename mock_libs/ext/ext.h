/* Helpers shared by the translation units of the extension ABI (engine_ext*.c and
 * their entry points, api_ext_*.c). */
#ifndef LLDD_MOCK_EXT_H
#define LLDD_MOCK_EXT_H

#include "core/engine.h"

/* "PROMPT", "DECODER", "MIX" or "an invalid role". */
const char *ext_role_name(int role);
/* The validity rule of pulls and remove_cache_key (docs/reference/python-api.md §7.5, PR-41):
 * exactly one of req_id and prefix_id is a valid id. */
lldd_status ext_check_cache_key_validity(const char *fn, const char *name, const lldd_key *k);
/* v1 reports transfer timeouts as WAIT_PROC_TIMEOUT (docs/reference/semantics.md §13). */
lldd_status ext_gen_status(const engine *e, lldd_status st);

/* The extension cache calls after their entry (api_ext_caches.c), which has checked the
 * arguments, entered the engine and leaves it afterwards: engine_ext_cache.c ... */
lldd_status ext_cache_register(engine *e, const char *fn, const lldd_cache_desc *desc, const uint64_t *addrs,
                               size_t num_addrs, uint32_t kind, uint32_t remote_accessible, const lldd_key *keys,
                               size_t num_keys, int64_t *cache_id);
lldd_status ext_cache_unregister(engine *e, const char *fn, int64_t cache_id);
lldd_status ext_cache_allocate(engine *e, const char *fn, const lldd_cache_desc *desc, uint32_t kind,
                               const lldd_key *keys, size_t num_keys, int64_t *cache_id, uint64_t *tensor_addrs,
                               size_t addrs_capacity);
lldd_status ext_cache_deallocate(engine *e, const char *fn, int64_t cache_id);
lldd_status ext_cache_remove_key(engine *e, const char *fn, const lldd_key *key);
/* ... engine_ext_copy.c ... */
lldd_status ext_copy_blocks(engine *e, const char *fn, int64_t cache_id, const uint64_t *pairs, size_t num_pairs);
lldd_status ext_swap_blocks(engine *e, const char *fn, const uint64_t *src_addrs, const uint64_t *dst_addrs,
                            size_t num_tensors, uint64_t block_size, const uint64_t *pairs, size_t num_pairs,
                            uint32_t swap_in);

/* ... engine_ext_xfer.c ... */
lldd_status ext_xfer_pull(engine *e, const char *fn, const lldd_key *src, int64_t dst_cache_id, uint32_t batch_index,
                          int64_t size, const uint64_t *src_blocks, size_t num_src_blocks, const uint64_t *dst_blocks,
                          size_t num_dst_blocks, const uint64_t *src_tensors, size_t num_src_tensors,
                          const uint64_t *dst_tensors, size_t num_dst_tensors, int64_t src_cache_offset,
                          int64_t dst_cache_offset, uint32_t tensor_num_per_layer);
lldd_status ext_xfer_push_layer(engine *e, const char *fn, int64_t src_cache_id, uint32_t src_batch_index,
                                uint32_t src_layer, const lldd_key *dst, uint32_t dst_layer,
                                uint32_t tensor_num_per_layer, const uint64_t *src_blocks, size_t num_src_blocks,
                                const uint64_t *dst_blocks, size_t num_dst_blocks);
lldd_status ext_xfer_transfer_layer(engine *e, const char *fn, int64_t src_cache_id, uint32_t src_batch_index,
                                    uint32_t layer, uint64_t dst_cluster_id, const uint64_t *dst_addrs,
                                    const uint64_t *src_blocks, size_t num_src_blocks, const uint64_t *dst_blocks,
                                    size_t num_dst_blocks, uint64_t dst_block_memory_size);
/* ... engine_ext_comm.c ... */
lldd_status ext_comm_link(engine *e, const char *fn, const char *comm_name, const uint64_t *cluster_ids,
                          const uint32_t *ranks, size_t num_members, const char *rank_table, uint64_t *comm_id);
lldd_status ext_comm_unlink(engine *e, const char *fn, uint64_t comm_id);
lldd_status ext_comm_query_mem_status(engine *e, const char *fn, uint64_t comm_id, uint32_t *status);
lldd_status ext_comm_remap_memory(engine *e, const char *fn, const uint64_t *addrs, const uint64_t *sizes, size_t num);
/* ... and engine_ext.c (initialize runs without entering the engine: it holds life_mu) */
lldd_status ext_engine_initialize(engine *e, const char *fn, const lldd_option *options, size_t num_options);
lldd_status ext_engine_switch_role(engine *e, const char *fn, int32_t role, const lldd_option *options,
                                   size_t num_options);
lldd_status ext_engine_check_link_status(engine *e, const char *fn, uint64_t remote_cluster_id);

#endif /* LLDD_MOCK_EXT_H */
