/* Internal structures of the mock LLM-DataDist engine (one lldd_engine per
 * llm_datadist::LlmDataDist), shared by engine*.c.
 *
 * Locking, outermost first (never take a lock of an earlier row while holding a
 * later one):
 *   life_mu    Initialize / Finalize / destroy of one engine
 *   v1_link_mu one v1 link_clusters / unlink_clusters call at a time (trylock:
 *              PROCESSING_LINK); held across its per-cluster work
 *   listen_mu  the listener of one engine (Initialize, SetRole, Finalize)
 *   link->xfer_mu  a read-write lock over the transfers of one link: a transfer that
 *              reads the peer's published table (engine_pub.c) holds it shared, so
 *              such transfers run in parallel; every other transfer, and whatever
 *              changes the link (dropping, reaping, taking the table), holds it
 *              exclusively (the v1 resolver only try-reads link->busy, never waits on
 *              it); a link's sockets are closed only with it exclusive and e->mu
 *              held (reaping)
 *   link->sock_mu  a shared holder of xfer_mu that must use the link's request
 *              socket (a cache the table cannot say, the socket path)
 *   link->map_rw   the link's mappings of the peer's arena chunks (engine_shared.c):
 *              shared to copy through them, exclusive to add or remove one
 *   e->mu      state, active-call count, cache table, key table, link table,
 *              communicator list, pending handshakes, thread list. Held only for
 *              short bookkeeping, never across I/O or a wait other than
 *              pthread_cond_wait on e->cv.
 *   g_registry (engine.c)  the process-wide engine list
 * Two engines' mu are never held at once. A communicator's thread
 * (engine_ext_comm.c) takes only e->mu and what a link handshake takes; Finalize
 * joins it before links and caches go.
 *
 * Life of a cache: the table owns it; a transfer or copy that uses it holds a pin
 * (c->pins, under the owner's mu). Removal (deallocate, unregister, finalize, the
 * release of its last key) takes the cache out of the table first, so no new pin
 * can be taken, unbinds its keys, then waits on e->cv until the pins are gone (a
 * peer's pin for at most the wait time, then its link is cut), and only then frees
 * memory. A pull that releases a key unpins its source before the
 * release, so that the release may free it.
 */
#ifndef LLDD_MOCK_ENGINE_H
#define LLDD_MOCK_ENGINE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>

#include "mock_internal.h"
#include "peer_id.h"
#include "transport.h"

enum { ENGINE_UNINIT = 0, ENGINE_READY = 1, ENGINE_FINALIZING = 2 };

/* Bounds on what a peer, or anyone who can reach the listener, can make an engine
 * hold or wait for (docs/security.md §3). Each is a fixed property of the mock.
 *   BOUND_HANDSHAKES     accepted connections whose thread has not become a link's
 *                        server thread (handshakes, disconnects in progress); a
 *                        connection beyond it is closed at once, before any read
 *   BOUND_FIRST_MSG_MS   how long such a connection may take to send its first message
 *   BOUND_REVERSE_MS     the server's wait for REVERSE after it answered a HELLO:
 *                        min(the client's own timeout, this) + BOUND_REVERSE_SLACK_MS;
 *                        the wait also ends when the client closes its connection
 *   BOUND_LINKS          links an engine serves at once (links and served-only sides
 *                        with a live connection, plus handshakes past HELLO); a HELLO
 *                        beyond it is refused with LLM_LINK_FAILED
 *   BOUND_GONE_RECORDS   records of links whose peer is gone, kept (without sockets or
 *                        thread) so that transfers over them report PR-31's TIMEOUT;
 *                        beyond it the oldest record is dropped
 *   BOUND_PINS_PER_LINK  caches one connection may hold pinned at once (a transfer
 *                        holds at most two); a request beyond it closes the connection
 *   BOUND_SERVE_IDLE_MS  a link's server thread: the longest wait for one piece of a
 *                        request's body or for the peer to take a piece of an answer
 * Sizes a peer sends are bounded by what they describe: a region list by
 * WIRE_MAX_REGIONS (transport.h), a release's tensor list by the tensor count of the
 * cache it names, every other body by its fixed size. */
