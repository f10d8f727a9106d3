/* The extension ABI's engine entry points (lldd/ext.h): initialize, switch_role and
 * check_link_status (engine_ext.c).
 *
 * An entry takes an injected fault, refuses NULL arguments or wrong options, enters
 * the engine, calls its module's function and leaves the engine: the checks past the
 * arguments, and the order they run in, are the module's. This file belongs to the
 * extension layer (it calls it), not to the core.
 */
#include <stddef.h>
#include <stdint.h>

#include "core/engine.h"
#include "ext/ext.h"
#include "base/mock_internal.h"
#include "core/options.h"

MOCK_EXPORT lldd_status lldd_ext_initialize(lldd_engine *e, const lldd_option *options, size_t num_options)
{
    static const char fn[] = "lldd_ext_initialize";
    lldd_status st = engine_options_call_check(e, fn, options, num_options);
    if (st != LLM_SUCCESS)
        return st;
    return ext_engine_initialize(e, fn, options, num_options);
}

MOCK_EXPORT lldd_status lldd_ext_switch_role(lldd_engine *e, int32_t role, const lldd_option *options,
                                             size_t num_options)
{
    static const char fn[] = "lldd_ext_switch_role";
    lldd_status st = engine_options_call_check(e, fn, options, num_options);
    if (st == LLM_SUCCESS)
        st = engine_enter(e, fn);
    return ENGINE_RUN(e, st, ext_engine_switch_role(e, fn, role, options, num_options));
}

MOCK_EXPORT lldd_status lldd_ext_check_link_status(lldd_engine *e, uint64_t remote_cluster_id)
{
    static const char fn[] = "lldd_ext_check_link_status";
    lldd_status st = engine_call_enter(e, fn);
    return ENGINE_RUN(e, st, ext_engine_check_link_status(e, fn, remote_cluster_id));
}
