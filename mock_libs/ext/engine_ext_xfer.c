/* Pulls of the extension ABI (pull_cache and pull_blocks of both generations,
 * docs/reference/python-api.md §12, §11.2 step 10), in the engine order of docs/reference/semantics.md §8.0.
 *
 * The source is resolved on the engine that holds it (engine_resolve.c), for every request:
 *   server-assisted (v2) and v1   live: the holder's current key table and caches;
 *                                  a by-id source on a slot bound to a request key is
 *                                  a pull through that key (semantics.md §9.4);
 *   direct (v2)                    against the link's table copy (semantics.md §9.7): ids below its
 *                                  id mark, bindings below its binding mark, and still
 *                                  live (PR-7, PR-19); prefix keys never resolve.
 * In one process the puller calls the resolver under the holder's mu; across
 * processes it asks with MSG_RESOLVE (engine_serve.c answers). Either way the
 * resolved cache comes back pinned, with its description and tensor addresses, and
 * the puller checks and moves the bytes itself over the data paths of
 * engine_xfer.c. A successful server-assisted or v1 pull through a request key then
 * releases what it read (MSG_RELEASE, semantics.md §9.5): the holder updates the cache's
 * remaining-tensor set, unbinds the key when nothing remains, and frees the cache if
 * that was its last reference.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/blocks.h"
#include "core/cache_table.h"
#include "core/engine.h"
#include "ext/ext.h"
#include "core/keys.h"
#include "wire/links.h"
#include "base/mock_internal.h"
#include "core/resolve.h"
#include "core/transfers.h"
#include "wire/transport.h"

/* server-assisted request limits (semantics.md §15) */
enum { SA_MAX_ENTRIES = 7160, SA_MAX_TENSORS = 2043, SA_D2H_MAX_BLOCKS = 61440, DIRECT_MAX_ENTRIES = 131064 };
#define STAGING_BYTES (32ull << 20)

/* ---------------------------------------------------------------------------------------------
 * the puller's side: resolve and release
 * ------------------------------------------------------------------------------------------ */

/* A resolved cache of the peer: pinned into *pc (one of the frame's, xfer_job.pc), and
 * what the holder's lookup answered. */
typedef struct xsrc {
    peer_cache *pc;
    resolve_reply r;
} xsrc;

static lldd_status src_resolve_q(xlink *x, const char *fn, const resolve_req *q, xsrc *s);

/* A by-id reference with cache_id <= 0: in direct mode the vendor falls back to a key
 * lookup with request id 2^64 - 1, which finds the blocks cache bound with model_id 0; the
 * mock does the same and lints it when such a cache exists (PR-20). Elsewhere, and in
 * strict mode, it never resolves, refused before the lookup reaches the peer (E-10). */
static lldd_status src_resolve(xlink *x, const char *fn, const resolve_req *q, xsrc *s)
{
    if (q->key_kind != LLDD_KEY_BY_ID || q->cache_id > 0)
        return src_resolve_q(x, fn, q, s);
    if (!q->direct || mock_strict()) {
        memset(s->pc, 0, sizeof *s->pc);
        memset(&s->r, 0, sizeof s->r);
        mock_set_error("%s: cache id %lld never names a cache (ids start at 1, PR-20)", fn, (long long)q->cache_id);
        return LLM_KV_CACHE_NOT_EXIST;
    }
    resolve_req fallback = *q;
    fallback.key_kind = LLDD_KEY_BLOCKS;
    fallback.req_id = UINT64_MAX;
    fallback.prefix_id = UINT64_MAX;
    fallback.model_id = 0;
    fallback.cache_id = 0;
    fallback.batch_index = 0;
    lldd_status st = src_resolve_q(x, fn, &fallback, s);
    if (st == LLM_SUCCESS)
        (void)mock_lint(20, "%s: cache id %lld resolves, as on the device, to the blocks cache bound to the blocks "
                        "key of model_id 0 on cluster %llu (PR-20)", fn, (long long)q->cache_id,
                        (unsigned long long)x->l->peer_cluster);
    return st;
}

static lldd_status src_resolve_q(xlink *x, const char *fn, const resolve_req *q, xsrc *s)
{
    mlink *l = x->l;
    memset(s->pc, 0, sizeof *s->pc);
    memset(&s->r, 0, sizeof s->r);
    char why[256];
    why[0] = '\0';
    if (l->same_process) {
        engine *peer = x->peer;
        lldd_status st = peer_local_enter(x, fn);
        if (st != LLM_SUCCESS)
            return st;
        mlink *their = link_peer_side_locked(peer, l);
        mcache *c;
        st = holder_resolve_locked(peer, their, q, &c, &s->r, why, sizeof why);
        if (q->direct)
            link_note_table_copy(l, s->r.id_mark, s->r.bind_mark);
        if (st == LLM_SUCCESS)
            peer_hold_local(s->pc, c);
        pthread_mutex_unlock(&peer->mu);
        if (st != LLM_SUCCESS)
            mock_set_error("%s: %s", fn, why);
        return st;
    }
    int64_t deadline = tp_deadline(x->e->sync_timeout_ms);
    msg_hdr h;
    msg_init(&h, MSG_RESOLVE);
    h.payload_len = sizeof *q;
    lldd_status st = link_ask(x, fn, &h, q, sizeof *q, MSG_RESOLVE_REPLY, deadline);
    if (st != LLM_SUCCESS)
        return st;
    if (q->direct)
        link_note_table_copy(l, (int64_t)h.a, h.b);
    if (h.status != LLM_SUCCESS) {
        reply_text text;
        if (h.payload_len != sizeof text || tp_recv_all(l->req_fd, &text, sizeof text, deadline) != TP_OK)
            return link_timeout(x, fn, "the peer's answer to a lookup was cut short");
        tp_sanitize_text(text.text, sizeof text.text);
        mock_set_error("%s: %s", fn, text.text);
        /* the codes a holder's lookup gives (holder_resolve_locked); anything else is a
         * broken peer */
        if (h.status != LLM_KV_CACHE_NOT_EXIST && h.status != LLM_LINK_BUSY && h.status != LLM_PARAM_INVALID)
            return link_timeout(x, fn, "the peer answered a lookup with status 0x%08X", (unsigned)h.status);
        return h.status;
    }
    return link_recv_pinned(x, fn, &h, deadline, &s->r, sizeof s->r, &s->r.w, s->pc, UINT64_MAX);
}

/* Step 11 (semantics.md §9.5): unpins the source and releases what the pull read through its key.
 * tensors NULL: every tensor (the pull had no source range). */
static void src_release(xlink *x, xsrc *s, const uint64_t *tensors, uint64_t count)
{
    release_req q;
    memset(&q, 0, sizeof q);
    q.cache_id = s->pc->w.id;
    q.slot = s->r.slot;
    q.key_ns = s->r.key_ns;
    q.key_id = s->r.key_id;
    q.key_model = s->r.key_model;
    q.all = tensors == NULL;
    q.count = tensors == NULL ? 0 : count;
    if (x->l->same_process) {
        engine *peer = x->peer;
        pthread_mutex_lock(&peer->mu);
        cache_unpin_locked(peer, s->pc->pc);
        mcache *gone = key_release_request_locked(peer, &q, tensors);
        pthread_mutex_unlock(&peer->mu);
        cache_destroy(gone);
    } else {
        msg_hdr h;
        msg_init(&h, MSG_RELEASE);
        h.payload_len = sizeof q + q.count * sizeof(uint64_t);
        struct iovec iov[3] = {{&h, sizeof h}, {&q, sizeof q}, {(void *)(uintptr_t)tensors, (size_t)(q.count * 8)}};
        int64_t deadline = tp_deadline(x->e->sync_timeout_ms);
        int r = tp_sendv(x->l->req_fd, iov, q.count > 0 ? 3 : 2, deadline, x->e->sync_timeout_ms);
        if (r == TP_OK)
            r = msg_recv_hdr(x->l->req_fd, &h, deadline);
        /* the data is in place and the pull succeeded; a lost release leaves the key
         * bound, which the peer's own remove_cache_key or deallocate settles */
        (void)r;
        free(s->pc->owned_addrs);
    }
    memset(s->pc, 0, sizeof *s->pc);
}

