#include "backends/qualcomm/runner/runner_util.h"

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <executorch/runtime/platform/platform.h>

namespace qnn_delegate {
namespace runner {

using executorch::runtime::Error;
using executorch::runtime::Tag;

namespace {

bool ends_with(const char* s, const char* suffix) {
  const size_t n = std::strlen(s), m = std::strlen(suffix);
  return n >= m && std::strcmp(s + n - m, suffix) == 0;
}

// ExecuTorch's thread pool probes the CPU when a CPU kernel first asks for it and
// logs five Info lines from cpuinfo_utils.cpp about ARM-only files. They are
// dropped below --log_level 4 (verbose); every other message goes through.
pal_emit_log_message_method g_default_emit = nullptr;
bool g_show_cpuinfo_lines = false;

void filtered_emit(et_timestamp_t timestamp, et_pal_log_level_t level, const char* filename, const char* function,
                   size_t line, const char* message, size_t length) {
  if (!g_show_cpuinfo_lines && level == kInfo && filename != nullptr && ends_with(filename, "cpuinfo_utils.cpp")) {
    return;
  }
  if (g_default_emit != nullptr) g_default_emit(timestamp, level, filename, function, line, message, length);
}

}  // namespace

std::string error_name(Error e) {
  const char* name = executorch::runtime::to_string(e);
  constexpr char kPrefix[] = "Error::";
  if (std::strncmp(name, kPrefix, sizeof(kPrefix) - 1) == 0) name += sizeof(kPrefix) - 1;
  if (std::strcmp(name, "Unknown") != 0) return name;
  char buf[32];
  std::snprintf(buf, sizeof(buf), "Unknown(0x%x)", static_cast<unsigned>(e));
  return buf;
}

const char* tag_name(Tag tag) {
  switch (tag) {
#define QNN_RUNNER_TAG_NAME(x) \
  case Tag::x:                 \
    return #x;
    EXECUTORCH_FORALL_TAGS(QNN_RUNNER_TAG_NAME)
#undef QNN_RUNNER_TAG_NAME
    default:
      return "unknown";
  }
}

void install_log_filter(bool show_cpuinfo_lines) {
  g_show_cpuinfo_lines = show_cpuinfo_lines;
  const executorch::runtime::PalImpl* current = executorch::runtime::get_pal_impl();
  g_default_emit = current != nullptr ? current->emit_log_message : nullptr;
  if (g_default_emit == nullptr) return;  // nothing to forward to: keep the default
  executorch::runtime::register_pal(executorch::runtime::PalImpl::create(&filtered_emit, __FILE__));
}

bool make_output_folder(const std::string& path) {
  if (path.empty()) return true;
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  if (ec || !std::filesystem::is_directory(path)) {
    std::fprintf(stderr, "error: cannot create output folder '%s': %s\n", path.c_str(),
                 ec ? ec.message().c_str() : "a file of that name exists");
    return false;
  }
  return true;
}

// A directory opens as an empty stream (and seeks to a huge size): name it instead.
static bool is_directory_path(const std::string& path, const char* what) {
  std::error_code ec;
  if (!std::filesystem::is_directory(path, ec)) return false;
  std::fprintf(stderr, "error: %s '%s' is a directory, not a file\n", what, path.c_str());
  return true;
}

bool read_input_list(const std::string& path, std::vector<std::vector<std::string>>& out) {
  if (is_directory_path(path, "input list")) return false;
  std::ifstream f(path);
  if (!f) {
    std::fprintf(stderr, "error: cannot open input list '%s'\n", path.c_str());
    return false;
  }
  std::string line;
  while (std::getline(f, line)) {
    std::istringstream ss(line);
    std::vector<std::string> files;
    for (std::string tok; ss >> tok;) files.push_back(tok);
    if (!files.empty()) out.push_back(files);
  }
  if (out.empty()) {
    std::fprintf(stderr,
                 "error: input list '%s' names no input file (it is empty or blank); "
                 "leave out --input_list_path to run once on zero-filled inputs\n",
                 path.c_str());
    return false;
  }
  return true;
}

bool read_file_exact(const std::string& path, void* dst, size_t nbytes) {
  if (is_directory_path(path, "raw input")) return false;
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  if (!f) {
    std::fprintf(stderr, "error: cannot open raw input '%s'\n", path.c_str());
    return false;
  }
  const std::streamoff size = f.tellg();
  if (size < 0 || static_cast<size_t>(size) != nbytes) {
    std::fprintf(stderr, "error: raw input '%s' has %lld bytes, the input tensor needs %zu\n", path.c_str(),
                 static_cast<long long>(size), nbytes);
    return false;
  }
  f.seekg(0);
  if (nbytes && !f.read(static_cast<char*>(dst), static_cast<std::streamsize>(nbytes))) {
    std::fprintf(stderr, "error: cannot read raw input '%s'\n", path.c_str());
    return false;
  }
  return true;
}

bool write_bytes(const std::string& path, const void* data, size_t nbytes, const char* what) {
  std::ofstream f(path, std::ios::binary);
  const bool ok = f && f.write(static_cast<const char*>(data), static_cast<std::streamsize>(nbytes));
  if (!ok) std::fprintf(stderr, "error: cannot write %s '%s'\n", what, path.c_str());
  return ok;
}

}  // namespace runner
}  // namespace qnn_delegate
