/* Local copies of the extension ABI: copy_cache, copy_blocks and swap_blocks
 * (semantics.md §6.6, §8.8, §8.9, §8.10). PR-24 (a block both source and destination, or
 * overlapping ranges, within one cache) is a guard; PR-5 (a repeated destination:
 * the last pair in order wins) and PR-25 (an empty mapping: copy_blocks does the
 * vendor's self-copy of block 0, swap_blocks moves nothing) are lints.
 *
 * copy_cache and copy_blocks address caches of this engine by id (deallocated caches
 * whose keys are still bound included, semantics.md §9.8). swap_blocks addresses memory by the
 * caller's address lists (Cache.create_cpu_cache gives it memory no engine knows);
 * each range it touches is checked against what the mock does know: a tensor of one
 * of this engine's caches, else a mock-ACL allocation, must hold the whole range, and
 * its placement must be the one the direction names. Memory known to neither is the
 * caller's responsibility, as on a device.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/blocks.h"
#include "core/cache_table.h"
#include "core/engine.h"
#include "ext/ext.h"
#include "base/mock_internal.h"

lldd_status ext_copy_blocks(engine *e, const char *fn, int64_t cache_id, const uint64_t *pairs, size_t num_pairs)
{
    lldd_status st = LLM_SUCCESS;
    mcache *c = NULL;
    u64set set;
    memset(&set, 0, sizeof set);
    if (num_pairs == 0 &&
        mock_lint(25, "%s: copy_block_info expands to no pair: the vendor copies block 0 of the cache onto itself, "
                      "which changes nothing (PR-25)", fn)) {
        st = LLM_PARAM_INVALID;
        goto out;
    }
    if ((c = cache_pin(e, cache_id)) == NULL) {
        mock_set_error("%s: cache_id %lld does not exist", fn, (long long)cache_id);
        st = LLM_KV_CACHE_NOT_EXIST;
        goto out;
    }
    const cache_wire *w = &c->w;
    if (e->gen == GEN_V1 && w->placement != LLDD_PLACEMENT_DEVICE) {
        mock_set_error("%s: cache %lld is HOST-placed; v1 copies support device caches only", fn, (long long)w->id);
        st = LLM_PARAM_INVALID;
        goto out;
    }
    if (!kind_has_blocks(w)) {
        mock_set_error("%s: cache %lld has no blocks", fn, (long long)w->id);
        st = LLM_PARAM_INVALID;
        goto out;
    }
    if (num_pairs == 0)
        goto out; /* the vendor's contiguous self-copy of block 0: no byte changes (PR-25) */
    for (size_t k = 0; k < 2 * num_pairs; k++) {
        if (pairs[k] >= w->blocks) {
            mock_set_error("%s: %s block %llu of pair %zu is out of range: cache %lld has %llu blocks", fn,
                           k % 2 ? "destination" : "source", (unsigned long long)pairs[k], k / 2, (long long)w->id,
                           (unsigned long long)w->blocks);
            st = LLM_PARAM_INVALID;
            goto out;
        }
    }
    if (u64set_init(&set, num_pairs, w->blocks - 1) != 0) {
        mock_set_error("%s: out of host memory", fn);
        st = LLM_FAILED;
        goto out;
    }
    size_t repeat = SIZE_MAX;
    for (size_t k = 0; k < num_pairs; k++)
        if (!u64set_add(&set, pairs[2 * k + 1]) && repeat == SIZE_MAX)
            repeat = k;
    if (repeat != SIZE_MAX &&
        mock_lint(5, "%s: destination block %llu (pair %zu) appears more than once; the last pair in order wins "
                     "(PR-5)", fn, (unsigned long long)pairs[2 * repeat + 1], repeat)) {
        st = LLM_PARAM_INVALID;
        goto out;
    }
    for (size_t k = 0; k < num_pairs; k++) {
        if (u64set_has(&set, pairs[2 * k])) {
            mock_set_error("%s: block %llu of cache %lld is both a source and a destination (PR-24)", fn,
                           (unsigned long long)pairs[2 * k], (long long)w->id);
            st = LLM_PARAM_INVALID;
            goto out;
        }
    }
    for (size_t k = 0; k < num_pairs; k++)
        for (uint32_t t = 0; t < w->num_tensors; t++)
            memmove((char *)(uintptr_t)c->addrs[t] + pairs[2 * k + 1] * w->stride,
                    (const char *)(uintptr_t)c->addrs[t] + pairs[2 * k] * w->stride, (size_t)w->stride);
    mock_bytes_moved_add((uint64_t)num_pairs * w->num_tensors * w->stride);
