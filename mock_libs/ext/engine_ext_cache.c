/* Cache keys and the cache life cycle of the extension ABI: register_cache /
 * register_blocks_cache / unregister_cache (v2), allocate_cache /
 * allocate_blocks_cache / deallocate_cache / remove_cache_key (v2 and v1)
 * (docs/reference/semantics.md §2.2, §3, §9; docs/reference/python-api.md §11.1, §11.5, §12).
 *
 * The key table and the release rule are the core's (engine_keys.c, engine_release.c);
 * this file binds keys at registration and allocation and drops the id's reference.
 *
 * Reference counting (semantics.md §9.5): an owned non-blocks cache holds one reference for its
 * id (ext_ref, dropped by deallocate) and one per bound request or prefix key; the
 * remaining-tensor set R is a bitmap over its tensors, filled when keys are bound
 * at allocation. When the last reference goes the cache is freed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/cache_table.h"
#include "core/engine.h"
#include "ext/ext.h"
#include "core/keys.h"
#include "base/mock_internal.h"
#include "wire/transport.h"

/* ---------------------------------------------------------------------------------------------
 * identities
 * ------------------------------------------------------------------------------------------ */

typedef struct ident {
    uint32_t ns;
    uint64_t id, model;
    int placeholder;
    size_t pos;
} ident;

static void describe_ident(char *buf, size_t n, uint32_t ns, uint64_t id, uint64_t model, int placeholder)
{
    if (placeholder)
        snprintf(buf, n, "placeholder key (model_id %llu)", (unsigned long long)model);
    else if (ns == KEY_NS_PREFIX)
        snprintf(buf, n, "prefix key (prefix_id %llu, model_id %llu)", (unsigned long long)id,
                 (unsigned long long)model);
    else if (id == UINT64_MAX)
        snprintf(buf, n, "blocks key (model_id %llu)", (unsigned long long)model);
    else
        snprintf(buf, n, "request key (req_id %llu, model_id %llu)", (unsigned long long)id,
                 (unsigned long long)model);
}

static int cmp_ident(const void *a, const void *b)
{
    const ident *x = a, *y = b;
    if (x->ns != y->ns)
        return x->ns < y->ns ? -1 : 1;
    if (x->id != y->id)
        return x->id < y->id ? -1 : 1;
    if (x->model != y->model)
        return x->model < y->model ? -1 : 1;
    return x->pos < y->pos ? -1 : x->pos > y->pos;
}

/* The keys of one register/allocate call, checked (docs/reference/semantics.md §9.2, §9.3, PR-21,
 * PR-22). On success bind[i] says whether keys[i] binds slot i. mu held.
 * Registration (reg) follows the vendor's registration, which checks no key: a key
 * already bound keeps that binding and binds nothing here; a key repeated within the
 * call binds this cache once, at the slot of its last occurrence (the vendor's slot
 * map keeps the last write); both with a PR-21 lint. Allocation refuses them (PR-22 in v2; v1 binds the last
 * occurrence). More keys than slots are refused either way (a guard: the extra keys
 * would name batches past the cache). */
typedef struct key_plan {
    unsigned char *bind;
    size_t binds;         /* request/prefix bindings to make */
    size_t published;     /* of which request keys (published table) */
} key_plan;

