/* Block-list helpers: run counting and a set of block indexes for the duplicate
 * rules (PR-5, PR-24). The set is a bitmap when the indexes are small compared with
 * their number, which is the common case of KV block tables, and an open-addressing
 * hash table otherwise, so that 100 000-entry lists cost a few milliseconds at most. */
#include <stdlib.h>
#include <string.h>

#include "core/blocks.h"

size_t count_runs(const uint64_t *src, const uint64_t *dst, size_t count)
{
    run_iter it;
    uint64_t s0, d0, len;
    size_t runs = 0;
    run_iter_init(&it, src, dst, count);
    while (run_next(&it, &s0, &d0, &len))
        runs++;
    return runs;
}

int u64set_init(u64set *s, size_t count, uint64_t max_value)
{
    memset(s, 0, sizeof *s);
    uint64_t bitmap_limit = (uint64_t)count * 64u + 65536u;
    if (max_value < bitmap_limit) {
        s->nbits = max_value + 1;
        s->bits = calloc((size_t)((s->nbits + 63) / 64), sizeof *s->bits);
        return s->bits != NULL ? 0 : -1;
    }
    size_t cap = 16;
    while (cap < count * 2 && cap < ((size_t)1 << 62))
        cap <<= 1;
    s->slots = calloc(cap, sizeof *s->slots);
    if (s->slots == NULL)
        return -1;
    s->mask = cap - 1;
    return 0;
}

static size_t slot_of(const u64set *s, uint64_t v)
{
    uint64_t h = v * 0x9E3779B97F4A7C15ull;
    return (size_t)(h ^ (h >> 29)) & s->mask;
}

int u64set_add(u64set *s, uint64_t v)
{
    if (s->bits != NULL) {
        uint64_t bit = 1ull << (v & 63);
        uint64_t *word = &s->bits[v >> 6];
        if (*word & bit)
            return 0;
        *word |= bit;
        return 1;
    }
    if (v == UINT64_MAX) {
        int had = s->has_max;
        s->has_max = 1;
        return !had;
    }
    for (size_t i = slot_of(s, v);; i = (i + 1) & s->mask) {
        if (s->slots[i] == 0) {
            s->slots[i] = v + 1;
            return 1;
        }
        if (s->slots[i] == v + 1)
            return 0;
    }
}

int u64set_has(const u64set *s, uint64_t v)
{
    if (s->bits != NULL)
        return v < s->nbits && (s->bits[v >> 6] >> (v & 63)) & 1;
    if (v == UINT64_MAX)
        return s->has_max;
    for (size_t i = slot_of(s, v);; i = (i + 1) & s->mask) {
        if (s->slots[i] == 0)
            return 0;
        if (s->slots[i] == v + 1)
            return 1;
    }
}

void u64set_free(u64set *s)
{
    free(s->bits);
    free(s->slots);
    memset(s, 0, sizeof *s);
}

int find_repeat(const uint64_t *v, size_t count, size_t *pos, size_t *earlier)
{
    *pos = SIZE_MAX;
    *earlier = SIZE_MAX;
    if (count < 2)
        return 0;
    uint64_t max = 0;
    for (size_t i = 0; i < count; i++)
        if (v[i] > max)
            max = v[i];
    u64set s;
    if (u64set_init(&s, count, max) != 0)
        return -1;
    for (size_t i = 0; i < count; i++) {
        if (!u64set_add(&s, v[i])) {
            *pos = i;
            for (size_t j = 0; j < i; j++) {
                if (v[j] == v[i]) {
                    *earlier = j;
                    break;
                }
            }
            break;
        }
    }
    u64set_free(&s);
    return 0;
}
