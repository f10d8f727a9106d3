/* Shared library memory: a link's mappings of its peer's arena chunks
 * (docs/security.md §2.7).
 *
 * A client whose peer the kernel identified as another process of the same user asks
 * the peer's identity channel for its arena chunks (MAP, peer_id.h) the first time a
 * transfer names peer memory it has not mapped, and maps each chunk once, read-write
 * and shared. A transfer whose peer ranges all lie in mapped chunks and whose own
 * ranges lie in live library memory then copies between the mappings (engine_xfer.c);
 * every other transfer keeps its path. Every rights check of a transfer runs before,
 * as it does for process_vm: the mapping only replaces the byte mover.
 *
 * What is accepted from the peer: only a reply from the process the link's pidfd holds
 * (SO_PEERCRED on the MAP connection), only memfds sealed against shrinking and at
 * least as large as the chunk they stand for (a chunk cut short under the mapping
 * would fault instead of copying), never more than MAP_BOUND_BYTES of address space
 * mapped for all links of the process together. Mappings go when the link is dropped
 * or reaped.
 */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/engine.h"
#include "wire/links.h"
#include "wire/peer_id.h"
#include "wire/pub.h"
#include "wire/shared_map.h"
#include "wire/transport.h"

enum { MAP_RETRY_MS = 200, MAP_WAIT_MS = 2000 };
#define MAP_BOUND_BYTES ((uint64_t)1 << 40)   /* 1 TiB of address space, all links together */

static atomic_uint_fast64_t g_mapped_bytes;

static int map_lookup(const mlink *l, uintptr_t addr)
{
    size_t lo = 0, hi = l->map_count;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (l->maps[mid].remote <= addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return (int)lo - 1; /* the last chunk starting at or below addr, or -1 */
}

char *link_shared_ptr(mlink *l, uintptr_t addr, uint64_t len)
{
    int i = map_lookup(l, addr);
    if (i < 0)
        return NULL;
    const shared_map *m = &l->maps[i];
    uintptr_t off = addr - m->remote;
    if (off >= m->size || len > m->size - off)
        return NULL;
    return m->local + off;
}

/* Whether the reserve of the process's mapping bound takes `size` more bytes. */
static int bound_take(uint64_t size)
{
    uint_fast64_t cur = atomic_load(&g_mapped_bytes);
    do {
        if (size > MAP_BOUND_BYTES || cur > MAP_BOUND_BYTES - size)
            return 0;
    } while (!atomic_compare_exchange_weak(&g_mapped_bytes, &cur, cur + size));
    return 1;
}

/* Maps one received chunk; the fd is closed either way. 1 if mapped. */
static int map_one(mlink *l, const map_desc *d, int fd)
{
    struct stat st;
    int seals = fcntl(fd, F_GET_SEALS);
    int usable = d->size > 0 && d->size <= SIZE_MAX && d->base <= UINTPTR_MAX - d->size && seals >= 0 &&
                 (seals & F_SEAL_SHRINK) && fstat(fd, &st) == 0 && st.st_size >= 0 &&
                 (uint64_t)st.st_size >= d->size && link_shared_ptr(l, (uintptr_t)d->base, 1) == NULL &&
                 link_shared_ptr(l, (uintptr_t)(d->base + d->size - 1), 1) == NULL;
    if (usable && l->map_count == l->map_cap) {
        size_t cap = l->map_cap ? l->map_cap * 2 : 8;
        shared_map *bigger = realloc(l->maps, cap * sizeof *bigger);
        if (bigger == NULL)
            usable = 0;
        else {
            l->maps = bigger;
            l->map_cap = cap;
        }
    }
    if (!usable || !bound_take(d->size)) {
        close(fd);
        return 0;
    }
    void *mem = mmap(NULL, (size_t)d->size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (mem == MAP_FAILED) {
        atomic_fetch_sub(&g_mapped_bytes, d->size);
        return 0;
    }
    int at = map_lookup(l, (uintptr_t)d->base) + 1;
    memmove(&l->maps[at + 1], &l->maps[at], (l->map_count - (size_t)at) * sizeof *l->maps);
    l->maps[at].remote = (uintptr_t)d->base;
    l->maps[at].size = (size_t)d->size;
    l->maps[at].local = mem;
    l->map_count++;
    return 1;
}

static int map_refresh_locked(mlink *l)
{
    if (l->map_refused || l->peer_id_channel[0] == '\0' || l->same_process || !atomic_load(&l->vm_ok) ||
        !pub_may_have_new_chunks(l))
        return 0;
    int64_t now = tp_now_ms();
    if (l->map_asked_ms != 0 && now - l->map_asked_ms < MAP_RETRY_MS)
        return 0;
    l->map_asked_ms = now;
    int added = 0;
    for (;;) {
        map_request req = {l->token, l->map_from};
        map_desc descs[MAP_BATCH];
        int fds[MAP_BATCH];
        size_t n = 0;
        uint64_t next = 0;
        if (idch_map(l->peer_id_channel, l->peer_pid, &req, tp_deadline(MAP_WAIT_MS), descs, fds, &n, &next) != 0) {
            l->map_refused = 1;
            return added;
        }
        /* the pid the reply came from is still the process the link holds */
        if (!pidfd_alive(l->peer_pidfd)) {
            for (size_t i = 0; i < n; i++)
                close(fds[i]);
            l->map_refused = 1;
            return added;
        }
        for (size_t i = 0; i < n; i++)
            added |= map_one(l, &descs[i], fds[i]);
        l->map_from = next;
        if (n < MAP_BATCH)
            return added;
    }
}

int link_map_refresh(mlink *l)
{
    pthread_rwlock_wrlock(&l->map_rw);
    int added = map_refresh_locked(l);
    pthread_rwlock_unlock(&l->map_rw);
    return added;
}

void link_unmap_all(mlink *l)
{
    pthread_rwlock_wrlock(&l->map_rw);
    for (size_t i = 0; i < l->map_count; i++) {
        munmap(l->maps[i].local, l->maps[i].size);
        atomic_fetch_sub(&g_mapped_bytes, l->maps[i].size);
    }
    free(l->maps);
    l->maps = NULL;
    l->map_count = l->map_cap = 0;
    l->map_refused = 1; /* a link whose mappings went maps nothing again */
    pthread_rwlock_unlock(&l->map_rw);
}
