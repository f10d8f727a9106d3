/* Extension functions: what only the vendor's *Python* layer has (docs/design.md, "Layers").
 *
 * Cache keys (request, prefix and model ids; blocks-cache keys), allocation with keys
 * and their reference counting, remove_cache_key, CACHE and BLOCKS cache kinds,
 * server-assisted transfer mode, the v1 generation (KvCacheManager), pull offsets,
 * tensor-index lists, per-layer pushes, transfers to caller-given addresses, swaps
 * between host and device blocks, and rank-table links. The vendor-compatible Python
 * layer (llm_datadist_ffi.v2, .vendor) calls these with the arguments the vendor's
 * Python layer hands to its own core (docs/reference/python-api.md: each call's "Native call" step).
 *
 * Capability LLDD_CAP_EXT_KEYS. A backend without it (the ascend shim over the public
 * C++ class) returns LLM_FEATURE_NOT_ENABLED with a message naming what to use instead.
 *
 * Directive-free declaration fragment.
 */

/* lldd_key.kind */
enum {
    LLDD_KEY_CACHE  = 1,    /* CacheKey(cluster_id, req_id, model_id, prefix_id); placeholders too */
    LLDD_KEY_BY_ID  = 2,    /* CacheKeyByIdAndIndex(cluster_id, cache_id, batch_index) */
    LLDD_KEY_BLOCKS = 3     /* BlocksCacheKey(cluster_id, model_id) */
};

/* A cache key as the core sees it (docs/reference/python-api.md §7.4). Ids that are not given are
 * 2**64-1 (the vendor's "invalid id"). */
typedef struct lldd_key {
    uint32_t kind;
    uint32_t batch_index;   /* LLDD_KEY_BY_ID */
    uint64_t cluster_id;    /* the engine holding the cache */
    uint64_t req_id;        /* LLDD_KEY_CACHE */
    uint64_t prefix_id;     /* LLDD_KEY_CACHE */
    uint64_t model_id;      /* LLDD_KEY_CACHE, LLDD_KEY_BLOCKS */
    int64_t cache_id;       /* LLDD_KEY_BY_ID */
} lldd_key;

/* Cache kind for registration and allocation (docs/reference/semantics.md §2.2). */
enum {
    LLDD_CACHE_KIND_CACHE  = 1,
    LLDD_CACHE_KIND_BLOCKS = 2
};

/* Rank-table link state (RegisterMemStatus). */
enum {
    LLDD_REGISTER_MEM_OK        = 0,
    LLDD_REGISTER_MEM_PREPARING = 1,
    LLDD_REGISTER_MEM_FAILED    = 2
};

/* Initialise with the option map the vendor's Python layer builds (docs/reference/python-api.md
 * §10.2): llm.Role ("Prompt"/"Decoder"/"Mix"); llm.EnableCacheManager == "1" selects
 * v2, anything else v1; in v2 llm.EnableRemoteCacheAccessible == "1" selects direct
 * mode, llm.ListenIp + llm.ListenPort the listener, ge.exec.deviceId the device
 * (default 0); in v1 ge.exec.deviceId is required and llm.listenIpInfo gives a
 * Prompt's listener. The mode is fixed until finalize. */
lldd_status lldd_ext_initialize(lldd_engine *engine, const lldd_option *options, size_t num_options);

/* switch_role with the vendor Python's option names (llm.ListenIp/llm.ListenPort in
 * v2, llm.listenIpInfo in v1) and the generation's rules (semantics.md §10.7). */
lldd_status lldd_ext_switch_role(lldd_engine *engine, int32_t role, const lldd_option *options,
                                 size_t num_options);

/* v1 check_link_status (semantics.md §10.8). */
lldd_status lldd_ext_check_link_status(lldd_engine *engine, uint64_t remote_cluster_id);

/* register_cache / register_blocks_cache (v2): kind CACHE with request/prefix keys
 * bound to slots 0, 1, ... (placeholders advance), or kind BLOCKS with at most one
 * blocks key. */
lldd_status lldd_ext_register_cache(lldd_engine *engine, const lldd_cache_desc *cache_desc, const uint64_t *addrs,
                                    size_t num_addrs, uint32_t kind, uint32_t remote_accessible,
                                    const lldd_key *keys, size_t num_keys, int64_t *cache_id);
lldd_status lldd_ext_unregister_cache(lldd_engine *engine, int64_t cache_id);

/* allocate_cache / allocate_blocks_cache (v2 and v1) from the engine's pool. Fills
 * *cache_id and tensor_addrs[0 .. num_tensors). */
