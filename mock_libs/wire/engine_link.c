/* Links between engines: LinkLlmClusters, UnlinkLlmClusters and the listener side
 * of their handshakes (docs/reference/cpp-api.md §6.7, §6.8; docs/reference/semantics.md §10).
 *
 * A link is made by the client alone, over two TCP connections to the server's
 * listener:
 *   1. c1: HELLO {mode, client id, expected server id, pid, serial, id counter,
 *      token, probe address}. The server checks the id (PR-28) and the transfer
 *      mode (§1.4), answers with its own HELLO, and parks c1 as a pending link.
 *   2. c2: REVERSE {token}. The server drops any stale link it still holds to the
 *      client (the client had force-unlinked or finalized, §10.4), installs the
 *      link with c1 as the connection it serves and c2 as the one it asks on, and
 *      answers. Only then does the client install its side, serving on c2 and
 *      asking on c1. Both sides have the link before LinkLlmClusters returns.
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
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "core/cache_table.h"
#include "core/engine.h"
#include "base/json.h"
#include "wire/links.h"
#include "base/mock_internal.h"
#include "wire/peer_id.h"
#include "wire/pub.h"
#include "wire/sha256.h"
#include "wire/shared_map.h"
#include "wire/transport.h"

enum {
    LINK_WORKERS = 16,
    FIRST_MESSAGE_WAIT_MS = BOUND_FIRST_MSG_MS,
    MSG_LEN = 256,
    REVERSE_POLL_MS = 100,
    STALE_LINK_WAIT_MS = 1000,   /* how long a relink waits to see the old link's connection closed */
    IDENTIFY_WAIT_MS = 2000      /* the identity channel's exchange */
};

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
static mlink *link_find_addr_locked(engine *e, const char *ip, uint16_t port)
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

static mlink *link_new(engine *e, uint64_t peer_cluster, uint64_t token)
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

void links_teardown(engine *e)
{
    for (;;) {
        pthread_mutex_lock(&e->mu);
        mlink *l = e->links != NULL ? e->links : e->served;
        if (l != NULL)
            link_ref(l);
        pthread_mutex_unlock(&e->mu);
        if (l == NULL)
            return;
        link_drop(e, l);
        link_unref(l);
    }
}