/* A lookup of `key` on the holder, against the link's table copy, for `requester`. */
static void resolve_req_init(resolve_req *q, const lldd_key *key, const mlink *l, uint64_t requester)
{
    /* every member named: the request goes over the wire as it is (no padding in it) */
    *q = (resolve_req){.key_kind = key->kind, .batch_index = key->batch_index, .req_id = key->req_id,
                       .prefix_id = key->prefix_id, .model_id = key->model_id, .cache_id = key->cache_id,
                       .direct = 0, .v1 = 0, .push = 0, .reserved = 0, .id_mark = l->watermark,
                       .bind_mark = l->bind_watermark, .requester = requester};
}

/* ---------------------------------------------------------------------------------------------
 * lldd_ext_pull
 * ------------------------------------------------------------------------------------------ */

typedef struct epull {
    const lldd_key *src;
    int64_t dst_id;
    uint32_t batch;
    int64_t size;
    const uint64_t *sblk, *dblk, *st, *dt;
    size_t nsb, ndb, nst, ndt;
    int64_t soff, doff;
    uint32_t n;
} epull;

enum { FORM_B2C = -1 };

static lldd_status pull_args_check(engine *e, const char *fn, const epull *a, int *form)
{
    int v1 = e->gen == GEN_V1;
    lldd_status st;
    if (a->src->kind < LLDD_KEY_CACHE || a->src->kind > LLDD_KEY_BLOCKS) {
        mock_set_error("%s: src.kind %u is not a key kind (LLDD_KEY_CACHE 1, LLDD_KEY_BY_ID 2, LLDD_KEY_BLOCKS 3)",
                       fn, (unsigned)a->src->kind);
        return LLM_PARAM_INVALID;
    }
    if (a->src->kind == LLDD_KEY_CACHE && (st = ext_check_cache_key_validity(fn, "src", a->src)) != LLM_SUCCESS)
        return st;
    if (a->size != -1 && a->size <= 0) {
        mock_set_error("%s: size %lld must be -1 or > 0", fn, (long long)a->size);
        return LLM_PARAM_INVALID;
    }
    if (!v1 && (a->soff != -1 || a->doff != -1)) {
        mock_set_error("%s: %s is not supported in CacheManager mode (PR-8)", fn,
                       a->soff != -1 ? "src_cache_offset" : "dst_cache_offset");
        return LLM_PARAM_INVALID;
    }
    if (a->soff < -1 || a->doff < -1) {
        mock_set_error("%s: %s %lld should be >= 0 (or -1: not given)", fn,
                       a->soff < -1 ? "src_cache_offset" : "dst_cache_offset",
                       (long long)(a->soff < -1 ? a->soff : a->doff));
        return LLM_PARAM_INVALID;
    }
    if (a->n == 0) {
        mock_set_error("%s: tensor_num_per_layer (0) is invalid, should [1, N] (PR-3)", fn);
        return LLM_PARAM_INVALID;
    }
    *form = a->nsb > 0 ? (a->ndb > 0 ? PLAN_B2B : FORM_B2C) : (a->ndb > 0 ? PLAN_C2B : PLAN_C2C);
    if (*form != PLAN_C2C) {
        if (a->size != -1) {
            mock_set_error("%s: size %lld: block pulls move whole blocks; size must be -1", fn, (long long)a->size);
            return LLM_PARAM_INVALID;
        }
        if (a->batch != 0) {
            mock_set_error("%s: batch_index %u: block pulls address blocks; batch_index must be 0", fn,
                           (unsigned)a->batch);
            return LLM_PARAM_INVALID;
        }
        if (a->soff != -1 || a->doff != -1) {
            mock_set_error("%s: src_cache_offset and dst_cache_offset apply to pull_cache only", fn);
            return LLM_PARAM_INVALID;
        }
    }
    if (*form == PLAN_B2B && a->src->kind == LLDD_KEY_BY_ID && a->src->batch_index != 0) {
        mock_set_error("%s: src.batch_index %u must be 0 for a block pull", fn, (unsigned)a->src->batch_index);
        return LLM_PARAM_INVALID;
    }
    if (*form == PLAN_C2B && v1) {
        mock_set_error("%s: pulling a contiguous cache into blocks is not supported in KvCacheManager (v1) mode", fn);
        return LLM_PARAM_INVALID;
    }
    if (v1 && atomic_load(&e->role) != LLDD_ROLE_DECODER) {
        mock_set_error("%s: pulls are not supported by %s; only a DECODER pulls in v1 (docs/reference/semantics.md §11)", fn,
                       ext_role_name(atomic_load(&e->role)));
        return LLM_PARAM_INVALID;
    }
    return LLM_SUCCESS;
}

/* Step 4's tensor-list checks (semantics.md §4.2, §5) against the local cache. tensor_num_per_layer
 * has no upper bound (a pull without a range never uses it), and only the v2 engine
 * asks a ranged pull's local tensor count to be a multiple of it: v1 does not send it
 * to the device side (docs/semantics.md, PR-3). */
static lldd_status pull_local_tensors(const char *fn, const epull *a, const cache_wire *lw, int v1)
{
    uint32_t nl = lw->num_tensors;
    int ranged = a->nst > 0 || a->ndt > 0;
    if (!v1 && ranged && nl % a->n != 0) {
        mock_set_error("%s: when using layer wise transfer, the tensor_num %u of the local cache must be a multiple "
                       "of tensor_num_per_layer %u", fn, (unsigned)nl, (unsigned)a->n);
        return LLM_PARAM_INVALID;
    }
    if (a->ndt > nl) {
        mock_set_error("%s: dst_layer_range selects %zu tensors, but the local cache has %u", fn, a->ndt,
                       (unsigned)nl);
        return LLM_PARAM_INVALID;
    }
    for (size_t i = 0; i < a->ndt; i++) {
        if (a->dt[i] >= nl) {
            mock_set_error("%s: dst_layer_range selects tensor %llu, but the local cache has %u", fn,
                           (unsigned long long)a->dt[i], (unsigned)nl);
            return LLM_PARAM_INVALID;
        }
    }
    lldd_status st = check_repeats(fn, "dst tensor index", a->dt, a->ndt, 0);
    if (st != LLM_SUCCESS)
        return st;
    if (a->nst > 0 && a->ndt > 0 && a->nst != a->ndt) {
        mock_set_error("%s: src_layer_range selects %zu tensors and dst_layer_range %zu", fn, a->nst, a->ndt);
        return LLM_PARAM_INVALID;
    }
    if (a->nst > 0 && a->ndt == 0 && a->nst != nl) {
        mock_set_error("%s: src_layer_range selects %zu tensors; without dst_layer_range all %u local tensors "
                       "receive, so the counts must be equal", fn, a->nst, (unsigned)nl);
        return LLM_PARAM_INVALID;
    }
    return LLM_SUCCESS;
}

/* Cache-to-blocks arithmetic (docs/reference/semantics.md §8.4, §8.7), as the vendor computes it: chunk k of
 * a source batch is the block-sized piece at k * block, except that the chunk listed last
 * is cut to tensor_size mod block when that is non-zero, whether or not it is the batch's
 * final piece. *covered is the number of bytes from the batch start up to the end of the
 * last chunk; the chunks must stay inside the one source batch (PR-16, guard: past it
 * the device reads the next batch, or past the tensor). */
