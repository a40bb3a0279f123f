// Runtime options of the QnnDelegate backend (set_option / get_option), one
// struct under one mutex. A value set at run time wins over the value compiled
// into the payload's compile spec: every consumer reads options through
// effective_options(), the one place that does this lookup.
#pragma once

#include <mutex>
#include <optional>
#include <string>

#include <executorch/runtime/backend/options.h>
#include <executorch/runtime/core/error.h>
#include <executorch/runtime/core/span.h>

#include "backends/qualcomm/runtime/CompileOptions.h"

namespace qnn_delegate {
namespace runtime {

inline constexpr char kLogLevelKey[] = "qnn_runtime_log_level";
inline constexpr char kProfileLevelKey[] = "qnn_runtime_profile_level";
inline constexpr char kPerformanceModeKey[] = "qnn_runtime_htp_performance_mode";
inline constexpr char kHeapProfilingPathKey[] = "qnn_runtime_heap_profiling_path";
// Engine that runs delegates loaded from now on: "auto" (0), "qnn" (1) or "host" (2).
inline constexpr char kEngineKey[] = "qnn_runtime_engine";

// The levels the runtime tests, from the generated enums of qc_compiler_spec.fbs.
inline constexpr LogLevel kLogLevelError = LogLevel::kLogLevelError;
inline constexpr LogLevel kLogLevelInfo = LogLevel::kLogLevelInfo;
inline constexpr LogLevel kLogLevelDebug = LogLevel::kLogLevelDebug;
inline constexpr ProfileLevel kProfileOff = ProfileLevel::kProfileOff;
inline constexpr ProfileLevel kProfileBasic = ProfileLevel::kProfileBasic;
inline constexpr ProfileLevel kProfileDetailed = ProfileLevel::kProfileDetailed;

// Values as set (BackendOption ints, range-checked against the enums on set).
struct RuntimeOptionValues {
  std::optional<int> log_level;
  std::optional<int> profile_level;
  std::optional<int> htp_performance_mode;
  std::optional<std::string> heap_profiling_path;
  std::optional<int> engine;  // EngineChoice value
};

// The options in effect for one payload: run-time value if set, else compiled.
struct EffectiveOptions {
  LogLevel log_level = CompileOptions().log_level;
  ProfileLevel profile_level = CompileOptions().profile_level;
  PerformanceMode performance_mode = CompileOptions().performance_mode;
};

class RuntimeOptions {
 public:
  static RuntimeOptions& instance();

  // Applies every option it can; returns InvalidArgument if any option had an
  // unknown key or a wrong value type (the others still apply).
  executorch::runtime::Error set(const executorch::runtime::Span<executorch::runtime::BackendOption>& options);
  // Fills each option's value; NotFound for a known key never set,
  // InvalidArgument for an unknown key (the others are still filled).
  executorch::runtime::Error get(executorch::runtime::Span<executorch::runtime::BackendOption>& options) const;

  RuntimeOptionValues snapshot() const;
  // No allocation: safe on the execute path.
  EffectiveOptions effective(const CompileOptions& compiled) const;
  // Heap-profiling path set at run time ("" when never set).
  std::string heap_profiling_path() const;
  // Clears every run-time value (tests; the compiled values hold again).
  void reset();

  // Whether `key` names a runtime option of this backend.
  static bool is_known_key(const char* key);
  // Why `option` cannot be set (unknown key / wrong type / value out of range), or
  // nullptr if it can.
  static const char* rejection_reason(const executorch::runtime::BackendOption& option);
  // Valid values of an int option: its .fbs enum's MIN..MAX; false for other keys.
  static bool int_option_range(const char* key, int& min_value, int& max_value);
  // The values of an int option in words ("0 off, 1 error, ..."); "" for other keys.
  static const char* int_option_values(const char* key);

 private:
  executorch::runtime::Error set_one(const executorch::runtime::BackendOption& option);
  executorch::runtime::Error get_one(executorch::runtime::BackendOption& option) const;

  mutable std::mutex mutex_;
  RuntimeOptionValues values_;
};

// The one lookup every consumer uses.
inline EffectiveOptions effective_options(const CompileOptions& compiled) {
  return RuntimeOptions::instance().effective(compiled);
}

// True when messages of `level` are shown for a payload compiled with `compiled`.
inline bool log_enabled(LogLevel level, const CompileOptions& compiled) {
  return effective_options(compiled).log_level >= level;
}

}  // namespace runtime
}  // namespace qnn_delegate
