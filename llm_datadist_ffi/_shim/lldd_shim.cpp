// The ascend backend: the project's flat C ABI (include/lldd/api.h) implemented over
// the vendor's C++ class llm_datadist::LlmDataDist (docs/reference/cpp-api.md).
//
// cffi cannot call C++ (std::map, std::vector, ge::AscendString), so on an Ascend
// host this one file is compiled against the installed toolkit headers and linked
// to libllm_datadist.so (docs/ascend.md, docs/reference/cpp-api.md §8.4). Each C function:
//
//  1. checks the C-only hazards the vendor's reference parameters cannot have (a NULL
//     engine, struct or out-pointer; a NULL array with a non-zero count; a value the
//     vendor's narrower C++ type cannot hold) and answers LLM_PARAM_INVALID itself;
//  2. builds the vendor's types, every struct value-initialised (`CacheIndex idx{};`)
//     because the vendor leaves `reserved` indeterminate otherwise;
//  3. calls the method and returns its status unchanged -- including the raw ACL
//     codes some methods pass through and the LLM_FEATURE_NOT_ENABLED that the v2
//     class answers for AllocateCache, DeallocateCache and CopyKv* (PR-9 in
//     docs/reference/semantics.md is a mock-only rule; the shim forwards and lets the vendor say no);
//  4. catches every C++ exception at the boundary and reports it as LLM_FAILED.
//
// The extension functions (include/lldd/ext.h: what only the vendor's Python layer
// can do) have no counterpart in the C++ class; they answer LLM_FEATURE_NOT_ENABLED
// and name what to use instead.
//
// After any non-zero status the calling thread's last-error text names the method,
// the status and, when the ACL runtime is loaded, the runtime's own message for the
// thread (aclGetRecentErrMsg: on a device the vendor's error-manager text, on the
// test double the mock's detailed message). The text is kept until the next failure
// on that thread, like the mock's and like aclGetRecentErrMsg.
//
// Only names of the vendor's public header are used (docs/reference/cpp-api.md §7). The ACL headers
// are never included (docs/reference/acl.md §5.1): the one ACL function needed is looked up at run
// time, so the shim neither links the ACL runtime nor depends on its header layout.
#include "llm_datadist/llm_datadist.h"
#include "llm_datadist_ffi.h"

#include <dlfcn.h>

#include <atomic>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <initializer_list>
#include <map>
#include <new>
#include <vector>

#define LLDD_SHIM_EXPORT extern "C" __attribute__((visibility("default")))

namespace vendor = llm_datadist;

// The opaque handle of the C ABI owns one vendor engine. The class is neither
// copyable nor movable (a pimpl with a user-declared destructor), so it lives
// inside the handle, allocated with new.
struct lldd_engine {
  lldd_engine(uint64_t cluster_id, vendor::LlmRole role) : dist(cluster_id, role) {}
  vendor::LlmDataDist dist;
};

