/* Rank-table links of the extension ABI: lldd_ext_link, lldd_ext_unlink,
 * lldd_ext_query_register_mem_status (docs/reference/semantics.md §10.6, PR-39), and
 * lldd_ext_remap_registered_memory (docs/reference/python-api.md §11.7).
 *
 * Every member of a communicator calls link with the same comm_name and member list.
 * The mock has no HCCL: the members find each other through a rendezvous directory
 * on this host, $TMPDIR/lldd-mock-<uid>/rt-<hash of comm_name> (mode 0700, owned by
 * the user), which works alike for engines of one process and of several:
 *   <cluster id>.member   written (atomically, by rename) when a member joins: its
 *                          rank, pid, the port of a loopback listener it opened for
 *                          this communicator, and a nonce;
 *   <cluster id>.ok       written once the member has linked to every member ranked
 *                          after it; holds the nonce of its member file.
 * A background thread per communicator polls the directory: it links to each later-
 * ranked member over the ordinary link handshake (the HELLO carries the
 * communicator's key, so both sides tag the link and keep it unusable until the
 * communicator is OK), accepts the links of the earlier-ranked members on its own
 * listener, and declares the communicator OK when every member's ok file, with the
 * nonce of that member's current member file, is there. Until then the state is
 * PREPARING; past llm.LinkTotalTime it is FAILED and the links it made are dropped.
 * Files of a process that no longer exists are ignored. unlink stops the thread,
 * drops the communicator's links on this side and removes this member's files.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/random.h>
#include <unistd.h>
#include <netinet/in.h>

#include "core/cache_table.h"
#include "core/engine.h"
#include "ext/ext.h"
#include "base/json.h"
#include "wire/links.h"
#include "base/mock_internal.h"
#include "core/options.h"
#include "wire/transport.h"

enum { MAX_COMMS = 512, MAX_MEMBERS = 4, POLL_MS = 20, NAME_MAX_LEN = 127 };

typedef struct comm {
    struct comm *next;
    engine *e;
    uint64_t id;
    uint64_t key;                        /* tags the communicator's links (both sides) */
    char name[NAME_MAX_LEN + 1];
    size_t members, self;
    uint64_t cluster[MAX_MEMBERS];
    uint32_t rank[MAX_MEMBERS];
    atomic_int state;                    /* LLDD_REGISTER_MEM_* */
    atomic_int stop;
    pthread_t tid;
    int listen_fd;
    uint16_t port;
    uint64_t nonce;
    int wrote_ok;
    char dir[448];
} comm;

/* ---------------------------------------------------------------------------------------------
 * rendezvous files
 * ------------------------------------------------------------------------------------------ */

static uint64_t fnv1a(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 0x100000001b3ull;
    }
    return h;
}

/* A directory of ours: created 0700 if absent; refused if it is a link, not a
 * directory or someone else's. */
static int own_dir(const char *path)
{
    if (mkdir(path, 0700) != 0 && errno != EEXIST)
        return -1;
    struct stat st;
    if (lstat(path, &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid())
        return -1;
    return 0;
}

static int comm_dir(comm *c)
{
    const char *tmp = getenv("TMPDIR");
    if (tmp == NULL || tmp[0] != '/')
        tmp = "/tmp";
    char base[400];
    int n = snprintf(base, sizeof base, "%s/lldd-mock-%u", tmp, (unsigned)geteuid());
    if (n < 0 || (size_t)n >= sizeof base || own_dir(base) != 0)
        return -1;
    n = snprintf(c->dir, sizeof c->dir, "%s/rt-%016" PRIx64, base, fnv1a(c->name));
    if (n < 0 || (size_t)n >= sizeof c->dir || own_dir(c->dir) != 0)
        return -1;
    return 0;
}

static void file_path(const comm *c, uint64_t cluster, const char *ext, char *out, size_t len)
{
    snprintf(out, len, "%s/%" PRIu64 ".%s", c->dir, cluster, ext);
}

/* Writes a file atomically (temporary file, then rename). */
static int write_file(const comm *c, uint64_t cluster, const char *ext, const char *text)
{
    char path[512], tmp[576];
    file_path(c, cluster, ext, path, sizeof path);
    snprintf(tmp, sizeof tmp, "%s.%d.%" PRIx64 ".tmp", path, (int)getpid(), c->nonce);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
        return -1;
    size_t len = strlen(text);
    ssize_t w = write(fd, text, len);
    int ok = w == (ssize_t)len && close(fd) == 0;
    if (!ok || rename(tmp, path) != 0) {
        unlink(tmp);
        return -1;
    }
    return 0;
}

static int read_file(const comm *c, uint64_t cluster, const char *ext, char *buf, size_t len)
{
    char path[512];
    file_path(c, cluster, ext, path, sizeof path);
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, len - 1);
    close(fd);
    if (n <= 0)
        return -1;
    buf[n] = '\0';
    return 0;
}

