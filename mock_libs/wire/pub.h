/* The published cache table (engine_pub.c, see there). */
#ifndef LLDD_MOCK_PUB_H
#define LLDD_MOCK_PUB_H

#include <stdatomic.h>
#include <stdint.h>

#include "core/engine.h"

/* The published cache table (engine_pub.c): a header and PUB_SLOTS slots in a memfd the
 * owner writes and identified peers map read-only, and per link a page of PUB_SLOTS pin
 * counters that only the peer raises. */
enum { PUB_SLOTS = 1024, PUB_ADDRS = 500 };
/* A cache's place in the table: none (no table, or settled after its removal), listed in
 * slot pub_slot, unlisted (counted in pub_head.unpublished), or left its slot and waiting
 * for the peers' pins there. */
enum { PUB_NONE = 0, PUB_LISTED = 1, PUB_UNLISTED = 2, PUB_LEFT = 3 };

typedef struct pub_head {
    uint64_t magic;
    uint32_t slots, addrs_per_slot;
    atomic_uint_fast64_t unpublished;  /* live caches without a slot: a miss must ask the owner */
    atomic_uint serve_delay_ms;        /* lldd_mock_set_serve_delay, which a peer emulates */
    atomic_uint ready;                 /* 0 once the owner began to finalize */
    atomic_uint_fast64_t arena_chunks; /* the owner's arena chunks when a cache was last listed: a
                                          listed cache's memory lies in them or in none */
    uint64_t reserved[3];
} pub_head;

typedef struct pub_slot {
    atomic_uint_fast64_t seq;    /* odd while the owner rewrites the slot */
    int64_t id;                  /* 0: empty */
    cache_wire w;
    uint64_t addrs[PUB_ADDRS];
} pub_slot;

/* Owner side, under e->mu: */
void pub_insert_locked(engine *e, mcache *c);
/* Takes c out of its slot (the removal then waits for the slot's pins) ... */
void pub_remove_locked(engine *e, mcache *c);
/* ... and, once no pin holds it, frees the slot for another cache. */
void pub_settled_locked(engine *e, mcache *c);
/* A live link whose peer holds c pinned through the table, or NULL. */
mlink *pub_pinned_locked(engine *e, const mcache *c);
void pub_set_delay(engine *e, uint32_t delay_ms);
void pub_set_ready_locked(engine *e, int ready);
/* For l's peer: the table's fd (ours, not to close) and a new pin page's fd (the caller
 * closes it once sent); makes the table on first use. 0, or -1 (nothing to send). */
int pub_offer_locked(engine *e, mlink *l, int fds[2]);
/* Unmaps and closes the table (also a forked child's copy of the parent's, untouched). */
void pub_destroy(engine *e);
/* Peer side: maps what TABLE answered (the fds are closed either way); 0 or -1. */
int pub_take(mlink *l, int table_fd, int pins_fd);
/* Unmaps the peer side's mappings of l (no transfer may use them) and, when l is
 * freed (owner_side), the owner's mapping of its pin page. */
void pub_drop(mlink *l, int owner_side);
enum { PUB_FOUND = 0, PUB_ABSENT = 1, PUB_ASK = 2, PUB_GONE = 3 };
/* Looks id up in the peer's table and, if found, pins it: PUB_FOUND (w, addrs, slot set),
 * PUB_ABSENT (no such live cache), PUB_ASK (the table cannot say: ask over the socket),
 * PUB_GONE (the peer is finalizing). */
int pub_lookup(mlink *l, int64_t id, cache_wire *w, uint64_t *addrs, size_t cap, uint32_t *slot);
void pub_unpin(mlink *l, uint32_t slot);
uint32_t pub_delay_ms(const mlink *l);
/* Whether the peer may have arena chunks that l has not asked for (always 1 without a
 * table): where not, asking again (MAP) cannot help a range that is not mapped. */
int pub_may_have_new_chunks(const mlink *l);

#endif /* LLDD_MOCK_PUB_H */
