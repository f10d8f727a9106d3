/* Engine life cycle of the mock LLM-DataDist: create, Initialize, SetRole,
 * Finalize, destroy, the listener, the options of Initialize, and the mock controls past
 * their entry. Above every other module of the engine (docs/design.md, "The mock's
 * modules"): it makes what they serve and calls their teardowns; the services they all
 * use (registry, threads, entering a call, waits) are engine_services.c, below them.
 *
 * An engine is UNINIT until Initialize succeeds, then READY; Finalize first moves
 * it to FINALIZING, so that calls starting from then on fail with LLM_FAILED, waits
 * for the calls already running (PR-37), and then tears everything down in the
 * reverse order of Initialize: listener and handshakes, links, caches and pools,
 * the device reference. A fresh Initialize starts again from cache id 1.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/cache_table.h"
#include "core/engine.h"
#include "base/json.h"
#include "wire/links.h"
#include "base/mock_internal.h"
#include "core/options.h"
#include "wire/peer_id.h"
#include "wire/pub.h"
#include "wire/transport.h"

/* ---------------------------------------------------------------------------------------------
 * listener
 * ------------------------------------------------------------------------------------------ */

/* Connection threads still running (a finished one waits for the next reap). mu held. */
static size_t conns_running_locked(engine *e)
{
    size_t n = 0;
    for (eng_thread *t = e->conns; t != NULL; t = t->next)
        n += !atomic_load(&t->done);
    return n;
}

void engine_adopt_conn(engine *e, int fd)
{
    tp_tune(fd);
    eng_thread *t = calloc(1, sizeof *t);
    if (t == NULL) {
        close(fd);
        return;
    }
    t->fd = fd;
    pthread_mutex_lock(&e->mu);
    if (conns_running_locked(e) >= BOUND_HANDSHAKES) {
        /* BOUND_HANDSHAKES: a flood of connections that never finish a handshake
         * costs no more than that many threads */
        pthread_mutex_unlock(&e->mu);
        close(fd);
        free(t);
        return;
    }
    t->next = e->conns;
    e->conns = t;
    if (thread_start(e, t, conn_thread_main, t) != 0) {
        e->conns = t->next;
        pthread_mutex_unlock(&e->mu);
        close(fd);
        free(t);
        return;
    }
    pthread_mutex_unlock(&e->mu);
}

static void *listener_main(void *arg)
{
    listener_gate_run(arg); /* wire/engine_gate.c: accepts, reads first messages, starts threads */
    return NULL;
}

/* Starts the listener thread on an already bound socket. listen_mu and the fork lock held (registry_fork_lock). */
static int listener_run(engine *e, int fd, const tp_addr *addr)
{
    if (pipe2(e->wake_pipe, O_CLOEXEC | O_NONBLOCK) != 0)
        return errno;
    e->listen_fd = fd;
    e->listen_addr = *addr;
    /* without an identity channel, links to this engine move bytes over sockets only */
    if (idch_listen(e->id_name, &e->id_fd) != 0) {
        e->id_fd = -1;
        e->id_name[0] = '\0';
    }
    int err = pthread_create(&e->listen_tid, NULL, listener_main, e);
    if (err != 0) {
        close(e->wake_pipe[0]);
        close(e->wake_pipe[1]);
        tp_close(&e->id_fd);
        e->id_name[0] = '\0';
        e->listen_fd = -1;
        return err;
    }
    e->listening = 1;
    return 0;
}

/* listen_mu and the fork lock held (registry_fork_lock). */
static void listener_stop(engine *e)
{
    if (!e->listening)
        return;
    ssize_t w;
    do {
        w = write(e->wake_pipe[1], "x", 1);
    } while (w < 0 && errno == EINTR);
    pthread_join(e->listen_tid, NULL);
    close(e->wake_pipe[0]);
    close(e->wake_pipe[1]);
    tp_close(&e->listen_fd);
    tp_close(&e->id_fd); /* id_name stays: connection threads may still read it; connecting fails */
    e->listening = 0;
}

/* Binds and starts a listener. listen_mu held. */
static lldd_status listener_start(engine *e, const tp_addr *addr, const char *fn)
{
    int fd;
    registry_fork_lock();
    int err = tp_listen(addr, &fd);
    if (err == 0) {
        err = listener_run(e, fd, addr);
        if (err != 0)
            close(fd);
    }
    registry_fork_unlock();
    if (err != 0) {
        mock_set_error("%s: cannot listen on %s%s%s:%u (llm.ListenIpInfo): %s", fn,
                       addr->family == AF_INET6 ? "[" : "", addr->ip, addr->family == AF_INET6 ? "]" : "",
                       (unsigned)addr->port, strerror(err));
        return LLM_FAILED;
    }
    return LLM_SUCCESS;
}

