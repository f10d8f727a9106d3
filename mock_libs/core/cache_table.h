/* The cache table of an engine, its memory pools and the checks of a cache's
 * description (engine_cache.c).
 *
 * Life of a cache: the table owns it; a transfer or copy that uses it holds a pin
 * (c->pins, under the owner's mu). Removal (deallocate, unregister, finalize, the
 * release of its last key) takes the cache out of the table first, so no new pin
 * can be taken, unbinds its keys, then waits on e->cv until the pins are gone (a
 * peer's pin for at most the wait time, then its link is cut), and only then frees
 * memory. A pull that releases a key unpins its source before the
 * release, so that the release may free it.
 */
#ifndef LLDD_MOCK_CACHE_TABLE_H
#define LLDD_MOCK_CACHE_TABLE_H

#include <stddef.h>
#include <stdint.h>

#include "base/mock_internal.h"

typedef struct lldd_engine engine;

/* Cache kinds (docs/reference/semantics.md §2.2). The native layer creates MIX caches only; CACHE and
 * BLOCKS exist for the Python v2 layer; a v1 blocks cache is MIX. */
enum { KIND_CACHE = 1, KIND_BLOCKS = 2, KIND_MIX = 3 };

/* Key namespaces (docs/reference/semantics.md §9.1): request keys and blocks keys share one. */
enum { KEY_NS_REQ = 0, KEY_NS_PREFIX = 1 };

/* The published description of one cache: what a peer needs to validate and
 * address a transfer. Sent as is over the wire (transport.h explains why). */
typedef struct cache_wire {
    int64_t id;
    uint32_t kind;
    uint32_t placement;
    uint32_t num_tensors;
    uint32_t owned;              /* allocated from a pool: exempt from PR-32 */
    uint32_t remote_accessible;
    uint32_t reserved;
    uint64_t batches;            /* B  */
    uint64_t blocks;             /* NB */
    uint64_t tensor_size;        /* TS */
    uint64_t stride;             /* S  */
} cache_wire;

struct mpool;
struct mcache;

/* One bound key (docs/reference/semantics.md §9): in the engine's key table and in its cache's list.
 * Everything under the owner's mu. */
typedef struct keynode {
    struct keynode *hnext;           /* hash chain */
    struct keynode *cprev, *cnext;   /* the cache's keys */
    struct mcache *c;
    uint32_t ns;                     /* KEY_NS_* */
    uint32_t blocks;                 /* a blocks key (identity (2**64-1, model) in KEY_NS_REQ) */
    uint64_t id, model;
    uint64_t slot;                   /* the batch slot (0 for a blocks key) */
    uint64_t seq;                    /* binding sequence: the table copy sees seq < its mark (PR-19) */
} keynode;

typedef struct keytab {
    keynode **buckets;
    size_t nbuckets, count;
} keytab;

typedef struct mcache {
    cache_wire w;
    uint64_t *addrs;             /* w.num_tensors tensor base addresses */
    uint32_t pins;               /* under the owner's mu */
    int removed;                 /* out of the table, waiting for its pins */
    struct mpool *pool;          /* owned caches: the pool and the page runs */
    uint64_t *page_first;        /* per tensor */
    uint64_t pages_per_tensor;
    int acl_tensors;             /* v1 without a pool: each tensor is a device allocation */
    int32_t acl_device;
    /* keys (docs/reference/semantics.md §9; mu) */
    keynode *keys;               /* every key bound to this cache */
    keynode **slot_key;          /* per batch slot, NULL until a key binds a slot */
    uint32_t req_keys;           /* bound request and prefix keys */
    uint32_t ext_ref;            /* owned: 1 for the id handle until deallocated (semantics.md §9.5) */
    uint64_t *remaining;         /* R of semantics.md §9.5 as a bitmap over the tensors, NULL if never set */
    uint64_t remaining_count;
    int pub_state;               /* PUB_* (engine_pub.c), under the owner's mu */
    uint32_t pub_slot;
} mcache;

