// Vendor double: llm_datadist::LlmDataDist (v2) over the project's C mock, built
// as the fake toolkit's libllm_datadist.so.
//
// Why it exists: the ascend shim (llm_datadist_ffi/_shim/lldd_shim.cpp) can only be
// compiled and exercised in CI against something that declares the vendor's C++
// API. This library gives it that API, with the v2 behaviour of docs/reference/cpp-api.md §6,
// by converting each call back into the flat C ABI and forwarding it to the mock
// engine, which implements the native semantics (docs/reference/semantics.md). What the v2 class
// does differently from the native C ABI is done here, not in the mock:
//
//  - AllocateCache, DeallocateCache, CopyKvCache and CopyKvBlocks answer
//    LLM_FEATURE_NOT_ENABLED in every state (cpp-api.md §6.9, §6.12); the mock implements them
//    when a pool exists (PR-9), so they never reach it;
//  - LinkLlmClusters / UnlinkLlmClusters append to `rets` instead of filling it;
//  - Initialize filters every code outside the LLM set to LLM_FAILED (cpp-api.md §6.2);
//  - the destructor finalizes; a failed construction makes every method FAILED.
//
// The mock is reached through dlopen/dlsym on its own handle, never by linking its
// lldd_* names: the shim exports the same names, and a plain call from here would
// bind to the shim's copy and recurse. The library opened is the file named by
// LLM_DATADIST_FFI_MOCK_LIB, else "libacl_rt.so" -- in the fake toolkit that is a
// symlink to the mock, so ACL allocations made by the user and the engine that
// validates them live in one mock instance. Opening a second, different instance
// would make every registration fail obscurely, so it is refused loudly.
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>

#include "llm_datadist/llm_datadist.h"
#include "llm_datadist_ffi.h"

