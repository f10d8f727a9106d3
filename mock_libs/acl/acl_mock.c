/* The mock ACL runtime subset (docs/reference/acl.md §6, §7: vendor behaviour, rules A-1 … A-9).
 *
 * "Device" memory is host memory with allocation tracking. Every allocation of
 * aclrtMalloc, aclrtMallocHost and the engine's pools (mock_acl_alloc_device) is a
 * node of one AVL tree keyed by its base address, so that the engine can ask
 * "which allocation holds this address?" in O(log n) on every registration and
 * every copy can check its ranges. Each allocation is exactly the requested
 * size.
 *
 * The memory comes from shared arenas: memfd-backed chunks mapped read-write and
 * shared, grown one chunk at a time and never unmapped while the process lives, so
 * that a linked peer of the same user can map a chunk once and copy straight into or
 * out of it (docs/security.md §2.7; the engine hands out the chunks' descriptors with
 * mock_arena_chunks). Inside a chunk, space is handed out first fit from a sorted list
 * of free extents and comes back when an allocation's record is forgotten. Under
 * AddressSanitizer everything in a chunk that is not a live allocation is poisoned,
 * so that access past an allocation's end is reported as it is for heap memory.
 * Where the kernel has no memfd, or the arena has reached its bound, allocations
 * come from the C allocator as before (they are then not shared).
 *
 * Each allocation is followed by a guard zone of GUARD_BYTES that belongs to
 * the mock: a copy that starts at or just past the end of an allocation (the
 * classic off-by-one) is then recognised as an overrun of that allocation, and can
 * never land in another buffer of the heap. Under AddressSanitizer the guard zone
 * is poisoned, so direct access to it is reported as well.
 *
 * Freed allocations stay in the tree, marked not live, so that a later copy into
 * one is reported as a use after free rather than as "unknown memory". Their memory
 * is held back from the arena (and, for heap allocations, from the C allocator) while
 * the record exists: otherwise the same addresses could go to another allocation (or
 * a numpy array), and a legitimate copy from it would be reported as a use after free;
 * and a copy into a large freed buffer would fault on unmapped memory instead of being
 * reported. Held memory keeps its addresses but gives its whole pages back to the
 * system (madvise), so it costs address space rather than memory. It is bounded
 * (FREED_MAX_RECORDS records, FREED_MAX_BYTES bytes, oldest released first); under
 * AddressSanitizer it is poisoned, so that direct access to it faults too. Because
 * held memory belongs to nobody else, tracked ranges never overlap.
 *
 * The current device is per thread (docs/reference/acl.md §6). A thread's current device lapses
 * when the device's last reference is released: each device has a generation that
 * the release bumps, and a thread's current device counts only while the
 * generation it saw in aclrtSetDevice is still the device's.
 *
 * Locking: one reader-writer lock guards the tree, the devices and the streams.
 * Copies and lookups take it shared (a copy holds it while it copies, so a
 * concurrent aclrtFree cannot release the memory under it); allocation, free,
 * device and stream changes take it exclusively. aclInit's reference count has its
 * own mutex, because aclInit reads a file.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/mock_internal.h"

#if defined(__SANITIZE_ADDRESS__)
#define MOCK_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MOCK_ASAN 1
#endif
#endif

#ifdef MOCK_ASAN
#include <sanitizer/asan_interface.h>
#define MOCK_POISON(p, n) __asan_poison_memory_region((p), (n))
#define MOCK_UNPOISON(p, n) __asan_unpoison_memory_region((p), (n))
#else
#define MOCK_POISON(p, n) ((void)(p), (void)(n))
#define MOCK_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

enum {
    DEFAULT_DEVICE_COUNT = 8,         /* */
    MAX_DEVICE_COUNT = 1024,          /* the largest count lldd_mock_set_device_count accepts */
    FREED_MAX_RECORDS = 4096,         /* freed allocations remembered for use-after-free reports */
    ALLOC_ALIGNMENT = 64,             /* so that aclrtMemcpyAsync's 64-byte rule can be met */
    GUARD_BYTES = 64,                 /* owned by the mock after each allocation */
    ASYNC_D2D_ALIGNMENT = 64,         /* docs/reference/acl.md §6, aclrtMemcpyAsync */
    MEM_ATTR_LAST = ACL_MEM_P2P_HUGE1G
};
#define DEFAULT_CAPACITY ((uint64_t)64 << 30)   /* 64 GiB per device */
#if defined(MOCK_ASAN) && SIZE_MAX > 0xFFFFFFFFu
/* Poisoning held memory writes its shadow (an eighth of its size), which stays resident
 * although the pages themselves are given back: hold back less under ASan. */
#define FREED_MAX_BYTES ((size_t)1 << 30)
#elif SIZE_MAX > 0xFFFFFFFFu
#define FREED_MAX_BYTES ((size_t)256 << 30)     /* address space of freed memory held back */
#else
#define FREED_MAX_BYTES ((size_t)256 << 20)
#endif
#define POLICY_FLAGS \
    ((unsigned)ACL_MEM_TYPE_LOW_BAND_WIDTH | (unsigned)ACL_MEM_TYPE_HIGH_BAND_WIDTH | \
     (unsigned)ACL_MEM_ACCESS_USER_SPACE_READONLY)
/* The vendor rounds a request up to 32 bytes and adds 32 bytes of padding; a size
 * for which that overflows is rejected even though the mock allocates exactly. */
#define VENDOR_ROUNDING 31u
#define VENDOR_PADDING 32u

static const char k_soc_name[] = "Ascend910B4-mock";

/* ---------------------------------------------------------------- state */

typedef struct alloc_node {
    uintptr_t base;
    size_t size;                     /* as requested; the guard zone follows */
    int live;
    int kind;                        /* MOCK_MEM_DEVICE or MOCK_MEM_HOST */
    int32_t device;
    int chunk;                       /* index of its arena chunk; -1: from the C allocator */
    int height;                      /* AVL height, 1 for a leaf */
    struct alloc_node *left, *right;
    struct alloc_node *newer;        /* freed records, oldest first */
} alloc_node;

typedef struct device_state {
    uint64_t refs;                   /* references of aclrtSetDevice not yet reset */
    uint64_t generation;             /* bumped each time refs drops to 0 */
    uint64_t used;                   /* requested bytes of live device allocations */
} device_state;

typedef struct stream_entry {
    uintptr_t handle;
    int32_t device;
} stream_entry;

#ifdef PTHREAD_RWLOCK_WRITER_NONRECURSIVE_INITIALIZER_NP
/* Writers first, so that copies running back to back in many threads cannot starve
 * aclrtFree; no path takes the lock recursively, which this kind requires. */
static pthread_rwlock_t g_lock = PTHREAD_RWLOCK_WRITER_NONRECURSIVE_INITIALIZER_NP;
#else
static pthread_rwlock_t g_lock = PTHREAD_RWLOCK_INITIALIZER;
#endif
static atomic_int g_started;        /* an ACL call has been made: settings are frozen */
static uint32_t g_device_count = DEFAULT_DEVICE_COUNT;
static uint64_t g_capacity = DEFAULT_CAPACITY;
static device_state g_devices[MAX_DEVICE_COUNT];

static alloc_node *g_root;
static uint64_t g_live_count;
static alloc_node *g_freed_oldest, *g_freed_newest;
static size_t g_freed_records, g_freed_bytes;

static stream_entry *g_streams;
static size_t g_stream_count, g_stream_capacity;
static uint64_t g_next_stream_id = 1;

