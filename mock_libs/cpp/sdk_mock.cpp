// Where the SDK's libraries find the mock: see sdk_mock.h.
#include "sdk_mock.h"

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace lldd_sdk {

namespace {

constexpr const char kMockLibEnv[] = "LLM_DATADIST_FFI_MOCK_LIB";
constexpr const char kAclLib[] = "libacl_rt.so";

std::string &Path() {
  static std::string path;
  return path;
}

// The directory of the shared object that holds this function, with a trailing '/'.
std::string OwnDirectory() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void *>(&OwnDirectory), &info) == 0 || info.dli_fname == nullptr) {
    return std::string();
  }
  const std::string file(info.dli_fname);
  const size_t slash = file.rfind('/');
  return slash == std::string::npos ? std::string() : file.substr(0, slash + 1U);
}

std::string ChoosePath() {
  const char *env = std::getenv(kMockLibEnv);
  if (env != nullptr && env[0] != '\0') {
    return env;
  }
#ifdef LLDD_SDK_MOCK_RELPATH
  const std::string dir = OwnDirectory();
  if (!dir.empty()) {
    return dir + LLDD_SDK_MOCK_RELPATH;
  }
#endif
  return kAclLib;
}

void *Open() {
  Path() = ChoosePath();
  void *handle = dlopen(Path().c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    std::fprintf(stderr, "llm_datadist_ffi SDK: cannot open the mock library %s: %s\n", Path().c_str(), dlerror());
  }
  return handle;  // stays open for the life of the process
}

}  // namespace

void *MockHandle() {
  static void *const handle = Open();
  return handle;
}

const char *MockPath() { return Path().c_str(); }

void *MockSymbol(const char *name, const char *who) {
  void *handle = MockHandle();
  void *symbol = handle == nullptr ? nullptr : dlsym(handle, name);
  if (handle != nullptr && symbol == nullptr) {
    std::fprintf(stderr, "llm_datadist_ffi SDK (%s): the mock library %s lacks %s\n", who, MockPath(), name);
  }
  return symbol;
}

}  // namespace lldd_sdk