enum {
    BOUND_HANDSHAKES = 64,
    BOUND_FIRST_MSG_MS = 10000,
    BOUND_REVERSE_MS = 30000,
    BOUND_REVERSE_SLACK_MS = 1000,
    BOUND_LINKS = 256,
    BOUND_GONE_RECORDS = 1024,
    BOUND_PINS_PER_LINK = 64,
    BOUND_SERVE_IDLE_MS = 60000
};

/* Cache kinds (docs/reference/semantics.md §2.2). The native layer creates MIX caches only; CACHE and
 * BLOCKS exist for the Python v2 layer; a v1 blocks cache is MIX. */
enum { KIND_CACHE = 1, KIND_BLOCKS = 2, KIND_MIX = 3 };

/* Generations (docs/reference/semantics.md §1.1). The native layer and lldd_initialize are v2 in direct
 * mode; lldd_ext_initialize selects v2 (either mode) or v1. */
enum { GEN_V2 = 2, GEN_V1 = 1 };

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
    uint32_t ext_ref;            /* owned: 1 for the id handle until deallocated (§9.5) */
    uint64_t *remaining;         /* R of §9.5 as a bitmap over the tensors, NULL if never set */
    uint64_t remaining_count;
    int pub_state;               /* PUB_* (engine_pub.c), under the owner's mu */
    uint32_t pub_slot;
} mcache;

/* The published cache table (engine_pub.c): a header and PUB_SLOTS slots in a memfd the
 * owner writes and identified peers map read-only, and per link a page of PUB_SLOTS pin
 * counters that only the peer raises. */
enum { PUB_SLOTS = 1024, PUB_ADDRS = 500 };
/* A cache's place in the table: none (no table, or settled after its removal), listed in
 * slot pub_slot, unlisted (counted in pub_head.unpublished), or left its slot and waiting
 * for the peers' pins there. */
enum { PUB_NONE = 0, PUB_LISTED = 1, PUB_UNLISTED = 2, PUB_LEFT = 3 };

typedef struct pub_head {
    uint64_t magic;
    uint32_t slots, addrs_per_slot;
    atomic_uint_fast64_t unpublished;  /* live caches without a slot: a miss must ask the owner */
    atomic_uint serve_delay_ms;        /* lldd_mock_set_serve_delay, which a peer emulates */
    atomic_uint ready;                 /* 0 once the owner began to finalize */
    atomic_uint_fast64_t arena_chunks; /* the owner's arena chunks when a cache was last listed: a
                                          listed cache's memory lies in them or in none */
    uint64_t reserved[3];
} pub_head;

typedef struct pub_slot {
    atomic_uint_fast64_t seq;    /* odd while the owner rewrites the slot */
    int64_t id;                  /* 0: empty */
    cache_wire w;
    uint64_t addrs[PUB_ADDRS];
} pub_slot;

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

/* The caches one link's server thread holds pinned for its peer (mu). */
typedef struct pin_list {
    struct mcache **items;
    size_t count, cap;
} pin_list;

/* A thread the engine started; joined by whoever owns the record. */
typedef struct eng_thread {
    struct eng_thread *next;
    pthread_t tid;
    int fd;                      /* the connection it serves (closed by its owner) */
    atomic_int done;
    struct lldd_engine *e;
} eng_thread;

