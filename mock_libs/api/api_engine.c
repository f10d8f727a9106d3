/* The native entry points of the engine's life and of the mock controls (lldd/api.h,
 * lldd/mock.h): version, capabilities and backend name, create, Initialize, Finalize,
 * destroy, SetRole, and the lldd_mock_* calls.
 *
 * An entry takes an injected fault, refuses NULL arguments, enters the engine where the
 * call runs inside one, calls engine.c's function and leaves the engine: the checks past
 * the arguments, and the order they run in, are engine.c's.
 */
#include <stddef.h>
#include <stdint.h>

#include "core/engine.h"
#include "base/mock_internal.h"
#include "core/options.h"

MOCK_EXPORT uint32_t lldd_abi_version(void)
{
    return LLDD_ABI_VERSION;
}

MOCK_EXPORT uint64_t lldd_capabilities(void)
{
    return LLDD_CAP_REGISTER | LLDD_CAP_ALLOCATE | LLDD_CAP_COPY | LLDD_CAP_CROSS_PROCESS | LLDD_CAP_MOCK_CONTROL |
           LLDD_CAP_EXT_KEYS;
}

MOCK_EXPORT const char *lldd_backend_name(void)
{
    return "mock";
}

MOCK_EXPORT lldd_status lldd_create(uint64_t cluster_id, int32_t role, lldd_engine **out)
{
    uint32_t code;
    if (mock_fault_take("lldd_create", &code))
        return code;
    if (out == NULL) {
        mock_set_error("lldd_create: out must not be NULL");
        return LLM_PARAM_INVALID;
    }
    return engine_create(cluster_id, role, out);
}

MOCK_EXPORT lldd_status lldd_initialize(lldd_engine *e, const lldd_option *options, size_t num_options)
{
    lldd_status st = engine_options_call_check(e, "lldd_initialize", options, num_options);
    if (st != LLM_SUCCESS)
        return st;
    return engine_initialize(e, options, num_options);
}

MOCK_EXPORT void lldd_finalize(lldd_engine *e)
{
    if (e == NULL)
        return;
    engine_finalize(e);
}

MOCK_EXPORT void lldd_destroy(lldd_engine *e)
{
    if (e == NULL)
        return;
    engine_destroy(e);
}

MOCK_EXPORT lldd_status lldd_set_role(lldd_engine *e, int32_t role, const lldd_option *options, size_t num_options)
{
    static const char fn[] = "lldd_set_role";
    lldd_status st = engine_options_call_check(e, fn, options, num_options);
    if (st == LLM_SUCCESS)
        st = engine_enter(e, fn);
    return ENGINE_RUN(e, st, engine_set_role(e, fn, role, options, num_options));
}

MOCK_EXPORT lldd_status lldd_mock_set_serve_delay(lldd_engine *e, uint32_t delay_ms)
{
    if (e == NULL) {
        mock_set_error("lldd_mock_set_serve_delay: engine must not be NULL");
        return LLM_PARAM_INVALID;
    }
    engine_set_serve_delay(e, delay_ms);
    return LLM_SUCCESS;
}

MOCK_EXPORT lldd_status lldd_mock_set_link_pace(lldd_engine *e, uint64_t cluster_id, uint64_t bytes_per_second,
                                                uint64_t latency_us)
{
    static const char fn[] = "lldd_mock_set_link_pace";
    if (e == NULL) {
        mock_set_error("%s: engine must not be NULL", fn);
        return LLM_PARAM_INVALID;
    }
    return engine_set_link_pace(e, fn, cluster_id, bytes_per_second, latency_us);
}

MOCK_EXPORT lldd_status lldd_mock_drop_connections(lldd_engine *e)
{
    static const char fn[] = "lldd_mock_drop_connections";
    if (e == NULL) {
        mock_set_error("%s: engine must not be NULL", fn);
        return LLM_PARAM_INVALID;
    }
    lldd_status st = engine_enter(e, fn);
    if (st != LLM_SUCCESS)
        return st;
    engine_drop_connections(e);
    engine_leave(e);
    return LLM_SUCCESS;
}

/* A path query of the test hooks: LLDD_MOCK_PATH_NONE for a NULL or unready engine,
 * else `query`'s answer, read inside the engine. */
static uint32_t path_query(lldd_engine *e, const char *fn, uint64_t cluster_id,
                           uint32_t (*query)(engine *, uint64_t))
{
    if (e == NULL || engine_enter(e, fn) != LLM_SUCCESS)
        return LLDD_MOCK_PATH_NONE;
    uint32_t path = query(e, cluster_id);
    engine_leave(e);
    return path;
}

MOCK_EXPORT uint32_t lldd_mock_link_path(lldd_engine *e, uint64_t cluster_id)
{
    return path_query(e, "lldd_mock_link_path", cluster_id, engine_link_path);
}

MOCK_EXPORT uint32_t lldd_mock_last_transfer_path(lldd_engine *e, uint64_t cluster_id)
{
    return path_query(e, "lldd_mock_last_transfer_path", cluster_id, engine_last_transfer_path);
}

MOCK_EXPORT uint64_t lldd_mock_live_engines(void)
{
    return engine_live_engines();
}
