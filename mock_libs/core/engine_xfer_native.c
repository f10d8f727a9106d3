/* The native transfer calls past their entry (api_transfers.c): PullKvCache, PullKvBlocks,
 * PushKvCache and PushKvBlocks, in the order of docs/reference/cpp-api.md §6.10-6.11 and
 * docs/reference/semantics.md §8.0. This file keeps the native API's order, its
 * KvCacheExtParam and the checks whose words are its own; the stages it runs (the frame,
 * the link, the peer's cache, the shared checks, the plan and the bytes) are the
 * pipeline's (engine_xfer.c). A multi-layer push moves the layers before the first
 * failing one and then reports that layer's failure, as the vendor's layer loop does.
 */
#include <stdint.h>
#include <string.h>

#include "core/blocks.h"
#include "core/cache_table.h"
#include "core/engine.h"
#include "wire/links.h"
#include "base/mock_internal.h"
#include "core/transfers.h"

enum { DIRECT_REQUEST_ENTRIES = 131064 };

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
    lldd_status st = a->b2b ? pull_dst_blocks_check(fn, lw) : pull_dst_batch_checks(fn, lw, a->batch_index, a->size, 1);
    if (st != LLM_SUCCESS)
        return st;
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
        if ((st = pull_dst_block_list_checks(fn, lw, a->dblk, a->nblk)) != LLM_SUCCESS)
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
    if (!rw->remote_accessible || !lw->remote_accessible) {
        mock_set_error("%s: the %s cache is not remote accessible", fn, !rw->remote_accessible ? "remote" : "local");
        return LLM_PARAM_INVALID;
    }
    return pr32_checks(fn, xl->l, lw, rw, a->src->cluster_id);
}

/* Step 9: the source's kind, tensors, stride and blocks. */
static lldd_status pull_source_checks(const char *fn, const pull_args *a, const cache_wire *lw, pull_found *f)
{
    const ext_norm *x = &a->x;
    const cache_wire *rw = f->rw;
    lldd_status st;
    if (!a->b2b && !kind_has_batches(rw)) {
        mock_set_error("%s: the source cache %lld is a blocks cache; a contiguous pull needs batches (PR-15)", fn,
                       (long long)rw->id);
        return LLM_PARAM_INVALID;
    }
    if (a->b2b && !kind_has_blocks(rw)) {
        mock_set_error("%s: the source cache %lld has no blocks (PR-15)", fn, (long long)rw->id);
        return LLM_PARAM_INVALID;
    }
    if (x->has_range && (uint64_t)(x->ss + 1) * x->n > rw->num_tensors) {
        mock_set_error("%s: src_layer_range {%lld, %lld} selects tensors up to %llu, but the source cache has %u "
                       "(PR-12)", fn, (long long)x->sf, (long long)x->ss, (unsigned long long)((x->ss + 1) * x->n - 1),
                       (unsigned)rw->num_tensors);
        return LLM_PARAM_INVALID;
    }
    if (!x->has_range && (st = pull_src_count_check(fn, rw, lw)) != LLM_SUCCESS)
        return st;
    f->len = a->size > 0 ? (uint64_t)a->size : lw->stride;
    f->soff = 0;
    if (a->b2b)
        return pull_src_block_checks(fn, a->sblk, a->nblk, rw, lw);
    if ((st = pull_src_len_check(fn, f->len, rw)) != LLM_SUCCESS)
        return st;
    return pull_src_batch_start(fn, a->src->batch_index, lw, rw, f->len, &f->soff);
}

/* Step 10: the bytes. */
static lldd_status pull_move(xlink *xl, const char *fn, const pull_args *a, const mcache *lc, const peer_cache *pc,
                             const pull_found *f)
{
    const cache_wire *lw = &lc->w;
    plan p;
    plan_init(&p, a->b2b ? PLAN_B2B : PLAN_C2C, (uint32_t)f->s_base, (uint32_t)f->d_base, (uint32_t)f->pairs,
              pc->addrs, lc->addrs);
    if (a->b2b)
        plan_blocks(&p, a->sblk, a->dblk, a->nblk, lw->stride);
    else
        plan_range(&p, f->soff, (uint64_t)a->batch_index * lw->stride, f->len);
    return move_bytes(xl, fn, &p, 1, f->rw->id);
}