/* One link's pace (the link model, include/lldd/mock.h). */
enum { LINK_PACE_SLOTS = 64 };
typedef struct link_pace {
    uint64_t cluster;
    uint64_t bw;                 /* bytes per second, 0 = unlimited */
    uint64_t lat_us;
} link_pace;

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
    atomic_int cut;              /* its connections were cut: a removal could not wait for its pins */
    int req_fd;                  /* our requests, the peer answers; -1 once reaped. Closed only */
    int srv_fd;                  /* with xfer_mu and e->mu held; the peer's requests, our server thread answers */
    eng_thread *server;          /* NULL once reaped (xfer_mu and e->mu to clear) */
    int reaped;                  /* e->mu: the peer is gone, sockets closed, thread joined (a record only) */
    pin_list pins;               /* e->mu: what the server thread holds pinned for the peer */
    pid_t peer_pid;              /* the kernel-vouched peer process (peer_id.h), 0 if unknown */
    int peer_pidfd;              /* holds that process: a transfer checks it is still alive */
    uint64_t peer_serial;
    int same_process;            /* the kernel says the peer is this process */
    atomic_int vm_ok;            /* process_vm_readv/writev reach the identified peer */
    int addr_ok;                 /* replies may carry tensor addresses: an identified peer of
                                    another process that could read them anyway (same user) */
    int64_t served_id_mark;      /* server thread: the table copy this link's peer took (§9.7), as
                                    recorded here when it took it; 0 = not taken */
    uint64_t served_bind_mark;
    int64_t own_next_at_link;    /* PR-32: ids at or above were registered after the link */
    int64_t peer_next_at_link;
    int64_t watermark;           /* xfer_mu: the table copy (§9.7): peer ids below it; 0 = not taken */
    uint64_t bind_watermark;     /* xfer_mu: the table copy's key bindings: sequence below it */
    uint64_t comm_key;           /* a rank-table communicator's link (0: link_clusters) */
    atomic_int comm_pending;     /* its communicator is not OK yet: transfers NOT_YET_LINK */
    atomic_int busy;             /* a transfer of this side holds the link (v1 LINK_BUSY) */
    int served_only;             /* in e->served: answers the client's requests but is no link of this
                                    engine (a HIXL listener's side; the listening half of a link to itself) */
    int orphan;                  /* e->mu: HIXL: replaced under its cluster id by a link to another
                                    address; reachable by that address only (for ALREADY_LINK) */
    /* shared library memory (engine_shared.c, docs/security.md §2.7); map_rw */
    char peer_id_channel[ID_NAME_LEN]; /* client side: the listener's identity channel ("" = none) */
    struct shared_map *maps;     /* the peer's arena chunks mapped here, sorted by their base there */
    size_t map_count, map_cap;
    uint64_t map_from;           /* the peer's chunks asked for so far */
    int64_t map_asked_ms;        /* when MAP was last asked (misses ask again at most every MAP_RETRY_MS) */
    int map_refused;             /* the peer refused MAP: never asked again on this link */
    atomic_uint last_path;       /* LLDD_MOCK_PATH_* of the last transfer that moved bytes */
    char peer_ip[64];            /* client side: the address linked to (HIXL keys connections by it) */
    uint16_t peer_port;
    /* the peer's published table (engine_pub.c): client side, set under xfer_mu */
    const pub_head *pub_view;    /* the peer's table, mapped read-only */
    atomic_uint *pub_mine;       /* our pin counters there */
    atomic_int pub_ready;        /* 1: transfers read the table; then pub_view/pub_mine stay until unmapped */
    int pub_refused;             /* the peer did not give it: never asked again on this link */
    /* owner side (e->mu) */
    atomic_uint *pub_pins;       /* the peer's pin counters of our table */
    int pub_ignored;             /* its link was cut: its counters no longer hold a removal */
    pthread_rwlock_t xfer_mu;    /* exclusive for a transfer that uses the sockets or changes the link's
                                    state; shared for one that reads the published table (engine_pub.c) */
    pthread_mutex_t sock_mu;     /* a shared holder that must use req_fd takes it */
    pthread_rwlock_t map_rw;     /* maps, map_count, map_cap, map_from, map_asked_ms, map_refused */
} mlink;