/* Drops the served-only sides whose client has gone (their server thread saw EOF). */
static void served_reap(engine *e)
{
    for (;;) {
        pthread_mutex_lock(&e->mu);
        mlink *l = e->served;
        while (l != NULL && !atomic_load(&l->peer_gone))
            l = l->next;
        if (l != NULL)
            link_ref(l);
        pthread_mutex_unlock(&e->mu);
        if (l == NULL)
            return;
        link_drop(e, l);
        link_unref(l);
    }
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

/* Drops the oldest records of gone links past BOUND_GONE_RECORDS (the table is
 * newest first). */
static void gone_records_trim(engine *e)
{
    for (;;) {
        mlink *oldest = NULL;
        size_t records = 0;
        pthread_mutex_lock(&e->mu);
        for (mlink *l = e->links; l != NULL; l = l->next) {
            if (l->reaped && !l->removed) {
                records++;
                oldest = l;
            }
        }
        if (records <= BOUND_GONE_RECORDS)
            oldest = NULL;
        if (oldest != NULL)
            link_ref(oldest);
        pthread_mutex_unlock(&e->mu);
        if (oldest == NULL)
            return;
        link_drop(e, oldest);
        link_unref(oldest);
    }
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
    gone_records_trim(e);
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
static size_t links_serving_locked(engine *e)
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
static int process_vm_disabled(void)
{
    const char *off = getenv("LLDD_MOCK_NO_PROCESS_VM");
    return off != NULL && off[0] != '\0' && strcmp(off, "0") != 0;
}

/* What a link may do with the process the kernel named as its peer (peer_id.h): the
 * same-process path for this very process, process_vm for another process of the
 * same user (or any user with llm_datadist_ffi.mock.ProcessVmAnyUser), held by a
 * pidfd; sockets only for a peer nobody vouched for. Before the link is shared. */
static void link_set_peer(engine *e, mlink *l, const peer_cred *cred, uint64_t serial)
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

static uint64_t new_token(void)
{
    uint64_t r = 0;
    while (r == 0)
        if (rand_bytes(&r, sizeof r) != 0)
            abort(); /* no randomness from the kernel: nothing here could be safe */
    return r;
}

static void fill_hello(engine *e, hello_body *h, uint64_t expected, uint64_t token, uint32_t timeout_ms)
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

/* The listener's side of this handshake is served only, not a link of its own: HIXL
 * keeps no link on the listener (a client's link is one-way), and a link to oneself
 * is the client's link (one per cluster id). `cred` NULL: before the identity check,
 * when only the claim is known. */
static int serve_only_side(const engine *e, const hello_body *peer, const peer_cred *cred)
{
    if (e->hixl)
        return 1;
    int self = peer->instance != 0 && peer->instance == e->instance;
    return cred == NULL ? self : self && cred->known && cred->pid == getpid();
}

/* A refusal carries the status and a text only: no hello body, so nothing about
 * this engine (its cluster id included) reaches a peer it refused. */
static void reply_status(int fd, uint16_t type, lldd_status status, const hello_body *hello, const char *text,
                         uint64_t a)
{
    msg_hdr h;
    msg_init(&h, type);
    h.status = status;
    h.a = status == LLM_SUCCESS ? a : 0;
    struct {
        hello_body hello;
        reply_text text;
    } body;
    memset(&body, 0, sizeof body);
    if (hello != NULL && status == LLM_SUCCESS)
        body.hello = *hello;
    snprintf(body.text.text, sizeof body.text.text, "%s", text ? text : "");
    if (type == MSG_HELLO_REPLY) {
        h.payload_len = sizeof body;
        msg_send(fd, &h, &body, sizeof body, tp_deadline(1000));
    } else {
        h.payload_len = sizeof body.text;
        msg_send(fd, &h, &body.text, sizeof body.text, tp_deadline(1000));
    }
}

/* ---------------------------------------------------------------------------------------------
 * server side: connection threads
 * ------------------------------------------------------------------------------------------ */

static void serve_delay(engine *e)
{
    uint32_t d = atomic_load(&e->serve_delay_ms);
    if (d > 0)
        tp_sleep_ms(d, &e->stopping);
}

/* 1 once l's peer side is gone (its connection closed), waiting up to ms for the close
 * to arrive; the caller holds a reference to l. */
static int link_gone_within(engine *e, mlink *l, int64_t ms)
{
    for (int64_t until = tp_deadline(ms);;) {
        if (atomic_load(&l->peer_gone) || tp_peer_closed(l->srv_fd))
            return 1;
        if (tp_now_ms() >= until || atomic_load(&e->stopping))
            return 0;
        tp_sleep_ms(10, &e->stopping);
    }
}

/* Whether a HELLO proves the listener's secret: the client proves it over its own nonce
 * and the token (a replayed HELLO gets no further than REVERSE, which needs a proof over
 * our fresh nonce). */
static int hello_proven(engine *e, const hello_body *peer)
{
    if (e->secret_len == 0)
        return 1;
    uint8_t proof[PROOF_LEN];
    secret_proof(e->secret, e->secret_len, "lldd-hello", peer->nonce, peer->nonce, peer->token, proof);
    return peer->auth == 1 && bytes_equal_ct(proof, peer->proof, sizeof proof);
}

/* The listener's checks of a HELLO, in order; e->mu held. existing is our link to the
 * client, if any. A HELLO that only checks identity passes once the identity is right. */
static lldd_status hello_refusal_locked(engine *e, const msg_hdr *h, const hello_body *peer, const mlink *existing,
                                        int proven, char *text)
{
    if (e->state != ENGINE_READY) {
        snprintf(text, MSG_LEN, "the listener is finalizing");
        return LLM_LINK_FAILED;
    }
    if (!proven) {
        snprintf(text, MSG_LEN, "the handshake did not prove the listener's shared secret "
                 "(llm_datadist_ffi.mock.LinkSecret or LLM_DATADIST_FFI_LINK_SECRET)");
        return LLM_LINK_FAILED;
    }
    if (peer->strict_ids && peer->expected_cluster_id != e->cluster_id) {
        /* strict mode only: otherwise the client links and warns (PR-28). The text
         * does not name our cluster id: a refused peer learns nothing about us. */
        snprintf(text, MSG_LEN, "remote cluster id mismatch: the listener at this address is not cluster %llu "
                 "(PR-28)", (unsigned long long)peer->expected_cluster_id);
        return LLM_PARAM_INVALID;
    }
    if (peer->hixl != (uint32_t)e->hixl) {
        snprintf(text, MSG_LEN, "transfer backends differ: cluster %llu uses %s, the client %s",
                 (unsigned long long)e->cluster_id, e->hixl ? "hixl" : "the default backend",
                 peer->hixl ? "hixl" : "the default backend");
        return LLM_LINK_FAILED;
    }
    if (h->a == HELLO_CHECK_ONLY)
        return LLM_SUCCESS; /* the client holds a link already: identity checked, nothing changes here */
    if (peer->mode != e->mode) {
        snprintf(text, MSG_LEN, "transfer modes differ: cluster %llu is in %s mode, the client in %s mode "
                 "(docs/reference/semantics.md §1.4)", (unsigned long long)e->cluster_id,
                 e->mode == MODE_DIRECT ? "direct" : "server-assisted",
                 peer->mode == MODE_DIRECT ? "direct" : "server-assisted");
        return LLM_PARAM_INVALID;
    }
    if (existing != NULL && !existing->ready) {
        snprintf(text, MSG_LEN, "cluster %llu is itself linking to cluster %llu right now",
                 (unsigned long long)e->cluster_id, (unsigned long long)peer->cluster_id);
        return LLM_ALREADY_LINK;
    }
    return LLM_SUCCESS;
}

/* The handshake this HELLO starts, waiting for its REVERSE; e->mu held. NULL when out
 * of host memory. */
static pending_link *hello_pending_add_locked(engine *e, eng_thread *self, int fd, const msg_hdr *h,
                                              const hello_body *peer, const hello_body *mine)
{
    pending_link *p = calloc(1, sizeof *p);
    if (p == NULL)
        return NULL;
    p->peer = *peer;
    memcpy(p->nonce, mine->nonce, sizeof p->nonce);
    p->comm_key = h->b;
    p->c1_fd = fd;
    p->c1_thread = self;
    p->next = e->pending;
    e->pending = p;
    return p;
}

/* Waits for p's REVERSE: a little longer than the client will, but the client's
 * timeout is only its word: never longer than BOUND_REVERSE_MS, and not after the
 * client closed c1. Takes p out of the list and frees it; the link it made, if any. */
static mlink *hello_await_reverse(engine *e, pending_link *p, int fd)
{
    uint32_t wait_ms = p->peer.timeout_ms < BOUND_REVERSE_MS ? p->peer.timeout_ms : BOUND_REVERSE_MS;
    int64_t deadline = tp_deadline((int64_t)wait_ms + BOUND_REVERSE_SLACK_MS);
    mlink *l = NULL;
    pthread_mutex_lock(&e->mu);
    while (p->state == 0 && e->state == ENGINE_READY) {
        int64_t left = deadline - tp_now_ms();
        if (left <= 0)
            break;
        engine_cv_wait_ms(e, left < REVERSE_POLL_MS ? left : REVERSE_POLL_MS);
        if (p->state == 0 && tp_peer_closed(fd)) /* a poll that does not block */
            break;
    }
    if (p->state == 1)
        l = p->link;
    else
        p->state = 2;
    for (pending_link **pp = &e->pending; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == p) {
            *pp = p->next;
            break;
        }
    }
    pthread_mutex_unlock(&e->mu);
    free(p);
    return l;
}

/* HELLO on c1. On success the thread waits for REVERSE, then serves the link. */
static void on_hello(engine *e, eng_thread *self, int fd, const msg_hdr *h)
{
    hello_body peer;
    char text[MSG_LEN];
    if (h->payload_len != sizeof peer || (h->a != HELLO_LINK && h->a != HELLO_CHECK_ONLY) ||
        tp_recv_all(fd, &peer, sizeof peer, tp_deadline(FIRST_MESSAGE_WAIT_MS)) != TP_OK)
        return;
    serve_delay(e);
    hello_body mine;
    fill_hello(e, &mine, peer.cluster_id, peer.token, 0);
    text[0] = '\0';
    pending_link *p = NULL;
    int serve_only = serve_only_side(e, &peer, NULL);
    int proven = hello_proven(e, &peer);
    pthread_mutex_lock(&e->mu);
    mlink *existing = serve_only ? NULL : link_find_locked(e, peer.cluster_id);
    lldd_status st = hello_refusal_locked(e, h, &peer, existing, proven, text);
    if (st == LLM_SUCCESS && h->a != HELLO_CHECK_ONLY &&
        (p = hello_pending_add_locked(e, self, fd, h, &peer, &mine)) == NULL) {
        st = LLM_LINK_FAILED;
        snprintf(text, sizeof text, "out of host memory");
    }
    if (p != NULL)
        snprintf(mine.id_channel, sizeof mine.id_channel, "%s", e->id_name);
    pthread_mutex_unlock(&e->mu);
    if (e->secret_len > 0) {
        mine.auth = 1;
        secret_proof(e->secret, e->secret_len, "lldd-server", peer.nonce, mine.nonce, peer.token, mine.proof);
    }
    reply_status(fd, MSG_HELLO_REPLY, st, &mine, text, 0);
    if (p == NULL)
        return;
    mlink *l = hello_await_reverse(e, p, fd);
    if (l != NULL)
        link_serve(l); /* this thread now belongs to the link, which joins it */
}

/* Whether p is still a waiting handshake of e with this token and client: another
 * REVERSE with the same token may have installed it meanwhile, and its HELLO thread
 * then freed it (found by the wire fuzzer). e->mu held; p is not dereferenced unless
 * it is still in the list. */
static int pending_still_there_locked(engine *e, const pending_link *p, uint64_t token, uint64_t client)
{
    for (const pending_link *q = e->pending; q != NULL; q = q->next)
        if (q == p)
            return q->state == 0 && q->peer.token == token && q->peer.cluster_id == client;
    return 0;
}

/* A REVERSE's handshake as on_reverse's steps share it. */
typedef struct {
    uint64_t token, client;
    pending_link *p; /* found under e->mu; only pending_still_there_locked says if it still is */
    hello_body peer;
    peer_cred cred;
    uint8_t our_nonce[NONCE_LEN];
    int serve_only;
    mlink *stale; /* referenced: our link to the client that this one would replace */
    char text[MSG_LEN];
} reverse_try;

/* The waiting handshake of this token and client, its proof, and the link to the
 * client it would replace. */
static lldd_status reverse_find(engine *e, const reverse_body *body, reverse_try *t)
{
    lldd_status st = LLM_SUCCESS;
    pthread_mutex_lock(&e->mu);
    pending_link *p = e->pending;
    while (p != NULL && !(p->state == 0 && p->peer.token == t->token && p->peer.cluster_id == t->client))
        p = p->next;
    t->p = p;
    int proven = 1;
    if (p != NULL && e->secret_len > 0) {
        uint8_t want[PROOF_LEN];
        secret_proof(e->secret, e->secret_len, "lldd-client", p->nonce, p->peer.nonce, t->token, want);
        proven = bytes_equal_ct(want, body->proof, sizeof want);
    }
    if (p == NULL || e->state != ENGINE_READY) {
        st = LLM_LINK_FAILED;
        snprintf(t->text, sizeof t->text, "no handshake in progress for this link (it timed out)");
    } else if (!proven) {
        st = LLM_LINK_FAILED;
        p->state = 2; /* one try per handshake */
        pthread_cond_broadcast(&e->cv);
        snprintf(t->text, sizeof t->text, "the handshake did not prove the listener's shared secret "
                 "(llm_datadist_ffi.mock.LinkSecret or LLM_DATADIST_FFI_LINK_SECRET)");
    } else {
        t->peer = p->peer;
        t->cred = p->cred;
        memcpy(t->our_nonce, p->nonce, sizeof t->our_nonce);
        t->serve_only = serve_only_side(e, &t->peer, &t->cred);
        t->stale = t->serve_only ? NULL : link_find_locked(e, t->client);
        if (t->stale != NULL && !t->stale->ready) {
            st = LLM_ALREADY_LINK;
            snprintf(t->text, sizeof t->text, "cluster %llu is itself linking to cluster %llu right now",
                     (unsigned long long)e->cluster_id, (unsigned long long)t->client);
            t->stale = NULL;
        } else if (t->stale != NULL) {
            link_ref(t->stale);
        }
    }
    pthread_mutex_unlock(&e->mu);
    return st;
}

/* The client replaces its own link (it names that link's token: PR-28 keying), or no
 * longer has it (§10.4: it force-unlinked, finalized or died, so its connections are
 * closed). A live link is never replaced by anyone else: whoever else claims its
 * cluster id is refused (GUARD E-25, docs/security.md §2.4). Drops the reference. */
static lldd_status reverse_replace_stale(engine *e, const reverse_body *body, reverse_try *t)
{
    uint8_t want[PROOF_LEN];
    token_proof(t->stale->token, "lldd-replace", t->our_nonce, want);
    int own = 0;
    for (int i = 0; i < REVERSE_REPLACES; i++)
        own |= bytes_equal_ct(want, body->replaces[i], PROOF_LEN);
    if (own || link_gone_within(e, t->stale, STALE_LINK_WAIT_MS)) {
        link_drop(e, t->stale);
        link_unref(t->stale);
        return LLM_SUCCESS;
    }
    link_unref(t->stale);
    snprintf(t->text, sizeof t->text, "cluster %llu has a live link to this listener already; a second link under "
             "that cluster id is refused until the first is unlinked or its process ends (GUARD E-25)",
             (unsigned long long)t->client);
    return LLM_ALREADY_LINK;
}

/* Installs l as the server side of the handshake, unless this engine started linking
 * to the client meanwhile or the handshake was abandoned; e->mu held. */
static lldd_status reverse_install_locked(engine *e, eng_thread *self, int fd, reverse_try *t, mlink *l)
{
    pending_link *p = t->p;
    if (!t->serve_only && link_find_locked(e, t->client) != NULL) {
        /* this engine started linking to the client meanwhile */
        snprintf(t->text, sizeof t->text, "cluster %llu is itself linking to cluster %llu right now",
                 (unsigned long long)e->cluster_id, (unsigned long long)t->client);
        return LLM_ALREADY_LINK;
    }
    if (!pending_still_there_locked(e, p, t->token, t->client) || e->state != ENGINE_READY) {
        snprintf(t->text, sizeof t->text, "the handshake was abandoned (timed out or finalized)");
        return LLM_LINK_FAILED;
    }
    l->srv_fd = p->c1_fd;
    l->req_fd = fd;
    l->own_next_at_link = e->next_id;
    l->comm_key = p->comm_key;
    atomic_store(&l->comm_pending, p->comm_key != 0);
    l->ready = 1;
    /* c1's thread becomes the link's server thread; c2 belongs to the link */
    for (eng_thread **pp = &e->conns; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == p->c1_thread) {
            *pp = p->c1_thread->next;
            break;
        }
    }
    p->c1_thread->next = NULL;
    p->c1_thread->fd = -1;
    l->server = p->c1_thread;
    self->fd = -1;
    link_ref(l); /* held by the server thread */
    mlink **table = t->serve_only ? &e->served : &e->links;
    l->next = *table;
    *table = l;
    p->link = l;
    p->state = 1;
    pthread_cond_broadcast(&e->cv);
    return LLM_SUCCESS;
}

