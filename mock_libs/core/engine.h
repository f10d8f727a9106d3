/* The engine record of the mock LLM-DataDist engine (one lldd_engine per
 * llm_datadist::LlmDataDist), the services every module uses: entering an API call,
 * the process-wide registry, threads, waits (engine_services.c, below every module), and
 * the engine's life (engine.c, above every module). docs/design.md draws the modules and
 * which may call which.
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
 *   g_registry (engine_services.c)the process-wide engine list
 * Two engines' mu are never held at once. A communicator's thread
 * (engine_ext_comm.c) takes only e->mu and what a link handshake takes; Finalize
 * joins it before links and caches go.
 */
#ifndef LLDD_MOCK_ENGINE_H
#define LLDD_MOCK_ENGINE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>

#include "core/cache_table.h"
#include "wire/peer_id.h"
#include "wire/transport.h"

enum { ENGINE_UNINIT = 0, ENGINE_READY = 1, ENGINE_FINALIZING = 2 };

/* Bounds on what a peer, or anyone who can reach the listener, can make an engine
 * hold or wait for (docs/security.md §3). Each is a fixed property of the mock.
 *   BOUND_HANDSHAKES     threads of handshakes no token vouches for (a HELLO waiting
 *                        for its REVERSE, a DISCONNECT), and as many again for requests
 *                        that name a token of ours; a complete first message beyond it
 *                        waits in the listener's gate (wire/engine_gate.c, which also
 *                        holds the shares of one source: wire/links.h)
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

/* Generations (docs/reference/semantics.md §1.1). The native layer and lldd_initialize are v2 in direct
 * mode; lldd_ext_initialize selects v2 (either mode) or v1. */
enum { GEN_V2 = 2, GEN_V1 = 1 };

/* A thread the engine started; joined by whoever owns the record. */
typedef struct eng_thread {
    struct eng_thread *next;
    pthread_t tid;
    int fd;                      /* the connection it serves (closed by its owner) */
    atomic_int done;
    struct lldd_engine *e;
    uint64_t source;             /* the listener's gate: the source whose handshake slot it holds
                                    (0: none; docs/security.md §3.4) */
} eng_thread;

/* One link's pace (the link model, include/lldd/mock.h). */
enum { LINK_PACE_SLOTS = 64 };
typedef struct link_pace {
    uint64_t cluster;
    uint64_t bw;                 /* bytes per second, 0 = unlimited */
    uint64_t lat_us;
} link_pace;

typedef struct mlink mlink;
typedef struct pending_link pending_link;
typedef struct pub_head pub_head;
struct comm;

/* The extension layer's rank-table communicators as the core sees them: set by the
 * extension layer when it makes an engine's first communicator (e->mu), so that
 * Finalize stops them and EXIST_LINK counts them without the core calling up. */
typedef struct comm_hooks {
    /* Stops every communicator of a finalizing engine (before its links go). */
    void (*teardown)(struct lldd_engine *e);
    size_t (*count)(struct lldd_engine *e);
} comm_hooks;

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
    int comm_res_generated;      /* a link generated the local resource (semantics.md §10.2) */
    uint32_t mode;               /* MODE_DIRECT for the native layer */
    int gen;                     /* GEN_V2 (native, ext v2) or GEN_V1 */
    int ext;                     /* initialised by lldd_ext_initialize */
    int switch_role_enabled;     /* v1: llm.EnableSwitchRole = "1" */
    int v1_unlimited;            /* v1 without a pool size: caches come straight from the device */
    int native_pool;             /* llm_datadist_ffi.mock.NativePool = "1": the PR-9 calls work (mock only) */
    uint32_t link_total_ms;      /* llm.LinkTotalTime (rank-table links) */
    int rank_linked;             /* lldd_ext_link was called (register rules, semantics.md §2.6) */
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
    uint64_t table_bytes;        /* size of the published table (semantics.md §15) */
    mpool dev_pool, host_pool;
    keytab keys;                 /* bound keys (semantics.md §9) */
    uint64_t next_bind;          /* binding sequence, from 1 */

    /* links, handshakes and connection threads (mu) */
    mlink *links;
    mlink *served;               /* served-only sides of links that belong to their clients */
    pending_link *pending;
    eng_thread *conns;           /* accepted connections not owned by a link */
    struct comm *comms;          /* rank-table communicators (engine_ext_comm.c) */
    const comm_hooks *comm_hooks; /* NULL until the first communicator */
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

