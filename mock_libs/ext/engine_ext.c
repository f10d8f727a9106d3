/* The extension ABI's life cycle: lldd_ext_initialize with the option map of the
 * vendor's Python layer (docs/reference/python-api.md §10.2), lldd_ext_switch_role and the
 * v1 lldd_ext_check_link_status (semantics.md §10.7, §10.8).
 *
 * lldd_ext_initialize chooses the generation and the transfer mode, which stay
 * fixed until Finalize:
 *   llm.EnableCacheManager == "1"           v2 (CacheManager); otherwise v1 (KvCacheManager)
 *   v2: llm.EnableRemoteCacheAccessible     "1" direct mode, "0" or absent server-assisted
 * The rest of the engine reads e->gen and e->mode; a link needs both ends in the
 * same mode (the handshake compares them, semantics.md §1.4), and v1 is a mode of its own.
 */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/engine.h"
#include "ext/ext.h"
#include "base/json.h"
#include "wire/links.h"
#include "base/mock_internal.h"
#include "core/options.h"
#include "wire/transport.h"

const char *ext_role_name(int role)
{
    switch (role) {
    case LLDD_ROLE_PROMPT:
        return "PROMPT";
    case LLDD_ROLE_DECODER:
        return "DECODER";
    case LLDD_ROLE_MIX:
        return "MIX";
    default:
        return "an invalid role";
    }
}

lldd_status ext_check_cache_key_validity(const char *fn, const char *name, const lldd_key *k)
{
    int req = k->req_id != UINT64_MAX, prefix = k->prefix_id != UINT64_MAX;
    if (!req && !prefix) {
        mock_set_error("%s: %s: one of req id and prefix id should contain valid value (both are 2**64-1; "
                       "docs/reference/python-api.md §7.5, PR-41)", fn, name);
        return LLM_PARAM_INVALID;
    }
    if (req && prefix) {
        mock_set_error("%s: %s: only one of req id and prefix id should contain valid value (req_id %llu, "
                       "prefix_id %llu; docs/reference/python-api.md §7.5)", fn, name, (unsigned long long)k->req_id,
                       (unsigned long long)k->prefix_id);
        return LLM_PARAM_INVALID;
    }
    return LLM_SUCCESS;
}

lldd_status ext_gen_status(const engine *e, lldd_status st)
{
    return e->gen == GEN_V1 && st == LLM_TIMEOUT ? LLM_WAIT_PROC_TIMEOUT : st;
}

/* ---------------------------------------------------------------------------------------------
 * options
 * ------------------------------------------------------------------------------------------ */

static int role_of(const char *text)
{
    if (strcmp(text, "Prompt") == 0)
        return LLDD_ROLE_PROMPT;
    if (strcmp(text, "Decoder") == 0)
        return LLDD_ROLE_DECODER;
    if (strcmp(text, "Mix") == 0)
        return LLDD_ROLE_MIX;
    return 0;
}

/* llm.ListenIp / llm.ListenPort as the Python layer sends them (the ip as text, or,
 * from the v1 switch_role, as the decimal integer of its little-endian bytes). */
static lldd_status parse_ip_port(const char *fn, const char *ip, const char *port, tp_addr *out)
{
    char text[128], dotted[INET_ADDRSTRLEN];
    uint64_t v;
    if (ip[0] != '\0' && strchr(ip, '.') == NULL && strchr(ip, ':') == NULL &&
        engine_parse_digits(ip, UINT32_MAX, &v) == 0) {
        snprintf(dotted, sizeof dotted, "%u.%u.%u.%u", (unsigned)(v & 255), (unsigned)(v >> 8 & 255),
                 (unsigned)(v >> 16 & 255), (unsigned)(v >> 24 & 255));
        ip = dotted;
    }
    int v6 = strchr(ip, ':') != NULL;
    snprintf(text, sizeof text, "%s%s%s:%s", v6 ? "[" : "", ip, v6 ? "]" : "", port);
    char why[160];
    if (tp_parse_addr(text, out, why, sizeof why) != 0) {
        mock_set_error("%s: options llm.ListenIp \"%s\" / llm.ListenPort \"%s\": %s", fn, ip, port, why);
        return LLM_PARAM_INVALID;
    }
    return LLM_SUCCESS;
}

