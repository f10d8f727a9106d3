/* The native link calls' entry points (lldd/api.h): LinkClusters and UnlinkClusters.
 *
 * An entry takes an injected fault, refuses NULL arguments, enters the engine, calls
 * the links module's function (engine_link_client.c) and leaves the engine: the checks past
 * the arguments, and the order they run in, are the links module's.
 */
#include <stddef.h>
#include <stdint.h>

#include "core/engine.h"
#include "wire/links.h"
#include "base/mock_internal.h"

MOCK_EXPORT lldd_status lldd_link_clusters(lldd_engine *e, const lldd_cluster_info *clusters, size_t num_clusters,
                                           int32_t timeout_in_millis, lldd_status *rets, size_t *num_rets)
{
    static const char fn[] = "lldd_link_clusters";
    lldd_status st = clusters_call_enter(e, fn, clusters, num_clusters, rets, num_rets);
    return ENGINE_RUN(e, st, clusters_call(e, fn, clusters, num_clusters, timeout_in_millis, 0, 0, rets, num_rets));
}

MOCK_EXPORT lldd_status lldd_unlink_clusters(lldd_engine *e, const lldd_cluster_info *clusters, size_t num_clusters,
                                             int32_t timeout_in_millis, int32_t force_flag, lldd_status *rets,
                                             size_t *num_rets)
{
    static const char fn[] = "lldd_unlink_clusters";
    lldd_status st = clusters_call_enter(e, fn, clusters, num_clusters, rets, num_rets);
    return ENGINE_RUN(e, st,
                      clusters_call(e, fn, clusters, num_clusters, timeout_in_millis, 1, force_flag != 0, rets,
                                    num_rets));
}