static lldd_status c2b_check_chunks(const char *fn, size_t count, uint64_t block, uint64_t stride,
                                    uint64_t tensor_size, uint64_t *covered)
{
    uint64_t last = tensor_size % block != 0 ? tensor_size % block : block, before;
    if (__builtin_mul_overflow((uint64_t)count - 1, block, &before) || before >= stride ||
        last > stride - before) {
        mock_set_error("%s: %zu destination blocks of %llu bytes (the last cut to %llu, the tensor size %llu mod the "
                       "block size) run past one source batch of %llu bytes (PR-16)", fn, count,
                       (unsigned long long)block, (unsigned long long)last, (unsigned long long)tensor_size,
                       (unsigned long long)stride);
        return LLM_PARAM_INVALID;
    }
    *covered = before + last;
    return LLM_SUCCESS;
}

/* What the steps of one extension pull share: its arguments, and what the earlier steps
 * found for the later ones. */
typedef struct pull_state {
    engine *e;
    const char *fn;
    const epull *a;
    int form;
    mcache *lc;
    xlink *xl;
    xsrc *src;
    int v1, direct, sa;
    const cache_wire *lw;        /* the local (destination) cache */
    const cache_wire *rw;        /* the source, once resolved (step 7) */
    uint64_t dst_off, src_off;   /* the offsets, -1 read as 0 */
    uint64_t len;                /* C2C: bytes per tensor */
    uint64_t pairs;              /* tensor pairs */
    uint64_t chunks_or_runs;     /* B2B runs, C2B blocks, 1 for C2C */
    uint64_t b_src;              /* the source batch */
    uint64_t src_base;           /* where the source batch starts */
    uint64_t c2b_len;            /* C2B: the source region's length */
    int d2h;                     /* a server-assisted DEVICE to HOST pull (staged) */
} pull_state;

/* Step 4: the local cache's placement, batch, kind and sizes, and its tensor ranges. */
static lldd_status pull_local_checks(pull_state *s)
{
    const char *fn = s->fn;
    const epull *a = s->a;
    const cache_wire *lw = s->lw;
    lldd_status st;
    if (s->v1 && lw->placement != LLDD_PLACEMENT_DEVICE) {
        mock_set_error("%s: the local cache %lld is HOST-placed: Only support device cache (v1)", fn,
                       (long long)lw->id);
        return LLM_PARAM_INVALID;
    }
    s->dst_off = a->doff > 0 ? (uint64_t)a->doff : 0;
    s->src_off = a->soff > 0 ? (uint64_t)a->soff : 0;
    s->len = 0;
    if (s->form == PLAN_C2C) {
        if ((st = pull_dst_batch_checks(fn, lw, a->batch, a->size, !s->v1)) != LLM_SUCCESS)
            return st;
        uint64_t dst_off = s->dst_off;
        uint64_t len = a->size > 0 ? (uint64_t)a->size : (dst_off < lw->stride ? lw->stride - dst_off : 0);
        if (s->v1 && (len == 0 || dst_off > lw->stride || len > lw->stride - dst_off)) {
            mock_set_error("%s: dst_cache_offset %llu + %llu bytes do not fit the destination stride %llu", fn,
                           (unsigned long long)dst_off, (unsigned long long)len, (unsigned long long)lw->stride);
            return LLM_PARAM_INVALID;
        }
        s->len = len;
    } else if (s->form != FORM_B2C && (st = pull_dst_blocks_check(fn, lw)) != LLM_SUCCESS) {
        return st;
    }
    if ((st = pull_local_tensors(fn, a, lw, s->v1)) != LLM_SUCCESS)
        return st;
    s->pairs = a->ndt > 0 ? a->ndt : (a->nst > 0 ? a->nst : lw->num_tensors);
    return LLM_SUCCESS;
}

/* Step 6: the request's form, its destination blocks, and its size in entries (semantics.md §15). */
static lldd_status pull_request_checks(pull_state *s)
{
    const char *fn = s->fn;
    const epull *a = s->a;
    int form = s->form;
    lldd_status st;
    s->chunks_or_runs = 1;
    if (form == FORM_B2C) {
        mock_set_error("%s: Pulling from discrete memory to continuous memory is not supported (src_blocks without "
                       "dst_blocks)", fn);
        return LLM_PARAM_INVALID;
    }
    if (form == PLAN_B2B && a->nsb != a->ndb) {
        mock_set_error("%s: src_blocks has %zu entries and dst_blocks %zu", fn, a->nsb, a->ndb);
        return LLM_PARAM_INVALID;
    }
    if (form != PLAN_C2C) {
        if ((st = pull_dst_block_list_checks(fn, s->lw, a->dblk, a->ndb)) != LLM_SUCCESS)
            return st;
        s->chunks_or_runs = form == PLAN_B2B ? count_runs(a->sblk, a->dblk, a->nsb) : a->ndb;
    }
    uint64_t pairs = s->pairs, chunks_or_runs = s->chunks_or_runs;
    uint64_t entries = pairs + 2 * chunks_or_runs;
    if (s->sa && (pairs > SA_MAX_TENSORS || entries > SA_MAX_ENTRIES)) {
        mock_set_error("%s: the request has %llu entries (%llu tensors + 2 x %llu %s); server-assisted mode allows "
                       "at most %d entries and %d tensors (docs/reference/semantics.md §15)", fn, (unsigned long long)entries,
                       (unsigned long long)pairs, (unsigned long long)chunks_or_runs,
                       form == PLAN_B2B ? "runs" : form == PLAN_C2B ? "blocks" : "ranges", SA_MAX_ENTRIES,
                       SA_MAX_TENSORS);
        return LLM_PARAM_INVALID;
    }
    if (s->direct && entries > DIRECT_MAX_ENTRIES) {
        mock_set_error("%s: the request has %llu entries (%llu tensors + 2 x %llu), over the direct-mode limit of %d "
                       "(docs/reference/semantics.md §15)", fn, (unsigned long long)entries, (unsigned long long)pairs,
                       (unsigned long long)chunks_or_runs, DIRECT_MAX_ENTRIES);
        return LLM_PARAM_INVALID;
    }
    return LLM_SUCCESS;
}

/* Step 7: the source, resolved on the engine that holds it and pinned. */
static lldd_status pull_resolve_source(pull_state *s)
{
    resolve_req q;
    resolve_req_init(&q, s->a->src, s->xl->l, s->e->cluster_id);
    q.direct = (uint32_t)s->direct;
    q.v1 = (uint32_t)s->v1;
    lldd_status st = src_resolve(s->xl, s->fn, &q, s->src);
    if (st != LLM_SUCCESS)
        return st;
    s->rw = &s->src->pc->w;
    s->b_src = s->src->r.slot;
    return LLM_SUCCESS;
}

/* Step 8: remote access (direct mode) and the caches' registration times (PR-32). */
static lldd_status pull_access_checks(const pull_state *s)
{
    const char *fn = s->fn;
    const cache_wire *lw = s->lw, *rw = s->rw;
    if (s->direct && (!rw->remote_accessible || !lw->remote_accessible)) {
        mock_set_error("%s: the %s cache %lld is not remote accessible; direct mode needs both caches "
                       "remote accessible", fn, !rw->remote_accessible ? "remote" : "local",
                       (long long)(!rw->remote_accessible ? rw->id : lw->id));
        return LLM_PARAM_INVALID;
    }
    return pr32_checks(fn, s->xl->l, lw, rw, s->a->src->cluster_id);
}

/* Step 9, first part: the source's kind, tensor counts and strides, and where its batch
 * starts. */