/* Removes this member's files if they are still ours (same nonce). */
static void remove_own_files(const comm *c)
{
    char buf[512], path[512];
    uint64_t nonce;
    if (read_file(c, c->cluster[c->self], "ok", buf, sizeof buf) == 0 && sscanf(buf, "%" SCNx64, &nonce) == 1 &&
        nonce == c->nonce) {
        file_path(c, c->cluster[c->self], "ok", path, sizeof path);
        unlink(path);
    }
    unsigned long long cl, pid, port, n;
    unsigned rk;
    if (read_file(c, c->cluster[c->self], "member", buf, sizeof buf) == 0 &&
        sscanf(buf, "%llu %u %llu %llu %llx", &cl, &rk, &pid, &port, &n) == 5 && n == c->nonce) {
        file_path(c, c->cluster[c->self], "member", path, sizeof path);
        unlink(path);
    }
    rmdir(c->dir); /* only when no member is left: the directory is empty then */
}

typedef struct member_info {
    int present;
    uint16_t port;
    uint64_t nonce;
} member_info;

/* The current member file of member i, if it names a live process of this
 * communicator. */
static member_info read_member(const comm *c, size_t i)
{
    member_info m = {0, 0, 0};
    char buf[512], name[NAME_MAX_LEN + 2];
    unsigned long long cl, pid, port, nonce;
    unsigned rk;
    if (read_file(c, c->cluster[i], "member", buf, sizeof buf) != 0)
        return m;
    char *nl = strchr(buf, '\n');
    if (nl == NULL || sscanf(buf, "%llu %u %llu %llu %llx", &cl, &rk, &pid, &port, &nonce) != 5)
        return m;
    snprintf(name, sizeof name, "%s", nl + 1);
    name[strcspn(name, "\n")] = '\0';
    if (cl != c->cluster[i] || rk != c->rank[i] || strcmp(name, c->name) != 0 || port == 0 || port > 65535)
        return m;
    if (pid > INT_MAX || (kill((pid_t)pid, 0) != 0 && errno == ESRCH))
        return m;                         /* left behind by a process that is gone */
    m.present = 1;
    m.port = (uint16_t)port;
    m.nonce = nonce;
    return m;
}

static int member_ok(const comm *c, size_t i, uint64_t nonce)
{
    char buf[64];
    uint64_t n;
    return read_file(c, c->cluster[i], "ok", buf, sizeof buf) == 0 && sscanf(buf, "%" SCNx64, &n) == 1 &&
           n == nonce;
}

/* ---------------------------------------------------------------------------------------------
 * the communicator's thread
 * ------------------------------------------------------------------------------------------ */

/* Members ranked after this one, by (rank, cluster id): this member links to them. */
static int ranked_after(const comm *c, size_t j)
{
    size_t s = c->self;
    return c->rank[j] > c->rank[s] || (c->rank[j] == c->rank[s] && c->cluster[j] > c->cluster[s]);
}