namespace llm_datadist {

namespace {

constexpr const char kMockLibEnv[] = "LLM_DATADIST_FFI_MOCK_LIB";
constexpr const char kAclLib[] = "libacl_rt.so";

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
bool Resolve(void *handle, const char *name, Fn &out) {
  out = reinterpret_cast<Fn>(dlsym(handle, name));
  if (out == nullptr) {
    std::fprintf(stderr, "llm_datadist vendor double: the mock library lacks %s\n", name);
  }
  return out != nullptr;
}

// Opens the mock once per process; nullptr (after a message on stderr) when it
// cannot be used. Every LlmDataDist then behaves as after a failed construction.
const MockApi *OpenMock() {
  const char *env = std::getenv(kMockLibEnv);
  const char *path = (env != nullptr && env[0] != '\0') ? env : kAclLib;
  void *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    std::fprintf(stderr, "llm_datadist vendor double: cannot open the mock library %s (%s): %s\n", path,
                 env != nullptr ? kMockLibEnv : "the fake toolkit's ACL runtime", dlerror());
    return nullptr;
  }
  void *acl = dlopen(kAclLib, RTLD_NOW | RTLD_NOLOAD);
  if (acl != nullptr) {
    const bool same = acl == handle;
    dlclose(acl);
    if (!same) {
      std::fprintf(stderr,
                   "llm_datadist vendor double: %s=%s is not the library loaded as %s; ACL memory and "
                   "the engine would live in two different mock instances\n",
                   kMockLibEnv, path, kAclLib);
      return nullptr;
    }
  }
  static MockApi api;
  const bool ok = Resolve(handle, "lldd_backend_name", api.backend_name) &&
                  Resolve(handle, "lldd_create", api.create) && Resolve(handle, "lldd_destroy", api.destroy) &&
                  Resolve(handle, "lldd_initialize", api.initialize) &&
                  Resolve(handle, "lldd_finalize", api.finalize) && Resolve(handle, "lldd_set_role", api.set_role) &&
                  Resolve(handle, "lldd_link_clusters", api.link_clusters) &&
                  Resolve(handle, "lldd_unlink_clusters", api.unlink_clusters) &&
                  Resolve(handle, "lldd_register_kv_cache", api.register_kv_cache) &&
                  Resolve(handle, "lldd_unregister_kv_cache", api.unregister_kv_cache) &&
                  Resolve(handle, "lldd_pull_kv_cache", api.pull_kv_cache) &&
                  Resolve(handle, "lldd_pull_kv_blocks", api.pull_kv_blocks) &&
                  Resolve(handle, "lldd_push_kv_cache", api.push_kv_cache) &&
                  Resolve(handle, "lldd_push_kv_blocks", api.push_kv_blocks);
  if (!ok) {
    return nullptr;
  }
  if (std::strcmp(api.backend_name(), "mock") != 0) {
    std::fprintf(stderr, "llm_datadist vendor double: %s is the \"%s\" backend, not the mock\n", path,
                 api.backend_name());
    return nullptr;
  }
  return &api;  // the handle stays open for the life of the process
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
  const MockApi *api = Mock();
  if (api == nullptr) {
    return;
  }
  lldd_engine *engine = nullptr;
  if (api->create(cluster_id, static_cast<int32_t>(role), &engine) != LLM_SUCCESS || engine == nullptr) {
    return;
  }
  impl_.reset(new (std::nothrow) LlmDataDistImpl(*api, engine));
  if (impl_ == nullptr) {
    api->destroy(engine);
  }
}

LlmDataDist::~LlmDataDist() = default;

Status LlmDataDist::Initialize(const std::map<AscendString, AscendString> &options) {
  if (impl_ == nullptr) {
    return LLM_FAILED;
  }
  const OptionArray args(options);
  return FilterInitializeStatus(impl_->api().initialize(impl_->engine(), args.items.data(), args.items.size()));
}

void LlmDataDist::Finalize() {
  if (impl_ != nullptr) {
    impl_->api().finalize(impl_->engine());
  }
}

Status LlmDataDist::SetRole(LlmRole role, const std::map<AscendString, AscendString> &options) {
  if (impl_ == nullptr) {
    return LLM_FAILED;
  }
  const OptionArray args(options);
  return impl_->api().set_role(impl_->engine(), static_cast<int32_t>(role), args.items.data(), args.items.size());
}

Status LlmDataDist::LinkLlmClusters(const std::vector<ClusterInfo> &clusters, std::vector<Status> &rets,
                                    int32_t timeout_in_millis) {
  if (impl_ == nullptr) {
    return LLM_FAILED;
  }
  return LinkOrUnlink(clusters, rets,
                      [this, timeout_in_millis](const lldd_cluster_info *c, size_t n, lldd_status *r, size_t *nr) {
                        return impl_->api().link_clusters(impl_->engine(), c, n, timeout_in_millis, r, nr);
                      });
}

Status LlmDataDist::UnlinkLlmClusters(const std::vector<ClusterInfo> &clusters, std::vector<Status> &rets,
                                      int32_t timeout_in_millis, bool force_flag) {
  if (impl_ == nullptr) {
    return LLM_FAILED;
  }
  const int32_t force = force_flag ? 1 : 0;
  return LinkOrUnlink(
      clusters, rets, [this, timeout_in_millis, force](const lldd_cluster_info *c, size_t n, lldd_status *r, size_t *nr) {
        return impl_->api().unlink_clusters(impl_->engine(), c, n, timeout_in_millis, force, r, nr);
      });
}

// v2: never implemented by the public class, whatever the state (cpp-api.md §6.9, §6.12).
Status LlmDataDist::AllocateCache(const CacheDesc &cache_desc, Cache &cache) {
  (void)cache_desc;
  (void)cache;
  return LLM_FEATURE_NOT_ENABLED;
}

Status LlmDataDist::DeallocateCache(int64_t cache_id) {
  (void)cache_id;
  return LLM_FEATURE_NOT_ENABLED;
}

Status LlmDataDist::CopyKvCache(const Cache &src_cache, const Cache &dst_cache, uint32_t src_batch_index,
                                uint32_t dst_batch_index, uint64_t offset, int64_t size) {
  (void)src_cache;
  (void)dst_cache;
  (void)src_batch_index;
  (void)dst_batch_index;
  (void)offset;
  (void)size;
  return LLM_FEATURE_NOT_ENABLED;
}

Status LlmDataDist::CopyKvBlocks(const Cache &src_cache, const Cache &dst_cache,
                                 const std::vector<uint64_t> &src_blocks,
                                 const std::vector<std::vector<uint64_t>> &dst_blocks_list) {
  (void)src_cache;
  (void)dst_cache;
  (void)src_blocks;
  (void)dst_blocks_list;
  return LLM_FEATURE_NOT_ENABLED;
}

Status LlmDataDist::PullKvCache(const CacheIndex &src_cache_index, const Cache &dst_cache, uint32_t batch_index,
                                int64_t size, const KvCacheExtParam &ext_param) {
  if (impl_ == nullptr) {
    return LLM_FAILED;
  }
  const lldd_cache_index src = ToC(src_cache_index);
  const CacheArg dst(dst_cache);
  const lldd_ext_param ext = ToC(ext_param);
  return impl_->api().pull_kv_cache(impl_->engine(), &src, &dst.c, batch_index, size, &ext);
}

Status LlmDataDist::PullKvBlocks(const CacheIndex &src_cache_index, const Cache &dst_cache,
                                 const std::vector<uint64_t> &src_blocks, const std::vector<uint64_t> &dst_blocks,
                                 const KvCacheExtParam &ext_param) {
  if (impl_ == nullptr) {
    return LLM_FAILED;
  }
  const lldd_cache_index src = ToC(src_cache_index);
  const CacheArg dst(dst_cache);
  const lldd_ext_param ext = ToC(ext_param);
  return impl_->api().pull_kv_blocks(impl_->engine(), &src, &dst.c, src_blocks.data(), src_blocks.size(),
                                     dst_blocks.data(), dst_blocks.size(), &ext);
}

Status LlmDataDist::PushKvCache(const Cache &src_cache, const CacheIndex &dst_cache_index, uint32_t src_batch_index,
                                int64_t size, const KvCacheExtParam &ext_param) {
  if (impl_ == nullptr) {
    return LLM_FAILED;
  }
  const CacheArg src(src_cache);
  const lldd_cache_index dst = ToC(dst_cache_index);
  const lldd_ext_param ext = ToC(ext_param);
  return impl_->api().push_kv_cache(impl_->engine(), &src.c, &dst, src_batch_index, size, &ext);
}

Status LlmDataDist::PushKvBlocks(const Cache &src_cache, const CacheIndex &dst_cache_index,
                                 const std::vector<uint64_t> &src_blocks, const std::vector<uint64_t> &dst_blocks,
                                 const KvCacheExtParam &ext_param) {
  if (impl_ == nullptr) {
    return LLM_FAILED;
  }
  const CacheArg src(src_cache);
  const lldd_cache_index dst = ToC(dst_cache_index);
  const lldd_ext_param ext = ToC(ext_param);
  return impl_->api().push_kv_blocks(impl_->engine(), &src.c, &dst, src_blocks.data(), src_blocks.size(),
                                     dst_blocks.data(), dst_blocks.size(), &ext);
}

Status LlmDataDist::RegisterKvCache(const CacheDesc &cache_desc, const std::vector<uint64_t> &addrs,
                                    const RegisterCfg &cfg, int64_t &cache_id) {
  (void)cfg;  // ignored by the vendor (cpp-api.md §6.13)
  if (impl_ == nullptr) {
    return LLM_FAILED;
  }
  const lldd_cache_desc desc = ToC(cache_desc);
  int64_t id = -1;
  const Status status =
      impl_->api().register_kv_cache(impl_->engine(), &desc, addrs.data(), addrs.size(), &id);
  if (status == LLM_SUCCESS) {
    cache_id = id;
  }
  return status;
}

Status LlmDataDist::UnregisterKvCache(int64_t cache_id) {
  if (impl_ == nullptr) {
    return LLM_FAILED;
  }
  return impl_->api().unregister_kv_cache(impl_->engine(), cache_id);
}

}  // namespace llm_datadist