static lldd_status plan_slot_keys(engine *e, const char *fn, const lldd_key *keys, size_t n, uint64_t slots,
                                  int v1, int reg, key_plan *out)
{
    memset(out, 0, sizeof *out);
    if (n == 0)
        return LLM_SUCCESS;
    if ((uint64_t)n > slots) {
        mock_set_error("%s: %zu cache keys for a cache of %llu batches (shape[0]); at most one key per batch",
                       fn, n, (unsigned long long)slots);
        return LLM_PARAM_INVALID;
    }
    ident *v = malloc(n * sizeof *v);
    out->bind = calloc(n, 1);
    if (v == NULL || out->bind == NULL) {
        free(v);
        free(out->bind);
        out->bind = NULL;
        mock_set_error("%s: out of host memory", fn);
        return LLM_FAILED;
    }
    for (size_t i = 0; i < n; i++) {
        key_ident(&keys[i], &v[i].ns, &v[i].id, &v[i].model);
        v[i].placeholder = v[i].ns == KEY_NS_REQ && v[i].id == UINT64_MAX;
        v[i].pos = i;
        out->bind[i] = !v[i].placeholder;
    }
    qsort(v, n, sizeof *v, cmp_ident);
    lldd_status st = LLM_SUCCESS;
    char what[96];
    if (!v1) {
        /* PR-22: the earliest repeat of any identity, placeholders included */
        size_t best = SIZE_MAX, first = 0;
        for (size_t i = 1; i < n; i++) {
            if (v[i].ns == v[i - 1].ns && v[i].id == v[i - 1].id && v[i].model == v[i - 1].model &&
                (best == SIZE_MAX || v[i].pos < v[best].pos)) {
                best = i;
                size_t j = i;
                while (j > 0 && v[j - 1].ns == v[i].ns && v[j - 1].id == v[i].id && v[j - 1].model == v[i].model)
                    j--;
                first = j;
            }
        }
        if (best != SIZE_MAX && reg) {
            for (size_t i = 0; i + 1 < n; i++)
                if (v[i].ns == v[i + 1].ns && v[i].id == v[i + 1].id && v[i].model == v[i + 1].model)
                    out->bind[v[i].pos] = 0; /* the last occurrence gives the slot */
            describe_ident(what, sizeof what, v[best].ns, v[best].id, v[best].model, v[best].placeholder);
            if (mock_lint(21, "%s: cache_keys[%zu] repeats cache_keys[%zu], the %s; the key binds once, at the slot "
                              "of its last occurrence (PR-21)", fn, v[best].pos, v[first].pos, what))
                st = LLM_PARAM_INVALID;
        } else if (best != SIZE_MAX) {
            describe_ident(what, sizeof what, v[best].ns, v[best].id, v[best].model, v[best].placeholder);
            mock_set_error("%s: cache_keys[%zu] repeats cache_keys[%zu], the %s; a key may appear once per call "
                           "(PR-22)", fn, v[best].pos, v[first].pos, what);
            st = LLM_PARAM_INVALID;
        }
    } else {
        /* v1: the last occurrence binds (documented); placeholders repeat freely */
        for (size_t i = 0; i + 1 < n; i++)
            if (!v[i].placeholder && v[i + 1].ns == v[i].ns && v[i + 1].id == v[i].id && v[i + 1].model == v[i].model)
                out->bind[v[i].pos] = 0;
    }
    for (size_t i = 0; st == LLM_SUCCESS && i < n; i++) {
        const ident *x = &v[i];
        if (x->placeholder && v1)
            continue;
        if (key_find_locked(e, x->ns, x->id, x->model) != NULL) {
            describe_ident(what, sizeof what, x->ns, x->id, x->model, x->placeholder);
            if (reg) {
                out->bind[x->pos] = 0; /* the live binding stays */
                if (mock_lint(21, "%s: cache_keys[%zu], the %s, is already bound to a live cache; that binding "
                                  "stays and this one binds nothing (PR-21)", fn, x->pos, what))
                    st = LLM_PARAM_INVALID;
                continue;
            }
            if (x->placeholder)
                mock_set_error("%s: cache_keys[%zu], a %s, has the identity of the blocks key bound to model_id "
                               "%llu (PR-22)", fn, x->pos, what, (unsigned long long)x->model);
            else
                mock_set_error("%s: cache_keys[%zu], the %s, is already bound to a live cache", fn, x->pos, what);
            st = v1 ? LLM_FAILED : LLM_PARAM_INVALID;
        }
    }
    for (size_t i = 0; i < n; i++) {
        if (out->bind[i]) {
            out->binds++;
            if (keys[i].prefix_id == UINT64_MAX)
                out->published++; /* request keys are published, prefix keys never (semantics.md §9.7) */
        }
    }
    free(v);
    if (st != LLM_SUCCESS) {
        free(out->bind);
        out->bind = NULL;
    }
    return st;
}

/* Binds the planned slot keys of c (mu held; table room reserved). */
static void bind_slot_keys(engine *e, mcache *c, const lldd_key *keys, size_t n, const key_plan *kp)
{
    for (size_t i = 0; i < n; i++) {
        if (!kp->bind[i])
            continue;
        uint32_t ns;
        uint64_t id, model;
        key_ident(&keys[i], &ns, &id, &model);
        key_bind_locked(e, c, ns, id, model, i, 0);
    }
}