namespace {

// ---- the thread-local last error ----------------------------------------------------------
// A fixed buffer: writing it never allocates, so reporting an error (even a
// std::bad_alloc) cannot itself throw.

constexpr size_t kErrorCapacity = 2048;
thread_local char t_last_error[kErrorCapacity];

__attribute__((format(printf, 1, 2))) void SetError(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  const int n = std::vsnprintf(t_last_error, sizeof t_last_error, fmt, ap);
  va_end(ap);
  if (n < 0) {
    std::snprintf(t_last_error, sizeof t_last_error, "(unformattable error message)");
  }
}

// ---- status names ---------------------------------------------------------------------------
// The table is generated (llm_datadist_ffi/_tools/_codegen.py): the LLM codes from the status table,
// which also writes the C ABI header; the ACL runtime codes, some of which reach LLM-DataDist
// callers unchanged (docs/reference/acl.md §5.3), from include/acl/types.h.

struct StatusName {
  uint32_t code;
  const char *name;
};

#define LLDD_STATUS_NAME(code) {static_cast<uint32_t>(code), #code}
// BEGIN GENERATED from the status table by llm_datadist_ffi/_tools/_codegen.py (python -m llm_datadist_ffi._tools._codegen)
constexpr StatusName kStatusNames[] = {
    LLDD_STATUS_NAME(LLM_SUCCESS),
    LLDD_STATUS_NAME(LLM_FAILED),
    LLDD_STATUS_NAME(LLM_WAIT_PROC_TIMEOUT),
    LLDD_STATUS_NAME(LLM_KV_CACHE_NOT_EXIST),
    LLDD_STATUS_NAME(LLM_REPEAT_REQUEST),
    LLDD_STATUS_NAME(LLM_REQUEST_ALREADY_COMPLETED),
    LLDD_STATUS_NAME(LLM_PARAM_INVALID),
    LLDD_STATUS_NAME(LLM_ENGINE_FINALIZED),
    LLDD_STATUS_NAME(LLM_NOT_YET_LINK),
    LLDD_STATUS_NAME(LLM_ALREADY_LINK),
    LLDD_STATUS_NAME(LLM_LINK_FAILED),
    LLDD_STATUS_NAME(LLM_UNLINK_FAILED),
    LLDD_STATUS_NAME(LLM_NOTIFY_PROMPT_UNLINK_FAILED),
    LLDD_STATUS_NAME(LLM_CLUSTER_NUM_EXCEED_LIMIT),
    LLDD_STATUS_NAME(LLM_PROCESSING_LINK),
    LLDD_STATUS_NAME(LLM_DEVICE_OUT_OF_MEMORY),
    LLDD_STATUS_NAME(LLM_PREFIX_ALREADY_EXIST),
    LLDD_STATUS_NAME(LLM_PREFIX_NOT_EXIST),
    LLDD_STATUS_NAME(LLM_SEQ_LEN_OVER_LIMIT),
    LLDD_STATUS_NAME(LLM_NO_FREE_BLOCK),
    LLDD_STATUS_NAME(LLM_BLOCKS_OUT_OF_MEMORY),
    LLDD_STATUS_NAME(LLM_CACHE_INCOMPATIBLE),
    LLDD_STATUS_NAME(LLM_CACHE_KEY_ALREADY_EXIST),
    LLDD_STATUS_NAME(LLM_COPY_CACHE_FAILED),
    LLDD_STATUS_NAME(LLM_CACHE_ID_ALREADY_EXIST),
    LLDD_STATUS_NAME(LLM_EXIST_LINK),
    LLDD_STATUS_NAME(LLM_FEATURE_NOT_ENABLED),
    LLDD_STATUS_NAME(LLM_TIMEOUT),
    LLDD_STATUS_NAME(LLM_LINK_BUSY),
    LLDD_STATUS_NAME(LLM_OUT_OF_MEMORY),
    {107000U, "ACL_ERROR_RT_PARAM_INVALID"},
    {107001U, "ACL_ERROR_RT_INVALID_DEVICEID"},
    {107002U, "ACL_ERROR_RT_CONTEXT_NULL"},
    {107003U, "ACL_ERROR_RT_STREAM_CONTEXT"},
    {107019U, "ACL_ERROR_RT_WAIT_TIMEOUT"},
    {107020U, "ACL_ERROR_RT_TASK_TIMEOUT"},
    {107023U, "ACL_ERROR_RT_STREAM_ABORT"},
    {207000U, "ACL_ERROR_RT_FEATURE_NOT_SUPPORT"},
    {207001U, "ACL_ERROR_RT_MEMORY_ALLOCATION"},
    {207002U, "ACL_ERROR_RT_MEMORY_FREE"},
    {207004U, "ACL_ERROR_RT_NO_DEVICE"},
    {207018U, "ACL_ERROR_RT_DEVICE_OOM"},
    {507000U, "ACL_ERROR_RT_INTERNAL_ERROR"},
    {507046U, "ACL_ERROR_RT_STREAM_SYNC_TIMEOUT"},
    {507053U, "ACL_ERROR_RT_DEVICE_MEM_ERROR"},
    {507057U, "ACL_ERROR_RT_SUSPECT_REMOTE_ERROR"},
    {507899U, "ACL_ERROR_RT_DRV_INTERNAL_ERROR"},
};
// END GENERATED
#undef LLDD_STATUS_NAME

const char *StatusNameOf(uint32_t status) {
  for (const StatusName &entry : kStatusNames) {
    if (entry.code == status) {
      return entry.name;
    }
  }
  return "an unnamed status";
}

// ---- the ACL runtime's message for this thread ---------------------------------------------

using AclRecentErrMsgFn = const char *(*)();

// aclGetRecentErrMsg of the runtime already in the process, or nullptr. The vendor
// library brings the runtime in as a dependency, so it is in the shim's lookup
// scope even when Python loaded the shim RTLD_LOCAL; the NOLOAD probes cover a
// runtime loaded separately. Resolved on the first failure, not at load time, and
// retried until found (the failure path is not hot).
AclRecentErrMsgFn AclRecentErrMsg() {
  static std::atomic<AclRecentErrMsgFn> cached{nullptr};
  AclRecentErrMsgFn fn = cached.load(std::memory_order_acquire);
  if (fn != nullptr) {
    return fn;
  }
  void *sym = dlsym(RTLD_DEFAULT, "aclGetRecentErrMsg");
  for (const char *lib : {"libacl_rt.so", "libascendcl.so"}) {
    if (sym != nullptr) {
      break;
    }
    void *handle = dlopen(lib, RTLD_NOW | RTLD_NOLOAD);
    if (handle != nullptr) {
      sym = dlsym(handle, "aclGetRecentErrMsg");
      dlclose(handle);  // still loaded: NOLOAD only found an existing object
    }
  }
  fn = reinterpret_cast<AclRecentErrMsgFn>(sym);
  if (fn != nullptr) {
    cached.store(fn, std::memory_order_release);
  }
  return fn;
}

// The runtime's text without trailing line breaks, or "" when there is none.
void AclMessage(char *out, size_t capacity) {
  out[0] = '\0';
  const AclRecentErrMsgFn fn = AclRecentErrMsg();
  const char *text = fn != nullptr ? fn() : nullptr;
  if (text == nullptr) {
    return;
  }
  std::snprintf(out, capacity, "%s", text);
  size_t len = std::strlen(out);
  while (len > 0 && (out[len - 1] == '\n' || out[len - 1] == '\r' || out[len - 1] == ' ')) {
    out[--len] = '\0';
  }
}

// ---- one call across the boundary -----------------------------------------------------------

// A C argument the vendor's C++ signature cannot receive (or, after the call, a
// result the C caller's arrays cannot take). Thrown by the conversion helpers,
// caught by Guard; never crosses the C boundary.
struct ArgumentError {
  char message[512];
  bool vendor_called;  // the method ran and its effect was undone
};

__attribute__((format(printf, 2, 0))) void FormatInto(ArgumentError &error, const char *fmt, va_list ap) {
  std::vsnprintf(error.message, sizeof error.message, fmt, ap);
}

[[noreturn]] __attribute__((format(printf, 1, 2))) void Reject(const char *fmt, ...) {
  ArgumentError error{};
  va_list ap;
  va_start(ap, fmt);
  FormatInto(error, fmt, ap);
  va_end(ap);
  throw error;
}

[[noreturn]] __attribute__((format(printf, 1, 2))) void RejectResult(const char *fmt, ...) {
  ArgumentError error{};
  error.vendor_called = true;
  va_list ap;
  va_start(ap, fmt);
  FormatInto(error, fmt, ap);
  va_end(ap);
  throw error;
}

// What a C function knows about the call it is making.
struct Call {
  const char *function;  // the C name, e.g. "lldd_pull_kv_blocks"
  const char *method;    // the vendor method, e.g. "PullKvBlocks"
  // Context that the runtime's message cannot give, e.g. that a value the C++ type
  // cannot hold was substituted; appended to the message of a failing status.
  char note[256];
  // For the methods the v2 class never implements: what to use instead. When the
  // vendor answers LLM_FEATURE_NOT_ENABLED it says nothing of its own, so this is
  // the whole explanation (the runtime's message would be an older one).
  const char *instead;
};

void ReportVendorStatus(const Call &call, uint32_t status) {
  if (call.instead != nullptr && status == LLM_FEATURE_NOT_ENABLED) {
    SetError("%s returned %s (0x%08X): the vendor's v2 LlmDataDist does not implement %s on any engine; %s "
             "(the mock implements it only with a memory pool, project rule PR-9)",
             call.method, StatusNameOf(status), status, call.method, call.instead);
    return;
  }
  char acl[1024];
  AclMessage(acl, sizeof acl);
  const bool has_note = call.note[0] != '\0';
  const bool has_acl = acl[0] != '\0';
  SetError("%s returned %s (0x%08X)%s%s%s%s", call.method, StatusNameOf(status), status,
           (has_note || has_acl) ? ": " : "", call.note, (has_note && has_acl) ? "; " : "", acl);
}

// Runs `body` (which returns the vendor's status) and turns everything that can go
// wrong on the way into a status and a last-error text. Never throws.
template <typename Body>
lldd_status Guard(const char *function, const char *method, Body &&body) noexcept {
  Call call{function, method, {}, nullptr};
  try {
    const uint32_t status = body(call);
    if (status != LLM_SUCCESS) {
      ReportVendorStatus(call, status);
    }
    return status;
  } catch (const ArgumentError &error) {
    SetError("%s: %s (LLM_PARAM_INVALID, 0x%08X)%s%s%s", function, error.message,
             static_cast<uint32_t>(LLM_PARAM_INVALID), error.vendor_called ? "" : "; ",
             error.vendor_called ? "" : method, error.vendor_called ? "" : " was not called");
    return LLM_PARAM_INVALID;
  } catch (const std::bad_alloc &error) {
    SetError("%s: out of host memory while calling %s (std::bad_alloc: %s) (LLM_FAILED)", function, method,
             error.what());
    return LLM_FAILED;
  } catch (const std::exception &error) {
    SetError("%s: %s threw a C++ exception: %s (LLM_FAILED)", function, method, error.what());
    return LLM_FAILED;
  } catch (...) {
    SetError("%s: %s threw a C++ exception that is not a std::exception (LLM_FAILED)", function, method);
    return LLM_FAILED;
  }
}

// ---- C structs -> vendor types --------------------------------------------------------------

vendor::LlmDataDist &Engine(lldd_engine *engine) {
  if (engine == nullptr) {
    Reject("engine is NULL");
  }
  return engine->dist;
}

template <typename T>
const T &Required(const T *ptr, const char *name) {
  if (ptr == nullptr) {
    Reject("%s is NULL", name);
  }
  return *ptr;
}

template <typename T>
void RequireOut(T *ptr, const char *name) {
  if (ptr == nullptr) {
    Reject("%s is NULL", name);
  }
}

template <typename T>
void RequireArray(const T *ptr, size_t count, const char *name) {
  if (ptr == nullptr && count != 0) {
    Reject("%s is NULL but its count is %zu", name, count);
  }
}

std::vector<uint64_t> U64Vector(const uint64_t *items, size_t count, const char *name) {
  RequireArray(items, count, name);
  return count == 0 ? std::vector<uint64_t>() : std::vector<uint64_t>(items, items + count);
}

std::map<vendor::AscendString, vendor::AscendString> OptionMap(const lldd_option *options, size_t count) {
  RequireArray(options, count, "options");
  std::map<vendor::AscendString, vendor::AscendString> out;
  for (size_t i = 0; i < count; ++i) {
    if (options[i].key == nullptr) {
      Reject("options[%zu].key is NULL", i);
    }
    out[vendor::AscendString(options[i].key)] = vendor::AscendString(options[i].value);  // a repeat keeps the last
  }
  return out;
}

std::vector<vendor::IpInfo> IpInfos(const lldd_ip_info *ips, size_t count, const char *name, size_t cluster) {
  if (ips == nullptr && count != 0) {
    Reject("clusters[%zu].%s is NULL but its count is %zu", cluster, name, count);
  }
  std::vector<vendor::IpInfo> out(count);  // value-initialised elements
  for (size_t i = 0; i < count; ++i) {
    out[i].ip = vendor::AscendString(ips[i].ip);  // NULL -> empty, which the vendor rejects
    out[i].port = ips[i].port;
  }
  return out;
}

std::vector<vendor::ClusterInfo> Clusters(const lldd_cluster_info *clusters, size_t count) {
  RequireArray(clusters, count, "clusters");
  std::vector<vendor::ClusterInfo> out(count);
  for (size_t i = 0; i < count; ++i) {
    out[i].remote_cluster_id = clusters[i].remote_cluster_id;
    out[i].remote_role_type = clusters[i].remote_role_type;
    out[i].local_ip_infos =
        IpInfos(clusters[i].local_ip_infos, clusters[i].num_local_ip_infos, "local_ip_infos", i);
    out[i].remote_ip_infos =
        IpInfos(clusters[i].remote_ip_infos, clusters[i].num_remote_ip_infos, "remote_ip_infos", i);
  }
  return out;
}

// ge::DataType has no fixed underlying type, so only 0 .. DT_MAX are values it can
// certainly hold; converting anything else would be undefined behaviour. Such a
// value is passed as DT_UNDEFINED, which the vendor rejects with PARAM_INVALID at
// the very step where it would have rejected the original (after the checks that
// precede it, and after a registration has consumed its cache id), so the status
// and the engine's state match what the value itself would have produced.
bool ToDataType(int32_t value, vendor::DataType &out) {
  if (value < 0 || value > static_cast<int32_t>(ge::DT_MAX)) {
    out = vendor::DT_UNDEFINED;
    return false;
  }
  out = static_cast<vendor::DataType>(value);
  return true;
}

// Returns false when the data type had to be substituted (see ToDataType).
bool ToCacheDesc(const lldd_cache_desc &in, const char *name, vendor::CacheDesc &out) {
  RequireArray(in.shape, in.shape_len, name);
  out.placement = static_cast<vendor::CachePlacement>(in.placement);
  out.num_tensors = in.num_tensors;
  const bool exact = ToDataType(in.data_type, out.data_type);
  out.shape.assign(in.shape, in.shape + in.shape_len);
  return exact;
}

// Pulls and pushes read only cache_id, placement and num_tensors of a Cache
// (docs/reference/cpp-api.md §5), so a substituted data type there changes nothing.
vendor::Cache ToCache(const lldd_cache &in, const char *name) {
  char field[64];
  std::snprintf(field, sizeof field, "%s->tensor_addrs", name);
  RequireArray(in.tensor_addrs, in.num_tensor_addrs, field);
  std::snprintf(field, sizeof field, "%s->cache_desc.shape", name);
  vendor::Cache out{};
  out.cache_id = in.cache_id;
  out.tensor_addrs.assign(in.tensor_addrs, in.tensor_addrs + in.num_tensor_addrs);
  ToCacheDesc(in.cache_desc, field, out.cache_desc);
  return out;
}

vendor::CacheIndex ToCacheIndex(const lldd_cache_index &in) {
  vendor::CacheIndex out{};
  out.cluster_id = in.cluster_id;
  out.cache_id = in.cache_id;
  out.batch_index = in.batch_index;
  return out;
}

// NULL means the vendor's default KvCacheExtParam{}. tensor_num_per_layer is wider
// in the C ABI so that a value the vendor's uint8_t cannot hold is rejected instead
// of being truncated into a different, possibly valid, count. 0 fits and is
// forwarded: the vendor rejects it itself.
vendor::KvCacheExtParam ToExtParam(const lldd_ext_param *in) {
  vendor::KvCacheExtParam out{};
  if (in == nullptr) {
    return out;
  }
  if (in->tensor_num_per_layer > UINT8_MAX) {
    Reject("ext_param->tensor_num_per_layer is %u; the vendor's KvCacheExtParam holds it in a uint8_t, "
           "so it must be at most 255",
           in->tensor_num_per_layer);
  }
  out.src_layer_range = {in->src_layer_first, in->src_layer_second};
  out.dst_layer_range = {in->dst_layer_first, in->dst_layer_second};
  out.tensor_num_per_layer = static_cast<uint8_t>(in->tensor_num_per_layer);
  return out;
}

void NoteSubstitutedDataType(Call &call, int32_t value) {
  std::snprintf(call.note, sizeof call.note,
                "cache_desc->data_type %d is not a ge::DataType value (0 .. %d); it was passed as DT_UNDEFINED",
                value, static_cast<int>(ge::DT_MAX));
}

template <typename Fn>
lldd_status LinkOrUnlink(const char *function, const char *method, lldd_engine *engine,
                         const lldd_cluster_info *clusters, size_t num_clusters, lldd_status *rets,
                         size_t *num_rets, Fn &&invoke) {
  if (num_rets != nullptr) {
    *num_rets = 0;
  }
  return Guard(function, method, [&](Call &) -> uint32_t {
    vendor::LlmDataDist &dist = Engine(engine);
    RequireOut(num_rets, "num_rets");
    RequireArray(rets, num_clusters, "rets");
    const std::vector<vendor::ClusterInfo> infos = Clusters(clusters, num_clusters);
    std::vector<vendor::Status> results;  // empty: the vendor appends one entry per cluster
    const uint32_t status = invoke(dist, infos, results);
    const size_t n = results.size() < num_clusters ? results.size() : num_clusters;
    for (size_t i = 0; i < n; ++i) {
      rets[i] = results[i];
    }
    *num_rets = n;
    return status;
  });
}

}  // namespace