/* REVERSE on c2: installs the server side of the link. */
static void on_reverse(engine *e, eng_thread *self, int fd, const msg_hdr *h)
{
    reverse_body body;
    if (h->payload_len != sizeof body || tp_recv_all(fd, &body, sizeof body, tp_deadline(FIRST_MESSAGE_WAIT_MS)) != TP_OK)
        return;
    serve_delay(e);
    reverse_try t;
    memset(&t, 0, sizeof t);
    t.token = h->a;
    t.client = h->b;
    served_reap(e);
    lldd_status st = reverse_find(e, &body, &t);
    if (st == LLM_SUCCESS && t.stale != NULL)
        st = reverse_replace_stale(e, &body, &t);
    if (st != LLM_SUCCESS) {
        reply_status(fd, MSG_REVERSE_REPLY, st, NULL, t.text, 0);
        return;
    }
    mlink *l = link_new(e, t.client, t.token);
    if (l == NULL) {
        reply_status(fd, MSG_REVERSE_REPLY, LLM_LINK_FAILED, NULL, "out of host memory", 0);
        return;
    }
    link_set_peer(e, l, &t.cred, t.peer.serial);
    l->peer_next_at_link = t.peer.next_cache_id;
    /* Our transfers ask on c2, where the reply below still has to go: the link is
     * usable once that reply is sent, so hold its transfer lock until then. */
    l->served_only = t.serve_only;
    pthread_rwlock_wrlock(&l->xfer_mu);
    pthread_mutex_lock(&e->mu);
    st = reverse_install_locked(e, self, fd, &t, l);
    pthread_mutex_unlock(&e->mu);
    reply_status(fd, MSG_REVERSE_REPLY, st, NULL, t.text, 0);
    pthread_rwlock_unlock(&l->xfer_mu);
    if (st != LLM_SUCCESS)
        link_unref(l);
}

/* DISCONNECT on a fresh connection: drop our side of the link to the client. The sender
 * must show it is that client: we send a fresh nonce, it answers with a proof for each
 * link token it holds (token_proof), and only a proof of the token of a live link
 * between it and us (either direction: the vendor drops the link keyed by its id)
 * counts — or the link is dead anyway (its connection closed: its peer finalized and a
 * new engine under that id asks, which the vendor honours). Anyone else is answered as
 * if it held no link, and nothing changes (E-25). The proofs show no token to us. */
static void on_disconnect(engine *e, int fd, const msg_hdr *h)
{
    char text[MSG_LEN];
    text[0] = '\0';
    if (h->payload_len != 0)
        return;
    uint8_t nonce[NONCE_LEN];
    if (rand_bytes(nonce, sizeof nonce) != 0)
        return;
    msg_hdr m;
    msg_init(&m, MSG_DISCONNECT_CHALLENGE);
    m.payload_len = sizeof nonce;
    int64_t deadline = tp_deadline(FIRST_MESSAGE_WAIT_MS);
    if (msg_send(fd, &m, nonce, sizeof nonce, deadline) != TP_OK || msg_recv_hdr(fd, &m, deadline) != TP_OK ||
        m.type != MSG_DISCONNECT_PROOF || m.count > DISCONNECT_MAX_PROOFS ||
        m.payload_len != (uint64_t)m.count * PROOF_LEN)
        return;
    uint8_t *proofs = m.count > 0 ? malloc((size_t)m.payload_len) : NULL;
    if (m.count > 0 && (proofs == NULL || tp_recv_all(fd, proofs, (size_t)m.payload_len, deadline) != TP_OK)) {
        free(proofs);
        return;
    }
    serve_delay(e);
    lldd_status st = LLM_SUCCESS;
    mlink *l = NULL;
    enum { MAX_CANDIDATES = 8 };
    uint64_t tokens[MAX_CANDIDATES];
    size_t ntok = 0;
    pthread_mutex_lock(&e->mu);
    if (e->state != ENGINE_READY) {
        st = LLM_UNLINK_FAILED;
        snprintf(text, sizeof text, "the listener is finalizing");
    } else if ((h->count & DISCONNECT_STRICT_IDS) && h->b != e->cluster_id) {
        /* strict mode only: otherwise the vendor's order, the client warns (PR-28) */
        st = LLM_PARAM_INVALID;
        snprintf(text, sizeof text, "remote cluster id mismatch: the listener at this address is not cluster %llu "
                 "(PR-28)", (unsigned long long)h->b);
    } else {
        l = link_find_locked(e, h->a);
        if (l != NULL && l->ready)
            link_ref(l);
        else
            l = NULL;
        for (int list = 0; list < 2 && l != NULL; list++)
            for (mlink *o = list == 0 ? e->links : e->served; o != NULL && ntok < MAX_CANDIDATES; o = o->next)
                if (o->ready && !o->removed && o->peer_cluster == h->a)
                    tokens[ntok++] = o->token;
    }
    pthread_mutex_unlock(&e->mu);
    int owner = 0;
    for (size_t i = 0; i < ntok && !owner; i++) {
        uint8_t want[PROOF_LEN];
        token_proof(tokens[i], "lldd-disconnect", nonce, want);
        for (uint32_t k = 0; k < m.count && !owner; k++)
            owner = bytes_equal_ct(want, proofs + (size_t)k * PROOF_LEN, PROOF_LEN);
    }
    free(proofs);
    if (l != NULL && (owner || link_gone_within(e, l, STALE_LINK_WAIT_MS)))
        link_drop(e, l);
    if (l != NULL)
        link_unref(l);
    /* a success names our cluster id (the client's PR-28 lint needs it; a HELLO tells
     * it to anyone too); a refusal names nothing */
    reply_status(fd, MSG_DISCONNECT_REPLY, st, NULL, text, e->cluster_id);
}

/* IDENTIFY on the identity channel (peer_id.h): the kernel names the connecting
 * process; a pending handshake with the claimed token whose c1 has the claimed
 * endpoints takes that process as its peer. One claim per handshake. */
static void on_identify(engine *e, int fd, const id_request *rq, const peer_cred *cr)
{
    id_request req = *rq;
    peer_cred cred = *cr;
    uint32_t status = 1;
    pthread_mutex_lock(&e->mu);
    for (pending_link *p = e->pending; p != NULL; p = p->next) {
        if (p->state == 0 && req.token != 0 && p->peer.token == req.token && !p->cred.known) {
            if (idch_endpoints_match(p->c1_fd, &req)) {
                p->cred = cred;
                status = 0;
            }
            break;
        }
    }
    pthread_mutex_unlock(&e->mu);
    idch_answer(fd, status);
}

