// Conformance check of the vendor double against docs/reference/cpp-api.md, in C++.
//
// The shim is only as trustworthy as the double it is tested against, so this
// program pins what the shim relies on: the declarations (types, member order,
// defaults, aggregate initialisation as the vendor's own tests write it, a class
// that is neither copyable nor movable), ge::AscendString's behaviour (cpp-api.md §2.3), and
// the v2 behaviour the double adds in front of the mock (cpp-api.md §6): the four methods that
// are always FEATURE_NOT_ENABLED, FAILED before Initialize, `rets` appended and left
// untouched by an argument error, Initialize idempotent, Finalize idempotent, and a
// destructor that finalizes (its listener's port becomes free again).
//
// Built by tests/test_shim.py against a fake toolkit and run with its environment:
//     double_check PORT
// Prints "double check: OK" and exits 0, or names the first failed check.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <type_traits>
#include <vector>

#include "llm_datadist/llm_datadist.h"

namespace ld = llm_datadist;

// ---- declarations -----------------------------------------------------------------------------

static_assert(std::is_same<ld::Status, uint32_t>::value, "Status is uint32_t");
static_assert(std::is_same<ld::AscendString, ge::AscendString>::value, "AscendString alias");
static_assert(std::is_same<ld::DataType, ge::DataType>::value, "DataType alias");
static_assert(std::is_same<decltype(ld::kDefaultTensorNumPerLayer), const uint8_t>::value, "uint8_t default");
static_assert(ld::kDefaultTensorNumPerLayer == 2U, "default tensor_num_per_layer");
static_assert(ld::LLM_PARAM_INVALID == 0x5010B005U && ld::LLM_OUT_OF_MEMORY == 0x5010B01CU, "status values");
static_assert(ld::DT_BF16 == 27 && ld::DT_FLOAT4_E1M2 == 41 && ge::DT_HIFLOAT4 == 42 && ge::DT_MAX == 44,
              "DataType values");
static_assert(std::is_same<std::underlying_type<ld::LlmRole>::type, int32_t>::value, "LlmRole : int32_t");
static_assert(static_cast<int32_t>(ld::LlmRole::kEnd) == 4, "kEnd");
static_assert(std::is_same<std::underlying_type<ld::CachePlacement>::type, uint32_t>::value, "placement");
static_assert(std::is_same<decltype(ld::CacheIndex::batch_index), uint32_t>::value, "batch_index");
static_assert(std::is_same<decltype(ld::Cache::tensor_addrs), std::vector<uintptr_t>>::value, "tensor_addrs");
static_assert(std::is_same<decltype(ld::KvCacheExtParam::src_layer_range), std::pair<int32_t, int32_t>>::value,
              "layer pair");
static_assert(std::is_same<decltype(ld::KvCacheExtParam::tensor_num_per_layer), uint8_t>::value, "uint8_t");
static_assert(sizeof(ld::KvCacheExtParam::reserved) == 127U && sizeof(ld::RegisterCfg::reserved) == 128U,
              "reserved sizes");
static_assert(std::is_aggregate<ld::CacheIndex>::value && std::is_aggregate<ld::KvCacheExtParam>::value &&
                  std::is_aggregate<ld::ClusterInfo>::value && std::is_aggregate<ld::Cache>::value,
              "aggregates");
static_assert(!std::is_copy_constructible<ld::LlmDataDist>::value, "not copyable");
static_assert(!std::is_move_constructible<ld::LlmDataDist>::value, "not movable");