static pthread_mutex_t g_init_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t g_init_refs;
static int g_finalized;
static int g_have_first_config;
static char *g_first_config;         /* content of the first successful aclInit's file */
static size_t g_first_config_len;

static _Thread_local int32_t t_device = -1;
static _Thread_local uint64_t t_device_generation;

#define FAULT_CHECK(name)                          \
    do {                                           \
        uint32_t fault_code_;                      \
        if (mock_fault_take((name), &fault_code_)) \
            return (aclError)fault_code_;          \
    } while (0)

static void mark_started(void)
{
    atomic_store_explicit(&g_started, 1, memory_order_relaxed);
}

static const char *kind_name(int kind)
{
    return kind == MOCK_MEM_DEVICE ? "aclrtMalloc" : "aclrtMallocHost";
}

/* ---------------------------------------------------------------- AVL tree */

static int height(const alloc_node *n)
{
    return n ? n->height : 0;
}

static void update_height(alloc_node *n)
{
    int l = height(n->left), r = height(n->right);
    n->height = (l > r ? l : r) + 1;
}

static alloc_node *rotate_right(alloc_node *n)
{
    alloc_node *l = n->left;
    n->left = l->right;
    l->right = n;
    update_height(n);
    update_height(l);
    return l;
}

static alloc_node *rotate_left(alloc_node *n)
{
    alloc_node *r = n->right;
    n->right = r->left;
    r->left = n;
    update_height(n);
    update_height(r);
    return r;
}

static alloc_node *rebalance(alloc_node *n)
{
    update_height(n);
    int balance = height(n->left) - height(n->right);
    if (balance > 1) {
        if (height(n->left->left) < height(n->left->right))
            n->left = rotate_left(n->left);
        return rotate_right(n);
    }
    if (balance < -1) {
        if (height(n->right->right) < height(n->right->left))
            n->right = rotate_right(n->right);
        return rotate_left(n);
    }
    return n;
}

static alloc_node *tree_insert(alloc_node *root, alloc_node *node)
{
    if (root == NULL) {
        node->left = node->right = NULL;
        node->height = 1;
        return node;
    }
    if (node->base < root->base)
        root->left = tree_insert(root->left, node);
    else
        root->right = tree_insert(root->right, node);
    return rebalance(root);
}

static alloc_node *tree_detach_min(alloc_node *n, alloc_node **min)
{
    if (n->left == NULL) {
        *min = n;
        return n->right;
    }
    n->left = tree_detach_min(n->left, min);
    return rebalance(n);
}

static alloc_node *tree_remove(alloc_node *root, uintptr_t base)
{
    if (root == NULL)
        return NULL;
    if (base < root->base) {
        root->left = tree_remove(root->left, base);
    } else if (base > root->base) {
        root->right = tree_remove(root->right, base);
    } else {
        alloc_node *left = root->left, *right = root->right;
        if (right == NULL)
            return left;
        alloc_node *successor;
        right = tree_detach_min(right, &successor);
        successor->left = left;
        successor->right = right;
        return rebalance(successor);
    }
    return rebalance(root);
}

/* The tracked allocation (live or freed) whose memory or guard zone contains addr,
 * or NULL. */
static alloc_node *tree_containing(uintptr_t addr)
{
    alloc_node *n = g_root, *floor = NULL;
    while (n != NULL) {
        if (n->base <= addr) {
            floor = n;
            n = n->right;
        } else {
            n = n->left;
        }
    }
    return (floor != NULL && addr - floor->base < floor->size + GUARD_BYTES) ? floor : NULL;
}

/* The tracked allocation with the lowest base above addr, or NULL. */
static alloc_node *tree_next_above(uintptr_t addr)
{
    alloc_node *n = g_root, *next = NULL;
    while (n != NULL) {
        if (n->base > addr) {
            next = n;
            n = n->left;
        } else {
            n = n->right;
        }
    }
    return next;
}

/* ---------------------------------------------------------------- shared arenas */

enum {
    ARENA_MAX_CHUNKS = 256,           /* memfds held; beyond, allocations come from the heap */
};
#define ARENA_CHUNK_BYTES ((size_t)64 << 20)   /* the usual size of a chunk */

typedef struct arena_extent {
    size_t off, len;
} arena_extent;

typedef struct arena_chunk {
    int fd;
    uintptr_t base;
    size_t size;
    arena_extent *free;              /* sorted by offset, never adjacent (coalesced) */
    size_t free_count, free_cap;
} arena_chunk;

static arena_chunk g_chunks[ARENA_MAX_CHUNKS];
static atomic_size_t g_chunk_count;  /* chunks only grow; a reader sees whole entries */
static int g_arena_off;              /* memfd_create failed once: heap from then on */

static size_t round_up(size_t n, size_t to)
{
    return n % to == 0 ? n : n + (to - n % to);
}

static size_t page_bytes(void)
{
    long p = sysconf(_SC_PAGESIZE);
    return p > 0 ? (size_t)p : 4096;
}

/* Inserts [off, off + len) into a chunk's free list, merging neighbours. 0 or -1. */
static int extent_give(arena_chunk *c, size_t off, size_t len)
{
    size_t lo = 0, hi = c->free_count;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (c->free[mid].off < off)
            lo = mid + 1;
        else
            hi = mid;
    }
    int merge_prev = lo > 0 && c->free[lo - 1].off + c->free[lo - 1].len == off;
    int merge_next = lo < c->free_count && off + len == c->free[lo].off;
    if (merge_prev && merge_next) {
        c->free[lo - 1].len += len + c->free[lo].len;
        memmove(&c->free[lo], &c->free[lo + 1], (c->free_count - lo - 1) * sizeof *c->free);
        c->free_count--;
        return 0;
    }
    if (merge_prev) {
        c->free[lo - 1].len += len;
        return 0;
    }
    if (merge_next) {
        c->free[lo].off = off;
        c->free[lo].len += len;
        return 0;
    }
    if (c->free_count == c->free_cap) {
        size_t cap = c->free_cap ? c->free_cap * 2 : 16;
        arena_extent *bigger = realloc(c->free, cap * sizeof *bigger);
        if (bigger == NULL)
            return -1;
        c->free = bigger;
        c->free_cap = cap;
    }
    memmove(&c->free[lo + 1], &c->free[lo], (c->free_count - lo) * sizeof *c->free);
    c->free[lo].off = off;
    c->free[lo].len = len;
    c->free_count++;
    return 0;
}

/* First fit in one chunk: the offset of `need` bytes, or SIZE_MAX. */
static size_t extent_take(arena_chunk *c, size_t need)
{
    for (size_t i = 0; i < c->free_count; i++) {
        if (c->free[i].len < need)
            continue;
        size_t off = c->free[i].off;
        c->free[i].off += need;
        c->free[i].len -= need;
        if (c->free[i].len == 0) {
            memmove(&c->free[i], &c->free[i + 1], (c->free_count - i - 1) * sizeof *c->free);
            c->free_count--;
        }
        return off;
    }
    return SIZE_MAX;
}

/* In a child of fork(): the parent's chunks become private copies (copy on write), as
 * heap memory is, so the child cannot write into its parent's memory; and they are
 * never handed to a peer of the child (their memfds are the parent's). Chunks the child
 * makes itself are shared as usual. */
static void arena_after_fork_child(void)
{
    size_t n = atomic_load(&g_chunk_count);
    for (size_t i = 0; i < n; i++) {
        arena_chunk *c = &g_chunks[i];
        if (c->fd < 0)
            continue;
        /* same addresses, same bytes; if this fails the chunk stays shared with the parent,
         * which is what every chunk was before this handler existed */
        (void)mmap((void *)c->base, c->size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_FIXED, c->fd, 0);
        close(c->fd);
        c->fd = -1;
    }
}