/* ---------------------------------------------------------------------------------------------
 * options
 * ------------------------------------------------------------------------------------------ */

/* The value of the last option named key (a repeated key keeps its last value);
 * NULL when absent. A NULL key or value counts as "" (AscendString(nullptr)). */
const char *engine_opt_get(const lldd_option *options, size_t count, const char *key)
{
    const char *value = NULL;
    for (size_t i = 0; i < count; i++) {
        const char *k = options[i].key ? options[i].key : "";
        if (strcmp(k, key) == 0)
            value = options[i].value ? options[i].value : "";
    }
    return value;
}

/* Parses a decimal string of digits only into *out (<= max). */
int engine_parse_digits(const char *s, uint64_t max, uint64_t *out)
{
    if (s == NULL || *s == '\0')
        return -1;
    uint64_t v = 0;
    for (const char *c = s; *c; c++) {
        if (*c < '0' || *c > '9')
            return -1;
        if (__builtin_mul_overflow(v, 10u, &v) || __builtin_add_overflow(v, (uint64_t)(*c - '0'), &v))
            return -1;
        if (v > max)
            return -1;
    }
    *out = v;
    return 0;
}

lldd_status engine_parse_device_list(const char *fn, const char *key, const char *dev, size_t *items,
                                     int32_t *first)
{
    const char *p = dev;
    *items = 0;
    for (;;) {
        const char *semi = strchr(p, ';');
        size_t len = semi ? (size_t)(semi - p) : strlen(p);
        char item[32];
        uint64_t v;
        if (len == 0 || len >= sizeof item) {
            mock_set_error("%s: option %s \"%s\": item %zu is not an int32 >= 0", fn, key, dev, *items);
            return LLM_PARAM_INVALID;
        }
        memcpy(item, p, len);
        item[len] = '\0';
        if (engine_parse_digits(item, INT32_MAX, &v) != 0) {
            mock_set_error("%s: option %s \"%s\": \"%s\" is not an int32 >= 0", fn, key, dev, item);
            return LLM_PARAM_INVALID;
        }
        if (*items == 0)
            *first = (int32_t)v;
        (*items)++;
        if (semi == NULL)
            return LLM_SUCCESS;
        p = semi + 1;
    }
}

lldd_status engine_parse_sync_wait(const char *fn, const lldd_option *o, size_t n, uint32_t *out)
{
    const char *wait = engine_opt_get(o, n, "llm.SyncKvCacheWaitTime");
    uint64_t v;
    *out = 1000;
    if (wait == NULL)
        return LLM_SUCCESS;
    if (engine_parse_digits(wait, UINT64_MAX, &v) != 0) {
        mock_set_error("%s: option llm.SyncKvCacheWaitTime \"%s\" is not a decimal number of milliseconds", fn,
                       wait);
        return LLM_PARAM_INVALID;
    }
    if (v > INT32_MAX) {
        /* guard: the vendor converts with atoi, whose result is undefined past int32 */
        mock_set_error("%s: option llm.SyncKvCacheWaitTime %s is above 2^31 - 1 ms (PR-26)", fn, wait);
        return LLM_PARAM_INVALID;
    }
    if (v == 0 && mock_lint(26, "%s: option llm.SyncKvCacheWaitTime is 0 ms: every transfer wait ends at once "
                                "(PR-26)", fn))
        return LLM_PARAM_INVALID;
    *out = (uint32_t)v;
    return LLM_SUCCESS;
}