// ---- version, capabilities, last error ------------------------------------------------------

LLDD_SHIM_EXPORT uint32_t lldd_abi_version(void) { return LLDD_ABI_VERSION; }

// Registration and cross-process links only: the v2 class answers
// FEATURE_NOT_ENABLED for allocation and copies, and the shim offers neither the
// mock's control interface nor the extension functions.
LLDD_SHIM_EXPORT uint64_t lldd_capabilities(void) { return LLDD_CAP_REGISTER | LLDD_CAP_CROSS_PROCESS; }

LLDD_SHIM_EXPORT const char *lldd_backend_name(void) { return "ascend"; }

LLDD_SHIM_EXPORT const char *lldd_last_error(void) { return t_last_error; }

// ---- engine life cycle ----------------------------------------------------------------------

LLDD_SHIM_EXPORT lldd_status lldd_create(uint64_t cluster_id, int32_t role, lldd_engine **out) {
  if (out != nullptr) {
    *out = nullptr;
  }
  return Guard("lldd_create", "LlmDataDist::LlmDataDist", [&](Call &) -> uint32_t {
    RequireOut(out, "out");
    // LlmRole has a fixed underlying type (int32_t), so every value converts; an
    // invalid role is the vendor's to reject, in Initialize (docs/reference/cpp-api.md §6.3).
    *out = new lldd_engine(cluster_id, static_cast<vendor::LlmRole>(role));
    return LLM_SUCCESS;
  });
}