/* ---- engine_services.c ---- */
/* Begins an API call: LLM_FAILED with "not initialized" unless the engine is ready
 * (PR-37), else counts the call as running. */
lldd_status engine_enter(engine *e, const char *fn);
/* The entry of an API call that takes only an engine: an injected fault, then a NULL
 * engine (PARAM_INVALID), then engine_enter. Anything but LLM_SUCCESS is the answer. */
lldd_status engine_call_enter(engine *e, const char *fn);
/* The prologue of an entry point (the api/ files), in this order: an injected fault
 * answers first; then `missing`, the first NULL argument in parameter order (NULL when
 * there is none), with PARAM_INVALID "<fn>: <missing> must not be NULL". engine_args_enter
 * then enters the engine; an entry with checks of its own between the two calls
 * engine_args_check, its checks, then engine_enter (or pool_call_enter). */
lldd_status engine_args_check(const char *fn, const char *missing);
lldd_status engine_args_enter(engine *e, const char *fn, const char *missing);
void engine_leave(engine *e);
/* The rest of an entry point once its prologue has answered `st`: anything but
 * LLM_SUCCESS is the answer as it is; else `call` runs inside the engine, the engine is
 * left, and `call`'s status is the answer. Each entry point keeps its exported name,
 * its own prologue and its call; only this tail is shared. */
#define ENGINE_RUN(e, st, call) ((st) != LLM_SUCCESS ? (st) : ((st) = (call), engine_leave(e), (st)))
/* Finds a live engine of this process by serial and holds it (NULL if gone). */
engine *registry_acquire(uint64_t serial);
void registry_release(engine *e);
int thread_start(engine *e, eng_thread *t, void *(*fn)(void *), void *arg);
void thread_join_free(eng_thread *t);
/* Joins the finished connection threads (all of them when `all`). */
void engine_reap_conns(engine *e, int all);
/* Waits on e->cv for at most ms milliseconds (mu held); ETIMEDOUT when the time ran out. */
int engine_cv_wait_ms(engine *e, int64_t ms);
/* Lists a new engine in the registry and gives it its serial (engine_create). */
void registry_add(engine *e);
/* Takes e off the registry and waits until no peer holds it (engine_destroy). */
void registry_remove(engine *e);
/* The fork lock: a listener's descriptors are made, recorded, closed and forgotten under
 * it (an engine's listen_mu first), so that a fork's child finds every one of them. */
void registry_fork_lock(void);
void registry_fork_unlock(void);
/* Engines created and not destroyed in this process (lldd_mock_live_engines). */
uint64_t engine_live_engines(void);

/* ---- engine.c ---- */
/* An accepted connection (engine listener or communicator): a connection thread
 * (conn_thread_main) in e->conns serves it; on failure the fd is closed. */
void engine_adopt_conn(engine *e, int fd);

/* The engine's life and the mock controls past their entry (api_engine.c): each runs
 * the checks after the arguments, in their order, then the work. create takes a
 * non-NULL out; initialize, finalize, destroy, the serve delay and the pace a non-NULL
 * engine; set_role, drop_connections and the path queries an entered one. */
lldd_status engine_create(uint64_t cluster_id, int32_t role, engine **out);
lldd_status engine_initialize(engine *e, const lldd_option *options, size_t num_options);
void engine_finalize(engine *e);
void engine_destroy(engine *e);
lldd_status engine_set_role(engine *e, const char *fn, int32_t role, const lldd_option *options, size_t num_options);
void engine_set_serve_delay(engine *e, uint32_t delay_ms);
lldd_status engine_set_link_pace(engine *e, const char *fn, uint64_t cluster_id, uint64_t bytes_per_second,
                                 uint64_t latency_us);
void engine_drop_connections(engine *e);
uint32_t engine_link_path(engine *e, uint64_t cluster_id);
uint32_t engine_last_transfer_path(engine *e, uint64_t cluster_id);

#endif /* LLDD_MOCK_ENGINE_H */
