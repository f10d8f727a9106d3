// Helpers shared by the C++ test programs of tests/cpp: written in the manner of the
// vendor's C++ samples (an int32 KV cache of 4 tensors shaped {8, 16}, ACL memory from
// aclrtMalloc filled with aclrtMemcpy, status printed with aclGetRecentErrMsg), but with
// a pattern whose bytes the Python tests compute on their own, and with the two
// processes kept in step by lines on stdin/stdout instead of sleeps.
//
// Pattern: element i of tensor t of a cache filled with seed s is s * 1000000 + t * 10000 + i
// (seed 0: zeros). A dump is the tensors' bytes one after another, copied back with
// aclrtMemcpy(DEVICE_TO_HOST).
#ifndef LLDD_TESTS_CPP_SAMPLE_UTIL_H
#define LLDD_TESTS_CPP_SAMPLE_UTIL_H

#include <cstdint>
#include <cstdio>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "acl/acl.h"
#include "llm_datadist/llm_datadist.h"

namespace sample {

using namespace llm_datadist;

constexpr uint32_t kNumTensors = 4U;
constexpr int64_t kBlocks = 8;
constexpr int64_t kBlockElements = 16;
constexpr size_t kTensorSize = kBlocks * kBlockElements * sizeof(int32_t);

#define SAMPLE_CHECK_ACL(x)                                                                 \
  do {                                                                                      \
    const aclError sample_ret = (x);                                                        \
    if (sample_ret != ACL_ERROR_NONE) {                                                     \
      std::cerr << __FILE__ << ":" << __LINE__ << " aclError:" << sample_ret << std::endl;  \
      return -1;                                                                            \
    }                                                                                       \
  } while (0)

inline const char *RecentErrMsg() {
  const char *message = aclGetRecentErrMsg();
  return message == nullptr ? "no error" : message;
}

// Prints "[ERROR] <what> failed, ret = <hex>" and returns false unless ret is LLM_SUCCESS.
inline bool Ok(const char *what, Status ret) {
  if (ret != LLM_SUCCESS) {
    std::printf("[ERROR] %s failed, ret = 0x%X, errmsg: %s\n", what, ret, RecentErrMsg());
    std::fflush(stdout);
    return false;
  }
  std::printf("[INFO] %s success\n", what);
  std::fflush(stdout);
  return true;
}

inline std::map<AscendString, AscendString> Options(const std::string &device_id, const std::string &listen) {
  std::map<AscendString, AscendString> options;
  options[OPTION_DEVICE_ID] = device_id.c_str();
  if (!listen.empty()) {
    options[OPTION_LISTEN_IP_INFO] = listen.c_str();
  }
  return options;
}

inline ClusterInfo Cluster(uint64_t remote_cluster_id, const std::string &local_ip, const std::string &remote_ip,
                           uint16_t remote_port) {
  ClusterInfo cluster;
  cluster.remote_cluster_id = remote_cluster_id;
  IpInfo local;
  local.ip = local_ip.c_str();
  cluster.local_ip_infos.emplace_back(std::move(local));
  IpInfo remote;
  remote.ip = remote_ip.c_str();
  remote.port = remote_port;
  cluster.remote_ip_infos.emplace_back(std::move(remote));
  return cluster;
}

// A cache of the peer, by id, at batch_index.
inline CacheIndex RemoteIndex(uint64_t cluster_id, int64_t cache_id, uint32_t batch_index = 0) {
  CacheIndex index{};
  index.cluster_id = cluster_id;
  index.cache_id = cache_id;
  index.batch_index = batch_index;
  return index;
}

// The cache of a sample: ACL memory, registered; Release() unregisters and frees it.
struct KvCache {
  std::vector<void *> buffers;
  int64_t cache_id = -1;
  CacheDesc desc{};

  int Register(LlmDataDist &engine, int32_t seed) {
    desc.num_tensors = kNumTensors;
    desc.data_type = DT_INT32;
    desc.shape = {kBlocks, kBlockElements};
    std::vector<uint64_t> addrs;
    for (uint32_t t = 0U; t < kNumTensors; ++t) {
      void *buffer = nullptr;
      SAMPLE_CHECK_ACL(aclrtMalloc(&buffer, kTensorSize, ACL_MEM_MALLOC_HUGE_ONLY));
      buffers.push_back(buffer);
      std::vector<int32_t> host(kTensorSize / sizeof(int32_t));
      for (size_t i = 0; i < host.size(); ++i) {
        host[i] = seed == 0 ? 0 : static_cast<int32_t>(seed * 1000000 + static_cast<int32_t>(t) * 10000 +
                                                         static_cast<int32_t>(i));
      }
      SAMPLE_CHECK_ACL(aclrtMemcpy(buffer, kTensorSize, host.data(), kTensorSize, ACL_MEMCPY_HOST_TO_DEVICE));
      addrs.push_back(reinterpret_cast<uint64_t>(buffer));
    }
    return Ok("RegisterKvCache", engine.RegisterKvCache(desc, addrs, {}, cache_id)) ? 0 : -1;
  }

  Cache AsCache() const {
    Cache cache{};
    cache.cache_id = cache_id;
    cache.cache_desc = desc;
    for (void *buffer : buffers) {
      cache.tensor_addrs.push_back(reinterpret_cast<uintptr_t>(buffer));
    }
    return cache;
  }

  int Dump(const std::string &path) const {
    FILE *out = std::fopen(path.c_str(), "wb");
    if (out == nullptr) {
      return -1;
    }
    int rc = 0;
    for (void *buffer : buffers) {
      std::vector<char> host(kTensorSize);
      if (aclrtMemcpy(host.data(), kTensorSize, buffer, kTensorSize, ACL_MEMCPY_DEVICE_TO_HOST) != ACL_SUCCESS ||
          std::fwrite(host.data(), 1, host.size(), out) != host.size()) {
        rc = -1;
      }
    }
    return std::fclose(out) == 0 ? rc : -1;
  }

  void Release(LlmDataDist &engine) {
    if (cache_id > 0) {
      (void)Ok("UnregisterKvCache", engine.UnregisterKvCache(cache_id));
      cache_id = -1;
    }
    for (void *buffer : buffers) {
      (void)aclrtFree(buffer);
    }
    buffers.clear();
  }
};

// Blocks until the driving test writes `word` on a line of stdin (false at end of input).
inline bool WaitFor(const std::string &word) {
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line == word) {
      return true;
    }
  }
  return false;
}

}  // namespace sample

#endif  // LLDD_TESTS_CPP_SAMPLE_UTIL_H