lldd_status engine_parse_link_security(const char *fn, const lldd_option *o, size_t n, engine_cfg *c)
{
    const char *secret = engine_opt_get(o, n, "llm_datadist_ffi.mock.LinkSecret");
    const char *from = "option llm_datadist_ffi.mock.LinkSecret";
    if (secret == NULL) {
        secret = getenv("LLM_DATADIST_FFI_LINK_SECRET");
        from = "environment variable LLM_DATADIST_FFI_LINK_SECRET";
    }
    size_t len = secret != NULL ? strlen(secret) : 0;
    if (len > SECRET_MAX) {
        mock_set_error("%s: %s is %zu bytes long; at most %d are allowed", fn, from, len, (int)SECRET_MAX);
        return LLM_PARAM_INVALID;
    }
    memcpy(c->secret, secret != NULL ? secret : "", len);
    c->secret_len = len;
    const char *any = engine_opt_get(o, n, "llm_datadist_ffi.mock.ProcessVmAnyUser");
    if (any != NULL && strcmp(any, "0") != 0 && strcmp(any, "1") != 0) {
        mock_set_error("%s: option llm_datadist_ffi.mock.ProcessVmAnyUser \"%s\" must be \"0\" or \"1\"", fn, any);
        return LLM_PARAM_INVALID;
    }
    c->vm_any_user = any != NULL && strcmp(any, "1") == 0;
    return LLM_SUCCESS;
}

lldd_status engine_parse_native_pool(const char *fn, const lldd_option *o, size_t n, int *out)
{
    const char *v = engine_opt_get(o, n, "llm_datadist_ffi.mock.NativePool");
    *out = v != NULL && strcmp(v, "1") == 0;
    if (v != NULL && strcmp(v, "0") != 0 && strcmp(v, "1") != 0) {
        mock_set_error("%s: option llm_datadist_ffi.mock.NativePool \"%s\" must be \"0\" or \"1\"", fn, v);
        return LLM_PARAM_INVALID;
    }
    return LLM_SUCCESS;
}

lldd_status engine_parse_backend(const char *fn, const char *backend, engine_cfg *c, const char *listen_options)
{
    if (backend == NULL)
        return LLM_SUCCESS;
    if (strcmp(backend, "hixl") != 0)
        return mock_refuse("%s: option llm.TransferBackend \"%s\" is not supported; only \"hixl\" is", fn, backend);
    c->hixl = 1;
    /* the HIXL engine is named by its listen address: it needs one (E-5) */
    if (!c->has_listen)
        return mock_refuse("%s: option llm.TransferBackend \"hixl\" needs %s", fn, listen_options);
    return LLM_SUCCESS;
}

lldd_status engine_parse_mock_options(const char *fn, const lldd_option *o, size_t n, engine_cfg *c)
{
    lldd_status st = engine_parse_native_pool(fn, o, n, &c->native_pool);
    if (st == LLM_SUCCESS)
        st = engine_parse_link_pace(fn, o, n, c);
    return st != LLM_SUCCESS ? st : engine_parse_link_security(fn, o, n, c);
}

lldd_status engine_parse_link_retry(const char *fn, const lldd_option *o, size_t n)
{
    const char *retry = engine_opt_get(o, n, "llm.LinkRetryCount");
    uint64_t v;
    if (retry != NULL && (engine_parse_digits(retry, UINT64_MAX, &v) != 0 || v < 1 || v > 100))
        return mock_refuse("%s: option llm.LinkRetryCount \"%s\" is not an integer in [1, 100]", fn, retry);
    return LLM_SUCCESS;
}

lldd_status engine_parse_rdma(const char *fn, const lldd_option *o, size_t n)
{
    static const char *const numeric[] = {"llm.RdmaTrafficClass", "llm.RdmaServiceLevel"};
    for (size_t i = 0; i < 2; i++) {
        const char *v = engine_opt_get(o, n, numeric[i]);
        uint64_t x;
        if (v != NULL && engine_parse_digits(v, UINT32_MAX, &x) != 0)
            return mock_refuse("%s: option %s \"%s\" is not an unsigned 32-bit number", fn, numeric[i], v);
    }
    return LLM_SUCCESS;
}

lldd_status engine_parse_link_pace(const char *fn, const lldd_option *o, size_t n, engine_cfg *c)
{
    static const char *const keys[2] = {"llm_datadist_ffi.mock.LinkBandwidth", "llm_datadist_ffi.mock.LinkLatencyUs"};
    /* an hour of latency is far past any wait time; the bound keeps the sums in range */
    static const uint64_t limits[2] = {UINT64_MAX, 3600000000ull};
    uint64_t *outs[2] = {&c->pace_bw, &c->pace_lat_us};
    for (int i = 0; i < 2; i++) {
        const char *v = engine_opt_get(o, n, keys[i]);
        *outs[i] = 0;
        if (v != NULL && engine_parse_digits(v, limits[i], outs[i]) != 0) {
            mock_set_error("%s: option %s \"%s\" must be a decimal integer in [0, %llu] (%s)", fn, keys[i], v,
                           (unsigned long long)limits[i], i == 0 ? "bytes per second, 0 = unlimited" : "microseconds");
            return LLM_PARAM_INVALID;
        }
    }
    return LLM_SUCCESS;
}