static void accept_pending(comm *c)
{
    engine *e = c->e;
    for (;;) {
        int fd = accept4(c->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0)
            return;
        engine_adopt_conn(e, fd);
    }
}

/* A ready link of the communicator (ctx) that is still in the table. mu held. */
static mlink *comm_link_locked(engine *e, const void *ctx)
{
    const comm *c = ctx;
    mlink *l = e->links;
    while (l != NULL && !(l->comm_key == c->key && l->ready && !l->removed))
        l = l->next;
    return l;
}

/* Drops this side of every link of the communicator. */
static void drop_comm_links(comm *c)
{
    links_drop_each(c->e, comm_link_locked, c);
}

static void *comm_main(void *arg)
{
    comm *c = arg;
    engine *e = c->e;
    int64_t deadline = tp_deadline(e->link_total_ms);
    int linked[MAX_MEMBERS] = {0};
    char msg[256];
    while (!atomic_load(&c->stop)) {
        struct pollfd p = {c->listen_fd, POLLIN, 0};
        if (poll(&p, 1, POLL_MS) > 0)
            accept_pending(c);
        engine_reap_conns(e, 0);
        member_info m[MAX_MEMBERS];
        int all_ok = 1, outgoing_done = 1;
        for (size_t i = 0; i < c->members; i++) {
            if (i == c->self)
                continue;
            m[i] = read_member(c, i);
            if (ranked_after(c, i) && !linked[i]) {
                outgoing_done = 0;
                if (m[i].present) {
                    int64_t left = deadline - tp_now_ms();
                    int32_t t = left > 1000 ? 1000 : left < 1 ? 1 : (int32_t)left;
                    linked[i] = link_comm_member(e, c->cluster[i], m[i].port, c->key, t, msg, sizeof msg) ==
                                LLM_SUCCESS;
                    outgoing_done = linked[i];
                }
            }
            all_ok = all_ok && m[i].present && member_ok(c, i, m[i].nonce);
        }
        if (outgoing_done && !c->wrote_ok) {
            char text[32];
            snprintf(text, sizeof text, "%" PRIx64 "\n", c->nonce);
            c->wrote_ok = write_file(c, c->cluster[c->self], "ok", text) == 0;
        }
        if (outgoing_done && c->wrote_ok && all_ok) {
            pthread_mutex_lock(&e->mu);
            for (mlink *l = e->links; l != NULL; l = l->next)
                if (l->comm_key == c->key)
                    atomic_store(&l->comm_pending, 0);
            pthread_mutex_unlock(&e->mu);
            atomic_store(&c->state, LLDD_REGISTER_MEM_OK);
            break;
        }
        if (tp_now_ms() >= deadline) {
            drop_comm_links(c);
            atomic_store(&c->state, LLDD_REGISTER_MEM_FAILED);
            break;
        }
    }
    tp_close(&c->listen_fd);
    return NULL;
}

/* ---------------------------------------------------------------------------------------------
 * the communicator table
 * ------------------------------------------------------------------------------------------ */

static size_t comm_count(engine *e)
{
    pthread_mutex_lock(&e->mu);
    size_t n = 0;
    for (comm *c = e->comms; c != NULL; c = c->next)
        n++;
    pthread_mutex_unlock(&e->mu);
    return n;
}

static void comm_stop(comm *c)
{
    atomic_store(&c->stop, 1);
    pthread_join(c->tid, NULL);
    tp_close(&c->listen_fd);
    drop_comm_links(c);
    remove_own_files(c);
    free(c);
}

static void comms_teardown(engine *e)
{
    for (;;) {
        pthread_mutex_lock(&e->mu);
        comm *c = e->comms;
        if (c != NULL)
            e->comms = c->next;
        pthread_mutex_unlock(&e->mu);
        if (c == NULL)
            return;
        comm_stop(c);
    }
}

/* What the core calls through e->comm_hooks (engine.h): it does not call up into this layer. */
static const comm_hooks k_comm_hooks = {.teardown = comms_teardown, .count = comm_count};

