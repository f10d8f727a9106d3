/* The key table of an engine (keys.h): identities and bindings. The release rule of a
 * key's references, which removes a cache, is engine_release.c, above the cache table.
 *
 * The key table maps a key's identity to its binding. Identities live in two
 * namespaces: request keys (req_id, model_id), which blocks keys share as
 * (2**64-1, model_id), and prefix keys (prefix_id, model_id). A binding names a
 * cache and a batch slot; the cache keeps the list of its keys and, per slot, the
 * key bound there, so that a pull by id finds the key of its slot (semantics.md §9.4) and a
 * removed cache takes its keys with it.
 *
 * Every binding gets a sequence number from a per-engine counter, so that a direct-
 * mode table copy (semantics.md §9.7) sees exactly the bindings that existed when it was taken
 * (PR-19). Request and blocks key bindings count 24 bytes each towards the 1 MiB
 * published table in direct mode; prefix bindings are never published.
 *
 * The cache life cycle that keys drive (allocate, register, deallocate) is the
 * extension layer's (engine_ext_cache.c); this file is what the core needs as well: a
 * removed cache unbinds its keys (engine_cache.c calls down into this table).
 */
#include <stdlib.h>
#include <string.h>

#include "core/cache_table.h"
#include "core/engine.h"
#include "core/keys.h"
#include "wire/transport.h"

/* ---------------------------------------------------------------------------------------------
 * the key table
 * ------------------------------------------------------------------------------------------ */

static size_t key_hash(uint32_t ns, uint64_t id, uint64_t model)
{
    uint64_t h = id * 0x9E3779B97F4A7C15ull ^ (model + 0x632BE59BD9B4E019ull) * 0xC2B2AE3D27D4EB4Full ^ ns;
    h ^= h >> 31;
    return (size_t)(h * 0x94D049BB133111EBull >> 7);
}

keynode *key_find_locked(engine *e, uint32_t ns, uint64_t id, uint64_t model)
{
    if (e->keys.nbuckets == 0)
        return NULL;
    for (keynode *k = e->keys.buckets[key_hash(ns, id, model) & (e->keys.nbuckets - 1)]; k != NULL; k = k->hnext)
        if (k->ns == ns && k->id == id && k->model == model)
            return k;
    return NULL;
}

int key_table_reserve(keytab *t, size_t more)
{
    if (t->count + more <= t->nbuckets)
        return 0;
    size_t n = t->nbuckets ? t->nbuckets : 64;
    while (n < t->count + more)
        n *= 2;
    keynode **b = calloc(n, sizeof *b);
    if (b == NULL)
        return -1;
    for (size_t i = 0; i < t->nbuckets; i++) {
        keynode *k = t->buckets[i];
        while (k != NULL) {
            keynode *next = k->hnext;
            size_t j = key_hash(k->ns, k->id, k->model) & (n - 1);
            k->hnext = b[j];
            b[j] = k;
            k = next;
        }
    }
    free(t->buckets);
    t->buckets = b;
    t->nbuckets = n;
    return 0;
}

static int publishes(const engine *e, uint32_t ns)
{
    return e->mode == MODE_DIRECT && ns == KEY_NS_REQ;
}

keynode *key_bind_locked(engine *e, mcache *c, uint32_t ns, uint64_t id, uint64_t model, uint64_t slot,
                         int blocks)
{
    keynode *k = calloc(1, sizeof *k);
    if (k == NULL)
        return NULL;
    k->c = c;
    k->ns = ns;
    k->blocks = (uint32_t)blocks;
    k->id = id;
    k->model = model;
    k->slot = slot;
    k->seq = e->next_bind++;
    size_t j = key_hash(ns, id, model) & (e->keys.nbuckets - 1);
    k->hnext = e->keys.buckets[j];
    e->keys.buckets[j] = k;
    e->keys.count++;
    k->cnext = c->keys;
    if (c->keys != NULL)
        c->keys->cprev = k;
    c->keys = k;
    if (!blocks) {
        c->slot_key[slot] = k;
        c->req_keys++;
    }
    if (publishes(e, ns))
        e->table_bytes += TABLE_KEY_BYTES;
    return k;
}

void key_unbind_locked(engine *e, keynode *k)
{
    size_t j = key_hash(k->ns, k->id, k->model) & (e->keys.nbuckets - 1);
    for (keynode **pp = &e->keys.buckets[j]; *pp != NULL; pp = &(*pp)->hnext) {
        if (*pp == k) {
            *pp = k->hnext;
            break;
        }
    }
    e->keys.count--;
    mcache *c = k->c;
    if (k->cprev != NULL)
        k->cprev->cnext = k->cnext;
    else
        c->keys = k->cnext;
    if (k->cnext != NULL)
        k->cnext->cprev = k->cprev;
    if (!k->blocks) {
        c->slot_key[k->slot] = NULL;
        c->req_keys--;
    }
    if (publishes(e, k->ns))
        e->table_bytes -= TABLE_KEY_BYTES;
    free(k);
}

void keys_teardown(engine *e)
{
    /* every key went with its cache; only the buckets are left */
    free(e->keys.buckets);
    memset(&e->keys, 0, sizeof e->keys);
}

/* ---------------------------------------------------------------------------------------------
 * identities
 * ------------------------------------------------------------------------------------------ */

void key_ident(const lldd_key *k, uint32_t *ns, uint64_t *id, uint64_t *model)
{
    *model = k->model_id;
    if (k->kind == LLDD_KEY_CACHE && k->prefix_id != UINT64_MAX) {
        *ns = KEY_NS_PREFIX;
        *id = k->prefix_id;
    } else {
        *ns = KEY_NS_REQ;
        *id = k->kind == LLDD_KEY_CACHE ? k->req_id : UINT64_MAX;
    }
}
