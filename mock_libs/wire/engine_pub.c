/* The published cache table: a transfer to an identified peer process reads the peer's
 * cache table from shared memory instead of asking the peer (docs/design.md, "Links of
 * the mock"; docs/security.md §2.8).
 *
 * The owner keeps one memfd per initialisation with a slot per live cache (its
 * description and tensor addresses, under a sequence counter that is odd while the slot
 * is rewritten), created when the first peer asks for it. A peer gets the table's memfd
 * (mapped read-only there) and a page of pin counters of its own, one per slot, over the
 * identity channel (TABLE, peer_id.h): only the process the kernel identified as the
 * peer of a link that may use process_vm, and only after it proved it can read our
 * memory (the same checks as MAP), so the table shows addresses only to a process that
 * could read them anyway.
 *
 * A transfer pins a slot by raising its counter and then checking that the slot's
 * sequence did not move; a removal moves the sequence and then waits until every live
 * link's counter of the slot is zero. Both steps are sequentially consistent, so either
 * the transfer sees the removal and backs off or the removal sees the pin and waits
 * (bounded by llm.SyncKvCacheWaitTime, then the holder's link is cut, as for pins taken
 * over the socket: engine_cache.c). A cache whose slot is taken (ids that collide modulo
 * the slot count) or with more tensors than a slot holds is not published; the table
 * counts such caches, and while any exist a transfer that does not find its cache asks
 * the peer over the socket as before. The table copy of semantics.md §9.7 is taken when the peer asks
 * for the table, and the owner keeps the same marks for its own answers.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/cache_table.h"
#include "core/engine.h"
#include "wire/links.h"
#include "base/mock_internal.h"
#include "wire/pub.h"
#include "wire/transport.h"

#ifndef F_SEAL_FUTURE_WRITE
#define F_SEAL_FUTURE_WRITE 0x0010
#endif

static const uint64_t PUB_MAGIC = 0x314255504444444cULL; /* "LDDDPUB1" */

static size_t pub_table_bytes(void)
{
    return sizeof(pub_head) + (size_t)PUB_SLOTS * sizeof(pub_slot);
}

static size_t pub_pins_bytes(void)
{
    return (size_t)PUB_SLOTS * sizeof(atomic_uint);
}

static pub_slot *slot_at(pub_head *h, size_t i)
{
    return (pub_slot *)(void *)((char *)h + sizeof *h) + i;
}

static const pub_slot *slot_at_c(const pub_head *h, size_t i)
{
    return (const pub_slot *)(const void *)((const char *)h + sizeof *h) + i;
}

/* A memfd of `size` bytes mapped read-write here, or -1. */
static int memfd_mapped(const char *name, size_t size, void **mem)
{
    int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0)
        return -1;
    if (ftruncate(fd, (off_t)size) != 0) {
        close(fd);
        return -1;
    }
    void *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) {
        close(fd);
        return -1;
    }
    *mem = m;
    return fd;
}

/* ---------------------------------------------------------------------------------------------
 * the owner
 * ------------------------------------------------------------------------------------------ */

static void slot_write(engine *e, pub_slot *s, const mcache *c)
{
    uint64_t seq = atomic_load_explicit(&s->seq, memory_order_relaxed);
    atomic_store(&s->seq, seq + 1);
    s->id = c->w.id;
    s->w = c->w;
    /* addresses as a PIN reply carries them to an identified peer (engine_serve.c) */
    int readable = c->w.remote_accessible || e->mode == MODE_SERVER_ASSISTED;
    for (uint32_t t = 0; t < c->w.num_tensors; t++)
        s->addrs[t] = readable ? c->addrs[t] : 0;
    atomic_store(&s->seq, seq + 2);
}

void pub_insert_locked(engine *e, mcache *c)
{
    c->pub_state = PUB_NONE;
    if (e->pub == NULL)
        return;
    atomic_store(&e->pub->arena_chunks, mock_arena_chunk_count());
    size_t i = (size_t)((uint64_t)c->w.id % PUB_SLOTS);
    pub_slot *s = slot_at(e->pub, i);
    /* a slot whose last cache is still waiting for its pins is not taken meanwhile */
    if (s->id != 0 || e->pub_draining[i] != 0 || c->w.num_tensors > PUB_ADDRS) {
        atomic_fetch_add(&e->pub->unpublished, 1);
        c->pub_state = PUB_UNLISTED;
        return;
    }
    slot_write(e, s, c);
    c->pub_state = PUB_LISTED;
    c->pub_slot = (uint32_t)i;
}