/* The listen address of v2 options: llm.ListenIp with llm.ListenPort. *has = 0 when
 * neither is given. */
static lldd_status v2_listen(const char *fn, const lldd_option *o, size_t n, int *has, tp_addr *addr)
{
    const char *ip = engine_opt_get(o, n, "llm.ListenIp"), *port = engine_opt_get(o, n, "llm.ListenPort");
    *has = 0;
    if (ip == NULL && port == NULL)
        return LLM_SUCCESS;
    if (ip == NULL || port == NULL) {
        mock_set_error("%s: option %s is given without %s; the listen address needs both", fn,
                       ip != NULL ? "llm.ListenIp" : "llm.ListenPort", ip != NULL ? "llm.ListenPort" : "llm.ListenIp");
        return LLM_PARAM_INVALID;
    }
    *has = 1;
    return parse_ip_port(fn, ip, port, addr);
}

/* The v1 listen address: the llm.ListenIp / llm.ListenPort pair when given (the v1
 * switch_role's Python layer parses llm.listenIpInfo with inet_aton, so "127.1" reaches
 * the engine as a number), else llm.listenIpInfo "ip:port" (one device, PR-36). */
static lldd_status v1_listen_text(const char *fn, const lldd_option *o, size_t n, int *has, tp_addr *addr)
{
    const char *info = engine_opt_get(o, n, "llm.listenIpInfo");
    *has = 0;
    if (info == NULL || engine_opt_get(o, n, "llm.ListenIp") != NULL || engine_opt_get(o, n, "llm.ListenPort") != NULL)
        return v2_listen(fn, o, n, has, addr);
    if (strchr(info, ';') != NULL) {
        mock_set_error("%s: option llm.listenIpInfo \"%s\" lists several addresses; it needs one \"ip:port\" per "
                       "device and this engine has one device (PR-36)", fn, info);
        return LLM_PARAM_INVALID;
    }
    char why[160];
    if (tp_parse_addr(info, addr, why, sizeof why) != 0) {
        mock_set_error("%s: option llm.listenIpInfo %s", fn, why);
        return LLM_PARAM_INVALID;
    }
    *has = 1;
    return LLM_SUCCESS;
}

/* v1_listen_text, and PR-27's v1 guard: a v1 Prompt's port reaches a flow function whose
 * listen code is not public, so port 0 is refused there (docs/semantics.md PR-27). */
static lldd_status v1_listen(const char *fn, const lldd_option *o, size_t n, int *has, tp_addr *addr)
{
    lldd_status st = v1_listen_text(fn, o, n, has, addr);
    if (st == LLM_SUCCESS && *has && addr->port == 0) {
        mock_set_error("%s: listen port 0 is out of range [1, 65535] for the KvCacheManager (v1) generation "
                       "(PR-27)", fn);
        return LLM_PARAM_INVALID;
    }
    return st;
}

/* ge.exec.deviceId: ids separated by ";" (v1 lists one per device). */
static lldd_status parse_devices(const char *fn, const char *dev, int v1, int32_t *device)
{
    size_t items = 0;
    lldd_status st = engine_parse_device_list(fn, "ge.exec.deviceId", dev, &items, device);
    if (st != LLM_SUCCESS)
        return st;
    if (items != 1 && v1) {
        mock_set_error("%s: option ge.exec.deviceId \"%s\" lists %zu devices; a v1 engine of the mock has exactly "
                       "one (PR-36)", fn, dev, items);
        return LLM_FEATURE_NOT_ENABLED;
    }
    if (items != 1) {
        mock_set_error("%s: option ge.exec.deviceId \"%s\" must be one integer in CacheManager mode", fn, dev);
        return LLM_PARAM_INVALID;
    }
    return LLM_SUCCESS;
}

/* The v1 pool (PR-34): llm.BufPoolCfg's buf_pool_size, else ge.flowGraphMemMaxSize,
 * else unlimited. */