/* The link of our table whose peer may be handed our memory (MAP and TABLE on the
 * identity channel, docs/security.md §2.7): the process the kernel identified as the
 * peer of the link whose token the request names, only if that process is of our user,
 * another process, and the link may use process_vm at all. e->mu held. */
static mlink *memory_peer_locked(engine *e, uint64_t token, const peer_cred *cred)
{
    if (!cred->known || cred->pid == getpid() || cred->uid != geteuid() || token == 0 || process_vm_disabled())
        return NULL;
    for (int list = 0; list < 2; list++)
        for (mlink *l = list == 0 ? e->links : e->served; l != NULL; l = l->next)
            if (l->token == token && l->ready && !l->removed && !l->reaped && !atomic_load(&l->peer_gone) &&
                l->addr_ok && l->peer_pid == cred->pid)
                return l;
    return NULL;
}

/* MAP: the descriptors and memfds of this process's arena chunks, to a memory peer
 * (above) that proves it can read our memory with process_vm_readv (the kernel's own
 * access check, which e.g. Yama narrows). */
/* Whether the asking process is a memory peer (above) that proves, by the challenge,
 * that it can read our memory with process_vm_readv. */
static int memory_peer_proven(engine *e, int fd, const map_request *req, const peer_cred *cred)
{
    pthread_mutex_lock(&e->mu);
    int ok = memory_peer_locked(e, req->token, cred) != NULL;
    pthread_mutex_unlock(&e->mu);
    return ok && idch_map_challenge(fd, tp_deadline(IDENTIFY_WAIT_MS));
}

static void on_map(engine *e, int fd, const map_request *req, const peer_cred *cred)
{
    int ok = memory_peer_proven(e, fd, req, cred);
    mock_arena_chunk chunks[MAP_BATCH];
    map_desc descs[MAP_BATCH];
    int fds[MAP_BATCH];
    size_t n = 0, next = 0;
    if (ok && req->from < SIZE_MAX)
        n = mock_arena_chunks((size_t)req->from, chunks, MAP_BATCH, &next);
    for (size_t i = 0; i < n; i++) {
        descs[i].base = chunks[i].base;
        descs[i].size = chunks[i].size;
        fds[i] = chunks[i].fd;
    }
    idch_answer_map(fd, ok ? 0 : 1, descs, fds, n, next);
}

/* TABLE: our published cache table and a pin page for the link (engine_pub.c), to a
 * memory peer that passes the same challenge, once per link. The table copy of §9.7 is
 * taken now, if the peer has not taken it, and answered with. */
static void on_table(engine *e, int fd, const map_request *req, const peer_cred *cred)
{
    int ok = memory_peer_proven(e, fd, req, cred);
    int fds[2] = {-1, -1};
    int64_t id_mark = 0;
    uint64_t bind_mark = 0;
    if (ok) {
        pthread_mutex_lock(&e->mu);
        mlink *l = e->state == ENGINE_READY ? memory_peer_locked(e, req->token, cred) : NULL;
        ok = l != NULL && pub_offer_locked(e, l, fds) == 0;
        if (ok) {
            link_take_marks_locked(e, l);
            id_mark = l->served_id_mark;
            bind_mark = l->served_bind_mark;
        }
        pthread_mutex_unlock(&e->mu);
    }
    idch_answer_table(fd, ok ? 0 : 1, id_mark, bind_mark, fds);
    if (ok)
        close(fds[1]); /* the pin page: the peer's copy and our mapping keep it */
}

/* The first message of an identity-channel connection: IDENTIFY or MAP. */
static void on_identity_channel(engine *e, int fd)
{
    id_request ident;
    map_request map;
    peer_cred cred;
    uint16_t type = 0;
    if (idch_read_msg(fd, tp_deadline(IDENTIFY_WAIT_MS), &cred, &type, &ident, &map) != 0)
        return;
    if (type == MSG_IDENTIFY)
        on_identify(e, fd, &ident, &cred);
    else if (type == MSG_TABLE)
        on_table(e, fd, &map, &cred);
    else
        on_map(e, fd, &map, &cred);
}

/* BOUND_LINKS: a HELLO that would make one more link than the engine serves is
 * refused with the vendor's code for a failed link; the body is read first, so that
 * the refusal is not lost to a reset. Returns 1 when it refused. */
static int links_full(engine *e, int fd, const msg_hdr *h)
{
    pthread_mutex_lock(&e->mu);
    size_t serving = links_serving_locked(e);
    pthread_mutex_unlock(&e->mu);
    if (serving < BOUND_LINKS)
        return 0;
    if (h->payload_len <= sizeof(hello_body) &&
        tp_discard(fd, h->payload_len, tp_deadline(FIRST_MESSAGE_WAIT_MS)) == TP_OK) {
        char text[MSG_LEN];
        snprintf(text, sizeof text, "cluster %llu serves %u links, the most it takes (docs/security.md §3); "
                 "unlink a cluster first", (unsigned long long)e->cluster_id, (unsigned)BOUND_LINKS);
        reply_status(fd, MSG_HELLO_REPLY, LLM_LINK_FAILED, NULL, text, 0);
    }
    return 1;
}

void *conn_thread_main(void *arg)
{
    eng_thread *self = arg;
    engine *e = self->e;
    int fd = self->fd;
    msg_hdr h;
    if (idch_is_unix(fd)) {
        on_identity_channel(e, fd);
    } else if (msg_recv_hdr(fd, &h, tp_deadline(FIRST_MESSAGE_WAIT_MS)) == TP_OK) {
        switch (h.type) {
        case MSG_HELLO:
            if (h.a == HELLO_LINK && links_full(e, fd, &h))
                break;
            on_hello(e, self, fd, &h);
            break;
        case MSG_REVERSE:
            on_reverse(e, self, fd, &h);
            break;
        case MSG_DISCONNECT:
            on_disconnect(e, fd, &h);
            break;
        default:
            break;
        }
    }
    atomic_store(&self->done, 1);
    return NULL;
}

void pending_abort_all(engine *e)
{
    pthread_mutex_lock(&e->mu);
    for (pending_link *p = e->pending; p != NULL; p = p->next)
        if (p->state == 0)
            p->state = 2;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
}

/* ---------------------------------------------------------------------------------------------
 * client side
 * ------------------------------------------------------------------------------------------ */

typedef struct cluster_job {
    engine *e;
    const lldd_cluster_info *ci;
    int32_t timeout_ms;
    int force;
    int v1;                      /* the v1 link rules (docs/reference/semantics.md §10.5) */
    uint64_t comm_key;           /* a rank-table communicator's link */
    lldd_status status;
    char msg[MSG_LEN];
    char lint[MSG_LEN];          /* PR-28, reported by the calling thread (the lint record is per thread) */
} cluster_job;

static lldd_status connect_status(int r, int err, int unlink, char *msg, const char *ip, uint16_t port)
{
    if (r == TP_TIMEOUT) {
        snprintf(msg, MSG_LEN, "connecting to %s:%u did not complete in time", ip, (unsigned)port);
        return LLM_TIMEOUT;
    }
    snprintf(msg, MSG_LEN, "cannot connect to %s:%u: %s", ip, (unsigned)port,
             r == TP_REFUSED ? "connection refused (nobody listens there)" : strerror(err));
    return unlink ? LLM_UNLINK_FAILED : LLM_LINK_FAILED;
}

/* Receives a reply of `type` with a reply_text (and a hello_body first if hello). */
static lldd_status recv_reply(int fd, uint16_t type, int64_t deadline, hello_body *hello, char *msg, int unlink,
                              const char *what, uint64_t *hdr_a)
{
    msg_hdr h;
    int r = msg_recv_hdr(fd, &h, deadline);
    struct {
        hello_body hello;
        reply_text text;
    } body;
    size_t want = hello != NULL ? sizeof body : sizeof body.text;
    if (r == TP_OK && (h.type != type || h.payload_len != want))
        r = TP_CLOSED;
    if (r == TP_OK)
        r = tp_recv_all(fd, hello != NULL ? (void *)&body : (void *)&body.text, want, deadline);
    if (r == TP_TIMEOUT) {
        snprintf(msg, MSG_LEN, "the peer did not answer the %s in time", what);
        return LLM_TIMEOUT;
    }
    if (r != TP_OK) {
        snprintf(msg, MSG_LEN, "the peer closed the connection during the %s", what);
        return unlink ? LLM_UNLINK_FAILED : LLM_LINK_FAILED;
    }
    tp_sanitize_text(body.text.text, sizeof body.text.text);
    if (hello != NULL)
        *hello = body.hello;
    if (hdr_a != NULL)
        *hdr_a = h.a;
    if (h.status != LLM_SUCCESS) {
        snprintf(msg, MSG_LEN, "the peer refused the %s: %.200s", what, body.text.text);
        /* the peer's code is ours only if a listener of ours could have sent it */
        static const uint32_t allowed[] = {LLM_LINK_FAILED, LLM_UNLINK_FAILED, LLM_PARAM_INVALID, LLM_ALREADY_LINK,
                                           LLM_TIMEOUT};
        for (size_t i = 0; i < sizeof allowed / sizeof allowed[0]; i++)
            if (h.status == allowed[i])
                return (lldd_status)h.status;
        return unlink ? LLM_UNLINK_FAILED : LLM_LINK_FAILED;
    }
    return LLM_SUCCESS;
}

