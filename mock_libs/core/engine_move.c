/* The data plane of a transfer: a plan (tensor pairs x regions,
 * docs/reference/semantics.md §8) walked region by region without copying the block
 * lists, over the first path the link allows:
 *   same process      memmove between the two engines' memory;
 *   shared memory     memcpy between mappings: both sides in library memory, the peer's
 *                     arena chunks mapped here (engine_shared.c);
 *   another process   process_vm_readv/writev, up to IOV_MAX regions per call;
 *   neither allowed   READ/WRITE requests on the link's socket (engine_serve.c);
 * then the link model's pacing. The last stage of every transfer, native or extension
 * (engine_xfer.c describes the pipeline); everything is pinned and checked before it.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>

#include "core/blocks.h"
#include "core/engine.h"
#include "wire/links.h"
#include "base/mock_internal.h"
#include "wire/peer_id.h"
#include "wire/shared_map.h"
#include "core/transfers.h"
#include "wire/transport.h"

enum { VM_BATCH = 1024 };

/* ---------------------------------------------------------------------------------------------
 * plans and regions (docs/reference/semantics.md §8.2, §8.3, §8.5, §8.6)
 * ------------------------------------------------------------------------------------------ */

typedef struct region {
    uint32_t st, dt;
    uint64_t soff, doff, len;
} region;

typedef struct region_iter {
    const plan *p;
    uint32_t i;
    size_t k;                  /* C2B: the chunk */
    run_iter runs;
    uint64_t s0, d0, rlen;
    int have_run;
} region_iter;

static void region_iter_init(region_iter *it, const plan *p)
{
    memset(it, 0, sizeof *it);
    it->p = p;
    if (p->form == PLAN_B2B)
        run_iter_init(&it->runs, p->sblk, p->dblk, p->nblk);
}

static uint32_t plan_src(const plan *p, uint32_t i)
{
    return p->smap != NULL ? (uint32_t)p->smap[i] : p->s_base + i;
}

static uint32_t plan_dst(const plan *p, uint32_t i)
{
    return p->dmap != NULL ? (uint32_t)p->dmap[i] : p->d_base + i;
}

/* B2B: runs outside, tensors inside, so that each run is found once; C2B: tensors
 * outside, chunks inside. */
static int region_next(region_iter *it, region *r)
{
    const plan *p = it->p;
    if (p->form == PLAN_C2C) {
        if (it->i >= p->pairs)
            return 0;
        r->st = plan_src(p, it->i);
        r->dt = plan_dst(p, it->i);
        r->soff = p->soff;
        r->doff = p->doff;
        r->len = p->len;
        it->i++;
        return 1;
    }
    if (p->form == PLAN_C2B) {
        if (it->k >= p->nblk) {
            it->k = 0;
            it->i++;
        }
        if (it->i >= p->pairs || p->nblk == 0)
            return 0;
        uint64_t start = (uint64_t)it->k * p->block;
        r->st = plan_src(p, it->i);
        r->dt = plan_dst(p, it->i);
        r->soff = p->soff + start;
        r->doff = p->doff + p->dblk[it->k] * p->block;
        r->len = p->len - start < p->block ? p->len - start : p->block;
        it->k++;
        return 1;
    }
    if (!it->have_run || it->i >= p->pairs) {
        if (!run_next(&it->runs, &it->s0, &it->d0, &it->rlen))
            return 0;
        it->have_run = 1;
        it->i = 0;
    }
    r->st = plan_src(p, it->i);
    r->dt = plan_dst(p, it->i);
    r->soff = p->soff + it->s0 * p->block;
    r->doff = p->doff + it->d0 * p->block;
    r->len = it->rlen * p->block;
    it->i++;
    return 1;
}

static void *src_ptr(const plan *p, const region *r)
{
    return (char *)(uintptr_t)p->src_addrs[r->st] + r->soff;
}

static void *dst_ptr(const plan *p, const region *r)
{
    return (char *)(uintptr_t)p->dst_addrs[r->dt] + r->doff;
}