static lldd_status pull_source_shape_checks(pull_state *s)
{
    const char *fn = s->fn;
    const epull *a = s->a;
    const cache_wire *lw = s->lw, *rw = s->rw;
    int form = s->form, v1 = s->v1, direct = s->direct;
    uint64_t len = s->len, src_off = s->src_off, b_src = s->b_src;
    lldd_status st;
    if (form != PLAN_B2B && !kind_has_batches(rw)) {
        mock_set_error("%s: request pull block = false, but the source cache %lld is a blocks cache (PR-15)", fn,
                       (long long)rw->id);
        return LLM_PARAM_INVALID;
    }
    if (form == PLAN_B2B && !kind_has_blocks(rw)) {
        mock_set_error("%s: request pull block = true, but the source cache %lld has no blocks (PR-15)", fn,
                       (long long)rw->id);
        return LLM_PARAM_INVALID;
    }
    for (size_t i = 0; i < a->nst; i++) {
        if (a->st[i] >= rw->num_tensors) {
            mock_set_error("%s: src_layer_range selects tensor %llu, but the source cache has %u%s", fn,
                           (unsigned long long)a->st[i], (unsigned)rw->num_tensors, direct ? " (PR-12)" : "");
            return LLM_PARAM_INVALID;
        }
    }
    if (a->nst == 0 && a->ndt > 0 && rw->num_tensors != a->ndt) {
        mock_set_error("%s: dst_layer_range selects %zu tensors; without src_layer_range all %u source tensors are "
                       "sent, so the counts must be equal", fn, a->ndt, (unsigned)rw->num_tensors);
        return LLM_PARAM_INVALID;
    }
    if (a->nst == 0 && a->ndt == 0 && (st = pull_src_count_check(fn, rw, lw)) != LLM_SUCCESS)
        return st;
    if (form == PLAN_C2C && !v1 && (st = pull_src_len_check(fn, len, rw)) != LLM_SUCCESS)
        return st;
    if (form == PLAN_C2C && v1 && (src_off > rw->stride || len > rw->stride - src_off)) {
        mock_set_error("%s: srcCacheOffset %llu is invalid: %llu bytes from it do not fit the source stride %llu", fn,
                       (unsigned long long)src_off, (unsigned long long)len, (unsigned long long)rw->stride);
        return LLM_PARAM_INVALID;
    }
    /* Where the source batch starts: server-assisted, the holder addresses it with its own
     * stride; direct mode with the local (destination) stride, as the vendor's reader does
     * (PR-6), and a cache-to-blocks read starts at batch 0 whatever the key names (PR-16). */
    s->src_base = 0;
    if (direct)
        return form == PLAN_C2C ? pull_src_batch_start(fn, b_src, lw, rw, len, &s->src_base) : LLM_SUCCESS;
    (void)__builtin_mul_overflow(b_src, rw->stride, &s->src_base);
    return LLM_SUCCESS;
}

/* Step 9, server-assisted: the placement pairs of semantics.md §1.3 and a DEVICE to HOST pull's limits. */
static lldd_status pull_placement_checks(pull_state *s)
{
    const char *fn = s->fn;
    const epull *a = s->a;
    int form = s->form;
    s->d2h = 0;
    if (!s->sa)
        return LLM_SUCCESS;
    uint32_t sp = s->rw->placement, dp = s->lw->placement;
    if (sp == LLDD_PLACEMENT_HOST && dp == LLDD_PLACEMENT_HOST) {
        mock_set_error("%s: a server-assisted transfer between two HOST caches is not supported (docs/reference/semantics.md §1.3)",
                       fn);
        return LLM_FEATURE_NOT_ENABLED;
    }
    if (sp == LLDD_PLACEMENT_DEVICE && dp == LLDD_PLACEMENT_HOST) {
        uint64_t src_blocks = form == PLAN_B2B ? a->nsb : form == PLAN_C2B ? a->ndb : 1;
        if (!s->e->dev_pool.present) {
            mock_set_error("%s: a DEVICE to HOST pull needs a device memory pool on this engine "
                           "(llm.MemPoolConfig) for its staging buffers (docs/reference/semantics.md §1.3)", fn);
            return LLM_PARAM_INVALID;
        }
        if (src_blocks > SA_D2H_MAX_BLOCKS || src_blocks > SA_MAX_ENTRIES - s->pairs) {
            mock_set_error("%s: a DEVICE to HOST pull moves at most %d source blocks and at most %d - %llu; this "
                           "one has %llu (docs/reference/semantics.md §15)", fn, SA_D2H_MAX_BLOCKS, SA_MAX_ENTRIES,
                           (unsigned long long)s->pairs, (unsigned long long)src_blocks);
            return LLM_PARAM_INVALID;
        }
        s->d2h = 1;
    }
    if (sp == LLDD_PLACEMENT_HOST && dp == LLDD_PLACEMENT_DEVICE && !s->src->r.dev_pool) {
        mock_set_error("%s: a HOST to DEVICE pull needs a device memory pool on the host-side cluster %llu "
                       "(docs/reference/semantics.md §1.3)", fn, (unsigned long long)a->src->cluster_id);
        return LLM_PARAM_INVALID;
    }
    return LLM_SUCCESS;
}

/* Step 9, last part: block sizes and the source's blocks or chunks (C2B, B2B). */
static lldd_status pull_source_block_checks(pull_state *s)
{
    const char *fn = s->fn;
    const epull *a = s->a;
    const cache_wire *lw = s->lw, *rw = s->rw;
    lldd_status st;
    s->c2b_len = 0;
    if (s->form == PLAN_C2B) {
        if (lw->stride > rw->stride) {
            mock_set_error("%s: tensor size < required size: a destination block (%llu bytes) is larger than a source "
                           "batch (%llu bytes)", fn, (unsigned long long)lw->stride, (unsigned long long)rw->stride);
            return LLM_PARAM_INVALID;
        }
        if ((st = c2b_check_chunks(fn, a->ndb, lw->stride, rw->stride, rw->tensor_size, &s->c2b_len)) != LLM_SUCCESS)
            return st;
        if (s->direct && s->b_src != 0 &&
            mock_lint(16, "%s: in direct mode a cache-to-blocks pull reads source batch 0; the source key names "
                      "batch %llu, which is ignored (PR-16)", fn, (unsigned long long)s->b_src))
            return LLM_PARAM_INVALID;
    }
    if (s->form == PLAN_B2B)
        return pull_src_block_checks(fn, a->sblk, a->nsb, rw, lw);
    return LLM_SUCCESS;
}

/* A device-to-host pull stages through two 32 MiB buffers of the puller's device pool:
 * takes them (stage_first[0], [1], each `pages` pages), or fails with OUT_OF_MEMORY. */
static lldd_status staging_take(engine *e, const char *fn, uint64_t stage_first[2], uint64_t *pages)
{
    int staged = 0;
    pthread_mutex_lock(&e->mu);
    mpool *pool = &e->dev_pool;
    uint64_t page = 1ull << pool->page_shift;
    *pages = STAGING_BYTES / page + (STAGING_BYTES % page != 0);
    if (pool_take(pool, *pages, &stage_first[0]) == 0) {
        if (pool_take(pool, *pages, &stage_first[1]) == 0)
            staged = 2;
        else
            pool_give(pool, stage_first[0], *pages);
    }
    pthread_mutex_unlock(&e->mu);
    if (staged != 2) {
        mock_set_error("%s: the device memory pool cannot supply the two 32 MiB staging buffers of a DEVICE to "
                       "HOST pull (docs/reference/semantics.md §15)", fn);
        return LLM_OUT_OF_MEMORY;
    }
    return LLM_SUCCESS;
}

static void staging_give(engine *e, const uint64_t stage_first[2], uint64_t pages)
{
    pthread_mutex_lock(&e->mu);
    pool_give(&e->dev_pool, stage_first[0], pages);
    pool_give(&e->dev_pool, stage_first[1], pages);
    pthread_mutex_unlock(&e->mu);
}