/* The local communication resource rule of §10.2 and llm.LocalCommRes. */
static lldd_status check_comm_res(engine *e, const lldd_cluster_info *ci, char *msg)
{
    pthread_mutex_lock(&e->mu);
    char *res = e->local_comm_res ? strdup(e->local_comm_res) : NULL;
    int have = e->local_comm_res != NULL || e->comm_res_generated;
    int absent = e->local_comm_res == NULL;
    pthread_mutex_unlock(&e->mu);
    pthread_mutex_lock(&e->listen_mu);
    have = have || e->listening;
    pthread_mutex_unlock(&e->listen_mu);
    if (!have && ci->num_local_ip_infos != 1) {
        snprintf(msg, MSG_LEN, "local_ip_infos has %zu entries; without llm.LocalCommRes or a listen address "
                 "exactly one is needed", ci->num_local_ip_infos);
        free(res);
        return LLM_PARAM_INVALID;
    }
    if (absent && !have) {
        pthread_mutex_lock(&e->mu);
        e->comm_res_generated = 1;
        pthread_mutex_unlock(&e->mu);
    }
    if (res == NULL)
        return LLM_SUCCESS;
    json_value doc;
    char why[96];
    lldd_status st = LLM_SUCCESS;
    if (json_parse(res, strlen(res), &doc, why, sizeof why) != 0) {
        snprintf(msg, MSG_LEN, "option llm.LocalCommRes is not valid JSON (%s)", why);
        st = LLM_PARAM_INVALID;
    } else {
        const json_value *v = json_member(&doc, "version");
        if (doc.type != JSON_OBJECT || v == NULL || v->type != JSON_STRING ||
            (strcmp(v->str, "1.0") != 0 && strcmp(v->str, "1.2") != 0 && strcmp(v->str, "1.3") != 0)) {
            snprintf(msg, MSG_LEN, "option llm.LocalCommRes must be a JSON object with \"version\" \"1.0\", "
                     "\"1.2\" or \"1.3\"");
            st = LLM_PARAM_INVALID;
        }
        json_free(&doc);
    }
    free(res);
    return st;
}

/* One link attempt, as link_one's steps share it. */
typedef struct {
    cluster_job *job;
    engine *e;
    char *msg;
    const char *ip;
    uint16_t port;
    uint64_t peer_id;
    uint64_t token;
    int64_t deadline;
    int c1, c2;
    hello_body mine, peer;
    peer_cred cred;
    mlink *l; /* our placeholder, not ready until link_install: nobody else uses it */
} link_try;

/* The checks before anything is sent: one remote address, the local communication
 * resource, and (HIXL) not this engine's own listen address. */
static lldd_status link_checks(cluster_job *job)
{
    engine *e = job->e;
    const lldd_cluster_info *ci = job->ci;
    char *msg = job->msg;
    if (ci->num_remote_ip_infos != 1) {
        snprintf(msg, MSG_LEN, "remote_ip_infos has %zu entries; exactly one is needed", ci->num_remote_ip_infos);
        return LLM_PARAM_INVALID;
    }
    /* the HIXL backend's link generates no communication resource (E-5) */
    lldd_status st = job->v1 || job->comm_key != 0 || e->hixl ? LLM_SUCCESS : check_comm_res(e, ci, msg);
    if (st != LLM_SUCCESS)
        return st;
    /* A remote_cluster_id equal to our own is no error (E-7): the vendor's v1 samples
     * link two engines that share a cluster id, and an engine may link to itself. */
    const char *ip = ci->remote_ip_infos[0].ip;
    uint16_t port = ci->remote_ip_infos[0].port;
    if (e->hixl) {
        /* HIXL connects to "ip:port" and refuses its own listen address, textually */
        pthread_mutex_lock(&e->listen_mu);
        int self = e->listening && e->listen_addr.port == port && strcmp(e->listen_addr.ip, ip) == 0;
        pthread_mutex_unlock(&e->listen_mu);
        if (self) {
            snprintf(msg, MSG_LEN, "%s:%u is this engine's own listen address; HIXL does not connect an engine to "
                     "itself", ip, (unsigned)port);
            return LLM_PARAM_INVALID;
        }
    }
    return LLM_SUCCESS;
}

/* HIXL (PR-42): links are the client's, one per remote address, found before any
 * connection; the listener keeps none, so B -> A is a link of its own. The
 * placeholder is taken here, before the connection. */
static lldd_status link_hixl_claim(link_try *t)
{
    engine *e = t->e;
    pthread_mutex_lock(&e->mu);
    mlink *same = link_find_addr_locked(e, t->ip, t->port);
    if (same == NULL && (t->l = link_new(e, t->peer_id, t->token)) != NULL) {
        t->l->orphan = 1; /* invisible under its cluster id until it is ready */
        snprintf(t->l->peer_ip, sizeof t->l->peer_ip, "%s", t->ip);
        t->l->peer_port = t->port;
        t->l->next = e->links;
        e->links = t->l;
    }
    pthread_mutex_unlock(&e->mu);
    if (same != NULL) {
        snprintf(t->msg, MSG_LEN, "%s:%u is already linked (as cluster %llu)", t->ip, (unsigned)t->port,
                 (unsigned long long)same->peer_cluster);
        return LLM_ALREADY_LINK;
    }
    if (t->l == NULL) {
        snprintf(t->msg, MSG_LEN, "out of host memory");
        return LLM_FAILED;
    }
    return LLM_SUCCESS;
}

/* The default backend's placeholder, unless a link to the peer exists already: then
 * the HELLO only checks the listener's identity and the attempt ends ALREADY_LINK. */
static lldd_status link_placeholder(link_try *t, mlink **existing, int *existing_ready)
{
    engine *e = t->e;
    if (!e->hixl) {
        pthread_mutex_lock(&e->mu);
        *existing = link_find_locked(e, t->peer_id);
        *existing_ready = *existing != NULL && (*existing)->ready;
        if (*existing == NULL) {
            t->l = link_new(e, t->peer_id, t->token);
            if (t->l != NULL) {
                snprintf(t->l->peer_ip, sizeof t->l->peer_ip, "%s", t->ip);
                t->l->peer_port = t->port;
                t->l->next = e->links;
                e->links = t->l;
            }
        }
        pthread_mutex_unlock(&e->mu);
    }
    if (*existing == NULL && t->l == NULL) {
        snprintf(t->msg, MSG_LEN, "out of host memory");
        return LLM_FAILED;
    }
    return LLM_SUCCESS;
}

/* A send of the handshake on fd failed with r. */
static lldd_status link_send_failed(link_try *t, int r)
{
    snprintf(t->msg, MSG_LEN, "sending the handshake to %s:%u failed", t->ip, (unsigned)t->port);
    return r == TP_TIMEOUT ? LLM_TIMEOUT : LLM_LINK_FAILED;
}

/* HELLO on c1 and its reply: the listener's hello, and its proof of the secret. */
static lldd_status link_hello(link_try *t, int check_only)
{
    engine *e = t->e;
    msg_hdr h;
    msg_init(&h, MSG_HELLO);
    h.a = check_only ? HELLO_CHECK_ONLY : HELLO_LINK;
    h.b = t->job->comm_key;
    h.payload_len = sizeof t->mine;
    int r = msg_send(t->c1, &h, &t->mine, sizeof t->mine, t->deadline);
    if (r != TP_OK)
        return link_send_failed(t, r);
    lldd_status st = recv_reply(t->c1, MSG_HELLO_REPLY, t->deadline, &t->peer, t->msg, 0, "link handshake", NULL);
    if (st != LLM_SUCCESS)
        return st;
    t->peer.id_channel[sizeof t->peer.id_channel - 1] = '\0';
    if (e->secret_len > 0) {
        uint8_t want[PROOF_LEN];
        secret_proof(e->secret, e->secret_len, "lldd-server", t->mine.nonce, t->peer.nonce, t->token, want);
        if (t->peer.auth != 1 || !bytes_equal_ct(want, t->peer.proof, sizeof want)) {
            snprintf(t->msg, MSG_LEN, "the listener at %s:%u did not prove the shared secret "
                     "(llm_datadist_ffi.mock.LinkSecret or LLM_DATADIST_FFI_LINK_SECRET)", t->ip, (unsigned)t->port);
            return LLM_LINK_FAILED;
        }
    }
    if (t->peer.cluster_id != t->peer_id) {
        /* PR-28 (lint): the listener is another cluster than the one named. In strict
         * mode the listener refused above. */
        snprintf(t->job->lint, MSG_LEN, "remote_cluster_id %llu names cluster %llu's listener at %s:%u; the device "
                 "links anyway and keys the link by %llu (PR-28)", (unsigned long long)t->peer_id,
                 (unsigned long long)t->peer.cluster_id, t->ip, (unsigned)t->port,
                 (unsigned long long)(e->hixl ? t->peer_id : t->peer.cluster_id));
    }
    return LLM_SUCCESS;
}