/* Large transfers are mostly many mid-sized regions (one per block run and tensor),
 * each below the size at which memcpy itself switches to non-temporal stores; the
 * destination is not read back soon, so streaming stores save the read-for-ownership
 * traffic (about a third more bandwidth for scattered 16 KiB blocks). Small
 * transfers keep the destination in cache. */
enum { STREAM_MIN_TOTAL = 4 << 20, STREAM_MIN_REGION = 4096 };

#if defined(__SSE2__)
#include <emmintrin.h>

static void stream_copy(char *d, const char *s, size_t n)
{
    size_t head = (16 - ((uintptr_t)d & 15)) & 15;
    if (head > n)
        head = n;
    memcpy(d, s, head);
    d += head;
    s += head;
    n -= head;
    size_t i = 0;
    for (; i + 64 <= n; i += 64) {
        __m128i a = _mm_loadu_si128((const __m128i *)(const void *)(s + i));
        __m128i b = _mm_loadu_si128((const __m128i *)(const void *)(s + i + 16));
        __m128i c = _mm_loadu_si128((const __m128i *)(const void *)(s + i + 32));
        __m128i e = _mm_loadu_si128((const __m128i *)(const void *)(s + i + 48));
        _mm_stream_si128((__m128i *)(void *)(d + i), a);
        _mm_stream_si128((__m128i *)(void *)(d + i + 16), b);
        _mm_stream_si128((__m128i *)(void *)(d + i + 32), c);
        _mm_stream_si128((__m128i *)(void *)(d + i + 48), e);
    }
    memcpy(d + i, s + i, n - i);
}
#define HAVE_STREAM_COPY 1
#else
#define HAVE_STREAM_COPY 0
#endif

/* Bytes the plan moves (saturated: only compared with a threshold). */
static uint64_t plan_bytes(const plan *p)
{
    uint64_t per_pair, total;
    if (p->form != PLAN_B2B)
        per_pair = p->len;
    else if (__builtin_mul_overflow((uint64_t)p->nblk, p->block, &per_pair))
        return UINT64_MAX;
    return __builtin_mul_overflow(per_pair, (uint64_t)p->pairs, &total) ? UINT64_MAX : total;
}

/* One region's bytes: streaming stores for a large region of a large transfer (they run
 * forwards: only where the two sides do not overlap), else memmove. */
static void copy_region(char *d, const char *s, size_t n, int stream)
{
#if HAVE_STREAM_COPY
    if (stream && n >= STREAM_MIN_REGION && (d + n <= s || s + n <= d)) {
        stream_copy(d, s, n);
        return;
    }
#else
    (void)stream;
#endif
    memmove(d, s, n);
}

/* After the last region: streaming stores ordered before the transfer reports. */
static void copy_done(int stream)
{
#if HAVE_STREAM_COPY
    if (stream)
        _mm_sfence();
#else
    (void)stream;
#endif
}

static void move_local(const plan *p)
{
    region_iter it;
    region r;
    region_iter_init(&it, p);
    int stream = HAVE_STREAM_COPY && plan_bytes(p) >= STREAM_MIN_TOTAL;
    while (region_next(&it, &r))
        copy_region(dst_ptr(p, &r), src_ptr(p, &r), (size_t)r.len, stream);
    copy_done(stream);
}

/* process_vm_readv (pull) / process_vm_writev (push); 0 or -errno. The peer's pidfd is
 * checked before every call and after the last: a peer that has exited fails the
 * transfer with -ESRCH, so its pid, once reused, is never written to (up to the
 * instant between a check and the call; docs/security.md §2.2). */
