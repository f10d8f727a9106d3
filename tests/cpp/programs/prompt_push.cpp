// The pushing side of a pair, in the manner of the vendor's prompt_push sample: the
// Prompt registers its cache, links to the listening Decoder, PushKvBlocks then
// PushKvCache, unlinks, UnregisterKvCache, aclrtFree, Finalize.
//
//     prompt_push DEVICE_ID LOCAL_IP REMOTE_IP REMOTE_CACHE_ID [DECODER_PORT] [SEED]
//
// Blocks: local 1, 2, 3 into remote 4, 5, 6; cache: local batch 7 into remote batch 0;
// every layer (the default ext param: 4 tensors, 2 per layer). The Prompt is cluster 0,
// the Decoder cluster 1.
#include <cstdlib>
#include <string>

#include "sample_util.h"

namespace {
constexpr uint64_t kPromptClusterId = 0;
constexpr uint64_t kDecoderClusterId = 1;
constexpr uint16_t kFixedDecoderPort = 27362;

int Push(sample::LlmDataDist &engine, const sample::KvCache &cache, int64_t remote_cache) {
  sample::CacheIndex index = sample::RemoteIndex(kDecoderClusterId, remote_cache);
  const sample::Cache local = cache.AsCache();  // a push reads placement and num_tensors from it
  if (!sample::Ok("PushKvBlocks", engine.PushKvBlocks(local, index, {1, 2, 3}, {4, 5, 6}))) {
    return -1;
  }
  return sample::Ok("PushKvCache", engine.PushKvCache(local, index, 7)) ? 0 : -1;
}
}  // namespace

int main(int argc, char **argv) {
  if (argc < 5 || argc > 7) {
    std::printf("[ERROR] usage: prompt_push DEVICE_ID LOCAL_IP REMOTE_IP REMOTE_CACHE_ID [DECODER_PORT] [SEED]\n");
    return 2;
  }
  const uint16_t decoder_port = static_cast<uint16_t>(argc > 5 ? std::atoi(argv[5]) : kFixedDecoderPort);
  const int32_t seed = argc > 6 ? std::atoi(argv[6]) : 2;
  sample::LlmDataDist engine(kPromptClusterId, sample::LlmRole::kPrompt);
  if (!sample::Ok("Initialize", engine.Initialize(sample::Options(argv[1], "")))) {
    return 1;
  }
  sample::KvCache cache;
  int rc = cache.Register(engine, seed);
  const sample::ClusterInfo decoder = sample::Cluster(kDecoderClusterId, argv[2], argv[3], decoder_port);
  std::vector<sample::Status> rets;
  if (rc == 0 && !sample::Ok("LinkLlmClusters", engine.LinkLlmClusters({decoder}, rets, 5000))) {
    rc = -1;
  } else if (rc == 0) {
    rc = Push(engine, cache, std::strtoll(argv[4], nullptr, 10));
    std::vector<sample::Status> unlink_rets;
    if (!sample::Ok("UnlinkLlmClusters", engine.UnlinkLlmClusters({decoder}, unlink_rets, 5000))) {
      rc = -1;
    }
  }
  cache.Release(engine);
  engine.Finalize();
  std::printf("[INFO] Prompt Sample end\n");
  return rc == 0 ? 0 : 1;
}
