/* Links between engines: the table of links (engine_link.c), the client's and the
 * listener's side of a handshake (engine_link_client.c, engine_link_listen.c), and the
 * server thread that answers a link's peer (engine_serve.c). */
#ifndef LLDD_MOCK_LINKS_H
#define LLDD_MOCK_LINKS_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "core/engine.h"

/* The caches one link's server thread holds pinned for its peer (mu). */
typedef struct pin_list {
    struct mcache **items;
    size_t count, cap;
} pin_list;

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
    int64_t served_id_mark;      /* server thread: the table copy this link's peer took (semantics.md §9.7), as
                                    recorded here when it took it; 0 = not taken */
    uint64_t served_bind_mark;
    int64_t own_next_at_link;    /* PR-32: ids at or above were registered after the link */
    int64_t peer_next_at_link;
    int64_t watermark;           /* xfer_mu: the table copy (semantics.md §9.7): peer ids below it; 0 = not taken */
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

/* ---- engine_link.c: the link table ---- */
mlink *link_find_locked(engine *e, uint64_t peer_cluster);
/* The other side of `mine` in `peer` (links or served sides; peer may be mine's own
 * engine for a link to itself), or NULL. peer->mu held. */
mlink *link_peer_side_locked(engine *peer, const mlink *mine);
void link_ref(mlink *l);
void link_unref(mlink *l);
/* Takes the link out of the table, waits for its transfers, closes it. */
void link_drop(engine *e, mlink *l);
void links_teardown(engine *e);
/* Drops, one at a time, each link pick_locked names (called with mu held; NULL: none is
 * left), holding a reference to it while it is dropped. */
void links_drop_each(engine *e, mlink *(*pick_locked)(engine *e, const void *ctx), const void *ctx);
/* Frees what links to gone peers hold: their sockets and server thread (a record stays
 * for PR-31) and served-only sides entirely; keeps at most BOUND_GONE_RECORDS records.
 * Called by the listener thread on every tick. */
void links_reap(engine *e);
/* Drops the served-only sides whose client has gone (their server thread saw EOF). */
void served_reap(engine *e);
/* Cuts the connections of every link whose server thread holds c pinned (their server
 * threads then end and unpin it). mu held. Returns how many links it cut. */
size_t links_cut_pinning_locked(engine *e, const struct mcache *c);

/* ---- engine_link.c: what both handshakes make a link record from ---- */
enum {
    LINK_MSG_LEN = 256,              /* a handshake's refusal text */
    LINK_IDENTIFY_WAIT_MS = 2000     /* the identity channel's exchange */
};
/* A new link record to peer_cluster, one reference held, not in the table. */
mlink *link_new(engine *e, uint64_t peer_cluster, uint64_t token);
/* The client's link to the listener at ip:port, or NULL. mu held. */
mlink *link_find_addr_locked(engine *e, const char *ip, uint16_t port);
/* Links that hold a live connection and a server thread, and handshakes past HELLO:
 * what BOUND_LINKS counts. mu held. */
size_t links_serving_locked(engine *e);
/* LLDD_MOCK_NO_PROCESS_VM=1: links move bytes over their sockets only. */
int process_vm_disabled(void);
/* What the link may do with the process the kernel named as its peer (same process,
 * process_vm, sockets only). Before the link is shared. */
void link_set_peer(engine *e, mlink *l, const peer_cred *cred, uint64_t serial);
/* The HELLO body this engine sends: its identity, a fresh nonce. */
void fill_hello(engine *e, hello_body *h, uint64_t expected, uint64_t token, uint32_t timeout_ms);

/* ---- engine_link_listen.c: the listener's side of the handshakes ---- */
/* Connection threads started by the listener (one per accepted connection). */
void *conn_thread_main(void *arg);
/* Wakes and ends handshakes in progress (finalize). */
void pending_abort_all(engine *e);

/* ---- engine_link_client.c: LinkLlmClusters and UnlinkLlmClusters ---- */
/* The entry of link_clusters and unlink_clusters (api_links.c): no cluster reported
 * yet, an injected fault, the NULL arguments (docs/reference/cpp-api.md §6.7 steps
 * 1-4), then engine_enter. Anything but LLM_SUCCESS is the call's answer. */
lldd_status clusters_call_enter(engine *e, const char *fn, const lldd_cluster_info *clusters, size_t num_clusters,
                                const lldd_status *rets, size_t *num_rets);
/* link_clusters and unlink_clusters past their entry: the same checks in the same
 * order, then the per-cluster work under v1's one-call-at-a-time lock. */
lldd_status clusters_call(engine *e, const char *fn, const lldd_cluster_info *clusters, size_t num_clusters,
                          int32_t timeout_in_millis, int unlink, int force, lldd_status *rets, size_t *num_rets);

/* ---- engine_serve.c: a link's server thread ---- */
/* The server loop of a link: answers the peer's requests on l->srv_fd. */
void link_serve(mlink *l);
/* The table copy of semantics.md §9.7 for l's peer: taken at the peer's first transfer (or when it
 * takes our published table), kept in the link. e->mu held. */
void link_take_marks_locked(engine *e, mlink *l);
void *link_server_main(void *arg);

/* ---- engine_link_client.c: a link for a rank-table communicator ---- */
/* Links to the member listening at 127.0.0.1:port, whose cluster id is `peer`; the
 * link on both sides carries comm_key and stays unusable (comm_pending) until the
 * communicator is OK. Returns the per-cluster status, reason in msg. */
lldd_status link_comm_member(engine *e, uint64_t peer, uint16_t port, uint64_t comm_key, int32_t timeout_ms,
                             char *msg, size_t msg_len);

#endif /* LLDD_MOCK_LINKS_H */
