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

bool is_string_key(const char* key) { return std::strcmp(key, kHeapProfilingPathKey) == 0; }

} // namespace

RuntimeOptions& RuntimeOptions::instance() {
  static RuntimeOptions options;
  return options;
}

Error RuntimeOptions::set_one(const BackendOption& option) {
  const char* key = option.key;
  if (std::optional<int>* slot = int_slot(values_, key)) {
    const int* v = std::get_if<int>(&option.value);
    if (v == nullptr) {
      ET_LOG(Error, "QnnDelegate: runtime option '%s' needs an int value", key);
      return Error::InvalidArgument;
    }
    *slot = *v;
    return Error::Ok;
  }
  if (is_string_key(key)) {
    const StringValue* v = std::get_if<StringValue>(&option.value);
    if (v == nullptr) {
      ET_LOG(Error, "QnnDelegate: runtime option '%s' needs a string value", key);
      return Error::InvalidArgument;
    }
    values_.heap_profiling_path = std::string(v->data(), strnlen(v->data(), v->size()));
    return Error::Ok;
  }
  ET_LOG(Error, "QnnDelegate: unknown runtime option '%s'", key);
  return Error::InvalidArgument;
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
  return Error::InvalidArgument;
}

Error RuntimeOptions::get(Span<BackendOption>& options) const {
  std::lock_guard<std::mutex> lock(mutex_);
  Error result = Error::Ok;
  for (BackendOption& option : options) {
    const Error e = get_one(option);
    if (e != Error::Ok) result = e;
  }
  return result;
}

RuntimeOptionValues RuntimeOptions::snapshot() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return values_;
}

} // namespace runtime
} // namespace qnn_delegate
