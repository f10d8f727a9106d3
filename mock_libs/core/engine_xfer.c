/* The transfer pipeline: the stages every transfer call runs, native (engine_xfer_native.c)
 * and extension (engine_ext_xfer.c) alike. Each API keeps only its order: which of these
 * stages it runs, where its own checks sit between them, and so which error wins when
 * several things are wrong (docs/reference/semantics.md §8.0 and cpp-api.md §6.10-6.11
 * for the native order, docs/reference/python-api.md §11.2 for the extension's).
 *
 *   enter    xfer_call_enter / xfer_cache_call_enter: an injected fault, the NULL
 *            arguments in parameter order, entering the engine (the api_*.c entries);
 *   frame    xfer_run: the local cache pinned by id for the whole call, the API's steps,
 *            then every pin and the link released, whatever the steps answered;
 *   link     link_acquire_ex: the link to the peer, its transfer lock held (exclusive, or
 *            shared where the peer's table is mapped), its health checked;
 *   peer     peer_pin (by id), the extension's resolve and pin by address: the peer's
 *            cache pinned, live for every transfer against the link's table copy
 *            (docs/reference/semantics.md §9.7); peer_hold_local, link_ask and
 *            link_recv_pinned are the pieces they share;
 *   checks   the checks both APIs make with the same words (below): block lists,
 *            repeats, remote access and registration times (PR-32), a pull's
 *            destination batch and source shape, a push's layers and shapes;
 *   plan     plan_init / plan_range / plan_blocks: which bytes move;
 *   move     move_bytes (engine_move.c): the data paths and the link model.
 *
 * A transfer holds, in this order: a pin on its local cache, the link's transfer lock
 * (transfers over one link are serialized; unlink waits for them), and a pin on the
 * peer's cache. Every check finishes before the first byte moves, so a failed check
 * changes nothing (docs/reference/semantics.md §8.12).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/blocks.h"
#include "core/cache_table.h"
#include "core/engine.h"
#include "wire/links.h"
#include "base/mock_internal.h"
#include "wire/peer_id.h"
#include "wire/pub.h"
#include "core/transfers.h"
#include "wire/transport.h"

/* ---------------------------------------------------------------------------------------------
 * the link and the peer's cache
 * ------------------------------------------------------------------------------------------ */

/* TIMEOUT ends the link's usefulness (PR-35): poison it, and close the connection
 * we ask on so that the peer releases whatever it still holds for us. */
