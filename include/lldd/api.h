/* Functions of the flat C ABI: one per public method of llm_datadist::LlmDataDist
 * (docs/reference/cpp-api.md §6), plus version, capabilities and the thread-local last error.
 *
 * Directive-free declaration fragment. Conventions:
 *  - every function that can fail returns an lldd_status, the vendor's value
 *    unchanged (0 is success, LLM_FAILED is 0xFFFFFFFF);
 *  - after a non-zero status, lldd_last_error() on the same thread returns a
 *    message naming the parameter and the rule;
 *  - a NULL engine gives LLM_PARAM_INVALID; NULL out-pointers likewise;
 *  - ext == NULL means the vendor's default KvCacheExtParam{{-1,-1},{-1,-1},2};
 *  - block lists are arrays of uint64_t with a count; a count of 0 may come with
 *    a NULL pointer.
 */

uint32_t lldd_abi_version(void);
uint64_t lldd_capabilities(void);
const char *lldd_backend_name(void);        /* "mock" or "ascend" */
const char *lldd_last_error(void);          /* never NULL; "" before any failure */

/* LlmDataDist(cluster_id, role). The role is checked by Initialize. */
lldd_status lldd_create(uint64_t cluster_id, int32_t role, lldd_engine **out);
/* ~LlmDataDist(): finalizes an initialised engine, then frees it. NULL is a no-op. No
 * other call on the engine may be running or start meanwhile (native.LlmDataDist holds
 * its engine with a reference count for this, docs/security.md §1.2). */
void lldd_destroy(lldd_engine *engine);

lldd_status lldd_initialize(lldd_engine *engine, const lldd_option *options, size_t num_options);
void lldd_finalize(lldd_engine *engine);
lldd_status lldd_set_role(lldd_engine *engine, int32_t role, const lldd_option *options, size_t num_options);

/* rets receives one status per cluster, in input order, when the per-cluster stage
 * is reached (*num_rets = num_clusters); otherwise *num_rets = 0. rets must have room
 * for num_clusters entries. */
lldd_status lldd_link_clusters(lldd_engine *engine, const lldd_cluster_info *clusters, size_t num_clusters,
                               int32_t timeout_in_millis, lldd_status *rets, size_t *num_rets);
lldd_status lldd_unlink_clusters(lldd_engine *engine, const lldd_cluster_info *clusters, size_t num_clusters,
                                 int32_t timeout_in_millis, int32_t force_flag, lldd_status *rets,
                                 size_t *num_rets);

/* AllocateCache: fills *cache_id and tensor_addrs[0 .. num_tensors) (addrs_capacity
 * must be >= cache_desc->num_tensors). */
lldd_status lldd_allocate_cache(lldd_engine *engine, const lldd_cache_desc *cache_desc, int64_t *cache_id,
                                uint64_t *tensor_addrs, size_t addrs_capacity);
lldd_status lldd_deallocate_cache(lldd_engine *engine, int64_t cache_id);

lldd_status lldd_register_kv_cache(lldd_engine *engine, const lldd_cache_desc *cache_desc, const uint64_t *addrs,
                                   size_t num_addrs, int64_t *cache_id);
lldd_status lldd_unregister_kv_cache(lldd_engine *engine, int64_t cache_id);

lldd_status lldd_pull_kv_cache(lldd_engine *engine, const lldd_cache_index *src_cache_index,
                               const lldd_cache *dst_cache, uint32_t batch_index, int64_t size,
                               const lldd_ext_param *ext_param);
lldd_status lldd_pull_kv_blocks(lldd_engine *engine, const lldd_cache_index *src_cache_index,
                                const lldd_cache *dst_cache, const uint64_t *src_blocks, size_t num_src_blocks,
                                const uint64_t *dst_blocks, size_t num_dst_blocks,
                                const lldd_ext_param *ext_param);
lldd_status lldd_push_kv_cache(lldd_engine *engine, const lldd_cache *src_cache,
                               const lldd_cache_index *dst_cache_index, uint32_t src_batch_index, int64_t size,
                               const lldd_ext_param *ext_param);
lldd_status lldd_push_kv_blocks(lldd_engine *engine, const lldd_cache *src_cache,
                                const lldd_cache_index *dst_cache_index, const uint64_t *src_blocks,
                                size_t num_src_blocks, const uint64_t *dst_blocks, size_t num_dst_blocks,
                                const lldd_ext_param *ext_param);
lldd_status lldd_copy_kv_cache(lldd_engine *engine, const lldd_cache *src_cache, const lldd_cache *dst_cache,
                               uint32_t src_batch_index, uint32_t dst_batch_index, uint64_t offset,
                               int64_t size);
/* dst_blocks_list is flattened: list k has dst_list_lens[k] entries, stored one list
 * after another in dst_blocks_flat. */
lldd_status lldd_copy_kv_blocks(lldd_engine *engine, const lldd_cache *src_cache, const lldd_cache *dst_cache,
                                const uint64_t *src_blocks, size_t num_src_blocks,
                                const uint64_t *dst_blocks_flat, const size_t *dst_list_lens,
                                size_t num_dst_lists);