void pub_remove_locked(engine *e, mcache *c)
{
    if (e->pub == NULL || c->pub_state == PUB_NONE || c->pub_state == PUB_LEFT)
        return;
    if (c->pub_state == PUB_UNLISTED) {
        atomic_fetch_sub(&e->pub->unpublished, 1);
        c->pub_state = PUB_NONE;
        return;
    }
    pub_slot *s = slot_at(e->pub, c->pub_slot);
    uint64_t seq = atomic_load_explicit(&s->seq, memory_order_relaxed);
    /* sequentially consistent: a peer that pinned before this store is seen by
     * pub_pinned_locked, one that pins after sees the sequence move */
    atomic_store(&s->seq, seq + 1);
    s->id = 0;
    atomic_store(&s->seq, seq + 2);
    e->pub_draining[c->pub_slot]++;
    c->pub_state = PUB_LEFT;
}

void pub_settled_locked(engine *e, mcache *c)
{
    if (c->pub_state == PUB_LEFT && e->pub != NULL)
        e->pub_draining[c->pub_slot]--;
    c->pub_state = PUB_NONE;
}

/* Links whose peer's pin counters count: live, not cut. */
static int pins_count(const mlink *l)
{
    return l->pub_pins != NULL && !l->pub_ignored && !l->removed && !l->reaped && !atomic_load(&l->peer_gone);
}

mlink *pub_pinned_locked(engine *e, const mcache *c)
{
    if (e->pub == NULL || (c->pub_state != PUB_LISTED && c->pub_state != PUB_LEFT))
        return NULL;
    for (int list = 0; list < 2; list++)
        for (mlink *l = list == 0 ? e->links : e->served; l != NULL; l = l->next)
            if (pins_count(l) && atomic_load(&l->pub_pins[c->pub_slot]) != 0)
                return l;
    return NULL;
}

void pub_set_delay(engine *e, uint32_t delay_ms)
{
    if (e->pub != NULL)
        atomic_store(&e->pub->serve_delay_ms, delay_ms);
}

void pub_set_ready_locked(engine *e, int ready)
{
    if (e->pub != NULL)
        atomic_store(&e->pub->ready, (uint32_t)ready);
}

/* The table, made (and every live cache published) on the first peer's request. */
static int pub_ensure_locked(engine *e)
{
    if (e->pub != NULL)
        return 0;
    uint32_t *draining = calloc(PUB_SLOTS, sizeof *draining);
    void *mem;
    int fd = draining == NULL ? -1 : memfd_mapped("lldd-mock-table", pub_table_bytes(), &mem);
    if (fd < 0) {
        free(draining);
        return -1;
    }
    pub_head *h = mem;
    h->magic = PUB_MAGIC;
    h->slots = PUB_SLOTS;
    h->addrs_per_slot = PUB_ADDRS;
    atomic_store(&h->serve_delay_ms, atomic_load(&e->serve_delay_ms));
    atomic_store(&h->ready, e->state == ENGINE_READY);
    /* the peer maps it read-only: no writable mapping can be made from its fd */
    if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_FUTURE_WRITE) != 0 &&
        fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) != 0) {
        munmap(mem, pub_table_bytes());
        close(fd);
        free(draining);
        return -1;
    }
    e->pub = h;
    e->pub_fd = fd;
    e->pub_draining = draining;
    for (size_t i = 0; i < e->cache_count; i++)
        pub_insert_locked(e, e->caches[i]);
    return 0;
}

int pub_offer_locked(engine *e, mlink *l, int fds[2])
{
    if (l->pub_pins != NULL || pub_ensure_locked(e) != 0)
        return -1;
    void *mem;
    int fd = memfd_mapped("lldd-mock-pins", pub_pins_bytes(), &mem);
    if (fd < 0)
        return -1;
    if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) != 0) {
        munmap(mem, pub_pins_bytes());
        close(fd);
        return -1;
    }
    l->pub_pins = mem;
    fds[0] = e->pub_fd;
    fds[1] = fd;
    return 0;
}

void pub_destroy(engine *e)
{
    if (e->pub == NULL)
        return;
    munmap(e->pub, pub_table_bytes());
    close(e->pub_fd);
    free(e->pub_draining);
    e->pub = NULL;
    e->pub_fd = -1;
    e->pub_draining = NULL;
}