lldd_status engine_parse_pool_cfg(const char *fn, const char *key, const char *text, pool_cfg *out)
{
    memset(out, 0, sizeof *out);
    if (text == NULL)
        return LLM_SUCCESS;
    json_value doc;
    char why[96];
    if (json_parse(text, strlen(text), &doc, why, sizeof why) != 0) {
        mock_set_error("%s: option %s is not valid JSON (%s)", fn, key, why);
        return LLM_PARAM_INVALID;
    }
    lldd_status st = LLM_SUCCESS;
    const json_value *size = json_member(&doc, "memory_size");
    const json_value *shift = json_member(&doc, "page_shift");
    out->page_shift = 16;
    if (doc.type != JSON_OBJECT) {
        mock_set_error("%s: option %s must be a JSON object {\"memory_size\": N, \"page_shift\": S}", fn, key);
        st = LLM_PARAM_INVALID;
    } else if (size == NULL || size->type != JSON_NUMBER || !size->is_uint) {
        mock_set_error("%s: option %s needs \"memory_size\" as an unsigned integer number of bytes", fn, key);
        st = LLM_PARAM_INVALID;
    } else if (shift != NULL && (shift->type != JSON_NUMBER || !shift->is_uint)) {
        mock_set_error("%s: option %s: \"page_shift\" must be an unsigned integer in [10, 31)", fn, key);
        st = LLM_PARAM_INVALID;
    } else if (shift != NULL && (shift->uint_value < 10 || shift->uint_value >= 31)) {
        mock_set_error("%s: option %s: \"page_shift\" %llu is outside [10, 31)", fn, key,
                       (unsigned long long)shift->uint_value);
        st = LLM_PARAM_INVALID;
    } else {
        if (shift != NULL)
            out->page_shift = (uint32_t)shift->uint_value;
        out->memory_size = size->uint_value;
        if (out->memory_size == 0) {
            mock_set_error("%s: option %s: \"memory_size\" must be greater than 0", fn, key);
            st = LLM_PARAM_INVALID;
        } else if ((out->memory_size >> out->page_shift) >= 0xFFFFFFFFull) {
            mock_set_error("%s: option %s: memory_size >> page_shift (%llu) must be < 2^32 - 1", fn, key,
                           (unsigned long long)(out->memory_size >> out->page_shift));
            st = LLM_PARAM_INVALID;
        } else {
            out->present = 1;
        }
    }
    json_free(&doc);
    return st;
}

/* Checks the options in the order of docs/reference/cpp-api.md §6.4 steps 2-6. */
static lldd_status parse_init_options(engine *e, const char *fn, const lldd_option *opts, size_t n, engine_cfg *c)
{
    memset(c, 0, sizeof *c);
    int role = atomic_load(&e->role);
    if (role < LLDD_ROLE_PROMPT || role > LLDD_ROLE_MIX) {
        mock_set_error("%s: role %d is invalid; expected PROMPT (1), DECODER (2) or MIX (3)", fn, role);
        return LLM_PARAM_INVALID;
    }

    const char *dev = engine_opt_get(opts, n, "llm.DeviceId");
    if (dev == NULL || dev[0] == '\0') {
        mock_set_error("%s: option llm.DeviceId is %s; it is required (one device id >= 0)", fn,
                       dev == NULL ? "missing" : "empty");
        return LLM_PARAM_INVALID;
    }
    {
        size_t items = 0;
        int32_t first = -1;
        lldd_status st = engine_parse_device_list(fn, "llm.DeviceId", dev, &items, &first);
        if (st != LLM_SUCCESS)
            return st;
        if (items != 1) {
            mock_set_error("%s: option llm.DeviceId \"%s\" lists %zu devices; this engine uses exactly one", fn,
                           dev, items);
            return LLM_PARAM_INVALID;
        }
        c->device = first;
    }

    const char *listen = engine_opt_get(opts, n, "llm.ListenIpInfo");
    if (listen != NULL) {
        char why[160];
        if (tp_parse_addr(listen, &c->listen, why, sizeof why) != 0) {
            mock_set_error("%s: option llm.ListenIpInfo %s", fn, why);
            return LLM_PARAM_INVALID;
        }
        c->has_listen = 1;
    }

    lldd_status st = engine_parse_backend(fn, engine_opt_get(opts, n, "llm.TransferBackend"), c,
                                          "option llm.ListenIpInfo");
    if (st != LLM_SUCCESS)
        return st;
    st = engine_parse_sync_wait(fn, opts, n, &c->sync_timeout_ms);
    if (st != LLM_SUCCESS)
        return st;

    st = engine_parse_pool_cfg(fn, "llm.MemPoolConfig", engine_opt_get(opts, n, "llm.MemPoolConfig"), &c->dev_pool);
    if (st != LLM_SUCCESS)
        return st;
    st = engine_parse_pool_cfg(fn, "llm.HostMemPoolConfig", engine_opt_get(opts, n, "llm.HostMemPoolConfig"), &c->host_pool);
    if (st != LLM_SUCCESS)
        return st;

    if ((st = engine_parse_link_retry(fn, opts, n)) != LLM_SUCCESS ||
        (st = engine_parse_rdma(fn, opts, n)) != LLM_SUCCESS)
        return st;

    if ((st = engine_parse_mock_options(fn, opts, n, c)) != LLM_SUCCESS)
        return st;

    const char *comm = engine_opt_get(opts, n, "llm.LocalCommRes");
    c->local_comm_res = (comm != NULL && comm[0] != '\0') ? comm : NULL;
    c->role = role;
    c->gen = GEN_V2;
    c->mode = MODE_DIRECT;
    c->link_total_ms = 30000;
    return LLM_SUCCESS;
}