lldd_status link_timeout(xlink *x, const char *fn, const char *fmt, ...)
{
    char why[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    atomic_store(&x->l->poisoned, 1);
    tp_shutdown(x->l->req_fd);
    mock_set_error("%s: link to cluster %llu: %s", fn, (unsigned long long)x->l->peer_cluster, why);
    return LLM_TIMEOUT;
}

/* 1 if the peer engine (same process) still holds its side of this link. peer->mu held. */
static int peer_side_alive_locked(engine *peer, engine *self, const mlink *l)
{
    if (peer->state != ENGINE_READY)
        return 0;
    (void)self; /* the other side is found by the link's token: ids may repeat (E-7) */
    mlink *pl = link_peer_side_locked(peer, l);
    return pl != NULL && pl->ready && !pl->removed && pl->token == l->token && !atomic_load(&pl->dropped) &&
           !atomic_load(&pl->peer_gone);
}

void link_release(xlink *x)
{
    if (x->l == NULL)
        return;
    if (x->sock_locked)
        pthread_mutex_unlock(&x->l->sock_mu);
    if (x->locked) {
        atomic_fetch_sub(&x->l->busy, 1);
        pthread_rwlock_unlock(&x->l->xfer_mu);
    }
    if (x->peer != NULL)
        registry_release(x->peer);
    link_unref(x->l);
    memset(x, 0, sizeof *x);
}

/* Step 5 of docs/reference/semantics.md §8.0: the link to `cluster`, locked for this transfer. */
lldd_status link_acquire_ex(engine *e, const char *fn, uint64_t cluster, xlink *x, int flags)
{
    int v1 = (flags & ACQUIRE_V1) != 0;
    memset(x, 0, sizeof *x);
    x->e = e;
    pthread_mutex_lock(&e->mu);
    mlink *l = link_find_locked(e, cluster);
    int ready = l != NULL && l->ready;
    int comm_wait = ready && atomic_load(&l->comm_pending);
    if (ready && !comm_wait)
        link_ref(l);
    pthread_mutex_unlock(&e->mu);
    if (comm_wait) {
        mock_set_error("%s: the rank-table link to cluster %llu is not ready: must wait until the "
                       "query_register_mem_status return ok (docs/reference/semantics.md §10.6)", fn, (unsigned long long)cluster);
        return LLM_NOT_YET_LINK;
    }
    if (!ready) {
        mock_set_error("%s: cluster %llu is not linked%s", fn, (unsigned long long)cluster,
                       l != NULL ? " yet (the link is being made)" : "");
        return LLM_NOT_YET_LINK;
    }
    x->l = l;
    if (!v1 && (flags & ACQUIRE_SHARED) && atomic_load_explicit(&l->pub_ready, memory_order_acquire)) {
        /* the peer's table is mapped: transfers that read it run side by side */
        pthread_rwlock_rdlock(&l->xfer_mu);
        x->locked = 2;
    } else if (!v1) {
        pthread_rwlock_wrlock(&l->xfer_mu);
    } else {
        /* v1: the link's lock within the transfer timeout, else LINK_BUSY (semantics.md §10.5) */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        uint32_t ms = e->sync_timeout_ms;
        ts.tv_sec += ms / 1000;
        ts.tv_nsec += (long)(ms % 1000) * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        if (pthread_rwlock_timedwrlock(&l->xfer_mu, &ts) != 0) {
            link_release(x);
            mock_set_error("%s: the link to cluster %llu is busy with another request for longer than "
                           "llm.SyncKvCacheWaitTime = %u ms (docs/reference/semantics.md §10.5)", fn, (unsigned long long)cluster,
                           (unsigned)ms);
            return LLM_LINK_BUSY;
        }
    }
    if (x->locked == 0)
        x->locked = 1;
    atomic_fetch_add(&l->busy, 1);
    pthread_mutex_lock(&e->mu);
    int removed = l->removed;
    pthread_mutex_unlock(&e->mu);
    if (removed) {
        link_release(x);
        mock_set_error("%s: the link to cluster %llu is being torn down", fn, (unsigned long long)cluster);
        return v1 ? LLM_LINK_BUSY : LLM_NOT_YET_LINK;
    }
    if (atomic_load(&l->poisoned)) {
        mock_set_error("%s: link to cluster %llu: an earlier transfer timed out; unlink and link again (PR-35)", fn,
                       (unsigned long long)cluster);
        return LLM_TIMEOUT;
    }
    if (atomic_load(&l->cut))
        return link_timeout(x, fn, "this engine cut the link: the peer held a cache being removed pinned for "
                            "longer than llm.SyncKvCacheWaitTime (docs/security.md §3.2)");
    if (atomic_load(&l->dropped) || atomic_load(&l->peer_gone) || tp_peer_closed(l->req_fd))
        return link_timeout(x, fn, "the peer's side of the link is gone (PR-31)");
    if (l->same_process) {
        x->peer = registry_acquire(l->peer_serial);
        if (x->peer == NULL)
            return link_timeout(x, fn, "the peer engine no longer exists (PR-31)");
        pthread_mutex_lock(&x->peer->mu);
        int alive = peer_side_alive_locked(x->peer, e, l);
        pthread_mutex_unlock(&x->peer->mu);
        if (!alive)
            return link_timeout(x, fn, "the peer's side of the link is gone (PR-31)");
    }
    return LLM_SUCCESS;
}

/* A shared holder of the link about to use its request socket takes sock_mu (an
 * exclusive holder has the link to itself). */
void link_sock(xlink *x)
{
    if (x->locked == 2 && !x->sock_locked) {
        pthread_mutex_lock(&x->l->sock_mu);
        x->sock_locked = 1;
    }
}

void link_note_table_copy(mlink *l, int64_t id_mark, uint64_t bind_mark)
{
    if (l->watermark == 0) {
        l->watermark = id_mark;
        l->bind_watermark = bind_mark;
    }
}

static lldd_status not_exist(const char *fn, uint64_t cluster, int64_t id, int64_t watermark)
{
    if (id >= watermark)
        mock_set_error("%s: cache %lld does not exist on cluster %llu: it is not in this link's copy of the peer's "
                       "cache table, taken at the link's first transfer (docs/reference/semantics.md §9.7)", fn, (long long)id,
                       (unsigned long long)cluster);
    else
        mock_set_error("%s: cache %lld does not exist on cluster %llu (never registered, or freed: PR-7)", fn,
                       (long long)id, (unsigned long long)cluster);
    return LLM_KV_CACHE_NOT_EXIST;
}

void peer_hold_local(peer_cache *pc, mcache *c)
{
    c->pins++;
    pc->w = c->w;
    pc->addrs = c->addrs;
    pc->pc = c;
    pc->pinned = 1;
}

lldd_status peer_local_enter(xlink *x, const char *fn)
{
    engine *peer = x->peer;
    uint32_t timeout = x->e->sync_timeout_ms;
    uint32_t delay = atomic_load(&peer->serve_delay_ms);
    if (delay > 0) {
        tp_sleep_ms(delay < timeout ? delay : timeout, NULL);
        if (delay >= timeout)
            return link_timeout(x, fn, "the peer did not answer within llm.SyncKvCacheWaitTime = %u ms", timeout);
    }
    pthread_mutex_lock(&peer->mu);
    if (!peer_side_alive_locked(peer, x->e, x->l)) {
        pthread_mutex_unlock(&peer->mu);
        return link_timeout(x, fn, "the peer's side of the link is gone (PR-31)");
    }
    return LLM_SUCCESS;
}

/* The peer's published table (engine_pub.c), taken at the link's first transfer that
 * needs it, if the peer is a process we may reach with process_vm. Exclusive holder. */
static void pub_fetch(xlink *x)
{
    mlink *l = x->l;
    l->pub_refused = 1; /* asked once per link, whatever the answer */
    if (l->same_process || !atomic_load(&l->vm_ok) || l->peer_id_channel[0] == '\0' || l->watermark != 0)
        return;
    int fds[2];
    int64_t id_mark;
    uint64_t bind_mark;
    if (idch_table(l->peer_id_channel, l->peer_pid, l->token, tp_deadline(x->e->sync_timeout_ms), &id_mark,
                   &bind_mark, fds) != 0)
        return;
    /* the answer came from the process the link holds, still that process */
    if (!pidfd_alive(l->peer_pidfd) || pub_take(l, fds[0], fds[1]) != 0)
        return;
    link_note_table_copy(l, id_mark, bind_mark);
    atomic_store_explicit(&l->pub_ready, 1, memory_order_release);
}

/* Step 7 through the peer's published table: no round trip. 1 when decided (*st is
 * the answer), 0 when the table cannot say and the peer must be asked. The peer's
 * serve delay is emulated as for a peer in this process. */
static int peer_pin_pub(xlink *x, const char *fn, int64_t id, peer_cache *pc, lldd_status *st)
{
    mlink *l = x->l;
    uint32_t timeout = x->e->sync_timeout_ms;
    uint32_t delay = pub_delay_ms(l);
    if (delay > 0) {
        tp_sleep_ms(delay < timeout ? delay : timeout, NULL);
        if (delay >= timeout) {
            *st = link_timeout(x, fn, "the peer did not answer within llm.SyncKvCacheWaitTime = %u ms", timeout);
            return 1;
        }
    }
    uint32_t slot;
    int found = id < l->watermark ? pub_lookup(l, id, &pc->w, pc->pub_addrs, PUB_ADDRS, &slot) : PUB_ABSENT;
    switch (found) {
    case PUB_FOUND:
        pc->addrs = pc->pub_addrs;
        pc->pub_slot = slot;
        pc->pinned = 2;
        *st = LLM_SUCCESS;
        return 1;
    case PUB_ABSENT:
        *st = not_exist(fn, l->peer_cluster, id, l->watermark);
        return 1;
    case PUB_GONE:
        *st = link_timeout(x, fn, "the peer's side of the link is gone (PR-31)");
        return 1;
    default:
        return 0;
    }
}

/* Step 7: resolves and pins the peer's cache `id` (live, every transfer). */
lldd_status peer_pin(xlink *x, const char *fn, int64_t id, peer_cache *pc)
{
    engine *e = x->e;
    mlink *l = x->l;
    memset(pc, 0, sizeof *pc);
    if (id <= 0) {
        mock_set_error("%s: cache id %lld never names a cache (ids start at 1, PR-20)", fn, (long long)id);
        return LLM_KV_CACHE_NOT_EXIST;
    }
    uint32_t timeout = e->sync_timeout_ms;
    if (l->same_process) {
        engine *peer = x->peer;
        lldd_status st = peer_local_enter(x, fn);
        if (st != LLM_SUCCESS)
            return st;
        link_note_table_copy(l, peer->next_id, peer->next_bind);
        mcache *c = id < l->watermark ? cache_find_locked(peer, id) : NULL;
        if (c == NULL) {
            pthread_mutex_unlock(&peer->mu);
            return not_exist(fn, l->peer_cluster, id, l->watermark);
        }
        peer_hold_local(pc, c);
        pthread_mutex_unlock(&peer->mu);
        return LLM_SUCCESS;
    }
    if (x->locked == 1 && !atomic_load(&l->pub_ready) && !l->pub_refused)
        pub_fetch(x);
    lldd_status decided;
    if (atomic_load_explicit(&l->pub_ready, memory_order_acquire) && peer_pin_pub(x, fn, id, pc, &decided))
        return decided;
    link_sock(x);
    msg_hdr h;
    msg_init(&h, MSG_PIN);
    h.a = (uint64_t)id;
    h.b = (uint64_t)l->watermark;
    int64_t deadline = tp_deadline(timeout);
    lldd_status st = link_ask(x, fn, &h, NULL, 0, MSG_PIN_REPLY, deadline);
    if (st != LLM_SUCCESS)
        return st;
    link_note_table_copy(l, (int64_t)h.a, h.b);
    if (h.status == LLM_KV_CACHE_NOT_EXIST)
        return not_exist(fn, l->peer_cluster, id, (int64_t)h.a);
    if (h.status != LLM_SUCCESS || h.payload_len < sizeof pc->w)
        return link_timeout(x, fn, "the peer answered a lookup with status 0x%08X", (unsigned)h.status);
    return link_recv_pinned(x, fn, &h, deadline, &pc->w, sizeof pc->w, &pc->w, pc, UINT64_MAX);
}

lldd_status link_ask(xlink *x, const char *fn, msg_hdr *h, const void *body, size_t body_len, uint16_t reply,
                     int64_t deadline)
{
    int r = msg_send(x->l->req_fd, h, body, body_len, deadline);
    if (r == TP_OK)
        r = msg_recv_hdr(x->l->req_fd, h, deadline);
    if (r == TP_OK && h->type != reply)
        r = TP_CLOSED;
    if (r == TP_TIMEOUT)
        return link_timeout(x, fn, "the peer did not answer within llm.SyncKvCacheWaitTime = %u ms",
                            x->e->sync_timeout_ms);
    if (r != TP_OK)
        return link_timeout(x, fn, "the peer's side of the link is gone (PR-31)");
    return LLM_SUCCESS;
}

lldd_status link_recv_pinned(xlink *x, const char *fn, const msg_hdr *h, int64_t deadline, void *head,
                             size_t head_len, const cache_wire *w, peer_cache *pc, uint64_t tensor)
{
    int fd = x->l->req_fd;
    int r = h->payload_len < head_len ? TP_CLOSED : tp_recv_all(fd, head, head_len, deadline);
    uint64_t addr_bytes = (uint64_t)w->num_tensors * sizeof(uint64_t);
    if (r == TP_OK && (w->num_tensors > WIRE_MAX_TENSORS || h->payload_len - head_len != addr_bytes ||
                       (tensor != UINT64_MAX && tensor >= w->num_tensors)))
        r = TP_CLOSED;
    if (r == TP_OK) {
        pc->owned_addrs = malloc(addr_bytes ? (size_t)addr_bytes : 1);
        r = pc->owned_addrs == NULL ? TP_CLOSED : tp_recv_all(fd, pc->owned_addrs, (size_t)addr_bytes, deadline);
    }
    if (r != TP_OK) {
        free(pc->owned_addrs);
        pc->owned_addrs = NULL;
        return link_timeout(x, fn, "the peer's answer to a lookup was cut short");
    }
    if (w != &pc->w)
        pc->w = *w;
    pc->addrs = pc->owned_addrs;
    pc->pinned = 1;
    return LLM_SUCCESS;
}

void peer_unpin(xlink *x, peer_cache *pc)
{
    if (!pc->pinned)
        return;
    if (pc->pinned == 2) {
        pub_unpin(x->l, pc->pub_slot);
    } else if (x->l->same_process) {
        pthread_mutex_lock(&x->peer->mu);
        cache_unpin_locked(x->peer, pc->pc);
        pthread_mutex_unlock(&x->peer->mu);
    } else {
        msg_hdr h;
        msg_init(&h, MSG_UNPIN);
        h.a = (uint64_t)pc->w.id;
        msg_send(x->l->req_fd, &h, NULL, 0, tp_deadline(x->e->sync_timeout_ms));
    }
    free(pc->owned_addrs);
    memset(pc, 0, sizeof *pc);
}

/* ---------------------------------------------------------------------------------------------
 * the checks both APIs make with the same words
 * ------------------------------------------------------------------------------------------ */

lldd_status check_blocks(const char *fn, const char *name, const uint64_t *blk, size_t n, uint64_t limit,
                         const char *whose)
{
    for (size_t k = 0; k < n; k++) {
        if (blk[k] >= limit) {
            mock_set_error("%s: %s[%zu] = %llu is out of range: the %s cache has %llu blocks (PR-4)", fn, name, k,
                           (unsigned long long)blk[k], whose, (unsigned long long)limit);
            return LLM_PARAM_INVALID;
        }
    }
    return LLM_SUCCESS;
}

lldd_status check_repeats(const char *fn, const char *name, const uint64_t *v, size_t n, int lint)
{
    size_t pos, earlier;
    if (find_repeat(v, n, &pos, &earlier) != 0) {
        mock_set_error("%s: out of host memory", fn);
        return LLM_FAILED;
    }
    if (pos == SIZE_MAX)
        return LLM_SUCCESS;
    /* a repeated destination block: the device copies every pair in order and the last
     * write wins (lint PR-5); repeated tensor indexes stay refused */
    if (lint) {
        return mock_lint(5, "%s: %s[%zu] = %llu repeats %s[%zu]; the last write wins (PR-5)", fn, name, pos,
                         (unsigned long long)v[pos], name, earlier) ? LLM_PARAM_INVALID : LLM_SUCCESS;
    }
    mock_set_error("%s: %s[%zu] = %llu repeats %s[%zu]; a destination may appear only once", fn, name, pos,
                   (unsigned long long)v[pos], name, earlier);
    return LLM_PARAM_INVALID;
}

lldd_status pr32_check_local(const char *fn, const mlink *l, const cache_wire *lw)
{
    if (!lw->owned && lw->id >= l->own_next_at_link) {
        mock_set_error("%s: cache registered after link is not remote accessible through this link: local cache %lld "
                       "(PR-32)", fn, (long long)lw->id);
        return LLM_PARAM_INVALID;
    }
    return LLM_SUCCESS;
}

lldd_status pr32_check_peer(const char *fn, const mlink *l, const cache_wire *rw, uint64_t cluster_id)
{
    if (!rw->owned && rw->id >= l->peer_next_at_link) {
        mock_set_error("%s: cache registered after link is not remote accessible through this link: cache %lld on "
                       "cluster %llu (PR-32)", fn, (long long)rw->id, (unsigned long long)cluster_id);
        return LLM_PARAM_INVALID;
    }
    return LLM_SUCCESS;
}

lldd_status pr32_checks(const char *fn, const mlink *l, const cache_wire *lw, const cache_wire *rw,
                        uint64_t cluster_id)
{
    lldd_status st = pr32_check_local(fn, l, lw);
    return st != LLM_SUCCESS ? st : pr32_check_peer(fn, l, rw, cluster_id);
}

lldd_status pull_dst_batch_checks(const char *fn, const cache_wire *lw, uint32_t batch_index, int64_t size,
                                  int check_size)
{
    if (batch_index >= lw->batches) {
        mock_set_error("%s: batch_index %u is out of range: cache %lld has %llu batches", fn, (unsigned)batch_index,
                       (long long)lw->id, (unsigned long long)lw->batches);
        return LLM_PARAM_INVALID;
    }
    if (!kind_has_batches(lw)) {
        mock_set_error("%s: request expect local cache is non-blocks: cache %lld is a blocks cache", fn,
                       (long long)lw->id);
        return LLM_PARAM_INVALID;
    }
    if (check_size && size > 0 && (uint64_t)size > lw->stride) {
        mock_set_error("%s: size %lld is larger than the destination stride %llu", fn, (long long)size,
                       (unsigned long long)lw->stride);
        return LLM_PARAM_INVALID;
    }
    return LLM_SUCCESS;
}

lldd_status pull_dst_blocks_check(const char *fn, const cache_wire *lw)
{
    if (!kind_has_blocks(lw)) {
        mock_set_error("%s: request expect local cache is blocks: cache %lld has no blocks", fn, (long long)lw->id);
        return LLM_PARAM_INVALID;
    }
    return LLM_SUCCESS;
}

lldd_status pull_dst_block_list_checks(const char *fn, const cache_wire *lw, const uint64_t *dblk, size_t n)
{
    lldd_status st = check_repeats(fn, "dst_blocks", dblk, n, 1);
    return st != LLM_SUCCESS ? st : check_blocks(fn, "dst_blocks", dblk, n, lw->blocks, "local");
}

lldd_status pull_src_count_check(const char *fn, const cache_wire *rw, const cache_wire *lw)
{
    if (rw->num_tensors != lw->num_tensors) {
        mock_set_error("%s: the source cache has %u tensors and the destination %u; without layer ranges they must "
                       "be equal", fn, (unsigned)rw->num_tensors, (unsigned)lw->num_tensors);
        return LLM_PARAM_INVALID;
    }
    return LLM_SUCCESS;
}

lldd_status pull_src_len_check(const char *fn, uint64_t len, const cache_wire *rw)
{
    if (len > rw->stride) {
        mock_set_error("%s: %llu bytes per tensor are more than the source stride %llu", fn, (unsigned long long)len,
                       (unsigned long long)rw->stride);
        return LLM_PARAM_INVALID;
    }
    return LLM_SUCCESS;
}

/* Direct mode addresses the source batch with the local (destination) stride, as the
 * vendor does; where that runs past the source tensor the device reads out of bounds
 * (PR-6, guard). */
lldd_status pull_src_batch_start(const char *fn, uint64_t batch, const cache_wire *lw, const cache_wire *rw,
                                 uint64_t len, uint64_t *start)
{
    *start = 0;
    int past = __builtin_mul_overflow(batch, lw->stride, start);
    if (past || *start > rw->tensor_size || len > rw->tensor_size - *start) {
        mock_set_error("%s: source batch %llu addressed with the destination stride %llu starts at byte %llu; %llu "
                       "bytes from there run past the source tensor of %llu bytes (PR-6)", fn,
                       (unsigned long long)batch, (unsigned long long)lw->stride, (unsigned long long)*start,
                       (unsigned long long)len, (unsigned long long)rw->tensor_size);
        return LLM_PARAM_INVALID;
    }
    return LLM_SUCCESS;
}

lldd_status pull_src_block_checks(const char *fn, const uint64_t *sblk, size_t n, const cache_wire *rw,
                                  const cache_wire *lw)
{
    lldd_status st = check_blocks(fn, "src_blocks", sblk, n, rw->blocks, "source");
    if (st != LLM_SUCCESS)
        return st;
    if (rw->stride != lw->stride) {
        mock_set_error("%s: block sizes differ: source %llu bytes, destination %llu bytes (PR-13)", fn,
                       (unsigned long long)rw->stride, (unsigned long long)lw->stride);
        return LLM_PARAM_INVALID;
    }
    return LLM_SUCCESS;
}

lldd_status push_local_access_checks(const char *fn, const mlink *l, const cache_wire *lw, int hixl)
{
    if (!lw->remote_accessible) {
        mock_set_error("%s: the local cache %lld is not remote accessible", fn, (long long)lw->id);
        return LLM_PARAM_INVALID;
    }
    /* HIXL refuses a source its client never registered when the transfer starts, after
     * every check (docs/semantics.md E-11): each API's steps do it there */
    return hixl ? LLM_SUCCESS : pr32_check_local(fn, l, lw);
}

lldd_status push_dst_access_checks(const char *fn, const cache_wire *rw, const mlink *l, uint64_t cluster_id)
{
    if (!rw->remote_accessible) {
        mock_set_error("%s: the remote cache %lld is not remote accessible", fn, (long long)rw->id);
        return LLM_PARAM_INVALID;
    }
    return pr32_check_peer(fn, l, rw, cluster_id);
}

lldd_status push_layer_check(const char *fn, uint64_t layer, const cache_wire *w, uint32_t per_layer, int dst)
{
    if (layer >= w->num_tensors / per_layer) {
        mock_set_error("%s: %s layer %llu is out of range: the %s cache has %u tensors, %u per layer", fn,
                       dst ? "destination" : "source", (unsigned long long)layer, dst ? "remote" : "local",
                       (unsigned)w->num_tensors, (unsigned)per_layer);
        return LLM_PARAM_INVALID;
    }
    return LLM_SUCCESS;
}

lldd_status push_dst_shape_checks(const char *fn, int b2b, const cache_wire *lw, const cache_wire *rw,
                                  const uint64_t *dblk, size_t ndblk)
{
    lldd_status st;
    if (b2b && (st = check_blocks(fn, "dst_blocks", dblk, ndblk, rw->blocks, "remote")) != LLM_SUCCESS)
        return st;
    if (!b2b && !kind_has_batches(rw)) {
        mock_set_error("%s: the destination cache %lld is a blocks cache; a contiguous push needs batches (PR-15)",
                       fn, (long long)rw->id);
        return LLM_PARAM_INVALID;
    }
    if (b2b && !kind_has_blocks(rw)) {
        mock_set_error("%s: the destination cache %lld has no blocks (PR-15)", fn, (long long)rw->id);
        return LLM_PARAM_INVALID;
    }
    if (!b2b && lw->stride > rw->stride) {
        mock_set_error("%s: source batch larger than destination batch: %llu > %llu bytes (PR-14)", fn,
                       (unsigned long long)lw->stride, (unsigned long long)rw->stride);
        return LLM_PARAM_INVALID;
    }
    if (b2b && lw->stride != rw->stride) {
        mock_set_error("%s: block sizes differ: source %llu bytes, destination %llu bytes (PR-13)", fn,
                       (unsigned long long)lw->stride, (unsigned long long)rw->stride);
        return LLM_PARAM_INVALID;
    }
    if (b2b && (st = check_repeats(fn, "dst_blocks", dblk, ndblk, 1)) != LLM_SUCCESS)
        return st;
    return LLM_SUCCESS;
}

lldd_status push_src_shape_checks(const char *fn, const cache_wire *lw, uint32_t per_layer, int b2b, int need_batches,
                                  uint32_t src_batch, uint64_t batches, const uint64_t *sblk, size_t nsblk,
                                  size_t ndblk)
{
    if (lw->num_tensors % per_layer != 0) {
        mock_set_error("%s: tensor_num_per_layer %u must divide the local cache's %u tensors", fn,
                       (unsigned)per_layer, (unsigned)lw->num_tensors);
        return LLM_PARAM_INVALID;
    }
    if (!b2b && need_batches && !kind_has_batches(lw)) {
        mock_set_error("%s: the local cache %lld is a blocks cache; a contiguous push needs batches (PR-15)", fn,
                       (long long)lw->id);
        return LLM_PARAM_INVALID;
    }
    if (!b2b && src_batch >= batches) {
        mock_set_error("%s: src_batch_index %u is out of range: cache %lld has %llu batches", fn,
                       (unsigned)src_batch, (long long)lw->id, (unsigned long long)batches);
        return LLM_PARAM_INVALID;
    }
    /* the block lists are read last, as the vendor's layer-wise job reads them
     * (docs/semantics.md X-17): no source blocks is its cache-to-blocks form, whose block
     * size a push leaves 0 (the native API refuses an empty list before the link) */
    if (b2b && nsblk == 0) {
        mock_set_error("%s: src_blocks is empty: block_mem_size of a cache-to-blocks push must > 0", fn);
        return LLM_PARAM_INVALID;
    }
    if (b2b && !kind_has_blocks(lw)) {
        mock_set_error("%s: the local cache %lld has no blocks", fn, (long long)lw->id);
        return LLM_PARAM_INVALID;
    }
    if (b2b && nsblk != ndblk) {
        mock_set_error("%s: src_blocks has %zu entries and dst_blocks %zu", fn, nsblk, ndblk);
        return LLM_PARAM_INVALID;
    }
    return b2b ? check_blocks(fn, "src_blocks", sblk, nsblk, lw->blocks, "local") : LLM_SUCCESS;
}

/* ---------------------------------------------------------------------------------------------
 * enter and frame
 * ------------------------------------------------------------------------------------------ */

/* The first NULL argument of a transfer call, in parameter order. */
static const char *xfer_missing(const engine *e, const char *a_name, const void *a, const char *b_name,
                                const void *b, const uint64_t *src_blocks, size_t num_src_blocks,
                                const uint64_t *dst_blocks, size_t num_dst_blocks)
{
    return e == NULL ? "engine"
           : a == NULL ? a_name
           : b_name != NULL && b == NULL ? b_name
           : src_blocks == NULL && num_src_blocks > 0 ? "src_blocks (num_src_blocks > 0)"
           : dst_blocks == NULL && num_dst_blocks > 0 ? "dst_blocks (num_dst_blocks > 0)"
           : NULL;
}

lldd_status xfer_call_enter(engine *e, const char *fn, const char *a_name, const void *a, const char *b_name,
                            const void *b, const uint64_t *src_blocks, size_t num_src_blocks,
                            const uint64_t *dst_blocks, size_t num_dst_blocks)
{
    return engine_args_enter(e, fn, xfer_missing(e, a_name, a, b_name, b, src_blocks, num_src_blocks, dst_blocks,
                                                 num_dst_blocks));
}

lldd_status xfer_cache_call_enter(engine *e, const char *fn, const char *a_name, const void *a,
                                  const char *b_name, const void *b, const char *c_name, const lldd_cache *c,
                                  const uint64_t *src_blocks, size_t num_src_blocks, const uint64_t *dst_blocks,
                                  size_t num_dst_blocks)
{
    lldd_status st = engine_args_check(fn, xfer_missing(e, a_name, a, b_name, b, src_blocks, num_src_blocks,
                                                        dst_blocks, num_dst_blocks));
    if (st == LLM_SUCCESS)
        st = cache_arg_check(fn, c_name, c);
    return st != LLM_SUCCESS ? st : engine_enter(e, fn);
}

lldd_status xfer_run(engine *e, const char *fn, int64_t local_id, const char *local_name, xfer_steps steps,
                     void *arg)
{
    xfer_job j;
    memset(&j, 0, sizeof j);
    j.e = e;
    j.fn = fn;
    j.lc = cache_pin(e, local_id);
    if (j.lc == NULL) {
        mock_set_error("%s: %s %lld does not exist", fn, local_name, (long long)local_id);
        return LLM_KV_CACHE_NOT_EXIST;
    }
    lldd_status st = steps(&j, arg);
    if (j.xl.l != NULL) {
        peer_unpin(&j.xl, &j.pc[0]);
        peer_unpin(&j.xl, &j.pc[1]);
    }
    link_release(&j.xl);
    cache_unpin(e, j.lc);
    return st;
}

/* ---------------------------------------------------------------------------------------------
 * plans
 * ------------------------------------------------------------------------------------------ */

void plan_init(plan *p, int form, uint32_t s_base, uint32_t d_base, uint32_t pairs, const uint64_t *src_addrs,
               const uint64_t *dst_addrs)
{
    memset(p, 0, sizeof *p);
    p->form = form;
    p->s_base = s_base;
    p->d_base = d_base;
    p->pairs = pairs;
    p->src_addrs = src_addrs;
    p->dst_addrs = dst_addrs;
}

void plan_range(plan *p, uint64_t soff, uint64_t doff, uint64_t len)
{
    p->soff = soff;
    p->doff = doff;
    p->len = len;
}

void plan_blocks(plan *p, const uint64_t *sblk, const uint64_t *dblk, size_t nblk, uint64_t block)
{
    p->sblk = sblk;
    p->dblk = dblk;
    p->nblk = nblk;
    p->block = block;
}