static void arena_register_fork_handler(void)
{
    pthread_atfork(NULL, NULL, arena_after_fork_child);
}

/* A new chunk of at least `need` bytes; its index, or -1. Lock held exclusively. */
static int arena_grow_locked(size_t need)
{
    static pthread_once_t fork_handler = PTHREAD_ONCE_INIT;
    pthread_once(&fork_handler, arena_register_fork_handler);
    size_t n = atomic_load(&g_chunk_count);
    if (g_arena_off || n >= ARENA_MAX_CHUNKS || need > SIZE_MAX / 2)
        return -1;
    size_t size = round_up(need > ARENA_CHUNK_BYTES ? need : ARENA_CHUNK_BYTES, page_bytes());
    int fd = memfd_create("lldd-mock-arena", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0) {
        g_arena_off = 1;
        return -1;
    }
    void *mem = MAP_FAILED;
    /* sealed at its size: a peer that maps it can rely on every page being there */
    if (ftruncate(fd, (off_t)size) == 0 &&
        fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) == 0)
        mem = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (mem == MAP_FAILED) {
        close(fd);
        return -1;
    }
    arena_chunk *c = &g_chunks[n];
    memset(c, 0, sizeof *c);
    c->fd = fd;
    c->base = (uintptr_t)mem;
    c->size = size;
    if (extent_give(c, 0, size) != 0) {
        munmap(mem, size);
        close(fd);
        return -1;
    }
    MOCK_POISON(mem, size);
    atomic_store(&g_chunk_count, n + 1);
    return (int)n;
}

/* The arena's share of an allocation of `size` bytes: a lead of ARENA_LEAD bytes that
 * belongs to no allocation (where the C allocator keeps its header: a range that starts
 * just before an allocation runs into it rather than past the end of the one below),
 * the allocation and its guard zone. */
enum { ARENA_LEAD = ALLOC_ALIGNMENT };
static size_t arena_need(size_t size)
{
    return ARENA_LEAD + round_up(size + GUARD_BYTES, ALLOC_ALIGNMENT);
}

/* Memory for an allocation from the arena; NULL (and *chunk -1) if it has none. Lock
 * held exclusively. */
static void *arena_alloc_locked(size_t size, int *chunk)
{
    *chunk = -1;
    if (size > SIZE_MAX / 2)
        return NULL;
    size_t need = arena_need(size);
    size_t n = atomic_load(&g_chunk_count);
    for (size_t i = 0; i < n; i++) {
        size_t off = extent_take(&g_chunks[i], need);
        if (off != SIZE_MAX) {
            *chunk = (int)i;
            return (void *)(g_chunks[i].base + off + ARENA_LEAD);
        }
    }
    int k = arena_grow_locked(need);
    if (k < 0)
        return NULL;
    size_t off = extent_take(&g_chunks[k], need);
    if (off == SIZE_MAX)
        return NULL;
    *chunk = k;
    return (void *)(g_chunks[k].base + off + ARENA_LEAD);
}

/* Gives an allocation's space back to its chunk. Lock held exclusively. */
static void arena_free_locked(int chunk, uintptr_t base, size_t size)
{
    arena_chunk *c = &g_chunks[chunk];
    MOCK_POISON((void *)(base - ARENA_LEAD), arena_need(size));
    /* if the list cannot grow, the space stays unused: a leak of address space only */
    (void)extent_give(c, base - ARENA_LEAD - c->base, arena_need(size));
}

size_t mock_arena_chunk_count(void)
{
    return atomic_load(&g_chunk_count);
}

size_t mock_arena_chunks(size_t from, mock_arena_chunk *out, size_t max, size_t *next)
{
    size_t n = atomic_load(&g_chunk_count), k = 0, i = from;
    for (; i < n && k < max; i++) {
        if (g_chunks[i].fd < 0)
            continue; /* a parent's chunk in a child of fork() */
        out[k].base = g_chunks[i].base;
        out[k].size = g_chunks[i].size;
        out[k].fd = g_chunks[i].fd;
        k++;
    }
    *next = i;
    return k;
}

/* ---------------------------------------------------------------- devices */

/* The calling thread's current device, or -1. Lock held (shared suffices). */
static int32_t current_device_locked(void)
{
    if (t_device < 0 || (uint32_t)t_device >= g_device_count)
        return -1;
    if (g_devices[t_device].generation != t_device_generation)
        return -1;
    return t_device;
}

static aclError no_current_device(const char *fn)
{
    mock_set_error("%s: no current device in this thread; call aclrtSetDevice first (ACL_ERROR_RT_CONTEXT_NULL)",
                   fn);
    return ACL_ERROR_RT_CONTEXT_NULL;
}

static aclError invalid_device(const char *fn, int32_t device)
{
    mock_set_error("%s: deviceId %d is not a valid device; valid ids are 0 .. %u (docs/reference/acl.md A-2)", fn, (int)device,
                   (unsigned)(g_device_count - 1));
    return ACL_ERROR_RT_INVALID_DEVICEID;
}

/* The last reference is gone: the default context and its streams go with it,
 * and every thread's current device on it lapses. Memory stays. Lock held. */
static void release_device_locked(int32_t device)
{
    g_devices[device].refs = 0;
    g_devices[device].generation++;
    size_t kept = 0;
    for (size_t i = 0; i < g_stream_count; i++)
        if (g_streams[i].device != device)
            g_streams[kept++] = g_streams[i];
    g_stream_count = kept;
}

/* ---------------------------------------------------------------- allocations */

/* Takes the lock. device < 0 means the calling thread's current device. */
static aclError track_allocation(const char *fn, int kind, int32_t device, size_t size, void **out)
{
    aclError rc = ACL_SUCCESS;
    pthread_rwlock_wrlock(&g_lock);
    if (device < 0) {
        device = current_device_locked();
        if (device < 0) {
            rc = no_current_device(fn);
            goto done;
        }
    }
    device_state *d = &g_devices[device];
    if (kind == MOCK_MEM_DEVICE && (uint64_t)size > g_capacity - d->used) {
        mock_set_error("%s: size %zu exceeds the free memory of device %d: %llu of %llu bytes free (docs/reference/acl.md A-3)",
                       fn, size, (int)device, (unsigned long long)(g_capacity - d->used),
                       (unsigned long long)g_capacity);
        rc = ACL_ERROR_RT_MEMORY_ALLOCATION;
        goto done;
    }
    alloc_node *node = calloc(1, sizeof *node);
    void *mem = NULL;
    int chunk = -1;
    if (node != NULL && size <= SIZE_MAX - 2 * (size_t)ALLOC_ALIGNMENT - GUARD_BYTES) {
        mem = arena_alloc_locked(size, &chunk);
        if (mem == NULL && posix_memalign(&mem, ALLOC_ALIGNMENT, size + GUARD_BYTES) != 0)
            mem = NULL;
    }
    if (mem == NULL) {
        free(node);
        mock_set_error("%s: the host cannot provide %zu bytes for the mock allocation", fn, size);
        rc = ACL_ERROR_RT_MEMORY_ALLOCATION;
        goto done;
    }
    MOCK_UNPOISON(mem, size);
    MOCK_POISON((char *)mem + size, GUARD_BYTES);
    node->chunk = chunk;
    node->base = (uintptr_t)mem;
    node->size = size;
    node->live = 1;
    node->kind = kind;
    node->device = device;
    g_root = tree_insert(g_root, node);
    g_live_count++;
    if (kind == MOCK_MEM_DEVICE)
        d->used += size;
    *out = mem;
done:
    pthread_rwlock_unlock(&g_lock);
    return rc;
}

