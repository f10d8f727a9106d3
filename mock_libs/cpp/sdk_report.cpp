// Lints on stderr and call traces for libllm_datadist.so: see sdk_report.h.
#include "sdk_report.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>

#include "sdk_mock.h"

namespace lldd_sdk {

namespace {

constexpr const char kWho[] = "libllm_datadist";

// The mock's lint record and byte counter (include/lldd/mock.h), nullptr when absent.
struct MockReporting {
  uint32_t (*lint_count)() = nullptr;
  uint32_t (*lint_rule)(uint32_t) = nullptr;
  const char *(*lint_text)(uint32_t) = nullptr;
  void (*lint_clear)() = nullptr;
  uint64_t (*bytes_moved)() = nullptr;
};

template <typename Fn>
void Resolve(const char *name, Fn &out) {
  out = reinterpret_cast<Fn>(MockSymbol(name, kWho));
}

const MockReporting &Reporting() {
  static const MockReporting reporting = [] {
    MockReporting r;
    Resolve("lldd_mock_lint_count", r.lint_count);
    Resolve("lldd_mock_lint_rule", r.lint_rule);
    Resolve("lldd_mock_lint_text", r.lint_text);
    Resolve("lldd_mock_lint_clear", r.lint_clear);
    Resolve("lldd_mock_bytes_moved", r.bytes_moved);
    return r;
  }();
  return reporting;
}

bool LintsOn() {
  static const bool on = [] {
    const char *value = std::getenv("LLM_DATADIST_FFI_LINTS");
    return value != nullptr && value[0] != '\0' && std::strcmp(value, "0") != 0;
  }();
  return on;
}

// The rule's id as docs/semantics.md writes it: the engine numbers PR-n as n, OPT-1 as 1001.
std::string RuleId(uint32_t rule) { return rule == 1001U ? "OPT-1" : "PR-" + std::to_string(rule); }

void PrintLints(const char *method) {
  const MockReporting &r = Reporting();
  if (r.lint_count == nullptr || r.lint_rule == nullptr || r.lint_text == nullptr) {
    return;
  }
  const uint32_t count = r.lint_count();
  for (uint32_t i = 0; i < count && i < 8U; ++i) {
    std::fprintf(stderr, "llm_datadist_ffi lint %s in %s: %s\n", RuleId(r.lint_rule(i)).c_str(), method,
                 r.lint_text(i));
  }
  if (count > 8U) {
    std::fprintf(stderr, "llm_datadist_ffi lint: %u more in %s (only 8 are kept)\n", count - 8U, method);
  }
}

int64_t WallMicros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch()).count();
}

const char *StatusName(uint32_t status) {
  switch (status) {
    case 0x0U: return "LLM_SUCCESS";
    case 0xFFFFFFFFU: return "LLM_FAILED";
    case 0x5010B001U: return "LLM_WAIT_PROC_TIMEOUT";
    case 0x5010B002U: return "LLM_KV_CACHE_NOT_EXIST";
    case 0x5010B005U: return "LLM_PARAM_INVALID";
    case 0x5010B007U: return "LLM_NOT_YET_LINK";
    case 0x5010B008U: return "LLM_ALREADY_LINK";
    case 0x5010B009U: return "LLM_LINK_FAILED";
    case 0x5010B00AU: return "LLM_UNLINK_FAILED";
    case 0x5010B00BU: return "LLM_NOTIFY_PROMPT_UNLINK_FAILED";
    case 0x5010B00CU: return "LLM_CLUSTER_NUM_EXCEED_LIMIT";
    case 0x5010B00DU: return "LLM_PROCESSING_LINK";
    case 0x5010B00EU: return "LLM_DEVICE_OUT_OF_MEMORY";
    case 0x5010B018U: return "LLM_EXIST_LINK";
    case 0x5010B019U: return "LLM_FEATURE_NOT_ENABLED";
    case 0x5010B01AU: return "LLM_TIMEOUT";
    case 0x5010B01BU: return "LLM_LINK_BUSY";
    case 0x5010B01CU: return "LLM_OUT_OF_MEMORY";
    default: return nullptr;
  }
}

// This process's trace file, opened at the first event (again in a child of fork()).
class Recorder {
 public:
  explicit Recorder(std::string directory) : directory_(std::move(directory)) {}

  void Write(const std::string &event_without_pid, bool metadata = false) {
    const std::lock_guard<std::mutex> lock(mutex_);
    if (broken_ || !OpenLocked()) {
      return;
    }
    const long tid = metadata ? 0L : syscall(SYS_gettid);
    std::string lines;
    if (!metadata && threads_.insert(tid).second) {
      lines += Line("{\"ph\":\"M\",\"name\":\"thread_name\",\"tid\":" + std::to_string(tid) +
                    ",\"args\":{\"name\":\"thread " + std::to_string(tid) + "\"}");
    }
    lines += Line(event_without_pid + (metadata ? "" : ",\"tid\":" + std::to_string(tid)));
    WriteAll(lines);
  }

 private:
  std::string Line(const std::string &open_object) const {
    return open_object + ",\"pid\":" + std::to_string(pid_) + "},\n";
  }

