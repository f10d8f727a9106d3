/* The listener's side of the link handshakes (docs/design.md, "Links of the mock"; the
 * protocol in engine_link.c's opening comment): the connection thread of every accepted
 * connection reads its first message and answers HELLO (parks the handshake), REVERSE
 * (installs the link and becomes its server thread), DISCONNECT (drops our side of a
 * link), and the identity channel's IDENTIFY, MAP and TABLE requests.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "core/engine.h"
#include "wire/links.h"
#include "base/mock_internal.h"
#include "wire/peer_id.h"
#include "wire/pub.h"
#include "wire/transport.h"

enum {
    FIRST_MESSAGE_WAIT_MS = BOUND_FIRST_MSG_MS,
    REVERSE_POLL_MS = 100,
    STALE_LINK_WAIT_MS = 1000    /* how long a relink waits to see the old link's connection closed */
};

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
        snprintf(text, LINK_MSG_LEN, "the listener is finalizing");
        return LLM_LINK_FAILED;
    }
    if (!proven) {
        snprintf(text, LINK_MSG_LEN, "the handshake did not prove the listener's shared secret "
                 "(llm_datadist_ffi.mock.LinkSecret or LLM_DATADIST_FFI_LINK_SECRET)");
        return LLM_LINK_FAILED;
    }
    if (peer->strict_ids && peer->expected_cluster_id != e->cluster_id) {
        /* strict mode only: otherwise the client links and warns (PR-28). The text
         * does not name our cluster id: a refused peer learns nothing about us. */
        snprintf(text, LINK_MSG_LEN, "remote cluster id mismatch: the listener at this address is not cluster %llu "
                 "(PR-28)", (unsigned long long)peer->expected_cluster_id);
        return LLM_PARAM_INVALID;
    }
    if (peer->hixl != (uint32_t)e->hixl) {
        snprintf(text, LINK_MSG_LEN, "transfer backends differ: cluster %llu uses %s, the client %s",
                 (unsigned long long)e->cluster_id, e->hixl ? "hixl" : "the default backend",
                 peer->hixl ? "hixl" : "the default backend");
        return LLM_LINK_FAILED;
    }
    if (h->a == HELLO_CHECK_ONLY)
        return LLM_SUCCESS; /* the client holds a link already: identity checked, nothing changes here */
    if (peer->mode != e->mode) {
        snprintf(text, LINK_MSG_LEN, "transfer modes differ: cluster %llu is in %s mode, the client in %s mode "
                 "(docs/reference/semantics.md §1.4)", (unsigned long long)e->cluster_id,
                 e->mode == MODE_DIRECT ? "direct" : "server-assisted",
                 peer->mode == MODE_DIRECT ? "direct" : "server-assisted");
        return LLM_PARAM_INVALID;
    }
    if (existing != NULL && !existing->ready) {
        snprintf(text, LINK_MSG_LEN, "cluster %llu is itself linking to cluster %llu right now",
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
    char text[LINK_MSG_LEN];
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
    char text[LINK_MSG_LEN];
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
 * longer has it (semantics.md §10.4: it force-unlinked, finalized or died, so its connections are
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
    char text[LINK_MSG_LEN];
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
    return ok && idch_map_challenge(fd, tp_deadline(LINK_IDENTIFY_WAIT_MS));
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
 * memory peer that passes the same challenge, once per link. The table copy of semantics.md §9.7 is
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
    if (idch_read_msg(fd, tp_deadline(LINK_IDENTIFY_WAIT_MS), &cred, &type, &ident, &map) != 0)
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
        char text[LINK_MSG_LEN];
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