/* Gives a freed record's memory back to the C allocator and forgets it. Lock held. */
static void drop_record_locked(alloc_node *node)
{
    g_root = tree_remove(g_root, node->base);
    void *mem = (void *)node->base;
    if (node->chunk >= 0) {
        arena_free_locked(node->chunk, node->base, node->size);
    } else {
        MOCK_UNPOISON(mem, node->size + GUARD_BYTES);
        free(mem);
    }
    free(node);
}

/* Gives the whole pages inside [base, base + size) back to the system; the addresses
 * stay ours and read as zeros if touched. */
static void release_pages(uintptr_t base, size_t size, int shared)
{
    long page_size = sysconf(_SC_PAGESIZE);
    if (page_size <= 0)
        return;
    uintptr_t page = (uintptr_t)page_size;
    uintptr_t first = base + (page - base % page) % page;
    uintptr_t end = (base + size) - (base + size) % page;
    if (end <= first)
        return;
    if (shared) {
        /* arena pages belong to a memfd: only MADV_REMOVE gives them back (and to a
         * peer's mapping as well); advice: failure is harmless */
        (void)madvise((void *)first, end - first, MADV_REMOVE);
        return;
    }
    /* Heap pages: a fresh mapping without a commit charge (MAP_NORESERVE) in their
     * place. MADV_DONTNEED alone frees the pages but keeps the charge, and under the
     * kernel's default overcommit heuristic fork() refuses (ENOMEM) to copy a mapping
     * whose charge exceeds the machine's memory: held memory, up to FREED_MAX_BYTES of
     * address space, would make every fork() of the process fail. Only pages wholly
     * inside the allocation are replaced (the C allocator's header lies before it), and
     * they stay readable and writable, as before, until free() takes them back. */
    if (mmap((void *)first, end - first, PROT_READ | PROT_WRITE,
             MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0) == MAP_FAILED)
        (void)madvise((void *)first, end - first, MADV_DONTNEED);
}

/* Keeps a just-freed allocation as a record (see the top of this file). Lock held. */
static void hold_freed_locked(alloc_node *node)
{
    if (node->size > FREED_MAX_BYTES) {
        drop_record_locked(node);
        return;
    }
    release_pages(node->base, node->size, node->chunk >= 0);
    MOCK_POISON((void *)node->base, node->size + GUARD_BYTES);
    node->newer = NULL;
    if (g_freed_newest != NULL)
        g_freed_newest->newer = node;
    else
        g_freed_oldest = node;
    g_freed_newest = node;
    g_freed_records++;
    g_freed_bytes += node->size;
    while (g_freed_records > FREED_MAX_RECORDS || g_freed_bytes > FREED_MAX_BYTES) {
        alloc_node *oldest = g_freed_oldest;
        g_freed_oldest = oldest->newer;
        if (g_freed_oldest == NULL)
            g_freed_newest = NULL;
        g_freed_records--;
        g_freed_bytes -= oldest->size;
        drop_record_locked(oldest);
    }
}

/* frees only the start of a live allocation of the matching allocator. */
static aclError release_allocation(const char *fn, const char *param, void *ptr, int kind)
{
    if (ptr == NULL) {
        mock_set_error("%s: %s is NULL", fn, param);
        return ACL_ERROR_INVALID_PARAM;
    }
    aclError rc = ACL_ERROR_RT_PARAM_INVALID;
    uintptr_t addr = (uintptr_t)ptr;
    pthread_rwlock_wrlock(&g_lock);
    alloc_node *node = tree_containing(addr);
    if (node == NULL) {
        mock_set_error("%s: %s %p is not an allocation of %s (unknown pointer; docs/reference/acl.md A-6)", fn, param, ptr,
                       kind_name(kind));
    } else if (addr - node->base >= node->size) {
        mock_set_error("%s: %s %p lies %zu bytes past the end of the %s allocation [%p, +%zu), not at its "
                       "start (docs/reference/acl.md A-6)",
                       fn, param, ptr, (size_t)(addr - node->base - node->size), kind_name(node->kind),
                       (void *)node->base, node->size);
    } else if (!node->live) {
        mock_set_error("%s: %s %p lies in the %s allocation [%p, +%zu) that was already freed "
                       "(double free; docs/reference/acl.md A-6)",
                       fn, param, ptr, kind_name(node->kind), (void *)node->base, node->size);
    } else if (node->base != addr) {
        mock_set_error("%s: %s %p is %zu bytes inside the %s allocation [%p, +%zu), not its start "
                       "(docs/reference/acl.md A-6)",
                       fn, param, ptr, (size_t)(addr - node->base), kind_name(node->kind), (void *)node->base,
                       node->size);
    } else if (node->kind != kind) {
        mock_set_error("%s: %s %p was allocated by %s; free it with %s (docs/reference/acl.md A-6)", fn, param, ptr,
                       kind_name(node->kind), node->kind == MOCK_MEM_DEVICE ? "aclrtFree" : "aclrtFreeHost");
    } else {
        node->live = 0;
        g_live_count--;
        if (kind == MOCK_MEM_DEVICE)
            g_devices[node->device].used -= node->size;
        hold_freed_locked(node);
        rc = ACL_SUCCESS;
    }
    pthread_rwlock_unlock(&g_lock);
    return rc;
}

/* ---------------------------------------------------------------- range checks */

enum placement { PLACE_ANY, PLACE_DEVICE, PLACE_HOST };

/* Checks that [ptr, ptr + len) may be touched with the given placement rule.
 * Beyond A-5's wording, a range that starts in an allocation's guard zone is an
 * overrun of that allocation, and a range that starts outside every tracked
 * allocation must not run into one (an overrun of the caller's own buffer).
 * Lock held (shared). Returns ACL_SUCCESS or ACL_ERROR_RT_PARAM_INVALID with the
 * message set; *found receives the allocation that holds the range, if any. */