/* A paged memory pool (PR-34): first fit over sorted free extents of pages. */
typedef struct pool_extent {
    uint64_t first;
    uint64_t count;
} pool_extent;

typedef struct mpool {
    int present;
    uint32_t placement;          /* LLDD_PLACEMENT_DEVICE or LLDD_PLACEMENT_HOST */
    uint8_t *base;
    uint64_t memory_size;
    uint32_t page_shift;
    uint64_t pages;
    pool_extent *free;
    size_t free_count, free_cap;
} mpool;

/* ---- engine_cache.c ---- */
/* The cache with this id, or NULL. Caller holds e->mu. */
mcache *cache_find_locked(engine *e, int64_t id);
/* Finds and pins a local cache (NULL if unknown); cache_unpin releases. */
/* A zeroed cache record with room for num_tensors addresses and pool pages of a
 * library-allocated cache; NULL (and the last error set) when host memory runs out. */
mcache *cache_owned_record_new(const char *fn, uint32_t num_tensors);
mcache *cache_pin(engine *e, int64_t id);
void cache_unpin(engine *e, mcache *c);
void cache_unpin_locked(engine *e, mcache *c);
/* Frees every cache and pool of a finalizing engine (waits for pins). */
void caches_teardown(engine *e);
int pool_create(mpool *p, uint32_t placement, int32_t device, uint64_t memory_size, uint32_t page_shift);
void pool_destroy(mpool *p);

/* ---- engine_cache.c: shared with transfers ---- */
/* Computes kind-independent layout (TS, stride, counts) of a descriptor. */
lldd_status cache_layout(const char *fn, const lldd_cache_desc *desc, cache_wire *w);
lldd_status cache_check_rank(const char *fn, const lldd_cache_desc *d);
/* The next cache id (mu held). A call takes it in the same hold of mu in which it
 * inserts the cache, so that ids reach the table in order (docs/security.md §1.1). */
int64_t cache_take_id_locked(engine *e);
/* The registration range checks of every tensor [addrs[i], +tensor_size), native and
 * extension (docs/semantics.md E-16, E-23): it does not wrap past 2^64; it does not start
 * in a freed mock-ACL allocation; PR-30 (a range that starts in a live mock-ACL
 * allocation stays inside it); it starts on a mapped page. */
lldd_status cache_check_ranges(const char *fn, const uint64_t *addrs, size_t num_addrs, uint64_t tensor_size);
/* E-1 for the arrays inside a caller's lldd_cache (tensor_addrs, cache_desc.shape): NULL
 * with a non-zero count is PARAM_INVALID (E-23). */
lldd_status cache_arg_check(const char *fn, const char *name, const lldd_cache *c);
/* A registered cache's record: w and a copy of the caller's addresses. NULL, with
 * "out of host memory" set, when memory runs out. */
mcache *cache_record_new(const char *fn, const cache_wire *w, const uint64_t *addrs, size_t num_addrs);
/* Bytes of one cache's entry in the published table (semantics.md §15), and of one key binding. */
uint64_t cache_entry_bytes(uint32_t num_tensors);
enum { TABLE_LIMIT = 1024 * 1024, TABLE_KEY_BYTES = 24 };
/* Direct mode's bound on the published table (semantics.md §15), mu held: PARAM_INVALID,
 * naming the size it would reach, when a cache of num_tensors tensors and keys_bytes of
 * key bindings would take it past TABLE_LIMIT; SUCCESS otherwise and in every other mode. */
lldd_status table_room_check_locked(const engine *e, const char *fn, uint32_t num_tensors, uint64_t keys_bytes);
/* Inserts a cache whose id was taken by cache_take_id_locked in the same hold of mu;
 * -1 on no memory. */
int table_insert_locked(engine *e, mcache *c);
/* Takes a cache out of the table, unbinds its keys, waits for its pins and returns
 * its pool pages (mu held); the caller then calls cache_destroy without mu. */
