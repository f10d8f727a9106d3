/* The table of an engine's links (links.h): finding, holding and dropping a link, reaping
 * the links whose peer has gone, cutting the links that pin a cache, and the pieces both
 * handshakes make a link record from. LinkLlmClusters and UnlinkLlmClusters
 * (docs/reference/cpp-api.md §6.7, §6.8; docs/reference/semantics.md §10) are made of
 * the client's side of a handshake (engine_link_client.c), the listener's side
 * (engine_link_listen.c) and the server thread of a made link (engine_serve.c); this file
 * is below all three (docs/design.md, "Links of the mock").
 *
 * A link is made by the client alone, over two TCP connections to the server's
 * listener:
 *   1. c1: HELLO {mode, client id, expected server id, pid, serial, id counter,
 *      token, probe address}. The server checks the id (PR-28) and the transfer
 *      mode (docs/reference/semantics.md §1.4), answers with its own HELLO, and parks c1
 *      as a pending link.
 *   2. c2: REVERSE {token}. The server drops any stale link it still holds to the
 *      client (the client had force-unlinked or finalized, docs/reference/semantics.md
 *      §10.4), installs the link with c1 as the connection it serves and c2 as the one it
 *      asks on, and answers. Only then does the client install its side, serving on c2
 *      and asking on c1. Both sides have the link before LinkLlmClusters returns.
 * Each side runs one server thread per link (engine_serve.c) that answers the
 * peer's requests; EOF on that connection means the peer's side is gone (PR-31).
 * The listener thread then reaps the link (links_reap): it joins the thread and
 * closes both sockets, keeping a record that answers as PR-31 says. What peers can
 * make an engine hold is capped (engine.h, BOUND_*).
 *
 * A non-forced unlink opens a fresh connection and sends DISCONNECT; the peer drops
 * its side and answers. Dropping a side takes the link's transfer lock (waits for
 * transfers in flight), shuts both sockets down, joins the server thread.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/cache_table.h"
#include "core/engine.h"
#include "wire/links.h"
#include "base/mock_internal.h"
#include "wire/peer_id.h"
#include "wire/pub.h"
#include "wire/shared_map.h"
#include "wire/transport.h"

/* ---------------------------------------------------------------------------------------------
 * link records
 * ------------------------------------------------------------------------------------------ */

mlink *link_find_locked(engine *e, uint64_t peer_cluster)
{
    for (mlink *l = e->links; l != NULL; l = l->next)
        if (l->peer_cluster == peer_cluster && !l->orphan)
            return l;
    return NULL;
}

mlink *link_peer_side_locked(engine *peer, const mlink *mine)
{
    for (int list = 0; list < 2; list++)
        for (mlink *l = list == 0 ? peer->links : peer->served; l != NULL; l = l->next)
            if (l != mine && l->token == mine->token)
                return l;
    return NULL;
}

/* HIXL keys its connections by the remote address: a link (or one being made) of
 * this engine to ip:port, orphans included. e->mu held. */
mlink *link_find_addr_locked(engine *e, const char *ip, uint16_t port)
{
    for (mlink *l = e->links; l != NULL; l = l->next)
        if (!l->removed && l->peer_port == port && strcmp(l->peer_ip, ip) == 0)
            return l;
    return NULL;
}

void link_ref(mlink *l)
{
    atomic_fetch_add(&l->refs, 1);
}

void link_unref(mlink *l)
{
    if (atomic_fetch_sub(&l->refs, 1) != 1)
        return;
    tp_close(&l->req_fd);
    tp_close(&l->srv_fd);
    tp_close(&l->peer_pidfd);
    link_unmap_all(l);
    pub_drop(l, 1);
    pthread_rwlock_destroy(&l->xfer_mu);
    pthread_mutex_destroy(&l->sock_mu);
    pthread_rwlock_destroy(&l->map_rw);
    free(l);
}

mlink *link_new(engine *e, uint64_t peer_cluster, uint64_t token)
{
    mlink *l = calloc(1, sizeof *l);
    if (l == NULL)
        return NULL;
    l->e = e;
    atomic_init(&l->refs, 1);
    l->peer_cluster = peer_cluster;
    l->token = token;
    l->req_fd = -1;
    l->srv_fd = -1;
    l->peer_pidfd = -1;
    /* writers first: a stream of parallel transfers must not keep an unlink waiting */
    pthread_rwlockattr_t attr;
    pthread_rwlockattr_init(&attr);
    pthread_rwlockattr_setkind_np(&attr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    pthread_rwlock_init(&l->xfer_mu, &attr);
    pthread_rwlockattr_destroy(&attr);
    pthread_mutex_init(&l->sock_mu, NULL);
    pthread_rwlock_init(&l->map_rw, NULL);
    return l;
}

static void table_unlink_locked(engine *e, mlink *l)
{
    for (mlink **pp = l->served_only ? &e->served : &e->links; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == l) {
            *pp = l->next;
            return;
        }
    }
}