static aclError check_range(const char *fn, const char *param, const void *ptr, size_t len, enum placement rule,
                            const char *why, const alloc_node **found)
{
    uintptr_t addr = (uintptr_t)ptr;
    *found = NULL;
    if (len > UINTPTR_MAX - addr) {
        mock_set_error("%s: %s range [%p, +%zu) wraps around the address space (docs/reference/acl.md A-5)", fn, param, ptr, len);
        return ACL_ERROR_RT_PARAM_INVALID;
    }
    const alloc_node *node = tree_containing(addr);
    if (node != NULL) {
        if (addr - node->base >= node->size) {
            mock_set_error("%s: %s %p lies %zu bytes past the end of the %s allocation [%p, +%zu) (docs/reference/acl.md A-4, "
                           "A-5)",
                           fn, param, ptr, (size_t)(addr - node->base - node->size), kind_name(node->kind),
                           (void *)node->base, node->size);
            return ACL_ERROR_RT_PARAM_INVALID;
        }
        if (!node->live) {
            mock_set_error("%s: %s %p lies in the %s allocation [%p, +%zu) that was freed (use after free; "
                           "docs/reference/acl.md A-5)",
                           fn, param, ptr, kind_name(node->kind), (void *)node->base, node->size);
            return ACL_ERROR_RT_PARAM_INVALID;
        }
        size_t room = node->size - (size_t)(addr - node->base);
        if (len > room) {
            mock_set_error("%s: %s range [%p, +%zu) runs %zu bytes past the end of the %s allocation [%p, +%zu) "
                           "(docs/reference/acl.md A-5)",
                           fn, param, ptr, len, len - room, kind_name(node->kind), (void *)node->base, node->size);
            return ACL_ERROR_RT_PARAM_INVALID;
        }
        if (rule == PLACE_DEVICE && node->kind != MOCK_MEM_DEVICE) {
            mock_set_error("%s: %s %p lies in aclrtMallocHost memory [%p, +%zu), but %s needs device memory from "
                           "aclrtMalloc (docs/reference/acl.md A-5)",
                           fn, param, ptr, (void *)node->base, node->size, why);
            return ACL_ERROR_RT_PARAM_INVALID;
        }
        if (rule == PLACE_HOST && node->kind == MOCK_MEM_DEVICE) {
            mock_set_error("%s: %s %p lies in aclrtMalloc device memory [%p, +%zu), but %s needs host memory "
                           "(docs/reference/acl.md A-5)",
                           fn, param, ptr, (void *)node->base, node->size, why);
            return ACL_ERROR_RT_PARAM_INVALID;
        }
        *found = node;
        return ACL_SUCCESS;
    }
    if (rule == PLACE_DEVICE) {
        mock_set_error("%s: %s %p is not in any live aclrtMalloc allocation, but %s needs device memory "
                       "(docs/reference/acl.md A-5)",
                       fn, param, ptr, why);
        return ACL_ERROR_RT_PARAM_INVALID;
    }
    const alloc_node *next = tree_next_above(addr);
    if (next != NULL && next->base - addr < len) {
        mock_set_error("%s: %s range [%p, +%zu) starts outside every mock allocation and runs into the %s "
                       "allocation [%p, +%zu) (docs/reference/acl.md A-5)",
                       fn, param, ptr, len, kind_name(next->kind), (void *)next->base, next->size);
        return ACL_ERROR_RT_PARAM_INVALID;
    }
    return ACL_SUCCESS;
}

/* ---------------------------------------------------------------- streams */

/* Handles are never reused, so a destroyed handle is always recognised. They
 * encode an id and are never dereferenced. */
#if UINTPTR_MAX > 0xFFFFFFFFu
#define STREAM_HANDLE_BASE ((uintptr_t)0x5E5E000000000000u)
#else
#define STREAM_HANDLE_BASE ((uintptr_t)0x5E000000u)
#endif

/* Index of a live stream, or -1. Lock held. */
static long find_stream_locked(aclrtStream stream)
{
    for (size_t i = 0; i < g_stream_count; i++)
        if (g_streams[i].handle == (uintptr_t)stream)
            return (long)i;
    return -1;
}

static aclError unknown_stream(const char *fn, aclrtStream stream)
{
    mock_set_error("%s: stream %p is not a live stream (destroyed, released with its device, or never created; "
                   "docs/reference/acl.md A-7)",
                   fn, stream);
    return ACL_ERROR_RT_PARAM_INVALID;
}

/* ---------------------------------------------------------------- copies */

static const char *const k_memcpy_kind_names[] = {
    "ACL_MEMCPY_HOST_TO_HOST", "ACL_MEMCPY_HOST_TO_DEVICE", "ACL_MEMCPY_DEVICE_TO_HOST",
    "ACL_MEMCPY_DEVICE_TO_DEVICE", "ACL_MEMCPY_DEFAULT", "ACL_MEMCPY_HOST_TO_BUF_TO_DEVICE",
};

static aclError copy_memory(const char *fn, void *dst, size_t destMax, const void *src, size_t count,
                            aclrtMemcpyKind kind, int async, aclrtStream stream)
{
    if (count == 0)
        return ACL_SUCCESS;
    if (dst == NULL || src == NULL) {
        mock_set_error("%s: %s is NULL", fn, dst == NULL ? "dst" : "src");
        return ACL_ERROR_INVALID_PARAM;
    }
    if ((unsigned)kind > (unsigned)ACL_MEMCPY_HOST_TO_BUF_TO_DEVICE) {
        mock_set_error("%s: kind %d is not accepted; use one of ACL_MEMCPY_HOST_TO_HOST (0) .. "
                       "ACL_MEMCPY_HOST_TO_BUF_TO_DEVICE (5)",
                       fn, (int)kind);
        return ACL_ERROR_INVALID_PARAM;
    }
    aclError rc = ACL_SUCCESS;
    pthread_rwlock_rdlock(&g_lock);
    int32_t device = current_device_locked();
    if (device < 0) {
        rc = no_current_device(fn);
        goto done;
    }
    if (destMax == 0 || count > destMax) {
        mock_set_error("%s: count %zu exceeds destMax %zu (destMax must be at least count and not 0)", fn, count,
                       destMax);
        rc = ACL_ERROR_RT_PARAM_INVALID;
        goto done;
    }
    if (async && stream != NULL) {
        long i = find_stream_locked(stream);
        if (i < 0) {
            rc = unknown_stream(fn, stream);
            goto done;
        }
        if (g_streams[i].device != device) {
            mock_set_error("%s: stream %p belongs to device %d, but the current device of this thread is %d", fn,
                           stream, (int)g_streams[i].device, (int)device);
            rc = ACL_ERROR_RT_STREAM_CONTEXT;
            goto done;
        }
    }
    enum placement dst_rule = PLACE_ANY, src_rule = PLACE_ANY;
    switch (kind) {
    case ACL_MEMCPY_HOST_TO_HOST:
        dst_rule = src_rule = PLACE_HOST;
        break;
    case ACL_MEMCPY_HOST_TO_DEVICE:
        dst_rule = PLACE_DEVICE;
        break;
    case ACL_MEMCPY_DEVICE_TO_HOST:
        src_rule = PLACE_DEVICE;
        break;
    case ACL_MEMCPY_DEVICE_TO_DEVICE:
        dst_rule = src_rule = PLACE_DEVICE;
        break;
    default:
        break;
    }
    const char *why = k_memcpy_kind_names[kind];
    const alloc_node *dst_node, *src_node;
    rc = check_range(fn, "dst", dst, count, dst_rule, why, &dst_node);
    if (rc == ACL_SUCCESS)
        rc = check_range(fn, "src", src, count, src_rule, why, &src_node);
    if (rc != ACL_SUCCESS)
        goto done;
    if (async && dst_node != NULL && src_node != NULL && dst_node->kind == MOCK_MEM_DEVICE &&
        src_node->kind == MOCK_MEM_DEVICE && dst_node->device == src_node->device &&
        ((uintptr_t)dst % ASYNC_D2D_ALIGNMENT != 0 || (uintptr_t)src % ASYNC_D2D_ALIGNMENT != 0)) {
        mock_set_error("%s: device-to-device copies on one device need %d-byte-aligned addresses; dst %p, src %p",
                       fn, ASYNC_D2D_ALIGNMENT, dst, src);
        rc = ACL_ERROR_RT_PARAM_INVALID;
        goto done;
    }
    if (dst != src)
        memmove(dst, src, count);
done:
    pthread_rwlock_unlock(&g_lock);
    return rc;
}

/* ---------------------------------------------------------------- aclInit / aclFinalize */

