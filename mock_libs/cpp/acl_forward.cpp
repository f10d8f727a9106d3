// libacl_rt.so and libascendcl.so of the SDK: the ACL runtime subset of
// include/acl/api.h, each function forwarded to the mock's own (sdk_mock.h), so that
// ACL memory and the engine live in one mock instance. Both libraries are built from
// this file; the vendor ships the same C symbols under both names (docs/cpp.md).
//
// A program links these by name (-lacl_rt, -lascendcl) and the linker needs the
// definitions in a library named on its command line; the mock, reached only through
// a dependency, would not do. tests/cpp/test_sdk_build.py checks that every function
// of include/acl/api.h is defined here.
#include <cstddef>
#include <cstdint>

#include "acl_subset.h"
#include "sdk_mock.h"

#define LLDD_EXPORT extern "C" __attribute__((visibility("default")))

namespace {
constexpr const char kWho[] = "ACL";
const char kNoMock[] = "llm_datadist_ffi SDK: the mock library could not be opened";
}  // namespace

// One forwarder: the mock's function of the same name, resolved at the first call;
// `fallback` when the mock cannot be opened (the reason is on stderr).
#define LLDD_FORWARD(ret, name, params, args, fallback)                                          \
  LLDD_EXPORT ret name params {                                                                  \
    static const auto fn = reinterpret_cast<decltype(&name)>(lldd_sdk::MockSymbol(#name, kWho)); \
    return fn == nullptr ? (fallback) : fn args;                                                 \
  }

LLDD_FORWARD(aclError, aclInit, (const char *configPath), (configPath), ACL_ERROR_FAILURE)
LLDD_FORWARD(aclError, aclFinalize, (void), (), ACL_ERROR_FAILURE)
LLDD_FORWARD(aclError, aclFinalizeReference, (uint64_t *refCount), (refCount), ACL_ERROR_FAILURE)
LLDD_FORWARD(const char *, aclGetRecentErrMsg, (void), (), kNoMock)
LLDD_FORWARD(aclError, aclrtSetDevice, (int32_t deviceId), (deviceId), ACL_ERROR_FAILURE)
LLDD_FORWARD(aclError, aclrtResetDevice, (int32_t deviceId), (deviceId), ACL_ERROR_FAILURE)
LLDD_FORWARD(aclError, aclrtResetDeviceForce, (int32_t deviceId), (deviceId), ACL_ERROR_FAILURE)
LLDD_FORWARD(aclError, aclrtGetDevice, (int32_t *deviceId), (deviceId), ACL_ERROR_FAILURE)
LLDD_FORWARD(aclError, aclrtGetDeviceCount, (uint32_t *count), (count), ACL_ERROR_FAILURE)
LLDD_FORWARD(aclError, aclrtSynchronizeDevice, (void), (), ACL_ERROR_FAILURE)
LLDD_FORWARD(aclError, aclrtMalloc, (void **devPtr, size_t size, aclrtMemMallocPolicy policy),
             (devPtr, size, policy), ACL_ERROR_FAILURE)
LLDD_FORWARD(aclError, aclrtMallocHost, (void **hostPtr, size_t size), (hostPtr, size), ACL_ERROR_FAILURE)
LLDD_FORWARD(aclError, aclrtFree, (void *devPtr), (devPtr), ACL_ERROR_FAILURE)
LLDD_FORWARD(aclError, aclrtFreeHost, (void *hostPtr), (hostPtr), ACL_ERROR_FAILURE)
LLDD_FORWARD(aclError, aclrtMemcpy,
             (void *dst, size_t destMax, const void *src, size_t count, aclrtMemcpyKind kind),
             (dst, destMax, src, count, kind), ACL_ERROR_FAILURE)
LLDD_FORWARD(aclError, aclrtMemcpyAsync,
             (void *dst, size_t destMax, const void *src, size_t count, aclrtMemcpyKind kind, aclrtStream stream),
             (dst, destMax, src, count, kind, stream), ACL_ERROR_FAILURE)
LLDD_FORWARD(aclError, aclrtMemset, (void *devPtr, size_t maxCount, int32_t value, size_t count),
             (devPtr, maxCount, value, count), ACL_ERROR_FAILURE)
LLDD_FORWARD(aclError, aclrtGetMemInfo, (aclrtMemAttr attr, size_t *free, size_t *total), (attr, free, total),
             ACL_ERROR_FAILURE)
LLDD_FORWARD(aclError, aclrtCreateStream, (aclrtStream *stream), (stream), ACL_ERROR_FAILURE)
LLDD_FORWARD(aclError, aclrtDestroyStream, (aclrtStream stream), (stream), ACL_ERROR_FAILURE)
LLDD_FORWARD(aclError, aclrtSynchronizeStream, (aclrtStream stream), (stream), ACL_ERROR_FAILURE)
LLDD_FORWARD(aclError, aclrtSynchronizeStreamWithTimeout, (aclrtStream stream, int32_t timeout), (stream, timeout),
             ACL_ERROR_FAILURE)
LLDD_FORWARD(aclError, aclrtGetVersion, (int32_t *majorVersion, int32_t *minorVersion, int32_t *patchVersion),
             (majorVersion, minorVersion, patchVersion), ACL_ERROR_FAILURE)
LLDD_FORWARD(const char *, aclrtGetSocName, (void), (), nullptr)

// For libllm_datadist.so's same-instance check: the mock these forwarders call.
LLDD_EXPORT void *lldd_sdk_forwarded_mock(void) { return lldd_sdk::MockHandle(); }