void link_drop(engine *e, mlink *l)
{
    pthread_mutex_lock(&e->mu);
    if (l->removed) {
        pthread_mutex_unlock(&e->mu);
        return;
    }
    l->removed = 1;
    table_unlink_locked(e, l);
    pthread_mutex_unlock(&e->mu);
    /* transfers in flight hold xfer_mu; later ones see `removed` */
    pthread_rwlock_wrlock(&l->xfer_mu);
    link_unmap_all(l);
    pub_drop(l, 0);
    pthread_rwlock_unlock(&l->xfer_mu);
    atomic_store(&l->stopping, 1);
    tp_shutdown(l->req_fd);
    tp_shutdown(l->srv_fd);
    thread_join_free(l->server);
    l->server = NULL;
    link_unref(l);
}

void links_drop_each(engine *e, mlink *(*pick_locked)(engine *e, const void *ctx), const void *ctx)
{
    for (;;) {
        pthread_mutex_lock(&e->mu);
        mlink *l = pick_locked(e, ctx);
        if (l != NULL)
            link_ref(l);
        pthread_mutex_unlock(&e->mu);
        if (l == NULL)
            return;
        link_drop(e, l);
        link_unref(l);
    }
}

static mlink *any_link_locked(engine *e, const void *ctx)
{
    (void)ctx;
    return e->links != NULL ? e->links : e->served;
}

void links_teardown(engine *e)
{
    links_drop_each(e, any_link_locked, NULL);
}

static mlink *gone_served_locked(engine *e, const void *ctx)
{
    (void)ctx;
    mlink *l = e->served;
    while (l != NULL && !atomic_load(&l->peer_gone))
        l = l->next;
    return l;
}

/* Drops the served-only sides whose client has gone (their server thread saw EOF). */
void served_reap(engine *e)
{
    links_drop_each(e, gone_served_locked, NULL);
}

/* Reaps one link whose server thread saw its peer go: joins the thread, closes both
 * sockets and keeps the record, so that transfers over it still report the peer's
 * absence (PR-31) until a relink replaces it, an unlink or finalize drops it. A
 * transfer holding the link is not waited for: the next reap takes it. */
static int link_reap_one(engine *e, mlink *l)
{
    if (pthread_rwlock_trywrlock(&l->xfer_mu) != 0)
        return 0;
    eng_thread *t = NULL;
    pthread_mutex_lock(&e->mu);
    int take = l->ready && !l->removed && !l->reaped && atomic_load(&l->peer_gone);
    if (take) {
        t = l->server;
        l->server = NULL;
        l->reaped = 1;
    }
    pthread_mutex_unlock(&e->mu);
    if (take) {
        /* the thread may still shut its socket down and unpin: sockets close after it */
        thread_join_free(t);
        pthread_mutex_lock(&e->mu);
        tp_close(&l->req_fd);
        tp_close(&l->srv_fd);
        atomic_store(&l->vm_ok, 0);
        tp_close(&l->peer_pidfd);
        pthread_mutex_unlock(&e->mu);
        link_unmap_all(l);
        pub_drop(l, 0);
    }
    pthread_rwlock_unlock(&l->xfer_mu);
    return 1;
}

/* The oldest record of a gone link while there are more than BOUND_GONE_RECORDS (the
 * table is newest first), else NULL. mu held. */
static mlink *surplus_gone_record_locked(engine *e, const void *ctx)
{
    (void)ctx;
    mlink *oldest = NULL;
    size_t records = 0;
    for (mlink *l = e->links; l != NULL; l = l->next) {
        if (l->reaped && !l->removed) {
            records++;
            oldest = l;
        }
    }
    return records > BOUND_GONE_RECORDS ? oldest : NULL;
}

enum { REAP_BATCH = 16 };

