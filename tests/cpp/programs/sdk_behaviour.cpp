// What C++ code does without thinking about it, in one process with two engines
// (a Prompt and a Decoder linked to each other), each observation printed as a line
// "name=value" that tests/cpp/test_sdk_pairs.py compares with what the device does:
//
//  - aclrtMalloc right after Initialize, with no aclrtSetDevice (Initialize set the
//    device of OPTION_DEVICE_ID on the calling thread), ACL_MEM_MALLOC_HUGE_ONLY;
//  - aclrtMemcpy host to device and device to host, and the registration of that memory
//    (one mock instance behind libacl_rt.so and libllm_datadist.so);
//  - faults through the mock's controls (lldd_mock_inject_fault, llm_datadist_ffi_mock.h);
//  - a pull with exactly one default layer pair (PR-1: a lint, or the refusal in strict mode);
//  - UnregisterKvCache then Finalize, calls after Finalize, aclrtFree after Finalize, and
//    the destructors last.
//
//     sdk_behaviour PROMPT_PORT DECODER_PORT
#include <cstdlib>
#include <cstring>
#include <string>

#include "acl/acl.h"
#include "llm_datadist/llm_datadist.h"
#include "llm_datadist_ffi_mock.h"

namespace ld = llm_datadist;

namespace {

constexpr size_t kSize = 8 * 16 * sizeof(int32_t);

void Show(const char *name, const std::string &value) { std::printf("%s=%s\n", name, value.c_str()); }

void ShowStatus(const char *name, uint32_t status) {
  char text[16];
  (void)std::snprintf(text, sizeof(text), "0x%X", status);
  Show(name, text);
}

std::map<ld::AscendString, ld::AscendString> Options(const char *device, int port) {
  std::map<ld::AscendString, ld::AscendString> options;
  options[ld::OPTION_DEVICE_ID] = device;
  options[ld::OPTION_LISTEN_IP_INFO] = ("127.0.0.1:" + std::to_string(port)).c_str();
  return options;
}

// Four tensors of ACL memory, tensor t element i = base + 100 * t + i; registered.
int64_t RegisterPattern(ld::LlmDataDist &engine, std::vector<void *> &buffers, int32_t base) {
  ld::CacheDesc desc{};
  desc.num_tensors = 4;
  desc.data_type = ld::DT_INT32;
  desc.shape = {8, 16};
  std::vector<uint64_t> addrs;
  for (int32_t t = 0; t < 4; ++t) {
    void *buffer = nullptr;
    ShowStatus("malloc_huge_only", static_cast<uint32_t>(aclrtMalloc(&buffer, kSize, ACL_MEM_MALLOC_HUGE_ONLY)));
    std::vector<int32_t> host(kSize / sizeof(int32_t));
    for (size_t i = 0; i < host.size(); ++i) {
      host[i] = base == 0 ? 0 : base + 100 * t + static_cast<int32_t>(i);
    }
    ShowStatus("memcpy_h2d", static_cast<uint32_t>(aclrtMemcpy(buffer, kSize, host.data(), kSize,
                                                              ACL_MEMCPY_HOST_TO_DEVICE)));
    std::vector<int32_t> back(host.size(), -1);
    (void)aclrtMemcpy(back.data(), kSize, buffer, kSize, ACL_MEMCPY_DEVICE_TO_HOST);
    Show("memcpy_round_trip", back == host ? "equal" : "different");
    buffers.push_back(buffer);
    addrs.push_back(reinterpret_cast<uint64_t>(buffer));
  }
  int64_t cache_id = -1;
  ShowStatus("register", engine.RegisterKvCache(desc, addrs, {}, cache_id));
  return cache_id;
}

// Batch 0 of every tensor of `buffers` holds the Prompt's batch `batch`.
std::string CheckBatch(const std::vector<void *> &buffers, int32_t base, int32_t batch) {
  for (size_t t = 0; t < buffers.size(); ++t) {
    std::vector<int32_t> host(kSize / sizeof(int32_t));
    (void)aclrtMemcpy(host.data(), kSize, buffers[t], kSize, ACL_MEMCPY_DEVICE_TO_HOST);
    for (int32_t i = 0; i < 16; ++i) {
      if (host[i] != base + 100 * static_cast<int32_t>(t) + batch * 16 + i) {
        return "different";
      }
    }
  }
  return "equal";
}

void Transfers(ld::LlmDataDist &decoder, int64_t prompt_cache, int64_t decoder_cache,
               const std::vector<void *> &decoder_buffers) {
  ld::CacheIndex index{};
  index.cluster_id = 10;
  index.cache_id = prompt_cache;
  index.batch_index = 5;
  ld::Cache local{};
  local.cache_id = decoder_cache;
  ShowStatus("inject_fault", lldd_mock_inject_fault("lldd_pull_kv_cache", ld::LLM_TIMEOUT, 1, 0));
  ShowStatus("pull_under_fault", decoder.PullKvCache(index, local, 0));
  ShowStatus("pull_after_fault", decoder.PullKvCache(index, local, 0));
  Show("pulled_batch", CheckBatch(decoder_buffers, 1000000, 5));
  ld::KvCacheExtParam one_default{};
  one_default.src_layer_range = {0, 0};   // dst_layer_range stays {-1, -1}: PR-1
  index.batch_index = 6;
  ShowStatus("pull_one_default_pair", decoder.PullKvCache(index, local, 0, -1, one_default));
  Show("after_one_default_pair", CheckBatch(decoder_buffers, 1000000, 6));
  void *spare = nullptr;
  ShowStatus("inject_acl_fault", lldd_mock_inject_fault("aclrtMalloc", ACL_ERROR_RT_MEMORY_ALLOCATION, 1, 0));
  ShowStatus("malloc_under_fault", static_cast<uint32_t>(aclrtMalloc(&spare, kSize, ACL_MEM_MALLOC_HUGE_ONLY)));
}

}  // namespace