out:
    u64set_free(&set);
    if (c != NULL)
        cache_unpin(e, c);
    return st;
}

/* ---------------------------------------------------------------------------------------------
 * swap_blocks
 * ------------------------------------------------------------------------------------------ */

/* Checks the bytes [base + lo, base + hi) of one tensor of a swap against what the
 * mock knows of the buffer at `base`: when base lies in a tensor of one of this
 * engine's caches or in a mock-ACL allocation, the bytes must lie inside it and its
 * placement must be the one the direction names. Pins the engine cache that holds
 * it (*pinned, NULL otherwise). mu not held. */
static lldd_status check_swap_range(engine *e, const char *fn, const char *side, size_t tensor, uint64_t base,
                                    uint64_t lo, uint64_t hi, uint32_t want_placement, mcache **pinned)
{
    *pinned = NULL;
    const char *want = want_placement == LLDD_PLACEMENT_HOST ? "HOST" : "DEVICE";
    pthread_mutex_lock(&e->mu);
    for (size_t i = 0; i < e->cache_count; i++) {
        mcache *c = e->caches[i];
        for (uint32_t t = 0; t < c->w.num_tensors; t++) {
            uint64_t start = c->addrs[t];
            if (base < start || base - start >= c->w.tensor_size)
                continue;
            uint64_t off = base - start;
            if (hi > c->w.tensor_size - off) {
                pthread_mutex_unlock(&e->mu);
                mock_set_error("%s: %s tensor %zu: bytes [%llu, %llu) from 0x%llx run past the end of tensor %u of "
                               "cache %lld (%llu bytes)", fn, side, tensor, (unsigned long long)lo,
                               (unsigned long long)hi, (unsigned long long)base, (unsigned)t, (long long)c->w.id,
                               (unsigned long long)c->w.tensor_size);
                return LLM_PARAM_INVALID;
            }
            if (c->w.placement != want_placement) {
                pthread_mutex_unlock(&e->mu);
                mock_set_error("%s: %s tensor %zu lies in cache %lld, which is %s-placed; this swap needs %s", fn,
                               side, tensor, (long long)c->w.id,
                               c->w.placement == LLDD_PLACEMENT_HOST ? "HOST" : "DEVICE", want);
                return LLM_PARAM_INVALID;
            }
            c->pins++;
            *pinned = c;
            pthread_mutex_unlock(&e->mu);
            return LLM_SUCCESS;
        }
    }
    pthread_mutex_unlock(&e->mu);
    mock_alloc_info a;
    if (!mock_acl_lookup((uintptr_t)base, &a))
        return LLM_SUCCESS; /* memory the mock does not track */
    uint64_t off = base - (uint64_t)a.base;
    if (!a.live) {
        mock_set_error("%s: %s tensor %zu: 0x%llx lies in a freed aclrtMalloc%s allocation", fn, side, tensor,
                       (unsigned long long)base, a.kind == MOCK_MEM_HOST ? "Host" : "");
        return LLM_PARAM_INVALID;
    }
    if (off > a.size || hi > a.size - off) {
        mock_set_error("%s: %s tensor %zu: bytes [%llu, %llu) from 0x%llx run past the end of its aclrtMalloc%s "
                       "allocation [0x%llx, +%zu)", fn, side, tensor, (unsigned long long)lo, (unsigned long long)hi,
                       (unsigned long long)base, a.kind == MOCK_MEM_HOST ? "Host" : "", (unsigned long long)a.base,
                       a.size);
        return LLM_PARAM_INVALID;
    }
    uint32_t placement = a.kind == MOCK_MEM_HOST ? LLDD_PLACEMENT_HOST : LLDD_PLACEMENT_DEVICE;
    if (placement != want_placement) {
        mock_set_error("%s: %s tensor %zu lies in %s memory; this swap needs %s", fn, side, tensor,
                       a.kind == MOCK_MEM_HOST ? "aclrtMallocHost (HOST)" : "aclrtMalloc (DEVICE)", want);
        return LLM_PARAM_INVALID;
    }
    return LLM_SUCCESS;
}