/* the file's bytes, uninterpreted. */
static aclError read_config(const char *path, char **out, size_t *out_len)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        mock_set_error("aclInit: configPath \"%s\" cannot be opened (errno %d)", path, errno);
        return ACL_ERROR_INVALID_FILE;
    }
    char *buf = NULL;
    size_t len = 0, capacity = 0;
    int failed = 0;
    for (;;) {
        if (len == capacity) {
            size_t grown = capacity ? capacity * 2 : 4096;
            char *bigger = realloc(buf, grown);
            if (bigger == NULL) {
                failed = 1;
                break;
            }
            buf = bigger;
            capacity = grown;
        }
        size_t n = fread(buf + len, 1, capacity - len, f);
        len += n;
        if (n == 0)
            break;
    }
    if (ferror(f))
        failed = 1;
    fclose(f);
    if (failed) {
        free(buf);
        mock_set_error("aclInit: configPath \"%s\" cannot be read", path);
        return ACL_ERROR_INVALID_FILE;
    }
    *out = buf;
    *out_len = len;
    return ACL_SUCCESS;
}

MOCK_EXPORT aclError aclInit(const char *configPath)
{
    FAULT_CHECK("aclInit");
    mark_started();
    /* No configuration (NULL or "") counts as empty content for the comparison. */
    char *content = NULL;
    size_t len = 0;
    if (configPath != NULL && configPath[0] != '\0') {
        aclError rc = read_config(configPath, &content, &len);
        if (rc != ACL_SUCCESS)
            return rc;
    }
    aclError rc = ACL_SUCCESS;
    pthread_mutex_lock(&g_init_lock);
    if (g_init_refs > 0) {
        g_init_refs++;
        mock_set_error("aclInit: already initialised; the reference count is now %llu "
                       "(ACL_ERROR_REPEAT_INITIALIZE, which callers usually treat as success)",
                       (unsigned long long)g_init_refs);
        rc = ACL_ERROR_REPEAT_INITIALIZE;
    } else if (g_have_first_config &&
               (len != g_first_config_len || (len > 0 && memcmp(content, g_first_config, len) != 0))) {
        mock_set_error("aclInit: the content of configPath \"%s\" differs from that of the first successful "
                       "aclInit of this process",
                       configPath != NULL ? configPath : "(null)");
        rc = ACL_ERROR_INVALID_PARAM;
    } else {
        g_init_refs = 1;
        g_finalized = 0;
        if (!g_have_first_config) {
            g_have_first_config = 1;
            g_first_config = content;
            g_first_config_len = len;
            content = NULL;
        }
    }
    pthread_mutex_unlock(&g_init_lock);
    free(content);
    return rc;
}

MOCK_EXPORT aclError aclFinalize(void)
{
    FAULT_CHECK("aclFinalize");
    mark_started();
    aclError rc = ACL_SUCCESS;
    pthread_mutex_lock(&g_init_lock);
    if (g_finalized) {
        mock_set_error("aclFinalize: already finalised");
        rc = ACL_ERROR_REPEAT_FINALIZE;
    } else {
        g_finalized = 1;
        g_init_refs = 0;
    }
    pthread_mutex_unlock(&g_init_lock);
    return rc;
}

MOCK_EXPORT aclError aclFinalizeReference(uint64_t *refCount)
{
    FAULT_CHECK("aclFinalizeReference");
    mark_started();
    aclError rc = ACL_SUCCESS;
    pthread_mutex_lock(&g_init_lock);
    if (g_init_refs < 1) {
        mock_set_error("aclFinalizeReference: the reference count is 0 (not initialised, or already finalised)");
        rc = ACL_ERROR_REPEAT_FINALIZE;
    } else {
        g_init_refs--;
        if (g_init_refs == 0)
            g_finalized = 1;
        if (refCount != NULL)
            *refCount = g_init_refs;
    }
    pthread_mutex_unlock(&g_init_lock);
    return rc;
}

MOCK_EXPORT const char *aclGetRecentErrMsg(void)
{
    return mock_error_or_null();
}

/* ---------------------------------------------------------------- devices (exported) */

MOCK_EXPORT aclError aclrtSetDevice(int32_t deviceId)
{
    FAULT_CHECK("aclrtSetDevice");
    mark_started();
    aclError rc = ACL_SUCCESS;
    pthread_rwlock_wrlock(&g_lock);
    if (deviceId < 0 || (uint32_t)deviceId >= g_device_count) {
        rc = invalid_device("aclrtSetDevice", deviceId);
    } else {
        g_devices[deviceId].refs++;
        t_device = deviceId;
        t_device_generation = g_devices[deviceId].generation;
    }
    pthread_rwlock_unlock(&g_lock);
    return rc;
}

static aclError reset_device(const char *fn, int32_t deviceId, int force)
{
    aclError rc = ACL_SUCCESS;
    pthread_rwlock_wrlock(&g_lock);
    if (deviceId < 0 || (uint32_t)deviceId >= g_device_count) {
        rc = invalid_device(fn, deviceId);
    } else if (g_devices[deviceId].refs > 0) {
        /* with no reference left, a reset is a success without effect. */
        if (force || --g_devices[deviceId].refs == 0)
            release_device_locked(deviceId);
    }
    pthread_rwlock_unlock(&g_lock);
    return rc;
}

MOCK_EXPORT aclError aclrtResetDevice(int32_t deviceId)
{
    FAULT_CHECK("aclrtResetDevice");
    mark_started();
    return reset_device("aclrtResetDevice", deviceId, 0);
}

MOCK_EXPORT aclError aclrtResetDeviceForce(int32_t deviceId)
{
    FAULT_CHECK("aclrtResetDeviceForce");
    mark_started();
    return reset_device("aclrtResetDeviceForce", deviceId, 1);
}

MOCK_EXPORT aclError aclrtGetDevice(int32_t *deviceId)
{
    FAULT_CHECK("aclrtGetDevice");
    mark_started();
    if (deviceId == NULL) {
        mock_set_error("aclrtGetDevice: deviceId is NULL");
        return ACL_ERROR_INVALID_PARAM;
    }
    pthread_rwlock_rdlock(&g_lock);
    int32_t device = current_device_locked();
    pthread_rwlock_unlock(&g_lock);
    if (device < 0)
        return no_current_device("aclrtGetDevice");
    *deviceId = device;
    return ACL_SUCCESS;
}

MOCK_EXPORT aclError aclrtGetDeviceCount(uint32_t *count)
{
    FAULT_CHECK("aclrtGetDeviceCount");
    mark_started();
    if (count == NULL) {
        mock_set_error("aclrtGetDeviceCount: count is NULL");
        return ACL_ERROR_INVALID_PARAM;
    }
    pthread_rwlock_rdlock(&g_lock);
    *count = g_device_count;
    pthread_rwlock_unlock(&g_lock);
    return ACL_SUCCESS;
}

MOCK_EXPORT aclError aclrtSynchronizeDevice(void)
{
    FAULT_CHECK("aclrtSynchronizeDevice");
    mark_started();
    pthread_rwlock_rdlock(&g_lock);
    int32_t device = current_device_locked();
    pthread_rwlock_unlock(&g_lock);
    return device < 0 ? no_current_device("aclrtSynchronizeDevice") : ACL_SUCCESS;
}

/* ---------------------------------------------------------------- memory (exported) */