/* Memory for the key bookkeeping of a cache that will get `binds` slot keys. */
static int cache_key_room(mcache *c, size_t binds, int owned)
{
    if (binds == 0)
        return 0;
    c->slot_key = calloc((size_t)c->w.batches, sizeof *c->slot_key);
    if (c->slot_key == NULL)
        return -1;
    if (owned) {
        size_t words = ((size_t)c->w.num_tensors + 63) / 64;
        c->remaining = calloc(words, sizeof *c->remaining);
        if (c->remaining == NULL)
            return -1;
        for (uint32_t t = 0; t < c->w.num_tensors; t++)
            c->remaining[t / 64] |= 1ull << (t % 64);
        c->remaining_count = c->w.num_tensors;
    }
    return 0;
}

/* ---------------------------------------------------------------------------------------------
 * argument checks shared by register and allocate
 * ------------------------------------------------------------------------------------------ */

static lldd_status check_kind_and_keys(const char *fn, uint32_t kind, const lldd_key *keys, size_t n)
{
    if (kind != LLDD_CACHE_KIND_CACHE && kind != LLDD_CACHE_KIND_BLOCKS) {
        mock_set_error("%s: kind %u is neither LLDD_CACHE_KIND_CACHE (1) nor LLDD_CACHE_KIND_BLOCKS (2)", fn,
                       (unsigned)kind);
        return LLM_PARAM_INVALID;
    }
    if (kind == LLDD_CACHE_KIND_BLOCKS && n > 1) {
        mock_set_error("%s: a blocks cache takes at most one blocks key, %zu given", fn, n);
        return LLM_PARAM_INVALID;
    }
    uint32_t want = kind == LLDD_CACHE_KIND_BLOCKS ? LLDD_KEY_BLOCKS : LLDD_KEY_CACHE;
    for (size_t i = 0; i < n; i++) {
        if (keys[i].kind != want) {
            mock_set_error("%s: keys[%zu].kind is %u; a %s cache takes %s", fn, i, (unsigned)keys[i].kind,
                           kind == LLDD_CACHE_KIND_BLOCKS ? "blocks" : "contiguous",
                           kind == LLDD_CACHE_KIND_BLOCKS ? "one BlocksCacheKey (LLDD_KEY_BLOCKS)"
                                                          : "CacheKeys (LLDD_KEY_CACHE)");
            return LLM_PARAM_INVALID;
        }
    }
    return LLM_SUCCESS;
}

static void apply_kind(cache_wire *w, uint32_t kind, int v1)
{
    if (kind == LLDD_CACHE_KIND_CACHE) {
        w->kind = KIND_CACHE;
        w->blocks = 0;
    } else if (v1) {
        w->kind = KIND_MIX;      /* a v1 blocks cache has D batches and D blocks (semantics.md §2.2) */
    } else {
        w->kind = KIND_BLOCKS;
        w->batches = 1;
    }
}

/* ---------------------------------------------------------------------------------------------
 * register_cache / register_blocks_cache / unregister_cache (v2)
 * ------------------------------------------------------------------------------------------ */

/* The checks of a registration before it takes an id: the generation, kind and keys,
 * remote access (not after a rank-table link, semantics.md §2.6), the rank, the address count. */
static lldd_status register_checks(engine *e, const char *fn, const lldd_cache_desc *desc, size_t num_addrs,
                                   uint32_t kind, uint32_t remote_accessible, const lldd_key *keys,
                                   size_t num_keys)
{
    lldd_status st;
    if (e->gen == GEN_V1) {
        mock_set_error("%s: registration does not exist in KvCacheManager (v1) mode; use allocate_cache", fn);
        return LLM_FEATURE_NOT_ENABLED;
    }
    if ((st = check_kind_and_keys(fn, kind, keys, num_keys)) != LLM_SUCCESS)
        return st;
    if (remote_accessible > 1) {
        mock_set_error("%s: remote_accessible %u must be 0 or 1", fn, (unsigned)remote_accessible);
        return LLM_PARAM_INVALID;
    }
    pthread_mutex_lock(&e->mu);
    int linked = e->rank_linked;
    pthread_mutex_unlock(&e->mu);
    if (linked && remote_accessible) {
        mock_set_error("%s: you can not register remote accessible cache after link (docs/reference/semantics.md §2.6)", fn);
        return LLM_PARAM_INVALID;
    }
    if ((st = cache_check_rank(fn, desc)) != LLM_SUCCESS)
        return st;
    if (num_addrs == 0 || num_addrs != desc->num_tensors) {
        mock_set_error("%s: %zu addrs given for cache_desc.num_tensors = %u; they must be equal and not 0", fn,
                       num_addrs, (unsigned)desc->num_tensors);
        return LLM_PARAM_INVALID;
    }
    return LLM_SUCCESS;
}