/* The byte ranges [*slo, *shi) and [*dlo, *dhi) that the pairs' source and destination
 * blocks span within a tensor; PARAM_INVALID when one overflows. */
static lldd_status swap_spans(const char *fn, const uint64_t *pairs, size_t num_pairs, uint64_t block_size,
                              uint64_t *slo, uint64_t *shi, uint64_t *dlo, uint64_t *dhi)
{
    uint64_t smax = 0, smin = UINT64_MAX, dmax = 0, dmin = UINT64_MAX;
    for (size_t k = 0; k < num_pairs; k++) {
        uint64_t s = pairs[2 * k], d = pairs[2 * k + 1];
        smin = s < smin ? s : smin;
        smax = s > smax ? s : smax;
        dmin = d < dmin ? d : dmin;
        dmax = d > dmax ? d : dmax;
    }
    if (smax == UINT64_MAX || dmax == UINT64_MAX || __builtin_mul_overflow(smin, block_size, slo) ||
        __builtin_mul_overflow(smax + 1, block_size, shi) || __builtin_mul_overflow(dmin, block_size, dlo) ||
        __builtin_mul_overflow(dmax + 1, block_size, dhi)) {
        mock_set_error("%s: a block index times block_size %llu overflows", fn, (unsigned long long)block_size);
        return LLM_PARAM_INVALID;
    }
    return LLM_SUCCESS;
}

/* A repeated destination block: the PR-5 lint. */
static lldd_status swap_dst_repeats(const char *fn, const uint64_t *pairs, size_t num_pairs)
{
    size_t pos, earlier;
    uint64_t *dsts = malloc(num_pairs * sizeof *dsts);
    if (dsts == NULL) {
        mock_set_error("%s: out of host memory", fn);
        return LLM_FAILED;
    }
    for (size_t k = 0; k < num_pairs; k++)
        dsts[k] = pairs[2 * k + 1];
    int rc = find_repeat(dsts, num_pairs, &pos, &earlier);
    uint64_t repeated = pos != SIZE_MAX ? dsts[pos] : 0;
    free(dsts);
    if (rc != 0) {
        mock_set_error("%s: out of host memory", fn);
        return LLM_FAILED;
    }
    if (pos != SIZE_MAX &&
        mock_lint(5, "%s: destination block %llu appears more than once (pairs %zu and %zu); the last pair in "
                     "order wins (PR-5)", fn, (unsigned long long)repeated, earlier, pos))
        return LLM_PARAM_INVALID;
    return LLM_SUCCESS;
}

/* Per tensor: both addresses given, the spans inside the address space and inside
 * allocations of the right placement (pinned into pins, *npins of them), and the source
 * and destination spans apart (PR-24). */
static lldd_status swap_tensor_checks(engine *e, const char *fn, const uint64_t *src_addrs, const uint64_t *dst_addrs,
                                      size_t num_tensors, uint32_t swap_in, uint64_t slo, uint64_t shi, uint64_t dlo,
                                      uint64_t dhi, mcache **pins, size_t *npins)
{
    lldd_status st;
    uint32_t src_place = swap_in ? LLDD_PLACEMENT_HOST : LLDD_PLACEMENT_DEVICE;
    uint32_t dst_place = swap_in ? LLDD_PLACEMENT_DEVICE : LLDD_PLACEMENT_HOST;
    for (size_t t = 0; t < num_tensors; t++) {
        uint64_t s_end, d_end;
        if (src_addrs[t] == 0 || dst_addrs[t] == 0) {
            mock_set_error("%s: %s_addrs[%zu] is 0", fn, src_addrs[t] == 0 ? "src" : "dst", t);
            return LLM_PARAM_INVALID;
        }
        if (__builtin_add_overflow(src_addrs[t], shi, &s_end) || __builtin_add_overflow(dst_addrs[t], dhi, &d_end)) {
            mock_set_error("%s: tensor %zu: the swapped blocks run past the end of the address space", fn, t);
            return LLM_PARAM_INVALID;
        }
        if ((st = check_swap_range(e, fn, "source", t, src_addrs[t], slo, shi, src_place, &pins[*npins])) !=
            LLM_SUCCESS)
            return st;
        *npins += pins[*npins] != NULL;
        if ((st = check_swap_range(e, fn, "destination", t, dst_addrs[t], dlo, dhi, dst_place, &pins[*npins])) !=
            LLM_SUCCESS)
            return st;
        *npins += pins[*npins] != NULL;
        if (src_addrs[t] + slo < d_end && dst_addrs[t] + dlo < s_end) {
            mock_set_error("%s: tensor %zu: the source blocks [0x%llx, 0x%llx) and destination blocks [0x%llx, "
                           "0x%llx) overlap (PR-24)", fn, t, (unsigned long long)(src_addrs[t] + slo),
                           (unsigned long long)s_end, (unsigned long long)(dst_addrs[t] + dlo),
                           (unsigned long long)d_end);
            return LLM_PARAM_INVALID;
        }
    }
    return LLM_SUCCESS;
}

