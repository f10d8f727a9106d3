// libllm_datadist.so: the vendor's class llm_datadist::LlmDataDist (v2) over the
// project's C mock. The SDK ships it (docs/cpp.md); the fake toolkit of
// tests/vendor_double builds it too, for the C-ABI shim's CI stage.
//
// Each method converts its arguments into the flat C ABI and forwards to the mock
// engine, which implements the native semantics (docs/reference/semantics.md). What the
// v2 class does differently from the native C ABI is done here, not in the mock
// (docs/reference/cpp-api.md §6):
//
//  - AllocateCache, DeallocateCache, CopyKvCache and CopyKvBlocks answer
//    LLM_FEATURE_NOT_ENABLED in every state (cpp-api.md §6.9, §6.12); the mock implements them
//    when a pool exists (PR-9), so they never reach it;
//  - LinkLlmClusters / UnlinkLlmClusters append to `rets` instead of filling it;
//  - Initialize filters every code outside the LLM set to LLM_FAILED (cpp-api.md §6.2);
//  - the destructor finalizes; a failed construction makes every method FAILED.
//
// The mock is reached through dlopen/dlsym (sdk_mock.h), never by linking its lldd_*
// names: the shim exports the same names, and a plain call from here would bind to the
// shim's copy and recurse. The ACL memory a program allocates must live in the same
// mock instance as the engine; a process whose libacl_rt.so is another mock instance
// would see every registration fail obscurely, so that is refused loudly. Each call
// also reports its lints and its trace event (sdk_report.h).
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>

#include "llm_datadist/llm_datadist.h"
#include "llm_datadist_ffi.h"
#include "sdk_mock.h"
#include "sdk_report.h"