  bool OpenLocked() {
    const pid_t pid = getpid();
    if (fd_ >= 0 && pid_ == pid) {
      return true;
    }
    MakeDirectories();
    const std::string path = directory_ + "/trace-" + std::to_string(pid) + "-" + std::to_string(WallMicros()) +
                             ".json";
    fd_ = open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd_ < 0) {
      Stop(path);
      return false;
    }
    pid_ = pid;
    threads_.clear();
    WriteAll("[\n" + Line("{\"ph\":\"M\",\"name\":\"process_name\",\"tid\":0,\"args\":{\"name\":" +
                          JsonString((ProgramName() + " (pid " + std::to_string(pid) + ")").c_str()) + "}"));
    return !broken_;
  }

  static std::string ProgramName() {
    char buffer[4096];
    const ssize_t n = readlink("/proc/self/exe", buffer, sizeof(buffer) - 1U);
    if (n <= 0) {
      return "c++";
    }
    const std::string exe(buffer, static_cast<size_t>(n));
    return exe.substr(exe.rfind('/') + 1U);
  }

  void MakeDirectories() const {
    for (size_t i = 1; i <= directory_.size(); ++i) {
      if (i == directory_.size() || directory_[i] == '/') {
        (void)mkdir(directory_.substr(0, i).c_str(), 0755);  // EEXIST is fine; open() says the rest
      }
    }
  }

  void WriteAll(const std::string &text) {
    if (broken_ || write(fd_, text.data(), text.size()) != static_cast<ssize_t>(text.size())) {
      Stop(directory_);
    }
  }

  void Stop(const std::string &where) {
    if (!broken_) {  // a trace never fails the call it records: say so once, then record nothing
      std::fprintf(stderr, "llm_datadist_ffi: cannot write the call trace to %s (%s); tracing stops in process %d\n",
                   where.c_str(), std::strerror(errno), static_cast<int>(getpid()));
    }
    broken_ = true;
  }

  std::mutex mutex_;
  const std::string directory_;
  int fd_ = -1;
  pid_t pid_ = 0;
  bool broken_ = false;
  std::set<long> threads_;
};

Recorder *TheRecorder() {
  static Recorder *const recorder = [] {
    const char *dir = std::getenv("LLM_DATADIST_FFI_TRACE");
    return dir == nullptr || dir[0] == '\0' ? nullptr : new Recorder(dir);  // lives until exit
  }();
  return recorder;
}

}  // namespace

std::string JsonString(const char *text) {
  std::string out = "\"";
  for (const char *p = text; *p != '\0'; ++p) {
    const unsigned char c = static_cast<unsigned char>(*p);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20U) {
      char escaped[8];
      (void)std::snprintf(escaped, sizeof(escaped), "\\u%04x", c);
      out += escaped;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

std::string JsonField(const char *name, const std::string &json_value) {
  return JsonString(name) + ":" + json_value;
}

std::string JsonInt(const char *name, int64_t value) { return JsonField(name, std::to_string(value)); }

std::string JsonUint(const char *name, uint64_t value) { return JsonField(name, std::to_string(value)); }

CallReport::CallReport(const char *method, std::string args) : method_(method), args_(std::move(args)) {
  const MockReporting &r = Reporting();
  if (LintsOn() && r.lint_clear != nullptr) {
    r.lint_clear();  // the lints printed after the call are this call's
  }
  if (TheRecorder() != nullptr) {
    bytes_before_ = r.bytes_moved != nullptr ? r.bytes_moved() : 0U;
    start_wall_us_ = WallMicros();
    start_ = std::chrono::steady_clock::now();
  }
}

uint32_t CallReport::Done(uint32_t status) {
  if (LintsOn()) {
    PrintLints(method_);
  }
  Recorder *recorder = TheRecorder();
  if (recorder == nullptr) {
    return status;
  }
  const double dur_us =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start_).count();
  const char *name = StatusName(status);
  std::string args = args_.empty() ? std::string() : args_ + ",";
  args += JsonField("status", JsonString(name != nullptr ? name : std::to_string(status).c_str()));
  args += "," + JsonUint("status_code", status);
  const MockReporting &r = Reporting();
  if (r.bytes_moved != nullptr) {
    args += "," + JsonUint("bytes", r.bytes_moved() - bytes_before_);
  }
  char dur[32];
  (void)std::snprintf(dur, sizeof(dur), "%.3f", dur_us);
  recorder->Write("{\"name\":" + JsonString(method_) + ",\"cat\":\"llm_datadist_ffi\",\"ph\":\"X\",\"ts\":" +
                  std::to_string(start_wall_us_) + ",\"dur\":" + dur + ",\"args\":{" + args + "}");
  return status;
}

void NameProcess(const std::string &label) {
  Recorder *recorder = TheRecorder();
  if (recorder != nullptr) {
    recorder->Write("{\"ph\":\"M\",\"name\":\"process_name\",\"tid\":0,\"args\":{\"name\":" +
                        JsonString((label + " (pid " + std::to_string(getpid()) + ")").c_str()) + "}",
                    true);
  }
}

}  // namespace lldd_sdk
