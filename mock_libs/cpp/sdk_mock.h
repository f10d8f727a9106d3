// The SDK's libraries and the mock they stand on (docs/cpp.md, "How it is built").
//
// libllm_datadist.so, libascendcl.so and libacl_rt.so each reach the C mock through
// dlopen/dlsym on one handle, never by linking its names: the mock exports aclrt* and
// lldd_* under the very names these libraries define or that a shim defines, and a
// plain call would bind to the wrong copy. Every one of them opens the same file, so a
// process has one mock instance: memory from aclrtMalloc (through libacl_rt.so) is the
// memory the engine (through libllm_datadist.so) registers.
//
// The file, in this order: $LLM_DATADIST_FFI_MOCK_LIB (a sanitizer build, as for the
// Python package); the mock at LLDD_SDK_MOCK_RELPATH from the directory of the library
// itself, when built with that macro (the SDK in the package's _lib/sdk/lib); else
// "libacl_rt.so" through the loader's search path (the fake toolkit of
// tests/vendor_double, where libacl_rt.so is the mock itself).
#ifndef LLDD_SDK_MOCK_H
#define LLDD_SDK_MOCK_H

namespace lldd_sdk {

// The mock's handle, opened once per library (nullptr after a message on stderr).
void *MockHandle();
// The path MockHandle() opened or tried ("" before the first call).
const char *MockPath();
// A symbol of the mock, or nullptr (with a message on stderr naming `who`).
void *MockSymbol(const char *name, const char *who);

}  // namespace lldd_sdk

#endif  // LLDD_SDK_MOCK_H