namespace llm_datadist {

namespace {

constexpr const char kAclLib[] = "libacl_rt.so";
constexpr const char kMockLib[] = "libllm_datadist_mock.so";
constexpr const char kWho[] = "libllm_datadist";

// The mock's lldd_* entry points this class forwards to. The types come from the
// C ABI header; the header's own declarations are never called.
struct MockApi {
  decltype(&lldd_backend_name) backend_name;
  decltype(&lldd_create) create;
  decltype(&lldd_destroy) destroy;
  decltype(&lldd_initialize) initialize;
  decltype(&lldd_finalize) finalize;
  decltype(&lldd_set_role) set_role;
  decltype(&lldd_link_clusters) link_clusters;
  decltype(&lldd_unlink_clusters) unlink_clusters;
  decltype(&lldd_register_kv_cache) register_kv_cache;
  decltype(&lldd_unregister_kv_cache) unregister_kv_cache;
  decltype(&lldd_pull_kv_cache) pull_kv_cache;
  decltype(&lldd_pull_kv_blocks) pull_kv_blocks;
  decltype(&lldd_push_kv_cache) push_kv_cache;
  decltype(&lldd_push_kv_blocks) push_kv_blocks;
};

template <typename Fn>
bool Resolve(const char *name, Fn &out) {
  out = reinterpret_cast<Fn>(lldd_sdk::MockSymbol(name, kWho));
  return out != nullptr;
}

// True unless the process holds another mock instance than the one this library opened:
// an ACL runtime that is neither that mock (the fake toolkit's symlink) nor the SDK's
// forwarding libacl_rt.so naming it, or another file loaded as the mock (a program that
// links the mock's controls while LLM_DATADIST_FFI_MOCK_LIB names another build).
bool SameInstance(void *mock, const char *name, bool forwards) {
  void *lib = dlopen(name, RTLD_NOW | RTLD_NOLOAD);
  if (lib == nullptr) {
    return true;
  }
  using Forwarded = void *(*)();
  const auto forwarded =
      forwards ? reinterpret_cast<Forwarded>(dlsym(lib, "lldd_sdk_forwarded_mock")) : nullptr;
  const bool same = lib == mock || (forwarded != nullptr && forwarded() == mock);
  dlclose(lib);
  if (!same) {
    std::fprintf(stderr,
                 "llm_datadist_ffi SDK: the mock library %s is not the one loaded as %s; ACL memory, the "
                 "mock's controls and the engine would live in different mock instances\n",
                 lldd_sdk::MockPath(), name);
  }
  return same;
}

// Resolves the mock once per process; nullptr (after a message on stderr) when it
// cannot be used. Every LlmDataDist then behaves as after a failed construction.
const MockApi *OpenMock() {
  void *handle = lldd_sdk::MockHandle();
  if (handle == nullptr || !SameInstance(handle, kAclLib, true) || !SameInstance(handle, kMockLib, false)) {
    return nullptr;
  }
  static MockApi api;
  const bool ok = Resolve("lldd_backend_name", api.backend_name) && Resolve("lldd_create", api.create) &&
                  Resolve("lldd_destroy", api.destroy) && Resolve("lldd_initialize", api.initialize) &&
                  Resolve("lldd_finalize", api.finalize) && Resolve("lldd_set_role", api.set_role) &&
                  Resolve("lldd_link_clusters", api.link_clusters) &&
                  Resolve("lldd_unlink_clusters", api.unlink_clusters) &&
                  Resolve("lldd_register_kv_cache", api.register_kv_cache) &&
                  Resolve("lldd_unregister_kv_cache", api.unregister_kv_cache) &&
                  Resolve("lldd_pull_kv_cache", api.pull_kv_cache) &&
                  Resolve("lldd_pull_kv_blocks", api.pull_kv_blocks) &&
                  Resolve("lldd_push_kv_cache", api.push_kv_cache) &&
                  Resolve("lldd_push_kv_blocks", api.push_kv_blocks);
  if (!ok) {
    return nullptr;
  }
  if (std::strcmp(api.backend_name(), "mock") != 0) {
    std::fprintf(stderr, "llm_datadist_ffi SDK: %s is the \"%s\" backend, not the mock\n", lldd_sdk::MockPath(),
                 api.backend_name());
    return nullptr;
  }
  return &api;
}

const MockApi *Mock() {
  static const MockApi *const api = OpenMock();
  return api;
}

// Initialize passes only the LLM codes through (cpp-api.md §6.2): LLM_TIMEOUT, codes 0x14-0x17
// and anything else (raw ACL codes) become LLM_FAILED.
Status FilterInitializeStatus(Status status) {
  if (status == LLM_SUCCESS || status == LLM_FAILED) {
    return status;
  }
  if (status < 0x5010B001U || status > LLM_OUT_OF_MEMORY) {
    return LLM_FAILED;
  }
  const uint32_t low = status & 0xFFU;
  const bool excluded = (low >= 0x14U && low <= 0x17U) || status == LLM_TIMEOUT;
  return excluded ? LLM_FAILED : status;
}

// ---- vendor types -> C ABI structs; each holder keeps the storage its pointers use ----

struct OptionArray {
  explicit OptionArray(const std::map<AscendString, AscendString> &options) {
    items.reserve(options.size());
    for (const auto &kv : options) {
      items.push_back(lldd_option{kv.first.GetString(), kv.second.GetString()});
    }
  }
  std::vector<lldd_option> items;
};

struct ClusterArray {
  explicit ClusterArray(const std::vector<ClusterInfo> &clusters) {
    ips.resize(clusters.size() * 2U);
    items.reserve(clusters.size());
    for (size_t i = 0; i < clusters.size(); ++i) {
      std::vector<lldd_ip_info> &local = ips[2U * i];
      std::vector<lldd_ip_info> &remote = ips[2U * i + 1U];
      for (const IpInfo &ip : clusters[i].local_ip_infos) {
        local.push_back(lldd_ip_info{ip.ip.GetString(), ip.port, 0U, 0U});
      }
      for (const IpInfo &ip : clusters[i].remote_ip_infos) {
        remote.push_back(lldd_ip_info{ip.ip.GetString(), ip.port, 0U, 0U});
      }
      lldd_cluster_info info{};
      info.remote_cluster_id = clusters[i].remote_cluster_id;
      info.remote_role_type = clusters[i].remote_role_type;
      info.local_ip_infos = local.data();
      info.num_local_ip_infos = local.size();
      info.remote_ip_infos = remote.data();
      info.num_remote_ip_infos = remote.size();
      items.push_back(info);
    }
  }
  std::vector<std::vector<lldd_ip_info>> ips;
  std::vector<lldd_cluster_info> items;
};

lldd_cache_desc ToC(const CacheDesc &desc) {
  lldd_cache_desc out{};
  out.placement = static_cast<uint32_t>(desc.placement);
  out.num_tensors = desc.num_tensors;
  out.data_type = static_cast<int32_t>(desc.data_type);
  out.shape = desc.shape.data();
  out.shape_len = desc.shape.size();
  return out;
}

struct CacheArg {
  explicit CacheArg(const Cache &cache) : addrs(cache.tensor_addrs.begin(), cache.tensor_addrs.end()) {
    c.cache_id = cache.cache_id;
    c.tensor_addrs = addrs.data();
    c.num_tensor_addrs = addrs.size();
    c.cache_desc = ToC(cache.cache_desc);
  }
  std::vector<uint64_t> addrs;
  lldd_cache c{};
};

lldd_cache_index ToC(const CacheIndex &index) {
  lldd_cache_index out{};
  out.cluster_id = index.cluster_id;
  out.cache_id = index.cache_id;
  out.batch_index = index.batch_index;
  return out;
}

lldd_ext_param ToC(const KvCacheExtParam &ext) {
  lldd_ext_param out{};
  out.src_layer_first = ext.src_layer_range.first;
  out.src_layer_second = ext.src_layer_range.second;
  out.dst_layer_first = ext.dst_layer_range.first;
  out.dst_layer_second = ext.dst_layer_range.second;
  out.tensor_num_per_layer = ext.tensor_num_per_layer;
  return out;
}

// The C ABI fills an array; the v2 class appends to the caller's vector (cpp-api.md §6.7).
template <typename Call>
Status LinkOrUnlink(const std::vector<ClusterInfo> &clusters, std::vector<Status> &rets, Call call) {
  const ClusterArray args(clusters);
  std::vector<lldd_status> results(clusters.empty() ? 1U : clusters.size());
  size_t num_results = 0;
  const Status status = call(args.items.data(), args.items.size(), results.data(), &num_results);
  for (size_t i = 0; i < num_results && i < clusters.size(); ++i) {
    rets.push_back(results[i]);
  }
  return status;
}

// ---- the shape of a call's arguments for its trace event (ids, counts, layer ranges;
// never an address), named as the parameters are ----

using lldd_sdk::JsonField;
using lldd_sdk::JsonInt;
using lldd_sdk::JsonString;
using lldd_sdk::JsonUint;

std::string Describe(const char *name, const CacheIndex &index) {
  return JsonField(name, "{" + JsonUint("cluster_id", index.cluster_id) + "," + JsonInt("cache_id", index.cache_id) +
                             "," + JsonUint("batch_index", index.batch_index) + "}");
}

std::string Describe(const char *name, const Cache &cache) {
  return JsonField(name, "{" + JsonInt("cache_id", cache.cache_id) + "," +
                             JsonUint("num_tensors", cache.cache_desc.num_tensors) + "}");
}

std::string Describe(const char *name, const CacheDesc &desc) {
  std::string shape;
  for (const int64_t dim : desc.shape) {
    shape += (shape.empty() ? "" : ",") + std::to_string(dim);
  }
  return JsonField(name, "{" + JsonUint("placement", static_cast<uint32_t>(desc.placement)) + "," +
                             JsonUint("num_tensors", desc.num_tensors) + "," +
                             JsonInt("data_type", static_cast<int64_t>(desc.data_type)) + "," +
                             JsonField("shape", "[" + shape + "]") + "}");
}

std::string Count(const char *name, size_t count) { return JsonField(name, "{" + JsonUint("count", count) + "}"); }

std::string Describe(const KvCacheExtParam &ext) {
  const auto pair = [](const std::pair<int32_t, int32_t> &p) {
    return "[" + std::to_string(p.first) + "," + std::to_string(p.second) + "]";
  };
  return JsonField("src_layer_range", pair(ext.src_layer_range)) + "," +
         JsonField("dst_layer_range", pair(ext.dst_layer_range)) + "," +
         JsonUint("tensor_num_per_layer", ext.tensor_num_per_layer);
}

std::string Describe(const std::map<AscendString, AscendString> &options) {
  std::string out;
  for (const auto &kv : options) {
    std::string key(kv.first.GetString());
    std::string lower;
    for (const char c : key) {
      lower += static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
    }
    const bool secret = lower.find("secret") != std::string::npos || lower.find("password") != std::string::npos ||
                        lower.find("token") != std::string::npos;  // a shared secret stays out
    out += (out.empty() ? "" : ",") + JsonField(key.c_str(), JsonString(secret ? "(secret)" : kv.second.GetString()));
  }
  return JsonField("options", "{" + out + "}");
}

std::string Describe(const std::vector<ClusterInfo> &clusters) {
  std::string out;
  for (size_t i = 0; i < clusters.size() && i < 16U; ++i) {
    out += (i == 0 ? "{" : ",{") + JsonUint("remote_cluster_id", clusters[i].remote_cluster_id) + "}";
  }
  if (clusters.size() > 16U) {
    out += ",{" + JsonUint("more", clusters.size() - 16U) + "}";
  }
  return JsonField("clusters", "[" + out + "]");
}

const char *RoleName(LlmRole role) {
  switch (role) {
    case LlmRole::kPrompt: return "PROMPT";
    case LlmRole::kDecoder: return "DECODER";
    case LlmRole::kMix: return "MIX";
    default: return "INVALID";
  }
}

}  // namespace

class LlmDataDist::LlmDataDistImpl {
 public:
  LlmDataDistImpl(const MockApi &api, lldd_engine *engine) : api_(api), engine_(engine) {}
  ~LlmDataDistImpl() { api_.destroy(engine_); }  // the mock finalizes an initialised engine first
  LlmDataDistImpl(const LlmDataDistImpl &) = delete;
  LlmDataDistImpl &operator=(const LlmDataDistImpl &) = delete;