static lldd_status parse_v1_pool(const char *fn, const lldd_option *o, size_t n, engine_cfg *c)
{
    const char *flow = engine_opt_get(o, n, "ge.flowGraphMemMaxSize");
    const char *buf = engine_opt_get(o, n, "llm.BufPoolCfg");
    uint64_t size = 0;
    int have = 0;
    if (flow != NULL) {
        if (engine_parse_digits(flow, UINT64_MAX, &size) != 0) {
            mock_set_error("%s: option ge.flowGraphMemMaxSize \"%s\" is not a decimal number of bytes", fn, flow);
            return LLM_PARAM_INVALID;
        }
        have = 1;
    }
    if (buf != NULL && buf[0] != '\0') {
        json_value doc;
        char why[96];
        if (json_parse(buf, strlen(buf), &doc, why, sizeof why) != 0) {
            mock_set_error("%s: option llm.BufPoolCfg is not valid JSON (%s)", fn, why);
            return LLM_PARAM_INVALID;
        }
        lldd_status st = LLM_SUCCESS;
        const json_value *v = json_member(&doc, "buf_pool_size");
        if (doc.type != JSON_OBJECT) {
            mock_set_error("%s: option llm.BufPoolCfg must be a JSON object", fn);
            st = LLM_PARAM_INVALID;
        } else if (v != NULL && (v->type != JSON_NUMBER || !v->is_uint)) {
            mock_set_error("%s: option llm.BufPoolCfg: \"buf_pool_size\" must be an unsigned number of bytes", fn);
            st = LLM_PARAM_INVALID;
        } else if (v != NULL) {
            size = v->uint_value;
            have = 1;
        }
        json_free(&doc);
        if (st != LLM_SUCCESS)
            return st;
    }
    if (!have) {
        c->v1_unlimited = 1;
        return LLM_SUCCESS;
    }
    if (size == 0) {
        mock_set_error("%s: the v1 KV memory size (llm.BufPoolCfg buf_pool_size or ge.flowGraphMemMaxSize) is 0", fn);
        return LLM_PARAM_INVALID;
    }
    c->dev_pool.present = 1;
    c->dev_pool.memory_size = size;
    c->dev_pool.page_shift = 10;  /* 1 KiB pages: the mock's choice (PR-34) */
    while ((size >> c->dev_pool.page_shift) >= 0xFFFFFFFFull)
        c->dev_pool.page_shift++;
    return LLM_SUCCESS;
}

/* The options of KvCacheManager (v1) mode. */
static lldd_status parse_ext_v1_options(const char *fn, const lldd_option *o, size_t n, const char *dev,
                                        engine_cfg *c)
{
    lldd_status st;
    c->gen = GEN_V1;
    c->mode = MODE_V1;
    if (dev == NULL || dev[0] == '\0') {
        mock_set_error("%s: option ge.exec.deviceId is %s; KvCacheManager (v1) mode needs it", fn,
                       dev == NULL ? "missing" : "empty");
        return LLM_PARAM_INVALID;
    }
    if ((st = parse_devices(fn, dev, 1, &c->device)) != LLM_SUCCESS)
        return st;
    if (c->role == LLDD_ROLE_PROMPT) {
        if (engine_opt_get(o, n, "llm.listenIpInfo") == NULL) {
            mock_set_error("%s: option llm.listenIpInfo is missing; a v1 PROMPT listens for its decoders", fn);
            return LLM_PARAM_INVALID;
        }
        if ((st = v1_listen(fn, o, n, &c->has_listen, &c->listen)) != LLM_SUCCESS)
            return st;
    }
    if ((st = engine_parse_sync_wait(fn, o, n, &c->sync_timeout_ms)) != LLM_SUCCESS)
        return st;
    if ((st = parse_v1_pool(fn, o, n, c)) != LLM_SUCCESS)
        return st;
    if ((st = engine_parse_link_pace(fn, o, n, c)) != LLM_SUCCESS)
        return st;
    const char *sw = engine_opt_get(o, n, "llm.EnableSwitchRole");
    c->switch_role_enabled = sw != NULL && strcmp(sw, "1") == 0;
    return LLM_SUCCESS;
}

/* CacheManager mode: llm.LinkRetryCount, llm.LinkTotalTime and the RDMA numbers. */
static lldd_status parse_ext_link_options(const char *fn, const lldd_option *o, size_t n, engine_cfg *c)
{
    lldd_status st = engine_parse_link_retry(fn, o, n);
    if (st != LLM_SUCCESS)
        return st;
    const char *total = engine_opt_get(o, n, "llm.LinkTotalTime");
    uint64_t v;
    if (total != NULL) {
        if (engine_parse_digits(total, UINT32_MAX, &v) != 0) {
            mock_set_error("%s: option llm.LinkTotalTime \"%s\" is not a number of seconds in [0, 2^32 - 1]", fn,
                           total);
            return LLM_PARAM_INVALID;
        }
        if (v > 0)
            c->link_total_ms = v > UINT32_MAX / 1000 ? UINT32_MAX : (uint32_t)(v * 1000);
    }
    return engine_parse_rdma(fn, o, n);
}

