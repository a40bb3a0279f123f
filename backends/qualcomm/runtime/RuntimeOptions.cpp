#include "backends/qualcomm/runtime/RuntimeOptions.h"

#include <cstring>

#include <executorch/runtime/platform/log.h>

#include "backends/qualcomm/runtime/HeapProfiler.h"
#include "backends/qualcomm/runtime/qnn/QnnEngine.h"
#include "qc_compiler_spec_generated.h"

namespace qnn_delegate {
namespace runtime {

using executorch::runtime::BackendOption;
using executorch::runtime::Error;
using executorch::runtime::kMaxOptionValueLength;
using executorch::runtime::Span;
using StringValue = std::array<char, kMaxOptionValueLength>;

namespace {

std::optional<int>* int_slot(RuntimeOptionValues& v, const char* key) {
  if (std::strcmp(key, kLogLevelKey) == 0) return &v.log_level;
  if (std::strcmp(key, kProfileLevelKey) == 0) return &v.profile_level;
  if (std::strcmp(key, kPerformanceModeKey) == 0) return &v.htp_performance_mode;
  return nullptr;
}

bool is_int_key(const char* key) {
  RuntimeOptionValues probe;
  return int_slot(probe, key) != nullptr;
}

bool is_string_key(const char* key) { return std::strcmp(key, kHeapProfilingPathKey) == 0; }

bool in_range(const BackendOption& option) {
  int lo = 0, hi = 0;
  const int v = std::get<int>(option.value);
  return RuntimeOptions::int_option_range(option.key, lo, hi) && v >= lo && v <= hi;
}

bool is_engine_key(const char* key) { return std::strcmp(key, kEngineKey) == 0; }

// The engine choice an option value names (int 0..2 or "auto" / "qnn" / "host").
bool engine_value(const BackendOption& option, EngineChoice* out) {
  if (const int* v = std::get_if<int>(&option.value)) {
    if (*v < 0 || *v > 2) return false;
    *out = static_cast<EngineChoice>(*v);
    return true;
  }
  if (const StringValue* v = std::get_if<StringValue>(&option.value)) {
    const std::string text(v->data(), strnlen(v->data(), v->size()));
    return parse_engine_choice(text.c_str(), out);
  }
  return false;
}

}  // namespace

RuntimeOptions& RuntimeOptions::instance() {
  static RuntimeOptions options;
  return options;
}

bool RuntimeOptions::int_option_range(const char* key, int& min_value, int& max_value) {
  if (std::strcmp(key, kLogLevelKey) == 0) {
    min_value = static_cast<int>(::qnn_delegate::QnnExecuTorchLogLevel::MIN);
    max_value = static_cast<int>(::qnn_delegate::QnnExecuTorchLogLevel::MAX);
  } else if (std::strcmp(key, kProfileLevelKey) == 0) {
    min_value = static_cast<int>(::qnn_delegate::QnnExecuTorchProfileLevel::MIN);
    max_value = static_cast<int>(::qnn_delegate::QnnExecuTorchProfileLevel::MAX);
  } else if (std::strcmp(key, kPerformanceModeKey) == 0) {
    min_value = static_cast<int>(::qnn_delegate::QnnExecuTorchHtpPerformanceMode::MIN);
    max_value = static_cast<int>(::qnn_delegate::QnnExecuTorchHtpPerformanceMode::MAX);
  } else {
    return false;
  }
  return true;
}

bool RuntimeOptions::is_known_key(const char* key) {
  return is_int_key(key) || is_string_key(key) || is_engine_key(key);
}

// The words below name every value of the generated enums: a new enum value fails here.
static_assert(static_cast<int>(LogLevel::MAX) == 5, "update int_option_values (log level)");
static_assert(static_cast<int>(ProfileLevel::MAX) == 2, "update int_option_values (profile level)");
static_assert(static_cast<int>(PerformanceMode::MAX) == 8, "update int_option_values (performance mode)");

const char* RuntimeOptions::int_option_values(const char* key) {
  if (std::strcmp(key, kLogLevelKey) == 0) return "0 off, 1 error, 2 warn, 3 info, 4 verbose, 5 debug";
  if (std::strcmp(key, kProfileLevelKey) == 0) return "0 off, 1 basic, 2 detailed";
  if (std::strcmp(key, kPerformanceModeKey) == 0) {
    return "0 default, 1 sustained high performance, 2 burst, 3 high performance, 4 power saver, "
           "5 low power saver, 6 high power saver, 7 low balanced, 8 balanced";
  }
  return "";
}

const char* RuntimeOptions::rejection_reason(const BackendOption& option) {
  if (is_engine_key(option.key)) {
    EngineChoice choice;
    return engine_value(option, &choice) ? nullptr : "needs \"auto\", \"qnn\" or \"host\" (or 0, 1, 2)";
  }
  if (is_int_key(option.key)) {
    if (!std::holds_alternative<int>(option.value)) return "needs an int value";
    return in_range(option) ? nullptr : "is out of range";
  }
  if (is_string_key(option.key)) {
    return std::holds_alternative<StringValue>(option.value) ? nullptr : "needs a string value";
  }
  return "is not a known option";
}

Error RuntimeOptions::set_one(const BackendOption& option) {
  if (const char* reason = rejection_reason(option)) {
    int lo = 0, hi = 0;
    if (std::holds_alternative<int>(option.value) && int_option_range(option.key, lo, hi)) {
      ET_LOG(Error,
             "QnnDelegate: runtime option '%s' value %d %s (valid: %d..%d: %s); the other "
             "options still apply",
             option.key, std::get<int>(option.value), reason, lo, hi, int_option_values(option.key));
    } else {
      ET_LOG(Error, "QnnDelegate: runtime option '%s' %s; the other options still apply", option.key, reason);
    }
    return Error::InvalidArgument;
  }
  if (std::optional<int>* slot = int_slot(values_, option.key)) {
    *slot = std::get<int>(option.value);
    return Error::Ok;
  }
  if (is_engine_key(option.key)) {
    EngineChoice choice = EngineChoice::Auto;
    engine_value(option, &choice);
    values_.engine = static_cast<int>(choice);
    return Error::Ok;
  }
  const StringValue& v = std::get<StringValue>(option.value);
  values_.heap_profiling_path = std::string(v.data(), strnlen(v.data(), v.size()));
  return Error::Ok;
}

Error RuntimeOptions::set(const Span<BackendOption>& options) {
  Error result = Error::Ok;
  RuntimeOptionValues after;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const BackendOption& option : options) {
      const Error e = set_one(option);
      if (e != Error::Ok) result = e;
    }
    after = values_;
  }
  HeapProfiler::runtime_options_changed(after.heap_profiling_path, after.profile_level);
  return result;
}