int main(int argc, char **argv) {
  if (argc != 3) {
    std::printf("usage: sdk_behaviour PROMPT_PORT DECODER_PORT\n");
    return 2;
  }
  std::vector<void *> prompt_buffers;
  std::vector<void *> decoder_buffers;
  {
    ld::LlmDataDist prompt(10, ld::LlmRole::kPrompt);
    ld::LlmDataDist decoder(20, ld::LlmRole::kDecoder);
    ShowStatus("prompt_initialize", prompt.Initialize(Options("3", std::atoi(argv[1]))));
    int32_t device = -1;
    (void)aclrtGetDevice(&device);
    Show("device_after_initialize", std::to_string(device));
    const int64_t prompt_cache = RegisterPattern(prompt, prompt_buffers, 1000000);
    ShowStatus("decoder_initialize", decoder.Initialize(Options("5", std::atoi(argv[2]))));
    const int64_t decoder_cache = RegisterPattern(decoder, decoder_buffers, 0);
    ld::ClusterInfo cluster;
    cluster.remote_cluster_id = 10;
    ld::IpInfo local;
    local.ip = "127.0.0.1";
    cluster.local_ip_infos.push_back(local);
    ld::IpInfo remote;
    remote.ip = "127.0.0.1";
    remote.port = static_cast<uint16_t>(std::atoi(argv[1]));
    cluster.remote_ip_infos.push_back(remote);
    std::vector<ld::Status> rets;
    ShowStatus("link", decoder.LinkLlmClusters({cluster}, rets));
    Transfers(decoder, prompt_cache, decoder_cache, decoder_buffers);
    rets.clear();
    ShowStatus("unlink", decoder.UnlinkLlmClusters({cluster}, rets));
    ShowStatus("unregister", decoder.UnregisterKvCache(decoder_cache));
    decoder.Finalize();
    ShowStatus("unregister_prompt", prompt.UnregisterKvCache(prompt_cache));
    prompt.Finalize();
    ShowStatus("pull_after_finalize", decoder.PullKvCache(ld::CacheIndex{10, prompt_cache, 0, {}}, ld::Cache{}));
    prompt.Finalize();  // twice: a no-op
  }  // the destructors, after Finalize
  uint32_t freed = 0;
  for (void *buffer : prompt_buffers) {
    freed |= static_cast<uint32_t>(aclrtFree(buffer));
  }
  for (void *buffer : decoder_buffers) {
    freed |= static_cast<uint32_t>(aclrtFree(buffer));
  }
  ShowStatus("free_after_finalize", freed);
  Show("live_engines", std::to_string(lldd_mock_live_engines()));
  Show("live_allocations", std::to_string(lldd_mock_live_allocations()));
  return 0;
}