/* Our other links that the listener's side may be (keyed by its id, or to this
 * address and still being made by another job of this call): it may replace one of
 * them with this link (PR-28 keying). Proofs over its nonce, not the tokens: a
 * listener that is not that link's peer learns nothing it could use elsewhere. */
static void link_replaces(link_try *t, reverse_body *rbody)
{
    engine *e = t->e;
    uint64_t tokens[REVERSE_REPLACES];
    int n = 0;
    pthread_mutex_lock(&e->mu);
    for (mlink *o = e->links; o != NULL && n < REVERSE_REPLACES; o = o->next)
        if (o != t->l && !o->orphan && !o->removed &&
            (o->peer_cluster == t->peer.cluster_id || (o->peer_port == t->port && strcmp(o->peer_ip, t->ip) == 0)))
            tokens[n++] = o->token;
    pthread_mutex_unlock(&e->mu);
    for (int i = 0; i < n; i++)
        token_proof(tokens[i], "lldd-replace", t->peer.nonce, rbody->replaces[i]);
}

/* Who the listener is, if the kernel can say (peer_id.h); otherwise sockets only.
 * Then REVERSE on a second connection, c2, and its reply. */
static lldd_status link_reverse(link_try *t)
{
    engine *e = t->e;
    if (t->peer.id_channel[0] != '\0') {
        int64_t id_deadline = tp_deadline(IDENTIFY_WAIT_MS);
        idch_prove(t->peer.id_channel, t->token, t->c1, id_deadline < t->deadline ? id_deadline : t->deadline,
                   &t->cred);
    }
    int err;
    int r = tp_connect(t->ip, t->port, t->deadline, &t->c2, &err);
    if (r != TP_OK)
        return connect_status(r, err, 0, t->msg, t->ip, t->port);
    msg_hdr h;
    msg_init(&h, MSG_REVERSE);
    h.a = t->token;
    h.b = e->cluster_id;
    reverse_body rbody;
    memset(&rbody, 0, sizeof rbody);
    if (e->secret_len > 0)
        secret_proof(e->secret, e->secret_len, "lldd-client", t->peer.nonce, t->mine.nonce, t->token, rbody.proof);
    if (!e->hixl)
        link_replaces(t, &rbody);
    h.payload_len = sizeof rbody;
    r = msg_send(t->c2, &h, &rbody, sizeof rbody, t->deadline);
    if (r != TP_OK)
        return link_send_failed(t, r);
    return recv_reply(t->c2, MSG_REVERSE_REPLY, t->deadline, NULL, t->msg, 0, "link handshake", NULL);
}

/* The link takes both connections and its server thread, then is installed under the
 * vendor's key: HIXL keys the client's link by the given id and replaces (orphans) an
 * older link to another address under that id; the default backend keys it by the id
 * the listener reported, replacing an older link to it. */
static lldd_status link_install(link_try *t)
{
    engine *e = t->e;
    mlink *l = t->l;
    eng_thread *server = calloc(1, sizeof *server);
    if (server == NULL) {
        snprintf(t->msg, MSG_LEN, "out of host memory");
        return LLM_FAILED;
    }
    server->fd = -1;
    l->req_fd = t->c1;
    l->srv_fd = t->c2;
    t->c1 = t->c2 = -1;
    link_set_peer(e, l, &t->cred, t->peer.serial);
    snprintf(l->peer_id_channel, sizeof l->peer_id_channel, "%s", t->peer.id_channel);
    l->own_next_at_link = t->mine.next_cache_id;
    l->comm_key = t->job->comm_key;
    atomic_store(&l->comm_pending, t->job->comm_key != 0);
    l->peer_next_at_link = t->peer.next_cache_id;
    link_ref(l); /* held by the server thread */
    l->server = server;
    if (thread_start(e, server, link_server_main, l) != 0) {
        l->server = NULL;
        free(server);
        link_unref(l);
        snprintf(t->msg, MSG_LEN, "cannot start a thread");
        return LLM_FAILED;
    }
    uint64_t key = e->hixl ? t->peer_id : t->peer.cluster_id;
    mlink *replaced = NULL;
    pthread_mutex_lock(&e->mu);
    for (mlink *o = e->links; o != NULL; o = o->next) {
        if (o != l && o->peer_cluster == key && !o->orphan && o->ready && !o->removed) {
            if (e->hixl) {
                o->orphan = 1;
            } else {
                replaced = o;
                link_ref(o);
            }
            break;
        }
    }
    l->peer_cluster = key;
    l->orphan = 0;
    l->ready = 1;
    pthread_mutex_unlock(&e->mu);
    if (replaced != NULL) {
        link_drop(e, replaced);
        link_unref(replaced);
    }
    return LLM_SUCCESS;
}

/* docs/reference/cpp-api.md §6.7 step 5: the connection first (refused: LINK_FAILED;
 * not in time: TIMEOUT), then the handshake, which reports an existing link (PR-42). */
static lldd_status link_handshake(link_try *t)
{
    engine *e = t->e;
    int err;
    int r = tp_connect(t->ip, t->port, t->deadline, &t->c1, &err);
    if (r != TP_OK)
        return connect_status(r, err, 0, t->msg, t->ip, t->port);
    fill_hello(e, &t->mine, t->peer_id, t->token, (uint32_t)t->job->timeout_ms);
    t->mine.instance = e->instance;
    if (e->secret_len > 0) {
        t->mine.auth = 1;
        secret_proof(e->secret, e->secret_len, "lldd-hello", t->mine.nonce, t->mine.nonce, t->token, t->mine.proof);
    }
    mlink *existing = NULL;
    int existing_ready = 0;
    lldd_status st = link_placeholder(t, &existing, &existing_ready);
    if (st == LLM_SUCCESS)
        st = link_hello(t, existing != NULL);
    if (st != LLM_SUCCESS)
        return st;
    if (existing != NULL) {
        snprintf(t->msg, MSG_LEN, "cluster %llu is already linked%s", (unsigned long long)t->peer_id,
                 existing_ready ? "" : " (a link to it is being made)");
        return LLM_ALREADY_LINK;
    }
    st = link_reverse(t);
    return st != LLM_SUCCESS ? st : link_install(t);
}

static lldd_status link_one(cluster_job *job)
{
    lldd_status st = link_checks(job);
    if (st != LLM_SUCCESS)
        return st;
    link_try t;
    memset(&t, 0, sizeof t);
    t.job = job;
    t.e = job->e;
    t.msg = job->msg;
    t.ip = job->ci->remote_ip_infos[0].ip;
    t.port = job->ci->remote_ip_infos[0].port;
    t.peer_id = job->ci->remote_cluster_id;
    t.deadline = tp_deadline(job->timeout_ms);
    t.c1 = t.c2 = -1;
    t.token = new_token();
    if (t.e->hixl && (st = link_hixl_claim(&t)) != LLM_SUCCESS)
        return st;
    st = link_handshake(&t);
    if (st != LLM_SUCCESS) {
        tp_close(&t.c1);
        tp_close(&t.c2);
        if (t.l != NULL)
            link_drop(t.e, t.l); /* our placeholder, not ready: nobody else uses it */
    }
    return st;
}

/* v1: the device side knows the link, and refuses while it is in use (§10.5). */
static lldd_status unlink_v1_checks(cluster_job *job)
{
    engine *e = job->e;
    uint64_t peer_id = job->ci->remote_cluster_id;
    pthread_mutex_lock(&e->mu);
    mlink *l = link_find_locked(e, peer_id);
    int known = l != NULL && l->ready && !l->removed, busy = known && atomic_load(&l->busy);
    pthread_mutex_unlock(&e->mu);
    if (!known) {
        snprintf(job->msg, MSG_LEN, "cluster %llu is not linked", (unsigned long long)peer_id);
        return LLM_NOT_YET_LINK;
    }
    if (busy) {
        snprintf(job->msg, MSG_LEN, "the link to cluster %llu is busy with a pull or transfer",
                 (unsigned long long)peer_id);
        return LLM_LINK_BUSY;
    }
    return LLM_SUCCESS;
}

/* The answer to the listener's challenge: a proof of every link token we hold, over
 * its nonce (which of them joins us to it we cannot always tell: on_disconnect). */