lldd_status engine_start(engine *e, const engine_cfg *c, const char *fn)
{
    lldd_status st;
    char *comm = NULL;
    if (c->local_comm_res != NULL && (comm = strdup(c->local_comm_res)) == NULL) {
        mock_set_error("%s: out of host memory", fn);
        return LLM_FAILED;
    }

    aclError acl = aclrtSetDevice(c->device);
    if (acl != ACL_SUCCESS) {
        if (!mock_acl_device_valid(c->device))
            mock_set_error("%s: aclrtSetDevice(%d) failed with ACL error %d: device %d does not exist "
                           "(%s)", fn, (int)c->device, (int)acl, (int)c->device,
                           c->ext ? "ge.exec.deviceId" : "llm.DeviceId");
        else
            mock_set_error("%s: aclrtSetDevice(%d) failed with ACL error %d", fn, (int)c->device, (int)acl);
        free(comm);
        return LLM_FAILED;
    }

    if (c->dev_pool.present &&
        pool_create(&e->dev_pool, LLDD_PLACEMENT_DEVICE, c->device, c->dev_pool.memory_size,
                    c->dev_pool.page_shift) != 0) {
        mock_set_error("%s: cannot allocate the device memory pool of %llu bytes (%s)", fn,
                       (unsigned long long)c->dev_pool.memory_size,
                       c->gen == GEN_V1 ? "ge.flowGraphMemMaxSize / llm.BufPoolCfg" : "llm.MemPoolConfig");
        st = c->gen == GEN_V1 ? LLM_DEVICE_OUT_OF_MEMORY : LLM_OUT_OF_MEMORY;
        goto undo;
    }
    if (c->host_pool.present &&
        pool_create(&e->host_pool, LLDD_PLACEMENT_HOST, c->device, c->host_pool.memory_size,
                    c->host_pool.page_shift) != 0) {
        mock_set_error("%s: cannot allocate the host memory pool of %llu bytes (llm.HostMemPoolConfig)", fn,
                       (unsigned long long)c->host_pool.memory_size);
        st = LLM_OUT_OF_MEMORY;
        goto undo;
    }

    pthread_mutex_lock(&e->mu);
    atomic_store(&e->role, c->role);
    e->device = c->device;
    e->sync_timeout_ms = c->sync_timeout_ms;
    e->hixl = c->hixl;
    e->local_comm_res = comm;
    e->comm_res_generated = 0;
    e->mode = c->mode;
    e->gen = c->gen;
    e->ext = c->ext;
    e->switch_role_enabled = c->switch_role_enabled;
    e->v1_unlimited = c->v1_unlimited;
    e->native_pool = c->native_pool;
    e->link_total_ms = c->link_total_ms;
    e->pace_bw = c->pace_bw;
    e->pace_lat_us = c->pace_lat_us;
    memcpy(e->secret, c->secret, c->secret_len);
    e->secret_len = c->secret_len;
    e->vm_any_user = c->vm_any_user;
    if (rand_bytes(&e->instance, sizeof e->instance) != 0)
        e->instance = 0;
    e->rank_linked = 0;
    e->next_id = 1;
    e->next_bind = 1;
    e->next_comm_id = 1;
    e->table_bytes = 24;
    pthread_mutex_unlock(&e->mu);

    if (c->has_listen && c->hixl && c->listen.port == 0) {
        /* HIXL starts its server only for a port above 0: a client-only engine, whose
         * address a role switch compares with (docs/semantics.md E-5, PR-27) */
        pthread_mutex_lock(&e->listen_mu);
        e->listen_addr = c->listen;
        pthread_mutex_unlock(&e->listen_mu);
    } else if (c->has_listen) {
        /* port 0 on the default backend: bound as given, the kernel picks the port (PR-27) */
        pthread_mutex_lock(&e->listen_mu);
        st = listener_start(e, &c->listen, fn);
        pthread_mutex_unlock(&e->listen_mu);
        if (st != LLM_SUCCESS) {
            pthread_mutex_lock(&e->mu);
            e->local_comm_res = NULL;
            pthread_mutex_unlock(&e->mu);
            goto undo;
        }
    }

    pthread_mutex_lock(&e->mu);
    e->state = ENGINE_READY;
    pthread_mutex_unlock(&e->mu);
    return LLM_SUCCESS;

undo:
    pool_destroy(&e->dev_pool);
    pool_destroy(&e->host_pool);
    aclrtResetDevice(c->device);
    free(comm);
    return st;
}

