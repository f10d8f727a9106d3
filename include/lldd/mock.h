/* Control interface of the mock backend (LLDD_CAP_MOCK_CONTROL): deterministic
 * device sizes, fault injection, and leak accounting for tests. Not exported by
 * the ascend shim.
 *
 * Directive-free declaration fragment.
 */

/* number of mock devices (default 8) and capacity per device (default
 * 64 GiB). Settable before the first ACL call only; later calls give
 * LLM_PARAM_INVALID. */
lldd_status lldd_mock_set_device_count(uint32_t count);
lldd_status lldd_mock_set_device_capacity(uint64_t bytes);

/* Make the named exported function (e.g. "lldd_pull_kv_blocks", "aclrtMalloc")
 * return `code` for `count` calls after letting `skip` calls through. Applies to
 * every thread and engine. An unknown name gives LLM_PARAM_INVALID. */
lldd_status lldd_mock_inject_fault(const char *function_name, uint32_t code, uint32_t count, uint32_t skip);
void lldd_mock_clear_faults(void);

/* Delay every answer this engine gives to its peers by delay_ms (0 = off), so
 * that the peers' transfers and link handshakes time out. */
lldd_status lldd_mock_set_serve_delay(lldd_engine *engine, uint32_t delay_ms);
/* Close every link connection of this engine abruptly, as if its process had
 * died; its link entries stay (peers and this engine then see a dead link). */
lldd_status lldd_mock_drop_connections(lldd_engine *engine);

/* How this engine's link to cluster_id moves bytes (docs/security.md §2.2): none
 * (no such link), same process, process_vm (a peer the kernel identified), or its
 * sockets (any other peer). */
enum {
    LLDD_MOCK_PATH_NONE = 0,
    LLDD_MOCK_PATH_SAME_PROCESS = 1,
    LLDD_MOCK_PATH_PROCESS_VM = 2,
    LLDD_MOCK_PATH_SOCKET = 3,
    LLDD_MOCK_PATH_SHARED = 4
};
uint32_t lldd_mock_link_path(lldd_engine *engine, uint64_t cluster_id);
/* How the last transfer over this engine's link to cluster_id that moved bytes moved
 * them: same process, shared (copies between this process's mappings of the peer's
 * library memory, docs/security.md §2.7), process_vm or socket; none before the first. */
uint32_t lldd_mock_last_transfer_path(lldd_engine *engine, uint64_t cluster_id);

/* Accounting for leak tests: live mock-ACL allocations and live engines. */
uint64_t lldd_mock_live_allocations(void);
uint64_t lldd_mock_live_engines(void);

/* Lint (docs/semantics.md §0): a call the device accepts with a defined but
 * surprising result does what the device does and records a lint in the calling
 * thread's lint record; lldd_mock_lint_count() says how many the calls since the last
 * lldd_mock_lint_clear() recorded (at most 8 are kept: later ones are counted, not
 * stored), lldd_mock_lint_rule(i) the rule number of the i-th (n of PR-n; 1001 for an
 * unknown option key; 0 past the stored ones) and lldd_mock_lint_text(i) its message
 * ("" past the stored ones). With the environment variable LLM_DATADIST_FFI_STRICT=1 the
 * engine refuses such a call instead, with the rule's code, before anything moves. */
uint32_t lldd_mock_lint_count(void);
uint32_t lldd_mock_lint_rule(uint32_t index);
const char *lldd_mock_lint_text(uint32_t index);
void lldd_mock_lint_clear(void);

/* Why each cluster of the calling thread's last lldd_link_clusters/lldd_unlink_clusters
 * got its per-cluster status: lldd_mock_link_reason_count() entries (in the order of the
 * call's clusters; at most 64 are kept), lldd_mock_link_reason(i) the text ("" for a
 * success, and past the kept entries). */
uint32_t lldd_mock_link_reason_count(void);
const char *lldd_mock_link_reason(uint32_t index);

/* The link model: pace the transfers an engine starts (pulls and pushes over its links)
 * so that each takes at least latency_us + bytes * 10^6 / bytes_per_second microseconds
 * (bytes_per_second 0: no bandwidth limit). The bytes move first, then the call sleeps the
 * rest, and lldd_finalize cuts the sleep short. A transfer the model says needs longer than
 * llm.SyncKvCacheWaitTime moves nothing, waits that long and returns LLM_TIMEOUT (PR-35).
 * The engine's options llm_datadist_ffi.mock.LinkBandwidth (bytes per second) and
 * llm_datadist_ffi.mock.LinkLatencyUs set the pace of every link at initialisation; this
 * call overrides it for the link to one cluster id, for the engine's life (at most 64
 * clusters; the same id again replaces its entry). */
lldd_status lldd_mock_set_link_pace(lldd_engine *engine, uint64_t cluster_id, uint64_t bytes_per_second,
                                    uint64_t latency_us);

/* The bytes the calling thread's transfers and copies have moved (a running total from
 * the thread's start): read it before and after a call for the bytes that call moved. */
uint64_t lldd_mock_bytes_moved(void);

/* A floor for the benchmark suite: memcpy of `count` blocks of `block` bytes, block k from
 * src + offsets[k] to dst + offsets[k], in that order, with nothing else (no check per
 * block, no streaming stores): what a plain program pays to copy the regions a transfer
 * moves. dst and src must each lie in one live allocation of the mock's ACL that holds
 * every block (LLM_PARAM_INVALID otherwise, and nothing is copied). */
lldd_status lldd_mock_copy_blocks(void *dst, const void *src, const uint64_t *offsets, uint64_t count,
                                  uint64_t block);
