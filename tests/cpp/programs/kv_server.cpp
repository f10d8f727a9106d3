// The serving side of a pair (the Prompt of a pull, the Decoder of a push), in the
// manner of the vendor's prompt_pull / decoder_push samples: Initialize with a listen
// address, register a cache of ACL memory, wait while the peer links and moves bytes,
// then UnregisterKvCache, aclrtFree and Finalize -- and the LlmDataDist object is
// destroyed only after Finalize, at the end of its scope.
//
//     kv_server ROLE CLUSTER_ID DEVICE_ID LISTEN_IP [PORT] [SEED] [DUMP_FILE]
//
// ROLE is prompt or decoder. PORT defaults to a fixed port, as the samples' do.
// Prints "READY <cache_id>" once registered, then waits for a line "done" on stdin;
// with DUMP_FILE it then writes the cache's bytes there (sample_util.h).
#include <cstdlib>
#include <string>

#include "sample_util.h"

namespace {
constexpr uint16_t kFixedListenPort = 27361;
}  // namespace

int main(int argc, char **argv) {
  if (argc < 5 || argc > 8) {
    std::printf("[ERROR] usage: kv_server ROLE CLUSTER_ID DEVICE_ID LISTEN_IP [PORT] [SEED] [DUMP_FILE]\n");
    return 2;
  }
  const std::string role(argv[1]);
  const uint64_t cluster_id = std::strtoull(argv[2], nullptr, 10);
  const std::string device_id(argv[3]);
  const std::string ip(argv[4]);
  const std::string port = argc > 5 ? argv[5] : std::to_string(kFixedListenPort);
  const int32_t seed = argc > 6 ? std::atoi(argv[6]) : 1;
  const std::string dump = argc > 7 ? argv[7] : "";

  sample::LlmDataDist engine(cluster_id, role == "prompt" ? sample::LlmRole::kPrompt : sample::LlmRole::kDecoder);
  if (!sample::Ok("Initialize", engine.Initialize(sample::Options(device_id, ip + ":" + port)))) {
    return 1;
  }
  sample::KvCache cache;
  if (cache.Register(engine, seed) != 0) {
    engine.Finalize();
    return 1;
  }
  std::printf("READY %lld\n", static_cast<long long>(cache.cache_id));
  std::fflush(stdout);
  const bool told = sample::WaitFor("done");
  const int dumped = dump.empty() ? 0 : cache.Dump(dump);
  cache.Release(engine);
  engine.Finalize();
  std::printf("[INFO] server end\n");
  return told && dumped == 0 ? 0 : 1;
}