/* Step 10: the bytes. */
static lldd_status pull_move(const pull_state *s)
{
    const epull *a = s->a;
    uint64_t stage_first[2] = {0, 0}, stage_pages = 0;
    lldd_status st;
    if (s->d2h && (st = staging_take(s->e, s->fn, stage_first, &stage_pages)) != LLM_SUCCESS)
        return st;
    plan p;
    plan_init(&p, s->form, 0, 0, (uint32_t)s->pairs, s->src->pc->addrs, s->lc->addrs);
    p.smap = a->nst > 0 ? a->st : NULL;
    p.dmap = a->ndt > 0 ? a->dt : NULL;
    if (s->form == PLAN_C2C) {
        plan_range(&p, s->src_base + s->src_off, (uint64_t)a->batch * s->lw->stride + s->dst_off, s->len);
    } else if (s->form == PLAN_B2B) {
        plan_blocks(&p, a->sblk, a->dblk, a->nsb, s->lw->stride);
    } else {
        plan_range(&p, s->src_base, 0, s->c2b_len);
        plan_blocks(&p, NULL, a->dblk, a->ndb, s->lw->stride);
    }
    st = move_bytes(s->xl, s->fn, &p, 1, s->rw->id);
    if (s->d2h)
        staging_give(s->e, stage_first, stage_pages);
    return st;
}

/* Steps 4 to 11 of an extension pull (docs/reference/semantics.md §8.0), each a function
 * above, in this order, in the frame of xfer_run. */
static lldd_status pull_steps(xfer_job *j, void *arg)
{
    pull_state *s = arg;
    const epull *a = s->a;
    s->lc = j->lc;
    s->lw = &j->lc->w;
    s->xl = &j->xl;
    s->src->pc = &j->pc[0];
    lldd_status st;
    if ((st = pull_local_checks(s)) != LLM_SUCCESS ||
        (st = link_acquire_ex(s->e, s->fn, a->src->cluster_id, s->xl, s->v1 ? ACQUIRE_V1 : 0)) != LLM_SUCCESS ||
        (st = pull_request_checks(s)) != LLM_SUCCESS || (st = pull_resolve_source(s)) != LLM_SUCCESS ||
        (st = pull_access_checks(s)) != LLM_SUCCESS || (st = pull_source_shape_checks(s)) != LLM_SUCCESS ||
        (st = pull_placement_checks(s)) != LLM_SUCCESS || (st = pull_source_block_checks(s)) != LLM_SUCCESS)
        return st;
    st = pull_move(s);
    /* step 11: which successful pulls release their key (docs/reference/semantics.md §9.5) */
    if (st == LLM_SUCCESS && !s->direct && s->form != PLAN_B2B && s->src->r.through_key &&
        s->src->r.key_ns == KEY_NS_REQ && !(s->v1 && (a->soff != -1 || a->doff != -1)))
        src_release(s->xl, s->src, a->nst > 0 ? a->st : NULL, a->nst);
    return st;
}

lldd_status ext_xfer_pull(engine *e, const char *fn, const lldd_key *src, int64_t dst_cache_id, uint32_t batch_index,
                          int64_t size, const uint64_t *src_blocks, size_t num_src_blocks, const uint64_t *dst_blocks,
                          size_t num_dst_blocks, const uint64_t *src_tensors, size_t num_src_tensors,
                          const uint64_t *dst_tensors, size_t num_dst_tensors, int64_t src_cache_offset,
                          int64_t dst_cache_offset, uint32_t tensor_num_per_layer)
{
    epull a = {src, dst_cache_id, batch_index, size, src_blocks, dst_blocks, src_tensors, dst_tensors,
               num_src_blocks, num_dst_blocks, num_src_tensors, num_dst_tensors, src_cache_offset, dst_cache_offset,
               tensor_num_per_layer};
    pull_state s;
    xsrc resolved;
    memset(&s, 0, sizeof s);
    memset(&resolved, 0, sizeof resolved);
    s.e = e;
    s.fn = fn;
    s.a = &a;
    s.src = &resolved;
    s.v1 = e->gen == GEN_V1;
    s.direct = e->mode == MODE_DIRECT;
    s.sa = e->mode == MODE_SERVER_ASSISTED;
    lldd_status st = pull_args_check(e, fn, &a, &s.form);
    if (st == LLM_SUCCESS && !s.v1 && src->cluster_id == e->cluster_id) {
        /* v2 only: v1 has no such check and pulls over a link named by its own id (E-7) */
        mock_set_error("%s: src.cluster_id %llu is this engine's own cluster; pull from a peer", fn,
                       (unsigned long long)src->cluster_id);
        st = LLM_PARAM_INVALID;
    }
    if (st == LLM_SUCCESS)
        st = xfer_run(e, fn, dst_cache_id, "dst_cache_id", pull_steps, &s);
    return ext_gen_status(e, st);
}

/* ---------------------------------------------------------------------------------------------
 * lldd_ext_push_layer: one layer of push_cache / push_blocks / TransferWithCacheKeyConfig
 * (direct mode, docs/reference/semantics.md §8.5, §8.6 and §8.0 for the push order)
 * ------------------------------------------------------------------------------------------ */

typedef struct epush {
    int64_t src_id;
    uint32_t src_batch, src_layer, dst_layer, n;
    const lldd_key *dst;
    const uint64_t *sblk, *dblk;
    size_t nsb, ndb;
    int b2b;
    /* a BlocksCacheKey destination with no block lists: the vendor's layer-wise job
     * copies "batch" 0 of it, which in a blocks cache is block 0, from batch (block)
     * src_batch of the source (docs/semantics.md X-25) */
    int block0;
} epush;

/* Batches of a cache as a C2C transfer addresses them: its blocks, when it has no batches. */
static uint64_t c2c_batches(const cache_wire *w, int block0)
{
    return block0 && !kind_has_batches(w) ? w->blocks : w->batches;
}

/* Step 5: the destination, in the table copy. */
static lldd_status push_resolve_destination(xfer_job *j, const epush *a, xsrc *dst)
{
    resolve_req q;
    resolve_req_init(&q, a->dst, j->xl.l, j->e->cluster_id);
    q.req_id = UINT64_MAX;
    q.prefix_id = UINT64_MAX;
    q.direct = 1;
    q.push = 1;
    return src_resolve(&j->xl, j->fn, &q, dst);
}

/* The destination batch of a cache-to-cache push (0 when block0 names block 0). */
static uint32_t push_dst_batch(const epush *a)
{
    return a->block0 ? 0 : a->dst->batch_index;
}

/* Step 6: the destination's access, layer, batch and shape. */
static lldd_status push_destination_checks(const char *fn, const epush *a, const cache_wire *lw, const cache_wire *rw,
                                           const xlink *xl)
{
    lldd_status st;
    if ((st = push_dst_access_checks(fn, rw, xl->l, a->dst->cluster_id)) != LLM_SUCCESS ||
        (st = push_layer_check(fn, a->dst_layer, rw, a->n, 1)) != LLM_SUCCESS)
        return st;
    uint32_t dst_batch = push_dst_batch(a);
    if (!a->b2b && dst_batch >= c2c_batches(rw, a->block0)) {
        mock_set_error("%s: dst.batch_index %u is out of range: the remote cache %lld has %llu batches", fn,
                       (unsigned)dst_batch, (long long)rw->id, (unsigned long long)c2c_batches(rw, a->block0));
        return LLM_PARAM_INVALID;
    }
    if (a->block0 && !kind_has_batches(rw)) {
        if (lw->stride > rw->stride) {       /* PR-14: the guard of every C2C push */
            mock_set_error("%s: source batch larger than destination block: %llu > %llu bytes (PR-14)", fn,
                           (unsigned long long)lw->stride, (unsigned long long)rw->stride);
            return LLM_PARAM_INVALID;
        }
        return LLM_SUCCESS;
    }
    return push_dst_shape_checks(fn, a->b2b, lw, rw, a->dblk, a->ndb);
}

/* Step 7: the source's layer, kind, batch and blocks. */
static lldd_status push_source_checks(const char *fn, const epush *a, const cache_wire *lw)
{
    lldd_status st = push_layer_check(fn, a->src_layer, lw, a->n, 0);
    if (st != LLM_SUCCESS)
        return st;
    return push_src_shape_checks(fn, lw, a->n, a->b2b, !a->block0, a->src_batch, c2c_batches(lw, a->block0), a->sblk,
                                 a->nsb, a->ndb);
}