void links_reap(engine *e)
{
    served_reap(e);
    /* batches of links, until none is left or one was busy (the next tick takes it) */
    for (int more = 1; more;) {
        mlink *batch[REAP_BATCH];
        size_t n = 0;
        pthread_mutex_lock(&e->mu);
        for (mlink *l = e->links; l != NULL && n < REAP_BATCH; l = l->next) {
            if (l->ready && !l->removed && !l->reaped && atomic_load(&l->peer_gone)) {
                link_ref(l);
                batch[n++] = l;
            }
        }
        pthread_mutex_unlock(&e->mu);
        more = n == REAP_BATCH;
        for (size_t i = 0; i < n; i++) {
            more &= link_reap_one(e, batch[i]);
            link_unref(batch[i]);
        }
    }
    links_drop_each(e, surplus_gone_record_locked, NULL);   /* the oldest records past the bound */
}

size_t links_cut_pinning_locked(engine *e, const mcache *c)
{
    size_t cut = 0;
    for (int list = 0; list < 2; list++) {
        for (mlink *l = list == 0 ? e->links : e->served; l != NULL; l = l->next) {
            int holds = 0;
            for (size_t i = 0; i < l->pins.count && !holds; i++)
                holds = l->pins.items[i] == c;
            /* a pin through the published table: its counters stop counting */
            if (!holds && (c->pub_state == PUB_LISTED || c->pub_state == PUB_LEFT) && l->pub_pins != NULL &&
                !l->pub_ignored &&
                atomic_load(&l->pub_pins[c->pub_slot]) != 0) {
                holds = 1;
                l->pub_ignored = 1;
            }
            if (!holds)
                continue;
            atomic_store(&l->cut, 1);
            atomic_store(&l->stopping, 1);   /* also ends a serve delay the thread sleeps in */
            tp_shutdown(l->srv_fd);
            tp_shutdown(l->req_fd);
            cut++;
        }
    }
    return cut;
}

/* Links that hold a live connection and a server thread, and handshakes past HELLO:
 * what BOUND_LINKS counts. mu held. */
size_t links_serving_locked(engine *e)
{
    size_t n = 0;
    for (int list = 0; list < 2; list++)
        for (mlink *l = list == 0 ? e->links : e->served; l != NULL; l = l->next)
            n += !l->reaped && !l->removed && !atomic_load(&l->peer_gone);
    for (pending_link *p = e->pending; p != NULL; p = p->next)
        n += p->state == 0;
    return n;
}

/* LLDD_MOCK_NO_PROCESS_VM=1: links move bytes over their sockets only. */
int process_vm_disabled(void)
{
    const char *off = getenv("LLDD_MOCK_NO_PROCESS_VM");
    return off != NULL && off[0] != '\0' && strcmp(off, "0") != 0;
}

/* What a link may do with the process the kernel named as its peer (peer_id.h): the
 * same-process path for this very process, process_vm for another process of the
 * same user (or any user with llm_datadist_ffi.mock.ProcessVmAnyUser), held by a
 * pidfd; sockets only for a peer nobody vouched for. Before the link is shared. */
void link_set_peer(engine *e, mlink *l, const peer_cred *cred, uint64_t serial)
{
    l->peer_serial = serial;
    l->same_process = cred->known && cred->pid == getpid();
    l->peer_pid = cred->known ? cred->pid : 0;
    int vm = cred->known && !l->same_process && (e->vm_any_user || cred->uid == geteuid());
    l->addr_ok = vm;
    if (process_vm_disabled())
        vm = 0;
    if (vm) {
        l->peer_pidfd = pidfd_hold(cred->pid);
        /* the pidfd names the process SO_PEERCRED named, unless that one has exited
         * meanwhile and its pid was reused: then the peer is gone anyway, and the
         * link's connections say so at the first transfer */
        vm = l->peer_pidfd >= 0;
    }
    atomic_store(&l->vm_ok, vm);
}

void fill_hello(engine *e, hello_body *h, uint64_t expected, uint64_t token, uint32_t timeout_ms)
{
    memset(h, 0, sizeof *h);
    h->mode = e->mode;
    h->timeout_ms = timeout_ms;
    h->cluster_id = e->cluster_id;
    h->expected_cluster_id = expected;
    h->serial = e->serial;
    pthread_mutex_lock(&e->mu);
    h->next_cache_id = e->next_id;
    pthread_mutex_unlock(&e->mu);
    h->token = token;
    h->hixl = (uint32_t)e->hixl;
    h->strict_ids = (uint32_t)mock_strict();
    if (rand_bytes(h->nonce, sizeof h->nonce) != 0)
        abort();
}