/* ---------------------------------------------------------------------------------------------
 * the peer
 * ------------------------------------------------------------------------------------------ */

int pub_take(mlink *l, int table_fd, int pins_fd)
{
    void *table = MAP_FAILED, *pins = MAP_FAILED;
    int seals = fcntl(table_fd, F_GET_SEALS), pin_seals = fcntl(pins_fd, F_GET_SEALS);
    off_t tsize = lseek(table_fd, 0, SEEK_END), psize = lseek(pins_fd, 0, SEEK_END);
    /* sealed against shrinking, so the mappings below never fault */
    if (seals >= 0 && (seals & F_SEAL_SHRINK) && pin_seals >= 0 && (pin_seals & F_SEAL_SHRINK) && tsize >= 0 &&
        (uint64_t)tsize == pub_table_bytes() && psize >= 0 && (uint64_t)psize == pub_pins_bytes()) {
        table = mmap(NULL, pub_table_bytes(), PROT_READ, MAP_SHARED, table_fd, 0);
        pins = mmap(NULL, pub_pins_bytes(), PROT_READ | PROT_WRITE, MAP_SHARED, pins_fd, 0);
    }
    close(table_fd);
    close(pins_fd);
    const pub_head *h = table;
    if (table == MAP_FAILED || pins == MAP_FAILED || h->magic != PUB_MAGIC || h->slots != PUB_SLOTS ||
        h->addrs_per_slot != PUB_ADDRS) {
        if (table != MAP_FAILED)
            munmap(table, pub_table_bytes());
        if (pins != MAP_FAILED)
            munmap(pins, pub_pins_bytes());
        return -1;
    }
    l->pub_view = h;
    l->pub_mine = pins;
    return 0;
}

void pub_drop(mlink *l, int owner_side)
{
    atomic_store(&l->pub_ready, 0);
    l->pub_refused = 1; /* a link whose table went reads it never again */
    if (l->pub_view != NULL)
        munmap((void *)(uintptr_t)l->pub_view, pub_table_bytes());
    if (l->pub_mine != NULL)
        munmap(l->pub_mine, pub_pins_bytes());
    l->pub_view = NULL;
    l->pub_mine = NULL;
    if (owner_side && l->pub_pins != NULL) {
        munmap(l->pub_pins, pub_pins_bytes());
        l->pub_pins = NULL;
    }
}

int pub_lookup(mlink *l, int64_t id, cache_wire *w, uint64_t *addrs, size_t cap, uint32_t *slot_out)
{
    const pub_head *h = l->pub_view;
    if (!atomic_load(&h->ready))
        return PUB_GONE;
    size_t i = (size_t)((uint64_t)id % PUB_SLOTS);
    const pub_slot *s = slot_at_c(h, i);
    for (int tries = 0; tries < 64; tries++) {
        uint64_t seq = atomic_load_explicit(&s->seq, memory_order_acquire);
        if (seq & 1)
            continue;
        int64_t sid = s->id;
        cache_wire copy = s->w;
        int fits = copy.num_tensors <= PUB_ADDRS && copy.num_tensors <= cap;
        if (sid == id && fits)
            memcpy(addrs, s->addrs, (size_t)copy.num_tensors * sizeof *addrs);
        if (sid == id && fits)
            atomic_fetch_add(&l->pub_mine[i], 1);
        atomic_thread_fence(memory_order_seq_cst);
        if (atomic_load(&s->seq) != seq) {
            if (sid == id && fits)
                atomic_fetch_sub(&l->pub_mine[i], 1);
            continue;
        }
        if (sid != id || copy.id != id)
            return atomic_load(&h->unpublished) == 0 ? PUB_ABSENT : PUB_ASK;
        if (!fits) {
            atomic_fetch_sub(&l->pub_mine[i], 1);
            return PUB_ASK;
        }
        *w = copy;
        *slot_out = (uint32_t)i;
        return PUB_FOUND;
    }
    return PUB_ASK; /* rewritten all the time: ask the peer */
}

void pub_unpin(mlink *l, uint32_t slot)
{
    atomic_fetch_sub_explicit(&l->pub_mine[slot], 1, memory_order_release);
}

int pub_may_have_new_chunks(const mlink *l)
{
    return !atomic_load(&l->pub_ready) || atomic_load(&l->pub_view->arena_chunks) > l->map_from;
}

uint32_t pub_delay_ms(const mlink *l)
{
    return atomic_load(&l->pub_view->serve_delay_ms);
}
