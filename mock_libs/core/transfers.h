/* The pieces of a transfer that the native and the extension transfer calls share
 * (engine_xfer.c): holding a link, the entry checks, resolving the peer's cache, moving
 * the bytes. */
#ifndef LLDD_MOCK_TRANSFERS_H
#define LLDD_MOCK_TRANSFERS_H

#include <stddef.h>
#include <stdint.h>

#include "wire/links.h"
#include "wire/pub.h"

typedef struct xlink {
    engine *e;
    mlink *l;
    engine *peer;        /* same process: the peer engine, held through the registry */
    int locked;          /* xfer_mu held: 1 exclusive, 2 shared */
    int sock_locked;     /* shared holder: sock_mu held */
} xlink;

typedef struct peer_cache {
    cache_wire w;
    const uint64_t *addrs;
    uint64_t *owned_addrs;   /* another process: our copy of its addresses */
    mcache *pc;              /* same process: the pinned cache */
    int pinned;              /* 1 pinned by the peer or in-process, 2 through the published table */
    uint32_t pub_slot;
    uint64_t pub_addrs[PUB_ADDRS];
} peer_cache;

/* Which bytes move (docs/reference/semantics.md §8): tensor pairs x regions. Pair i is source tensor
 * smap[i] (s_base + i without a map) and destination tensor dmap[i] (d_base + i).
 *   C2C: one region per pair, soff/doff, len bytes;
 *   B2B: per run (s0, d0, n) of sblk/dblk: soff + s0*block, doff + d0*block, n*block;
 *   C2B: per chunk k < nblk: soff + k*block, doff + dblk[k]*block, min(block, len - k*block). */
enum { PLAN_C2C = 0, PLAN_B2B = 1, PLAN_C2B = 2 };

typedef struct plan {
    int form;
    uint32_t s_base, d_base, pairs;
    const uint64_t *smap, *dmap;
    const uint64_t *src_addrs, *dst_addrs;
    uint64_t soff, doff, len;
    const uint64_t *sblk, *dblk;
    size_t nblk;
    uint64_t block;
} plan;

/* Options of link_acquire: v1 links report busy and torn-down links as LINK_BUSY and
 * wait for the link's lock no longer than the transfer timeout (docs/reference/semantics.md §10.5). */
enum { ACQUIRE_V1 = 1, ACQUIRE_SHARED = 2 };
lldd_status link_acquire_ex(engine *e, const char *fn, uint64_t cluster, xlink *x, int flags);
void link_release(xlink *x);
/* The entry of a transfer call (native and extension): an injected fault, then NULL
 * arguments in parameter order (engine, a, b unless b_name is NULL, block lists that
 * have entries), then engine_enter. Anything but LLM_SUCCESS is the call's answer. */
lldd_status xfer_call_enter(engine *e, const char *fn, const char *a_name, const void *a, const char *b_name,
                            const void *b, const uint64_t *src_blocks, size_t num_src_blocks,
                            const uint64_t *dst_blocks, size_t num_dst_blocks);
/* xfer_call_enter for the native calls, whose lldd_cache argument `c` (a or b) also
 * carries arrays with counts, checked with the other pointers (E-1, E-23). */
lldd_status xfer_cache_call_enter(engine *e, const char *fn, const char *a_name, const void *a,
                                  const char *b_name, const void *b, const char *c_name, const lldd_cache *c,
                                  const uint64_t *src_blocks, size_t num_src_blocks, const uint64_t *dst_blocks,
                                  size_t num_dst_blocks);
lldd_status link_timeout(xlink *x, const char *fn, const char *fmt, ...) MOCK_PRINTF(3, 4);
/* Same process: emulates the peer's serve delay, then locks peer->mu and checks that
 * the peer still holds its side of the link (TIMEOUT otherwise, PR-31). */