static lldd_status do_initialize(engine *e, const lldd_option *opts, size_t n)
{
    static const char fn[] = "lldd_initialize";
    engine_cfg c;
    lldd_status st = parse_init_options(e, fn, opts, n, &c);
    if (st != LLM_SUCCESS)
        return st;
    return engine_start(e, &c, fn);
}

/* ---------------------------------------------------------------------------------------------
 * create, destroy, initialize, finalize, set_role past their entry (api_engine.c)
 * ------------------------------------------------------------------------------------------ */

/* What a new engine and a finalized one start from: ids, binding marks and
 * communicator ids from 1, an empty published table (its 24-byte header), v2 direct. */
static void engine_reset_numbering(engine *e)
{
    e->next_id = 1;
    e->next_bind = 1;
    e->next_comm_id = 1;
    e->table_bytes = 24;
    e->mode = MODE_DIRECT;
    e->gen = GEN_V2;
}

lldd_status engine_create(uint64_t cluster_id, int32_t role, engine **out)
{
    *out = NULL;
    engine *e = calloc(1, sizeof *e);
    if (e == NULL) {
        mock_set_error("lldd_create: out of host memory");
        return LLM_FAILED;
    }
    e->cluster_id = cluster_id;
    atomic_init(&e->role, role);
    e->listen_fd = -1;
    e->id_fd = -1;
    e->wake_pipe[0] = e->wake_pipe[1] = -1;
    e->pub_fd = -1;
    engine_reset_numbering(e);
    pthread_mutex_init(&e->life_mu, NULL);
    pthread_mutex_init(&e->v1_link_mu, NULL);
    pthread_mutex_init(&e->listen_mu, NULL);
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    registry_add(e);
    *out = e;
    return LLM_SUCCESS;
}

lldd_status engine_options_call_check(engine *e, const char *fn, const lldd_option *options, size_t num_options)
{
    uint32_t code;
    if (mock_fault_take(fn, &code))
        return code;
    if (e == NULL) {
        mock_set_error("%s: engine must not be NULL", fn);
        return LLM_PARAM_INVALID;
    }
    if (options == NULL && num_options > 0) {
        mock_set_error("%s: options is NULL but num_options is %zu", fn, num_options);
        return LLM_PARAM_INVALID;
    }
    if (e->serial == 0) {
        mock_set_error("%s: this engine was created by the parent process before a fork; a child process "
                       "creates its own engines", fn);
        return LLM_FAILED;
    }
    return LLM_SUCCESS;
}

lldd_status engine_initialize(engine *e, const lldd_option *options, size_t num_options)
{
    pthread_mutex_lock(&e->life_mu);
    pthread_mutex_lock(&e->mu);
    int ready = e->state == ENGINE_READY;
    pthread_mutex_unlock(&e->mu);
    lldd_status st = ready ? LLM_SUCCESS : do_initialize(e, options, num_options);
    pthread_mutex_unlock(&e->life_mu);
    return st;
}