void table_remove_locked(engine *e, mcache *c);
/* Frees a cache record and any memory it owns outside a pool. */
void cache_destroy(mcache *c);
/* The pool of desc's placement (DEVICE or HOST), which the engine must have; PARAM_INVALID
 * naming the missing option otherwise. */
lldd_status cache_pool_for(engine *e, const char *fn, const lldd_cache_desc *desc, mpool **out);
/* The stages of an allocation (AllocateCache and the extension's allocate_cache), each
 * call keeping its own order of them:
 *   room      num_tensors > 0 and tensor_addrs with room for them;
 *   new       the layout of desc into *w (owned) and the cache's record (*out);
 *   id        e->mu held: takes an id (the call consumes one also when an earlier stage
 *             failed: st, semantics.md §3.1), gives it and w to c with the id handle, and
 *             checks the published table's room for the entry;
 *   pages     e->mu held: pages of pool for every tensor (c->addrs); `oom` and the pool's
 *             message when it has no room, nothing taken; give returns them. */
lldd_status cache_alloc_room_checks(const char *fn, const lldd_cache_desc *desc, const uint64_t *tensor_addrs,
                                    size_t addrs_capacity);
lldd_status cache_owned_new(const char *fn, const lldd_cache_desc *desc, cache_wire *w, mcache **out);
lldd_status cache_alloc_id_locked(engine *e, const char *fn, lldd_status st, mcache *c, const cache_wire *w,
                                  int64_t *id);
lldd_status cache_take_pages_locked(const char *fn, mcache *c, mpool *pool, lldd_status oom);
void cache_give_pages_locked(mcache *c);
int pool_take(mpool *p, uint64_t count, uint64_t *first);
void pool_give(mpool *p, uint64_t first, uint64_t count);
/* CopyKvCache / copy_cache: the checks and the bytes (docs/reference/semantics.md §6.6, §8.8). */
lldd_status cache_copy(engine *e, const char *fn, int64_t src_id, int64_t dst_id, uint32_t src_batch,
                       uint32_t dst_batch, uint64_t offset, int64_t size, int v1, const char *src_name,
                       const char *dst_name);

/* ---- engine_cache.c: the native cache calls after their entry (api_caches.c), which
 * has checked the arguments, entered the engine and leaves it afterwards ---- */
lldd_status cache_register(engine *e, const char *fn, const lldd_cache_desc *desc, const uint64_t *addrs,
                           size_t num_addrs, int64_t *cache_id);
lldd_status cache_unregister(engine *e, const char *fn, int64_t cache_id);
/* The entry of the PR-9 calls: FEATURE_NOT_ENABLED without a pool (also before
 * Initialize and after Finalize, semantics.md §3.6); FAILED once Finalize has begun (PR-37). */
lldd_status pool_call_enter(engine *e, const char *fn);
lldd_status cache_allocate(engine *e, const char *fn, const lldd_cache_desc *desc, int64_t *cache_id,
                           uint64_t *tensor_addrs, size_t addrs_capacity);
/* Unknown or registered: nothing happens (semantics.md §3.6). */
void cache_deallocate(engine *e, int64_t cache_id);
/* total: the entries of dst_blocks_flat (the sum of dst_list_lens, checked by the entry). */
lldd_status cache_copy_blocks(engine *e, const char *fn, const lldd_cache *src_cache, const lldd_cache *dst_cache,
                              const uint64_t *src_blocks, size_t num_src_blocks, const uint64_t *dst_blocks_flat,
                              const size_t *dst_list_lens, size_t num_dst_lists, size_t total);

static inline int kind_has_batches(const cache_wire *w)
{
    return w->kind == KIND_CACHE || w->kind == KIND_MIX;
}

static inline int kind_has_blocks(const cache_wire *w)
{
    return w->kind == KIND_BLOCKS || w->kind == KIND_MIX;
}

#endif /* LLDD_MOCK_CACHE_TABLE_H */