static int move_vm(pid_t pid, int pidfd, const plan *p, int pull, struct iovec *liov, struct iovec *riov)
{
    region_iter it;
    region r;
    region_iter_init(&it, p);
    for (;;) {
        size_t n = 0;
        while (n < VM_BATCH && region_next(&it, &r)) {
            void *s = src_ptr(p, &r), *d = dst_ptr(p, &r);
            liov[n].iov_base = pull ? d : s;
            riov[n].iov_base = pull ? s : d;
            liov[n].iov_len = riov[n].iov_len = (size_t)r.len;
            n++;
        }
        if (n == 0)
            return pidfd_alive(pidfd) ? 0 : -ESRCH;
        size_t k = 0;
        while (k < n) {
            if (!pidfd_alive(pidfd))
                return -ESRCH;
            ssize_t got = pull ? process_vm_readv(pid, liov + k, n - k, riov + k, n - k, 0)
                               : process_vm_writev(pid, liov + k, n - k, riov + k, n - k, 0);
            if (got < 0) {
                if (errno == EINTR)
                    continue;
                return -errno;
            }
            if (got == 0)
                return -EFAULT;
            size_t g = (size_t)got;
            while (g > 0) {
                if (g >= liov[k].iov_len) {
                    g -= liov[k].iov_len;
                    k++;
                } else {
                    liov[k].iov_base = (char *)liov[k].iov_base + g;
                    riov[k].iov_base = (char *)riov[k].iov_base + g;
                    liov[k].iov_len -= g;
                    riov[k].iov_len -= g;
                    g = 0;
                }
            }
        }
    }
}

/* Where a region's peer side lies in this process's mappings of the peer's arena
 * (NULL: not mapped), and whether its own side lies in live library memory of this
 * process (`own` caches the last allocation found, so a list of blocks asks once). */
typedef struct own_range {
    uintptr_t lo, hi;
} own_range;

static int own_library_memory(own_range *own, uintptr_t addr, uint64_t len)
{
    if (!(addr >= own->lo && addr < own->hi && len <= own->hi - addr)) {
        mock_alloc_info a;
        if (!mock_acl_lookup(addr, &a) || !a.live || addr - a.base >= a.size || len > a.size - (addr - a.base))
            return 0;
        own->lo = a.base;
        own->hi = a.base + a.size;
    }
    return 1;
}

/* 1 if every region's peer side lies in a mapped chunk of the peer and its own side in
 * live library memory. */
static int shared_covers(mlink *l, const plan *p, int pull)
{
    region_iter it;
    region r;
    own_range own = {0, 0};
    region_iter_init(&it, p);
    while (region_next(&it, &r)) {
        uintptr_t s = (uintptr_t)src_ptr(p, &r), d = (uintptr_t)dst_ptr(p, &r);
        if (link_shared_ptr(l, pull ? s : d, r.len) == NULL || !own_library_memory(&own, pull ? d : s, r.len))
            return 0;
    }
    return 1;
}

/* The shared path (docs/security.md §2.7): both sides in library memory, the peer's
 * mapped here: copies between the mappings. 1 moved, 0 not applicable (nothing moved),
 * -ESRCH the peer process is gone (checked before and after, as for process_vm: its
 * memory outlives it in our mapping, and a dead peer must fail the transfer). */
static int copy_shared(mlink *l, const plan *p, int pull);

static int move_shared(mlink *l, const plan *p, int pull)
{
    if (l->peer_id_channel[0] == '\0')
        return 0;
    pthread_rwlock_rdlock(&l->map_rw);
    int covered = shared_covers(l, p, pull);
    if (!covered) {
        pthread_rwlock_unlock(&l->map_rw);
        if (!link_map_refresh(l))
            return 0;
        pthread_rwlock_rdlock(&l->map_rw);
        covered = shared_covers(l, p, pull);
    }
    int rc = !covered ? 0 : !pidfd_alive(l->peer_pidfd) ? -ESRCH : copy_shared(l, p, pull);
    pthread_rwlock_unlock(&l->map_rw);
    return rc;
}

/* move_shared's copy; map_rw held shared. */
static int copy_shared(mlink *l, const plan *p, int pull)
{
    region_iter it;
    region r;
    region_iter_init(&it, p);
    int stream = HAVE_STREAM_COPY && plan_bytes(p) >= STREAM_MIN_TOTAL;
    while (region_next(&it, &r)) {
        char *s = src_ptr(p, &r), *d = dst_ptr(p, &r);
        if (pull)
            s = link_shared_ptr(l, (uintptr_t)s, r.len);
        else
            d = link_shared_ptr(l, (uintptr_t)d, r.len);
        copy_region(d, s, (size_t)r.len, stream);
    }
    copy_done(stream);
    return pidfd_alive(l->peer_pidfd) ? 1 : -ESRCH;
}