void engine_finalize(engine *e)
{
    pthread_mutex_lock(&e->life_mu);
    pthread_mutex_lock(&e->mu);
    if (e->state != ENGINE_READY) {
        pthread_mutex_unlock(&e->mu);
        pthread_mutex_unlock(&e->life_mu);
        return;
    }
    e->state = ENGINE_FINALIZING;
    pub_set_ready_locked(e, 0);
    atomic_store(&e->stopping, 1);
    while (e->active > 0)
        pthread_cond_wait(&e->cv, &e->mu);
    pthread_mutex_unlock(&e->mu);

    pthread_mutex_lock(&e->listen_mu);
    registry_fork_lock();
    listener_stop(e);
    registry_fork_unlock();
    pthread_mutex_unlock(&e->listen_mu);

    /* handshakes and disconnects in progress: wake them, then join them */
    pthread_mutex_lock(&e->mu);
    const comm_hooks *comms = e->comm_hooks;
    pthread_mutex_unlock(&e->mu);
    if (comms != NULL)
        comms->teardown(e);
    pending_abort_all(e);
    pthread_mutex_lock(&e->mu);
    for (eng_thread *t = e->conns; t != NULL; t = t->next)
        tp_shutdown(t->fd);
    pthread_mutex_unlock(&e->mu);
    engine_reap_conns(e, 1);

    links_teardown(e);
    caches_teardown(e);
    aclrtResetDevice(e->device);

    pthread_mutex_lock(&e->mu);
    free(e->local_comm_res);
    e->local_comm_res = NULL;
    e->comm_res_generated = 0;
    engine_reset_numbering(e);
    e->ext = 0;
    e->rank_linked = 0;
    e->state = ENGINE_UNINIT;
    atomic_store(&e->stopping, 0);
    pthread_mutex_unlock(&e->mu);
    pthread_mutex_unlock(&e->life_mu);
}

void engine_destroy(engine *e)
{
    engine_finalize(e);
    registry_remove(e);
    free(e->caches);
    pthread_cond_destroy(&e->cv);
    pthread_mutex_destroy(&e->mu);
    pthread_mutex_destroy(&e->listen_mu);
    pthread_mutex_destroy(&e->life_mu);
    pthread_mutex_destroy(&e->v1_link_mu);
    free(e);
}

lldd_status engine_set_role(engine *e, const char *fn, int32_t role, const lldd_option *options, size_t num_options)
{
    if (role < LLDD_ROLE_PROMPT || role > LLDD_ROLE_MIX) {
        mock_set_error("%s: role %d is invalid; expected PROMPT (1), DECODER (2) or MIX (3)", fn, (int)role);
        return LLM_PARAM_INVALID;
    }
    tp_addr addr;
    const char *listen = engine_opt_get(options, num_options, "llm.ListenIpInfo");
    if (listen != NULL) {
        char why[160];
        if (tp_parse_addr(listen, &addr, why, sizeof why) != 0) {
            mock_set_error("%s: option llm.ListenIpInfo %s", fn, why);
            return LLM_PARAM_INVALID;
        }
    }
    /* HIXL's role switch looks at no links: only the listen address may not change (E-5) */
    size_t links = e->hixl ? 0 : engine_link_count(e);
    if (links > 0) {
        mock_set_error("%s: %zu link(s) still exist; unlink every cluster before switching roles", fn, links);
        return LLM_EXIST_LINK;
    }
    lldd_status st = engine_listen_as(e, fn, listen != NULL ? &addr : NULL);
    if (st == LLM_SUCCESS)
        atomic_store(&e->role, role);
    return st;
}

size_t engine_link_count(engine *e)
{
    pthread_mutex_lock(&e->mu);
    size_t links = 0;
    for (mlink *l = e->links; l != NULL; l = l->next)
        links++;
    const comm_hooks *comms = e->comm_hooks;
    pthread_mutex_unlock(&e->mu);
    return links + (comms != NULL ? comms->count(e) : 0);
}