lldd_status peer_local_enter(xlink *x, const char *fn);
/* Step 7 of semantics.md §8.0 for a cache id (the native path): resolves and pins it. */
lldd_status peer_pin(xlink *x, const char *fn, int64_t id, peer_cache *pc);
/* One request and its answer on the link's request socket: h is sent and the answer's
 * header, which must be of type `reply`, read into it by `deadline`. LLM_SUCCESS, or
 * link_timeout's TIMEOUT (no answer in time, or the peer's side gone). */
lldd_status link_ask(xlink *x, const char *fn, msg_hdr *h, uint16_t reply, int64_t deadline);
/* The body of a pin answer (PIN, PIN_ADDR) to h: the cache's description and its
 * addresses into pc (pinned), checked against the payload's length, WIRE_MAX_TENSORS
 * and, unless UINT64_MAX, tensor < the cache's tensor count. TIMEOUT when cut short. */
lldd_status link_recv_pinned(xlink *x, const char *fn, const msg_hdr *h, int64_t deadline, peer_cache *pc,
                             uint64_t tensor);
void peer_unpin(xlink *x, peer_cache *pc);
/* Records the table copy (semantics.md §9.7) taken now on the peer, if the link has none. */
void link_note_table_copy(mlink *l, int64_t id_mark, uint64_t bind_mark);
/* PR-32: a registered (not pool-owned) cache with an id given out after the link was
 * made is not reachable through it; the local side's and the peer's wording. */
lldd_status pr32_check_local(const char *fn, const mlink *l, const cache_wire *lw);
lldd_status pr32_check_peer(const char *fn, const mlink *l, const cache_wire *rw, uint64_t cluster_id);
lldd_status move_bytes(xlink *x, const char *fn, const plan *p, int pull, int64_t peer_cache_id);


/* Every block index below limit, the whose cache's block count (PR-4). */
lldd_status check_blocks(const char *fn, const char *name, const uint64_t *blk, size_t n, uint64_t limit,
                         const char *whose);
/* A repeated value: for destination blocks (lint = 1) the PR-5 lint, else a refusal. */
lldd_status check_repeats(const char *fn, const char *name, const uint64_t *v, size_t n, int lint);
/* Step 6 of a push (native and extension), in this order: the destination cache is
 * remote accessible and, unless pool-owned, registered before the link (PR-32). */
lldd_status push_dst_access_checks(const char *fn, const cache_wire *rw, const mlink *l, uint64_t cluster_id);
/* Step 6 of a push, after the batch index: destination blocks in range, the kind
 * (PR-15), batch or block sizes (PR-14, PR-13), no repeated destination block. */
lldd_status push_dst_shape_checks(const char *fn, int b2b, const cache_wire *lw, const cache_wire *rw,
                                  const uint64_t *dblk, size_t ndblk);

/* The native transfer calls past their entry (api_transfers.c): the checks after the
 * arguments, in their order, then the pull or the push. */
lldd_status xfer_pull_cache(engine *e, const char *fn, const lldd_cache_index *src_cache_index,
                            const lldd_cache *dst_cache, uint32_t batch_index, int64_t size,
                            const lldd_ext_param *ext_param);
lldd_status xfer_pull_blocks(engine *e, const char *fn, const lldd_cache_index *src_cache_index,
                             const lldd_cache *dst_cache, const uint64_t *src_blocks, size_t num_src_blocks,
                             const uint64_t *dst_blocks, size_t num_dst_blocks, const lldd_ext_param *ext_param);
lldd_status xfer_push_cache(engine *e, const char *fn, const lldd_cache *src_cache,
                            const lldd_cache_index *dst_cache_index, uint32_t src_batch_index, int64_t size,
                            const lldd_ext_param *ext_param);
lldd_status xfer_push_blocks(engine *e, const char *fn, const lldd_cache *src_cache,
                             const lldd_cache_index *dst_cache_index, const uint64_t *src_blocks, size_t num_src_blocks,
                             const uint64_t *dst_blocks, size_t num_dst_blocks, const lldd_ext_param *ext_param);

#endif /* LLDD_MOCK_TRANSFERS_H */