/* Step 8: the bytes. */
static lldd_status push_move(xlink *xl, const char *fn, const epush *a, const mcache *lc, const peer_cache *pc)
{
    const cache_wire *lw = &lc->w, *rw = &pc->w;
    plan p;
    plan_init(&p, a->b2b ? PLAN_B2B : PLAN_C2C, a->src_layer * a->n, a->dst_layer * a->n, a->n, lc->addrs, pc->addrs);
    if (a->b2b)
        plan_blocks(&p, a->sblk, a->dblk, a->nsb, lw->stride);
    else
        plan_range(&p, (uint64_t)a->src_batch * lw->stride, (uint64_t)push_dst_batch(a) * rw->stride, lw->stride);
    return move_bytes(xl, fn, &p, 0, rw->id);
}

/* Steps 3 to 8 of an extension push, each a function above, in this order, in the
 * frame of xfer_run: the link, the local cache's remote access and registration time,
 * the destination, its checks, the source's, the bytes. */
static lldd_status push_steps(xfer_job *j, void *arg)
{
    const epush *a = arg;
    const cache_wire *lw = &j->lc->w;
    xsrc dst;
    memset(&dst, 0, sizeof dst);
    dst.pc = &j->pc[0];
    lldd_status st;
    if ((st = link_acquire_ex(j->e, j->fn, a->dst->cluster_id, &j->xl, 0)) != LLM_SUCCESS ||
        (st = push_local_access_checks(j->fn, j->xl.l, lw, j->e->hixl)) != LLM_SUCCESS ||
        (st = push_resolve_destination(j, a, &dst)) != LLM_SUCCESS ||
        (st = push_destination_checks(j->fn, a, lw, &dst.pc->w, &j->xl)) != LLM_SUCCESS ||
        (st = push_source_checks(j->fn, a, lw)) != LLM_SUCCESS ||
        (j->e->hixl && (st = pr32_check_local(j->fn, j->xl.l, lw)) != LLM_SUCCESS))
        return st;
    return push_move(&j->xl, j->fn, a, j->lc, dst.pc);
}

lldd_status ext_xfer_push_layer(engine *e, const char *fn, int64_t src_cache_id, uint32_t src_batch_index,
                                uint32_t src_layer, const lldd_key *dst, uint32_t dst_layer,
                                uint32_t tensor_num_per_layer, const uint64_t *src_blocks, size_t num_src_blocks,
                                const uint64_t *dst_blocks, size_t num_dst_blocks)
{
    lldd_status st = LLM_SUCCESS;
    int block0 = dst->kind == LLDD_KEY_BLOCKS && num_src_blocks == 0 && num_dst_blocks == 0;
    epush a = {src_cache_id, src_batch_index, src_layer, dst_layer, tensor_num_per_layer, dst, src_blocks, dst_blocks,
               num_src_blocks, num_dst_blocks, dst->kind == LLDD_KEY_BLOCKS && !block0, block0};
    if (e->gen == GEN_V1) {
        mock_set_error("%s: push_cache and push_blocks do not exist in KvCacheManager (v1) mode", fn);
        st = LLM_FEATURE_NOT_ENABLED;
    } else if (e->mode != MODE_DIRECT) {
        mock_set_error("%s: pushes are only supported while enable_remote_cache_accessible is True (direct mode, "
                       "docs/reference/semantics.md §1.3)", fn);
        st = LLM_PARAM_INVALID;
    } else if (dst->kind != LLDD_KEY_BY_ID && dst->kind != LLDD_KEY_BLOCKS) {
        mock_set_error("%s: dst.kind %u: a push addresses a CacheKeyByIdAndIndex (LLDD_KEY_BY_ID) or a "
                       "BlocksCacheKey (LLDD_KEY_BLOCKS)", fn, (unsigned)dst->kind);
        st = LLM_PARAM_INVALID;
    } else if (tensor_num_per_layer == 0) {
        mock_set_error("%s: tensor_num_per_layer (0) is invalid, should [1, N] (PR-3)", fn);
        st = LLM_PARAM_INVALID;
    } else if (!a.b2b && (num_src_blocks > 0 || num_dst_blocks > 0)) {
        mock_set_error("%s: a push to a CacheKeyByIdAndIndex moves a batch; block lists are not read", fn);
        st = LLM_PARAM_INVALID;
    } else if (a.b2b && num_dst_blocks == 0) {
        mock_set_error("%s: dst_blocks is empty", fn);
        st = LLM_PARAM_INVALID;
    } else {
        st = xfer_run(e, fn, src_cache_id, "src_cache_id", push_steps, &a);
    }
    return st;
}

/* ---------------------------------------------------------------------------------------------
 * lldd_ext_transfer_layer: one layer of a TransferConfig (server-assisted v2, v1) to raw
 * peer addresses (docs/reference/semantics.md §8.7, PR-16, PR-40)
 * ------------------------------------------------------------------------------------------ */

/* The live remote-accessible peer tensor holding [addr, addr + len), pinned. */
static lldd_status peer_pin_addr(xlink *x, const char *fn, uint64_t addr, uint64_t len, peer_cache *pc,
                                 uint32_t *tensor)
{
    memset(pc, 0, sizeof *pc);
    mlink *l = x->l;
    const char *bad = "%s: destination range [0x%llx, +%llu) is not inside one tensor of a live, remote-accessible "
                      "cache on cluster %llu (PR-40)";
    if (l->same_process) {
        engine *peer = x->peer;
        lldd_status st = peer_local_enter(x, fn);
        if (st != LLM_SUCCESS)
            return st;
        mcache *c = holder_find_addr_locked(peer, addr, len, tensor);
        if (c != NULL)
            peer_hold_local(pc, c);
        pthread_mutex_unlock(&peer->mu);
        if (c == NULL) {
            mock_set_error(bad, fn, (unsigned long long)addr, (unsigned long long)len,
                           (unsigned long long)l->peer_cluster);
            return LLM_PARAM_INVALID;
        }
        return LLM_SUCCESS;
    }
    uint32_t timeout = x->e->sync_timeout_ms;
    int64_t deadline = tp_deadline(timeout);
    msg_hdr h;
    msg_init(&h, MSG_PIN_ADDR);
    h.a = addr;
    h.b = len;
    lldd_status st = link_ask(x, fn, &h, NULL, 0, MSG_PIN_ADDR_REPLY, deadline);
    if (st != LLM_SUCCESS)
        return st;
    if (h.status != LLM_SUCCESS) {
        mock_set_error(bad, fn, (unsigned long long)addr, (unsigned long long)len,
                       (unsigned long long)l->peer_cluster);
        return LLM_PARAM_INVALID;
    }
    if ((st = link_recv_pinned(x, fn, &h, deadline, &pc->w, sizeof pc->w, &pc->w, pc, h.a)) != LLM_SUCCESS)
        return st;
    *tensor = (uint32_t)h.a;
    return LLM_SUCCESS;
}

typedef struct etransfer {
    int64_t src_id;
    uint32_t src_batch, layer;
    uint64_t dst_cluster;
    const uint64_t *dst_addrs, *sblk, *dblk;
    size_t nsb, ndb;
    uint64_t bms;
    int form;
} etransfer;

/* v2, before the link: a HOST source (the Python layer's check, made before anything). */
static lldd_status transfer_placement_check(const char *fn, const cache_wire *lw)
{
    if (lw->placement != LLDD_PLACEMENT_DEVICE) {
        mock_set_error("%s: the source cache %lld is HOST-placed; transfer_cache_async needs a DEVICE source", fn,
                       (long long)lw->id);
        return LLM_PARAM_INVALID;
    }
    return LLM_SUCCESS;
}

/* The source's layer and tensor count (a layer is 2 tensors). */
static lldd_status transfer_layer_check(const char *fn, const etransfer *a, const cache_wire *lw)
{
    if (a->layer >= lw->num_tensors / 2) {
        mock_set_error("%s: layer %u is out of range: the source cache has %u layers of 2 tensors", fn,
                       (unsigned)a->layer, (unsigned)(lw->num_tensors / 2));
        return LLM_PARAM_INVALID;
    }
    return LLM_SUCCESS;
}

