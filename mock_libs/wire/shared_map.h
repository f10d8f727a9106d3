/* Shared library memory: a link's mappings of its peer's arena chunks (engine_shared.c). */
#ifndef LLDD_MOCK_SHARED_MAP_H
#define LLDD_MOCK_SHARED_MAP_H

#include <stddef.h>
#include <stdint.h>

#include "wire/links.h"

/* The peer's arena chunks mapped in this process (docs/security.md §2.7).
 * Under the link's map_rw (shared for link_shared_ptr, exclusive for the others). */
typedef struct shared_map {
    uintptr_t remote;            /* the chunk's base in the peer */
    size_t size;
    char *local;                 /* where it is mapped here */
} shared_map;
/* Where [addr, addr + len) of the peer is mapped here, or NULL. */
char *link_shared_ptr(mlink *l, uintptr_t addr, uint64_t len);
/* Asks the peer for its arena chunks not mapped yet, at most every MAP_RETRY_MS; 1 if
 * a new one was mapped. */
int link_map_refresh(mlink *l);
void link_unmap_all(mlink *l);

#endif /* LLDD_MOCK_SHARED_MAP_H */
