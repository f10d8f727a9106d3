// The pulling side of a pair, in the manner of the vendor's decoder_pull sample:
// Initialize (with its own listen address), register a zeroed cache right after it
// (aclrtMalloc with no aclrtSetDevice: Initialize set the device), link to the Prompt,
// PullKvBlocks then PullKvCache, copy the cache back with aclrtMemcpy and write it to
// OUT_FILE, then UnlinkLlmClusters, UnregisterKvCache, aclrtFree, Finalize.
//
//     decoder_pull DEVICE_ID LOCAL_IP REMOTE_IP REMOTE_CACHE_ID OUT_FILE [PROMPT_PORT] [LOCAL_PORT]
//
// Blocks: remote 1, 2, 3 into local 4, 5, 6; cache: remote batch 7 into local batch 0.
// The Prompt is cluster 0, this Decoder cluster 1 (as in the samples).
#include <cstdlib>
#include <string>

#include "sample_util.h"

namespace {
constexpr uint64_t kPromptClusterId = 0;
constexpr uint64_t kDecoderClusterId = 1;
constexpr uint16_t kFixedPromptPort = 27361;
constexpr uint16_t kFixedDecoderPort = 27362;

int Run(sample::LlmDataDist &engine, sample::KvCache &cache, const sample::ClusterInfo &prompt, int64_t remote_cache,
        const std::string &out) {
  std::vector<sample::Status> rets;
  if (!sample::Ok("LinkLlmClusters", engine.LinkLlmClusters({prompt}, rets, 5000))) {
    return -1;
  }
  sample::CacheIndex index = sample::RemoteIndex(kPromptClusterId, remote_cache);
  sample::Cache local{};
  local.cache_id = cache.cache_id;
  int rc = sample::Ok("PullKvBlocks", engine.PullKvBlocks(index, local, {1, 2, 3}, {4, 5, 6})) ? 0 : -1;
  index.batch_index = 7;
  if (rc == 0 && !sample::Ok("PullKvCache", engine.PullKvCache(index, local, 0))) {
    rc = -1;
  }
  if (rc == 0 && cache.Dump(out) != 0) {
    rc = -1;
  }
  std::vector<sample::Status> unlink_rets;
  if (!sample::Ok("UnlinkLlmClusters", engine.UnlinkLlmClusters({prompt}, unlink_rets, 5000))) {
    rc = -1;
  }
  return rc;
}
}  // namespace

int main(int argc, char **argv) {
  if (argc < 6 || argc > 8) {
    std::printf("[ERROR] usage: decoder_pull DEVICE_ID LOCAL_IP REMOTE_IP REMOTE_CACHE_ID OUT_FILE [PROMPT_PORT] "
                "[LOCAL_PORT]\n");
    return 2;
  }
  const std::string local_ip(argv[2]);
  const uint16_t prompt_port = static_cast<uint16_t>(argc > 6 ? std::atoi(argv[6]) : kFixedPromptPort);
  const std::string local_port = argc > 7 ? argv[7] : std::to_string(kFixedDecoderPort);
  sample::LlmDataDist engine(kDecoderClusterId, sample::LlmRole::kDecoder);
  if (!sample::Ok("Initialize", engine.Initialize(sample::Options(argv[1], local_ip + ":" + local_port)))) {
    return 1;
  }
  sample::KvCache cache;
  int rc = cache.Register(engine, 0);
  if (rc == 0) {
    rc = Run(engine, cache, sample::Cluster(kPromptClusterId, local_ip, argv[3], prompt_port),
             std::strtoll(argv[4], nullptr, 10), argv[5]);
  }
  cache.Release(engine);
  engine.Finalize();
  std::printf("[INFO] Decoder Sample end\n");
  return rc == 0 ? 0 : 1;
}
