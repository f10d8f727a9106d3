/* Options and the shared part of Initialize / SetRole (engine.c), for the native and the
 * extension entry points. */
#ifndef LLDD_MOCK_OPTIONS_H
#define LLDD_MOCK_OPTIONS_H

#include <stddef.h>
#include <stdint.h>

#include "core/engine.h"

/* The first checks of Initialize and SetRole (native and extension): an injected fault,
 * a NULL engine, NULL options with num_options > 0. The caller enters the engine. */
lldd_status engine_options_call_check(engine *e, const char *fn, const lldd_option *options, size_t num_options);
const char *engine_opt_get(const lldd_option *options, size_t count, const char *key);
int engine_parse_digits(const char *s, uint64_t max, uint64_t *out);
/* llm.SyncKvCacheWaitTime: milliseconds in [0, 2^31 - 1], 1000 when absent; 0 is a lint
 * (PR-26), above 2^31 - 1 refused (a guard). */
lldd_status engine_parse_sync_wait(const char *fn, const lldd_option *o, size_t n, uint32_t *out);
/* PR-9: the vendor's class answers FEATURE_NOT_ENABLED to AllocateCache,
 * DeallocateCache, CopyKvCache and CopyKvBlocks; the mock-only option
 * llm_datadist_ffi.mock.NativePool = "1" turns on their pool-backed variant
 * (*out = 1). "0" or absent: off; any other value: PARAM_INVALID. */
lldd_status engine_parse_native_pool(const char *fn, const lldd_option *o, size_t n, int *out);
/* A device option's ";"-separated ids, each an int32 >= 0 (llm.DeviceId, ge.exec.deviceId):
 * *items of them, the first in *first. The caller judges the count. */
lldd_status engine_parse_device_list(const char *fn, const char *key, const char *dev, size_t *items,
                                     int32_t *first);

typedef struct pool_cfg {
    int present;
    uint64_t memory_size;
    uint32_t page_shift;
} pool_cfg;

lldd_status engine_parse_pool_cfg(const char *fn, const char *key, const char *text, pool_cfg *out);

typedef struct engine_cfg {
    int32_t role;
    int32_t device;
    int has_listen;
    tp_addr listen;
    uint32_t sync_timeout_ms;
    int hixl;
    pool_cfg dev_pool, host_pool;
    const char *local_comm_res;
    int gen;
    uint32_t mode;
    int ext;
    int switch_role_enabled;
    int v1_unlimited;
    int native_pool;
    uint32_t link_total_ms;
    uint64_t pace_bw, pace_lat_us;
    uint8_t secret[SECRET_MAX];
    size_t secret_len;
    int vm_any_user;
} engine_cfg;

/* The options both generations read alike: llm.LinkRetryCount, an integer in [1, 100]
 * (read, not used), and llm.RdmaTrafficClass / llm.RdmaServiceLevel, unsigned 32-bit
 * numbers; anything else is PARAM_INVALID. Each caller keeps its own order of them. */
lldd_status engine_parse_link_retry(const char *fn, const lldd_option *o, size_t n);
/* llm.TransferBackend (NULL: absent): only "hixl", which names the engine by its listen
 * address and so needs one (c->has_listen; listen_options: the options that give it). */
lldd_status engine_parse_backend(const char *fn, const char *backend, engine_cfg *c, const char *listen_options);
/* The mock's own options, in this order: llm_datadist_ffi.mock.NativePool, the link
 * model's (engine_parse_link_pace) and the link's security (engine_parse_link_security). */
lldd_status engine_parse_mock_options(const char *fn, const lldd_option *o, size_t n, engine_cfg *c);
lldd_status engine_parse_rdma(const char *fn, const lldd_option *o, size_t n);

/* The link model's options (mock only): llm_datadist_ffi.mock.LinkBandwidth, bytes per
 * second (0 or absent: unlimited), and llm_datadist_ffi.mock.LinkLatencyUs, microseconds
 * up to one hour (absent: 0); anything else is PARAM_INVALID. */
lldd_status engine_parse_link_pace(const char *fn, const lldd_option *o, size_t n, engine_cfg *c);

/* llm_datadist_ffi.mock.LinkSecret (or LLM_DATADIST_FFI_LINK_SECRET) and
 * llm_datadist_ffi.mock.ProcessVmAnyUser (docs/security.md §2). */
lldd_status engine_parse_link_security(const char *fn, const lldd_option *o, size_t n, engine_cfg *c);

/* Applies a checked configuration: device, pools, listener; READY on success. life_mu held. */
lldd_status engine_start(engine *e, const engine_cfg *c, const char *fn);
/* SetRole's listener rule (docs/reference/semantics.md §10.7): listen at addr (NULL: stop listening). */
lldd_status engine_listen_as(engine *e, const char *fn, const tp_addr *addr);
/* Live links (rank-table communicators included) for EXIST_LINK. */
size_t engine_link_count(engine *e);

#endif /* LLDD_MOCK_OPTIONS_H */