/* The socket path: READ (pull) or WRITE (push) requests of up to WIRE_MAX_REGIONS
 * ranges of the pinned peer cache. */
static lldd_status move_socket(xlink *x, const char *fn, const plan *p, int pull, int64_t peer_cache_id,
                               struct iovec *liov, wire_region *wr)
{
    mlink *l = x->l;
    uint32_t timeout = x->e->sync_timeout_ms;
    region_iter it;
    region r;
    region_iter_init(&it, p);
    for (;;) {
        size_t n = 0;
        uint64_t total = 0;
        while (n < WIRE_MAX_REGIONS && region_next(&it, &r)) {
            memset(&wr[n], 0, sizeof wr[n]);
            wr[n].tensor = pull ? r.st : r.dt;
            wr[n].offset = pull ? r.soff : r.doff;
            wr[n].len = r.len;
            liov[n + 2].iov_base = pull ? dst_ptr(p, &r) : src_ptr(p, &r);
            liov[n + 2].iov_len = (size_t)r.len;
            total += r.len;
            n++;
        }
        if (n == 0)
            return LLM_SUCCESS;
        msg_hdr h;
        msg_init(&h, pull ? MSG_READ : MSG_WRITE);
        h.a = (uint64_t)peer_cache_id;
        h.count = (uint32_t)n;
        h.payload_len = n * sizeof *wr + (pull ? 0 : total);
        liov[0].iov_base = &h;
        liov[0].iov_len = sizeof h;
        liov[1].iov_base = wr;
        liov[1].iov_len = n * sizeof *wr;
        int64_t deadline = tp_deadline(timeout);
        int rc;
        if (pull) {
            struct iovec head[2] = {liov[0], liov[1]};
            rc = tp_sendv(l->req_fd, head, 2, deadline, 0);
            if (rc == TP_OK)
                rc = msg_recv_hdr(l->req_fd, &h, deadline);
            if (rc == TP_OK && (h.type != MSG_READ_REPLY || (h.status == 0 && h.payload_len != total)))
                rc = TP_CLOSED;
            if (rc == TP_OK && h.status == 0)
                rc = tp_recvv(l->req_fd, liov + 2, n, deadline, timeout);
        } else {
            rc = tp_sendv(l->req_fd, liov, n + 2, deadline, timeout);
            if (rc == TP_OK)
                rc = msg_recv_hdr(l->req_fd, &h, tp_deadline(timeout));
            if (rc == TP_OK && h.type != MSG_WRITE_REPLY)
                rc = TP_CLOSED;
        }
        if (rc == TP_TIMEOUT)
            return link_timeout(x, fn, "the transfer did not finish within llm.SyncKvCacheWaitTime = %u ms", timeout);
        if (rc != TP_OK)
            return link_timeout(x, fn, "the peer's side of the link is gone (PR-31)");
        if (h.status != LLM_SUCCESS)
            return link_timeout(x, fn, "the peer refused a data request (status 0x%08X)", (unsigned)h.status);
    }
}