/* Steps 4 to 10 of a native pull (docs/reference/semantics.md §8.0), each a function above, in this order. */
static lldd_status pull_steps(xfer_job *j, void *arg)
{
    const pull_args *a = arg;
    const char *fn = j->fn;
    const cache_wire *lw = &j->lc->w;
    pull_found f;
    memset(&f, 0, sizeof f);
    lldd_status st;
    if ((st = pull_local_checks(fn, a, lw, &f)) != LLM_SUCCESS ||
        (st = link_acquire_ex(j->e, fn, a->src->cluster_id, &j->xl, ACQUIRE_SHARED)) != LLM_SUCCESS ||
        (st = pull_request_checks(fn, a, lw, &f)) != LLM_SUCCESS ||
        (st = pull_source(&j->xl, fn, a, &j->pc[0], &f)) != LLM_SUCCESS ||
        (st = pull_access_checks(&j->xl, fn, a, lw, f.rw)) != LLM_SUCCESS ||
        (st = pull_source_checks(fn, a, lw, &f)) != LLM_SUCCESS)
        return st;
    return pull_move(&j->xl, fn, a, j->lc, &j->pc[0], &f);
}

/* Steps 1 to 3: the arguments past the NULLs (a cache pull: size, ext_param; a block
 * pull: the source batch, ext_param, the lists), the source cluster; then the frame. */
static lldd_status do_pull(engine *e, const char *fn, pull_args *a, size_t num_dst_blocks,
                           const lldd_ext_param *ext_param)
{
    lldd_status st;
    if (!a->b2b && a->size != -1 && a->size <= 0)
        return mock_refuse("%s: size %lld must be -1 or > 0", fn, (long long)a->size);
    if (a->b2b && a->src->batch_index != 0)
        return mock_refuse("%s: src_cache_index.batch_index %u must be 0 for a block pull", fn,
                           (unsigned)a->src->batch_index);
    if ((st = check_ext(fn, ext_param, 0, 0, &a->x)) != LLM_SUCCESS)
        return st;
    if (a->b2b && a->nblk == 0)
        return mock_refuse("%s: src_blocks is empty: pull from non-block cache is not supported yet", fn);
    if (a->b2b && a->nblk != num_dst_blocks)
        return mock_refuse("%s: src_blocks has %zu entries and dst_blocks %zu", fn, a->nblk, num_dst_blocks);
    if (a->src->cluster_id == e->cluster_id)
        return mock_refuse("%s: src_cache_index.cluster_id %llu is this engine's own cluster; pull from a peer", fn,
                           (unsigned long long)a->src->cluster_id);
    return xfer_run(e, fn, a->dst_id, "dst_cache.cache_id", pull_steps, a);
}

lldd_status xfer_pull_cache(engine *e, const char *fn, const lldd_cache_index *src_cache_index,
                            const lldd_cache *dst_cache, uint32_t batch_index, int64_t size,
                            const lldd_ext_param *ext_param)
{
    pull_args a = {.src = src_cache_index, .dst_id = dst_cache->cache_id, .batch_index = batch_index, .size = size};
    return do_pull(e, fn, &a, 0, ext_param);
}

lldd_status xfer_pull_blocks(engine *e, const char *fn, const lldd_cache_index *src_cache_index,
                             const lldd_cache *dst_cache, const uint64_t *src_blocks, size_t num_src_blocks,
                             const uint64_t *dst_blocks, size_t num_dst_blocks, const lldd_ext_param *ext_param)
{
    pull_args a = {.src = src_cache_index, .dst_id = dst_cache->cache_id, .b2b = 1, .size = -1,
                   .sblk = src_blocks, .dblk = dst_blocks, .nblk = num_src_blocks};
    return do_pull(e, fn, &a, num_dst_blocks, ext_param);
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
    uint64_t ls0, ld0, layers;     /* the layer pairs (docs/reference/cpp-api.md §6.11 step 6) */
} push_args;