static int disconnect_prove(engine *e, int fd, const uint8_t *nonce, int64_t deadline)
{
    uint64_t *tokens = malloc(DISCONNECT_MAX_PROOFS * sizeof *tokens);
    uint8_t *proofs = malloc((size_t)DISCONNECT_MAX_PROOFS * PROOF_LEN);
    uint32_t n = 0;
    if (tokens != NULL && proofs != NULL) {
        pthread_mutex_lock(&e->mu);
        for (int list = 0; list < 2; list++)
            for (mlink *o = list == 0 ? e->links : e->served; o != NULL && n < DISCONNECT_MAX_PROOFS; o = o->next)
                if (o->ready && !o->removed)
                    tokens[n++] = o->token;
        pthread_mutex_unlock(&e->mu);
        for (uint32_t i = 0; i < n; i++)
            token_proof(tokens[i], "lldd-disconnect", nonce, proofs + (size_t)i * PROOF_LEN);
    }
    msg_hdr h;
    msg_init(&h, MSG_DISCONNECT_PROOF);
    h.count = n;
    h.payload_len = (uint64_t)n * PROOF_LEN;
    int r = msg_send(fd, &h, proofs, (size_t)h.payload_len, deadline);
    free(tokens);
    free(proofs);
    return r;
}

/* DISCONNECT to the listener, its challenge, our proofs and its reply; *server_id is
 * the cluster id the listener reports. */
static lldd_status unlink_disconnect(cluster_job *job, int fd, int64_t deadline, uint64_t *server_id)
{
    engine *e = job->e;
    msg_hdr h;
    msg_init(&h, MSG_DISCONNECT);
    h.a = e->cluster_id;
    h.b = job->ci->remote_cluster_id;
    h.count = mock_strict() ? DISCONNECT_STRICT_IDS : 0;
    int r = msg_send(fd, &h, NULL, 0, deadline);
    uint8_t nonce[NONCE_LEN];
    if (r == TP_OK)
        r = msg_recv_hdr(fd, &h, deadline);
    if (r == TP_OK && (h.type != MSG_DISCONNECT_CHALLENGE || h.payload_len != sizeof nonce))
        r = TP_CLOSED;
    if (r == TP_OK)
        r = tp_recv_all(fd, nonce, sizeof nonce, deadline);
    if (r == TP_OK)
        r = disconnect_prove(e, fd, nonce, deadline);
    if (r != TP_OK) {
        snprintf(job->msg, MSG_LEN, r == TP_TIMEOUT ? "the peer did not answer the disconnect in time"
                                                    : "the peer closed the connection during the disconnect");
        return r == TP_TIMEOUT ? LLM_TIMEOUT : LLM_UNLINK_FAILED;
    }
    return recv_reply(fd, MSG_DISCONNECT_REPLY, deadline, NULL, job->msg, 1, "disconnect", server_id);
}

/* The listener's side of an unforced unlink (default backend): it drops its link to
 * us first; when it refuses, the local link is kept. */
static lldd_status unlink_remote(cluster_job *job)
{
    const lldd_cluster_info *ci = job->ci;
    char *msg = job->msg;
    uint64_t peer_id = ci->remote_cluster_id;
    if (ci->num_remote_ip_infos != 1) {
        snprintf(msg, MSG_LEN, "remote_ip_infos has %zu entries; exactly one is needed", ci->num_remote_ip_infos);
        return LLM_PARAM_INVALID;
    }
    const char *ip = ci->remote_ip_infos[0].ip;
    uint16_t port = ci->remote_ip_infos[0].port;
    int64_t deadline = tp_deadline(job->timeout_ms);
    int fd = -1, err;
    int r = tp_connect(ip, port, deadline, &fd, &err);
    if (r != TP_OK)
        return connect_status(r, err, 1, msg, ip, port);
    uint64_t server_id = peer_id;
    lldd_status st = unlink_disconnect(job, fd, deadline, &server_id);
    tp_close(&fd);
    if (st != LLM_SUCCESS)
        return st;
    if (server_id != peer_id)
        snprintf(job->lint, MSG_LEN, "remote_cluster_id %llu names cluster %llu's listener at %s:%u; the device "
                 "drops that cluster's link to this engine and this engine's link to %llu, if any (PR-28)",
                 (unsigned long long)peer_id, (unsigned long long)server_id, ip, (unsigned)port,
                 (unsigned long long)peer_id);
    return LLM_SUCCESS;
}

static lldd_status unlink_one(cluster_job *job)
{
    engine *e = job->e;
    uint64_t peer_id = job->ci->remote_cluster_id;
    lldd_status st = job->v1 ? unlink_v1_checks(job) : LLM_SUCCESS;
    /* (HIXL's unlink ignores the force flag and the address list: it drops the
     * client's link and closes its connection, below) */
    if (st == LLM_SUCCESS && !job->force && !e->hixl)
        st = unlink_remote(job);
    if (st != LLM_SUCCESS)
        return st;
    pthread_mutex_lock(&e->mu);
    mlink *l = link_find_locked(e, peer_id);
    if (l != NULL && l->ready)
        link_ref(l);
    else
        l = NULL;
    pthread_mutex_unlock(&e->mu);
    if (l != NULL) {
        link_drop(e, l);
        link_unref(l);
    }
    return LLM_SUCCESS;
}

lldd_status link_comm_member(engine *e, uint64_t peer, uint16_t port, uint64_t comm_key, int32_t timeout_ms,
                             char *msg, size_t msg_len)
{
    lldd_ip_info remote;
    memset(&remote, 0, sizeof remote);
    remote.ip = "127.0.0.1";
    remote.port = port;
    lldd_cluster_info ci;
    memset(&ci, 0, sizeof ci);
    ci.remote_cluster_id = peer;
    ci.remote_ip_infos = &remote;
    ci.num_remote_ip_infos = 1;
    cluster_job job;
    memset(&job, 0, sizeof job);
    job.e = e;
    job.ci = &ci;
    job.timeout_ms = timeout_ms;
    job.comm_key = comm_key;
    lldd_status st = link_one(&job);
    snprintf(msg, msg_len, "%s", job.msg);
    return st;
}

/* ---------------------------------------------------------------------------------------------
 * the per-cluster stage: groups of the same cluster id in input order (PR-29),
 * different groups concurrently, at most 16 at a time
 * ------------------------------------------------------------------------------------------ */

typedef struct batch {
    cluster_job *jobs;
    size_t *order;           /* job indexes sorted by (cluster id, input position) */
    size_t *group_start;     /* group g is order[group_start[g] .. group_start[g + 1]) */
    size_t groups;
    atomic_size_t next_group;
    int unlink;
} batch;

static void run_group(batch *b, size_t g)
{
    for (size_t i = b->group_start[g]; i < b->group_start[g + 1]; i++) {
        cluster_job *job = &b->jobs[b->order[i]];
        job->msg[0] = '\0';
        job->lint[0] = '\0';
        if (job->v1 && i > b->group_start[g]) {
            /* v1: the device side refuses a cluster named twice in one request */
            snprintf(job->msg, MSG_LEN, "remote_cluster_id %llu appears more than once in this request",
                     (unsigned long long)job->ci->remote_cluster_id);
            job->status = LLM_REPEAT_REQUEST;
            continue;
        }
        job->status = b->unlink ? unlink_one(job) : link_one(job);
        if (job->v1 && job->status == LLM_TIMEOUT)
            job->status = LLM_WAIT_PROC_TIMEOUT;
    }
}

static void *batch_worker(void *arg)
{
    batch *b = arg;
    for (;;) {
        size_t g = atomic_fetch_add(&b->next_group, 1);
        if (g >= b->groups)
            return NULL;
        run_group(b, g);
    }
}

static int cmp_order(const void *a, const void *b, void *ctx)
{
    const cluster_job *jobs = ctx;
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    uint64_t cx = jobs[x].ci->remote_cluster_id, cy = jobs[y].ci->remote_cluster_id;
    if (cx != cy)
        return cx < cy ? -1 : 1;
    return x < y ? -1 : x > y;
}

