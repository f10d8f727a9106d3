/* Temporary: extension functions not written yet. */
#include "engine_ext.h"

#define NOT_YET(name)                                                                              \
    do {                                                                                           \
        uint32_t code_;                                                                            \
        if (mock_fault_take(name, &code_))                                                         \
            return code_;                                                                          \
        mock_set_error("%s: not implemented yet in the mock", name);                               \
        return LLM_FEATURE_NOT_ENABLED;                                                            \
    } while (0)

MOCK_EXPORT lldd_status lldd_ext_link(lldd_engine *e, const char *comm_name, const uint64_t *cluster_ids,
                                      const uint32_t *ranks, size_t num_members, const char *rank_table,
                                      uint64_t *comm_id)
{
    (void)e; (void)comm_name; (void)cluster_ids; (void)ranks; (void)num_members; (void)rank_table; (void)comm_id;
    NOT_YET("lldd_ext_link");
}

MOCK_EXPORT lldd_status lldd_ext_unlink(lldd_engine *e, uint64_t comm_id)
{
    (void)e; (void)comm_id;
    NOT_YET("lldd_ext_unlink");
}

MOCK_EXPORT lldd_status lldd_ext_query_register_mem_status(lldd_engine *e, uint64_t comm_id, uint32_t *status)
{
    (void)e; (void)comm_id; (void)status;
    NOT_YET("lldd_ext_query_register_mem_status");
}

MOCK_EXPORT lldd_status lldd_ext_remap_registered_memory(lldd_engine *e, const uint64_t *addrs, const uint64_t *sizes,
                                                         size_t num)
{
    (void)e; (void)addrs; (void)sizes; (void)num;
    NOT_YET("lldd_ext_remap_registered_memory");
}

void comms_teardown(engine *e)
{
    (void)e;
}

size_t comm_count(engine *e)
{
    (void)e;
    return 0;
}

