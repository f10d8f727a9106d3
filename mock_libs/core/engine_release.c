/* The release rule of a key's references (keys.h, docs/reference/semantics.md §9.5,
 * §9.8): a release shrinks the set of source tensors still to be read, unbinds the key
 * when it is empty, and takes an owned cache that lost its last reference out of the
 * table. Above the key table (engine_keys.c) and the cache table (engine_cache.c), which
 * it calls; a link's server thread (engine_serve.c) applies a peer's release through it,
 * the extension layer its own.
 */
#include <string.h>

#include "core/cache_table.h"
#include "core/engine.h"
#include "core/keys.h"

mcache *cache_free_if_unreferenced_locked(engine *e, mcache *c)
{
    if (!c->w.owned || c->ext_ref > 0 || c->req_keys > 0 || c->removed)
        return NULL;
    table_remove_locked(e, c);
    return c;
}

mcache *key_release_locked(engine *e, keynode *k, const uint64_t *x, uint64_t nx)
{
    mcache *c = k->c;
    if (c->remaining != NULL) {
        if (x == NULL) {
            memset(c->remaining, 0, ((size_t)c->w.num_tensors + 63) / 64 * sizeof *c->remaining);
            c->remaining_count = 0;
        } else {
            for (uint64_t i = 0; i < nx; i++) {
                uint64_t t = x[i];
                if (t >= c->w.num_tensors)
                    continue;
                uint64_t bit = 1ull << (t % 64);
                if (c->remaining[t / 64] & bit) {
                    c->remaining[t / 64] &= ~bit;
                    c->remaining_count--;
                }
            }
        }
    }
    if (c->remaining != NULL && c->remaining_count > 0)
        return NULL;
    key_unbind_locked(e, k);
    return cache_free_if_unreferenced_locked(e, c);
}

mcache *key_release_request_locked(engine *e, const release_req *q, const uint64_t *tensors)
{
    keynode *k = key_find_locked(e, q->key_ns, q->key_id, q->key_model);
    if (k == NULL || k->blocks || k->ns != KEY_NS_REQ || k->c->w.id != q->cache_id || k->slot != q->slot ||
        !k->c->w.owned || k->c->w.kind != KIND_CACHE)
        return NULL; /* released or re-bound meanwhile, or not releasable */
    return key_release_locked(e, k, q->all ? NULL : tensors, q->count);
}