/* Steps 6 and 7 of the push order for one layer pair; `first` runs the checks that
 * do not depend on the layer (they give the same answer for every layer). */
static lldd_status push_layer_checks(const char *fn, const push_args *a, const cache_wire *lw, const cache_wire *rw,
                                     const mlink *l, uint64_t ls, uint64_t ld, int first)
{
    const ext_norm *x = &a->x;
    lldd_status st;
    if (first && (st = push_dst_access_checks(fn, rw, l, a->dst->cluster_id)) != LLM_SUCCESS)
        return st;
    if ((st = push_layer_check(fn, ld, rw, x->n, 1)) != LLM_SUCCESS)
        return st;
    if (first) {
        if (!a->b2b && a->dst->batch_index >= rw->batches) {
            mock_set_error("%s: dst_cache_index.batch_index %u is out of range: the remote cache has %llu batches", fn,
                           (unsigned)a->dst->batch_index, (unsigned long long)rw->batches);
            return LLM_PARAM_INVALID;
        }
        if ((st = push_dst_shape_checks(fn, a->b2b, lw, rw, a->dblk, a->nblk)) != LLM_SUCCESS)
            return st;
    }
    if ((st = push_layer_check(fn, ls, lw, x->n, 0)) != LLM_SUCCESS)
        return st;
    if (first)
        return push_src_shape_checks(fn, lw, x->n, a->b2b, 0, a->src_batch, lw->batches, a->sblk, a->nblk, a->nblk);
    return LLM_SUCCESS;
}

/* Steps 1 and 2 past the arguments: the lints on the caller's description (the vendor
 * checks only that description, PR-33), and the layer pairs. */
static lldd_status push_local_lints(const char *fn, push_args *a, const cache_wire *lw)
{
    const ext_norm *x = &a->x;
    uint32_t caller_tensors = a->src->cache_desc.num_tensors;
    if (caller_tensors != 0 && caller_tensors != lw->num_tensors &&
        mock_lint(33, "%s: src_cache.cache_desc.num_tensors %u differs from the %u tensors of cache %lld (PR-33)", fn,
                  (unsigned)caller_tensors, (unsigned)lw->num_tensors, (long long)lw->id))
        return LLM_PARAM_INVALID;
    if (lw->placement != LLDD_PLACEMENT_DEVICE &&
        mock_lint(33, "%s: cache %lld is registered with placement HOST; pushes read DEVICE caches (PR-33)", fn,
                  (long long)lw->id))
        return LLM_PARAM_INVALID;
    if (x->sf < 0) {
        uint64_t nt = caller_tensors;
        uint64_t m = nt < x->n ? 0 : (nt % x->n == 0 ? nt / x->n - 1 : nt / x->n);
        a->ls0 = a->ld0 = 0;
        a->layers = m + 1;
    } else {
        a->ls0 = (uint64_t)x->sf;
        a->ld0 = (uint64_t)x->df;
        a->layers = (uint64_t)(x->ss - x->sf + 1);
    }
    return LLM_SUCCESS;
}

/* The bytes of the first `ok` layers. */
static lldd_status push_move(xlink *xl, const char *fn, const push_args *a, const mcache *lc, const peer_cache *pc,
                             uint64_t ok)
{
    const cache_wire *lw = &lc->w;
    uint32_t n = a->x.n;
    plan p;
    plan_init(&p, a->b2b ? PLAN_B2B : PLAN_C2C, (uint32_t)(a->ls0 * n), (uint32_t)(a->ld0 * n), (uint32_t)(ok * n),
              lc->addrs, pc->addrs);
    if (a->b2b)
        plan_blocks(&p, a->sblk, a->dblk, a->nblk, lw->stride);
    else
        plan_range(&p, (uint64_t)a->src_batch * lw->stride, (uint64_t)a->dst->batch_index * pc->w.stride, lw->stride);
    return move_bytes(xl, fn, &p, 0, pc->w.id);
}