Error RuntimeOptions::get_one(BackendOption& option) const {
  RuntimeOptionValues& values = const_cast<RuntimeOptionValues&>(values_);
  if (std::optional<int>* slot = int_slot(values, option.key)) {
    if (!slot->has_value()) return Error::NotFound;
    option.value = **slot;
    return Error::Ok;
  }
  if (is_engine_key(option.key)) {
    if (!values_.engine) return Error::NotFound;
    StringValue arr{};
    std::strncpy(arr.data(), engine_choice_name(static_cast<EngineChoice>(*values_.engine)), arr.size() - 1);
    option.value = arr;
    return Error::Ok;
  }
  if (is_string_key(option.key)) {
    if (!values_.heap_profiling_path) return Error::NotFound;
    StringValue arr{};
    std::strncpy(arr.data(), values_.heap_profiling_path->c_str(), arr.size() - 1);
    option.value = arr;
    return Error::Ok;
  }
  ET_LOG(Error, "QnnDelegate: get_option of unknown runtime option '%s'", option.key);
  return Error::InvalidArgument;
}

Error RuntimeOptions::get(Span<BackendOption>& options) const {
  std::lock_guard<std::mutex> lock(mutex_);
  Error result = Error::Ok;
  for (BackendOption& option : options) {
    const Error e = get_one(option);
    if (e != Error::Ok && result != Error::InvalidArgument) result = e;
  }
  return result;
}

RuntimeOptionValues RuntimeOptions::snapshot() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return values_;
}

EffectiveOptions RuntimeOptions::effective(const CompileOptions& compiled) const {
  std::lock_guard<std::mutex> lock(mutex_);
  EffectiveOptions e;
  e.log_level = values_.log_level ? static_cast<LogLevel>(*values_.log_level) : compiled.log_level;
  e.profile_level = values_.profile_level ? static_cast<ProfileLevel>(*values_.profile_level) : compiled.profile_level;
  e.performance_mode = values_.htp_performance_mode ? static_cast<PerformanceMode>(*values_.htp_performance_mode)
                                                    : compiled.performance_mode;
  return e;
}

std::string RuntimeOptions::heap_profiling_path() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return values_.heap_profiling_path.value_or(std::string());
}

void RuntimeOptions::reset() {
  std::lock_guard<std::mutex> lock(mutex_);
  values_ = RuntimeOptionValues();
}

}  // namespace runtime
}  // namespace qnn_delegate