LLDD_SHIM_EXPORT void lldd_destroy(lldd_engine *engine) {
  if (engine == nullptr) {
    return;
  }
  Guard("lldd_destroy", "LlmDataDist::~LlmDataDist", [&](Call &) -> uint32_t {
    delete engine;  // the destructor finalizes an initialised engine
    return LLM_SUCCESS;
  });
}

LLDD_SHIM_EXPORT lldd_status lldd_initialize(lldd_engine *engine, const lldd_option *options, size_t num_options) {
  return Guard("lldd_initialize", "Initialize", [&](Call &) -> uint32_t {
    vendor::LlmDataDist &dist = Engine(engine);
    return dist.Initialize(OptionMap(options, num_options));
  });
}

LLDD_SHIM_EXPORT void lldd_finalize(lldd_engine *engine) {
  if (engine == nullptr) {
    return;  // nothing to finalize, and no status to report a NULL with
  }
  Guard("lldd_finalize", "Finalize", [&](Call &) -> uint32_t {
    Engine(engine).Finalize();
    return LLM_SUCCESS;
  });
}

LLDD_SHIM_EXPORT lldd_status lldd_set_role(lldd_engine *engine, int32_t role, const lldd_option *options,
                                           size_t num_options) {
  return Guard("lldd_set_role", "SetRole", [&](Call &) -> uint32_t {
    vendor::LlmDataDist &dist = Engine(engine);
    return dist.SetRole(static_cast<vendor::LlmRole>(role), OptionMap(options, num_options));
  });
}