/* A server-side handshake between HELLO (c1) and REVERSE (c2). */
typedef struct pending_link {
    struct pending_link *next;
    hello_body peer;
    uint8_t nonce[NONCE_LEN];    /* ours, sent in the HELLO reply */
    peer_cred cred;              /* e->mu: set by an accepted IDENTIFY */
    uint64_t comm_key;           /* the HELLO's communicator key */
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
    int gen;                     /* GEN_V2 (native, ext v2) or GEN_V1 */
    int ext;                     /* initialised by lldd_ext_initialize */
    int switch_role_enabled;     /* v1: llm.EnableSwitchRole = "1" */
    int v1_unlimited;            /* v1 without a pool size: caches come straight from the device */
    int native_pool;             /* llm_datadist_ffi.mock.NativePool = "1": the PR-9 calls work (mock only) */
    uint32_t link_total_ms;      /* llm.LinkTotalTime (rank-table links) */
    int rank_linked;             /* lldd_ext_link was called (register rules, §2.6) */
    pthread_mutex_t v1_link_mu;  /* v1: one link/unlink at a time (PROCESSING_LINK) */

    /* link security (docs/security.md §2) */
    uint64_t instance;           /* random: recognises a link to itself */
    uint8_t secret[SECRET_MAX];  /* the shared secret; secret_len 0 = none */
    size_t secret_len;
    int vm_any_user;             /* process_vm also to identified peers of other users */

    /* listener (listen_mu) */
    int listening;
    int id_fd;                   /* the identity channel's listener (peer_id.h) */
    char id_name[ID_NAME_LEN];
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
    keytab keys;                 /* bound keys (§9) */
    uint64_t next_bind;          /* binding sequence, from 1 */

    /* links, handshakes and connection threads (mu) */
    mlink *links;
    mlink *served;               /* served-only sides of links that belong to their clients */
    pending_link *pending;
    eng_thread *conns;           /* accepted connections not owned by a link */
    struct comm *comms;          /* rank-table communicators (engine_ext_comm.c) */
    uint64_t next_comm_id;

    atomic_uint serve_delay_ms;
    pub_head *pub;               /* the published table (engine_pub.c), NULL until a peer asks (mu) */
    int pub_fd;
    uint32_t *pub_draining;      /* per slot: removed caches still waiting for pins there */

    /* the link model (lldd_mock_set_link_pace): the options' pace of every link, and
     * per-cluster overrides (mu) that last for the engine's life */
    uint64_t pace_bw, pace_lat_us;
    link_pace paces[LINK_PACE_SLOTS];
    uint32_t pace_count;
};

typedef struct lldd_engine engine;

/* ---- dtype.c ---- */
uint32_t dtype_bits(int32_t data_type);
int dtype_is_sub_byte(int32_t data_type);

/* ---- engine.c ---- */
/* Begins an API call: LLM_FAILED with "not initialized" unless the engine is ready
 * (PR-37), else counts the call as running. */
lldd_status engine_enter(engine *e, const char *fn);
/* The entry of an API call that takes only an engine: an injected fault, then a NULL
 * engine (PARAM_INVALID), then engine_enter. Anything but LLM_SUCCESS is the answer. */
lldd_status engine_call_enter(engine *e, const char *fn);
void engine_leave(engine *e);
/* Finds a live engine of this process by serial and holds it (NULL if gone). */
engine *registry_acquire(uint64_t serial);
void registry_release(engine *e);
int thread_start(engine *e, eng_thread *t, void *(*fn)(void *), void *arg);
void thread_join_free(eng_thread *t);
void engine_reap_conns(engine *e, int all);
/* An accepted connection (engine listener or communicator): a connection thread
 * (conn_thread_main) in e->conns serves it; on failure the fd is closed. */
void engine_adopt_conn(engine *e, int fd);

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

/* ---- engine_link.c ---- */
mlink *link_find_locked(engine *e, uint64_t peer_cluster);
/* The other side of `mine` in `peer` (links or served sides; peer may be mine's own
 * engine for a link to itself), or NULL. peer->mu held. */
mlink *link_peer_side_locked(engine *peer, const mlink *mine);
void link_ref(mlink *l);
void link_unref(mlink *l);
/* Takes the link out of the table, waits for its transfers, closes it. */
void link_drop(engine *e, mlink *l);
void links_teardown(engine *e);
/* Connection threads started by the listener (one per accepted connection). */
void *conn_thread_main(void *arg);
/* Wakes and ends handshakes in progress (finalize). */
void pending_abort_all(engine *e);
/* Frees what links to gone peers hold: their sockets and server thread (a record stays
 * for PR-31) and served-only sides entirely; keeps at most BOUND_GONE_RECORDS records.
 * Called by the listener thread on every tick. */
void links_reap(engine *e);
/* Cuts the connections of every link whose server thread holds c pinned (their server
 * threads then end and unpin it). mu held. Returns how many links it cut. */
size_t links_cut_pinning_locked(engine *e, const struct mcache *c);
/* Waits on e->cv for at most ms milliseconds (mu held); ETIMEDOUT when the time ran out. */
int engine_cv_wait_ms(engine *e, int64_t ms);