/* The bytes: the runs of the mapping in its order (semantics.md §7.3), in every tensor. */
static void swap_move(const uint64_t *src_addrs, const uint64_t *dst_addrs, size_t num_tensors, uint64_t block_size,
                      const uint64_t *pairs, size_t num_pairs)
{
    for (size_t k = 0; k < num_pairs;) {
        size_t j = k + 1;
        while (j < num_pairs && pairs[2 * j] == pairs[2 * j - 2] + 1 && pairs[2 * j + 1] == pairs[2 * j - 1] + 1)
            j++;
        uint64_t s0 = pairs[2 * k], d0 = pairs[2 * k + 1], len = (uint64_t)(j - k) * block_size;
        for (size_t t = 0; t < num_tensors; t++)
            memmove((char *)(uintptr_t)(dst_addrs[t] + d0 * block_size),
                    (const char *)(uintptr_t)(src_addrs[t] + s0 * block_size), (size_t)len);
        mock_bytes_moved_add(len * num_tensors);
        k = j;
    }
}

lldd_status ext_swap_blocks(engine *e, const char *fn, const uint64_t *src_addrs, const uint64_t *dst_addrs,
                            size_t num_tensors, uint64_t block_size, const uint64_t *pairs, size_t num_pairs,
                            uint32_t swap_in)
{
    lldd_status st = LLM_SUCCESS;
    mcache **pins = NULL;
    size_t npins = 0;
    uint64_t slo, shi, dlo, dhi;
    if (num_tensors == 0 || block_size == 0) {
        mock_set_error("%s: %s is 0", fn, num_tensors == 0 ? "num_tensors" : "block_size");
        st = LLM_PARAM_INVALID;
        goto out;
    }
    if (swap_in > 1) {
        mock_set_error("%s: swap_in %u must be 1 (HOST to DEVICE) or 0 (DEVICE to HOST)", fn, (unsigned)swap_in);
        st = LLM_PARAM_INVALID;
        goto out;
    }
    if (num_pairs == 0) {
        /* the vendor validates no range and copies nothing, successfully */
        if (mock_lint(25, "%s: src_to_dst is empty: the swap succeeds and moves nothing (PR-25)", fn))
            st = LLM_PARAM_INVALID;
        goto out;
    }
    if ((st = swap_spans(fn, pairs, num_pairs, block_size, &slo, &shi, &dlo, &dhi)) != LLM_SUCCESS ||
        (st = swap_dst_repeats(fn, pairs, num_pairs)) != LLM_SUCCESS)
        goto out;
    pins = calloc(2 * num_tensors, sizeof *pins);
    if (pins == NULL) {
        mock_set_error("%s: out of host memory", fn);
        st = LLM_FAILED;
        goto out;
    }
    if ((st = swap_tensor_checks(e, fn, src_addrs, dst_addrs, num_tensors, swap_in, slo, shi, dlo, dhi, pins,
                                 &npins)) != LLM_SUCCESS)
        goto out;
    swap_move(src_addrs, dst_addrs, num_tensors, block_size, pairs, num_pairs);
out:
    if (npins > 0) {
        pthread_mutex_lock(&e->mu);
        for (size_t i = 0; i < npins; i++)
            cache_unpin_locked(e, pins[i]);
        pthread_mutex_unlock(&e->mu);
    }
    free(pins);
    return st;
}