  const MockApi &api() const { return api_; }
  lldd_engine *engine() const { return engine_; }

 private:
  const MockApi &api_;
  lldd_engine *const engine_;
};

LlmDataDist::LlmDataDist(uint64_t cluster_id, LlmRole role) {
  lldd_sdk::CallReport report("LlmDataDist::LlmDataDist",
                              JsonUint("cluster_id", cluster_id) + "," + JsonField("role", JsonString(RoleName(role))));
  const MockApi *api = Mock();
  if (api == nullptr) {
    (void)report.Done(LLM_FAILED);
    return;
  }
  lldd_engine *engine = nullptr;
  const Status status = api->create(cluster_id, static_cast<int32_t>(role), &engine);
  if (status != LLM_SUCCESS || engine == nullptr) {
    (void)report.Done(status == LLM_SUCCESS ? LLM_FAILED : status);
    return;
  }
  impl_.reset(new (std::nothrow) LlmDataDistImpl(*api, engine));
  if (impl_ == nullptr) {
    api->destroy(engine);
  }
  (void)report.Done(impl_ == nullptr ? LLM_FAILED : LLM_SUCCESS);
  lldd_sdk::NameProcess(std::string(RoleName(role)) + " cluster " + std::to_string(cluster_id));
}

LlmDataDist::~LlmDataDist() = default;

Status LlmDataDist::Initialize(const std::map<AscendString, AscendString> &options) {
  lldd_sdk::CallReport report("LlmDataDist::Initialize", Describe(options));
  if (impl_ == nullptr) {
    return report.Done(LLM_FAILED);
  }
  const OptionArray args(options);
  return report.Done(
      FilterInitializeStatus(impl_->api().initialize(impl_->engine(), args.items.data(), args.items.size())));
}

void LlmDataDist::Finalize() {
  lldd_sdk::CallReport report("LlmDataDist::Finalize", std::string());
  if (impl_ != nullptr) {
    impl_->api().finalize(impl_->engine());
  }
  (void)report.Done(LLM_SUCCESS);
}

Status LlmDataDist::SetRole(LlmRole role, const std::map<AscendString, AscendString> &options) {
  lldd_sdk::CallReport report("LlmDataDist::SetRole",
                              JsonField("role", JsonString(RoleName(role))) + "," + Describe(options));
  if (impl_ == nullptr) {
    return report.Done(LLM_FAILED);
  }
  const OptionArray args(options);
  return report.Done(
      impl_->api().set_role(impl_->engine(), static_cast<int32_t>(role), args.items.data(), args.items.size()));
}

Status LlmDataDist::LinkLlmClusters(const std::vector<ClusterInfo> &clusters, std::vector<Status> &rets,
                                    int32_t timeout_in_millis) {
  lldd_sdk::CallReport report("LlmDataDist::LinkLlmClusters",
                              Describe(clusters) + "," + JsonInt("timeout_in_millis", timeout_in_millis));
  if (impl_ == nullptr) {
    return report.Done(LLM_FAILED);
  }
  return report.Done(LinkOrUnlink(
      clusters, rets, [this, timeout_in_millis](const lldd_cluster_info *c, size_t n, lldd_status *r, size_t *nr) {
        return impl_->api().link_clusters(impl_->engine(), c, n, timeout_in_millis, r, nr);
      }));
}

Status LlmDataDist::UnlinkLlmClusters(const std::vector<ClusterInfo> &clusters, std::vector<Status> &rets,
                                      int32_t timeout_in_millis, bool force_flag) {
  lldd_sdk::CallReport report("LlmDataDist::UnlinkLlmClusters",
                              Describe(clusters) + "," + JsonInt("timeout_in_millis", timeout_in_millis) + "," +
                                  JsonField("force_flag", force_flag ? "true" : "false"));
  if (impl_ == nullptr) {
    return report.Done(LLM_FAILED);
  }
  const int32_t force = force_flag ? 1 : 0;
  return report.Done(LinkOrUnlink(
      clusters, rets, [this, timeout_in_millis, force](const lldd_cluster_info *c, size_t n, lldd_status *r, size_t *nr) {
        return impl_->api().unlink_clusters(impl_->engine(), c, n, timeout_in_millis, force, r, nr);
      }));
}

// v2: never implemented by the public class, whatever the state (cpp-api.md §6.9, §6.12).
Status LlmDataDist::AllocateCache(const CacheDesc &cache_desc, Cache &cache) {
  (void)cache;
  return lldd_sdk::CallReport("LlmDataDist::AllocateCache", Describe("cache_desc", cache_desc))
      .Done(LLM_FEATURE_NOT_ENABLED);
}

Status LlmDataDist::DeallocateCache(int64_t cache_id) {
  return lldd_sdk::CallReport("LlmDataDist::DeallocateCache", JsonInt("cache_id", cache_id))
      .Done(LLM_FEATURE_NOT_ENABLED);
}

Status LlmDataDist::CopyKvCache(const Cache &src_cache, const Cache &dst_cache, uint32_t src_batch_index,
                                uint32_t dst_batch_index, uint64_t offset, int64_t size) {
  (void)offset;
  return lldd_sdk::CallReport("LlmDataDist::CopyKvCache",
                              Describe("src_cache", src_cache) + "," + Describe("dst_cache", dst_cache) + "," +
                                  JsonUint("src_batch_index", src_batch_index) + "," +
                                  JsonUint("dst_batch_index", dst_batch_index) + "," + JsonInt("size", size))
      .Done(LLM_FEATURE_NOT_ENABLED);
}

Status LlmDataDist::CopyKvBlocks(const Cache &src_cache, const Cache &dst_cache,
                                 const std::vector<uint64_t> &src_blocks,
                                 const std::vector<std::vector<uint64_t>> &dst_blocks_list) {
  return lldd_sdk::CallReport("LlmDataDist::CopyKvBlocks",
                              Describe("src_cache", src_cache) + "," + Describe("dst_cache", dst_cache) + "," +
                                  Count("src_blocks", src_blocks.size()) + "," +
                                  Count("dst_blocks_list", dst_blocks_list.size()))
      .Done(LLM_FEATURE_NOT_ENABLED);
}

Status LlmDataDist::PullKvCache(const CacheIndex &src_cache_index, const Cache &dst_cache, uint32_t batch_index,
                                int64_t size, const KvCacheExtParam &ext_param) {
  lldd_sdk::CallReport report("LlmDataDist::PullKvCache",
                              Describe("src_cache_index", src_cache_index) + "," + Describe("dst_cache", dst_cache) +
                                  "," + JsonUint("batch_index", batch_index) + "," + JsonInt("size", size) + "," +
                                  Describe(ext_param));
  if (impl_ == nullptr) {
    return report.Done(LLM_FAILED);
  }
  const lldd_cache_index src = ToC(src_cache_index);
  const CacheArg dst(dst_cache);
  const lldd_ext_param ext = ToC(ext_param);
  return report.Done(impl_->api().pull_kv_cache(impl_->engine(), &src, &dst.c, batch_index, size, &ext));
}

Status LlmDataDist::PullKvBlocks(const CacheIndex &src_cache_index, const Cache &dst_cache,
                                 const std::vector<uint64_t> &src_blocks, const std::vector<uint64_t> &dst_blocks,
                                 const KvCacheExtParam &ext_param) {
  lldd_sdk::CallReport report("LlmDataDist::PullKvBlocks",
                              Describe("src_cache_index", src_cache_index) + "," + Describe("dst_cache", dst_cache) +
                                  "," + Count("src_blocks", src_blocks.size()) + "," +
                                  Count("dst_blocks", dst_blocks.size()) + "," + Describe(ext_param));
  if (impl_ == nullptr) {
    return report.Done(LLM_FAILED);
  }
  const lldd_cache_index src = ToC(src_cache_index);
  const CacheArg dst(dst_cache);
  const lldd_ext_param ext = ToC(ext_param);
  return report.Done(impl_->api().pull_kv_blocks(impl_->engine(), &src, &dst.c, src_blocks.data(), src_blocks.size(),
                                                 dst_blocks.data(), dst_blocks.size(), &ext));
}

Status LlmDataDist::PushKvCache(const Cache &src_cache, const CacheIndex &dst_cache_index, uint32_t src_batch_index,
                                int64_t size, const KvCacheExtParam &ext_param) {
  lldd_sdk::CallReport report("LlmDataDist::PushKvCache",
                              Describe("src_cache", src_cache) + "," + Describe("dst_cache_index", dst_cache_index) +
                                  "," + JsonUint("src_batch_index", src_batch_index) + "," + JsonInt("size", size) +
                                  "," + Describe(ext_param));
  if (impl_ == nullptr) {
    return report.Done(LLM_FAILED);
  }
  const CacheArg src(src_cache);
  const lldd_cache_index dst = ToC(dst_cache_index);
  const lldd_ext_param ext = ToC(ext_param);
  return report.Done(impl_->api().push_kv_cache(impl_->engine(), &src.c, &dst, src_batch_index, size, &ext));
}

Status LlmDataDist::PushKvBlocks(const Cache &src_cache, const CacheIndex &dst_cache_index,
                                 const std::vector<uint64_t> &src_blocks, const std::vector<uint64_t> &dst_blocks,
                                 const KvCacheExtParam &ext_param) {
  lldd_sdk::CallReport report("LlmDataDist::PushKvBlocks",
                              Describe("src_cache", src_cache) + "," + Describe("dst_cache_index", dst_cache_index) +
                                  "," + Count("src_blocks", src_blocks.size()) + "," +
                                  Count("dst_blocks", dst_blocks.size()) + "," + Describe(ext_param));
  if (impl_ == nullptr) {
    return report.Done(LLM_FAILED);
  }
  const CacheArg src(src_cache);
  const lldd_cache_index dst = ToC(dst_cache_index);
  const lldd_ext_param ext = ToC(ext_param);
  return report.Done(impl_->api().push_kv_blocks(impl_->engine(), &src.c, &dst, src_blocks.data(), src_blocks.size(),
                                                 dst_blocks.data(), dst_blocks.size(), &ext));
}

Status LlmDataDist::RegisterKvCache(const CacheDesc &cache_desc, const std::vector<uint64_t> &addrs,
                                    const RegisterCfg &cfg, int64_t &cache_id) {
  (void)cfg;  // ignored by the vendor (cpp-api.md §6.13)
  lldd_sdk::CallReport report("LlmDataDist::RegisterKvCache",
                              Describe("cache_desc", cache_desc) + "," + Count("addrs", addrs.size()));
  if (impl_ == nullptr) {
    return report.Done(LLM_FAILED);
  }
  const lldd_cache_desc desc = ToC(cache_desc);
  int64_t id = -1;
  const Status status = impl_->api().register_kv_cache(impl_->engine(), &desc, addrs.data(), addrs.size(), &id);
  if (status == LLM_SUCCESS) {
    cache_id = id;
  }
  return report.Done(status);
}

Status LlmDataDist::UnregisterKvCache(int64_t cache_id) {
  lldd_sdk::CallReport report("LlmDataDist::UnregisterKvCache", JsonInt("cache_id", cache_id));
  if (impl_ == nullptr) {
    return report.Done(LLM_FAILED);
  }
  return report.Done(impl_->api().unregister_kv_cache(impl_->engine(), cache_id));
}

}  // namespace llm_datadist
