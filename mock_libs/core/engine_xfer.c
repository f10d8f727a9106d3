/* PullKvCache, PullKvBlocks, PushKvCache, PushKvBlocks: argument checks in the
 * order of docs/reference/cpp-api.md §6.10-6.11 and docs/reference/semantics.md §8.0, then the data plane.
 *
 * A transfer holds, in this order: a pin on its local cache, the link's transfer
 * lock (transfers over one link are serialized; unlink waits for them), and a pin
 * on the peer's cache, taken live for every transfer against the table copy of
 * semantics.md §9.7. With everything pinned, the plan (tensor pairs x runs, docs/reference/semantics.md §8) is
 * walked region by region without copying the block lists:
 *   same process      memmove between the two engines' memory;
 *   shared memory     memcpy between mappings: both sides in library memory, the peer's
 *                     arena chunks mapped here (engine_shared.c);
 *   another process   process_vm_readv/writev, up to IOV_MAX regions per call;
 *   neither allowed   READ/WRITE requests on the link's socket (engine_serve.c).
 * Every check finishes before the first byte moves, so a failed check changes
 * nothing (semantics.md §8.12). A multi-layer push moves the layers before the first failing
 * one and then reports that layer's failure, as the vendor's layer loop does.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>

#include "core/blocks.h"
#include "core/cache_table.h"
#include "core/engine.h"
#include "wire/links.h"
#include "base/mock_internal.h"
#include "wire/peer_id.h"
#include "wire/pub.h"
#include "wire/shared_map.h"
#include "core/transfers.h"
#include "wire/transport.h"

enum { DIRECT_REQUEST_ENTRIES = 131064, VM_BATCH = 1024 };

/* ---------------------------------------------------------------------------------------------
 * KvCacheExtParam (docs/reference/semantics.md §4.4, §5)
 * ------------------------------------------------------------------------------------------ */

typedef struct ext_norm {
    int has_range;       /* both pairs given (both first >= 0) */
    int64_t sf, ss, df, ds;
    uint32_t n;
} ext_norm;

static lldd_status check_ext(const char *fn, const lldd_ext_param *p, int push, uint32_t caller_tensors,
                             ext_norm *x)
{
    lldd_ext_param def = {-1, -1, -1, -1, 2, 0};
    if (p == NULL)
        p = &def;
    x->sf = p->src_layer_first;
    x->ss = p->src_layer_second;
    x->df = p->dst_layer_first;
    x->ds = p->dst_layer_second;
    x->n = p->tensor_num_per_layer;
    for (int side = 0; side < 2; side++) {
        int64_t f = side ? x->df : x->sf, s = side ? x->ds : x->ss;
        const char *name = side ? "dst_layer_range" : "src_layer_range";
        if (f < -1 || s < -1 || f > s) {
            mock_set_error("%s: ext_param.%s {%lld, %lld} is invalid: both members must be >= -1 and first <= second",
                           fn, name, (long long)f, (long long)s);
            return LLM_PARAM_INVALID;
        }
    }
    if (x->n == 0 || x->n > 255) {
        mock_set_error("%s: ext_param.tensor_num_per_layer %u is invalid; it must be in [1, 255] (a uint8_t in C++)",
                       fn, (unsigned)x->n);
        return LLM_PARAM_INVALID;
    }
    if (push && x->ss - x->sf != x->ds - x->df) {
        mock_set_error("%s: ext_param: src_layer_range {%lld, %lld} and dst_layer_range {%lld, %lld} span different "
                       "numbers of layers", fn, (long long)x->sf, (long long)x->ss, (long long)x->df, (long long)x->ds);
        return LLM_PARAM_INVALID;
    }
    if (push && x->sf == -1 && caller_tensors == 0) {
        mock_set_error("%s: src_cache.cache_desc.num_tensors is 0, so the default src_layer_range {-1, -1} selects no "
                       "layer; give the number of tensors or an explicit range", fn);
        return LLM_PARAM_INVALID;
    }
    /* lint: pairs the vendor's API accepts and then reads as "every layer" */
    for (int side = 0; side < 2; side++) {
        int64_t f = side ? x->df : x->sf, s = side ? x->ds : x->ss;
        if (f == -1 && s >= 0 &&
            mock_lint(11, "%s: ext_param.%s {-1, %lld} is neither a range nor the default {-1, -1} (PR-11)", fn,
                      side ? "dst_layer_range" : "src_layer_range", (long long)s))
            return LLM_PARAM_INVALID;
    }
    if ((x->sf == -1) != (x->df == -1) &&
        mock_lint(1, "%s: only one of src_layer_range and dst_layer_range is a range (PR-1)", fn))
        return LLM_PARAM_INVALID;
    /* a pull uses the pairs only when both are ranges; a push when its source is one
     * (a default destination then names layer 2^64 - 1, which the peer refuses) */
    x->has_range = push ? x->sf >= 0 : (x->sf >= 0 && x->df >= 0);
    return LLM_SUCCESS;
}

#define has_batches kind_has_batches
#define has_blocks kind_has_blocks

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

/* Step 5 of semantics.md §8.0: the link to `cluster`, locked for this transfer. */
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

/* The native transfers: shared where the peer's table is mapped. */
static lldd_status link_acquire(engine *e, const char *fn, uint64_t cluster, xlink *x)
{
    return link_acquire_ex(e, fn, cluster, x, ACQUIRE_SHARED);
}

/* A shared holder of the link about to use its request socket takes sock_mu (an
 * exclusive holder has the link to itself). */
static void link_sock(xlink *x)
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
        c->pins++;
        pc->w = c->w;
        pc->addrs = c->addrs;
        pc->pc = c;
        pc->pinned = 1;
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
    lldd_status st = link_ask(x, fn, &h, MSG_PIN_REPLY, deadline);
    if (st != LLM_SUCCESS)
        return st;
    link_note_table_copy(l, (int64_t)h.a, h.b);
    if (h.status == LLM_KV_CACHE_NOT_EXIST)
        return not_exist(fn, l->peer_cluster, id, (int64_t)h.a);
    if (h.status != LLM_SUCCESS || h.payload_len < sizeof pc->w)
        return link_timeout(x, fn, "the peer answered a lookup with status 0x%08X", (unsigned)h.status);
    return link_recv_pinned(x, fn, &h, deadline, pc, UINT64_MAX);
}