/* A new cache's keys as its call gave them, the call (v1 engine; a registration or an
 * allocation) and the keys' plan (plan_keys_locked). */
typedef struct cache_keys {
    uint32_t kind;
    const lldd_key *keys;
    size_t num;
    int v1, reg;
    key_plan plan;
} cache_keys;

/* The keys' plan (plan_slot_keys for a cache's slot keys; an allocation refuses a blocks
 * key bound to a live cache, semantics.md §9.3), then the published table's room for the
 * cache and its request-key bindings (semantics.md §15). mu held. */
static lldd_status plan_keys_locked(engine *e, const char *fn, cache_keys *k, const cache_wire *w)
{
    uint64_t published = k->num;
    if (k->kind == LLDD_CACHE_KIND_CACHE) {
        lldd_status st = plan_slot_keys(e, fn, k->keys, k->num, w->batches, k->v1, k->reg, &k->plan);
        if (st != LLM_SUCCESS)
            return st;
        published = k->plan.published;
    } else if (!k->reg && k->num == 1 && key_find_locked(e, KEY_NS_REQ, UINT64_MAX, k->keys[0].model_id) != NULL) {
        mock_set_error("%s: the blocks key of model_id %llu is already bound to a live cache", fn,
                       (unsigned long long)k->keys[0].model_id);
        return k->v1 ? LLM_FAILED : LLM_PARAM_INVALID;
    }
    return table_room_check_locked(e, fn, w->num_tensors, published * TABLE_KEY_BYTES);
}

/* The last locked step of a registration and an allocation (e->mu held; released here),
 * which takes c (NULL when `st` failed before c was made) and gives it its id: unless `st`
 * already failed, the keys' plan and the table's room
 * (plan_keys_locked), room for the cache's key bindings and the insert ("out of host
 * memory" otherwise), then its keys bound (a cache's slot keys as planned; a blocks
 * cache's one key, where the last registration of a model's blocks key wins,
 * semantics.md §9.3). On failure the pages of an allocation go back and c is destroyed;
 * on success the cache is the table's, its id in *cache_id and, for an allocation, its
 * addresses in tensor_addrs. */
static lldd_status insert_bind_unlock(engine *e, const char *fn, lldd_status st, mcache *n, cache_keys *k,
                                      int64_t id, int64_t *cache_id, uint64_t *tensor_addrs)
{
    if (st == LLM_SUCCESS) {
        n->w.id = id;
        st = plan_keys_locked(e, fn, k, &n->w);
    }
    if (st == LLM_SUCCESS && (cache_key_room(n, k->plan.binds, tensor_addrs != NULL) != 0 ||
                              key_table_reserve(&e->keys, k->num) != 0 || table_insert_locked(e, n) != 0)) {
        mock_set_error("%s: out of host memory", fn);
        st = LLM_FAILED;
    }
    if (st != LLM_SUCCESS) {
        if (n != NULL)
            cache_give_pages_locked(n);
        pthread_mutex_unlock(&e->mu);
        free(k->plan.bind);
        cache_destroy(n);
        return st;
    }
    if (k->kind == LLDD_CACHE_KIND_CACHE) {
        bind_slot_keys(e, n, k->keys, k->num, &k->plan);
    } else if (k->num == 1) {
        keynode *old = key_find_locked(e, KEY_NS_REQ, UINT64_MAX, k->keys[0].model_id);
        if (old != NULL)
            key_unbind_locked(e, old);
        key_bind_locked(e, n, KEY_NS_REQ, UINT64_MAX, k->keys[0].model_id, 0, 1);
    }
    if (tensor_addrs != NULL)
        memcpy(tensor_addrs, n->addrs, n->w.num_tensors * sizeof *tensor_addrs);
    pthread_mutex_unlock(&e->mu);
    free(k->plan.bind);
    *cache_id = id;
    return LLM_SUCCESS;
}

