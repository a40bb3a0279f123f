// Loads Qualcomm's QNN HTP backend library once per process (dlopen), checks
// its interface version, and owns the process-wide log and backend handles.
//
// Search order for the library folder: $QNN_LIB_DIR, $QNN_SDK_ROOT/lib/<host
// folder>, then the onnxruntime_qnn package folder found at build time.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>

#include "backends/qualcomm/runtime/engine/Status.h"
#include "backends/qualcomm/runtime/qnn/QnnAbi.h"
#include "backends/qualcomm/runtime/qnn/QnnNames.h"

namespace qnn_delegate {
namespace qnn {

class QnnLibrary {
 public:
  // The loaded library, or nullptr with the reason in `why` (missing folder,
  // missing file, dlopen error, no HTP provider, incompatible API version).
  static const QnnLibrary* get(std::string* why = nullptr);
  // Qualcomm's libQnnSaver.so from the same folder, initialized to record every QNN call made
  // through it into `output_dir` (saver_output.c + params.bin) for the HTP backend; once per
  // process (QNN's saver takes its folder once): a later call with another folder fails.
  static const QnnLibrary* saver(const std::string& output_dir, std::string* why = nullptr);

  const QnnFunctionTable& fn() const { return *fn_; }
  QnnHandle backend() const { return backend_; }
  QnnHandle log() const { return log_; }
  const std::string& path() const { return path_; }
  const QnnApiVersion& api_version() const { return version_; }
  std::string describe() const;  // "QNN core API 2.40.0, HTP API 5.51.0 (<path>)"

  // Messages QNN logged since the last call (warnings and errors), then cleared.
  static std::string take_messages();
  // QNN messages at or below this QnnExecuTorchLogLevel are forwarded to ET_LOG.
  static void set_forward_level(int log_level);

  // While alive, QNN's messages logged on this thread are forwarded to ET_LOG only at
  // the debug log level (they are still kept for take_messages()). For calls whose
  // failure may be expected and handled (e.g. contextValidateBinary on x86).
  class ScopedQuiet {
   public:
    ScopedQuiet();
    ~ScopedQuiet();
    ScopedQuiet(const ScopedQuiet&) = delete;
    ScopedQuiet& operator=(const ScopedQuiet&) = delete;

   private:
    bool previous_;
  };

 private:
  QnnLibrary() = default;
  engine::Status load();
  engine::Status load_saver(const std::string& output_dir);
  engine::Status open_provider(const char* file, uint32_t backend_id, void* handle);

  void* handle_ = nullptr;
  const QnnFunctionTable* fn_ = nullptr;
  QnnHandle backend_ = nullptr;
  QnnHandle log_ = nullptr;
  QnnApiVersion version_{};
  std::string path_;
};

// `text`, then ": " and what QNN logged since the last take_messages() (if anything).
std::string with_qnn_log(const std::string& text);

// "QNN error 6004 (invalid tensor)" style text for a status code.
std::string qnn_error_text(QnnStatus status);

// The folder holding Qualcomm's libraries, by the search order above.
engine::Status qnn_library_dir(std::string& dir);

// Folders searched for the library, in order (for messages and tests).
std::string qnn_search_description();

}  // namespace qnn
}  // namespace qnn_delegate
