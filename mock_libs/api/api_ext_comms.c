/* The extension ABI's rank-table communicator entry points (lldd/ext.h): link, unlink,
 * query_register_mem_status and remap_registered_memory (engine_ext_comm.c).
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

MOCK_EXPORT lldd_status lldd_ext_link(lldd_engine *e, const char *comm_name, const uint64_t *cluster_ids,
                                      const uint32_t *ranks, size_t num_members, const char *rank_table,
                                      uint64_t *comm_id)
{
    static const char fn[] = "lldd_ext_link";
    lldd_status st = engine_args_enter(e, fn, e == NULL ? "engine" : comm_name == NULL ? "comm_name"
                                       : (cluster_ids == NULL || ranks == NULL) && num_members > 0 ? "cluster_ids and ranks"
                                       : rank_table == NULL ? "rank_table" : comm_id == NULL ? "comm_id" : NULL);
    return ENGINE_RUN(e, st, ext_comm_link(e, fn, comm_name, cluster_ids, ranks, num_members, rank_table, comm_id));
}

MOCK_EXPORT lldd_status lldd_ext_unlink(lldd_engine *e, uint64_t comm_id)
{
    static const char fn[] = "lldd_ext_unlink";
    lldd_status st = engine_call_enter(e, fn);
    return ENGINE_RUN(e, st, ext_comm_unlink(e, fn, comm_id));
}

MOCK_EXPORT lldd_status lldd_ext_query_register_mem_status(lldd_engine *e, uint64_t comm_id, uint32_t *status)
{
    static const char fn[] = "lldd_ext_query_register_mem_status";
    lldd_status st = engine_args_enter(e, fn, e == NULL ? "engine" : status == NULL ? "status" : NULL);
    return ENGINE_RUN(e, st, ext_comm_query_mem_status(e, fn, comm_id, status));
}

MOCK_EXPORT lldd_status lldd_ext_remap_registered_memory(lldd_engine *e, const uint64_t *addrs, const uint64_t *sizes,
                                                         size_t num)
{
    static const char fn[] = "lldd_ext_remap_registered_memory";
    lldd_status st = engine_args_enter(e, fn, e == NULL ? "engine"
                                       : (addrs == NULL || sizes == NULL) && num > 0 ? "addrs and sizes (num > 0)"
                                       : NULL);
    return ENGINE_RUN(e, st, ext_comm_remap_memory(e, fn, addrs, sizes, num));
}