static lldd_status comm_create(const char *fn, comm *c)
{
    if (comm_dir(c) != 0) {
        mock_set_error("%s: cannot create the rendezvous directory of communicator \"%s\" under $TMPDIR or /tmp: "
                       "%s (PR-39)", fn, c->name, strerror(errno));
        return LLM_LINK_FAILED;
    }
    member_info old = read_member(c, c->self);
    if (old.present) {
        mock_set_error("%s: cluster %llu is already a live member of a communicator named \"%s\" on this host", fn,
                       (unsigned long long)c->cluster[c->self], c->name);
        return LLM_LINK_FAILED;
    }
    tp_addr any;
    memset(&any, 0, sizeof any);
    any.family = AF_INET;
    snprintf(any.ip, sizeof any.ip, "127.0.0.1");
    int err = tp_listen(&any, &c->listen_fd);
    struct sockaddr_in sa;
    socklen_t sl = sizeof sa;
    if (err != 0 || getsockname(c->listen_fd, (struct sockaddr *)&sa, &sl) != 0) {
        tp_close(&c->listen_fd);
        mock_set_error("%s: cannot open a loopback listener for communicator \"%s\": %s", fn, c->name,
                       strerror(err != 0 ? err : errno));
        return LLM_LINK_FAILED;
    }
    c->port = ntohs(sa.sin_port);
    char text[64 + NAME_MAX_LEN];
    snprintf(text, sizeof text, "%llu %u %d %u %" PRIx64 "\n%s\n", (unsigned long long)c->cluster[c->self],
             (unsigned)c->rank[c->self], (int)getpid(), (unsigned)c->port, c->nonce, c->name);
    {
        /* a stale ok file of an earlier member of this name must not count */
        char path[512];
        file_path(c, c->cluster[c->self], "ok", path, sizeof path);
        unlink(path);
    }
    if (write_file(c, c->cluster[c->self], "member", text) != 0) {
        tp_close(&c->listen_fd);
        mock_set_error("%s: cannot write the member file of communicator \"%s\" in %s: %s", fn, c->name, c->dir,
                       strerror(errno));
        return LLM_LINK_FAILED;
    }
    atomic_init(&c->state, LLDD_REGISTER_MEM_PREPARING);
    if (pthread_create(&c->tid, NULL, comm_main, c) != 0) {
        tp_close(&c->listen_fd);
        remove_own_files(c);
        mock_set_error("%s: cannot start a thread", fn);
        return LLM_LINK_FAILED;
    }
    return LLM_SUCCESS;
}

/* The members of a rank-table communicator: 2 to MAX_MEMBERS, ranks ascending, no
 * cluster id twice; *self is this engine's position (num_members if absent). */
static lldd_status link_members_checks(const engine *e, const char *fn, const uint64_t *cluster_ids,
                                       const uint32_t *ranks, size_t num_members, size_t *self)
{
    if (num_members < 2 || num_members > MAX_MEMBERS) {
        mock_set_error("%s: cluster_rank_info has %zu members; a communicator has 2 to %d", fn, num_members,
                       MAX_MEMBERS);
        return LLM_PARAM_INVALID;
    }
    *self = num_members;
    for (size_t i = 0; i < num_members; i++) {
        if (i > 0 && ranks[i] < ranks[i - 1]) {
            mock_set_error("%s: ranks must be in ascending order; rank %u of member %zu follows rank %u", fn,
                           (unsigned)ranks[i], i, (unsigned)ranks[i - 1]);
            return LLM_PARAM_INVALID;
        }
        for (size_t j = 0; j < i; j++) {
            if (cluster_ids[j] == cluster_ids[i]) {
                mock_set_error("%s: cluster id %llu appears twice in cluster_rank_info", fn,
                               (unsigned long long)cluster_ids[i]);
                return LLM_PARAM_INVALID;
            }
        }
        if (cluster_ids[i] == e->cluster_id)
            *self = i;
    }
    return LLM_SUCCESS;
}