namespace {

int g_failures = 0;

void Check(bool ok, const char *what) {
  if (!ok) {
    std::fprintf(stderr, "double check FAILED: %s\n", what);
    ++g_failures;
  }
}

std::map<ld::AscendString, ld::AscendString> Options(const char *device, const std::string &listen) {
  std::map<ld::AscendString, ld::AscendString> options;
  options[ld::OPTION_DEVICE_ID] = device;
  if (!listen.empty()) {
    options[ld::OPTION_LISTEN_IP_INFO] = listen.c_str();
  }
  return options;
}

ld::ClusterInfo Peer(uint64_t id, uint16_t port) {
  ld::ClusterInfo cluster{};
  cluster.remote_cluster_id = id;
  ld::IpInfo local{};
  local.ip = "127.0.0.1";
  ld::IpInfo remote{};
  remote.ip = "127.0.0.1";
  remote.port = port;
  cluster.local_ip_infos.push_back(local);
  cluster.remote_ip_infos.push_back(remote);
  return cluster;
}

void CheckAscendString() {
  const ld::AscendString null_string;
  const ld::AscendString from_null(nullptr);
  const ld::AscendString empty("");
  const ld::AscendString abc("abc");
  const ld::AscendString with_nul("a\0b", 3);
  Check(null_string.GetString() != nullptr && null_string.GetString()[0] == '\0', "null GetString is \"\"");
  Check(null_string.GetLength() == 0U && from_null.GetLength() == 0U && empty.GetLength() == 0U, "lengths 0");
  Check(with_nul.GetLength() == 3U && std::memcmp(with_nul.GetString(), "a\0b", 3) == 0, "embedded NUL kept");
  Check(null_string == from_null && !(null_string < from_null), "two nulls are equal");
  Check(null_string < empty && null_string < abc && !(abc < null_string), "null orders first");
  Check(empty < abc && abc > empty && abc >= abc && abc <= abc, "content order");
  Check(null_string == static_cast<const char *>(nullptr) && !(null_string == ""), "null equals only NULL");
  Check(empty == "" && abc == "abc" && abc != "abd" && !(with_nul == "a"), "content equality");
  Check(abc.Find("bc") == 1U && abc.Find("x") == std::string::npos, "Find");
  Check(std::hash<ld::AscendString>()(abc) == abc.Hash(), "std::hash");
  std::map<ld::AscendString, ld::AscendString> repeated;
  repeated["k"] = "1";
  repeated["k"] = "2";
  Check(repeated.size() == 1U && repeated.begin()->second == "2", "map keys compare by content");
}

void CheckVendorStructs() {
  // The vendor's own tests build these with brace lists (docs/reference/cpp-api.md §5).
  const ld::CacheIndex index{7U, 3, 0U, {}};
  const ld::KvCacheExtParam ext{{0, 1}, {0, 1}, 2, {}};
  const ld::KvCacheExtParam defaults{};
  Check(index.cluster_id == 7U && index.cache_id == 3, "CacheIndex brace list");
  Check(ext.src_layer_range.second == 1 && ext.tensor_num_per_layer == 2U, "KvCacheExtParam brace list");
  Check(defaults.src_layer_range == std::make_pair(-1, -1) && defaults.dst_layer_range == std::make_pair(-1, -1) &&
            defaults.tensor_num_per_layer == 2U,
        "KvCacheExtParam defaults");
  const ld::Cache cache{};
  Check(cache.cache_id == -1 && cache.cache_desc.placement == ld::CachePlacement::kDevice &&
            cache.cache_desc.num_tensors == 0U && cache.cache_desc.data_type == ld::DT_UNDEFINED,
        "Cache / CacheDesc defaults");
  Check(std::strcmp(ld::OPTION_LISTEN_IP_INFO, "llm.ListenIpInfo") == 0 &&
            std::strcmp(ld::OPTION_DEVICE_ID, "llm.DeviceId") == 0 &&
            std::strcmp(ld::OPTION_SYNC_CACHE_WAIT_TIME, "llm.SyncKvCacheWaitTime") == 0 &&
            std::strcmp(ld::OPTION_GLOBAL_RESOURCE_CONFIG, "llm.GlobalResourceConfig") == 0,
        "option keys");
  const ld::RegisterCfg cfg{};
  Check(cfg.reserved[0] == 0U && cfg.reserved[127] == 0U, "RegisterCfg zeroed");
}

void CheckV2Behaviour(uint16_t port) {
  const std::string listen = "127.0.0.1:" + std::to_string(port);
  ld::Cache cache{};
  ld::CacheDesc desc{};
  desc.num_tensors = 1U;
  desc.data_type = ld::DT_UINT8;
  desc.shape = {4, 16};
  {
    ld::LlmDataDist fresh(9U, ld::LlmRole::kDecoder);
    // Always FEATURE_NOT_ENABLED, also before Initialize (cpp-api.md §6.9, §6.12).
    Check(fresh.AllocateCache(desc, cache) == ld::LLM_FEATURE_NOT_ENABLED, "AllocateCache before init");
    Check(fresh.DeallocateCache(1) == ld::LLM_FEATURE_NOT_ENABLED, "DeallocateCache before init");
    Check(fresh.CopyKvCache(cache, cache) == ld::LLM_FEATURE_NOT_ENABLED, "CopyKvCache before init");
    Check(fresh.CopyKvBlocks(cache, cache, std::vector<uint64_t>{0U},
                                    std::vector<std::vector<uint64_t>>(1U, std::vector<uint64_t>{1U})) == ld::LLM_FEATURE_NOT_ENABLED, "CopyKvBlocks before init");
    // Everything else FAILED before Initialize; Finalize is a no-op.
    int64_t id = 0;
    Check(fresh.RegisterKvCache(desc, {1U}, ld::RegisterCfg{}, id) == ld::LLM_FAILED, "Register before init");
    Check(fresh.UnregisterKvCache(1) == ld::LLM_FAILED, "Unregister before init");
    Check(fresh.PullKvCache(ld::CacheIndex{1U, 1, 0U, {}}, cache) == ld::LLM_FAILED, "Pull before init");
    std::vector<ld::Status> rets;
    Check(fresh.LinkLlmClusters({Peer(1U, port)}, rets) == ld::LLM_FAILED && rets.empty(), "Link before init");
    fresh.Finalize();
    fresh.Finalize();
    // An invalid role is Initialize's to reject.
    ld::LlmDataDist bad_role(10U, ld::LlmRole::kEnd);
    Check(bad_role.Initialize(Options("0", "")) == ld::LLM_PARAM_INVALID, "kEnd rejected by Initialize");
  }
  {
    ld::LlmDataDist prompt(1U, ld::LlmRole::kPrompt);
    ld::LlmDataDist decoder(2U, ld::LlmRole::kDecoder);
    Check(prompt.Initialize(Options("0", listen)) == ld::LLM_SUCCESS, "prompt Initialize");
    Check(prompt.Initialize(Options("not a number", "")) == ld::LLM_SUCCESS, "second Initialize ignored");
    Check(decoder.Initialize(Options("1", "")) == ld::LLM_SUCCESS, "decoder Initialize");
    Check(decoder.AllocateCache(desc, cache) == ld::LLM_FEATURE_NOT_ENABLED, "AllocateCache after init");

    // rets: appended to, not cleared; untouched when an argument check fails first.
    std::vector<ld::Status> rets{0xABCDU};
    Check(decoder.LinkLlmClusters({}, rets) == ld::LLM_PARAM_INVALID, "empty cluster list");
    Check(rets.size() == 1U, "rets untouched by an argument error");
    Check(decoder.LinkLlmClusters({Peer(1U, port)}, rets, 5000) == ld::LLM_SUCCESS, "link");
    Check(rets.size() == 2U && rets[0] == 0xABCDU && rets[1] == ld::LLM_SUCCESS, "rets appended");
    rets.clear();
    Check(decoder.UnlinkLlmClusters({Peer(1U, port)}, rets, 5000, false) == ld::LLM_SUCCESS && rets.size() == 1U,
          "unlink");
    decoder.Finalize();
    decoder.Finalize();
    Check(decoder.UnregisterKvCache(1) == ld::LLM_FAILED, "FAILED after Finalize");
    Check(decoder.Initialize(Options("1", "")) == ld::LLM_SUCCESS, "Initialize after Finalize");
  }  // both destroyed while initialised: the destructors finalize, the listener stops
  ld::LlmDataDist again(3U, ld::LlmRole::kPrompt);
  Check(again.Initialize(Options("0", listen)) == ld::LLM_SUCCESS, "port free again after the destructor");
}

}  // namespace

int main(int argc, char **argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: double_check PORT\n");
    return 2;
  }
  CheckAscendString();
  CheckVendorStructs();
  CheckV2Behaviour(static_cast<uint16_t>(std::atoi(argv[1])));
  if (g_failures != 0) {
    return 1;
  }
  std::printf("double check: OK\n");
  return 0;
}