lldd_status link_ask(xlink *x, const char *fn, msg_hdr *h, uint16_t reply, int64_t deadline)
{
    int r = msg_send(x->l->req_fd, h, NULL, 0, deadline);
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

lldd_status link_recv_pinned(xlink *x, const char *fn, const msg_hdr *h, int64_t deadline, peer_cache *pc,
                             uint64_t tensor)
{
    int fd = x->l->req_fd;
    int r = h->payload_len < sizeof pc->w ? TP_CLOSED : tp_recv_all(fd, &pc->w, sizeof pc->w, deadline);
    uint64_t addr_bytes = (uint64_t)pc->w.num_tensors * sizeof(uint64_t);
    if (r == TP_OK && (pc->w.num_tensors > WIRE_MAX_TENSORS || h->payload_len - sizeof pc->w != addr_bytes ||
                       (tensor != UINT64_MAX && tensor >= pc->w.num_tensors)))
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
 * plans and regions (docs/reference/semantics.md §8.2, §8.3, §8.5, §8.6)
 * ------------------------------------------------------------------------------------------ */

typedef struct region {
    uint32_t st, dt;
    uint64_t soff, doff, len;
} region;

typedef struct region_iter {
    const plan *p;
    uint32_t i;
    size_t k;                  /* C2B: the chunk */
    run_iter runs;
    uint64_t s0, d0, rlen;
    int have_run;
} region_iter;

static void region_iter_init(region_iter *it, const plan *p)
{
    memset(it, 0, sizeof *it);
    it->p = p;
    if (p->form == PLAN_B2B)
        run_iter_init(&it->runs, p->sblk, p->dblk, p->nblk);
}

static uint32_t plan_src(const plan *p, uint32_t i)
{
    return p->smap != NULL ? (uint32_t)p->smap[i] : p->s_base + i;
}

static uint32_t plan_dst(const plan *p, uint32_t i)
{
    return p->dmap != NULL ? (uint32_t)p->dmap[i] : p->d_base + i;
}

/* B2B: runs outside, tensors inside, so that each run is found once; C2B: tensors
 * outside, chunks inside. */
static int region_next(region_iter *it, region *r)
{
    const plan *p = it->p;
    if (p->form == PLAN_C2C) {
        if (it->i >= p->pairs)
            return 0;
        r->st = plan_src(p, it->i);
        r->dt = plan_dst(p, it->i);
        r->soff = p->soff;
        r->doff = p->doff;
        r->len = p->len;
        it->i++;
        return 1;
    }
    if (p->form == PLAN_C2B) {
        if (it->k >= p->nblk) {
            it->k = 0;
            it->i++;
        }
        if (it->i >= p->pairs || p->nblk == 0)
            return 0;
        uint64_t start = (uint64_t)it->k * p->block;
        r->st = plan_src(p, it->i);
        r->dt = plan_dst(p, it->i);
        r->soff = p->soff + start;
        r->doff = p->doff + p->dblk[it->k] * p->block;
        r->len = p->len - start < p->block ? p->len - start : p->block;
        it->k++;
        return 1;
    }
    if (!it->have_run || it->i >= p->pairs) {
        if (!run_next(&it->runs, &it->s0, &it->d0, &it->rlen))
            return 0;
        it->have_run = 1;
        it->i = 0;
    }
    r->st = plan_src(p, it->i);
    r->dt = plan_dst(p, it->i);
    r->soff = p->soff + it->s0 * p->block;
    r->doff = p->doff + it->d0 * p->block;
    r->len = it->rlen * p->block;
    it->i++;
    return 1;
}

static void *src_ptr(const plan *p, const region *r)
{
    return (char *)(uintptr_t)p->src_addrs[r->st] + r->soff;
}

static void *dst_ptr(const plan *p, const region *r)
{
    return (char *)(uintptr_t)p->dst_addrs[r->dt] + r->doff;
}

/* Large transfers are mostly many mid-sized regions (one per block run and tensor),
 * each below the size at which memcpy itself switches to non-temporal stores; the
 * destination is not read back soon, so streaming stores save the read-for-ownership
 * traffic (about a third more bandwidth for scattered 16 KiB blocks). Small
 * transfers keep the destination in cache. */
enum { STREAM_MIN_TOTAL = 4 << 20, STREAM_MIN_REGION = 4096 };

#if defined(__SSE2__)
#include <emmintrin.h>

static void stream_copy(char *d, const char *s, size_t n)
{
    size_t head = (16 - ((uintptr_t)d & 15)) & 15;
    if (head > n)
        head = n;
    memcpy(d, s, head);
    d += head;
    s += head;
    n -= head;
    size_t i = 0;
    for (; i + 64 <= n; i += 64) {
        __m128i a = _mm_loadu_si128((const __m128i *)(const void *)(s + i));
        __m128i b = _mm_loadu_si128((const __m128i *)(const void *)(s + i + 16));
        __m128i c = _mm_loadu_si128((const __m128i *)(const void *)(s + i + 32));
        __m128i e = _mm_loadu_si128((const __m128i *)(const void *)(s + i + 48));
        _mm_stream_si128((__m128i *)(void *)(d + i), a);
        _mm_stream_si128((__m128i *)(void *)(d + i + 16), b);
        _mm_stream_si128((__m128i *)(void *)(d + i + 32), c);
        _mm_stream_si128((__m128i *)(void *)(d + i + 48), e);
    }
    memcpy(d + i, s + i, n - i);
}
#define HAVE_STREAM_COPY 1
#else
#define HAVE_STREAM_COPY 0
#endif

/* Bytes the plan moves (saturated: only compared with a threshold). */
static uint64_t plan_bytes(const plan *p)
{
    uint64_t per_pair, total;
    if (p->form != PLAN_B2B)
        per_pair = p->len;
    else if (__builtin_mul_overflow((uint64_t)p->nblk, p->block, &per_pair))
        return UINT64_MAX;
    return __builtin_mul_overflow(per_pair, (uint64_t)p->pairs, &total) ? UINT64_MAX : total;
}

static void move_local(const plan *p)
{
    region_iter it;
    region r;
    region_iter_init(&it, p);
    int stream = HAVE_STREAM_COPY && plan_bytes(p) >= STREAM_MIN_TOTAL;
    while (region_next(&it, &r)) {
        char *d = dst_ptr(p, &r);
        const char *s = src_ptr(p, &r);
        size_t n = (size_t)r.len;
#if HAVE_STREAM_COPY
        /* streaming copies run forwards: only for regions that do not overlap */
        if (stream && n >= STREAM_MIN_REGION && (d + n <= s || s + n <= d)) {
            stream_copy(d, s, n);
            continue;
        }
#endif
        memmove(d, s, n);
    }
#if HAVE_STREAM_COPY
    if (stream)
        _mm_sfence();
#endif
}

/* process_vm_readv (pull) / process_vm_writev (push); 0 or -errno. The peer's pidfd is
 * checked before every call and after the last: a peer that has exited fails the
 * transfer with -ESRCH, so its pid, once reused, is never written to (up to the
 * instant between a check and the call; docs/security.md §2.2). */
static int move_vm(pid_t pid, int pidfd, const plan *p, int pull, struct iovec *liov, struct iovec *riov)
{
    region_iter it;
    region r;
    region_iter_init(&it, p);
    for (;;) {
        size_t n = 0;
        while (n < VM_BATCH && region_next(&it, &r)) {
            void *s = src_ptr(p, &r), *d = dst_ptr(p, &r);
            liov[n].iov_base = pull ? d : s;
            riov[n].iov_base = pull ? s : d;
            liov[n].iov_len = riov[n].iov_len = (size_t)r.len;
            n++;
        }
        if (n == 0)
            return pidfd_alive(pidfd) ? 0 : -ESRCH;
        size_t k = 0;
        while (k < n) {
            if (!pidfd_alive(pidfd))
                return -ESRCH;
            ssize_t got = pull ? process_vm_readv(pid, liov + k, n - k, riov + k, n - k, 0)
                               : process_vm_writev(pid, liov + k, n - k, riov + k, n - k, 0);
            if (got < 0) {
                if (errno == EINTR)
                    continue;
                return -errno;
            }
            if (got == 0)
                return -EFAULT;
            size_t g = (size_t)got;
            while (g > 0) {
                if (g >= liov[k].iov_len) {
                    g -= liov[k].iov_len;
                    k++;
                } else {
                    liov[k].iov_base = (char *)liov[k].iov_base + g;
                    riov[k].iov_base = (char *)riov[k].iov_base + g;
                    liov[k].iov_len -= g;
                    riov[k].iov_len -= g;
                    g = 0;
                }
            }
        }
    }
}

/* Where a region's peer side lies in this process's mappings of the peer's arena
 * (NULL: not mapped), and whether its own side lies in live library memory of this
 * process (`own` caches the last allocation found, so a list of blocks asks once). */
typedef struct own_range {
    uintptr_t lo, hi;
} own_range;

static int own_library_memory(own_range *own, uintptr_t addr, uint64_t len)
{
    if (!(addr >= own->lo && addr < own->hi && len <= own->hi - addr)) {
        mock_alloc_info a;
        if (!mock_acl_lookup(addr, &a) || !a.live || addr - a.base >= a.size || len > a.size - (addr - a.base))
            return 0;
        own->lo = a.base;
        own->hi = a.base + a.size;
    }
    return 1;
}

/* 1 if every region's peer side lies in a mapped chunk of the peer and its own side in
 * live library memory. */
static int shared_covers(mlink *l, const plan *p, int pull)
{
    region_iter it;
    region r;
    own_range own = {0, 0};
    region_iter_init(&it, p);
    while (region_next(&it, &r)) {
        uintptr_t s = (uintptr_t)src_ptr(p, &r), d = (uintptr_t)dst_ptr(p, &r);
        if (link_shared_ptr(l, pull ? s : d, r.len) == NULL || !own_library_memory(&own, pull ? d : s, r.len))
            return 0;
    }
    return 1;
}

/* The shared path (docs/security.md §2.7): both sides in library memory, the peer's
 * mapped here: copies between the mappings. 1 moved, 0 not applicable (nothing moved),
 * -ESRCH the peer process is gone (checked before and after, as for process_vm: its
 * memory outlives it in our mapping, and a dead peer must fail the transfer). */
static int copy_shared(mlink *l, const plan *p, int pull);

static int move_shared(mlink *l, const plan *p, int pull)
{
    if (l->peer_id_channel[0] == '\0')
        return 0;
    pthread_rwlock_rdlock(&l->map_rw);
    int covered = shared_covers(l, p, pull);
    if (!covered) {
        pthread_rwlock_unlock(&l->map_rw);
        if (!link_map_refresh(l))
            return 0;
        pthread_rwlock_rdlock(&l->map_rw);
        covered = shared_covers(l, p, pull);
    }
    int rc = !covered ? 0 : !pidfd_alive(l->peer_pidfd) ? -ESRCH : copy_shared(l, p, pull);
    pthread_rwlock_unlock(&l->map_rw);
    return rc;
}

/* move_shared's copy; map_rw held shared. */
static int copy_shared(mlink *l, const plan *p, int pull)
{
    region_iter it;
    region r;
    region_iter_init(&it, p);
#if HAVE_STREAM_COPY
    int stream = plan_bytes(p) >= STREAM_MIN_TOTAL;
#endif
    while (region_next(&it, &r)) {
        char *s = src_ptr(p, &r), *d = dst_ptr(p, &r);
        if (pull)
            s = link_shared_ptr(l, (uintptr_t)s, r.len);
        else
            d = link_shared_ptr(l, (uintptr_t)d, r.len);
        size_t n = (size_t)r.len;
#if HAVE_STREAM_COPY
        if (stream && n >= STREAM_MIN_REGION) {
            stream_copy(d, s, n);
            continue;
        }
#endif
        memcpy(d, s, n);
    }
#if HAVE_STREAM_COPY
    if (stream)
        _mm_sfence();
#endif
    return pidfd_alive(l->peer_pidfd) ? 1 : -ESRCH;
}

/* The socket path: READ (pull) or WRITE (push) requests of up to WIRE_MAX_REGIONS
 * ranges of the pinned peer cache. */
static lldd_status move_socket(xlink *x, const char *fn, const plan *p, int pull, int64_t peer_cache_id,
                               struct iovec *liov, wire_region *wr)
{
    mlink *l = x->l;
    uint32_t timeout = x->e->sync_timeout_ms;
    region_iter it;
    region r;
    region_iter_init(&it, p);
    for (;;) {
        size_t n = 0;
        uint64_t total = 0;
        while (n < WIRE_MAX_REGIONS && region_next(&it, &r)) {
            memset(&wr[n], 0, sizeof wr[n]);
            wr[n].tensor = pull ? r.st : r.dt;
            wr[n].offset = pull ? r.soff : r.doff;
            wr[n].len = r.len;
            liov[n + 2].iov_base = pull ? dst_ptr(p, &r) : src_ptr(p, &r);
            liov[n + 2].iov_len = (size_t)r.len;
            total += r.len;
            n++;
        }
        if (n == 0)
            return LLM_SUCCESS;
        msg_hdr h;
        msg_init(&h, pull ? MSG_READ : MSG_WRITE);
        h.a = (uint64_t)peer_cache_id;
        h.count = (uint32_t)n;
        h.payload_len = n * sizeof *wr + (pull ? 0 : total);
        liov[0].iov_base = &h;
        liov[0].iov_len = sizeof h;
        liov[1].iov_base = wr;
        liov[1].iov_len = n * sizeof *wr;
        int64_t deadline = tp_deadline(timeout);
        int rc;
        if (pull) {
            struct iovec head[2] = {liov[0], liov[1]};
            rc = tp_sendv(l->req_fd, head, 2, deadline, 0);
            if (rc == TP_OK)
                rc = msg_recv_hdr(l->req_fd, &h, deadline);
            if (rc == TP_OK && (h.type != MSG_READ_REPLY || (h.status == 0 && h.payload_len != total)))
                rc = TP_CLOSED;
            if (rc == TP_OK && h.status == 0)
                rc = tp_recvv(l->req_fd, liov + 2, n, deadline, timeout);
        } else {
            rc = tp_sendv(l->req_fd, liov, n + 2, deadline, timeout);
            if (rc == TP_OK)
                rc = msg_recv_hdr(l->req_fd, &h, tp_deadline(timeout));
            if (rc == TP_OK && h.type != MSG_WRITE_REPLY)
                rc = TP_CLOSED;
        }
        if (rc == TP_TIMEOUT)
            return link_timeout(x, fn, "the transfer did not finish within llm.SyncKvCacheWaitTime = %u ms", timeout);
        if (rc != TP_OK)
            return link_timeout(x, fn, "the peer's side of the link is gone (PR-31)");
        if (h.status != LLM_SUCCESS)
            return link_timeout(x, fn, "the peer refused a data request (status 0x%08X)", (unsigned)h.status);
    }
}

static lldd_status move_now(xlink *x, const char *fn, const plan *p, int pull, int64_t peer_cache_id)
{
    mlink *l = x->l;
    if (l->same_process) {
        move_local(p);
        atomic_store(&l->last_path, LLDD_MOCK_PATH_SAME_PROCESS);
        return LLM_SUCCESS;
    }
    if (atomic_load(&l->vm_ok)) {
        int rc = move_shared(l, p, pull);
        if (rc == -ESRCH)
            return link_timeout(x, fn, "the peer process is gone (PR-31)");
        if (rc == 1) {
            atomic_store(&l->last_path, LLDD_MOCK_PATH_SHARED);
            return LLM_SUCCESS;
        }
    }
    struct iovec *liov = malloc((WIRE_MAX_REGIONS + 2) * sizeof *liov);
    struct iovec *riov = malloc(VM_BATCH * sizeof *riov);
    wire_region *wr = malloc(WIRE_MAX_REGIONS * sizeof *wr);
    lldd_status st = LLM_SUCCESS;
    if (liov == NULL || riov == NULL || wr == NULL) {
        mock_set_error("%s: out of host memory", fn);
        st = LLM_FAILED;
        goto out;
    }
    if (atomic_load(&l->vm_ok)) {
        int rc = move_vm(l->peer_pid, l->peer_pidfd, p, pull, liov, riov);
        if (rc == 0) {
            atomic_store(&l->last_path, LLDD_MOCK_PATH_PROCESS_VM);
            goto out;
        }
        if (rc == -ESRCH) {
            st = link_timeout(x, fn, "the peer process is gone (PR-31)");
            goto out;
        }
        if (rc != -EPERM && rc != -ENOSYS && rc != -EACCES) {
            mock_set_error("%s: %s failed: %s (a registered address is not mapped in its process)", fn,
                           pull ? "process_vm_readv" : "process_vm_writev", strerror(-rc));
            st = LLM_FAILED;
            goto out;
        }
        atomic_store(&l->vm_ok, 0); /* not allowed after all: move the bytes over the socket */
    }
    link_sock(x);
    st = move_socket(x, fn, p, pull, peer_cache_id, liov, wr);
    if (st == LLM_SUCCESS)
        atomic_store(&l->last_path, LLDD_MOCK_PATH_SOCKET);
out:
    free(liov);
    free(riov);
    free(wr);
    return st;
}

/* ---------------------------------------------------------------------------------------------
 * the link model (include/lldd/mock.h: lldd_mock_set_link_pace)
 * ------------------------------------------------------------------------------------------ */

static int64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* Sleeps until `until` (now_us time), in steps short enough that finalize is not kept
 * waiting: a finalize sets e->stopping and the sleep ends. */
static void sleep_until_us(engine *e, int64_t until)
{
    for (;;) {
        int64_t left = until - now_us();
        if (left <= 0 || atomic_load(&e->stopping))
            return;
        if (left > 5000)
            left = 5000;
        struct timespec ts = {0, (long)left * 1000L};
        nanosleep(&ts, NULL);
    }
}

/* The microseconds a transfer of `bytes` over the link to `cluster` takes in the link
 * model (0: the link is not paced). Saturates rather than overflows. */
static uint64_t paced_us(engine *e, uint64_t cluster, uint64_t bytes)
{
    pthread_mutex_lock(&e->mu);
    uint64_t bw = e->pace_bw, lat = e->pace_lat_us;
    for (uint32_t i = 0; i < e->pace_count; i++) {
        if (e->paces[i].cluster == cluster) {
            bw = e->paces[i].bw;
            lat = e->paces[i].lat_us;
        }
    }
    pthread_mutex_unlock(&e->mu);
    uint64_t us = lat;
    if (bw > 0) {
        unsigned __int128 wire = ((unsigned __int128)bytes * 1000000u + bw - 1) / bw;
        us = wire > UINT64_MAX - lat ? UINT64_MAX : lat + (uint64_t)wire;
    }
    return us;
}

/* Moves the plan's bytes, then waits out the rest of the link model's time for them. */
lldd_status move_bytes(xlink *x, const char *fn, const plan *p, int pull, int64_t peer_cache_id)
{
    if (p->pairs == 0)
        return LLM_SUCCESS;
    int64_t start = now_us();
    uint64_t bytes = plan_bytes(p);
    uint64_t need = paced_us(x->e, x->l->peer_cluster, bytes);
    uint64_t wait_us = (uint64_t)x->e->sync_timeout_ms * 1000u;
    if (need > wait_us) {
        /* the device would still be moving when the wait ends: a timeout, as for a slow peer */
        sleep_until_us(x->e, start + (int64_t)wait_us);
        return link_timeout(x, fn, "the link model needs %llu us for %llu bytes, more than "
                            "llm.SyncKvCacheWaitTime = %u ms", (unsigned long long)need,
                            (unsigned long long)bytes, (unsigned)x->e->sync_timeout_ms);
    }
    lldd_status st = move_now(x, fn, p, pull, peer_cache_id);
    if (st != LLM_SUCCESS)
        return st;
    mock_bytes_moved_add(bytes);
    if (need > 0)
        sleep_until_us(x->e, start + (int64_t)need);
    return LLM_SUCCESS;
}

/* ---------------------------------------------------------------------------------------------
 * pulls
 * ------------------------------------------------------------------------------------------ */

typedef struct pull_args {
    const lldd_cache_index *src;
    int64_t dst_id;
    int b2b;
    uint32_t batch_index;
    int64_t size;
    const uint64_t *sblk, *dblk;
    size_t nblk;
    ext_norm x;
} pull_args;

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

/* What the steps of one native pull find for the later ones. */
typedef struct pull_found {
    uint64_t pairs, s_base, d_base;  /* tensor pairs and the ranges' first tensors (step 4) */
    const cache_wire *rw;            /* the source (step 7) */
    uint64_t len, soff;              /* C2C: bytes per tensor, where the source batch starts (step 9) */
} pull_found;

/* Step 4: the local cache's batch, kind and size, and the layer ranges. */
static lldd_status pull_local_checks(const char *fn, const pull_args *a, const cache_wire *lw, pull_found *f)
{
    const ext_norm *x = &a->x;
    if (!a->b2b) {
        if (a->batch_index >= lw->batches) {
            mock_set_error("%s: batch_index %u is out of range: cache %lld has %llu batches", fn,
                           (unsigned)a->batch_index, (long long)lw->id, (unsigned long long)lw->batches);
            return LLM_PARAM_INVALID;
        }
        if (!has_batches(lw)) {
            mock_set_error("%s: request expect local cache is non-blocks: cache %lld is a blocks cache", fn,
                           (long long)lw->id);
            return LLM_PARAM_INVALID;
        }
        if (a->size > 0 && (uint64_t)a->size > lw->stride) {
            mock_set_error("%s: size %lld is larger than the destination stride %llu", fn, (long long)a->size,
                           (unsigned long long)lw->stride);
            return LLM_PARAM_INVALID;
        }
    } else if (!has_blocks(lw)) {
        mock_set_error("%s: request expect local cache is blocks: cache %lld has no blocks", fn, (long long)lw->id);
        return LLM_PARAM_INVALID;
    }
    /* no upper bound: without a range tensor_num_per_layer is not used (PR-3, as the vendor) */
    if (x->has_range && lw->num_tensors % x->n != 0) {
        mock_set_error("%s: with a layer range, tensor_num_per_layer %u must divide the local cache's %u tensors", fn,
                       (unsigned)x->n, (unsigned)lw->num_tensors);
        return LLM_PARAM_INVALID;
    }
    f->pairs = lw->num_tensors;
    f->s_base = 0;
    f->d_base = 0;
    if (x->has_range) {
        uint64_t dcount = (uint64_t)(x->ds - x->df + 1) * x->n, scount = (uint64_t)(x->ss - x->sf + 1) * x->n;
        if ((uint64_t)(x->ds + 1) * x->n > lw->num_tensors) {
            mock_set_error("%s: dst_layer_range {%lld, %lld} selects tensors up to %llu, but the local cache has %u",
                           fn, (long long)x->df, (long long)x->ds, (unsigned long long)((x->ds + 1) * x->n - 1),
                           (unsigned)lw->num_tensors);
            return LLM_PARAM_INVALID;
        }
        if (scount != dcount) {
            mock_set_error("%s: src_layer_range selects %llu tensors and dst_layer_range %llu", fn,
                           (unsigned long long)scount, (unsigned long long)dcount);
            return LLM_PARAM_INVALID;
        }
        f->pairs = dcount;
        f->s_base = (uint64_t)x->sf * x->n;
        f->d_base = (uint64_t)x->df * x->n;
    }
    return LLM_SUCCESS;
}

/* Step 6: the destination blocks and the request's size in entries. */
static lldd_status pull_request_checks(const char *fn, const pull_args *a, const cache_wire *lw, const pull_found *f)
{
    lldd_status st;
    uint64_t runs = 1;
    if (a->b2b) {
        if ((st = check_repeats(fn, "dst_blocks", a->dblk, a->nblk, 1)) != LLM_SUCCESS)
            return st;
        if ((st = check_blocks(fn, "dst_blocks", a->dblk, a->nblk, lw->blocks, "local")) != LLM_SUCCESS)
            return st;
        runs = count_runs(a->sblk, a->dblk, a->nblk);
    }
    if (f->pairs + 2 * runs > DIRECT_REQUEST_ENTRIES) {
        mock_set_error("%s: the request has %llu entries (%llu tensors + 2 x %llu runs), over the direct-mode limit "
                       "of %d", fn, (unsigned long long)(f->pairs + 2 * runs), (unsigned long long)f->pairs,
                       (unsigned long long)runs, DIRECT_REQUEST_ENTRIES);
        return LLM_PARAM_INVALID;
    }
    return LLM_SUCCESS;
}

/* Step 7: the source, pinned, and its batch index. */
static lldd_status pull_source(xlink *xl, const char *fn, const pull_args *a, peer_cache *pc, pull_found *f)
{
    lldd_status st = peer_pin(xl, fn, a->src->cache_id, pc);
    if (st != LLM_SUCCESS)
        return st;
    const cache_wire *rw = f->rw = &pc->w;
    if (!a->b2b && a->src->batch_index >= rw->batches) {
        mock_set_error("%s: src_cache_index.batch_index %u is out of range: cache %lld on cluster %llu has %llu "
                       "batches (PR-6)", fn, (unsigned)a->src->batch_index, (long long)rw->id,
                       (unsigned long long)a->src->cluster_id, (unsigned long long)rw->batches);
        return LLM_KV_CACHE_NOT_EXIST;
    }
    return LLM_SUCCESS;
}

/* Step 8: remote access and the caches' registration times (PR-32). */
static lldd_status pull_access_checks(const xlink *xl, const char *fn, const pull_args *a, const cache_wire *lw,
                                      const cache_wire *rw)
{
    lldd_status st;
    if (!rw->remote_accessible || !lw->remote_accessible) {
        mock_set_error("%s: the %s cache is not remote accessible", fn, !rw->remote_accessible ? "remote" : "local");
        return LLM_PARAM_INVALID;
    }
    if ((st = pr32_check_local(fn, xl->l, lw)) != LLM_SUCCESS)
        return st;
    return pr32_check_peer(fn, xl->l, rw, a->src->cluster_id);
}

/* Step 9: the source's kind, tensors, stride and blocks. */
static lldd_status pull_source_checks(const char *fn, const pull_args *a, const cache_wire *lw, pull_found *f)
{
    const ext_norm *x = &a->x;
    const cache_wire *rw = f->rw;
    lldd_status st;
    if (!a->b2b && !has_batches(rw)) {
        mock_set_error("%s: the source cache %lld is a blocks cache; a contiguous pull needs batches (PR-15)", fn,
                       (long long)rw->id);
        return LLM_PARAM_INVALID;
    }
    if (a->b2b && !has_blocks(rw)) {
        mock_set_error("%s: the source cache %lld has no blocks (PR-15)", fn, (long long)rw->id);
        return LLM_PARAM_INVALID;
    }
    if (x->has_range && (uint64_t)(x->ss + 1) * x->n > rw->num_tensors) {
        mock_set_error("%s: src_layer_range {%lld, %lld} selects tensors up to %llu, but the source cache has %u "
                       "(PR-12)", fn, (long long)x->sf, (long long)x->ss, (unsigned long long)((x->ss + 1) * x->n - 1),
                       (unsigned)rw->num_tensors);
        return LLM_PARAM_INVALID;
    }
    if (!x->has_range && rw->num_tensors != lw->num_tensors) {
        mock_set_error("%s: the source cache has %u tensors and the destination %u; without layer ranges they must "
                       "be equal", fn, (unsigned)rw->num_tensors, (unsigned)lw->num_tensors);
        return LLM_PARAM_INVALID;
    }
    uint64_t len = a->size > 0 ? (uint64_t)a->size : lw->stride;
    if (!a->b2b && len > rw->stride) {
        mock_set_error("%s: %llu bytes per tensor are more than the source stride %llu", fn, (unsigned long long)len,
                       (unsigned long long)rw->stride);
        return LLM_PARAM_INVALID;
    }
    /* Direct mode addresses the source batch with the local (destination) stride, as the
     * vendor does; where that runs past the source tensor the device reads out of bounds
     * (PR-6, guard). */
    uint64_t soff = 0;
    int past = __builtin_mul_overflow((uint64_t)a->src->batch_index, lw->stride, &soff);
    if (!a->b2b && (past || soff > rw->tensor_size || len > rw->tensor_size - soff)) {
        mock_set_error("%s: source batch %u addressed with the destination stride %llu starts at byte %llu; %llu "
                       "bytes from there run past the source tensor of %llu bytes (PR-6)", fn,
                       (unsigned)a->src->batch_index, (unsigned long long)lw->stride, (unsigned long long)soff,
                       (unsigned long long)len, (unsigned long long)rw->tensor_size);
        return LLM_PARAM_INVALID;
    }
    if (a->b2b) {
        if ((st = check_blocks(fn, "src_blocks", a->sblk, a->nblk, rw->blocks, "source")) != LLM_SUCCESS)
            return st;
        if (rw->stride != lw->stride) {
            mock_set_error("%s: block sizes differ: source %llu bytes, destination %llu bytes (PR-13)", fn,
                           (unsigned long long)rw->stride, (unsigned long long)lw->stride);
            return LLM_PARAM_INVALID;
        }
    }
    f->len = len;
    f->soff = soff;
    return LLM_SUCCESS;
}

/* Step 10: the bytes. */
static lldd_status pull_move(xlink *xl, const char *fn, const pull_args *a, const mcache *lc, const peer_cache *pc,
                             const pull_found *f)
{
    const cache_wire *lw = &lc->w;
    plan p;
    memset(&p, 0, sizeof p);
    p.form = a->b2b ? PLAN_B2B : PLAN_C2C;
    p.s_base = (uint32_t)f->s_base;
    p.d_base = (uint32_t)f->d_base;
    p.pairs = (uint32_t)f->pairs;
    p.src_addrs = pc->addrs;
    p.dst_addrs = lc->addrs;
    p.soff = a->b2b ? 0 : f->soff;
    p.doff = a->b2b ? 0 : (uint64_t)a->batch_index * lw->stride;
    p.len = f->len;
    p.sblk = a->sblk;
    p.dblk = a->dblk;
    p.nblk = a->nblk;
    p.block = lw->stride;
    return move_bytes(xl, fn, &p, 1, f->rw->id);
}

/* Steps 4 to 10 of a native pull (semantics.md §8.0), each a function above, in this order. */
static lldd_status pull_checked(engine *e, const char *fn, const pull_args *a, mcache *lc, xlink *xl, peer_cache *pc)
{
    const cache_wire *lw = &lc->w;
    pull_found f;
    memset(&f, 0, sizeof f);
    lldd_status st;
    if ((st = pull_local_checks(fn, a, lw, &f)) != LLM_SUCCESS ||
        (st = link_acquire(e, fn, a->src->cluster_id, xl)) != LLM_SUCCESS ||
        (st = pull_request_checks(fn, a, lw, &f)) != LLM_SUCCESS ||
        (st = pull_source(xl, fn, a, pc, &f)) != LLM_SUCCESS ||
        (st = pull_access_checks(xl, fn, a, lw, f.rw)) != LLM_SUCCESS ||
        (st = pull_source_checks(fn, a, lw, &f)) != LLM_SUCCESS)
        return st;
    return pull_move(xl, fn, a, lc, pc, &f);
}

static lldd_status do_pull(engine *e, const char *fn, const pull_args *a)
{
    if (a->src->cluster_id == e->cluster_id) {
        mock_set_error("%s: src_cache_index.cluster_id %llu is this engine's own cluster; pull from a peer", fn,
                       (unsigned long long)a->src->cluster_id);
        return LLM_PARAM_INVALID;
    }
    mcache *lc = cache_pin(e, a->dst_id);
    if (lc == NULL) {
        mock_set_error("%s: dst_cache.cache_id %lld does not exist", fn, (long long)a->dst_id);
        return LLM_KV_CACHE_NOT_EXIST;
    }
    xlink xl;
    peer_cache pc;
    memset(&xl, 0, sizeof xl);
    memset(&pc, 0, sizeof pc);
    lldd_status st = pull_checked(e, fn, a, lc, &xl, &pc);
    if (xl.l != NULL)
        peer_unpin(&xl, &pc);
    link_release(&xl);
    cache_unpin(e, lc);
    return st;
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

/* The entry checks of xfer_call_enter before engine_enter. */
static lldd_status xfer_args_check(engine *e, const char *fn, const char *a_name, const void *a,
                                   const char *b_name, const void *b, const uint64_t *src_blocks,
                                   size_t num_src_blocks, const uint64_t *dst_blocks, size_t num_dst_blocks)
{
    uint32_t code;
    if (mock_fault_take(fn, &code))
        return code;
    const char *missing = e == NULL ? "engine"
                          : a == NULL ? a_name
                          : b_name != NULL && b == NULL ? b_name
                          : src_blocks == NULL && num_src_blocks > 0 ? "src_blocks (num_src_blocks > 0)"
                          : dst_blocks == NULL && num_dst_blocks > 0 ? "dst_blocks (num_dst_blocks > 0)"
                          : NULL;
    if (missing != NULL) {
        mock_set_error("%s: %s must not be NULL", fn, missing);
        return LLM_PARAM_INVALID;
    }
    return LLM_SUCCESS;
}

lldd_status xfer_call_enter(engine *e, const char *fn, const char *a_name, const void *a, const char *b_name,
                            const void *b, const uint64_t *src_blocks, size_t num_src_blocks,
                            const uint64_t *dst_blocks, size_t num_dst_blocks)
{
    lldd_status st = xfer_args_check(e, fn, a_name, a, b_name, b, src_blocks, num_src_blocks, dst_blocks,
                                     num_dst_blocks);
    return st != LLM_SUCCESS ? st : engine_enter(e, fn);
}

lldd_status xfer_cache_call_enter(engine *e, const char *fn, const char *a_name, const void *a,
                                  const char *b_name, const void *b, const char *c_name, const lldd_cache *c,
                                  const uint64_t *src_blocks, size_t num_src_blocks, const uint64_t *dst_blocks,
                                  size_t num_dst_blocks)
{
    lldd_status st = xfer_args_check(e, fn, a_name, a, b_name, b, src_blocks, num_src_blocks, dst_blocks,
                                     num_dst_blocks);
    if (st == LLM_SUCCESS)
        st = cache_arg_check(fn, c_name, c);
    return st != LLM_SUCCESS ? st : engine_enter(e, fn);
}

lldd_status xfer_pull_cache(engine *e, const char *fn, const lldd_cache_index *src_cache_index,
                            const lldd_cache *dst_cache, uint32_t batch_index, int64_t size,
                            const lldd_ext_param *ext_param)
{
    lldd_status st;
    pull_args a;
    memset(&a, 0, sizeof a);
    if (size != -1 && size <= 0) {
        mock_set_error("%s: size %lld must be -1 or > 0", fn, (long long)size);
        st = LLM_PARAM_INVALID;
    } else if ((st = check_ext(fn, ext_param, 0, 0, &a.x)) == LLM_SUCCESS) {
        a.src = src_cache_index;
        a.dst_id = dst_cache->cache_id;
        a.batch_index = batch_index;
        a.size = size;
        st = do_pull(e, fn, &a);
    }
    return st;
}

lldd_status xfer_pull_blocks(engine *e, const char *fn, const lldd_cache_index *src_cache_index,
                             const lldd_cache *dst_cache, const uint64_t *src_blocks, size_t num_src_blocks,
                             const uint64_t *dst_blocks, size_t num_dst_blocks, const lldd_ext_param *ext_param)
{
    lldd_status st;
    pull_args a;
    memset(&a, 0, sizeof a);
    if (src_cache_index->batch_index != 0) {
        mock_set_error("%s: src_cache_index.batch_index %u must be 0 for a block pull", fn,
                       (unsigned)src_cache_index->batch_index);
        st = LLM_PARAM_INVALID;
    } else if ((st = check_ext(fn, ext_param, 0, 0, &a.x)) != LLM_SUCCESS) {
        /* message set */
    } else if (num_src_blocks == 0) {
        mock_set_error("%s: src_blocks is empty: pull from non-block cache is not supported yet", fn);
        st = LLM_PARAM_INVALID;
    } else if (num_src_blocks != num_dst_blocks) {
        mock_set_error("%s: src_blocks has %zu entries and dst_blocks %zu", fn, num_src_blocks, num_dst_blocks);
        st = LLM_PARAM_INVALID;
    } else {
        a.src = src_cache_index;
        a.dst_id = dst_cache->cache_id;
        a.b2b = 1;
        a.size = -1;
        a.sblk = src_blocks;
        a.dblk = dst_blocks;
        a.nblk = num_src_blocks;
        st = do_pull(e, fn, &a);
    }
    return st;
}

/* ---------------------------------------------------------------------------------------------
 * pushes
 * ------------------------------------------------------------------------------------------ */

typedef struct push_args {
    const lldd_cache *src;
    const lldd_cache_index *dst;
    int b2b;
    uint32_t src_batch;
    const uint64_t *sblk, *dblk;
    size_t nblk;
    ext_norm x;
} push_args;

lldd_status push_dst_access_checks(const char *fn, const cache_wire *rw, const mlink *l, uint64_t cluster_id)
{
    if (!rw->remote_accessible) {
        mock_set_error("%s: the remote cache %lld is not remote accessible", fn, (long long)rw->id);
        return LLM_PARAM_INVALID;
    }
    return pr32_check_peer(fn, l, rw, cluster_id);
}

lldd_status push_dst_shape_checks(const char *fn, int b2b, const cache_wire *lw, const cache_wire *rw,
                                  const uint64_t *dblk, size_t ndblk)
{
    lldd_status st;
    if (b2b && (st = check_blocks(fn, "dst_blocks", dblk, ndblk, rw->blocks, "remote")) != LLM_SUCCESS)
        return st;
    if (!b2b && !has_batches(rw)) {
        mock_set_error("%s: the destination cache %lld is a blocks cache; a contiguous push needs batches (PR-15)",
                       fn, (long long)rw->id);
        return LLM_PARAM_INVALID;
    }
    if (b2b && !has_blocks(rw)) {
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

/* Steps 6 and 7 of the push order for one layer pair; `first` runs the checks that
 * do not depend on the layer (they give the same answer for every layer). */
static lldd_status push_layer_checks(const char *fn, const push_args *a, const cache_wire *lw, const cache_wire *rw,
                                     const mlink *l, uint64_t ls, uint64_t ld, int first)
{
    const ext_norm *x = &a->x;
    lldd_status st;
    if (first) {
        if ((st = push_dst_access_checks(fn, rw, l, a->dst->cluster_id)) != LLM_SUCCESS)
            return st;
    }
    if (ld >= rw->num_tensors / x->n) {
        mock_set_error("%s: destination layer %llu is out of range: the remote cache has %u tensors, %u per layer", fn,
                       (unsigned long long)ld, (unsigned)rw->num_tensors, (unsigned)x->n);
        return LLM_PARAM_INVALID;
    }
    if (first) {
        if (!a->b2b && a->dst->batch_index >= rw->batches) {
            mock_set_error("%s: dst_cache_index.batch_index %u is out of range: the remote cache has %llu batches", fn,
                           (unsigned)a->dst->batch_index, (unsigned long long)rw->batches);
            return LLM_PARAM_INVALID;
        }
        if ((st = push_dst_shape_checks(fn, a->b2b, lw, rw, a->dblk, a->nblk)) != LLM_SUCCESS)
            return st;
    }
    if (ls >= lw->num_tensors / x->n) {
        mock_set_error("%s: source layer %llu is out of range: the local cache has %u tensors, %u per layer", fn,
                       (unsigned long long)ls, (unsigned)lw->num_tensors, (unsigned)x->n);
        return LLM_PARAM_INVALID;
    }
    if (first) {
        if (lw->num_tensors % x->n != 0) {
            mock_set_error("%s: tensor_num_per_layer %u must divide the local cache's %u tensors", fn,
                           (unsigned)x->n, (unsigned)lw->num_tensors);
            return LLM_PARAM_INVALID;
        }
        if (!a->b2b && a->src_batch >= lw->batches) {
            mock_set_error("%s: src_batch_index %u is out of range: cache %lld has %llu batches", fn,
                           (unsigned)a->src_batch, (long long)lw->id, (unsigned long long)lw->batches);
            return LLM_PARAM_INVALID;
        }
        if (a->b2b && !has_blocks(lw)) {
            mock_set_error("%s: the local cache %lld has no blocks", fn, (long long)lw->id);
            return LLM_PARAM_INVALID;
        }
        if (a->b2b && (st = check_blocks(fn, "src_blocks", a->sblk, a->nblk, lw->blocks, "local")) != LLM_SUCCESS)
            return st;
    }
    return LLM_SUCCESS;
}

static lldd_status push_checked(engine *e, const char *fn, const push_args *a, mcache *lc, xlink *xl, peer_cache *pc)
{
    const cache_wire *lw = &lc->w;
    const ext_norm *x = &a->x;
    uint32_t caller_tensors = a->src->cache_desc.num_tensors;
    lldd_status st;
    /* lint: the vendor checks only the caller's description (PR-33) */
    if (caller_tensors != 0 && caller_tensors != lw->num_tensors &&
        mock_lint(33, "%s: src_cache.cache_desc.num_tensors %u differs from the %u tensors of cache %lld (PR-33)", fn,
                  (unsigned)caller_tensors, (unsigned)lw->num_tensors, (long long)lw->id))
        return LLM_PARAM_INVALID;
    if (lw->placement != LLDD_PLACEMENT_DEVICE &&
        mock_lint(33, "%s: cache %lld is registered with placement HOST; pushes read DEVICE caches (PR-33)", fn,
                  (long long)lw->id))
        return LLM_PARAM_INVALID;
    /* the layer pairs of docs/reference/cpp-api.md §6.11 step 6 */
    uint64_t ls0, ld0, layers;
    if (x->sf < 0) {
        uint64_t nt = caller_tensors;
        uint64_t m = nt < x->n ? 0 : (nt % x->n == 0 ? nt / x->n - 1 : nt / x->n);
        ls0 = ld0 = 0;
        layers = m + 1;
    } else {
        ls0 = (uint64_t)x->sf;
        ld0 = (uint64_t)x->df;
        layers = (uint64_t)(x->ss - x->sf + 1);
    }
    /* step 3: the link; step 4: the local cache's remote access */
    if ((st = link_acquire(e, fn, a->dst->cluster_id, xl)) != LLM_SUCCESS)
        return st;
    if (!lw->remote_accessible) {
        mock_set_error("%s: the local cache %lld is not remote accessible", fn, (long long)lw->id);
        return LLM_PARAM_INVALID;
    }
    if (!e->hixl && (st = pr32_check_local(fn, xl->l, lw)) != LLM_SUCCESS)
        return st;
    /* step 5: the destination */
    if ((st = peer_pin(xl, fn, a->dst->cache_id, pc)) != LLM_SUCCESS)
        return st;
    /* steps 6, 7 per layer; the layers before the first failing one are moved */
    uint64_t ok = 0;
    lldd_status layer_st = LLM_SUCCESS;
    for (; ok < layers; ok++) {
        layer_st = push_layer_checks(fn, a, lw, &pc->w, xl->l, ls0 + ok, ld0 + ok, ok == 0);
        /* HIXL: the first layer's transfer refuses a source registered after the link (E-11) */
        if (layer_st == LLM_SUCCESS && ok == 0 && e->hixl)
            layer_st = pr32_check_local(fn, xl->l, lw);
        if (layer_st != LLM_SUCCESS)
            break;
    }
    if (ok > 0) {
        plan p;
        memset(&p, 0, sizeof p);
        p.form = a->b2b ? PLAN_B2B : PLAN_C2C;
        p.s_base = (uint32_t)(ls0 * x->n);
        p.d_base = (uint32_t)(ld0 * x->n);
        p.pairs = (uint32_t)(ok * x->n);
        p.src_addrs = lc->addrs;
        p.dst_addrs = pc->addrs;
        p.soff = a->b2b ? 0 : (uint64_t)a->src_batch * lw->stride;
        p.doff = a->b2b ? 0 : (uint64_t)a->dst->batch_index * pc->w.stride;
        p.len = lw->stride;
        p.sblk = a->sblk;
        p.dblk = a->dblk;
        p.nblk = a->nblk;
        p.block = lw->stride;
        if ((st = move_bytes(xl, fn, &p, 0, pc->w.id)) != LLM_SUCCESS)
            return st;
    }
    return layer_st;
}

static lldd_status do_push(engine *e, const char *fn, const push_args *a)
{
    mcache *lc = cache_pin(e, a->src->cache_id);
    if (lc == NULL) {
        mock_set_error("%s: src_cache.cache_id %lld does not exist", fn, (long long)a->src->cache_id);
        return LLM_KV_CACHE_NOT_EXIST;
    }
    xlink xl;
    peer_cache pc;
    memset(&xl, 0, sizeof xl);
    memset(&pc, 0, sizeof pc);
    lldd_status st = push_checked(e, fn, a, lc, &xl, &pc);
    if (xl.l != NULL)
        peer_unpin(&xl, &pc);
    link_release(&xl);
    cache_unpin(e, lc);
    return st;
}

lldd_status xfer_push_cache(engine *e, const char *fn, const lldd_cache *src_cache,
                            const lldd_cache_index *dst_cache_index, uint32_t src_batch_index, int64_t size,
                            const lldd_ext_param *ext_param)
{
    lldd_status st;
    push_args a;
    memset(&a, 0, sizeof a);
    if (src_cache->cache_desc.placement != LLDD_PLACEMENT_DEVICE) {
        mock_set_error("%s: src_cache.cache_desc.placement must be DEVICE", fn);
        st = LLM_PARAM_INVALID;
    } else if (size != -1) {
        mock_set_error("%s: size %lld: size only support -1", fn, (long long)size);
        st = LLM_PARAM_INVALID;
    } else if ((st = check_ext(fn, ext_param, 1, src_cache->cache_desc.num_tensors, &a.x)) == LLM_SUCCESS) {
        a.src = src_cache;
        a.dst = dst_cache_index;
        a.src_batch = src_batch_index;
        st = do_push(e, fn, &a);
    }
    return st;
}

lldd_status xfer_push_blocks(engine *e, const char *fn, const lldd_cache *src_cache,
                             const lldd_cache_index *dst_cache_index, const uint64_t *src_blocks, size_t num_src_blocks,
                             const uint64_t *dst_blocks, size_t num_dst_blocks, const lldd_ext_param *ext_param)
{
    lldd_status st;
    push_args a;
    memset(&a, 0, sizeof a);
    if (src_cache->cache_desc.placement != LLDD_PLACEMENT_DEVICE) {
        mock_set_error("%s: src_cache.cache_desc.placement must be DEVICE", fn);
        st = LLM_PARAM_INVALID;
    } else if (num_src_blocks == 0) {
        mock_set_error("%s: src_blocks is empty", fn);
        st = LLM_PARAM_INVALID;
    } else if (num_src_blocks != num_dst_blocks) {
        mock_set_error("%s: src_blocks has %zu entries and dst_blocks %zu", fn, num_src_blocks, num_dst_blocks);
        st = LLM_PARAM_INVALID;
    } else if (dst_cache_index->batch_index != 0) {
        mock_set_error("%s: dst_cache_index.batch_index %u must be 0 for a block push", fn,
                       (unsigned)dst_cache_index->batch_index);
        st = LLM_PARAM_INVALID;
    } else if ((st = check_ext(fn, ext_param, 1, src_cache->cache_desc.num_tensors, &a.x)) == LLM_SUCCESS) {
        a.src = src_cache;
        a.dst = dst_cache_index;
        a.b2b = 1;
        a.sblk = src_blocks;
        a.dblk = dst_blocks;
        a.nblk = num_src_blocks;
        st = do_push(e, fn, &a);
    }
    return st;
}
