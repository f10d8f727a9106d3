/* The key table of an engine (engine_keys.c) and the release rule of keys
 * (engine_release.c). */
#ifndef LLDD_MOCK_KEYS_H
#define LLDD_MOCK_KEYS_H

#include <stddef.h>
#include <stdint.h>

#include "core/engine.h"

/* A key release after a successful pull (semantics.md §9.5): the key, and the source tensors read
 * (all: the pull had no source range). */
typedef struct release_req {
    int64_t cache_id;
    uint64_t slot;
    uint32_t key_ns;
    uint32_t all;
    uint64_t key_id, key_model;
    uint64_t count;                  /* then count uint64 tensor indexes */
} release_req;

/* ---- engine_keys.c: the key table ---- */
keynode *key_find_locked(engine *e, uint32_t ns, uint64_t id, uint64_t model);
/* Makes room in the table for `more` bindings; -1 on no memory. */
int key_table_reserve(keytab *t, size_t more);
/* Binds a key to slot `slot` of c. The table has room (key_table_reserve) and c has its
 * slot array when slot keys are bound. mu held. */
keynode *key_bind_locked(engine *e, mcache *c, uint32_t ns, uint64_t id, uint64_t model, uint64_t slot,
                         int blocks);
/* Unbinds one key (mu held). */
void key_unbind_locked(engine *e, keynode *k);
void keys_teardown(engine *e);
/* docs/reference/python-api.md §7.4: a CacheKey is looked up by (prefix_id, model_id) when prefix_id
 * is given, else by (req_id, model_id); a placeholder has the identity of the blocks
 * key of its model; a BlocksCacheKey is (2**64-1, model_id). */
void key_ident(const lldd_key *k, uint32_t *ns, uint64_t *id, uint64_t *model);

/* ---- engine_release.c: the release rule ---- */
/* The last reference of an owned cache is gone: takes it out of the table and returns it
 * (to destroy without mu), else NULL. mu held. */
mcache *cache_free_if_unreferenced_locked(engine *e, mcache *c);
/* R := R \ X (X NULL: R := ∅) and the release rule of semantics.md §9.5 for key k; returns a cache
 * that lost its last reference (to destroy without mu). mu held. */
mcache *key_release_locked(engine *e, keynode *k, const uint64_t *x, uint64_t nx);
/* mu held. Applies a peer's release; returns a cache to destroy (freed by the release) or NULL. */
mcache *key_release_request_locked(engine *e, const release_req *q, const uint64_t *tensors);

#endif /* LLDD_MOCK_KEYS_H */
