/* Helpers shared by the translation units of the extension ABI (engine_ext*.c and
 * their entry points, api_ext_caches.c). */
#ifndef LLDD_MOCK_EXT_H
#define LLDD_MOCK_EXT_H

#include "engine.h"

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
/* ... and engine_ext_copy.c */
lldd_status ext_copy_blocks(engine *e, const char *fn, int64_t cache_id, const uint64_t *pairs, size_t num_pairs);
lldd_status ext_swap_blocks(engine *e, const char *fn, const uint64_t *src_addrs, const uint64_t *dst_addrs,
                            size_t num_tensors, uint64_t block_size, const uint64_t *pairs, size_t num_pairs,
                            uint32_t swap_in);

#endif /* LLDD_MOCK_EXT_H */