static lldd_status transfer_even_check(const char *fn, const cache_wire *lw)
{
    if (lw->num_tensors % 2 != 0) {
        mock_set_error("%s: the source cache %lld has %u tensors; a layer is 2 tensors, so it must be even", fn,
                       (long long)lw->id, (unsigned)lw->num_tensors);
        return LLM_PARAM_INVALID;
    }
    return LLM_SUCCESS;
}

/* PR-15: the contiguous forms read a batch of a source without blocks, block-to-block a
 * source with blocks. */
static lldd_status transfer_kind_check(const char *fn, const etransfer *a, const cache_wire *lw)
{
    if (a->form != PLAN_B2B && !kind_has_batches(lw)) {
        mock_set_error("%s: the source cache %lld is a blocks cache; only blocks-to-blocks transfers read it (PR-15)",
                       fn, (long long)lw->id);
        return LLM_PARAM_INVALID;
    }
    if (a->form == PLAN_B2B && !kind_has_blocks(lw)) {
        mock_set_error("%s: src_block_indices need a blocks source; cache %lld has no blocks (PR-15)", fn,
                       (long long)lw->id);
        return LLM_PARAM_INVALID;
    }
    return LLM_SUCCESS;
}

static lldd_status transfer_batch_check(const char *fn, const etransfer *a, const cache_wire *lw)
{
    if (a->src_batch >= lw->batches) {
        mock_set_error("%s: src_batch_index %u is out of range: cache %lld has %llu batches", fn,
                       (unsigned)a->src_batch, (long long)lw->id, (unsigned long long)lw->batches);
        return LLM_PARAM_INVALID;
    }
    return LLM_SUCCESS;
}

/* Block-to-block: a block size given must be the source's. */
static lldd_status transfer_b2b_size_check(const char *fn, const etransfer *a, const cache_wire *lw)
{
    if (a->bms != 0 && a->bms != lw->stride) {
        mock_set_error("%s: dst_block_memory_size %llu differs from the source block size %llu (docs/reference/semantics.md §7.5)",
                       fn, (unsigned long long)a->bms, (unsigned long long)lw->stride);
        return LLM_PARAM_INVALID;
    }
    return LLM_SUCCESS;
}

static lldd_status transfer_src_blocks_check(const char *fn, const etransfer *a, const cache_wire *lw)
{
    return check_blocks(fn, "src_block_indices", a->sblk, a->nsb, lw->blocks, "source");
}

/* Cache-to-blocks: the block size (0 < dst_block_memory_size < the source tensor size);
 * after the batch check, transfer_c2b_chunks: the chunks, whose lengths the spans need
 * (*c2b_len). */
static lldd_status transfer_c2b_size_check(const char *fn, const etransfer *a, const cache_wire *lw)
{
    if (a->bms == 0 || a->bms >= lw->tensor_size) {
        mock_set_error("%s: dst_block_memory_size %llu must > 0 and < the source tensor size %llu when transferring "
                       "from a contiguous cache to blocks", fn, (unsigned long long)a->bms,
                       (unsigned long long)lw->tensor_size);
        return LLM_PARAM_INVALID;
    }
    return LLM_SUCCESS;
}

static lldd_status transfer_c2b_chunks(const char *fn, const etransfer *a, const cache_wire *lw, uint64_t *c2b_len)
{
    return c2b_check_chunks(fn, a->ndb, a->bms, lw->stride, lw->tensor_size, c2b_len);
}

/* v1: the source checks its host and device sides make before the device looks the link
 * up (hicann/ge dflow/llm_datadist/v1/common/cache_engine.cc, CacheEngine::TransferCache:
 * the batch, the layer; then dflow/udf/built_in/llm_common/cache_manager.cpp,
 * CacheManager::TransferCache: the tensor count, and with blocks a block size above the
 * batch stride, the source blocks below the batch count, a given block size equal to the
 * stride; docs/semantics.md X-16). The device knows no cache kinds: a v1 contiguous cache's
 * batches are blocks of a block-to-block transfer, as a v1 blocks cache's blocks are its
 * batches. */
static lldd_status transfer_v1_source_checks(const char *fn, const etransfer *a, const cache_wire *lw)
{
    lldd_status st;
    if ((st = transfer_batch_check(fn, a, lw)) != LLM_SUCCESS || (st = transfer_layer_check(fn, a, lw)) != LLM_SUCCESS ||
        (st = transfer_even_check(fn, lw)) != LLM_SUCCESS || a->form != PLAN_B2B)
        return st;
    if (a->bms > lw->stride) {
        mock_set_error("%s: dst_block_memory_size %llu is larger than the source batch stride %llu", fn,
                       (unsigned long long)a->bms, (unsigned long long)lw->stride);
        return LLM_PARAM_INVALID;
    }
    if ((st = check_blocks(fn, "src_block_indices", a->sblk, a->nsb, lw->batches, "source")) != LLM_SUCCESS)
        return st;
    return transfer_b2b_size_check(fn, a, lw);
}

/* v2: after the link, in the order of the vendor's layer-wise job (hicann/hixl
 * layer_wise_transfer_job.cc, LayerWiseTransferJob::Prepare and the Generate*Task of its
 * form; docs/semantics.md X-16); the guards (PR-15, PR-16) where that job reads what
 * they guard. v1 (v1 != 0) has made all its source checks before the link. */
static lldd_status transfer_prepare_checks(const char *fn, const etransfer *a, const cache_wire *lw, int v1,
                                           uint64_t *c2b_len)
{
    lldd_status st;
    *c2b_len = 0;
    if (v1)
        return LLM_SUCCESS;     /* no cache-to-blocks form in v1 (ext_xfer_transfer_layer) */
    if ((st = transfer_layer_check(fn, a, lw)) != LLM_SUCCESS || (st = transfer_even_check(fn, lw)) != LLM_SUCCESS)
        return st;
    if (a->form == PLAN_B2B) {
        if ((st = transfer_kind_check(fn, a, lw)) != LLM_SUCCESS || (st = transfer_b2b_size_check(fn, a, lw)) != LLM_SUCCESS)
            return st;
        return transfer_src_blocks_check(fn, a, lw);
    }
    if ((a->form == PLAN_C2B && (st = transfer_c2b_size_check(fn, a, lw)) != LLM_SUCCESS) ||
        (st = transfer_kind_check(fn, a, lw)) != LLM_SUCCESS || (st = transfer_batch_check(fn, a, lw)) != LLM_SUCCESS)
        return st;
    return a->form == PLAN_C2B ? transfer_c2b_chunks(fn, a, lw, c2b_len) : LLM_SUCCESS;
}

/* The span [lo, hi) each destination address is written at (PR-40), and that it does not
 * wrap past 2^64 from either address. */
static lldd_status transfer_dst_span(const char *fn, const etransfer *a, uint64_t S, uint64_t c2b_len, uint64_t *lo,
                                     uint64_t *hi)
{
    *lo = 0;
    *hi = 0;
    if (a->form == PLAN_C2C) {
        *hi = S;
    } else {
        uint64_t block = a->form == PLAN_B2B ? S : a->bms;
        *lo = UINT64_MAX;
        for (size_t k = 0; k < a->ndb; k++) {
            uint64_t len = a->form == PLAN_B2B || k + 1 < a->ndb ? block : c2b_len - k * block;
            uint64_t start, end;
            if (__builtin_mul_overflow(a->dblk[k], block, &start) || __builtin_add_overflow(start, len, &end)) {
                mock_set_error("%s: dst_block_indices[%zu] = %llu times the block size overflows", fn, k,
                               (unsigned long long)a->dblk[k]);
                return LLM_PARAM_INVALID;
            }
            *lo = start < *lo ? start : *lo;
            *hi = end > *hi ? end : *hi;
        }
    }
    for (int j = 0; j < 2; j++) {
        uint64_t end;
        if (__builtin_add_overflow(a->dst_addrs[j], *hi, &end)) {
            mock_set_error("%s: dst_addrs[%d] + %llu overflows (PR-40)", fn, j, (unsigned long long)*hi);
            return LLM_PARAM_INVALID;
        }
    }
    return LLM_SUCCESS;
}