lldd_status ext_comm_link(engine *e, const char *fn, const char *comm_name, const uint64_t *cluster_ids,
                          const uint32_t *ranks, size_t num_members, const char *rank_table, uint64_t *comm_id)
{
    lldd_status st = LLM_SUCCESS;
    comm *c = NULL;
    size_t name_len = strnlen(comm_name, NAME_MAX_LEN + 1);
    if (e->gen != GEN_V2) {
        mock_set_error("%s: link needs CacheManager mode (v2)", fn);
        st = LLM_PARAM_INVALID;
        goto out;
    }
    if (name_len == 0 || name_len > NAME_MAX_LEN) {
        mock_set_error("%s: comm_name must have 1 to %d characters", fn, NAME_MAX_LEN);
        st = LLM_PARAM_INVALID;
        goto out;
    }
    size_t self = num_members;
    if ((st = link_members_checks(e, fn, cluster_ids, ranks, num_members, &self)) != LLM_SUCCESS)
        goto out;
    json_value doc;
    char why[96];
    if (json_parse(rank_table, strlen(rank_table), &doc, why, sizeof why) != 0) {
        mock_set_error("%s: rank_table is not valid JSON (%s); the mock reads it as JSON only (PR-39)", fn, why);
        st = LLM_PARAM_INVALID;
        goto out;
    }
    json_free(&doc);
    if (self == num_members) {
        mock_set_error("%s: this engine's cluster id %llu is not a key of cluster_rank_info", fn,
                       (unsigned long long)e->cluster_id);
        st = LLM_PARAM_INVALID;
        goto out;
    }
    if (comm_count(e) >= MAX_COMMS) {
        mock_set_error("%s: %d communicators exist already on this engine", fn, MAX_COMMS);
        st = LLM_PARAM_INVALID;
        goto out;
    }
    if (e->hixl) {
        mock_set_error("%s: rank-table links are not available with llm.TransferBackend \"hixl\"", fn);
        st = LLM_FEATURE_NOT_ENABLED;
        goto out;
    }
    c = calloc(1, sizeof *c);
    if (c == NULL) {
        mock_set_error("%s: out of host memory", fn);
        st = LLM_FAILED;
        goto out;
    }
    c->e = e;
    c->listen_fd = -1;
    memcpy(c->name, comm_name, name_len);
    c->members = num_members;
    c->self = self;
    memcpy(c->cluster, cluster_ids, num_members * sizeof *cluster_ids);
    memcpy(c->rank, ranks, num_members * sizeof *ranks);
    if (getrandom(&c->nonce, sizeof c->nonce, GRND_NONBLOCK) != (ssize_t)sizeof c->nonce)
        c->nonce = (uint64_t)tp_now_ms() * 0x9E3779B97F4A7C15ull ^ (uint64_t)getpid();
    c->nonce |= 1;
    c->key = fnv1a(c->name) | 1;
    if ((st = comm_create(fn, c)) != LLM_SUCCESS) {
        free(c);
        c = NULL;
        goto out;
    }
    pthread_mutex_lock(&e->mu);
    c->id = e->next_comm_id++;
    c->next = e->comms;
    e->comms = c;
    e->comm_hooks = &k_comm_hooks;
    e->rank_linked = 1;
    pthread_mutex_unlock(&e->mu);
    *comm_id = c->id;
out:
    return st;
}

static lldd_status comm_call_checks(engine *e, const char *fn)
{
    if (e->gen != GEN_V2) {
        mock_set_error("%s: rank-table links need CacheManager mode (v2)", fn);
        return LLM_PARAM_INVALID;
    }
    if (e->hixl) {
        mock_set_error("%s: rank-table links are not available with llm.TransferBackend \"hixl\"", fn);
        return LLM_FEATURE_NOT_ENABLED;
    }
    return LLM_SUCCESS;
}

