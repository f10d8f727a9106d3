/* Internal structures of the mock LLM-DataDist engine (one lldd_engine per
 * llm_datadist::LlmDataDist), shared by engine*.c.
 *
 * Locking, outermost first (never take a lock of an earlier row while holding a
 * later one):
 *   life_mu    Initialize / Finalize / destroy of one engine
 *   listen_mu  the listener of one engine (Initialize, SetRole, Finalize)
 *   link->xfer_mu  serializes the transfers over one link; dropping a link takes it
 *   e->mu      state, active-call count, cache table, link table, pending
 *              handshakes, thread list. Held only for short bookkeeping, never
 *              across I/O or a wait other than pthread_cond_wait on e->cv.
 *   g_registry (engine.c)  the process-wide engine list
 * Two engines' mu are never held at once.
 *
 * Life of a cache: the table owns it; a transfer or copy that uses it holds a pin
 * (c->pins, under the owner's mu). Removal (deallocate, unregister, finalize)
 * takes the cache out of the table first, so no new pin can be taken, then waits
 * on e->cv until the pins are gone, and only then frees memory.
 */
#ifndef LLDD_MOCK_ENGINE_H
#define LLDD_MOCK_ENGINE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>

#include "mock_internal.h"
#include "transport.h"

enum { ENGINE_UNINIT = 0, ENGINE_READY = 1, ENGINE_FINALIZING = 2 };

/* Cache kinds (semantics §2.2). The native layer creates MIX caches only; CACHE and
 * BLOCKS exist for the Python v2 layer. */
enum { KIND_CACHE = 1, KIND_BLOCKS = 2, KIND_MIX = 3 };

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

