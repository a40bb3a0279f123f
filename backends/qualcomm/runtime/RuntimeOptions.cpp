#include "backends/qualcomm/runtime/RuntimeOptions.h"

#include <cstring>

#include <executorch/runtime/platform/log.h>

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

} // namespace

RuntimeOptions& RuntimeOptions::instance() {
  static RuntimeOptions options;
  return options;
}

const char* RuntimeOptions::rejection_reason(const BackendOption& option) {
  if (is_int_key(option.key)) {
    return std::holds_alternative<int>(option.value) ? nullptr : "needs an int value";
  }
  if (is_string_key(option.key)) {
    return std::holds_alternative<StringValue>(option.value) ? nullptr : "needs a string value";
  }
  return "is not a known option";
}

Error RuntimeOptions::set_one(const BackendOption& option) {
  if (const char* reason = rejection_reason(option)) {
    ET_LOG(Error, "QnnDelegate: runtime option '%s' %s; the other options still apply",
           option.key, reason);
    return Error::InvalidArgument;
  }
  if (std::optional<int>* slot = int_slot(values_, option.key)) {
    *slot = std::get<int>(option.value);
    return Error::Ok;
  }
  const StringValue& v = std::get<StringValue>(option.value);
  values_.heap_profiling_path = std::string(v.data(), strnlen(v.data(), v.size()));
  return Error::Ok;
}

Error RuntimeOptions::set(const Span<BackendOption>& options) {
  std::lock_guard<std::mutex> lock(mutex_);
  Error result = Error::Ok;
  for (const BackendOption& option : options) {
    const Error e = set_one(option);
    if (e != Error::Ok) result = e;
  }
  return result;
}

Error RuntimeOptions::get_one(BackendOption& option) const {
  RuntimeOptionValues& values = const_cast<RuntimeOptionValues&>(values_);
  if (std::optional<int>* slot = int_slot(values, option.key)) {
    if (!slot->has_value()) return Error::NotFound;
    option.value = **slot;
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
  e.log_level = values_.log_level.value_or(compiled.log_level);
  e.profile_level = values_.profile_level.value_or(compiled.profile_level);
  e.performance_mode = values_.htp_performance_mode.value_or(compiled.performance_mode);
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

} // namespace runtime
} // namespace qnn_delegate