static lldd_status move_now(xlink *x, const char *fn, const plan *p, int pull, int64_t peer_cache_id)
{
    mlink *l = x->l;
    if (l->same_process) {
        move_local(p);
        atomic_store(&l->last_path, LLDD_MOCK_PATH_SAME_PROCESS);
        return LLM_SUCCESS;
    }
    if (atomic_load(&l->vm_ok)) {
        int rc = move_shared(l, p, pull);
        if (rc == -ESRCH)
            return link_timeout(x, fn, "the peer process is gone (PR-31)");
        if (rc == 1) {
            atomic_store(&l->last_path, LLDD_MOCK_PATH_SHARED);
            return LLM_SUCCESS;
        }
    }
    struct iovec *liov = malloc((WIRE_MAX_REGIONS + 2) * sizeof *liov);
    struct iovec *riov = malloc(VM_BATCH * sizeof *riov);
    wire_region *wr = malloc(WIRE_MAX_REGIONS * sizeof *wr);
    lldd_status st = LLM_SUCCESS;
    if (liov == NULL || riov == NULL || wr == NULL) {
        mock_set_error("%s: out of host memory", fn);
        st = LLM_FAILED;
        goto out;
    }
    if (atomic_load(&l->vm_ok)) {
        int rc = move_vm(l->peer_pid, l->peer_pidfd, p, pull, liov, riov);
        if (rc == 0) {
            atomic_store(&l->last_path, LLDD_MOCK_PATH_PROCESS_VM);
            goto out;
        }
        if (rc == -ESRCH) {
            st = link_timeout(x, fn, "the peer process is gone (PR-31)");
            goto out;
        }
        if (rc != -EPERM && rc != -ENOSYS && rc != -EACCES) {
            mock_set_error("%s: %s failed: %s (a registered address is not mapped in its process)", fn,
                           pull ? "process_vm_readv" : "process_vm_writev", strerror(-rc));
            st = LLM_FAILED;
            goto out;
        }
        atomic_store(&l->vm_ok, 0); /* not allowed after all: move the bytes over the socket */
    }
    link_sock(x);
    st = move_socket(x, fn, p, pull, peer_cache_id, liov, wr);
    if (st == LLM_SUCCESS)
        atomic_store(&l->last_path, LLDD_MOCK_PATH_SOCKET);
out:
    free(liov);
    free(riov);
    free(wr);
    return st;
}

/* ---------------------------------------------------------------------------------------------
 * the link model (include/lldd/mock.h: lldd_mock_set_link_pace)
 * ------------------------------------------------------------------------------------------ */

static int64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* Sleeps until `until` (now_us time), in steps short enough that finalize is not kept
 * waiting: a finalize sets e->stopping and the sleep ends. */
static void sleep_until_us(engine *e, int64_t until)
{
    for (;;) {
        int64_t left = until - now_us();
        if (left <= 0 || atomic_load(&e->stopping))
            return;
        if (left > 5000)
            left = 5000;
        struct timespec ts = {0, (long)left * 1000L};
        nanosleep(&ts, NULL);
    }
}

/* The microseconds a transfer of `bytes` over the link to `cluster` takes in the link
 * model (0: the link is not paced). Saturates rather than overflows. */
static uint64_t paced_us(engine *e, uint64_t cluster, uint64_t bytes)
{
    pthread_mutex_lock(&e->mu);
    uint64_t bw = e->pace_bw, lat = e->pace_lat_us;
    for (uint32_t i = 0; i < e->pace_count; i++) {
        if (e->paces[i].cluster == cluster) {
            bw = e->paces[i].bw;
            lat = e->paces[i].lat_us;
        }
    }
    pthread_mutex_unlock(&e->mu);
    uint64_t us = lat;
    if (bw > 0) {
        unsigned __int128 wire = ((unsigned __int128)bytes * 1000000u + bw - 1) / bw;
        us = wire > UINT64_MAX - lat ? UINT64_MAX : lat + (uint64_t)wire;
    }
    return us;
}

/* Moves the plan's bytes, then waits out the rest of the link model's time for them. */
lldd_status move_bytes(xlink *x, const char *fn, const plan *p, int pull, int64_t peer_cache_id)
{
    if (p->pairs == 0)
        return LLM_SUCCESS;
    int64_t start = now_us();
    uint64_t bytes = plan_bytes(p);
    uint64_t need = paced_us(x->e, x->l->peer_cluster, bytes);
    uint64_t wait_us = (uint64_t)x->e->sync_timeout_ms * 1000u;
    if (need > wait_us) {
        /* the device would still be moving when the wait ends: a timeout, as for a slow peer */
        sleep_until_us(x->e, start + (int64_t)wait_us);
        return link_timeout(x, fn, "the link model needs %llu us for %llu bytes, more than "
                            "llm.SyncKvCacheWaitTime = %u ms", (unsigned long long)need,
                            (unsigned long long)bytes, (unsigned)x->e->sync_timeout_ms);
    }
    lldd_status st = move_now(x, fn, p, pull, peer_cache_id);
    if (st != LLM_SUCCESS)
        return st;
    mock_bytes_moved_add(bytes);
    if (need > 0)
        sleep_until_us(x->e, start + (int64_t)need);
    return LLM_SUCCESS;
}