/* The options of CacheManager (v2) mode. */
static lldd_status parse_ext_v2_options(const char *fn, const lldd_option *o, size_t n, const char *dev,
                                        const char *backend, const char *comm, engine_cfg *c)
{
    lldd_status st;
    c->gen = GEN_V2;
    if (dev != NULL && (st = parse_devices(fn, dev, 0, &c->device)) != LLM_SUCCESS)
        return st;
    if ((st = v2_listen(fn, o, n, &c->has_listen, &c->listen)) != LLM_SUCCESS)
        return st;
    if ((st = engine_parse_backend(fn, backend, c, "options llm.ListenIp and llm.ListenPort")) != LLM_SUCCESS)
        return st;
    if ((st = engine_parse_sync_wait(fn, o, n, &c->sync_timeout_ms)) != LLM_SUCCESS)
        return st;
    if ((st = engine_parse_mock_options(fn, o, n, c)) != LLM_SUCCESS)
        return st;
    const char *era = engine_opt_get(o, n, "llm.EnableRemoteCacheAccessible");
    if (era != NULL && strcmp(era, "0") != 0 && strcmp(era, "1") != 0) {
        mock_set_error("%s: option llm.EnableRemoteCacheAccessible \"%s\" must be \"0\" or \"1\"", fn, era);
        return LLM_PARAM_INVALID;
    }
    c->mode = era != NULL && strcmp(era, "1") == 0 ? MODE_DIRECT : MODE_SERVER_ASSISTED;
    static const char *const pools[2] = {"llm.MemPoolConfig", "llm.HostMemPoolConfig"};
    for (int i = 0; i < 2; i++) {
        const char *text = engine_opt_get(o, n, pools[i]);
        if (text != NULL && text[0] == '\0')
            text = NULL; /* the Python layer's flag: present and non-empty */
        if ((st = engine_parse_pool_cfg(fn, pools[i], text, i == 0 ? &c->dev_pool : &c->host_pool)) != LLM_SUCCESS)
            return st;
    }
    if ((st = parse_ext_link_options(fn, o, n, c)) != LLM_SUCCESS)
        return st;
    c->local_comm_res = (comm != NULL && comm[0] != '\0') ? comm : NULL;
    return LLM_SUCCESS;
}

static lldd_status parse_ext_options(const char *fn, const lldd_option *o, size_t n, engine_cfg *c)
{
    memset(c, 0, sizeof *c);
    c->ext = 1;
    c->link_total_ms = 30000;
    const char *role = engine_opt_get(o, n, "llm.Role");
    if (role == NULL) {
        mock_set_error("%s: option llm.Role is missing; it must be \"Prompt\", \"Decoder\" or \"Mix\"", fn);
        return LLM_PARAM_INVALID;
    }
    if ((c->role = role_of(role)) == 0) {
        mock_set_error("%s: option llm.Role \"%s\" is not \"Prompt\", \"Decoder\" or \"Mix\"", fn, role);
        return LLM_PARAM_INVALID;
    }
    const char *cm = engine_opt_get(o, n, "llm.EnableCacheManager");
    int v2 = cm != NULL && strcmp(cm, "1") == 0;
    const char *comm = engine_opt_get(o, n, "llm.LocalCommRes");
    const char *backend = engine_opt_get(o, n, "llm.TransferBackend");
    if (!v2 && comm != NULL) {
        mock_set_error("%s: option llm.LocalCommRes needs CacheManager mode (llm.EnableCacheManager = \"1\")", fn);
        return LLM_PARAM_INVALID;
    }
    if (!v2 && backend != NULL) {
        mock_set_error("%s: option llm.TransferBackend needs CacheManager mode (llm.EnableCacheManager = \"1\")",
                       fn);
        return LLM_PARAM_INVALID;
    }
    const char *dev = engine_opt_get(o, n, "ge.exec.deviceId");
    if (!v2)
        return parse_ext_v1_options(fn, o, n, dev, c);
    return parse_ext_v2_options(fn, o, n, dev, backend, comm, c);
}

