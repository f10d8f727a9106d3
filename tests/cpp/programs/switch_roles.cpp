// Role switching in two processes, in the manner of the vendor's prompt_switch_roles /
// decoder_switch_roles samples. A starts as the Prompt (cluster 0, listening), B as the
// Decoder (cluster 1, not listening). B pulls from A and unlinks; then A becomes a
// Decoder (its listener stops) and B a Prompt listening on PORT_B; A links to B and
// pushes four tensors per layer (tensor_num_per_layer 4), as the sample does.
//
//     switch_roles a DEVICE_ID IP PORT_A PORT_B
//     switch_roles b DEVICE_ID IP PORT_A PORT_B REMOTE_CACHE_ID OUT_AFTER_PULL OUT_AFTER_PUSH
//
// A prints "READY <cache_id>" and waits for "pulled"; then "SWITCHED" and waits for "go";
// it ends after its pushes. B prints "SWITCHED <cache_id>" after its pull, its unlink and
// its SetRole, and waits for "pushed" before its last dump.
// A: blocks 0, 1 into B's 2, 3 and batch 4 into B's batch 4. B: blocks 1, 2, 3 into 1, 2, 3
// and batch 0 into batch 0.
#include <cstdlib>
#include <string>

#include "sample_util.h"

namespace {
constexpr uint64_t kClusterA = 0;
constexpr uint64_t kClusterB = 1;
constexpr uint8_t kPushTensorNumPerLayer = 4;

int PushFromA(sample::LlmDataDist &engine, const sample::KvCache &cache, int64_t remote_cache) {
  sample::CacheIndex index = sample::RemoteIndex(kClusterB, remote_cache);
  sample::KvCacheExtParam param{};
  param.src_layer_range = {0, 0};
  param.dst_layer_range = {0, 0};
  param.tensor_num_per_layer = kPushTensorNumPerLayer;
  const sample::Cache local = cache.AsCache();
  if (!sample::Ok("PushKvBlocks", engine.PushKvBlocks(local, index, {0, 1}, {2, 3}, param))) {
    return -1;
  }
  index.batch_index = 4;
  sample::KvCacheExtParam param2{};
  param2.tensor_num_per_layer = kPushTensorNumPerLayer;
  return sample::Ok("PushKvCache", engine.PushKvCache(local, index, 4, -1, param2)) ? 0 : -1;
}

int RunA(const std::string &device, const std::string &ip, uint16_t port_a, uint16_t port_b) {
  sample::LlmDataDist engine(kClusterA, sample::LlmRole::kPrompt);
  if (!sample::Ok("Initialize", engine.Initialize(sample::Options(device, ip + ":" + std::to_string(port_a))))) {
    return 1;
  }
  sample::KvCache cache;
  int rc = cache.Register(engine, 3);
  std::printf("READY %lld\n", static_cast<long long>(cache.cache_id));
  std::fflush(stdout);
  if (rc == 0 && (!sample::WaitFor("pulled") || !sample::Ok("SetRole", engine.SetRole(sample::LlmRole::kDecoder)))) {
    rc = -1;
  }
  std::printf("SWITCHED\n");
  std::fflush(stdout);
  std::string line;
  int64_t remote_cache = -1;
  if (rc == 0 && std::getline(std::cin, line) && line.rfind("go ", 0) == 0) {
    remote_cache = std::strtoll(line.c_str() + 3, nullptr, 10);
  } else {
    rc = -1;
  }
  const sample::ClusterInfo b = sample::Cluster(kClusterB, ip, ip, port_b);
  std::vector<sample::Status> rets;
  if (rc == 0 && sample::Ok("LinkLlmClusters", engine.LinkLlmClusters({b}, rets, 5000))) {
    rc = PushFromA(engine, cache, remote_cache);
    std::vector<sample::Status> unlink_rets;
    rc = sample::Ok("UnlinkLlmClusters", engine.UnlinkLlmClusters({b}, unlink_rets, 5000)) ? rc : -1;
  } else {
    rc = -1;
  }
  cache.Release(engine);
  engine.Finalize();
  return rc == 0 ? 0 : 1;
}

int PullIntoB(sample::LlmDataDist &engine, const sample::KvCache &cache, const sample::ClusterInfo &a,
              int64_t remote_cache) {
  std::vector<sample::Status> rets;
  if (!sample::Ok("LinkLlmClusters", engine.LinkLlmClusters({a}, rets, 5000))) {
    return -1;
  }
  sample::CacheIndex index = sample::RemoteIndex(kClusterA, remote_cache);
  sample::Cache local{};
  local.cache_id = cache.cache_id;
  int rc = sample::Ok("PullKvBlocks", engine.PullKvBlocks(index, local, {1, 2, 3}, {1, 2, 3})) ? 0 : -1;
  if (rc == 0 && !sample::Ok("PullKvCache", engine.PullKvCache(index, local, 0))) {
    rc = -1;
  }
  std::vector<sample::Status> unlink_rets;
  return sample::Ok("UnlinkLlmClusters", engine.UnlinkLlmClusters({a}, unlink_rets, 5000)) ? rc : -1;
}

int RunB(const std::string &device, const std::string &ip, uint16_t port_a, uint16_t port_b, int64_t remote_cache,
         const std::string &out_pull, const std::string &out_push) {
  sample::LlmDataDist engine(kClusterB, sample::LlmRole::kDecoder);
  if (!sample::Ok("Initialize", engine.Initialize(sample::Options(device, "")))) {
    return 1;
  }
  sample::KvCache cache;
  int rc = cache.Register(engine, 0);
  if (rc == 0) {
    rc = PullIntoB(engine, cache, sample::Cluster(kClusterA, ip, ip, port_a), remote_cache);
  }
  if (rc == 0 && cache.Dump(out_pull) != 0) {
    rc = -1;
  }
  std::map<sample::AscendString, sample::AscendString> options;
  options[sample::OPTION_LISTEN_IP_INFO] = (ip + ":" + std::to_string(port_b)).c_str();
  if (rc == 0 && !sample::Ok("SetRole", engine.SetRole(sample::LlmRole::kPrompt, options))) {
    rc = -1;
  }
  std::printf("SWITCHED %lld\n", static_cast<long long>(cache.cache_id));
  std::fflush(stdout);
  if (rc == 0 && (!sample::WaitFor("pushed") || cache.Dump(out_push) != 0)) {
    rc = -1;
  }
  cache.Release(engine);
  engine.Finalize();
  return rc == 0 ? 0 : 1;
}
}  // namespace

int main(int argc, char **argv) {
  const std::string who = argc > 1 ? argv[1] : "";
  if (who == "a" && argc == 6) {
    return RunA(argv[2], argv[3], static_cast<uint16_t>(std::atoi(argv[4])), static_cast<uint16_t>(std::atoi(argv[5])));
  }
  if (who == "b" && argc == 9) {
    return RunB(argv[2], argv[3], static_cast<uint16_t>(std::atoi(argv[4])), static_cast<uint16_t>(std::atoi(argv[5])),
                std::strtoll(argv[6], nullptr, 10), argv[7], argv[8]);
  }
  std::printf("[ERROR] usage: switch_roles a DEVICE IP PORT_A PORT_B | b DEVICE IP PORT_A PORT_B CACHE OUT1 OUT2\n");
  return 2;
}