typedef struct mcache {
    cache_wire w;
    uint64_t *addrs;             /* w.num_tensors tensor base addresses */
    uint32_t pins;               /* under the owner's mu */
    int removed;                 /* out of the table, waiting for its pins */
    struct mpool *pool;          /* owned caches: the pool and the page runs */
    uint64_t *page_first;        /* per tensor */
    uint64_t pages_per_tensor;
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

/* A thread the engine started; joined by whoever owns the record. */
typedef struct eng_thread {
    struct eng_thread *next;
    pthread_t tid;
    int fd;                      /* the connection it serves (closed by its owner) */
    atomic_int done;
    struct lldd_engine *e;
} eng_thread;

typedef struct mlink {
    struct mlink *next;
    struct lldd_engine *e;
    atomic_int refs;             /* the table's reference + one per user */
    uint64_t peer_cluster;
    uint64_t token;
    int ready;                   /* e->mu: 0 while the client's handshake runs */
    int removed;                 /* e->mu: out of the table (being dropped) */
    atomic_int peer_gone;        /* EOF seen on the connection the peer asks on */
    atomic_int poisoned;         /* a transfer returned TIMEOUT (PR-35) */
    atomic_int dropped;          /* lldd_mock_drop_connections */
    atomic_int stopping;         /* interrupts the server thread's serve delay */
    int req_fd;                  /* our requests, the peer answers */
    int srv_fd;                  /* the peer's requests, our server thread answers */
    eng_thread *server;
    pid_t peer_pid;
    uint64_t peer_serial;
    int same_process;
    atomic_int vm_ok;            /* process_vm_readv/writev reach the peer */
    int64_t own_next_at_link;    /* PR-32: ids at or above were registered after the link */
    int64_t peer_next_at_link;
    int64_t watermark;           /* xfer_mu: the table copy (§9.7): peer ids below it; 0 = not taken */
    pthread_mutex_t xfer_mu;
} mlink;

/* A server-side handshake between HELLO (c1) and REVERSE (c2). */
typedef struct pending_link {
    struct pending_link *next;
    hello_body peer;
    int c1_fd;
    eng_thread *c1_thread;
    int state;                   /* 0 waiting, 1 installed, 2 abandoned */
    mlink *link;
} pending_link;

struct lldd_engine {
    struct lldd_engine *reg_next;
    uint64_t serial;
    uint32_t reg_refs;           /* g_registry: in-process peers using this engine */
    uint64_t cluster_id;
    atomic_int role;

    pthread_mutex_t life_mu;
    pthread_mutex_t listen_mu;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int state;
    uint32_t active;             /* running API calls (PR-37) */
    atomic_int stopping;         /* finalize began: wakes sleeping serve delays */

    /* options of the current initialisation */
    int32_t device;
    uint32_t sync_timeout_ms;
    int hixl;
    char *local_comm_res;        /* NULL when absent or empty */
    int comm_res_generated;      /* a link generated the local resource (§10.2) */
    uint32_t mode;               /* MODE_DIRECT for the native layer */

    /* listener (listen_mu) */
    int listening;
    tp_addr listen_addr;
    int listen_fd;
    int wake_pipe[2];
    pthread_t listen_tid;

    /* caches (mu) */
    mcache **caches;             /* sorted by id (ids only grow) */
    size_t cache_count, cache_cap;
    int64_t next_id;
    uint64_t table_bytes;        /* size of the published table (§15) */
    mpool dev_pool, host_pool;

    /* links, handshakes and connection threads (mu) */
    mlink *links;
    pending_link *pending;
    eng_thread *conns;           /* accepted connections not owned by a link */

    atomic_uint serve_delay_ms;
};

typedef struct lldd_engine engine;

/* ---- dtype.c ---- */
uint32_t dtype_bits(int32_t data_type);
int dtype_is_sub_byte(int32_t data_type);

/* ---- engine.c ---- */
/* Begins an API call: LLM_FAILED with "not initialized" unless the engine is ready
 * (PR-37), else counts the call as running. */
lldd_status engine_enter(engine *e, const char *fn);
void engine_leave(engine *e);
/* Finds a live engine of this process by serial and holds it (NULL if gone). */
engine *registry_acquire(uint64_t serial);
void registry_release(engine *e);
uint64_t engine_probe_value(void);
uint64_t engine_probe_addr(void);
int thread_start(engine *e, eng_thread *t, void *(*fn)(void *), void *arg);
void thread_join_free(eng_thread *t);
void engine_reap_conns(engine *e, int all);

/* ---- engine_cache.c ---- */
/* The cache with this id, or NULL. Caller holds e->mu. */
mcache *cache_find_locked(engine *e, int64_t id);
/* Finds and pins a local cache (NULL if unknown); cache_unpin releases. */
mcache *cache_pin(engine *e, int64_t id);
void cache_unpin(engine *e, mcache *c);
void cache_unpin_locked(engine *e, mcache *c);
/* Frees every cache and pool of a finalizing engine (waits for pins). */
void caches_teardown(engine *e);
int pool_create(mpool *p, uint32_t placement, int32_t device, uint64_t memory_size, uint32_t page_shift);
void pool_destroy(mpool *p);

/* ---- engine_link.c ---- */
mlink *link_find_locked(engine *e, uint64_t peer_cluster);
void link_ref(mlink *l);
void link_unref(mlink *l);
/* Takes the link out of the table, waits for its transfers, closes it. */
void link_drop(engine *e, mlink *l);
void links_teardown(engine *e);
/* Connection threads started by the listener (one per accepted connection). */
void *conn_thread_main(void *arg);
/* Wakes and ends handshakes in progress (finalize). */
void pending_abort_all(engine *e);

/* ---- engine_serve.c ---- */
/* The server loop of a link: answers the peer's requests on l->srv_fd. */
void link_serve(mlink *l);
void *link_server_main(void *arg);

/* ---- engine_blocks.c: block lists ----
 * A run (semantics §7.3) is a maximal stretch of pairs in which both the source and
 * the destination index grow by exactly 1. Runs are found on the fly while
 * walking the caller's arrays; block lists are never copied. */
typedef struct run_iter {
    const uint64_t *src;
    const uint64_t *dst;
    size_t count;
    size_t pos;
} run_iter;

static inline void run_iter_init(run_iter *it, const uint64_t *src, const uint64_t *dst, size_t count)
{
    it->src = src;
    it->dst = dst;
    it->count = count;
    it->pos = 0;
}

static inline int run_next(run_iter *it, uint64_t *s0, uint64_t *d0, uint64_t *len)
{
    size_t k = it->pos;
    if (k >= it->count)
        return 0;
    size_t j = k + 1;
    while (j < it->count && it->src[j - 1] != UINT64_MAX && it->src[j] == it->src[j - 1] + 1 &&
           it->dst[j - 1] != UINT64_MAX && it->dst[j] == it->dst[j - 1] + 1)
        j++;
    *s0 = it->src[k];
    *d0 = it->dst[k];
    *len = (uint64_t)(j - k);
    it->pos = j;
    return 1;
}

size_t count_runs(const uint64_t *src, const uint64_t *dst, size_t count);

/* A set of uint64 values: a bitmap when the values are small, else a hash table. */
typedef struct u64set {
    uint64_t *bits;
    uint64_t nbits;
    uint64_t *slots;         /* value + 1; 0 marks an empty slot */
    size_t mask;
    int has_max;             /* UINT64_MAX is in the set (it cannot be stored + 1) */
} u64set;

/* For up to `count` values none of which exceeds max_value. -1 when out of memory. */
int u64set_init(u64set *s, size_t count, uint64_t max_value);
/* 1 if v was added, 0 if it was there already. */
int u64set_add(u64set *s, uint64_t v);
int u64set_has(const u64set *s, uint64_t v);
void u64set_free(u64set *s);
/* The position of the first value of v[0 .. count) that repeats an earlier one
 * (SIZE_MAX if none); *earlier receives the earlier position. -1 on no memory. */
int find_repeat(const uint64_t *v, size_t count, size_t *pos, size_t *earlier);

/* ---- engine_cache.c: shared with transfers ---- */
/* Computes kind-independent layout (TS, stride, counts) of a descriptor. */
lldd_status cache_layout(const char *fn, const lldd_cache_desc *desc, cache_wire *w);

#endif /* LLDD_MOCK_ENGINE_H */