/* The steps of a native push past its arguments, in this order. */
static lldd_status push_steps(xfer_job *j, void *arg)
{
    push_args *a = arg;
    const char *fn = j->fn;
    const cache_wire *lw = &j->lc->w;
    xlink *xl = &j->xl;
    peer_cache *pc = &j->pc[0];
    lldd_status st;
    /* the lints and the layer pairs; step 3: the link; step 4: the local cache's remote
     * access; step 5: the destination */
    if ((st = push_local_lints(fn, a, lw)) != LLM_SUCCESS ||
        (st = link_acquire_ex(j->e, fn, a->dst->cluster_id, xl, ACQUIRE_SHARED)) != LLM_SUCCESS ||
        (st = push_local_access_checks(fn, xl->l, lw, j->e->hixl)) != LLM_SUCCESS ||
        (st = peer_pin(xl, fn, a->dst->cache_id, pc)) != LLM_SUCCESS)
        return st;
    /* steps 6, 7 per layer; the layers before the first failing one are moved */
    uint64_t ok = 0;
    lldd_status layer_st = LLM_SUCCESS;
    for (; ok < a->layers; ok++) {
        layer_st = push_layer_checks(fn, a, lw, &pc->w, xl->l, a->ls0 + ok, a->ld0 + ok, ok == 0);
        /* HIXL: the first layer's transfer refuses a source registered after the link (E-11) */
        if (layer_st == LLM_SUCCESS && ok == 0 && j->e->hixl)
            layer_st = pr32_check_local(fn, xl->l, lw);
        if (layer_st != LLM_SUCCESS)
            break;
    }
    if (ok > 0 && (st = push_move(xl, fn, a, j->lc, pc, ok)) != LLM_SUCCESS)
        return st;
    return layer_st;
}

/* The arguments past the NULLs (placement; a cache push: size; a block push: the lists,
 * the destination batch; then ext_param); then the frame. */
static lldd_status do_push(engine *e, const char *fn, push_args *a, int64_t size, size_t num_dst_blocks,
                           const lldd_ext_param *ext_param)
{
    lldd_status st;
    if (a->src->cache_desc.placement != LLDD_PLACEMENT_DEVICE)
        return mock_refuse("%s: src_cache.cache_desc.placement must be DEVICE", fn);
    if (!a->b2b && size != -1)
        return mock_refuse("%s: size %lld: size only support -1", fn, (long long)size);
    if (a->b2b && a->nblk == 0)
        return mock_refuse("%s: src_blocks is empty", fn);
    if (a->b2b && a->nblk != num_dst_blocks)
        return mock_refuse("%s: src_blocks has %zu entries and dst_blocks %zu", fn, a->nblk, num_dst_blocks);
    if (a->b2b && a->dst->batch_index != 0)
        return mock_refuse("%s: dst_cache_index.batch_index %u must be 0 for a block push", fn,
                           (unsigned)a->dst->batch_index);
    if ((st = check_ext(fn, ext_param, 1, a->src->cache_desc.num_tensors, &a->x)) != LLM_SUCCESS)
        return st;
    return xfer_run(e, fn, a->src->cache_id, "src_cache.cache_id", push_steps, a);
}

lldd_status xfer_push_cache(engine *e, const char *fn, const lldd_cache *src_cache,
                            const lldd_cache_index *dst_cache_index, uint32_t src_batch_index, int64_t size,
                            const lldd_ext_param *ext_param)
{
    push_args a = {.src = src_cache, .dst = dst_cache_index, .src_batch = src_batch_index};
    return do_push(e, fn, &a, size, 0, ext_param);
}

lldd_status xfer_push_blocks(engine *e, const char *fn, const lldd_cache *src_cache,
                             const lldd_cache_index *dst_cache_index, const uint64_t *src_blocks, size_t num_src_blocks,
                             const uint64_t *dst_blocks, size_t num_dst_blocks, const lldd_ext_param *ext_param)
{
    push_args a = {.src = src_cache, .dst = dst_cache_index, .b2b = 1,
                   .sblk = src_blocks, .dblk = dst_blocks, .nblk = num_src_blocks};
    return do_push(e, fn, &a, -1, num_dst_blocks, ext_param);
}