/* A registration's description and record: the layout, no address 0, the ranges (E-16);
 * *out is the record (NULL on failure). */
static lldd_status register_record(const char *fn, const lldd_cache_desc *desc, const uint64_t *addrs,
                                   size_t num_addrs, uint32_t kind, uint32_t remote_accessible, cache_wire *w,
                                   mcache **out)
{
    lldd_status st = cache_layout(fn, desc, w);
    if (st == LLM_SUCCESS) {
        w->remote_accessible = remote_accessible;
        apply_kind(w, kind, 0);
        for (size_t i = 0; i < num_addrs && st == LLM_SUCCESS; i++) {
            if (addrs[i] == 0) {
                /* the vendor rejects it only for remote-accessible registrations; any later
                 * local copy or swap would then write to address 0 (docs/semantics.md §0) */
                mock_set_error("%s: addrs[%zu] is 0", fn, i);
                st = LLM_PARAM_INVALID;
            }
        }
    }
    if (st == LLM_SUCCESS)
        st = cache_check_ranges(fn, addrs, num_addrs, w->tensor_size);
    if (st == LLM_SUCCESS && (*out = cache_record_new(fn, w, addrs, num_addrs)) == NULL)
        st = LLM_FAILED;
    return st;
}

lldd_status ext_cache_register(engine *e, const char *fn, const lldd_cache_desc *desc, const uint64_t *addrs,
                               size_t num_addrs, uint32_t kind, uint32_t remote_accessible, const lldd_key *keys,
                               size_t num_keys, int64_t *cache_id)
{
    lldd_status st = register_checks(e, fn, desc, num_addrs, kind, remote_accessible, keys, num_keys);
    if (st != LLM_SUCCESS)
        return st;
    /* From here on the call consumes an id, also when it fails (semantics.md §3.1); the id is taken
     * in the locked step that inserts the cache (docs/security.md §1.1). */
    cache_wire w;
    mcache *c = NULL;
    st = register_record(fn, desc, addrs, num_addrs, kind, remote_accessible, &w, &c);
    pthread_mutex_lock(&e->mu);
    int64_t id = cache_take_id_locked(e);
    cache_keys k = {kind, keys, num_keys, 0, 1, {NULL, 0, 0}};
    return insert_bind_unlock(e, fn, st, c, &k, id, cache_id, NULL);
}

lldd_status ext_cache_unregister(engine *e, const char *fn, int64_t cache_id)
{
    lldd_status st = LLM_SUCCESS;
    mcache *c = NULL;
    if (e->gen == GEN_V1) {
        mock_set_error("%s: registration does not exist in KvCacheManager (v1) mode", fn);
        st = LLM_FEATURE_NOT_ENABLED;
        goto out;
    }
    pthread_mutex_lock(&e->mu);
    c = cache_find_locked(e, cache_id);
    if (c != NULL && c->w.owned &&
        mock_lint(23, "%s: cache %lld was allocated; unregister_cache removes its entry and keys, and "
                      "deallocate_cache is the call that frees it (PR-23)", fn, (long long)cache_id)) {
        pthread_mutex_unlock(&e->mu);
        c = NULL;
        st = LLM_PARAM_INVALID;
        goto out;
    }
    if (c != NULL)
        table_remove_locked(e, c); /* its keys go with it (semantics.md §3.5) */
    pthread_mutex_unlock(&e->mu);
out:
    cache_destroy(c);
    return st;
}

/* ---------------------------------------------------------------------------------------------
 * allocate / deallocate / remove_cache_key
 * ------------------------------------------------------------------------------------------ */

static int any_pool(const engine *e)
{
    return e->dev_pool.present || e->host_pool.present;
}

/* Memory for an owned cache: pages of the placement's pool, or (v1 without a pool
 * size) one device allocation per tensor. mu held. */