/* ---- engine_serve.c ---- */
/* The server loop of a link: answers the peer's requests on l->srv_fd. */
void link_serve(mlink *l);
/* The table copy of §9.7 for l's peer: taken at the peer's first transfer (or when it
 * takes our published table), kept in the link. e->mu held. */
void link_take_marks_locked(engine *e, mlink *l);
void *link_server_main(void *arg);

/* ---- engine_blocks.c: block lists ----
 * A run (docs/reference/semantics.md §7.3) is a maximal stretch of pairs in which both the source and
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
/* Bytes of one cache's entry in the published table (§15), and of one key binding. */
uint64_t cache_entry_bytes(uint32_t num_tensors);
enum { TABLE_LIMIT = 1024 * 1024, TABLE_KEY_BYTES = 24 };
/* Inserts a cache whose id was taken by cache_take_id_locked in the same hold of mu;
 * -1 on no memory. */
int table_insert_locked(engine *e, mcache *c);
/* Takes a cache out of the table, unbinds its keys, waits for its pins and returns
 * its pool pages (mu held); the caller then calls cache_destroy without mu. */
void table_remove_locked(engine *e, mcache *c);
/* Frees a cache record and any memory it owns outside a pool. */
void cache_destroy(mcache *c);
int pool_take(mpool *p, uint64_t count, uint64_t *first);
void pool_give(mpool *p, uint64_t first, uint64_t count);
/* CopyKvCache / copy_cache: the checks of docs/reference/semantics.md §6.6 and the bytes of §8.8. */
lldd_status cache_copy(engine *e, const char *fn, int64_t src_id, int64_t dst_id, uint32_t src_batch,
                       uint32_t dst_batch, uint64_t offset, int64_t size, int v1, const char *src_name,
                       const char *dst_name);

static inline int kind_has_batches(const cache_wire *w)
{
    return w->kind == KIND_CACHE || w->kind == KIND_MIX;
}

static inline int kind_has_blocks(const cache_wire *w)
{
    return w->kind == KIND_BLOCKS || w->kind == KIND_MIX;
}

/* ---- engine.c: options and the shared part of Initialize / SetRole ---- */
/* The first checks of Initialize and SetRole (native and extension): an injected fault,
 * a NULL engine, NULL options with num_options > 0. The caller enters the engine. */
lldd_status engine_options_call_check(engine *e, const char *fn, const lldd_option *options, size_t num_options);
const char *engine_opt_get(const lldd_option *options, size_t count, const char *key);
int engine_parse_digits(const char *s, uint64_t max, uint64_t *out);
/* llm.SyncKvCacheWaitTime: milliseconds in [0, 2^31 - 1], 1000 when absent; 0 is a lint
 * (PR-26), above 2^31 - 1 refused (a guard). */
lldd_status engine_parse_sync_wait(const char *fn, const lldd_option *o, size_t n, uint32_t *out);
/* PR-9: the vendor's class answers FEATURE_NOT_ENABLED to AllocateCache,
 * DeallocateCache, CopyKvCache and CopyKvBlocks; the mock-only option
 * llm_datadist_ffi.mock.NativePool = "1" turns on their pool-backed variant
 * (*out = 1). "0" or absent: off; any other value: PARAM_INVALID. */
lldd_status engine_parse_native_pool(const char *fn, const lldd_option *o, size_t n, int *out);
/* A device option's ";"-separated ids, each an int32 >= 0 (llm.DeviceId, ge.exec.deviceId):
 * *items of them, the first in *first. The caller judges the count. */
lldd_status engine_parse_device_list(const char *fn, const char *key, const char *dev, size_t *items,
                                     int32_t *first);

typedef struct pool_cfg {
    int present;
    uint64_t memory_size;
    uint32_t page_shift;
} pool_cfg;

lldd_status engine_parse_pool_cfg(const char *fn, const char *key, const char *text, pool_cfg *out);

typedef struct engine_cfg {
    int32_t role;
    int32_t device;
    int has_listen;
    tp_addr listen;
    uint32_t sync_timeout_ms;
    int hixl;
    pool_cfg dev_pool, host_pool;
    const char *local_comm_res;
    int gen;
    uint32_t mode;
    int ext;
    int switch_role_enabled;
    int v1_unlimited;
    int native_pool;
    uint32_t link_total_ms;
    uint64_t pace_bw, pace_lat_us;
    uint8_t secret[SECRET_MAX];
    size_t secret_len;
    int vm_any_user;
} engine_cfg;

