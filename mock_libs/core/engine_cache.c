/* The cache table of an engine: RegisterKvCache / UnregisterKvCache, the memory
 * pools and the PR-9 calls AllocateCache / DeallocateCache / CopyKvCache /
 * CopyKvBlocks (docs/reference/semantics.md §2, §3, §6.6, §8.8, §8.9).
 *
 * Cache ids come from one per-engine counter starting at 1; an id is consumed by
 * every call that passes the checks before it (semantics.md §3.1), also when a later check
 * fails. Every cache is MIX: shape[0] batches and shape[0] blocks of one stride.
 * The published-table size of semantics.md §15 is tracked as caches come and go.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/blocks.h"
#include "core/cache_table.h"
#include "base/dtype.h"
#include "core/engine.h"
#include "core/keys.h"
#include "wire/links.h"
#include "base/mock_internal.h"
#include "wire/pub.h"
#include "wire/transport.h"

enum { TABLE_ENTRY = 64 };

/* ---------------------------------------------------------------------------------------------
 * pools (PR-34)
 * ------------------------------------------------------------------------------------------ */

int pool_create(mpool *p, uint32_t placement, int32_t device, uint64_t memory_size, uint32_t page_shift)
{
    memset(p, 0, sizeof *p);
    void *mem = NULL;
    if (memory_size > SIZE_MAX)
        return -1;
    if (placement == LLDD_PLACEMENT_DEVICE) {
        if (mock_acl_alloc_device(device, (size_t)memory_size, &mem) != ACL_SUCCESS)
            return -1;
    } else if (posix_memalign(&mem, 4096, (size_t)memory_size) != 0) {
        return -1;
    }
    p->free = malloc(4 * sizeof *p->free);
    if (p->free == NULL) {
        if (placement == LLDD_PLACEMENT_DEVICE)
            mock_acl_free_device(mem);
        else
            free(mem);
        return -1;
    }
    p->free_cap = 4;
    p->base = mem;
    p->placement = placement;
    p->memory_size = memory_size;
    p->page_shift = page_shift;
    p->pages = memory_size >> page_shift;
    if (p->pages > 0) {
        p->free[0].first = 0;
        p->free[0].count = p->pages;
        p->free_count = 1;
    }
    p->present = 1;
    return 0;
}

void pool_destroy(mpool *p)
{
    if (!p->present)
        return;
    if (p->placement == LLDD_PLACEMENT_DEVICE)
        mock_acl_free_device(p->base);
    else
        free(p->base);
    free(p->free);
    memset(p, 0, sizeof *p);
}

/* First fit: the lowest free run of `count` pages. */
int pool_take(mpool *p, uint64_t count, uint64_t *first)
{
    for (size_t i = 0; i < p->free_count; i++) {
        pool_extent *x = &p->free[i];
        if (x->count < count)
            continue;
        *first = x->first;
        x->first += count;
        x->count -= count;
        if (x->count == 0) {
            memmove(x, x + 1, (p->free_count - i - 1) * sizeof *x);
            p->free_count--;
        }
        return 0;
    }
    return -1;
}

void pool_give(mpool *p, uint64_t first, uint64_t count)
{
    size_t i = 0;
    while (i < p->free_count && p->free[i].first < first)
        i++;
    int join_prev = i > 0 && p->free[i - 1].first + p->free[i - 1].count == first;
    int join_next = i < p->free_count && first + count == p->free[i].first;
    if (join_prev && join_next) {
        p->free[i - 1].count += count + p->free[i].count;
        memmove(&p->free[i], &p->free[i + 1], (p->free_count - i - 1) * sizeof p->free[0]);
        p->free_count--;
        return;
    }
    if (join_prev) {
        p->free[i - 1].count += count;
        return;
    }
    if (join_next) {
        p->free[i].first = first;
        p->free[i].count += count;
        return;
    }
    if (p->free_count == p->free_cap) {
        pool_extent *n = realloc(p->free, p->free_cap * 2 * sizeof *n);
        if (n == NULL)
            return; /* the pages stay lost until the pool goes; nothing unsafe */
        p->free = n;
        p->free_cap *= 2;
    }
    memmove(&p->free[i + 1], &p->free[i], (p->free_count - i) * sizeof p->free[0]);
    p->free[i].first = first;
    p->free[i].count = count;
    p->free_count++;
}

/* ---------------------------------------------------------------------------------------------
 * the table
 * ------------------------------------------------------------------------------------------ */