// ---- links ----------------------------------------------------------------------------------

LLDD_SHIM_EXPORT lldd_status lldd_link_clusters(lldd_engine *engine, const lldd_cluster_info *clusters,
                                                size_t num_clusters, int32_t timeout_in_millis, lldd_status *rets,
                                                size_t *num_rets) {
  return LinkOrUnlink("lldd_link_clusters", "LinkLlmClusters", engine, clusters, num_clusters, rets, num_rets,
                      [&](vendor::LlmDataDist &dist, const std::vector<vendor::ClusterInfo> &infos,
                          std::vector<vendor::Status> &results) {
                        return dist.LinkLlmClusters(infos, results, timeout_in_millis);
                      });
}

LLDD_SHIM_EXPORT lldd_status lldd_unlink_clusters(lldd_engine *engine, const lldd_cluster_info *clusters,
                                                  size_t num_clusters, int32_t timeout_in_millis,
                                                  int32_t force_flag, lldd_status *rets, size_t *num_rets) {
  return LinkOrUnlink("lldd_unlink_clusters", "UnlinkLlmClusters", engine, clusters, num_clusters, rets, num_rets,
                      [&](vendor::LlmDataDist &dist, const std::vector<vendor::ClusterInfo> &infos,
                          std::vector<vendor::Status> &results) {
                        return dist.UnlinkLlmClusters(infos, results, timeout_in_millis, force_flag != 0);
                      });
}

// ---- caches ---------------------------------------------------------------------------------

LLDD_SHIM_EXPORT lldd_status lldd_allocate_cache(lldd_engine *engine, const lldd_cache_desc *cache_desc,
                                                 int64_t *cache_id, uint64_t *tensor_addrs, size_t addrs_capacity) {
  return Guard("lldd_allocate_cache", "AllocateCache", [&](Call &call) -> uint32_t {
    vendor::LlmDataDist &dist = Engine(engine);
    const lldd_cache_desc &c_desc = Required(cache_desc, "cache_desc");
    RequireOut(cache_id, "cache_id");
    vendor::CacheDesc desc{};
    if (!ToCacheDesc(c_desc, "cache_desc->shape", desc)) {
      NoteSubstitutedDataType(call, c_desc.data_type);
    }
    vendor::Cache cache{};
    call.instead = "register memory allocated with aclrtMalloc through lldd_register_kv_cache instead";
    const uint32_t status = dist.AllocateCache(desc, cache);
    if (status != LLM_SUCCESS) {
      return status;
    }
    // The room for the addresses is checked only now: the v2 class refuses every
    // allocation anyway, and its answer comes first (as the mock's "no pool" does).
    // A generation that does allocate (v1) reports the addresses it filled in; the
    // caller's array must hold them all, or the cache is given back at once.
    if (tensor_addrs == nullptr || cache.tensor_addrs.size() > addrs_capacity) {
      const uint32_t undo = dist.DeallocateCache(cache.cache_id);
      RejectResult("tensor_addrs has room for %zu addresses but the allocated cache has %zu; the cache was "
             "deallocated again (status 0x%08X)",
             tensor_addrs == nullptr ? static_cast<size_t>(0) : addrs_capacity, cache.tensor_addrs.size(), undo);
    }
    *cache_id = cache.cache_id;
    for (size_t i = 0; i < cache.tensor_addrs.size(); ++i) {
      tensor_addrs[i] = cache.tensor_addrs[i];
    }
    return status;
  });
}