/* The link model's options (mock only): llm_datadist_ffi.mock.LinkBandwidth, bytes per
 * second (0 or absent: unlimited), and llm_datadist_ffi.mock.LinkLatencyUs, microseconds
 * up to one hour (absent: 0); anything else is PARAM_INVALID. */
lldd_status engine_parse_link_pace(const char *fn, const lldd_option *o, size_t n, engine_cfg *c);

/* llm_datadist_ffi.mock.LinkSecret (or LLM_DATADIST_FFI_LINK_SECRET) and
 * llm_datadist_ffi.mock.ProcessVmAnyUser (docs/security.md §2). */
lldd_status engine_parse_link_security(const char *fn, const lldd_option *o, size_t n, engine_cfg *c);

/* Applies a checked configuration: device, pools, listener; READY on success. life_mu held. */
lldd_status engine_start(engine *e, const engine_cfg *c, const char *fn);
/* SetRole's listener rule (docs/reference/semantics.md §10.7): listen at addr (NULL: stop listening). */
lldd_status engine_listen_as(engine *e, const char *fn, const tp_addr *addr);
/* Live links (rank-table communicators included) for EXIST_LINK. */
size_t engine_link_count(engine *e);

/* ---- engine_xfer.c: the pieces of a transfer shared with engine_ext_xfer.c ---- */
typedef struct xlink {
    engine *e;
    mlink *l;
    engine *peer;        /* same process: the peer engine, held through the registry */
    int locked;          /* xfer_mu held: 1 exclusive, 2 shared */
    int sock_locked;     /* shared holder: sock_mu held */
} xlink;

typedef struct peer_cache {
    cache_wire w;
    const uint64_t *addrs;
    uint64_t *owned_addrs;   /* another process: our copy of its addresses */
    mcache *pc;              /* same process: the pinned cache */
    int pinned;              /* 1 pinned by the peer or in-process, 2 through the published table */
    uint32_t pub_slot;
    uint64_t pub_addrs[PUB_ADDRS];
} peer_cache;

/* Which bytes move (docs/reference/semantics.md §8): tensor pairs x regions. Pair i is source tensor
 * smap[i] (s_base + i without a map) and destination tensor dmap[i] (d_base + i).
 *   C2C: one region per pair, soff/doff, len bytes;
 *   B2B: per run (s0, d0, n) of sblk/dblk: soff + s0*block, doff + d0*block, n*block;
 *   C2B: per chunk k < nblk: soff + k*block, doff + dblk[k]*block, min(block, len - k*block). */
enum { PLAN_C2C = 0, PLAN_B2B = 1, PLAN_C2B = 2 };

typedef struct plan {
    int form;
    uint32_t s_base, d_base, pairs;
    const uint64_t *smap, *dmap;
    const uint64_t *src_addrs, *dst_addrs;
    uint64_t soff, doff, len;
    const uint64_t *sblk, *dblk;
    size_t nblk;
    uint64_t block;
} plan;

/* Options of link_acquire: v1 links report busy and torn-down links as LINK_BUSY and
 * wait for the link's lock no longer than the transfer timeout (docs/reference/semantics.md §10.5). */
enum { ACQUIRE_V1 = 1, ACQUIRE_SHARED = 2 };
lldd_status link_acquire_ex(engine *e, const char *fn, uint64_t cluster, xlink *x, int flags);
void link_release(xlink *x);
/* The entry of a transfer call (native and extension): an injected fault, then NULL
 * arguments in parameter order (engine, a, b unless b_name is NULL, block lists that
 * have entries), then engine_enter. Anything but LLM_SUCCESS is the call's answer. */
lldd_status xfer_call_enter(engine *e, const char *fn, const char *a_name, const void *a, const char *b_name,
                            const void *b, const uint64_t *src_blocks, size_t num_src_blocks,
                            const uint64_t *dst_blocks, size_t num_dst_blocks);