static lldd_status take_memory_locked(engine *e, const char *fn, mcache *c, mpool *pool)
{
    const cache_wire *w = &c->w;
    lldd_status oom = e->gen == GEN_V1 ? LLM_DEVICE_OUT_OF_MEMORY : LLM_OUT_OF_MEMORY;
    if (pool == NULL) {
        for (uint32_t t = 0; t < w->num_tensors; t++) {
            void *mem = NULL;
            if (w->tensor_size > SIZE_MAX ||
                mock_acl_alloc_device(e->device, (size_t)w->tensor_size, &mem) != ACL_SUCCESS) {
                for (uint32_t u = 0; u < t; u++) {
                    mock_acl_free_device((void *)(uintptr_t)c->addrs[u]);
                    c->addrs[u] = 0;
                }
                mock_set_error("%s: device %d has no room for %u tensors of %llu bytes", fn, (int)e->device,
                               (unsigned)w->num_tensors, (unsigned long long)w->tensor_size);
                return oom;
            }
            c->addrs[t] = (uint64_t)(uintptr_t)mem;
        }
        c->acl_tensors = 1;
        c->acl_device = e->device;
        return LLM_SUCCESS;
    }
    return cache_take_pages_locked(fn, c, pool, oom);
}

/* The checks of an allocation before it takes an id: kind and keys, a pool, the tensor
 * count and the room for their addresses, the role's key rules (v1), the placement;
 * *pool_out is the pool the cache comes from (NULL: v1 straight from the device). */
static lldd_status allocate_checks(engine *e, const char *fn, const lldd_cache_desc *desc, uint32_t kind,
                                   const lldd_key *keys, size_t num_keys, const uint64_t *tensor_addrs,
                                   size_t addrs_capacity, mpool **pool_out)
{
    int v1 = e->gen == GEN_V1;
    int role = atomic_load(&e->role);
    lldd_status st;
    if ((st = check_kind_and_keys(fn, kind, keys, num_keys)) != LLM_SUCCESS)
        return st;
    if (!v1 && !any_pool(e)) {
        mock_set_error("%s: no memory pool is configured (llm.MemPoolConfig / llm.HostMemPoolConfig); "
                       "allocate_cache needs one", fn);
        return LLM_FEATURE_NOT_ENABLED;
    }
    if ((st = cache_alloc_room_checks(fn, desc, tensor_addrs, addrs_capacity)) != LLM_SUCCESS)
        return st;
    if (v1 && num_keys > 0 && kind == LLDD_CACHE_KIND_CACHE && role != LLDD_ROLE_PROMPT) {
        mock_set_error("%s: allocate_cache with cache_keys is not supported by %s (only a PROMPT binds keys, "
                       "docs/reference/semantics.md §11)", fn, ext_role_name(role));
        return LLM_PARAM_INVALID;
    }
    if (v1 && num_keys > 0 && kind == LLDD_CACHE_KIND_BLOCKS && role == LLDD_ROLE_DECODER) {
        mock_set_error("%s: allocate_blocks_cache with a blocks_cache_key is not supported by DECODER "
                       "(docs/reference/semantics.md §11)", fn);
        return LLM_PARAM_INVALID;
    }
    if (v1) {
        if (desc->placement != LLDD_PLACEMENT_DEVICE) {
            mock_set_error("%s: cache_desc.placement must be DEVICE: only support allocate device cache (v1)", fn);
            return LLM_PARAM_INVALID;
        }
        *pool_out = e->v1_unlimited ? NULL : &e->dev_pool;
        return LLM_SUCCESS;
    }
    return cache_pool_for(e, fn, desc, pool_out);
}

lldd_status ext_cache_allocate(engine *e, const char *fn, const lldd_cache_desc *desc, uint32_t kind,
                               const lldd_key *keys, size_t num_keys, int64_t *cache_id, uint64_t *tensor_addrs,
                               size_t addrs_capacity)
{
    int v1 = e->gen == GEN_V1;
    mpool *pool = NULL;
    lldd_status st = allocate_checks(e, fn, desc, kind, keys, num_keys, tensor_addrs, addrs_capacity, &pool);
    if (st == LLM_SUCCESS && !v1)
        st = cache_check_rank(fn, desc);
    if (st != LLM_SUCCESS)
        return st;
    /* From here on the call consumes an id, also when it fails (semantics.md §3.1; v1 also when the
     * rank is wrong); the id is taken in the locked step that inserts the cache
     * (docs/security.md §1.1). */
    cache_wire w;
    mcache *c = NULL;
    if (v1)
        st = cache_check_rank(fn, desc);
    if (st == LLM_SUCCESS && (st = cache_owned_new(fn, desc, &w, &c)) == LLM_SUCCESS) {
        w.remote_accessible = 1;      /* pools are registered at init */
        apply_kind(&w, kind, v1);
    }
    pthread_mutex_lock(&e->mu);
    int64_t id;
    if ((st = cache_alloc_id_locked(e, fn, st, c, &w, &id)) == LLM_SUCCESS)
        st = take_memory_locked(e, fn, c, pool);
    cache_keys k = {kind, keys, num_keys, v1, 0, {NULL, 0, 0}};   /* semantics.md §9.2 */
    return insert_bind_unlock(e, fn, st, c, &k, id, cache_id, tensor_addrs);
}