LLDD_SHIM_EXPORT lldd_status lldd_deallocate_cache(lldd_engine *engine, int64_t cache_id) {
  return Guard("lldd_deallocate_cache", "DeallocateCache", [&](Call &call) -> uint32_t {
    vendor::LlmDataDist &dist = Engine(engine);
    call.instead = "unregister registered memory with lldd_unregister_kv_cache and free it with aclrtFree";
    return dist.DeallocateCache(cache_id);
  });
}

LLDD_SHIM_EXPORT lldd_status lldd_register_kv_cache(lldd_engine *engine, const lldd_cache_desc *cache_desc,
                                                    const uint64_t *addrs, size_t num_addrs, int64_t *cache_id) {
  return Guard("lldd_register_kv_cache", "RegisterKvCache", [&](Call &call) -> uint32_t {
    vendor::LlmDataDist &dist = Engine(engine);
    const lldd_cache_desc &c_desc = Required(cache_desc, "cache_desc");
    RequireOut(cache_id, "cache_id");
    vendor::CacheDesc desc{};
    const bool exact_type = ToCacheDesc(c_desc, "cache_desc->shape", desc);
    if (!exact_type) {
      NoteSubstitutedDataType(call, c_desc.data_type);
    }
    const std::vector<uint64_t> addr_list = U64Vector(addrs, num_addrs, "addrs");
    const vendor::RegisterCfg cfg{};
    int64_t id = -1;
    const uint32_t status = dist.RegisterKvCache(desc, addr_list, cfg, id);
    if (status == LLM_SUCCESS && !exact_type) {
      // Unreachable with a vendor that rejects DT_UNDEFINED as documented; never
      // leave a cache registered under a type the caller did not ask for.
      const uint32_t undo = dist.UnregisterKvCache(id);
      RejectResult("cache_desc->data_type %d is not a ge::DataType value, yet the vendor accepted it as "
             "DT_UNDEFINED; the registration was undone (status 0x%08X)",
             c_desc.data_type, undo);
    }
    if (status == LLM_SUCCESS) {
      *cache_id = id;
    }
    return status;
  });
}

LLDD_SHIM_EXPORT lldd_status lldd_unregister_kv_cache(lldd_engine *engine, int64_t cache_id) {
  return Guard("lldd_unregister_kv_cache", "UnregisterKvCache",
               [&](Call &) -> uint32_t { return Engine(engine).UnregisterKvCache(cache_id); });
}

// ---- data movement --------------------------------------------------------------------------

LLDD_SHIM_EXPORT lldd_status lldd_pull_kv_cache(lldd_engine *engine, const lldd_cache_index *src_cache_index,
                                                const lldd_cache *dst_cache, uint32_t batch_index, int64_t size,
                                                const lldd_ext_param *ext_param) {
  return Guard("lldd_pull_kv_cache", "PullKvCache", [&](Call &) -> uint32_t {
    vendor::LlmDataDist &dist = Engine(engine);
    const vendor::CacheIndex src = ToCacheIndex(Required(src_cache_index, "src_cache_index"));
    const vendor::Cache dst = ToCache(Required(dst_cache, "dst_cache"), "dst_cache");
    const vendor::KvCacheExtParam ext = ToExtParam(ext_param);
    return dist.PullKvCache(src, dst, batch_index, size, ext);
  });
}

LLDD_SHIM_EXPORT lldd_status lldd_pull_kv_blocks(lldd_engine *engine, const lldd_cache_index *src_cache_index,
                                                 const lldd_cache *dst_cache, const uint64_t *src_blocks,
                                                 size_t num_src_blocks, const uint64_t *dst_blocks,
                                                 size_t num_dst_blocks, const lldd_ext_param *ext_param) {
  return Guard("lldd_pull_kv_blocks", "PullKvBlocks", [&](Call &) -> uint32_t {
    vendor::LlmDataDist &dist = Engine(engine);
    const vendor::CacheIndex src = ToCacheIndex(Required(src_cache_index, "src_cache_index"));
    const vendor::Cache dst = ToCache(Required(dst_cache, "dst_cache"), "dst_cache");
    const std::vector<uint64_t> src_list = U64Vector(src_blocks, num_src_blocks, "src_blocks");
    const std::vector<uint64_t> dst_list = U64Vector(dst_blocks, num_dst_blocks, "dst_blocks");
    const vendor::KvCacheExtParam ext = ToExtParam(ext_param);
    return dist.PullKvBlocks(src, dst, src_list, dst_list, ext);
  });
}

LLDD_SHIM_EXPORT lldd_status lldd_push_kv_cache(lldd_engine *engine, const lldd_cache *src_cache,
                                                const lldd_cache_index *dst_cache_index, uint32_t src_batch_index,
                                                int64_t size, const lldd_ext_param *ext_param) {
  return Guard("lldd_push_kv_cache", "PushKvCache", [&](Call &) -> uint32_t {
    vendor::LlmDataDist &dist = Engine(engine);
    const vendor::Cache src = ToCache(Required(src_cache, "src_cache"), "src_cache");
    const vendor::CacheIndex dst = ToCacheIndex(Required(dst_cache_index, "dst_cache_index"));
    const vendor::KvCacheExtParam ext = ToExtParam(ext_param);
    return dist.PushKvCache(src, dst, src_batch_index, size, ext);
  });
}

