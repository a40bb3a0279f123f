// Runtime options of the QnnDelegate backend (set_option / get_option), one
// struct under one mutex. A value set at run time wins over the compiled one.
#pragma once

#include <mutex>
#include <optional>
#include <string>

#include <executorch/runtime/backend/options.h>
#include <executorch/runtime/core/error.h>
#include <executorch/runtime/core/span.h>

namespace qnn_delegate {
namespace runtime {

inline constexpr char kLogLevelKey[] = "qnn_runtime_log_level";
inline constexpr char kProfileLevelKey[] = "qnn_runtime_profile_level";
inline constexpr char kPerformanceModeKey[] = "qnn_runtime_htp_performance_mode";
inline constexpr char kHeapProfilingPathKey[] = "qnn_runtime_heap_profiling_path";

struct RuntimeOptionValues {
  std::optional<int> log_level;
  std::optional<int> profile_level;
  std::optional<int> htp_performance_mode;
  std::optional<std::string> heap_profiling_path;
};

class RuntimeOptions {
 public:
  static RuntimeOptions& instance();

  // Applies every option it can; returns InvalidArgument if any option had an
  // unknown key or a wrong value type (the others still apply).
  executorch::runtime::Error set(
      const executorch::runtime::Span<executorch::runtime::BackendOption>& options);
  // Fills each option's value; NotFound for a known key never set,
  // InvalidArgument for an unknown key (the others are still filled).
  executorch::runtime::Error get(
      executorch::runtime::Span<executorch::runtime::BackendOption>& options) const;

  RuntimeOptionValues snapshot() const;

 private:
  executorch::runtime::Error set_one(const executorch::runtime::BackendOption& option);
  executorch::runtime::Error get_one(executorch::runtime::BackendOption& option) const;

  mutable std::mutex mutex_;
  RuntimeOptionValues values_;
};

} // namespace runtime
} // namespace qnn_delegate
