/* The holder's side of a transfer by key or id: resolving a source or destination on
 * the engine that holds it (engine_resolve.c), in process or for a link's peer. */
#ifndef LLDD_MOCK_RESOLVE_H
#define LLDD_MOCK_RESOLVE_H

#include <stddef.h>
#include <stdint.h>

#include "wire/links.h"

/* A source to resolve on the engine that holds it: by key, live (server-assisted, v1)
 * or against a table copy (direct). */
typedef struct resolve_req {
    uint32_t key_kind;               /* LLDD_KEY_* */
    uint32_t batch_index;
    uint64_t req_id, prefix_id, model_id;
    int64_t cache_id;
    uint32_t direct;                 /* resolve against the table copy: the marks below */
    uint32_t v1;                     /* v1: a busy link of the holder gives LINK_BUSY */
    uint32_t push;                   /* a push destination: its batch is the pusher's check */
    uint32_t reserved;
    int64_t id_mark;                 /* 0: take the copy now */
    uint64_t bind_mark;
    uint64_t requester;              /* the asking engine's cluster id */
} resolve_req;

typedef struct resolve_reply {
    cache_wire w;
    uint64_t slot;                   /* the source batch */
    uint32_t through_key;            /* resolved through a request or prefix key */
    uint32_t key_ns;
    uint64_t key_id, key_model;
    int64_t id_mark;
    uint64_t bind_mark;
    uint32_t dev_pool;               /* the holder has a device pool (semantics.md §1.3 placement pairs) */
    uint32_t reserved;
} resolve_reply;

/* mu held. On success *out is the cache (not pinned yet) and r is filled; otherwise a
 * status with the reason in why. `link` is the holder's link to the requester. */
lldd_status holder_resolve_locked(engine *e, mlink *link, const resolve_req *q, mcache **out, resolve_reply *r,
                                  char *why, size_t why_len);
/* mu held. The live remote-accessible cache tensor holding [addr, addr + len) (PR-40). */
mcache *holder_find_addr_locked(engine *e, uint64_t addr, uint64_t len, uint32_t *tensor);

#endif /* LLDD_MOCK_RESOLVE_H */