MOCK_EXPORT aclError aclrtMalloc(void **devPtr, size_t size, aclrtMemMallocPolicy policy)
{
    FAULT_CHECK("aclrtMalloc");
    mark_started();
    if (devPtr == NULL) {
        mock_set_error("aclrtMalloc: devPtr is NULL");
        return ACL_ERROR_INVALID_PARAM;
    }
    if (size == 0) {
        mock_set_error("aclrtMalloc: size is 0");
        return ACL_ERROR_INVALID_PARAM;
    }
    /* Flags may be OR-ed in; a base policy outside the enum is the default one. */
    unsigned base_policy = (unsigned)policy & ~POLICY_FLAGS;
    size_t padding = (base_policy == ACL_MEM_MALLOC_HUGE1G_ONLY || base_policy == ACL_MEM_MALLOC_HUGE1G_ONLY_P2P)
                         ? 0
                         : VENDOR_PADDING;
    if (size > SIZE_MAX - VENDOR_ROUNDING - padding) {
        mock_set_error("aclrtMalloc: size %zu overflows size_t once rounded up and padded", size);
        return ACL_ERROR_INVALID_PARAM;
    }
    return track_allocation("aclrtMalloc", MOCK_MEM_DEVICE, -1, size, devPtr);
}

MOCK_EXPORT aclError aclrtMallocHost(void **hostPtr, size_t size)
{
    FAULT_CHECK("aclrtMallocHost");
    mark_started();
    if (hostPtr == NULL || size == 0) {
        mock_set_error("aclrtMallocHost: %s", hostPtr == NULL ? "hostPtr is NULL" : "size is 0");
        return ACL_ERROR_INVALID_PARAM;
    }
    return track_allocation("aclrtMallocHost", MOCK_MEM_HOST, -1, size, hostPtr);
}

MOCK_EXPORT aclError aclrtFree(void *devPtr)
{
    FAULT_CHECK("aclrtFree");
    mark_started();
    return release_allocation("aclrtFree", "devPtr", devPtr, MOCK_MEM_DEVICE);
}

MOCK_EXPORT aclError aclrtFreeHost(void *hostPtr)
{
    FAULT_CHECK("aclrtFreeHost");
    mark_started();
    return release_allocation("aclrtFreeHost", "hostPtr", hostPtr, MOCK_MEM_HOST);
}

MOCK_EXPORT aclError aclrtMemcpy(void *dst, size_t destMax, const void *src, size_t count, aclrtMemcpyKind kind)
{
    FAULT_CHECK("aclrtMemcpy");
    mark_started();
    return copy_memory("aclrtMemcpy", dst, destMax, src, count, kind, 0, NULL);
}

MOCK_EXPORT aclError aclrtMemcpyAsync(void *dst, size_t destMax, const void *src, size_t count,
                                      aclrtMemcpyKind kind, aclrtStream stream)
{
    FAULT_CHECK("aclrtMemcpyAsync");
    mark_started();
    /* synchronous; the copy has completed when this returns. */
    return copy_memory("aclrtMemcpyAsync", dst, destMax, src, count, kind, 1, stream);
}

MOCK_EXPORT aclError aclrtMemset(void *devPtr, size_t maxCount, int32_t value, size_t count)
{
    FAULT_CHECK("aclrtMemset");
    mark_started();
    if (count == 0)
        return ACL_SUCCESS;
    if (devPtr == NULL) {
        mock_set_error("aclrtMemset: devPtr is NULL");
        return ACL_ERROR_INVALID_PARAM;
    }
    aclError rc = ACL_SUCCESS;
    pthread_rwlock_rdlock(&g_lock);
    const alloc_node *node;
    if (current_device_locked() < 0) {
        rc = no_current_device("aclrtMemset");
    } else if (count > maxCount) {
        mock_set_error("aclrtMemset: count %zu exceeds maxCount %zu (docs/reference/acl.md A-5)", count, maxCount);
        rc = ACL_ERROR_RT_PARAM_INVALID;
    } else {
        rc = check_range("aclrtMemset", "devPtr", devPtr, count, PLACE_ANY, "aclrtMemset", &node);
        if (rc == ACL_SUCCESS)
            memset(devPtr, (int)((uint32_t)value & 0xFFu), count);
    }
    pthread_rwlock_unlock(&g_lock);
    return rc;
}

MOCK_EXPORT aclError aclrtGetMemInfo(aclrtMemAttr attr, size_t *free_bytes, size_t *total_bytes)
{
    FAULT_CHECK("aclrtGetMemInfo");
    mark_started();
    if (free_bytes == NULL || total_bytes == NULL) {
        mock_set_error("aclrtGetMemInfo: %s is NULL", free_bytes == NULL ? "free" : "total");
        return ACL_ERROR_INVALID_PARAM;
    }
    aclError rc = ACL_SUCCESS;
    pthread_rwlock_rdlock(&g_lock);
    int32_t device = current_device_locked();
    if (device < 0) {
        rc = no_current_device("aclrtGetMemInfo");
    } else if ((unsigned)attr > (unsigned)MEM_ATTR_LAST) {
        mock_set_error("aclrtGetMemInfo: attr %d is not an aclrtMemAttr (0 .. %d; docs/reference/acl.md A-3)", (int)attr,
                       (int)MEM_ATTR_LAST);
        rc = ACL_ERROR_RT_PARAM_INVALID;
    } else {
        /* the same figures for every attribute. */
        *total_bytes = (size_t)g_capacity;
        *free_bytes = (size_t)(g_capacity - g_devices[device].used);
    }
    pthread_rwlock_unlock(&g_lock);
    return rc;
}

/* ---------------------------------------------------------------- streams (exported) */

MOCK_EXPORT aclError aclrtCreateStream(aclrtStream *stream)
{
    FAULT_CHECK("aclrtCreateStream");
    mark_started();
    if (stream == NULL) {
        mock_set_error("aclrtCreateStream: stream is NULL");
        return ACL_ERROR_INVALID_PARAM;
    }
    aclError rc = ACL_SUCCESS;
    pthread_rwlock_wrlock(&g_lock);
    int32_t device = current_device_locked();
    if (device < 0) {
        rc = no_current_device("aclrtCreateStream");
        goto done;
    }
    if (g_stream_count == g_stream_capacity) {
        size_t grown = g_stream_capacity ? g_stream_capacity * 2 : 16;
        stream_entry *bigger = realloc(g_streams, grown * sizeof *bigger);
        if (bigger == NULL) {
            mock_set_error("aclrtCreateStream: out of host memory for the stream table");
            rc = ACL_ERROR_RT_MEMORY_ALLOCATION;
            goto done;
        }
        g_streams = bigger;
        g_stream_capacity = grown;
    }
    uintptr_t handle = STREAM_HANDLE_BASE + (uintptr_t)(g_next_stream_id++) * 16u;
    g_streams[g_stream_count].handle = handle;
    g_streams[g_stream_count].device = device;
    g_stream_count++;
    *stream = (aclrtStream)handle;
done:
    pthread_rwlock_unlock(&g_lock);
    return rc;
}

MOCK_EXPORT aclError aclrtDestroyStream(aclrtStream stream)
{
    FAULT_CHECK("aclrtDestroyStream");
    mark_started();
    if (stream == NULL) {
        mock_set_error("aclrtDestroyStream: stream is NULL");
        return ACL_ERROR_INVALID_PARAM;
    }
    aclError rc = ACL_SUCCESS;
    pthread_rwlock_wrlock(&g_lock);
    long i = find_stream_locked(stream);
    if (i < 0)
        rc = unknown_stream("aclrtDestroyStream", stream);
    else
        g_streams[i] = g_streams[--g_stream_count];
    pthread_rwlock_unlock(&g_lock);
    return rc;
}

