#include "backends/qualcomm/runtime/qnn/QnnLibrary.h"

#include <dlfcn.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include <executorch/runtime/platform/log.h>

#ifndef QNN_DELEGATE_DEFAULT_QNN_DIR
#define QNN_DELEGATE_DEFAULT_QNN_DIR ""
#endif

namespace qnn_delegate {
namespace qnn {

namespace {

#if defined(__aarch64__)
constexpr const char* kSdkHostFolder = "lib/aarch64-android";
#else
constexpr const char* kSdkHostFolder = "lib/x86_64-linux-clang";
#endif
constexpr const char* kHtpLibrary = "libQnnHtp.so";
constexpr const char* kSaverLibrary = "libQnnSaver.so";
constexpr size_t kMaxKeptMessages = 8192;

std::mutex g_messages_mutex;
std::string g_messages;
std::atomic<int> g_forward_level{0};  // nothing until a delegate's log level is known
thread_local bool t_quiet = false;    // see QnnLibrary::ScopedQuiet

// Lines QNN 2.51 logs as errors on every graphFinalize although nothing is wrong: option 66
// is none of the HTP graph config options (1..17) and is logged with no graph config at all
// (checked: graphCreate with a null config list), so it is QNN's own, not a config of ours.
constexpr const char* kKnownNoise[] = {"unexpected GraphHtpSettings option 66"};

bool is_known_noise(const char* text) {
  for (const char* noise : kKnownNoise) {
    if (std::strstr(text, noise) != nullptr) return true;
  }
  return false;
}

bool is_dir(const std::string& path) {
  struct stat st;
  return !path.empty() && ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

void log_callback(const char* fmt, QnnLogLevel level, uint64_t, va_list args) {
  char buf[1024];
  std::vsnprintf(buf, sizeof(buf), fmt, args);
  size_t n = std::strlen(buf);
  while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == ' ')) buf[--n] = '\0';
  if (is_known_noise(buf)) level = kQnnLogDebug;
  if (level <= kQnnLogWarn) {
    std::lock_guard<std::mutex> lock(g_messages_mutex);
    if (g_messages.size() < kMaxKeptMessages) {
      if (!g_messages.empty()) g_messages += "; ";
      g_messages += buf;
    }
  }
  // QnnExecuTorchLogLevel and QNN's log level share the numbering 1 error .. 5 debug.
  const int forward_as = t_quiet ? kQnnLogDebug : static_cast<int>(level);
  if (forward_as <= g_forward_level.load()) {
    ET_LOG(Info, "QNN[%d]: %s", forward_as, buf);
  }
}

// The folder holding libQnnHtp.so, by the documented search order.
Status find_library_dir(std::string& dir) {
  if (const char* env = std::getenv("QNN_LIB_DIR"); env != nullptr && *env) {
    dir = env;
    if (!is_dir(dir)) {
      return make_error(ErrorKind::NotSupported, "QNN_LIB_DIR=%s is not a folder", env);
    }
    return Status::Ok();
  }
  if (const char* env = std::getenv("QNN_SDK_ROOT"); env != nullptr && *env) {
    dir = std::string(env) + "/" + kSdkHostFolder;
    if (!is_dir(dir)) {
      return make_error(ErrorKind::NotSupported, "QNN_SDK_ROOT=%s has no %s folder", env, kSdkHostFolder);
    }
    return Status::Ok();
  }
  dir = QNN_DELEGATE_DEFAULT_QNN_DIR;
  if (!is_dir(dir)) {
    return make_error(ErrorKind::NotSupported,
                      "no QNN libraries: set QNN_LIB_DIR or QNN_SDK_ROOT, or install "
                      "onnxruntime-qnn==2.7.0 (build-time default folder '%s' not found)",
                      QNN_DELEGATE_DEFAULT_QNN_DIR);
  }
  return Status::Ok();
}

const char* error_name(QnnStatus code) {
  switch (code) {
    case 1000:
      return "not supported";
    case 1002:
      return "memory allocation";
    case 1003:
      return "system error";
    case 1004:
      return "invalid argument";
    case 1008:
      return "incompatible binaries";
    case 3110:
      return "op validation failed";
    case 4005:
      return "op package not found";
    case 5000:
      return "context invalid argument";
    case 5004:
      return "context binary version";
    case 5005:
      return "create from binary failed";
    case 5008:
      return "context binary configuration";
    case 6000:
      return "graph invalid argument";
    case 6003:
      return "graph does not exist";
    case 6004:
      return "invalid tensor";
    case 6005:
      return "invalid op config";
    case 6020:
      return "graph create failed";
    case 6021:
      return "graph optimization failed";
    case 6022:
      return "graph finalize failed";
    case 7004:
      return "unsupported tensor parameter";
    case 14001:
      return "invalid device config";
    // QNN system API range (30000..49999), QnnSystemContext errors: the library's own parse
    // of a context binary (e.g. in contextCreateFromBinary).
    case 30000:
      return "system context: invalid handle";
    case 30001:
      return "system context: invalid argument";
    case 30002:
      return "system context: operation failed";
    case 30010:
      return "system context: malformed context binary";
    default:
      return "";
  }
}

}  // namespace

Status qnn_library_dir(std::string& dir) { return find_library_dir(dir); }

std::string qnn_error_text(QnnStatus status) {
  char buf[96];
  const char* name = error_name(status);
  if (*name) {
    std::snprintf(buf, sizeof(buf), "QNN error %llu (%s)", (unsigned long long)status, name);
  } else {
    std::snprintf(buf, sizeof(buf), "QNN error %llu", (unsigned long long)status);
  }
  return buf;
}

std::string with_qnn_log(const std::string& text) {
  const std::string log = QnnLibrary::take_messages();
  return log.empty() ? text : text + ": " + log;
}

std::string qnn_search_description() {
  return std::string("$QNN_LIB_DIR, $QNN_SDK_ROOT/") + kSdkHostFolder + ", '" + QNN_DELEGATE_DEFAULT_QNN_DIR + "'";
}

std::string QnnLibrary::take_messages() {
  std::lock_guard<std::mutex> lock(g_messages_mutex);
  std::string out;
  out.swap(g_messages);
  return out;
}

void QnnLibrary::set_forward_level(int log_level) { g_forward_level.store(log_level); }

QnnLibrary::ScopedQuiet::ScopedQuiet() : previous_(t_quiet) { t_quiet = true; }
QnnLibrary::ScopedQuiet::~ScopedQuiet() { t_quiet = previous_; }

std::string QnnLibrary::describe() const {
  char buf[128];
  std::snprintf(buf, sizeof(buf), "QNN core API %u.%u.%u, HTP API %u.%u.%u", version_.core.major, version_.core.minor,
                version_.core.patch, version_.backend.major, version_.backend.minor, version_.backend.patch);
  return std::string(buf) + " (" + path_ + ")";
}

Status QnnLibrary::open_provider(const char* file, uint32_t backend_id, void* handle) {
  handle_ = handle;
  auto get_providers = reinterpret_cast<QnnGetProvidersFn>(::dlsym(handle_, "QnnInterface_getProviders"));
  if (get_providers == nullptr) {
    return make_error(ErrorKind::NotSupported,
                      "%s has no QnnInterface_getProviders: not a QNN "
                      "backend library",
                      path_.c_str());
  }
  const QnnProvider** providers = nullptr;
  uint32_t count = 0;
  if (get_providers(&providers, &count) != 0 || providers == nullptr || count == 0) {
    return make_error(ErrorKind::NotSupported, "%s lists no QNN provider", path_.c_str());
  }
  const QnnProvider* p = providers[0];
  version_ = p->api_version;
  const bool htp = backend_id == kQnnHtpBackendId;
  if (p->backend_id != backend_id || version_.core.major != kQnnCoreApiMajor ||
      (htp && version_.backend.major != kQnnHtpApiMajor)) {
    return make_error(ErrorKind::NotSupported,
                      "%s: provider '%s' (backend id %u) has QNN core API %u.%u / backend API "
                      "%u.%u; qnn-delegate needs %s (id %u) with core API %u.x%s",
                      path_.c_str(), p->name ? p->name : "?", p->backend_id, version_.core.major, version_.core.minor,
                      version_.backend.major, version_.backend.minor, file, backend_id, kQnnCoreApiMajor,
                      htp ? " and HTP API 5.x" : "");
  }
  fn_ = &p->functions;
  QnnStatus s = fn_->log_create(&log_callback, kQnnLogWarn, &log_);
  if (s != 0) return make_error(ErrorKind::Internal, "QNN logCreate: %s", qnn_error_text(s).c_str());
  s = fn_->backend_create(log_, nullptr, &backend_);
  if (s != 0) {
    return make_error(ErrorKind::Internal, "QNN backendCreate: %s (%s)", qnn_error_text(s).c_str(),
                      take_messages().c_str());
  }
  return Status::Ok();
}

Status QnnLibrary::load() {
  std::string dir;
  QNN_RETURN_IF_ERROR(find_library_dir(dir));
  path_ = dir + "/" + kHtpLibrary;
  struct stat st;
  if (::stat(path_.c_str(), &st) != 0) {
    return make_error(ErrorKind::NotSupported, "no %s in %s", kHtpLibrary, dir.c_str());
  }
  // RTLD_LOCAL: the library finds its bundled libc++ through its own RPATH
  // ($ORIGIN/../onnxruntime_qnn.libs). Loading that libc++abi globally would interpose
  // the C++ exception runtime of the whole process (a crash when Python's ExecuTorch
  // bindings throw).
  void* handle = ::dlopen(path_.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    return make_error(ErrorKind::NotSupported, "dlopen(%s) failed: %s", path_.c_str(), ::dlerror());
  }
  return open_provider("the HTP backend", kQnnHtpBackendId, handle);
}

Status QnnLibrary::load_saver(const std::string& output_dir) {
  std::string dir;
  QNN_RETURN_IF_ERROR(find_library_dir(dir));
  path_ = dir + "/" + kSaverLibrary;
  void* handle = ::dlopen(path_.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    return make_error(ErrorKind::NotSupported, "dlopen(%s) failed: %s", path_.c_str(), ::dlerror());
  }
  auto initialize = reinterpret_cast<QnnSaverInitializeFn>(::dlsym(handle, "QnnSaver_initialize"));
  if (initialize == nullptr) {
    return make_error(ErrorKind::NotSupported, "%s has no QnnSaver_initialize", path_.c_str());
  }
  QnnSaverConfig folder{};
  folder.option = kQnnSaverOptionOutputDirectory;
  folder.output_directory = output_dir.c_str();
  QnnSaverConfig backend{};
  backend.option = kQnnSaverOptionBackendId;
  backend.backend_id = kQnnHtpBackendId;
  const QnnSaverConfig* configs[] = {&folder, &backend, nullptr};
  const QnnStatus st = initialize(configs);
  if (st != 0) {
    return make_error(ErrorKind::NotSupported, "QnnSaver_initialize('%s') failed: %s", output_dir.c_str(),
                      qnn_error_text(st).c_str());
  }
  return open_provider("the saver backend", kQnnSaverBackendId, handle);
}

namespace {

// libQnnHtp.so prints one line to stdout when it is set up, in every process that loads it
// (" # LIBNATIVE: No alternate configuration present in libnative_tls.conf ..."; QNN 2.51).
// A process that lowers or runs a model must not print foreign lines: stdout is captured
// while the library loads and written back without that line.
constexpr char kLibnativeNotice[] = "# LIBNATIVE: No alternate configuration present";

template <typename Fn>
auto without_libnative_notice(Fn&& fn) -> decltype(fn()) {
  std::fflush(stdout);
  const int saved = ::dup(STDOUT_FILENO);
  FILE* captured = saved >= 0 ? std::tmpfile() : nullptr;
  if (captured == nullptr || ::dup2(::fileno(captured), STDOUT_FILENO) < 0) {
    if (captured != nullptr) std::fclose(captured);
    if (saved >= 0) ::close(saved);
    return fn();
  }
  auto result = fn();
  std::fflush(stdout);
  ::dup2(saved, STDOUT_FILENO);
  ::close(saved);
  std::rewind(captured);
  char line[4096];
  while (std::fgets(line, sizeof(line), captured) != nullptr) {
    if (std::strstr(line, kLibnativeNotice) == nullptr) std::fputs(line, stdout);
  }
  std::fflush(stdout);
  std::fclose(captured);
  return result;
}

}  // namespace

// The library stays loaded and its backend alive for the whole process: QNN's
// own static destructors run at exit, after ours.
const QnnLibrary* QnnLibrary::get(std::string* why) {
  static QnnLibrary* library = nullptr;
  static std::string error;
  static std::once_flag once;
  std::call_once(once, [] {
    auto* lib = new QnnLibrary();
    const Status s = without_libnative_notice([lib] { return lib->load(); });
    if (s.ok()) {
      library = lib;
    } else {
      error = s.message;
      delete lib;  // a failed dlopen leaves nothing to free; a half-loaded library stays mapped
    }
  });
  if (library == nullptr && why != nullptr) *why = error;
  return library;
}

const QnnLibrary* QnnLibrary::saver(const std::string& output_dir, std::string* why) {
  static std::mutex mutex;
  static QnnLibrary* library = nullptr;
  static std::string folder, error;
  std::lock_guard<std::mutex> lock(mutex);
  if (library == nullptr && error.empty()) {
    auto* lib = new QnnLibrary();
    const Status s = without_libnative_notice([lib, &output_dir] { return lib->load_saver(output_dir); });
    if (s.ok()) {
      library = lib;
      folder = output_dir;
    } else {
      error = s.message;
      delete lib;
    }
  }
  if (library != nullptr && folder != output_dir) {
    if (why != nullptr) {
      *why = "QNN's saver records into one folder per process: '" + folder + "' already, not '" + output_dir + "'";
    }
    return nullptr;
  }
  if (library == nullptr && why != nullptr) *why = error;
  return library;
}

}  // namespace qnn
}  // namespace qnn_delegate