lldd_status ext_comm_unlink(engine *e, const char *fn, uint64_t comm_id)
{
    lldd_status st = LLM_SUCCESS;
    if ((st = comm_call_checks(e, fn)) == LLM_SUCCESS) {
        comm *c = NULL;
        pthread_mutex_lock(&e->mu);
        for (comm **pp = &e->comms; *pp != NULL; pp = &(*pp)->next) {
            if ((*pp)->id == comm_id) {
                c = *pp;
                *pp = c->next;
                break;
            }
        }
        pthread_mutex_unlock(&e->mu);
        if (c == NULL) {
            mock_set_error("%s: comm_id %llu is not a communicator of this engine", fn, (unsigned long long)comm_id);
            st = LLM_NOT_YET_LINK;
        } else {
            comm_stop(c);
        }
    }
    return st;
}

lldd_status ext_comm_query_mem_status(engine *e, const char *fn, uint64_t comm_id, uint32_t *status)
{
    lldd_status st = LLM_SUCCESS;
    if ((st = comm_call_checks(e, fn)) == LLM_SUCCESS) {
        st = LLM_NOT_YET_LINK;
        pthread_mutex_lock(&e->mu);
        for (comm *c = e->comms; c != NULL; c = c->next) {
            if (c->id == comm_id) {
                *status = (uint32_t)atomic_load(&c->state);
                st = LLM_SUCCESS;
                break;
            }
        }
        pthread_mutex_unlock(&e->mu);
        if (st != LLM_SUCCESS)
            mock_set_error("%s: comm_id %llu is not a communicator of this engine", fn, (unsigned long long)comm_id);
    }
    return st;
}

/* ---------------------------------------------------------------------------------------------
 * remap_registered_memory
 * ------------------------------------------------------------------------------------------ */

lldd_status ext_comm_remap_memory(engine *e, const char *fn, const uint64_t *addrs, const uint64_t *sizes, size_t num)
{
    lldd_status st = LLM_SUCCESS;
    if (e->gen != GEN_V2) {
        mock_set_error("%s: remap_registered_memory does not exist in KvCacheManager (v1) mode", fn);
        st = LLM_FEATURE_NOT_ENABLED;
        goto out;
    }
    if (num == 0) {
        mock_set_error("%s: mem_infos is empty", fn);
        st = LLM_PARAM_INVALID;
        goto out;
    }
    for (size_t i = 0; i < num; i++) {
        if (addrs[i] == 0 || sizes[i] == 0) {
            mock_set_error("%s: mem_infos[%zu]: %s is 0", fn, i, addrs[i] == 0 ? "addr" : "size");
            st = LLM_PARAM_INVALID;
            goto out;
        }
    }
    if (engine_link_count(e) == 0) {
        mock_set_error("%s: this engine has no link", fn);
        st = LLM_NOT_YET_LINK;
        goto out;
    }
    /* Mock memory never moves, so a remap has nothing to do; it still must name
     * memory that was registered. */
    pthread_mutex_lock(&e->mu);
    for (size_t i = 0; i < num && st == LLM_SUCCESS; i++) {
        int found = 0;
        for (size_t k = 0; k < e->cache_count && !found; k++) {
            const mcache *c = e->caches[k];
            if (c->w.owned)
                continue;
            for (uint32_t t = 0; t < c->w.num_tensors && !found; t++)
                found = addrs[i] >= c->addrs[t] && addrs[i] - c->addrs[t] < c->w.tensor_size &&
                        sizes[i] <= c->w.tensor_size - (addrs[i] - c->addrs[t]);
        }
        if (!found) {
            mock_set_error("%s: mem_infos[%zu] [0x%llx, +%llu) is not inside memory registered with this engine; "
                           "the remap failed", fn, i, (unsigned long long)addrs[i], (unsigned long long)sizes[i]);
            st = LLM_FAILED;
        }
    }
    pthread_mutex_unlock(&e->mu);
out:
    return st;
}
