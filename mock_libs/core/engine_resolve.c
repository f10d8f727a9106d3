/* The holder's side of a transfer by key or id (resolve.h): what a pull's source or a
 * push's destination names, resolved on the engine that holds it. A transfer in one
 * process calls it under the holder's mu; a link's server thread (engine_serve.c) calls
 * it for a peer in another process (MSG_RESOLVE, MSG_FIND_ADDR).
 *
 *   server-assisted (v2) and v1   live: the holder's current key table and caches;
 *                                  a by-id source on a slot bound to a request key is
 *                                  a pull through that key (semantics.md §9.4);
 *   direct (v2)                    against the link's table copy (semantics.md §9.7): ids below its
 *                                  id mark, bindings below its binding mark, and still
 *                                  live (PR-7, PR-19); prefix keys never resolve.
 */
#include <stdio.h>
#include <string.h>

#include "core/cache_table.h"
#include "core/engine.h"
#include "core/keys.h"
#include "wire/links.h"
#include "core/resolve.h"

lldd_status holder_resolve_locked(engine *e, mlink *link, const resolve_req *q, mcache **out, resolve_reply *r,
                                  char *why, size_t why_len)
{
    memset(r, 0, sizeof *r);
    *out = NULL;
    int direct = q->direct != 0;
    int64_t id_mark = q->id_mark != 0 ? q->id_mark : e->next_id;
    uint64_t bind_mark = q->id_mark != 0 ? q->bind_mark : e->next_bind;
    r->id_mark = id_mark;
    r->bind_mark = bind_mark;
    if (q->v1 && link != NULL && atomic_load(&link->busy)) {
        /* v1: this side is itself transferring over the link (semantics.md §10.5) */
        snprintf(why, why_len, "the link is busy: cluster %llu is serving another request on it",
                 (unsigned long long)e->cluster_id);
        return LLM_LINK_BUSY;
    }
    mcache *c = NULL;
    uint64_t slot = 0;
    if (q->key_kind == LLDD_KEY_BY_ID) {
        if (q->cache_id <= 0) {
            snprintf(why, why_len, "cache id %lld never names a cache (ids start at 1, PR-20)",
                     (long long)q->cache_id);
            return LLM_KV_CACHE_NOT_EXIST;
        }
        c = (!direct || q->cache_id < id_mark) ? cache_find_locked(e, q->cache_id) : NULL;
        if (c == NULL) {
            if (direct && q->cache_id >= id_mark)
                snprintf(why, why_len, "cache %lld is not in this link's copy of cluster %llu's cache table, taken "
                         "at the link's first transfer (docs/reference/semantics.md §9.7)", (long long)q->cache_id,
                         (unsigned long long)e->cluster_id);
            else
                snprintf(why, why_len, "cache %lld does not exist on cluster %llu (never there, or freed: PR-7)",
                         (long long)q->cache_id, (unsigned long long)e->cluster_id);
            return LLM_KV_CACHE_NOT_EXIST;
        }
        slot = q->batch_index;
        keynode *k = (!direct && c->slot_key != NULL && slot < c->w.batches) ? c->slot_key[slot] : NULL;
        if (k != NULL) {
            r->through_key = 1;
            r->key_ns = k->ns;
            r->key_id = k->id;
            r->key_model = k->model;
        } else if (!q->push && slot >= c->w.batches) {
            snprintf(why, why_len, "batch_index %llu is out of range: cache %lld on cluster %llu has %llu batches%s",
                     (unsigned long long)slot, (long long)c->w.id, (unsigned long long)e->cluster_id,
                     (unsigned long long)c->w.batches, direct ? " (PR-6)" : "");
            return LLM_KV_CACHE_NOT_EXIST;
        }
    } else {
        lldd_key key;
        memset(&key, 0, sizeof key);
        key.kind = q->key_kind;
        key.req_id = q->req_id;
        key.prefix_id = q->prefix_id;
        key.model_id = q->model_id;
        uint32_t ns;
        uint64_t id, model;
        key_ident(&key, &ns, &id, &model);
        if (direct && ns == KEY_NS_PREFIX) {
            snprintf(why, why_len, "prefix key (prefix_id %llu, model_id %llu): prefix bindings are never published "
                     "in direct mode (docs/reference/semantics.md §9.4)", (unsigned long long)id, (unsigned long long)model);
            return LLM_KV_CACHE_NOT_EXIST;
        }
        keynode *k = key_find_locked(e, ns, id, model);
        int blocks = q->key_kind == LLDD_KEY_BLOCKS;
        if (k != NULL && (int)k->blocks != blocks)
            k = NULL;
        if (k != NULL && direct && (k->seq >= bind_mark || k->c->w.id >= id_mark)) {
            snprintf(why, why_len, "the %s was bound on cluster %llu after this link's copy of its cache table was "
                     "taken (docs/reference/semantics.md §9.7, PR-19)", blocks ? "blocks key" : "key", (unsigned long long)e->cluster_id);
            return LLM_KV_CACHE_NOT_EXIST;
        }
        if (k == NULL) {
            if (blocks)
                snprintf(why, why_len, "no cache on cluster %llu is bound to the blocks key of model_id %llu",
                         (unsigned long long)e->cluster_id, (unsigned long long)model);
            else
                snprintf(why, why_len, "no cache on cluster %llu is bound to the %s key (%s_id %llu, model_id %llu)",
                         (unsigned long long)e->cluster_id, ns == KEY_NS_PREFIX ? "prefix" : "request",
                         ns == KEY_NS_PREFIX ? "prefix" : "req", (unsigned long long)id, (unsigned long long)model);
            return LLM_KV_CACHE_NOT_EXIST;
        }
        c = k->c;
        slot = k->slot;
        if (!blocks) {
            r->through_key = 1;
            r->key_ns = k->ns;
            r->key_id = k->id;
            r->key_model = k->model;
        }
    }
    r->w = c->w;
    r->slot = slot;
    r->dev_pool = e->dev_pool.present ? 1 : 0;
    *out = c;
    return LLM_SUCCESS;
}

mcache *holder_find_addr_locked(engine *e, uint64_t addr, uint64_t len, uint32_t *tensor)
{
    uint64_t end;
    if (__builtin_add_overflow(addr, len, &end))
        return NULL;
    for (size_t i = 0; i < e->cache_count; i++) {
        mcache *c = e->caches[i];
        if (!c->w.remote_accessible)
            continue;
        for (uint32_t t = 0; t < c->w.num_tensors; t++) {
            uint64_t base = c->addrs[t];
            if (addr >= base && end <= base + c->w.tensor_size && addr - base <= c->w.tensor_size) {
                *tensor = t;
                return c;
            }
        }
    }
    return NULL;
}
