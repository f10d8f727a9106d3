/* The transfer pipeline (engine_xfer.c): the stages the native calls
 * (engine_xfer_native.c) and the extension calls (engine_ext_xfer.c) share, in the order
 * a call runs them: entering, the frame, the link, the peer's cache, the shared checks,
 * the plan and the bytes (engine_move.c). Each API keeps its own order of them. */
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
/* A shared holder of the link about to use its request socket takes sock_mu (an
 * exclusive holder has the link to itself). */
void link_sock(xlink *x);
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
/* Same process, peer->mu held: pins c (the peer's cache) into pc. */
void peer_hold_local(peer_cache *pc, mcache *c);
/* Step 7 of docs/reference/semantics.md §8.0 for a cache id (the native path): resolves and pins it. */
lldd_status peer_pin(xlink *x, const char *fn, int64_t id, peer_cache *pc);
/* One request and its answer on the link's request socket: h (and body_len bytes of
 * body) is sent and the answer's header, which must be of type `reply`, read into it by
 * `deadline`. LLM_SUCCESS, or link_timeout's TIMEOUT (no answer in time, or the peer's
 * side gone). */
lldd_status link_ask(xlink *x, const char *fn, msg_hdr *h, const void *body, size_t body_len, uint16_t reply,
                     int64_t deadline);
/* The body of a pin or resolve answer (PIN, PIN_ADDR, RESOLVE) to h: head_len bytes of
 * head, which holds the cache's description at *w, then its addresses; pc is then the
 * pinned cache. Checked against the payload's length, WIRE_MAX_TENSORS and, unless
 * UINT64_MAX, tensor < the cache's tensor count. TIMEOUT when cut short. */
lldd_status link_recv_pinned(xlink *x, const char *fn, const msg_hdr *h, int64_t deadline, void *head,
                             size_t head_len, const cache_wire *w, peer_cache *pc, uint64_t tensor);
void peer_unpin(xlink *x, peer_cache *pc);
/* Records the table copy (docs/reference/semantics.md §9.7) taken now on the peer, if the link has none. */
void link_note_table_copy(mlink *l, int64_t id_mark, uint64_t bind_mark);
/* The frame of every transfer: pins the local cache `local_id` (KV_CACHE_NOT_EXIST
 * "<local_name> <id> does not exist" otherwise), runs the API's steps, then unpins the
 * peer's caches the steps pinned, releases the link and unpins the local cache. */
typedef struct xfer_job {
    engine *e;
    const char *fn;
    mcache *lc;          /* the local cache */
    xlink xl;            /* the link, once a step has taken it */
    peer_cache pc[2];    /* the peer's caches the steps pin */
} xfer_job;
typedef lldd_status (*xfer_steps)(xfer_job *j, void *arg);
lldd_status xfer_run(engine *e, const char *fn, int64_t local_id, const char *local_name, xfer_steps steps,
                     void *arg);
void plan_init(plan *p, int form, uint32_t s_base, uint32_t d_base, uint32_t pairs, const uint64_t *src_addrs,
               const uint64_t *dst_addrs);
void plan_range(plan *p, uint64_t soff, uint64_t doff, uint64_t len);
void plan_blocks(plan *p, const uint64_t *sblk, const uint64_t *dblk, size_t nblk, uint64_t block);
/* The last stage (engine_move.c): the plan's bytes over the link's first usable path,
 * then the link model's pacing. */
lldd_status move_bytes(xlink *x, const char *fn, const plan *p, int pull, int64_t peer_cache_id);

/* The checks both APIs make with the same words; each answers the first failure. */
/* Every block index below limit, the whose cache's block count (PR-4). */
lldd_status check_blocks(const char *fn, const char *name, const uint64_t *blk, size_t n, uint64_t limit,
                         const char *whose);
/* A repeated value: for destination blocks (lint = 1) the PR-5 lint, else a refusal. */
lldd_status check_repeats(const char *fn, const char *name, const uint64_t *v, size_t n, int lint);
/* PR-32: a registered (not pool-owned) cache with an id given out after the link was
 * made is not reachable through it; the local side's and the peer's wording, and both
 * in that order. */
lldd_status pr32_check_local(const char *fn, const mlink *l, const cache_wire *lw);
lldd_status pr32_check_peer(const char *fn, const mlink *l, const cache_wire *rw, uint64_t cluster_id);
lldd_status pr32_checks(const char *fn, const mlink *l, const cache_wire *lw, const cache_wire *rw,
                        uint64_t cluster_id);
/* A pull's local (destination) cache: for a cache-to-cache pull the batch in range, a
 * cache with batches and, if check_size, size within the stride; for a block pull a
 * cache with blocks; the destination blocks (no repeat, the PR-5 lint; in range). */
lldd_status pull_dst_batch_checks(const char *fn, const cache_wire *lw, uint32_t batch_index, int64_t size,
                                  int check_size);
lldd_status pull_dst_blocks_check(const char *fn, const cache_wire *lw);
lldd_status pull_dst_block_list_checks(const char *fn, const cache_wire *lw, const uint64_t *dblk, size_t n);
/* A pull's source: without layer ranges as many tensors as the destination; len bytes
 * per tensor within its stride; where its batch starts addressed with the destination
 * stride (direct mode, PR-6; *start); its blocks in range and the block sizes (PR-13). */
lldd_status pull_src_count_check(const char *fn, const cache_wire *rw, const cache_wire *lw);
lldd_status pull_src_len_check(const char *fn, uint64_t len, const cache_wire *rw);
lldd_status pull_src_batch_start(const char *fn, uint64_t batch, const cache_wire *lw, const cache_wire *rw,
                                 uint64_t len, uint64_t *start);
lldd_status pull_src_block_checks(const char *fn, const uint64_t *sblk, size_t n, const cache_wire *rw,
                                  const cache_wire *lw);
/* Step 4 of a push: the local cache remote accessible and (not HIXL, whose transfer
 * refuses it after every check) registered before the link. */
lldd_status push_local_access_checks(const char *fn, const mlink *l, const cache_wire *lw, int hixl);
/* Step 6 of a push (native and extension), in this order: the destination cache is
 * remote accessible and, unless pool-owned, registered before the link (PR-32). */
lldd_status push_dst_access_checks(const char *fn, const cache_wire *rw, const mlink *l, uint64_t cluster_id);
/* A push's layer in range of w's tensors (dst: the remote cache, else the local one). */
lldd_status push_layer_check(const char *fn, uint64_t layer, const cache_wire *w, uint32_t per_layer, int dst);
/* Step 6 of a push, after the batch index: destination blocks in range, the kind
 * (PR-15), batch or block sizes (PR-14, PR-13), no repeated destination block. */
lldd_status push_dst_shape_checks(const char *fn, int b2b, const cache_wire *lw, const cache_wire *rw,
                                  const uint64_t *dblk, size_t ndblk);
/* Step 7 of a push, past the layer: per_layer divides the local tensors; a contiguous
 * push: a cache with batches (if need_batches, PR-15), src_batch below `batches`; a block
 * push: a cache with blocks, the source blocks in range. */
lldd_status push_src_shape_checks(const char *fn, const cache_wire *lw, uint32_t per_layer, int b2b, int need_batches,
                                  uint32_t src_batch, uint64_t batches, const uint64_t *sblk, size_t nsblk,
                                  size_t ndblk);

/* The native transfer calls past their entry (api_transfers.c; engine_xfer_native.c): the
 * checks after the arguments, in their order, then the pull or the push. */
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
