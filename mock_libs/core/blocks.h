/* Block lists: runs and repeated values (engine_blocks.c). */
#ifndef LLDD_MOCK_BLOCKS_H
#define LLDD_MOCK_BLOCKS_H

#include <stddef.h>
#include <stdint.h>

/* A run (docs/reference/semantics.md §7.3) is a maximal stretch of pairs in which both the source and
 * the destination index grow by exactly 1. Runs are found on the fly while
 * walking the caller's arrays; block lists are never copied. */
typedef struct run_iter {
    const uint64_t *src;
    const uint64_t *dst;
    size_t count;
    size_t pos;
} run_iter;

static inline void run_iter_init(run_iter *it, const uint64_t *src, const uint64_t *dst, size_t count)
{
    it->src = src;
    it->dst = dst;
    it->count = count;
    it->pos = 0;
}

static inline int run_next(run_iter *it, uint64_t *s0, uint64_t *d0, uint64_t *len)
{
    size_t k = it->pos;
    if (k >= it->count)
        return 0;
    size_t j = k + 1;
    while (j < it->count && it->src[j - 1] != UINT64_MAX && it->src[j] == it->src[j - 1] + 1 &&
           it->dst[j - 1] != UINT64_MAX && it->dst[j] == it->dst[j - 1] + 1)
        j++;
    *s0 = it->src[k];
    *d0 = it->dst[k];
    *len = (uint64_t)(j - k);
    it->pos = j;
    return 1;
}

size_t count_runs(const uint64_t *src, const uint64_t *dst, size_t count);

/* A set of uint64 values: a bitmap when the values are small, else a hash table. */
typedef struct u64set {
    uint64_t *bits;
    uint64_t nbits;
    uint64_t *slots;         /* value + 1; 0 marks an empty slot */
    size_t mask;
    int has_max;             /* UINT64_MAX is in the set (it cannot be stored + 1) */
} u64set;

/* For up to `count` values none of which exceeds max_value. -1 when out of memory. */
int u64set_init(u64set *s, size_t count, uint64_t max_value);
/* 1 if v was added, 0 if it was there already. */
int u64set_add(u64set *s, uint64_t v);
int u64set_has(const u64set *s, uint64_t v);
void u64set_free(u64set *s);
/* The position of the first value of v[0 .. count) that repeats an earlier one
 * (SIZE_MAX if none); *earlier receives the earlier position. -1 on no memory. */
int find_repeat(const uint64_t *v, size_t count, size_t *pos, size_t *earlier);

#endif /* LLDD_MOCK_BLOCKS_H */