static aclError synchronize_stream(const char *fn, aclrtStream stream)
{
    if (stream == NULL)
        return ACL_SUCCESS;      /* the default stream; A-7 */
    pthread_rwlock_rdlock(&g_lock);
    long i = find_stream_locked(stream);
    pthread_rwlock_unlock(&g_lock);
    return i < 0 ? unknown_stream(fn, stream) : ACL_SUCCESS;
}

MOCK_EXPORT aclError aclrtSynchronizeStream(aclrtStream stream)
{
    FAULT_CHECK("aclrtSynchronizeStream");
    mark_started();
    return synchronize_stream("aclrtSynchronizeStream", stream);
}

MOCK_EXPORT aclError aclrtSynchronizeStreamWithTimeout(aclrtStream stream, int32_t timeout)
{
    FAULT_CHECK("aclrtSynchronizeStreamWithTimeout");
    mark_started();
    if (timeout < -1) {
        mock_set_error("aclrtSynchronizeStreamWithTimeout: timeout %d ms is invalid (-1 waits indefinitely, "
                       "0 checks once, a positive value waits that long)",
                       (int)timeout);
        return ACL_ERROR_INVALID_PARAM;
    }
    return synchronize_stream("aclrtSynchronizeStreamWithTimeout", stream);
}

/* ---------------------------------------------------------------- version */

MOCK_EXPORT aclError aclrtGetVersion(int32_t *majorVersion, int32_t *minorVersion, int32_t *patchVersion)
{
    FAULT_CHECK("aclrtGetVersion");
    if (majorVersion == NULL || minorVersion == NULL || patchVersion == NULL) {
        mock_set_error("aclrtGetVersion: %s is NULL",
                       majorVersion == NULL ? "majorVersion" : minorVersion == NULL ? "minorVersion" : "patchVersion");
        return ACL_ERROR_INVALID_PARAM;
    }
    *majorVersion = 1;
    *minorVersion = 17;
    *patchVersion = 0;
    return ACL_SUCCESS;
}

MOCK_EXPORT const char *aclrtGetSocName(void)
{
    return k_soc_name;
}

/* ---------------------------------------------------------------- internal interface */

int mock_acl_lookup(uintptr_t addr, mock_alloc_info *out)
{
    pthread_rwlock_rdlock(&g_lock);
    const alloc_node *node = tree_containing(addr);
    if (node != NULL && addr - node->base >= node->size)
        node = NULL;      /* the guard zone is not part of the allocation */
    if (node != NULL && out != NULL) {
        out->base = node->base;
        out->size = node->size;
        out->live = node->live;
        out->kind = node->kind;
        out->device = node->device;
    }
    pthread_rwlock_unlock(&g_lock);
    return node != NULL;
}

int mock_acl_device_valid(int32_t device)
{
    mark_started();
    pthread_rwlock_rdlock(&g_lock);
    int valid = device >= 0 && (uint32_t)device < g_device_count;
    pthread_rwlock_unlock(&g_lock);
    return valid;
}

aclError mock_acl_alloc_device(int32_t device, size_t size, void **out)
{
    mark_started();
    if (out == NULL || size == 0) {
        mock_set_error("mock_acl_alloc_device: %s", out == NULL ? "out is NULL" : "size is 0");
        return ACL_ERROR_INVALID_PARAM;
    }
    if (!mock_acl_device_valid(device)) {
        pthread_rwlock_rdlock(&g_lock);
        aclError rc = invalid_device("mock_acl_alloc_device", device);
        pthread_rwlock_unlock(&g_lock);
        return rc;
    }
    return track_allocation("mock_acl_alloc_device", MOCK_MEM_DEVICE, device, size, out);
}

aclError mock_acl_free_device(void *ptr)
{
    return release_allocation("mock_acl_free_device", "ptr", ptr, MOCK_MEM_DEVICE);
}

static uint64_t live_count(void)
{
    pthread_rwlock_rdlock(&g_lock);
    uint64_t n = g_live_count;
    pthread_rwlock_unlock(&g_lock);
    return n;
}

/* ---------------------------------------------------------------- mock control (mock.h) */

/* The settings below hold only before the first ACL call of the process (their rule in
 * docs/reference/acl.md): LLM_SUCCESS before it, else LLM_PARAM_INVALID with the error
 * text. g_lock held for writing. */
static lldd_status before_start_locked(const char *fn, const char *rule)
{
    if (!atomic_load_explicit(&g_started, memory_order_relaxed))
        return LLM_SUCCESS;
    mock_set_error("%s: must be called before the first ACL call of the process (docs/reference/acl.md %s)", fn,
                   rule);
    return LLM_PARAM_INVALID;
}

MOCK_EXPORT lldd_status lldd_mock_set_device_count(uint32_t count)
{
    pthread_rwlock_wrlock(&g_lock);
    lldd_status rc = before_start_locked("lldd_mock_set_device_count", "A-2");
    if (rc == LLM_SUCCESS && (count == 0 || count > MAX_DEVICE_COUNT)) {
        mock_set_error("lldd_mock_set_device_count: count %u is outside 1 .. %d (docs/reference/acl.md A-2)", (unsigned)count,
                       MAX_DEVICE_COUNT);
        rc = LLM_PARAM_INVALID;
    } else if (rc == LLM_SUCCESS) {
        g_device_count = count;
    }
    pthread_rwlock_unlock(&g_lock);
    return rc;
}

MOCK_EXPORT lldd_status lldd_mock_set_device_capacity(uint64_t bytes)
{
    pthread_rwlock_wrlock(&g_lock);
    lldd_status rc = before_start_locked("lldd_mock_set_device_capacity", "A-3");
    if (rc == LLM_SUCCESS && (bytes == 0 || bytes > SIZE_MAX)) {
        mock_set_error("lldd_mock_set_device_capacity: bytes %llu is outside 1 .. SIZE_MAX (docs/reference/acl.md A-3)",
                       (unsigned long long)bytes);
        rc = LLM_PARAM_INVALID;
    } else if (rc == LLM_SUCCESS) {
        g_capacity = bytes;
    }
    pthread_rwlock_unlock(&g_lock);
    return rc;
}

MOCK_EXPORT uint64_t lldd_mock_live_allocations(void)
{
    return live_count();
}

/* ---------------------------------------------------------------- the bench floor */

/* Whether `count` blocks of `block` bytes at base + offsets[k] all lie in the live
 * allocation that holds base. */
static int blocks_inside(const void *base, const uint64_t *offsets, uint64_t count, uint64_t block)
{
    mock_alloc_info a;
    uintptr_t b = (uintptr_t)base;
    if (base == NULL || !mock_acl_lookup(b, &a) || !a.live || b - a.base > a.size)
        return 0;
    uint64_t room = a.size - (b - a.base);
    for (uint64_t k = 0; k < count; k++)
        if (block > room || offsets[k] > room - block)
            return 0;
    return 1;
}

MOCK_EXPORT lldd_status lldd_mock_copy_blocks(void *dst, const void *src, const uint64_t *offsets, uint64_t count,
                                              uint64_t block)
{
    if ((offsets == NULL && count > 0) || block > SIZE_MAX || !blocks_inside(dst, offsets, count, block) ||
        !blocks_inside(src, offsets, count, block)) {
        mock_set_error("lldd_mock_copy_blocks: dst and src must each be a live mock-ACL allocation holding every "
                       "block (offsets[k] + block within it)");
        return LLM_PARAM_INVALID;
    }
    for (uint64_t k = 0; k < count; k++)
        memcpy((char *)dst + offsets[k], (const char *)src + offsets[k], (size_t)block);
    return LLM_SUCCESS;
}