LLDD_SHIM_EXPORT lldd_status lldd_push_kv_blocks(lldd_engine *engine, const lldd_cache *src_cache,
                                                 const lldd_cache_index *dst_cache_index, const uint64_t *src_blocks,
                                                 size_t num_src_blocks, const uint64_t *dst_blocks,
                                                 size_t num_dst_blocks, const lldd_ext_param *ext_param) {
  return Guard("lldd_push_kv_blocks", "PushKvBlocks", [&](Call &) -> uint32_t {
    vendor::LlmDataDist &dist = Engine(engine);
    const vendor::Cache src = ToCache(Required(src_cache, "src_cache"), "src_cache");
    const vendor::CacheIndex dst = ToCacheIndex(Required(dst_cache_index, "dst_cache_index"));
    const std::vector<uint64_t> src_list = U64Vector(src_blocks, num_src_blocks, "src_blocks");
    const std::vector<uint64_t> dst_list = U64Vector(dst_blocks, num_dst_blocks, "dst_blocks");
    const vendor::KvCacheExtParam ext = ToExtParam(ext_param);
    return dist.PushKvBlocks(src, dst, src_list, dst_list, ext);
  });
}

LLDD_SHIM_EXPORT lldd_status lldd_copy_kv_cache(lldd_engine *engine, const lldd_cache *src_cache,
                                                const lldd_cache *dst_cache, uint32_t src_batch_index,
                                                uint32_t dst_batch_index, uint64_t offset, int64_t size) {
  return Guard("lldd_copy_kv_cache", "CopyKvCache", [&](Call &call) -> uint32_t {
    vendor::LlmDataDist &dist = Engine(engine);
    const vendor::Cache src = ToCache(Required(src_cache, "src_cache"), "src_cache");
    const vendor::Cache dst = ToCache(Required(dst_cache, "dst_cache"), "dst_cache");
    call.instead = "copy between registered buffers with aclrtMemcpy (DEVICE_TO_DEVICE) instead";
    return dist.CopyKvCache(src, dst, src_batch_index, dst_batch_index, offset, size);
  });
}

LLDD_SHIM_EXPORT lldd_status lldd_copy_kv_blocks(lldd_engine *engine, const lldd_cache *src_cache,
                                                 const lldd_cache *dst_cache, const uint64_t *src_blocks,
                                                 size_t num_src_blocks, const uint64_t *dst_blocks_flat,
                                                 const size_t *dst_list_lens, size_t num_dst_lists) {
  return Guard("lldd_copy_kv_blocks", "CopyKvBlocks", [&](Call &call) -> uint32_t {
    vendor::LlmDataDist &dist = Engine(engine);
    const vendor::Cache src = ToCache(Required(src_cache, "src_cache"), "src_cache");
    const vendor::Cache dst = ToCache(Required(dst_cache, "dst_cache"), "dst_cache");
    const std::vector<uint64_t> src_list = U64Vector(src_blocks, num_src_blocks, "src_blocks");
    RequireArray(dst_list_lens, num_dst_lists, "dst_list_lens");
    size_t total = 0;
    for (size_t k = 0; k < num_dst_lists; ++k) {
      if (dst_list_lens[k] > SIZE_MAX - total) {
        Reject("the lengths in dst_list_lens overflow size_t at list %zu", k);
      }
      total += dst_list_lens[k];
    }
    RequireArray(dst_blocks_flat, total, "dst_blocks_flat");
    std::vector<std::vector<uint64_t>> dst_lists(num_dst_lists);
    size_t at = 0;
    for (size_t k = 0; k < num_dst_lists; ++k) {
      dst_lists[k].assign(dst_blocks_flat + at, dst_blocks_flat + at + dst_list_lens[k]);
      at += dst_list_lens[k];
    }
    call.instead = "copy blocks between registered buffers with aclrtMemcpy (DEVICE_TO_DEVICE) instead";
    return dist.CopyKvBlocks(src, dst, src_list, dst_lists);
  });
}

// ---- extension functions (include/lldd/ext.h) -----------------------------------------------
// What only the vendor's Python layer can do (cache keys, cache kinds, v1, server-assisted
// transfers, swaps, rank-table links) has no counterpart in the public C++ class, so on
// this backend every extension answers LLM_FEATURE_NOT_ENABLED (the capability
// LLDD_CAP_EXT_KEYS is not set) and says what to use instead. The arguments are not
// looked at beyond the engine handle.

namespace {

lldd_status NotInCxxApi(const char *function, const lldd_engine *engine, const char *instead) {
  if (engine == nullptr) {
    SetError("%s: engine is NULL (LLM_PARAM_INVALID, 0x%08X)", function, static_cast<uint32_t>(LLM_PARAM_INVALID));
    return LLM_PARAM_INVALID;
  }
  SetError("%s: not available on the ascend backend (LLM_FEATURE_NOT_ENABLED, 0x%08X): the vendor's public C++ "
           "API has no equivalent; %s",
           function, static_cast<uint32_t>(LLM_FEATURE_NOT_ENABLED), instead);
  return LLM_FEATURE_NOT_ENABLED;
}

constexpr const char kUseRegister[] =
    "cache keys and cache kinds do not exist there: register memory with lldd_register_kv_cache and address "
    "caches by (cluster id, cache id)";
constexpr const char kUseAclAlloc[] =
    "the v2 class allocates no memory: allocate it with aclrtMalloc and register it with lldd_register_kv_cache";
constexpr const char kUseAclCopy[] = "copy between registered buffers with aclrtMemcpy";
constexpr const char kUseLinkClusters[] =
    "link with lldd_link_clusters (a rank table can be given in the option llm.LocalCommRes)";

}  // namespace

LLDD_SHIM_EXPORT lldd_status lldd_ext_initialize(lldd_engine *engine, const lldd_option *, size_t) {
  return NotInCxxApi("lldd_ext_initialize", engine,
                     "initialize with lldd_initialize and the C++ option names (llm.DeviceId, llm.ListenIpInfo); "
                     "the C++ class is always v2 in direct mode");
}