lldd_status lldd_ext_allocate_cache(lldd_engine *engine, const lldd_cache_desc *cache_desc, uint32_t kind,
                                    const lldd_key *keys, size_t num_keys, int64_t *cache_id,
                                    uint64_t *tensor_addrs, size_t addrs_capacity);
/* deallocate_cache / deallocate_blocks_cache: freeing is deferred while keys are
 * bound (v2, docs/reference/semantics.md §3.4, §9.8); v1: an unknown id is LLM_KV_CACHE_NOT_EXIST. */
lldd_status lldd_ext_deallocate_cache(lldd_engine *engine, int64_t cache_id);
lldd_status lldd_ext_remove_cache_key(lldd_engine *engine, const lldd_key *key);

/* pull_cache and pull_blocks of both generations (docs/reference/python-api.md §12, §11.2 step 10):
 * tensor-index lists empty = all tensors; offsets -1 = not given (v1 only). */
lldd_status lldd_ext_pull(lldd_engine *engine, const lldd_key *src, int64_t dst_cache_id, uint32_t batch_index,
                          int64_t size, const uint64_t *src_blocks, size_t num_src_blocks,
                          const uint64_t *dst_blocks, size_t num_dst_blocks, const uint64_t *src_tensors,
                          size_t num_src_tensors, const uint64_t *dst_tensors, size_t num_dst_tensors,
                          int64_t src_cache_offset, int64_t dst_cache_offset, uint32_t tensor_num_per_layer);

/* One layer of push_cache (dst kind BY_ID), push_blocks (dst kind BLOCKS) or a
 * TransferWithCacheKeyConfig (docs/reference/semantics.md §8.5–§8.7). */
lldd_status lldd_ext_push_layer(lldd_engine *engine, int64_t src_cache_id, uint32_t src_batch_index,
                                uint32_t src_layer, const lldd_key *dst, uint32_t dst_layer,
                                uint32_t tensor_num_per_layer, const uint64_t *src_blocks, size_t num_src_blocks,
                                const uint64_t *dst_blocks, size_t num_dst_blocks);

/* One layer of a TransferConfig (server-assisted v2, v1): the layer's two tensors to
 * the peer addresses dst_addrs[0], dst_addrs[1] (docs/reference/semantics.md §8.7, PR-16, PR-40).
 * dst_block_memory_size 0 = not given. */
lldd_status lldd_ext_transfer_layer(lldd_engine *engine, int64_t src_cache_id, uint32_t src_batch_index,
                                    uint32_t layer, uint64_t dst_cluster_id, const uint64_t *dst_addrs,
                                    const uint64_t *src_blocks, size_t num_src_blocks, const uint64_t *dst_blocks,
                                    size_t num_dst_blocks, uint64_t dst_block_memory_size);

/* copy_cache (semantics.md §6.6, §8.8) and copy_blocks (pairs src0, dst0, src1, dst1, ...; semantics.md §8.9). */
lldd_status lldd_ext_copy_cache(lldd_engine *engine, int64_t dst_cache_id, int64_t src_cache_id,
                                uint32_t dst_batch_index, uint32_t src_batch_index, uint64_t offset, int64_t size);
lldd_status lldd_ext_copy_blocks(lldd_engine *engine, int64_t cache_id, const uint64_t *pairs, size_t num_pairs);

/* swap_blocks by addresses (semantics.md §8.10): pairs src0, dst0, ...; swap_in 1 = HOST→DEVICE. */
lldd_status lldd_ext_swap_blocks(lldd_engine *engine, const uint64_t *src_addrs, const uint64_t *dst_addrs,
                                 size_t num_tensors, uint64_t block_size, const uint64_t *pairs, size_t num_pairs,
                                 uint32_t swap_in);

/* Rank-table links (semantics.md §10.6): every member calls link with the same comm_name. */
lldd_status lldd_ext_link(lldd_engine *engine, const char *comm_name, const uint64_t *cluster_ids,
                          const uint32_t *ranks, size_t num_members, const char *rank_table, uint64_t *comm_id);
lldd_status lldd_ext_unlink(lldd_engine *engine, uint64_t comm_id);
lldd_status lldd_ext_query_register_mem_status(lldd_engine *engine, uint64_t comm_id, uint32_t *status);

/* remap_registered_memory (docs/reference/python-api.md §11.7). */
lldd_status lldd_ext_remap_registered_memory(lldd_engine *engine, const uint64_t *addrs, const uint64_t *sizes,
                                             size_t num);