static lldd_status run_clusters(engine *e, const char *fn, const lldd_cluster_info *clusters, size_t n,
                                int32_t timeout_ms, int unlink, int force, int v1, lldd_status *rets,
                                size_t *num_rets)
{
    batch b;
    memset(&b, 0, sizeof b);
    b.unlink = unlink;
    b.jobs = calloc(n, sizeof *b.jobs);
    b.order = calloc(n, sizeof *b.order);
    b.group_start = calloc(n + 1, sizeof *b.group_start);
    if (b.jobs == NULL || b.order == NULL || b.group_start == NULL) {
        free(b.jobs);
        free(b.order);
        free(b.group_start);
        mock_set_error("%s: out of host memory", fn);
        return LLM_FAILED;
    }
    for (size_t i = 0; i < n; i++) {
        b.jobs[i].e = e;
        b.jobs[i].ci = &clusters[i];
        b.jobs[i].timeout_ms = timeout_ms;
        b.jobs[i].force = force;
        b.jobs[i].v1 = v1;
        b.order[i] = i;
    }
    qsort_r(b.order, n, sizeof *b.order, cmp_order, b.jobs);
    for (size_t i = 0; i < n; i++)
        if (i == 0 || clusters[b.order[i]].remote_cluster_id != clusters[b.order[i - 1]].remote_cluster_id)
            b.group_start[b.groups++] = i;
    b.group_start[b.groups] = n;

    size_t workers = b.groups < LINK_WORKERS ? b.groups : LINK_WORKERS;
    pthread_t tids[LINK_WORKERS];
    size_t started = 0;
    for (size_t w = 1; w < workers; w++) {
        if (pthread_create(&tids[started], NULL, batch_worker, &b) != 0)
            break;
        started++;
    }
    batch_worker(&b);
    for (size_t w = 0; w < started; w++)
        pthread_join(tids[w], NULL);

    for (size_t i = 0; i < n; i++)
        if (b.jobs[i].lint[0] != '\0')
            (void)mock_lint(28, "%s: clusters[%zu]: %s", fn, i, b.jobs[i].lint);
    lldd_status result = LLM_SUCCESS;
    size_t last_bad = n;
    int rolled_back = 0, unlink_failed = 0;
    mock_link_reasons_begin(n);
    for (size_t i = 0; i < n; i++) {
        lldd_status st = b.jobs[i].status;
        rets[i] = st;
        if (st != LLM_SUCCESS)
            mock_link_reason_set(i, b.jobs[i].msg);
        if (v1 && unlink && st == LLM_NOT_YET_LINK)
            continue; /* v1: not a failure of an unlink (§10.5) */
        if (st != LLM_SUCCESS) {
            result = st;
            last_bad = i;
            rolled_back |= st == LLM_LINK_FAILED || st == LLM_WAIT_PROC_TIMEOUT || st == LLM_NOTIFY_PROMPT_UNLINK_FAILED;
            unlink_failed = 1;
        }
    }
    if (v1 && !unlink && rolled_back)
        result = LLM_LINK_FAILED;
    if (v1 && unlink && unlink_failed)
        result = LLM_UNLINK_FAILED;
    *num_rets = n;
    if (last_bad < n)
        mock_set_error("%s: cluster %zu (remote_cluster_id %llu): %s", fn, last_bad,
                       (unsigned long long)clusters[last_bad].remote_cluster_id, b.jobs[last_bad].msg);
    free(b.jobs);
    free(b.order);
    free(b.group_start);
    return result;
}

/* docs/reference/cpp-api.md §6.7 steps 1-4 (shared by link and unlink). */
static lldd_status check_clusters(engine *e, const char *fn, const lldd_cluster_info *clusters, size_t n,
                                  const lldd_status *rets, const size_t *num_rets)
{
    if (e == NULL || (clusters == NULL && n > 0) || (rets == NULL && n > 0) || num_rets == NULL) {
        mock_set_error("%s: %s must not be NULL", fn,
                       e == NULL ? "engine" : clusters == NULL && n > 0 ? "clusters (num_clusters > 0)"
                       : num_rets == NULL ? "num_rets" : "rets (num_clusters > 0)");
        return LLM_PARAM_INVALID;
    }
    return LLM_SUCCESS;
}

static lldd_status check_ips(const char *fn, const lldd_cluster_info *clusters, size_t n, int32_t timeout_ms)
{
    if (timeout_ms <= 0) {
        mock_set_error("%s: timeout_in_millis %d must be > 0", fn, (int)timeout_ms);
        return LLM_PARAM_INVALID;
    }
    for (size_t i = 0; i < n; i++) {
        const lldd_cluster_info *ci = &clusters[i];
        for (int side = 0; side < 2; side++) {
            const lldd_ip_info *infos = side == 0 ? ci->remote_ip_infos : ci->local_ip_infos;
            size_t count = side == 0 ? ci->num_remote_ip_infos : ci->num_local_ip_infos;
            const char *name = side == 0 ? "remote_ip_infos" : "local_ip_infos";
            if (infos == NULL && count > 0) {
                mock_set_error("%s: clusters[%zu].%s is NULL but its count is %zu", fn, i, name, count);
                return LLM_PARAM_INVALID;
            }
            for (size_t k = 0; k < count; k++) {
                const char *ip = infos[k].ip;
                if (ip == NULL || ip[0] == '\0') {
                    mock_set_error("%s: clusters[%zu].%s[%zu].ip is empty", fn, i, name, k);
                    return LLM_PARAM_INVALID;
                }
                if (!tp_is_ipv4(ip)) {
                    mock_set_error("%s: clusters[%zu].%s[%zu].ip \"%s\" is not an IPv4 address", fn, i, name, k, ip);
                    return LLM_PARAM_INVALID;
                }
            }
        }
    }
    if (n == 0) {
        mock_set_error("%s: clusters is empty", fn);
        return LLM_PARAM_INVALID;
    }
    return LLM_SUCCESS;
}

/* The call-level rules of v1 links and unlinks (docs/reference/semantics.md §10.5); on success the
 * caller holds e->v1_link_mu. */
static lldd_status v1_link_checks(engine *e, const char *fn, const lldd_cluster_info *clusters, size_t n, int unlink)
{
    int role = atomic_load(&e->role);
    if (!unlink && role != LLDD_ROLE_DECODER) {
        mock_set_error("%s: link_clusters is not supported by %s; only a DECODER links in v1 (docs/reference/semantics.md §10.5)", fn,
                       role == LLDD_ROLE_PROMPT ? "PROMPT" : role == LLDD_ROLE_MIX ? "MIX" : "this role");
        return LLM_PARAM_INVALID;
    }
    if (n > 16) {
        mock_set_error("%s: %zu clusters in one call; v1 allows at most 16", fn, n);
        return LLM_CLUSTER_NUM_EXCEED_LIMIT;
    }
    for (size_t i = 0; i < n; i++) {
        const lldd_cluster_info *ci = &clusters[i];
        const char *why = NULL;
        if (ci->num_local_ip_infos == 0 || ci->num_remote_ip_infos == 0)
            why = "local_ip_infos and remote_ip_infos must not be empty";
        else if (ci->num_local_ip_infos != ci->num_remote_ip_infos)
            why = "local_ip_infos and remote_ip_infos differ in size";
        else if (ci->num_local_ip_infos != 1)
            why = "the ip lists need one entry per device, and this engine has one device (PR-36)";
        else if (i > 0 && (strcmp(ci->local_ip_infos[0].ip, clusters[0].local_ip_infos[0].ip) != 0 ||
                           ci->local_ip_infos[0].port != clusters[0].local_ip_infos[0].port))
            why = "local_ip_infos differ from those of clusters[0]";
        if (why != NULL) {
            mock_set_error("%s: clusters[%zu]: %s (v1, docs/reference/semantics.md §10.5)", fn, i, why);
            return LLM_PARAM_INVALID;
        }
    }
    if (pthread_mutex_trylock(&e->v1_link_mu) != 0) {
        mock_set_error("%s: another link_clusters or unlink_clusters of this engine is in progress", fn);
        return LLM_PROCESSING_LINK;
    }
    return LLM_SUCCESS;
}

lldd_status clusters_call_enter(engine *e, const char *fn, const lldd_cluster_info *clusters, size_t num_clusters,
                                const lldd_status *rets, size_t *num_rets)
{
    uint32_t code;
    mock_link_reasons_begin(0);          /* a call refused as a whole reports no cluster */
    if (num_rets != NULL)
        *num_rets = 0;
    if (mock_fault_take(fn, &code))
        return code;
    lldd_status st = check_clusters(e, fn, clusters, num_clusters, rets, num_rets);
    if (st != LLM_SUCCESS)
        return st;
    return engine_enter(e, fn);
}

lldd_status clusters_call(engine *e, const char *fn, const lldd_cluster_info *clusters, size_t num_clusters,
                          int32_t timeout_in_millis, int unlink, int force, lldd_status *rets, size_t *num_rets)
{
    lldd_status st = check_ips(fn, clusters, num_clusters, timeout_in_millis);
    int v1 = e->gen == GEN_V1, locked = 0;
    if (st == LLM_SUCCESS && v1)
        locked = (st = v1_link_checks(e, fn, clusters, num_clusters, unlink)) == LLM_SUCCESS;
    if (st == LLM_SUCCESS)
        st = run_clusters(e, fn, clusters, num_clusters, timeout_in_millis, unlink, force, v1, rets, num_rets);
    if (locked)
        pthread_mutex_unlock(&e->v1_link_mu);
    return st;
}