lldd_status link_timeout(xlink *x, const char *fn, const char *fmt, ...) MOCK_PRINTF(3, 4);
/* Same process: emulates the peer's serve delay, then locks peer->mu and checks that
 * the peer still holds its side of the link (TIMEOUT otherwise, PR-31). */
lldd_status peer_local_enter(xlink *x, const char *fn);
/* Step 7 of §8.0 for a cache id (the native path): resolves and pins it. */
lldd_status peer_pin(xlink *x, const char *fn, int64_t id, peer_cache *pc);
void peer_unpin(xlink *x, peer_cache *pc);
/* Records the table copy (§9.7) taken now on the peer, if the link has none. */
void link_note_table_copy(mlink *l, int64_t id_mark, uint64_t bind_mark);
/* PR-32: a registered (not pool-owned) cache with an id given out after the link was
 * made is not reachable through it; the local side's and the peer's wording. */
lldd_status pr32_check_local(const char *fn, const mlink *l, const cache_wire *lw);
lldd_status pr32_check_peer(const char *fn, const mlink *l, const cache_wire *rw, uint64_t cluster_id);
lldd_status move_bytes(xlink *x, const char *fn, const plan *p, int pull, int64_t peer_cache_id);

/* engine_pub.c (see there). Owner side, under e->mu: */
void pub_insert_locked(engine *e, mcache *c);
/* Takes c out of its slot (the removal then waits for the slot's pins) ... */
void pub_remove_locked(engine *e, mcache *c);
/* ... and, once no pin holds it, frees the slot for another cache. */
void pub_settled_locked(engine *e, mcache *c);
/* A live link whose peer holds c pinned through the table, or NULL. */
mlink *pub_pinned_locked(engine *e, const mcache *c);
void pub_set_delay(engine *e, uint32_t delay_ms);
void pub_set_ready_locked(engine *e, int ready);
/* For l's peer: the table's fd (ours, not to close) and a new pin page's fd (the caller
 * closes it once sent); makes the table on first use. 0, or -1 (nothing to send). */
int pub_offer_locked(engine *e, mlink *l, int fds[2]);
/* Unmaps and closes the table (also a forked child's copy of the parent's, untouched). */
void pub_destroy(engine *e);
/* Peer side: maps what TABLE answered (the fds are closed either way); 0 or -1. */
int pub_take(mlink *l, int table_fd, int pins_fd);
/* Unmaps the peer side's mappings of l (no transfer may use them) and, when l is
 * freed (owner_side), the owner's mapping of its pin page. */
void pub_drop(mlink *l, int owner_side);
enum { PUB_FOUND = 0, PUB_ABSENT = 1, PUB_ASK = 2, PUB_GONE = 3 };
/* Looks id up in the peer's table and, if found, pins it: PUB_FOUND (w, addrs, slot set),
 * PUB_ABSENT (no such live cache), PUB_ASK (the table cannot say: ask over the socket),
 * PUB_GONE (the peer is finalizing). */
int pub_lookup(mlink *l, int64_t id, cache_wire *w, uint64_t *addrs, size_t cap, uint32_t *slot);
void pub_unpin(mlink *l, uint32_t slot);
uint32_t pub_delay_ms(const mlink *l);
/* Whether the peer may have arena chunks that l has not asked for (always 1 without a
 * table): where not, asking again (MAP) cannot help a range that is not mapped. */
int pub_may_have_new_chunks(const mlink *l);

/* engine_shared.c: the peer's arena chunks mapped in this process (docs/security.md §2.7).
 * Under the link's map_rw (shared for link_shared_ptr, exclusive for the others). */
typedef struct shared_map {
    uintptr_t remote;            /* the chunk's base in the peer */
    size_t size;
    char *local;                 /* where it is mapped here */
} shared_map;
/* Where [addr, addr + len) of the peer is mapped here, or NULL. */
char *link_shared_ptr(mlink *l, uintptr_t addr, uint64_t len);
/* Asks the peer for its arena chunks not mapped yet, at most every MAP_RETRY_MS; 1 if
 * a new one was mapped. */
int link_map_refresh(mlink *l);
void link_unmap_all(mlink *l);
lldd_status check_blocks(const char *fn, const char *name, const uint64_t *blk, size_t n, uint64_t limit,
                         const char *whose);