/* The peer's caches that hold the two destination spans, pinned (tensors[j]: the tensor
 * of span j), each registered before the link (PR-32). */
static lldd_status transfer_pin_destinations(xlink *xl, const char *fn, const etransfer *a, uint64_t lo, uint64_t hi,
                                             peer_cache pcs[2], uint32_t tensors[2])
{
    lldd_status st;
    for (int j = 0; j < 2; j++) {
        if ((st = peer_pin_addr(xl, fn, a->dst_addrs[j] + lo, hi - lo, &pcs[j], &tensors[j])) != LLM_SUCCESS)
            return st;
        if (!pcs[j].w.owned && pcs[j].w.id >= xl->l->peer_next_at_link) {
            mock_set_error("%s: dst_addrs[%d] lies in cache %lld of cluster %llu, registered after the link: not "
                           "remote accessible through it (PR-32)", fn, j, (long long)pcs[j].w.id,
                           (unsigned long long)a->dst_cluster);
            return LLM_PARAM_INVALID;
        }
    }
    return LLM_SUCCESS;
}

/* The bytes: the layer's two tensors, each to its destination. */
static lldd_status transfer_move(xlink *xl, const char *fn, const etransfer *a, const mcache *lc,
                                 const peer_cache pcs[2], const uint32_t tensors[2], uint64_t c2b_len)
{
    uint64_t S = lc->w.stride;
    lldd_status st;
    for (int j = 0; j < 2; j++) {
        plan p;
        plan_init(&p, a->form, 2 * a->layer + (uint32_t)j, tensors[j], 1, lc->addrs, pcs[j].addrs);
        uint64_t doff = a->dst_addrs[j] - pcs[j].addrs[tensors[j]];
        if (a->form == PLAN_C2C) {
            plan_range(&p, (uint64_t)a->src_batch * S, doff, S);
        } else if (a->form == PLAN_B2B) {
            plan_range(&p, 0, doff, 0);
            plan_blocks(&p, a->sblk, a->dblk, a->nsb, S);
        } else {
            plan_range(&p, (uint64_t)a->src_batch * S, doff, c2b_len);
            plan_blocks(&p, NULL, a->dblk, a->ndb, a->bms);
        }
        if ((st = move_bytes(xl, fn, &p, 0, pcs[j].w.id)) != LLM_SUCCESS)
            return st;
    }
    return LLM_SUCCESS;
}

/* A transfer by address, each step a function above, in this order, in the frame of
 * xfer_run (the two destinations pinned in j->pc): the local cache (xfer_run), what is
 * checked before the link (v2: the placement; v1: the device's source checks), the link
 * by the destination's cluster id (no own-cluster step, docs/semantics.md X-16), the
 * layer job's checks (v2), the source's registration (PR-32), the destinations (PR-40) and
 * the bytes. */
static lldd_status transfer_steps(xfer_job *j, void *arg)
{
    const etransfer *a = arg;
    const char *fn = j->fn;
    const cache_wire *lw = &j->lc->w;
    int v1 = j->e->gen == GEN_V1;
    uint64_t c2b_len = 0, lo = 0, hi = 0;
    uint32_t tensors[2];
    lldd_status st;
    if ((st = v1 ? transfer_v1_source_checks(fn, a, lw) : transfer_placement_check(fn, lw)) != LLM_SUCCESS ||
        (st = link_acquire_ex(j->e, fn, a->dst_cluster, &j->xl, v1 ? ACQUIRE_V1 : 0)) != LLM_SUCCESS ||
        (v1 && (st = pr32_check_local(fn, j->xl.l, lw)) != LLM_SUCCESS) ||
        (st = transfer_prepare_checks(fn, a, lw, v1, &c2b_len)) != LLM_SUCCESS ||
        (!v1 && (st = pr32_check_local(fn, j->xl.l, lw)) != LLM_SUCCESS) ||
        (st = transfer_dst_span(fn, a, lw->stride, c2b_len, &lo, &hi)) != LLM_SUCCESS ||
        (st = transfer_pin_destinations(&j->xl, fn, a, lo, hi, j->pc, tensors)) != LLM_SUCCESS)
        return st;
    return transfer_move(&j->xl, fn, a, j->lc, j->pc, tensors, c2b_len);
}

lldd_status ext_xfer_transfer_layer(engine *e, const char *fn, int64_t src_cache_id, uint32_t src_batch_index,
                                    uint32_t layer, uint64_t dst_cluster_id, const uint64_t *dst_addrs,
                                    const uint64_t *src_blocks, size_t num_src_blocks, const uint64_t *dst_blocks,
                                    size_t num_dst_blocks, uint64_t dst_block_memory_size)
{
    lldd_status st = LLM_SUCCESS;
    int role = atomic_load(&e->role);
    etransfer a = {src_cache_id, src_batch_index, layer, dst_cluster_id, dst_addrs, src_blocks, dst_blocks,
                   num_src_blocks, num_dst_blocks, dst_block_memory_size,
                   num_src_blocks > 0 ? PLAN_B2B : num_dst_blocks > 0 ? PLAN_C2B : PLAN_C2C};
    if (e->gen == GEN_V2 && e->mode == MODE_DIRECT) {
        mock_set_error("%s: a TransferConfig needs server-assisted mode; in direct mode transfer_cache_async takes "
                       "TransferWithCacheKeyConfig (lldd_ext_push_layer)", fn);
        st = LLM_PARAM_INVALID;
    } else if (e->gen == GEN_V1 && role != LLDD_ROLE_PROMPT) {
        mock_set_error("%s: transfer_cache_async is not supported by %s (PROMPT only in v1, docs/reference/semantics.md §11)", fn,
                       ext_role_name(role));
        st = LLM_PARAM_INVALID;
    } else if (num_src_blocks > 0 && num_dst_blocks == 0) {
        mock_set_error("%s: transfer from blocks to cache is not supported (src_blocks without dst_blocks)", fn);
        st = LLM_PARAM_INVALID;
    } else if (a.form == PLAN_B2B && num_src_blocks != num_dst_blocks) {
        mock_set_error("%s: src_blocks has %zu entries and dst_blocks %zu", fn, num_src_blocks, num_dst_blocks);
        st = LLM_PARAM_INVALID;
    } else if (e->gen == GEN_V1 && a.form == PLAN_C2B) {
        /* v1's Python layer refuses it, and its host side wants lists of one length
         * (hicann/ge llm_utils.py transfer_cache_async, cache_engine.cc CacheEngine::TransferCache) */
        mock_set_error("%s: transfer from cache to blocks is not supported in KvCacheManager (v1) mode: "
                       "dst_blocks need src_blocks of the same length", fn);
        st = LLM_PARAM_INVALID;
    } else if (a.form == PLAN_C2C && dst_block_memory_size != 0) {
        mock_set_error("%s: dst_block_memory_size %llu is given without dst_blocks", fn,
                       (unsigned long long)dst_block_memory_size);
        st = LLM_PARAM_INVALID;
    } else if (a.form == PLAN_B2B && src_batch_index != 0) {
        mock_set_error("%s: src_batch_index %u must be 0 when src_blocks are given", fn, (unsigned)src_batch_index);
        st = LLM_PARAM_INVALID;
    } else if ((st = check_repeats(fn, "dst_blocks", dst_blocks, num_dst_blocks, 1)) != LLM_SUCCESS) {
        /* message set */
    } else {
        st = xfer_run(e, fn, src_cache_id, "src_cache_id", transfer_steps, &a);
    }
    st = ext_gen_status(e, st);
    return st;
}