LLDD_SHIM_EXPORT lldd_status lldd_ext_switch_role(lldd_engine *engine, int32_t, const lldd_option *, size_t) {
  return NotInCxxApi("lldd_ext_switch_role", engine, "use lldd_set_role with the option llm.ListenIpInfo");
}

LLDD_SHIM_EXPORT lldd_status lldd_ext_check_link_status(lldd_engine *engine, uint64_t) {
  return NotInCxxApi("lldd_ext_check_link_status", engine,
                     "it is a v1 call: use the per-cluster results of lldd_link_clusters");
}

LLDD_SHIM_EXPORT lldd_status lldd_ext_register_cache(lldd_engine *engine, const lldd_cache_desc *, const uint64_t *,
                                                     size_t, uint32_t, uint32_t, const lldd_key *, size_t, int64_t *) {
  return NotInCxxApi("lldd_ext_register_cache", engine, kUseRegister);
}

LLDD_SHIM_EXPORT lldd_status lldd_ext_unregister_cache(lldd_engine *engine, int64_t) {
  return NotInCxxApi("lldd_ext_unregister_cache", engine, "use lldd_unregister_kv_cache");
}

LLDD_SHIM_EXPORT lldd_status lldd_ext_allocate_cache(lldd_engine *engine, const lldd_cache_desc *, uint32_t,
                                                     const lldd_key *, size_t, int64_t *, uint64_t *, size_t) {
  return NotInCxxApi("lldd_ext_allocate_cache", engine, kUseAclAlloc);
}

LLDD_SHIM_EXPORT lldd_status lldd_ext_deallocate_cache(lldd_engine *engine, int64_t) {
  return NotInCxxApi("lldd_ext_deallocate_cache", engine,
                     "unregister with lldd_unregister_kv_cache and free the memory with aclrtFree");
}

LLDD_SHIM_EXPORT lldd_status lldd_ext_remove_cache_key(lldd_engine *engine, const lldd_key *) {
  return NotInCxxApi("lldd_ext_remove_cache_key", engine, kUseRegister);
}

LLDD_SHIM_EXPORT lldd_status lldd_ext_pull(lldd_engine *engine, const lldd_key *, int64_t, uint32_t, int64_t,
                                           const uint64_t *, size_t, const uint64_t *, size_t, const uint64_t *,
                                           size_t, const uint64_t *, size_t, int64_t, int64_t, uint32_t) {
  return NotInCxxApi("lldd_ext_pull", engine,
                     "pull with lldd_pull_kv_cache or lldd_pull_kv_blocks from a CacheIndex (cluster id, cache id); "
                     "layer ranges select tensors, and there are no offsets");
}

LLDD_SHIM_EXPORT lldd_status lldd_ext_push_layer(lldd_engine *engine, int64_t, uint32_t, uint32_t, const lldd_key *,
                                                 uint32_t, uint32_t, const uint64_t *, size_t, const uint64_t *,
                                                 size_t) {
  return NotInCxxApi("lldd_ext_push_layer", engine,
                     "push with lldd_push_kv_cache or lldd_push_kv_blocks and a one-layer ext_param "
                     "(src_layer_range = dst_layer_range = {l, l})");
}

LLDD_SHIM_EXPORT lldd_status lldd_ext_transfer_layer(lldd_engine *engine, int64_t, uint32_t, uint32_t, uint64_t,
                                                     const uint64_t *, const uint64_t *, size_t, const uint64_t *,
                                                     size_t, uint64_t) {
  return NotInCxxApi("lldd_ext_transfer_layer", engine,
                     "transfers to caller-given addresses are not expressible: register the destination on the peer "
                     "and push with lldd_push_kv_blocks");
}

LLDD_SHIM_EXPORT lldd_status lldd_ext_copy_cache(lldd_engine *engine, int64_t, int64_t, uint32_t, uint32_t, uint64_t,
                                                 int64_t) {
  return NotInCxxApi("lldd_ext_copy_cache", engine, kUseAclCopy);
}

LLDD_SHIM_EXPORT lldd_status lldd_ext_copy_blocks(lldd_engine *engine, int64_t, const uint64_t *, size_t) {
  return NotInCxxApi("lldd_ext_copy_blocks", engine, kUseAclCopy);
}

LLDD_SHIM_EXPORT lldd_status lldd_ext_swap_blocks(lldd_engine *engine, const uint64_t *, const uint64_t *, size_t,
                                                  uint64_t, const uint64_t *, size_t, uint32_t) {
  return NotInCxxApi("lldd_ext_swap_blocks", engine,
                     "swap blocks with aclrtMemcpy (HOST_TO_DEVICE or DEVICE_TO_HOST), one copy per block run");
}

LLDD_SHIM_EXPORT lldd_status lldd_ext_link(lldd_engine *engine, const char *, const uint64_t *, const uint32_t *,
                                           size_t, const char *, uint64_t *) {
  return NotInCxxApi("lldd_ext_link", engine, kUseLinkClusters);
}

LLDD_SHIM_EXPORT lldd_status lldd_ext_unlink(lldd_engine *engine, uint64_t) {
  return NotInCxxApi("lldd_ext_unlink", engine, "unlink with lldd_unlink_clusters");
}

LLDD_SHIM_EXPORT lldd_status lldd_ext_query_register_mem_status(lldd_engine *engine, uint64_t, uint32_t *) {
  return NotInCxxApi("lldd_ext_query_register_mem_status", engine, kUseLinkClusters);
}

LLDD_SHIM_EXPORT lldd_status lldd_ext_remap_registered_memory(lldd_engine *engine, const uint64_t *, const uint64_t *,
                                                              size_t) {
  return NotInCxxApi("lldd_ext_remap_registered_memory", engine,
                     "unregister the cache with lldd_unregister_kv_cache and register the new memory");
}