/* A repeated value: for destination blocks (lint = 1) the PR-5 lint, else a refusal. */
lldd_status check_repeats(const char *fn, const char *name, const uint64_t *v, size_t n, int lint);
/* Step 6 of a push (native and extension), in this order: the destination cache is
 * remote accessible and, unless pool-owned, registered before the link (PR-32). */
lldd_status push_dst_access_checks(const char *fn, const cache_wire *rw, const mlink *l, uint64_t cluster_id);
/* Step 6 of a push, after the batch index: destination blocks in range, the kind
 * (PR-15), batch or block sizes (PR-14, PR-13), no repeated destination block. */
lldd_status push_dst_shape_checks(const char *fn, int b2b, const cache_wire *lw, const cache_wire *rw,
                                  const uint64_t *dblk, size_t ndblk);

/* ---- engine_ext_xfer.c: the peer's side of extension transfers (engine_serve.c) ---- */
/* A source to resolve on the engine that holds it: by key, live (server-assisted, v1)
 * or against a table copy (direct). */
typedef struct resolve_req {
    uint32_t key_kind;               /* LLDD_KEY_* */
    uint32_t batch_index;
    uint64_t req_id, prefix_id, model_id;
    int64_t cache_id;
    uint32_t direct;                 /* resolve against the table copy: the marks below */
    uint32_t v1;                     /* v1: a busy link of the holder gives LINK_BUSY */
    uint32_t push;                   /* a push destination: its batch is the pusher's check */
    uint32_t reserved;
    int64_t id_mark;                 /* 0: take the copy now */
    uint64_t bind_mark;
    uint64_t requester;              /* the asking engine's cluster id */
} resolve_req;

typedef struct resolve_reply {
    cache_wire w;
    uint64_t slot;                   /* the source batch */
    uint32_t through_key;            /* resolved through a request or prefix key */
    uint32_t key_ns;
    uint64_t key_id, key_model;
    int64_t id_mark;
    uint64_t bind_mark;
    uint32_t dev_pool;               /* the holder has a device pool (§1.3 placement pairs) */
    uint32_t reserved;
} resolve_reply;

/* A key release after a successful pull (§9.5): the key, and the source tensors read
 * (all: the pull had no source range). */
typedef struct release_req {
    int64_t cache_id;
    uint64_t slot;
    uint32_t key_ns;
    uint32_t all;
    uint64_t key_id, key_model;
    uint64_t count;                  /* then count uint64 tensor indexes */
} release_req;

/* mu held. On success *out is the cache (not pinned yet) and r is filled; otherwise a
 * status with the reason in why. `link` is the holder's link to the requester. */
lldd_status ext_resolve_locked(engine *e, mlink *link, const resolve_req *q, mcache **out, resolve_reply *r,
                               char *why, size_t why_len);
/* mu held. Applies a release; returns a cache to destroy (freed by the release) or NULL. */
mcache *ext_release_locked(engine *e, const release_req *q, const uint64_t *tensors);
/* mu held. The live remote-accessible cache tensor holding [addr, addr + len) (PR-40). */
mcache *ext_find_addr_locked(engine *e, uint64_t addr, uint64_t len, uint32_t *tensor);

/* ---- engine_ext_cache.c: keys ---- */
keynode *key_find_locked(engine *e, uint32_t ns, uint64_t id, uint64_t model);
/* Unbinds one key (mu held). */
void key_unbind_locked(engine *e, keynode *k);
void keys_teardown(engine *e);

/* ---- engine_ext_comm.c: rank-table communicators ---- */
/* Stops every communicator of a finalizing engine (before its links go). */
void comms_teardown(engine *e);
size_t comm_count(engine *e);

/* ---- engine_link.c: a link for a rank-table communicator ---- */
/* Links to the member listening at 127.0.0.1:port, whose cluster id is `peer`; the
 * link on both sides carries comm_key and stays unusable (comm_pending) until the
 * communicator is OK. Returns the per-cluster status, reason in msg. */
lldd_status link_comm_member(engine *e, uint64_t peer, uint16_t port, uint64_t comm_key, int32_t timeout_ms,
                             char *msg, size_t msg_len);

#endif /* LLDD_MOCK_ENGINE_H */
