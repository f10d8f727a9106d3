// What libllm_datadist.so reports about each call besides its status (docs/cpp.md,
// "Lints, strict mode, traces, faults"):
//  - lints: with LLM_DATADIST_FFI_LINTS set (not "0"), the lints the mock engine recorded
//    during a call are printed on stderr, one line each, naming the rule and the method;
//  - traces: with LLM_DATADIST_FFI_TRACE=DIR, every public call is one Chrome trace event
//    in DIR/trace-<pid>-<start us>.json, in the format of the Python package's traces
//    (llm_datadist_ffi/_trace.py), so that `python -m llm_datadist_ffi trace merge DIR`
//    puts C++ and Python processes on one timeline.
// Both variables are read once per process.
#ifndef LLDD_SDK_REPORT_H
#define LLDD_SDK_REPORT_H

#include <chrono>
#include <cstdint>
#include <string>

namespace lldd_sdk {

// One public call: construct before the call, Done() with its status after it.
class CallReport {
 public:
  CallReport(const char *method, std::string args);
  uint32_t Done(uint32_t status);

 private:
  const char *method_;
  std::string args_;
  uint64_t bytes_before_ = 0;
  int64_t start_wall_us_ = 0;
  std::chrono::steady_clock::time_point start_;
};

// Names this process's track in the trace ("PROMPT cluster 3"), as the Python package
// does when an engine is made. Nothing without a trace.
void NameProcess(const std::string &label);

// JSON pieces for the args of an event.
std::string JsonString(const char *text);
std::string JsonField(const char *name, const std::string &json_value);
std::string JsonInt(const char *name, int64_t value);
std::string JsonUint(const char *name, uint64_t value);

}  // namespace lldd_sdk

#endif  // LLDD_SDK_REPORT_H