lldd_status engine_listen_as(engine *e, const char *fn, const tp_addr *addr)
{
    lldd_status st = LLM_SUCCESS;
    pthread_mutex_lock(&e->listen_mu);
    registry_fork_lock();
    /* HIXL compares with the address given at init, which a client-only engine (port 0)
     * does not listen on (E-5); the default backend with what it listens on */
    int same = addr != NULL && (e->hixl || e->listening) && e->listen_addr.port == addr->port;
    int change = addr != NULL ? !same : e->listening;
    if (change && e->hixl) {
        mock_set_error("%s: the listen address cannot change with llm.TransferBackend \"hixl\"", fn);
        st = LLM_FEATURE_NOT_ENABLED;
    } else if (change && addr != NULL) {
        /* bind the new address first: on failure the old listener stays */
        int fd;
        int err = tp_listen(addr, &fd);
        if (err == 0) {
            listener_stop(e);
            err = listener_run(e, fd, addr);
            if (err != 0)
                close(fd);
        }
        if (err != 0) {
            mock_set_error("%s: cannot listen on %s:%u: %s", fn, addr->ip, (unsigned)addr->port, strerror(err));
            st = LLM_FAILED;
        }
    } else if (change) {
        listener_stop(e);
    }
    registry_fork_unlock();
    pthread_mutex_unlock(&e->listen_mu);
    return st;
}

/* ---------------------------------------------------------------------------------------------
 * mock control past its entry (api_engine.c)
 * ------------------------------------------------------------------------------------------ */

void engine_set_serve_delay(engine *e, uint32_t delay_ms)
{
    atomic_store(&e->serve_delay_ms, delay_ms);
    pthread_mutex_lock(&e->mu);
    pub_set_delay(e, delay_ms);
    pthread_mutex_unlock(&e->mu);
}

lldd_status engine_set_link_pace(engine *e, const char *fn, uint64_t cluster_id, uint64_t bytes_per_second,
                                 uint64_t latency_us)
{
    if (latency_us > 3600000000ull) {
        mock_set_error("%s: latency_us %llu is more than an hour", fn, (unsigned long long)latency_us);
        return LLM_PARAM_INVALID;
    }
    lldd_status st = LLM_SUCCESS;
    pthread_mutex_lock(&e->mu);
    uint32_t i = 0;
    while (i < e->pace_count && e->paces[i].cluster != cluster_id)
        i++;
    if (i == LINK_PACE_SLOTS) {
        mock_set_error("%s: this engine already paces %u clusters, the most it keeps", fn, (unsigned)i);
        st = LLM_PARAM_INVALID;
    } else {
        e->paces[i] = (link_pace){cluster_id, bytes_per_second, latency_us};
        if (i == e->pace_count)
            e->pace_count++;
    }
    pthread_mutex_unlock(&e->mu);
    return st;
}

void engine_drop_connections(engine *e)
{
    pthread_mutex_lock(&e->mu);
    for (int list = 0; list < 2; list++) {
        for (mlink *l = list == 0 ? e->links : e->served; l != NULL; l = l->next) {
            if (!l->ready)
                continue;
            atomic_store(&l->dropped, 1);
            tp_shutdown(l->req_fd);
            tp_shutdown(l->srv_fd);
        }
    }
    pthread_mutex_unlock(&e->mu);
}

/* The ready link of e to cluster_id in either table (a served-only side included), for
 * the mock's path queries. e->mu held. */
static const mlink *link_visible_locked(engine *e, uint64_t cluster_id)
{
    for (int list = 0; list < 2; list++)
        for (const mlink *l = list == 0 ? e->links : e->served; l != NULL; l = l->next)
            if (l->ready && !l->removed && !l->orphan && l->peer_cluster == cluster_id)
                return l;
    return NULL;
}

uint32_t engine_link_path(engine *e, uint64_t cluster_id)
{
    pthread_mutex_lock(&e->mu);
    const mlink *l = link_visible_locked(e, cluster_id);
    uint32_t path = l == NULL                ? LLDD_MOCK_PATH_NONE
                    : l->same_process        ? LLDD_MOCK_PATH_SAME_PROCESS
                    : atomic_load(&l->vm_ok) ? LLDD_MOCK_PATH_PROCESS_VM
                                             : LLDD_MOCK_PATH_SOCKET;
    pthread_mutex_unlock(&e->mu);
    return path;
}

uint32_t engine_last_transfer_path(engine *e, uint64_t cluster_id)
{
    pthread_mutex_lock(&e->mu);
    const mlink *l = link_visible_locked(e, cluster_id);
    uint32_t path = l == NULL ? LLDD_MOCK_PATH_NONE : (uint32_t)atomic_load(&l->last_path);
    pthread_mutex_unlock(&e->mu);
    return path;
}
