/* Fault injection: make a named exported function fail with a chosen code.
 *
 * Tests arm a fault with lldd_mock_inject_fault(name, code, count, skip); the next
 * `skip` calls of that function go through, the `count` calls after them return
 * `code` before doing anything, and the fault then disarms itself. Faults are
 * process-wide (every thread, every engine), guarded by one mutex, and cost one
 * relaxed atomic load per call while none is armed. */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "base/mock_internal.h"

/* Every exported function that checks for injected faults: the one list of the
 * mock's fallible functions. Kept next to the fault table so that an unknown name
 * is rejected rather than silently ignored; tests/abi/test_abi.py checks that it names
 * exactly the declared functions that can fail, that each of them answers an armed
 * fault before anything else, and tests/acl/test_acl.py does the same for the ACL ones. */
static const char *const k_fault_names[] = {
    "lldd_create", "lldd_initialize", "lldd_set_role", "lldd_link_clusters",
    "lldd_unlink_clusters", "lldd_allocate_cache", "lldd_deallocate_cache",
    "lldd_register_kv_cache", "lldd_unregister_kv_cache", "lldd_pull_kv_cache",
    "lldd_pull_kv_blocks", "lldd_push_kv_cache", "lldd_push_kv_blocks",
    "lldd_copy_kv_cache", "lldd_copy_kv_blocks",
    "lldd_ext_initialize", "lldd_ext_switch_role", "lldd_ext_check_link_status", "lldd_ext_register_cache",
    "lldd_ext_unregister_cache", "lldd_ext_allocate_cache", "lldd_ext_deallocate_cache",
    "lldd_ext_remove_cache_key", "lldd_ext_pull", "lldd_ext_push_layer", "lldd_ext_transfer_layer",
    "lldd_ext_copy_cache", "lldd_ext_copy_blocks", "lldd_ext_swap_blocks", "lldd_ext_link", "lldd_ext_unlink",
    "lldd_ext_query_register_mem_status", "lldd_ext_remap_registered_memory",
    "aclInit", "aclFinalize", "aclFinalizeReference", "aclrtSetDevice", "aclrtResetDevice",
    "aclrtResetDeviceForce", "aclrtGetDevice", "aclrtGetDeviceCount", "aclrtSynchronizeDevice",
    "aclrtMalloc", "aclrtMallocHost", "aclrtFree", "aclrtFreeHost", "aclrtMemcpy",
    "aclrtMemcpyAsync", "aclrtMemset", "aclrtGetMemInfo", "aclrtCreateStream",
    "aclrtDestroyStream", "aclrtSynchronizeStream", "aclrtSynchronizeStreamWithTimeout",
    "aclrtGetVersion",
};
enum { FAULT_NAME_COUNT = sizeof k_fault_names / sizeof k_fault_names[0] };

typedef struct fault_slot {
    uint32_t code;
    uint32_t count;   /* calls still to fail */
    uint32_t skip;    /* calls still to let through first */
} fault_slot;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static fault_slot g_slots[FAULT_NAME_COUNT];
static atomic_uint g_armed;   /* number of slots with count > 0 */

static int name_index(const char *name)
{
    if (name == NULL)
        return -1;
    for (int i = 0; i < FAULT_NAME_COUNT; i++)
        if (strcmp(k_fault_names[i], name) == 0)
            return i;
    return -1;
}

int mock_fault_take(const char *function_name, uint32_t *code)
{
    if (atomic_load_explicit(&g_armed, memory_order_relaxed) == 0)
        return 0;
    int i = name_index(function_name);
    if (i < 0)
        return 0;
    int fire = 0;
    pthread_mutex_lock(&g_lock);
    fault_slot *s = &g_slots[i];
    if (s->count > 0) {
        if (s->skip > 0) {
            s->skip--;
        } else {
            fire = 1;
            *code = s->code;
            if (--s->count == 0)
                atomic_fetch_sub(&g_armed, 1);
        }
    }
    pthread_mutex_unlock(&g_lock);
    if (fire)
        mock_set_error("%s: injected fault, status 0x%08X", function_name, (unsigned)*code);
    return fire;
}

MOCK_EXPORT lldd_status lldd_mock_inject_fault(const char *function_name, uint32_t code, uint32_t count,
                                               uint32_t skip)
{
    int i = name_index(function_name);
    if (i < 0) {
        mock_set_error("lldd_mock_inject_fault: function_name \"%s\" is not a function that can fail",
                       function_name ? function_name : "(null)");
        return LLM_PARAM_INVALID;
    }
    if (code == 0) {
        mock_set_error("lldd_mock_inject_fault: code must be a failure status, not 0");
        return LLM_PARAM_INVALID;
    }
    pthread_mutex_lock(&g_lock);
    fault_slot *s = &g_slots[i];
    if (s->count > 0)
        atomic_fetch_sub(&g_armed, 1);
    s->code = code;
    s->count = count;
    s->skip = skip;
    if (count > 0)
        atomic_fetch_add(&g_armed, 1);
    pthread_mutex_unlock(&g_lock);
    return LLM_SUCCESS;
}

MOCK_EXPORT void lldd_mock_clear_faults(void)
{
    pthread_mutex_lock(&g_lock);
    memset(g_slots, 0, sizeof g_slots);
    atomic_store(&g_armed, 0);
    pthread_mutex_unlock(&g_lock);
}