static size_t table_index(engine *e, int64_t id, int *found)
{
    size_t lo = 0, hi = e->cache_count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (e->caches[mid]->w.id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    *found = lo < e->cache_count && e->caches[lo]->w.id == id;
    return lo;
}

mcache *cache_find_locked(engine *e, int64_t id)
{
    int found;
    size_t i = table_index(e, id, &found);
    return found ? e->caches[i] : NULL;
}

mcache *cache_owned_record_new(const char *fn, uint32_t num_tensors)
{
    mcache *c = calloc(1, sizeof *c);
    if (c != NULL && (c->addrs = calloc(num_tensors, sizeof *c->addrs)) != NULL &&
        (c->page_first = calloc(num_tensors, sizeof *c->page_first)) != NULL)
        return c;
    if (c != NULL) {
        free(c->addrs);
        free(c);
    }
    mock_set_error("%s: out of host memory", fn);
    return NULL;
}

mcache *cache_pin(engine *e, int64_t id)
{
    pthread_mutex_lock(&e->mu);
    mcache *c = cache_find_locked(e, id);
    if (c != NULL)
        c->pins++;
    pthread_mutex_unlock(&e->mu);
    return c;
}

void cache_unpin_locked(engine *e, mcache *c)
{
    if (--c->pins == 0)
        pthread_cond_broadcast(&e->cv);
}

void cache_unpin(engine *e, mcache *c)
{
    pthread_mutex_lock(&e->mu);
    cache_unpin_locked(e, c);
    pthread_mutex_unlock(&e->mu);
}

uint64_t cache_entry_bytes(uint32_t num_tensors)
{
    return TABLE_ENTRY + 8ull * num_tensors;
}

lldd_status table_room_check_locked(const engine *e, const char *fn, uint32_t num_tensors, uint64_t keys_bytes)
{
    uint64_t would_be = e->table_bytes + cache_entry_bytes(num_tensors) + keys_bytes;
    if (e->mode != MODE_DIRECT || would_be <= TABLE_LIMIT)
        return LLM_SUCCESS;
    mock_set_error("%s: the published cache table would grow to %llu bytes, over its 1 MiB limit "
                   "(24 + sum(64 + 8 * num_tensors)%s)", fn, (unsigned long long)would_be,
                   keys_bytes != 0 ? " + 24 per key binding" : "");
    return LLM_PARAM_INVALID;
}

/* Inserts a new cache at its place by id. Its id was taken by cache_take_id_locked in
 * this same hold of mu, so it is above every id in the table and the place is the end;
 * the search only keeps the table sorted should that ever not hold. mu held. */
int table_insert_locked(engine *e, mcache *c)
{
    int found;
    size_t i = table_index(e, c->w.id, &found);
    if (found)
        return -1;
    if (e->cache_count == e->cache_cap) {
        mcache **n = mock_grow(e->caches, &e->cache_cap, sizeof *n, 16);
        if (n == NULL)
            return -1;
        e->caches = n;
    }
    memmove(&e->caches[i + 1], &e->caches[i], (e->cache_count - i) * sizeof e->caches[0]);
    e->caches[i] = c;
    e->cache_count++;
    e->table_bytes += cache_entry_bytes(c->w.num_tensors);
    pub_insert_locked(e, c);
    return 0;
}

/* Waits until nobody holds c pinned (mu held). Peers hold pins through their links'
 * server threads; a peer that keeps one past llm.SyncKvCacheWaitTime (stopped, or
 * silent on purpose) has the connections of its link cut, which ends the thread
 * and its pins; its later transfers over that link fail as with a gone peer (PR-31).
 * What is left are this engine's own transfers and those of engines in this process,
 * each bounded by its own wait time (docs/security.md §3.2). */
static void pins_wait_locked(engine *e, mcache *c)
{
    int64_t deadline = tp_deadline(e->sync_timeout_ms);
    for (;;) {
        int by_table = pub_pinned_locked(e, c) != NULL;
        if (c->pins == 0 && !by_table)
            return;
        int64_t left = deadline - tp_now_ms();
        if (left <= 0)
            break;
        /* a pin through the published table wakes nobody: look again every millisecond */
        engine_cv_wait_ms(e, by_table && left > 1 ? 1 : left);
    }
    links_cut_pinning_locked(e, c);
    while (c->pins > 0)
        pthread_cond_wait(&e->cv, &e->mu);
}

/* Takes a cache out of the table, unbinds its keys and waits until nobody uses it.
 * mu held. */
void table_remove_locked(engine *e, mcache *c)
{
    int found;
    size_t i = table_index(e, c->w.id, &found);
    if (found) {
        memmove(&e->caches[i], &e->caches[i + 1], (e->cache_count - i - 1) * sizeof e->caches[0]);
        e->cache_count--;
        e->table_bytes -= cache_entry_bytes(c->w.num_tensors);
    }
    pub_remove_locked(e, c);
    while (c->keys != NULL)
        key_unbind_locked(e, c->keys);
    c->removed = 1;
    pins_wait_locked(e, c);
    pub_settled_locked(e, c);
    if (c->pool != NULL)
        for (uint32_t t = 0; t < c->w.num_tensors; t++)
            pool_give(c->pool, c->page_first[t], c->pages_per_tensor);
}

void cache_destroy(mcache *c)
{
    if (c == NULL)
        return;
    if (c->acl_tensors && c->addrs != NULL)
        for (uint32_t t = 0; t < c->w.num_tensors; t++)
            if (c->addrs[t] != 0)
                mock_acl_free_device((void *)(uintptr_t)c->addrs[t]);
    free(c->addrs);
    free(c->page_first);
    free(c->slot_key);
    free(c->remaining);
    free(c);
}

void caches_teardown(engine *e)
{
    pthread_mutex_lock(&e->mu);
    while (e->cache_count > 0) {
        mcache *c = e->caches[e->cache_count - 1];
        table_remove_locked(e, c);
        cache_destroy(c);
    }
    keys_teardown(e);
    free(e->caches);
    e->caches = NULL;
    e->cache_cap = 0;
    e->table_bytes = 24;
    pool_destroy(&e->dev_pool);
    pool_destroy(&e->host_pool);
    pub_destroy(e);
    pthread_mutex_unlock(&e->mu);
}

int64_t cache_take_id_locked(engine *e)
{
    return e->next_id++;
}

/* Shape, data type and tensor size (docs/reference/semantics.md §2.3, PR-17); not the rank. */
lldd_status cache_layout(const char *fn, const lldd_cache_desc *d, cache_wire *w)
{
    memset(w, 0, sizeof *w);
    int64_t elements = 1;
    for (size_t i = 0; i < d->shape_len; i++) {
        if (d->shape[i] <= 0) {
            mock_set_error("%s: cache_desc.shape[%zu] = %lld; every dim must be > 0", fn, i, (long long)d->shape[i]);
            return LLM_PARAM_INVALID;
        }
        if (__builtin_mul_overflow(elements, d->shape[i], &elements)) {
            mock_set_error("%s: cache_desc.shape: the element count overflows int64", fn);
            return LLM_PARAM_INVALID;
        }
    }
    uint32_t bits = dtype_bits(d->data_type);
    if (bits == 0) {
        mock_set_error("%s: cache_desc.data_type %d is not supported", fn, (int)d->data_type);
        return LLM_PARAM_INVALID;
    }
    int64_t ts;
    if (dtype_is_sub_byte(d->data_type)) {
        int64_t total_bits;
        if (__builtin_mul_overflow(elements, (int64_t)bits, &total_bits) || total_bits > INT32_MAX) {
            mock_set_error("%s: cache_desc: %lld elements of %u bits exceed 2^31 - 1 bits (PR-17)", fn,
                           (long long)elements, bits);
            return LLM_PARAM_INVALID;
        }
        ts = (total_bits + 7) / 8;
    } else if (__builtin_mul_overflow(elements, (int64_t)(bits / 8), &ts)) {
        mock_set_error("%s: cache_desc: the tensor byte size overflows int64", fn);
        return LLM_PARAM_INVALID;
    }
    int64_t dim0 = d->shape[0];
    if (ts < dim0) {
        /* guard: a stride of 0 makes every batch and block the same empty range, and the
         * transfer arithmetic divides by the stride (undefined on a device too) */
        mock_set_error("%s: cache_desc: tensor size %lld bytes is smaller than shape[0] = %lld, so the stride "
                       "would be 0 bytes (PR-17)", fn, (long long)ts, (long long)dim0);
        return LLM_PARAM_INVALID;
    }
    if (ts % dim0 != 0 &&
        mock_lint(17, "%s: cache_desc: tensor size %lld bytes is not a multiple of shape[0] = %lld: the stride is "
                      "rounded down to %lld bytes and the last %lld bytes of each tensor never move (PR-17)", fn,
                  (long long)ts, (long long)dim0, (long long)(ts / dim0), (long long)(ts % dim0)))
        return LLM_PARAM_INVALID;
    if (d->placement != LLDD_PLACEMENT_HOST && d->placement != LLDD_PLACEMENT_DEVICE) {
        mock_set_error("%s: cache_desc.placement %u is neither HOST (0) nor DEVICE (1)", fn, (unsigned)d->placement);
        return LLM_PARAM_INVALID;
    }
    w->kind = KIND_MIX;
    w->placement = d->placement;
    w->num_tensors = d->num_tensors;
    w->remote_accessible = 1;
    w->batches = (uint64_t)dim0;
    w->blocks = (uint64_t)dim0;
    w->tensor_size = (uint64_t)ts;
    w->stride = (uint64_t)(ts / dim0);
    return LLM_SUCCESS;
}

lldd_status cache_check_rank(const char *fn, const lldd_cache_desc *d)
{
    if (d->shape_len == 0 || d->shape_len >= 32) {
        mock_set_error("%s: cache_desc.shape has %zu dims; it must have 1 to 31", fn, d->shape_len);
        return LLM_PARAM_INVALID;
    }
    return LLM_SUCCESS;
}

/* ---------------------------------------------------------------------------------------------
 * RegisterKvCache / UnregisterKvCache
 * ------------------------------------------------------------------------------------------ */

/* Whether the page holding addr is mapped in this process, asked without touching it:
 * msync fails with ENOMEM for a page that is not mapped, and MS_ASYNC has nothing to do
 * for one that is. Only the first page: the oracle-driven suites register descriptions
 * larger than the buffer behind them (they never move bytes), so the mock does not
 * refuse a range whose tail is unmapped (docs/security.md §1.3). */
static int first_page_mapped(uint64_t addr)
{
    uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
    return msync((void *)(uintptr_t)(addr & ~(page - 1)), 1, MS_ASYNC) == 0 || errno != ENOMEM;
}

lldd_status cache_check_ranges(const char *fn, const uint64_t *addrs, size_t num_addrs, uint64_t tensor_size)
{
    for (size_t i = 0; i < num_addrs; i++) {
        unsigned long long at = addrs[i], len = tensor_size;
        uint64_t end;
        if (__builtin_add_overflow(addrs[i], tensor_size, &end)) {
            mock_set_error("%s: tensor %zu: [0x%llx, +%llu) wraps past the end of the address space", fn, i, at,
                           len);
            return LLM_PARAM_INVALID;
        }
        mock_alloc_info a;
        if (mock_acl_lookup((uintptr_t)addrs[i], &a)) {
            const char *host = a.kind == MOCK_MEM_HOST ? "Host" : "";
            if (!a.live) {
                mock_set_error("%s: tensor %zu: 0x%llx lies in the aclrtMalloc%s allocation [0x%llx, +%zu), which "
                               "was freed (use after free)", fn, i, at, host, (unsigned long long)a.base, a.size);
                return LLM_PARAM_INVALID;
            }
            if (tensor_size > a.size - (addrs[i] - (uint64_t)a.base)) {
                mock_set_error("%s: tensor %zu: [0x%llx, +%llu) runs past the end of its aclrtMalloc%s allocation "
                               "[0x%llx, +%zu) (PR-30)", fn, i, at, len, host, (unsigned long long)a.base, a.size);
                return LLM_PARAM_INVALID;
            }
        } else if (!first_page_mapped(addrs[i])) {
            mock_set_error("%s: tensor %zu: 0x%llx is not mapped in this process", fn, i, at);
            return LLM_PARAM_INVALID;
        }
    }
    return LLM_SUCCESS;
}

lldd_status cache_arg_check(const char *fn, const char *name, const lldd_cache *c)
{
    if (c->tensor_addrs == NULL && c->num_tensor_addrs > 0) {
        mock_set_error("%s: %s.tensor_addrs is NULL but num_tensor_addrs is %zu", fn, name, c->num_tensor_addrs);
        return LLM_PARAM_INVALID;
    }
    if (c->cache_desc.shape == NULL && c->cache_desc.shape_len > 0) {
        mock_set_error("%s: %s.cache_desc.shape is NULL but shape_len is %zu", fn, name, c->cache_desc.shape_len);
        return LLM_PARAM_INVALID;
    }
    return LLM_SUCCESS;
}

mcache *cache_record_new(const char *fn, const cache_wire *w, const uint64_t *addrs, size_t num_addrs)
{
    mcache *c = calloc(1, sizeof *c);
    if (c == NULL || (c->addrs = malloc(num_addrs * sizeof *c->addrs)) == NULL) {
        free(c);
        mock_set_error("%s: out of host memory", fn);
        return NULL;
    }
    memcpy(c->addrs, addrs, num_addrs * sizeof *c->addrs);
    c->w = *w;
    return c;
}

lldd_status cache_register(engine *e, const char *fn, const lldd_cache_desc *desc, const uint64_t *addrs,
                           size_t num_addrs, int64_t *cache_id)
{
    lldd_status st = LLM_SUCCESS;
    mcache *c = NULL;
    if (num_addrs == 0) {
        mock_set_error("%s: addrs is empty", fn);
        st = LLM_PARAM_INVALID;
        goto out;
    }
    if (num_addrs != desc->num_tensors) {
        mock_set_error("%s: %zu addrs given for cache_desc.num_tensors = %u", fn, num_addrs,
                       (unsigned)desc->num_tensors);
        st = LLM_PARAM_INVALID;
        goto out;
    }
    for (size_t i = 0; i < num_addrs; i++) {
        if (addrs[i] == 0) {
            mock_set_error("%s: addrs[%zu] is 0", fn, i);
            st = LLM_PARAM_INVALID;
            goto out;
        }
    }
    if ((st = cache_check_rank(fn, desc)) != LLM_SUCCESS)
        goto out;
    /* From here on the call consumes an id, also when it fails (semantics.md §3.1). The id is taken
     * in the locked step that inserts the cache (docs/security.md §1.1). */
    cache_wire w;
    st = cache_layout(fn, desc, &w);
    if (st == LLM_SUCCESS)
        st = cache_check_ranges(fn, addrs, num_addrs, w.tensor_size);
    if (st == LLM_SUCCESS && (c = cache_record_new(fn, &w, addrs, num_addrs)) == NULL)
        st = LLM_FAILED;
    pthread_mutex_lock(&e->mu);
    int64_t id = cache_take_id_locked(e);
    if (st == LLM_SUCCESS)
        st = table_room_check_locked(e, fn, w.num_tensors, 0);
    if (st == LLM_SUCCESS) {
        c->w.id = id;
        if (table_insert_locked(e, c) != 0) {
            mock_set_error("%s: out of host memory", fn);
            st = LLM_FAILED;
        }
    }
    pthread_mutex_unlock(&e->mu);
    if (st != LLM_SUCCESS)
        goto out;
    *cache_id = id;
    c = NULL;
out:
    cache_destroy(c);
    return st;
}

lldd_status cache_unregister(engine *e, const char *fn, int64_t cache_id)
{
    lldd_status st = LLM_SUCCESS;
    pthread_mutex_lock(&e->mu);
    mcache *c = cache_find_locked(e, cache_id);
    if (c != NULL && c->w.owned &&
        mock_lint(23, "%s: cache %lld was allocated by AllocateCache; unregistering removes its entry, and "
                      "lldd_deallocate_cache is the call that frees it (PR-23)", fn, (long long)cache_id)) {
        pthread_mutex_unlock(&e->mu);
        st = LLM_PARAM_INVALID;
        goto out;
    }
    if (c != NULL)
        table_remove_locked(e, c);
    pthread_mutex_unlock(&e->mu);
    cache_destroy(c);
out:
    return st;
}

/* ---------------------------------------------------------------------------------------------
 * PR-9: AllocateCache, DeallocateCache, CopyKvCache, CopyKvBlocks
 * ------------------------------------------------------------------------------------------ */

/* FEATURE_NOT_ENABLED without a pool (also before Initialize and after Finalize,
 * semantics.md §3.6); FAILED once Finalize has begun (PR-37). */
lldd_status pool_call_enter(engine *e, const char *fn)
{
    pthread_mutex_lock(&e->mu);
    lldd_status st = LLM_SUCCESS;
    if (e->state == ENGINE_FINALIZING) {
        mock_set_error("%s: LlmDataDist is not initialized (Finalize is running)", fn);
        st = LLM_FAILED;
    } else if (e->state != ENGINE_READY || !e->native_pool) {
        mock_set_error("%s: not supported by LlmDataDist (the vendor's class answers FEATURE_NOT_ENABLED); the "
                       "mock's pool-backed variant needs the option llm_datadist_ffi.mock.NativePool=1 and a memory "
                       "pool at Initialize (PR-9)", fn);
        st = LLM_FEATURE_NOT_ENABLED;
    } else if (!e->dev_pool.present && !e->host_pool.present) {
        mock_set_error("%s: no memory pool is configured (llm.MemPoolConfig / llm.HostMemPoolConfig at "
                       "Initialize); this call needs one (PR-9)", fn);
        st = LLM_FEATURE_NOT_ENABLED;
    } else {
        e->active++;
    }
    pthread_mutex_unlock(&e->mu);
    return st;
}

lldd_status cache_pool_for(engine *e, const char *fn, const lldd_cache_desc *desc, mpool **out)
{
    mpool *pool = desc->placement == LLDD_PLACEMENT_DEVICE ? &e->dev_pool
                  : desc->placement == LLDD_PLACEMENT_HOST ? &e->host_pool : NULL;
    if (pool == NULL || !pool->present) {
        mock_set_error("%s: cache_desc.placement %u has no memory pool (%s)", fn, (unsigned)desc->placement,
                       desc->placement == LLDD_PLACEMENT_DEVICE ? "llm.MemPoolConfig was not given"
                       : desc->placement == LLDD_PLACEMENT_HOST ? "llm.HostMemPoolConfig was not given"
                       : "not HOST or DEVICE");
        return LLM_PARAM_INVALID;
    }
    *out = pool;
    return LLM_SUCCESS;
}

/* ---------------------------------------------------------------------------------------------
 * allocation: the stages AllocateCache and the extension's allocate_cache share, each
 * call keeping its own order of them (ext/engine_ext_cache.c)
 * ------------------------------------------------------------------------------------------ */

lldd_status cache_alloc_room_checks(const char *fn, const lldd_cache_desc *desc, const uint64_t *tensor_addrs,
                                    size_t addrs_capacity)
{
    if (desc->num_tensors == 0)
        return mock_refuse("%s: cache_desc.num_tensors is 0", fn);
    if (tensor_addrs == NULL || addrs_capacity < desc->num_tensors)
        return mock_refuse("%s: tensor_addrs has room for %zu addresses, %u needed", fn,
                           tensor_addrs == NULL ? (size_t)0 : addrs_capacity, (unsigned)desc->num_tensors);
    return LLM_SUCCESS;
}

lldd_status cache_owned_new(const char *fn, const lldd_cache_desc *desc, cache_wire *w, mcache **out)
{
    lldd_status st = cache_layout(fn, desc, w);
    if (st != LLM_SUCCESS)
        return st;
    w->owned = 1;
    *out = cache_owned_record_new(fn, w->num_tensors);
    return *out == NULL ? LLM_FAILED : LLM_SUCCESS;
}

lldd_status cache_alloc_id_locked(engine *e, const char *fn, lldd_status st, mcache *c, const cache_wire *w,
                                  int64_t *id)
{
    *id = cache_take_id_locked(e);
    if (st != LLM_SUCCESS)
        return st;
    c->w = *w;
    c->w.id = *id;
    c->ext_ref = 1; /* the id handle (lldd_ext_deallocate_cache drops it) */
    return table_room_check_locked(e, fn, w->num_tensors, 0);
}

lldd_status cache_take_pages_locked(const char *fn, mcache *c, mpool *pool, lldd_status oom)
{
    const cache_wire *w = &c->w;
    uint64_t page = 1ull << pool->page_shift;
    uint64_t pages = w->tensor_size / page + (w->tensor_size % page != 0);
    uint32_t got = 0;
    for (; got < w->num_tensors; got++)
        if (pool_take(pool, pages, &c->page_first[got]) != 0)
            break;
    if (got < w->num_tensors) {
        for (uint32_t t = 0; t < got; t++)
            pool_give(pool, c->page_first[t], pages);
        mock_set_error("%s: the %s memory pool has no room for %u tensors of %llu pages (%llu bytes each)", fn,
                       pool->placement == LLDD_PLACEMENT_DEVICE ? "device" : "host", (unsigned)w->num_tensors,
                       (unsigned long long)pages, (unsigned long long)w->tensor_size);
        return oom;
    }
    for (uint32_t t = 0; t < w->num_tensors; t++)
        c->addrs[t] = (uint64_t)(uintptr_t)(pool->base + (c->page_first[t] << pool->page_shift));
    c->pool = pool;
    c->pages_per_tensor = pages;
    return LLM_SUCCESS;
}

void cache_give_pages_locked(mcache *c)
{
    if (c->pool != NULL) {
        for (uint32_t t = 0; t < c->w.num_tensors; t++)
            pool_give(c->pool, c->page_first[t], c->pages_per_tensor);
        c->pool = NULL;
    }
}

/* AllocateCache: the room for the addresses, a pool for the placement, the rank; then
 * (consuming an id) the layout, the id and the table's room, the pages, the insert. */
lldd_status cache_allocate(engine *e, const char *fn, const lldd_cache_desc *desc, int64_t *cache_id,
                           uint64_t *tensor_addrs, size_t addrs_capacity)
{
    lldd_status st = LLM_SUCCESS;
    mcache *c = NULL;
    mpool *pool = NULL;
    if ((st = cache_alloc_room_checks(fn, desc, tensor_addrs, addrs_capacity)) != LLM_SUCCESS ||
        (st = cache_pool_for(e, fn, desc, &pool)) != LLM_SUCCESS || (st = cache_check_rank(fn, desc)) != LLM_SUCCESS)
        goto out;
    /* From here on the call consumes an id, also when it fails (semantics.md §3.1); the id is taken
     * in the locked step that inserts the cache (docs/security.md §1.1). */
    cache_wire w;
    st = cache_owned_new(fn, desc, &w, &c);
    pthread_mutex_lock(&e->mu);
    int64_t id;
    if ((st = cache_alloc_id_locked(e, fn, st, c, &w, &id)) != LLM_SUCCESS ||
        (st = cache_take_pages_locked(fn, c, pool, LLM_OUT_OF_MEMORY)) != LLM_SUCCESS) {
        pthread_mutex_unlock(&e->mu);
        goto out;
    }
    if (table_insert_locked(e, c) != 0) {
        cache_give_pages_locked(c);
        pthread_mutex_unlock(&e->mu);
        mock_set_error("%s: out of host memory", fn);
        st = LLM_FAILED;
        goto out;
    }
    memcpy(tensor_addrs, c->addrs, w.num_tensors * sizeof *tensor_addrs);
    pthread_mutex_unlock(&e->mu);
    *cache_id = id;
    c = NULL;
out:
    cache_destroy(c);
    return st;
}

void cache_deallocate(engine *e, int64_t cache_id)
{
    pthread_mutex_lock(&e->mu);
    mcache *c = cache_find_locked(e, cache_id);
    if (c != NULL && c->w.owned)
        table_remove_locked(e, c);
    else
        c = NULL; /* unknown or registered: success, nothing happens (semantics.md §3.6) */
    pthread_mutex_unlock(&e->mu);
    cache_destroy(c);
}

#define has_blocks kind_has_blocks

/* The checks in order, then the bytes (docs/reference/semantics.md §6.6, §8.8). v1 refuses HOST
 * caches (docs/reference/semantics.md §2.6). Caller has entered the engine. */
lldd_status cache_copy(engine *e, const char *fn, int64_t src_id, int64_t dst_id, uint32_t src_batch_index,
                       uint32_t dst_batch_index, uint64_t offset, int64_t size, int v1, const char *src_name,
                       const char *dst_name)
{
    lldd_status st = LLM_SUCCESS;
    mcache *s = NULL, *d = NULL;
    if (size != -1 && size <= 0) {
        mock_set_error("%s: size %lld must be -1 or > 0", fn, (long long)size);
        st = LLM_PARAM_INVALID;
        goto out;
    }
    if ((s = cache_pin(e, src_id)) == NULL) {
        mock_set_error("%s: %s %lld does not exist", fn, src_name, (long long)src_id);
        st = LLM_KV_CACHE_NOT_EXIST;
        goto out;
    }
    if ((d = cache_pin(e, dst_id)) == NULL) {
        mock_set_error("%s: %s %lld does not exist", fn, dst_name, (long long)dst_id);
        st = LLM_KV_CACHE_NOT_EXIST;
        goto out;
    }
    const cache_wire *sw = &s->w, *dw = &d->w;
    if (!kind_has_batches(sw) || !kind_has_batches(dw)) {
        mock_set_error("%s: %s cache %lld is a blocks-only cache; copies need contiguous caches", fn,
                       !kind_has_batches(sw) ? "source" : "destination",
                       (long long)(!kind_has_batches(sw) ? sw->id : dw->id));
        st = LLM_PARAM_INVALID;
        goto out;
    }
    if (v1 && (sw->placement != LLDD_PLACEMENT_DEVICE || dw->placement != LLDD_PLACEMENT_DEVICE)) {
        mock_set_error("%s: the %s cache is HOST-placed; v1 copies support device caches only", fn,
                       sw->placement != LLDD_PLACEMENT_DEVICE ? "source" : "destination");
        st = LLM_PARAM_INVALID;
        goto out;
    }
    if (sw->num_tensors != dw->num_tensors) {
        mock_set_error("%s: the source has %u tensors and the destination %u", fn, (unsigned)sw->num_tensors,
                       (unsigned)dw->num_tensors);
        st = LLM_PARAM_INVALID;
        goto out;
    }
    if (src_batch_index >= sw->batches || dst_batch_index >= dw->batches) {
        int src_bad = src_batch_index >= sw->batches;
        mock_set_error("%s: %s %u is out of range [0, %llu)", fn, src_bad ? "src_batch_index" : "dst_batch_index",
                       src_bad ? (unsigned)src_batch_index : (unsigned)dst_batch_index,
                       (unsigned long long)(src_bad ? sw->batches : dw->batches));
        st = LLM_PARAM_INVALID;
        goto out;
    }
    if (offset > 0 && (offset >= sw->stride || offset >= dw->stride)) {
        mock_set_error("%s: offset %llu must be below both strides (source %llu, destination %llu)", fn,
                       (unsigned long long)offset, (unsigned long long)sw->stride, (unsigned long long)dw->stride);
        st = LLM_PARAM_INVALID;
        goto out;
    }
    uint64_t len = size > 0 ? (uint64_t)size : sw->stride - offset;
    if (len > sw->stride - offset || len > dw->stride - offset) {
        mock_set_error("%s: %llu bytes from offset %llu do not fit the source stride %llu and the destination "
                       "stride %llu", fn, (unsigned long long)len, (unsigned long long)offset,
                       (unsigned long long)sw->stride, (unsigned long long)dw->stride);
        st = LLM_PARAM_INVALID;
        goto out;
    }
    uint64_t soff = src_batch_index * sw->stride + offset, doff = dst_batch_index * dw->stride + offset;
    if (s == d && soff < doff + len && doff < soff + len) {
        mock_set_error("%s: source bytes [%llu, +%llu) and destination bytes [%llu, +%llu) overlap in cache %lld "
                       "(PR-24)", fn, (unsigned long long)soff, (unsigned long long)len, (unsigned long long)doff,
                       (unsigned long long)len, (long long)sw->id);
        st = LLM_PARAM_INVALID;
        goto out;
    }
    for (uint32_t t = 0; t < sw->num_tensors; t++)
        memmove((char *)(uintptr_t)d->addrs[t] + doff, (const char *)(uintptr_t)s->addrs[t] + soff, (size_t)len);
    mock_bytes_moved_add(len * sw->num_tensors);
out:
    if (s != NULL)
        cache_unpin(e, s);
    if (d != NULL)
        cache_unpin(e, d);
    return st;
}

/* CopyKvBlocks: the two caches' tensors, blocks and block sizes, and every block index in
 * range (dst_blocks_flat: num_src_blocks per list, total in all). */
static lldd_status copy_blocks_shape_checks(const char *fn, const cache_wire *sw, const cache_wire *dw,
                                            const uint64_t *src_blocks, size_t num_src_blocks,
                                            const uint64_t *dst_blocks_flat, size_t total)
{
    if (sw->num_tensors != dw->num_tensors) {
        mock_set_error("%s: the source has %u tensors and the destination %u", fn, (unsigned)sw->num_tensors,
                       (unsigned)dw->num_tensors);
        return LLM_PARAM_INVALID;
    }
    if (!has_blocks(sw) || !has_blocks(dw)) {
        mock_set_error("%s: the %s cache has no blocks", fn, !has_blocks(sw) ? "source" : "destination");
        return LLM_PARAM_INVALID;
    }
    if (sw->stride != dw->stride) {
        mock_set_error("%s: block sizes differ: source %llu bytes, destination %llu bytes", fn,
                       (unsigned long long)sw->stride, (unsigned long long)dw->stride);
        return LLM_PARAM_INVALID;
    }
    for (size_t k = 0; k < num_src_blocks; k++) {
        if (src_blocks[k] >= sw->blocks) {
            mock_set_error("%s: src_blocks[%zu] = %llu is out of range [0, %llu)", fn, k,
                           (unsigned long long)src_blocks[k], (unsigned long long)sw->blocks);
            return LLM_PARAM_INVALID;
        }
    }
    for (size_t k = 0; k < total; k++) {
        if (dst_blocks_flat[k] >= dw->blocks) {
            mock_set_error("%s: dst_blocks_list[%zu][%zu] = %llu is out of range [0, %llu)", fn, k / num_src_blocks,
                           k % num_src_blocks, (unsigned long long)dst_blocks_flat[k], (unsigned long long)dw->blocks);
            return LLM_PARAM_INVALID;
        }
    }
    return LLM_SUCCESS;
}

/* CopyKvBlocks: a repeated destination block (the PR-5 lint) and, within one cache, a
 * block that is both a source and a destination (PR-24). set receives the destinations. */
static lldd_status copy_blocks_dst_checks(const char *fn, const cache_wire *sw, const cache_wire *dw, int same,
                                          const uint64_t *src_blocks, size_t num_src_blocks,
                                          const uint64_t *dst_blocks_flat, size_t total, u64set *set)
{
    if (u64set_init(set, total > num_src_blocks ? total : num_src_blocks,
                    dw->blocks > sw->blocks ? dw->blocks - 1 : sw->blocks - 1) != 0) {
        mock_set_error("%s: out of host memory", fn);
        return LLM_FAILED;
    }
    size_t repeat = SIZE_MAX;
    for (size_t k = 0; k < total; k++)
        if (!u64set_add(set, dst_blocks_flat[k]) && repeat == SIZE_MAX)
            repeat = k;
    if (repeat != SIZE_MAX &&
        mock_lint(5, "%s: destination block %llu (dst_blocks_list[%zu][%zu]) appears more than once; the last "
                     "write in list order wins (PR-5)", fn, (unsigned long long)dst_blocks_flat[repeat],
                  repeat / num_src_blocks, repeat % num_src_blocks))
        return LLM_PARAM_INVALID;
    if (same) {
        for (size_t k = 0; k < num_src_blocks; k++) {
            if (u64set_has(set, src_blocks[k])) {
                mock_set_error("%s: block %llu of cache %lld is both a source and a destination (PR-24)", fn,
                               (unsigned long long)src_blocks[k], (long long)sw->id);
                return LLM_PARAM_INVALID;
            }
        }
    }
    return LLM_SUCCESS;
}

/* CopyKvBlocks: the bytes, run by run, list by list. */
static void copy_blocks_move(const mcache *s, const mcache *d, const uint64_t *src_blocks, size_t num_src_blocks,
                             const uint64_t *dst_blocks_flat, size_t num_dst_lists)
{
    uint64_t S = s->w.stride;
    for (size_t list = 0; list < num_dst_lists; list++) {
        run_iter it;
        uint64_t s0, d0, len;
        run_iter_init(&it, src_blocks, dst_blocks_flat + list * num_src_blocks, num_src_blocks);
        while (run_next(&it, &s0, &d0, &len)) {
            for (uint32_t t = 0; t < s->w.num_tensors; t++)
                memmove((char *)(uintptr_t)d->addrs[t] + d0 * S, (const char *)(uintptr_t)s->addrs[t] + s0 * S,
                        (size_t)(len * S));
            mock_bytes_moved_add(len * S * s->w.num_tensors);
        }
    }
}

lldd_status cache_copy_blocks(engine *e, const char *fn, const lldd_cache *src_cache, const lldd_cache *dst_cache,
                              const uint64_t *src_blocks, size_t num_src_blocks, const uint64_t *dst_blocks_flat,
                              const size_t *dst_list_lens, size_t num_dst_lists, size_t total)
{
    lldd_status st = LLM_SUCCESS;
    mcache *s = NULL, *d = NULL;
    u64set set;
    memset(&set, 0, sizeof set);
    if (num_src_blocks == 0 || num_dst_lists == 0) {
        mock_set_error("%s: %s is empty", fn, num_src_blocks == 0 ? "src_blocks" : "dst_blocks_list");
        st = LLM_PARAM_INVALID;
        goto out;
    }
    for (size_t k = 0; k < num_dst_lists; k++) {
        if (dst_list_lens[k] != num_src_blocks) {
            mock_set_error("%s: dst_blocks_list[%zu] has %zu entries, src_blocks has %zu", fn, k, dst_list_lens[k],
                           num_src_blocks);
            st = LLM_PARAM_INVALID;
            goto out;
        }
    }
    if ((s = cache_pin(e, src_cache->cache_id)) == NULL) {
        mock_set_error("%s: src_cache.cache_id %lld does not exist", fn, (long long)src_cache->cache_id);
        st = LLM_KV_CACHE_NOT_EXIST;
        goto out;
    }
    if ((d = cache_pin(e, dst_cache->cache_id)) == NULL) {
        mock_set_error("%s: dst_cache.cache_id %lld does not exist", fn, (long long)dst_cache->cache_id);
        st = LLM_KV_CACHE_NOT_EXIST;
        goto out;
    }
    if ((st = copy_blocks_shape_checks(fn, &s->w, &d->w, src_blocks, num_src_blocks, dst_blocks_flat, total)) !=
            LLM_SUCCESS ||
        (st = copy_blocks_dst_checks(fn, &s->w, &d->w, s == d, src_blocks, num_src_blocks, dst_blocks_flat, total,
                                     &set)) != LLM_SUCCESS)
        goto out;
    copy_blocks_move(s, d, src_blocks, num_src_blocks, dst_blocks_flat, num_dst_lists);
out:
    u64set_free(&set);
    if (s != NULL)
        cache_unpin(e, s);
    if (d != NULL)
        cache_unpin(e, d);
    return st;
}
