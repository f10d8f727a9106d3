/* The client's side of the link handshakes: LinkLlmClusters and UnlinkLlmClusters past
 * their entry (docs/reference/cpp-api.md §6.7, §6.8; docs/reference/semantics.md §10),
 * and the link of a rank-table communicator. Each cluster is a job: checks, HELLO on c1,
 * REVERSE on c2, install (the protocol in engine_link.c's opening comment); an unlink
 * sends DISCONNECT on a fresh connection. The jobs of one call run in groups of the
 * same cluster id, different groups concurrently.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/engine.h"
#include "base/json.h"
#include "wire/links.h"
#include "base/mock_internal.h"
#include "wire/peer_id.h"
#include "wire/transport.h"

enum { LINK_WORKERS = 16 };

static uint64_t new_token(void)
{
    uint64_t r = 0;
    while (r == 0)
        if (rand_bytes(&r, sizeof r) != 0)
            abort(); /* no randomness from the kernel: nothing here could be safe */
    return r;
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
    char msg[LINK_MSG_LEN];
    char lint[LINK_MSG_LEN];          /* PR-28, reported by the calling thread (the lint record is per thread) */
} cluster_job;

static lldd_status connect_status(int r, int err, int unlink, char *msg, const char *ip, uint16_t port)
{
    if (r == TP_TIMEOUT) {
        snprintf(msg, LINK_MSG_LEN, "connecting to %s:%u did not complete in time", ip, (unsigned)port);
        return LLM_TIMEOUT;
    }
    snprintf(msg, LINK_MSG_LEN, "cannot connect to %s:%u: %s", ip, (unsigned)port,
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
        snprintf(msg, LINK_MSG_LEN, "the peer did not answer the %s in time", what);
        return LLM_TIMEOUT;
    }
    if (r != TP_OK) {
        snprintf(msg, LINK_MSG_LEN, "the peer closed the connection during the %s", what);
        return unlink ? LLM_UNLINK_FAILED : LLM_LINK_FAILED;
    }
    tp_sanitize_text(body.text.text, sizeof body.text.text);
    if (hello != NULL)
        *hello = body.hello;
    if (hdr_a != NULL)
        *hdr_a = h.a;
    if (h.status != LLM_SUCCESS) {
        snprintf(msg, LINK_MSG_LEN, "the peer refused the %s: %.200s", what, body.text.text);
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

/* The local communication resource rule of semantics.md §10.2 and llm.LocalCommRes. */
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
        snprintf(msg, LINK_MSG_LEN, "local_ip_infos has %zu entries; without llm.LocalCommRes or a listen address "
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
        snprintf(msg, LINK_MSG_LEN, "option llm.LocalCommRes is not valid JSON (%s)", why);
        st = LLM_PARAM_INVALID;
    } else {
        const json_value *v = json_member(&doc, "version");
        if (doc.type != JSON_OBJECT || v == NULL || v->type != JSON_STRING ||
            (strcmp(v->str, "1.0") != 0 && strcmp(v->str, "1.2") != 0 && strcmp(v->str, "1.3") != 0)) {
            snprintf(msg, LINK_MSG_LEN, "option llm.LocalCommRes must be a JSON object with \"version\" \"1.0\", "
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
        snprintf(msg, LINK_MSG_LEN, "remote_ip_infos has %zu entries; exactly one is needed", ci->num_remote_ip_infos);
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
            snprintf(msg, LINK_MSG_LEN, "%s:%u is this engine's own listen address; HIXL does not connect an engine to "
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
        snprintf(t->msg, LINK_MSG_LEN, "%s:%u is already linked (as cluster %llu)", t->ip, (unsigned)t->port,
                 (unsigned long long)same->peer_cluster);
        return LLM_ALREADY_LINK;
    }
    if (t->l == NULL) {
        snprintf(t->msg, LINK_MSG_LEN, "out of host memory");
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
        snprintf(t->msg, LINK_MSG_LEN, "out of host memory");
        return LLM_FAILED;
    }
    return LLM_SUCCESS;
}

/* A send of the handshake on fd failed with r. */
static lldd_status link_send_failed(link_try *t, int r)
{
    snprintf(t->msg, LINK_MSG_LEN, "sending the handshake to %s:%u failed", t->ip, (unsigned)t->port);
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
            snprintf(t->msg, LINK_MSG_LEN, "the listener at %s:%u did not prove the shared secret "
                     "(llm_datadist_ffi.mock.LinkSecret or LLM_DATADIST_FFI_LINK_SECRET)", t->ip, (unsigned)t->port);
            return LLM_LINK_FAILED;
        }
    }
    if (t->peer.cluster_id != t->peer_id) {
        /* PR-28 (lint): the listener is another cluster than the one named. In strict
         * mode the listener refused above. */
        snprintf(t->job->lint, LINK_MSG_LEN, "remote_cluster_id %llu names cluster %llu's listener at %s:%u; the device "
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
        int64_t id_deadline = tp_deadline(LINK_IDENTIFY_WAIT_MS);
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
        snprintf(t->msg, LINK_MSG_LEN, "out of host memory");
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
        snprintf(t->msg, LINK_MSG_LEN, "cannot start a thread");
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
        snprintf(t->msg, LINK_MSG_LEN, "cluster %llu is already linked%s", (unsigned long long)t->peer_id,
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

/* v1: the device side knows the link, and refuses while it is in use (semantics.md §10.5). */
static lldd_status unlink_v1_checks(cluster_job *job)
{
    engine *e = job->e;
    uint64_t peer_id = job->ci->remote_cluster_id;
    pthread_mutex_lock(&e->mu);
    mlink *l = link_find_locked(e, peer_id);
    int known = l != NULL && l->ready && !l->removed, busy = known && atomic_load(&l->busy);
    pthread_mutex_unlock(&e->mu);
    if (!known) {
        snprintf(job->msg, LINK_MSG_LEN, "cluster %llu is not linked", (unsigned long long)peer_id);
        return LLM_NOT_YET_LINK;
    }
    if (busy) {
        snprintf(job->msg, LINK_MSG_LEN, "the link to cluster %llu is busy with a pull or transfer",
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
        snprintf(job->msg, LINK_MSG_LEN, r == TP_TIMEOUT ? "the peer did not answer the disconnect in time"
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
        snprintf(msg, LINK_MSG_LEN, "remote_ip_infos has %zu entries; exactly one is needed", ci->num_remote_ip_infos);
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
        snprintf(job->lint, LINK_MSG_LEN, "remote_cluster_id %llu names cluster %llu's listener at %s:%u; the device "
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
            snprintf(job->msg, LINK_MSG_LEN, "remote_cluster_id %llu appears more than once in this request",
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
            continue; /* v1: not a failure of an unlink (semantics.md §10.5) */
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