lldd_status ext_engine_initialize(engine *e, const char *fn, const lldd_option *options, size_t num_options)
{
    lldd_status st = LLM_SUCCESS;
    pthread_mutex_lock(&e->life_mu);
    pthread_mutex_lock(&e->mu);
    int ready = e->state == ENGINE_READY;
    pthread_mutex_unlock(&e->mu);
    if (!ready) {
        engine_cfg c;
        st = parse_ext_options(fn, options, num_options, &c);
        if (st == LLM_SUCCESS)
            st = engine_start(e, &c, fn);
    }
    pthread_mutex_unlock(&e->life_mu);
    return st;
}

/* ---------------------------------------------------------------------------------------------
 * switch_role, check_link_status
 * ------------------------------------------------------------------------------------------ */

lldd_status ext_engine_switch_role(engine *e, const char *fn, int32_t role, const lldd_option *options,
                                   size_t num_options)
{
    lldd_status st = LLM_SUCCESS;
    int v1 = e->gen == GEN_V1;
    int has = 0;
    tp_addr addr;
    if (role < LLDD_ROLE_PROMPT || role > LLDD_ROLE_MIX) {
        mock_set_error("%s: role %d is invalid; expected PROMPT (1), DECODER (2) or MIX (3)", fn, (int)role);
        st = LLM_PARAM_INVALID;
        goto out;
    }
    if (v1) {
        if (role == atomic_load(&e->role)) {
            mock_set_error("%s: role not changed: the engine is %s already (v1)", fn, ext_role_name(role));
            st = LLM_PARAM_INVALID;
            goto out;
        }
        if (role == LLDD_ROLE_PROMPT) {
            if ((st = v1_listen(fn, options, num_options, &has, &addr)) != LLM_SUCCESS)
                goto out;
            if (!has) {
                mock_set_error("%s: switching to PROMPT needs llm.listenIpInfo in the options (v1)", fn);
                st = LLM_PARAM_INVALID;
                goto out;
            }
        }
        if (!e->switch_role_enabled) {
            mock_set_error("%s: switch_role needs llm.EnableSwitchRole = \"1\" at init (v1)", fn);
            st = LLM_FEATURE_NOT_ENABLED;
            goto out;
        }
    } else if ((st = v2_listen(fn, options, num_options, &has, &addr)) != LLM_SUCCESS) {
        goto out;
    }
    /* HIXL's role switch looks at no links: only the listen address may not change (E-5) */
    size_t links = e->hixl ? 0 : engine_link_count(e);
    if (links > 0) {
        mock_set_error("%s: %zu link(s) still exist (rank-table communicators included); unlink every cluster "
                       "before switching roles", fn, links);
        st = LLM_EXIST_LINK;
        goto out;
    }
    /* v2: the listen options decide; v1: a PROMPT listens, the other roles do not */
    st = engine_listen_as(e, fn, has ? &addr : NULL);
    if (st == LLM_SUCCESS)
        atomic_store(&e->role, role);
out:
    return st;
}

lldd_status ext_engine_check_link_status(engine *e, const char *fn, uint64_t remote_cluster_id)
{
    lldd_status st = LLM_SUCCESS;
    int role = atomic_load(&e->role);
    if (e->gen != GEN_V1) {
        mock_set_error("%s: check_link_status is not available in CacheManager mode (v1 only, docs/reference/semantics.md §10.8)", fn);
        st = LLM_PARAM_INVALID;
    } else if (role != LLDD_ROLE_DECODER) {
        mock_set_error("%s: check_link_status is not supported by %s (DECODER only)", fn, ext_role_name(role));
        st = LLM_PARAM_INVALID;
    } else {
        pthread_mutex_lock(&e->mu);
        mlink *l = link_find_locked(e, remote_cluster_id);
        int ok = l != NULL && l->ready && !l->removed;
        pthread_mutex_unlock(&e->mu);
        if (!ok) {
            mock_set_error("%s: cluster %llu is not linked", fn, (unsigned long long)remote_cluster_id);
            st = LLM_NOT_YET_LINK;
        }
    }
    return st;
}