lldd_status ext_cache_deallocate(engine *e, const char *fn, int64_t cache_id)
{
    lldd_status st = LLM_SUCCESS;
    mcache *gone = NULL;
    int v1 = e->gen == GEN_V1;
    if (!v1 && !any_pool(e)) {
        mock_set_error("%s: no memory pool is configured (llm.MemPoolConfig / llm.HostMemPoolConfig); "
                       "deallocate_cache needs one", fn);
        st = LLM_FEATURE_NOT_ENABLED;
        goto out;
    }
    pthread_mutex_lock(&e->mu);
    mcache *c = cache_find_locked(e, cache_id);
    if (c == NULL) {
        pthread_mutex_unlock(&e->mu);
        if (v1) {
            mock_set_error("%s: cache id %lld does not exist", fn, (long long)cache_id);
            st = LLM_KV_CACHE_NOT_EXIST;
        }
        goto out; /* v2: success, nothing happens (semantics.md §3.4) */
    }
    if (c->w.owned && c->ext_ref > 0) {
        if (kind_has_blocks(&c->w)) {
            /* a blocks cache goes at once, with its key (semantics.md §9.8) */
            table_remove_locked(e, c);
            gone = c;
        } else {
            c->ext_ref = 0;
            gone = cache_free_if_unreferenced_locked(e, c); /* deferred while keys are bound (semantics.md §9.8) */
        }
    }
    pthread_mutex_unlock(&e->mu);
out:
    cache_destroy(gone);
    return st;
}

lldd_status ext_cache_remove_key(engine *e, const char *fn, const lldd_key *key)
{
    lldd_status st = LLM_SUCCESS;
    mcache *gone = NULL;
    if (key->kind != LLDD_KEY_CACHE) {
        mock_set_error("%s: key.kind %u is not LLDD_KEY_CACHE (1); remove_cache_key takes a CacheKey", fn,
                       (unsigned)key->kind);
        st = LLM_PARAM_INVALID;
        goto out;
    }
    int req_valid = key->req_id != UINT64_MAX, prefix_valid = key->prefix_id != UINT64_MAX;
    if (req_valid == prefix_valid &&
        mock_lint(41, "%s: key: %s of req_id and prefix_id is a valid id; the key acts as the %s (PR-41)", fn,
                  req_valid ? "each" : "neither",
                  req_valid ? "prefix key of its prefix_id" : "blocks key of its model_id")) {
        st = LLM_PARAM_INVALID;
        goto out;
    }
    if (e->gen == GEN_V2 && !any_pool(e)) {
        mock_set_error("%s: no memory pool is configured (llm.MemPoolConfig / llm.HostMemPoolConfig); "
                       "remove_cache_key needs one", fn);
        st = LLM_FEATURE_NOT_ENABLED;
        goto out;
    }
    if (e->gen == GEN_V1 && atomic_load(&e->role) != LLDD_ROLE_PROMPT) {
        mock_set_error("%s: remove_cache_key is not supported by %s (PROMPT only, docs/reference/semantics.md §11)", fn,
                       ext_role_name(atomic_load(&e->role)));
        st = LLM_PARAM_INVALID;
        goto out;
    }
    uint32_t ns;
    uint64_t id, model;
    key_ident(key, &ns, &id, &model);
    pthread_mutex_lock(&e->mu);
    keynode *k = key_find_locked(e, ns, id, model);
    /* unknown: success; a registered cache keeps its key (semantics.md §9.6); a placeholder-shaped
     * key has the identity of its model's blocks key and releases it (PR-41) */
    if (k != NULL && k->c->w.owned)
        gone = key_release_locked(e, k, NULL, 0);
    pthread_mutex_unlock(&e->mu);
out:
    cache_destroy(gone);
    return st;
}
