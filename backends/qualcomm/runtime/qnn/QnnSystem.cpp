#include "backends/qualcomm/runtime/qnn/QnnSystem.h"

#include <dlfcn.h>
#include <sys/stat.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>

#include "backends/qualcomm/runtime/qnn/QnnLibrary.h"

namespace qnn_delegate {
namespace qnn {

using engine::ErrorKind;
using engine::make_error;
using engine::Status;

namespace {

constexpr const char* kSystemLibrary = "libQnnSystem.so";
constexpr uint32_t kMaxNameBytes = 4096;

struct SystemLibrary {
  void* handle = nullptr;
  const QnnSystemProvider* provider = nullptr;
  std::string path;
  std::string error;
};

const SystemLibrary& system_library() {
  static SystemLibrary lib;
  static std::once_flag once;
  std::call_once(once, [] {
    std::string dir;
    const Status s = qnn_library_dir(dir);
    if (!s.ok()) {
      lib.error = s.message;
      return;
    }
    lib.path = dir + "/" + kSystemLibrary;
    struct stat st;
    if (::stat(lib.path.c_str(), &st) != 0) {
      lib.error = "no " + std::string(kSystemLibrary) + " in " + dir;
      return;
    }
    lib.handle = ::dlopen(lib.path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib.handle == nullptr) {
      lib.error = "dlopen(" + lib.path + ") failed: " + ::dlerror();
      return;
    }
    auto get = reinterpret_cast<QnnSystemGetProvidersFn>(::dlsym(lib.handle, "QnnSystemInterface_getProviders"));
    const QnnSystemProvider** providers = nullptr;
    uint32_t count = 0;
    if (get == nullptr || get(&providers, &count) != 0 || providers == nullptr || count == 0) {
      lib.error = lib.path + " lists no QNN system provider";
      return;
    }
    const QnnSystemProvider* p = providers[0];
    if (p->system_api_version.major != 1 || p->functions.context_create == nullptr ||
        p->functions.context_get_binary_info == nullptr || p->functions.context_free == nullptr) {
      char buf[160];
      std::snprintf(buf, sizeof(buf), " has system API %u.%u; qnn-delegate reads system API 1.x",
                    p->system_api_version.major, p->system_api_version.minor);
      lib.error = lib.path + buf;
      return;
    }
    lib.provider = p;
  });
  return lib;
}

bool bounded_string(const char* text, std::string& out) {
  if (text == nullptr) {
    out.clear();
    return true;
  }
  const size_t n = ::strnlen(text, kMaxNameBytes);
  if (n == kMaxNameBytes) return false;
  out.assign(text, n);
  return true;
}

Status copy_tensor(const QnnTensor& t, const char* graph, ContextTensorInfo& out) {
  if (t.version != 1 && t.version != 2) {
    return make_error(ErrorKind::InvalidProgram, "graph '%s': QnnSystem reports a tensor of version %u", graph,
                      t.version);
  }
  const QnnTensorV1& v = t.v1;  // v2 starts with the v1 fields
  out.id = v.id;
  out.kind = v.kind;
  out.dtype = uint32_t(v.dtype);
  if (!bounded_string(v.name, out.name) || v.rank > kMaxTensorRank || (v.rank > 0 && v.dims == nullptr)) {
    return make_error(ErrorKind::InvalidProgram, "graph '%s': QnnSystem reports a malformed tensor (id %u, rank %u)",
                      graph, v.id, v.rank);
  }
  out.dims.assign(v.dims, v.dims + v.rank);
  out.encoding = v.quant.definition == kQnnQuantDefined ? v.quant.encoding : kQnnEncUndefined;
  switch (out.encoding) {
    case kQnnEncScaleOffset:
      out.scale = v.quant.scale_offset.scale;
      out.offset = v.quant.scale_offset.offset;
      break;
    case kQnnEncBwScaleOffset:
      out.bitwidth = v.quant.bw_scale_offset.bitwidth;
      out.scale = v.quant.bw_scale_offset.scale;
      out.offset = v.quant.bw_scale_offset.offset;
      break;
    case kQnnEncAxisScaleOffset: {
      const QnnAxisScaleOffset& a = v.quant.axis_scale_offset;
      if (a.count > kMaxGraphTensors * 16u || (a.count > 0 && a.values == nullptr)) {
        return make_error(ErrorKind::InvalidProgram, "graph '%s': tensor '%s' has a malformed per-axis encoding", graph,
                          out.name.c_str());
      }
      out.axis = a.axis;
      for (uint32_t i = 0; i < a.count; ++i) {
        out.scales.push_back(a.values[i].scale);
        out.offsets.push_back(a.values[i].offset);
      }
      break;
    }
    default:
      break;
  }
  return Status::Ok();
}

Status copy_tensors(const QnnTensor* list, uint32_t count, const char* graph, const char* what,
                    std::vector<ContextTensorInfo>& out) {
  if (count > kMaxGraphTensors || (count > 0 && list == nullptr)) {
    return make_error(ErrorKind::InvalidProgram, "graph '%s': QnnSystem reports %u %s", graph, count, what);
  }
  out.resize(count);
  for (uint32_t i = 0; i < count; ++i) QNN_RETURN_IF_ERROR(copy_tensor(list[i], graph, out[i]));
  return Status::Ok();
}

Status copy_info(const QnnSystemBinaryInfo& info, ContextBinaryInfo& out) {
  out.info_version = info.version;
  const QnnSystemGraphInfoEntry* graphs = nullptr;
  uint32_t num_graphs = 0;
  const char* build_id = nullptr;
  const char* soc_version = nullptr;
  if (info.version == 1 || info.version == 2) {
    const QnnSystemBinaryInfoV1& v = info.v1;
    out.backend_id = v.backend_id;
    out.core_api = v.core_api;
    out.backend_api = v.backend_api;
    out.context_blob_version = v.context_blob_version;
    out.context_blob_size = v.context_blob_size;
    build_id = v.build_id;
    soc_version = v.soc_version;
    graphs = v.graphs;
    num_graphs = v.num_graphs;
  } else if (info.version == 3) {
    const QnnSystemBinaryInfoV3& v = info.v3;
    out.backend_id = v.backend_id;
    out.core_api = v.core_api;
    out.backend_api = v.backend_api;
    out.context_blob_version = v.context_blob_version;
    out.context_blob_size = v.context_blob_size;
    out.soc_model = v.soc_model;
    build_id = v.build_id;
    soc_version = v.soc_version;
    graphs = v.graphs;
    num_graphs = v.num_graphs;
  } else {
    return make_error(ErrorKind::InvalidProgram,
                      "QnnSystem reports context-binary info version %u; qnn-delegate reads versions 1..3",
                      info.version);
  }
  if (!bounded_string(build_id, out.build_id) || !bounded_string(soc_version, out.soc_version)) {
    return make_error(ErrorKind::InvalidProgram, "QnnSystem reports a malformed build id or SoC version");
  }
  if (num_graphs == 0 || num_graphs > kMaxContextGraphs || graphs == nullptr) {
    return make_error(ErrorKind::InvalidProgram, "QnnSystem reports %u graphs in the context binary", num_graphs);
  }
  out.graphs.resize(num_graphs);
  for (uint32_t g = 0; g < num_graphs; ++g) {
    const QnnSystemGraphInfoEntry& e = graphs[g];
    if (e.version < 1 || e.version > 3 || !bounded_string(e.v1.name, out.graphs[g].name)) {
      return make_error(ErrorKind::InvalidProgram, "QnnSystem reports graph %u with info version %u", g, e.version);
    }
    const char* name = out.graphs[g].name.c_str();
    QNN_RETURN_IF_ERROR(copy_tensors(e.v1.inputs, e.v1.num_inputs, name, "inputs", out.graphs[g].inputs));
    QNN_RETURN_IF_ERROR(copy_tensors(e.v1.outputs, e.v1.num_outputs, name, "outputs", out.graphs[g].outputs));
  }
  return Status::Ok();
}

}  // namespace

Status precheck_context_binary(const void* data, size_t size) {
  if (data == nullptr || size < kMinContextBinaryBytes) {
    return make_error(ErrorKind::InvalidProgram,
                      "the QNN context binary has %zu bytes, fewer than the %zu of the smallest one", size,
                      kMinContextBinaryBytes);
  }
  if (uint64_t(size) >= (uint64_t(1) << 32)) {
    return make_error(ErrorKind::InvalidProgram, "the QNN context binary has %zu bytes (4 GiB or more)", size);
  }
  return Status::Ok();
}

Status read_context_binary_info(const void* data, size_t size, ContextBinaryInfo& out) {
  QNN_RETURN_IF_ERROR(precheck_context_binary(data, size));
  const SystemLibrary& lib = system_library();
  if (lib.provider == nullptr) return make_error(ErrorKind::NotSupported, "%s", lib.error.c_str());
  const QnnSystemFunctionTable& fn = lib.provider->functions;
  QnnHandle system_context = nullptr;
  QnnStatus st = fn.context_create(&system_context);
  if (st != 0) {
    return make_error(ErrorKind::Internal, "QnnSystemContext create failed: %s", qnn_error_text(st).c_str());
  }
  const QnnSystemBinaryInfo* info = nullptr;
  if (fn.context_get_metadata != nullptr) {  // reads the caller's bytes (const): no copy
    st = fn.context_get_metadata(system_context, data, size, &info);
  } else {  // older system API: getBinaryInfo takes a non-const buffer, so it gets a copy
    std::unique_ptr<uint8_t[]> copy(new (std::nothrow) uint8_t[size]);
    if (copy == nullptr) {
      fn.context_free(system_context);
      return make_error(ErrorKind::MemoryAllocationFailed, "no memory for a %zu-byte copy of the context binary", size);
    }
    std::memcpy(copy.get(), data, size);
    uint64_t info_size = 0;
    st = fn.context_get_binary_info(system_context, copy.get(), size, &info, &info_size);
  }
  Status s;
  if (st != 0 || info == nullptr) {
    s = make_error(ErrorKind::InvalidProgram, "QnnSystem could not read the context binary (%zu bytes): %s", size,
                   st != 0 ? qnn_error_text(st).c_str() : "no info returned");
  } else {
    s = copy_info(*info, out);
  }
  fn.context_free(system_context);
  return s;
}

std::string qnn_system_status(bool* loaded) {
  const SystemLibrary& lib = system_library();
  *loaded = lib.provider != nullptr;
  if (lib.provider == nullptr) return lib.error;
  const QnnVersion& v = lib.provider->system_api_version;
  char buf[96];
  std::snprintf(buf, sizeof(buf), "libQnnSystem.so: system API %u.%u.%u", v.major, v.minor, v.patch);
  return std::string(buf) + " (" + lib.path + ")";
}

}  // namespace qnn
}  // namespace qnn_delegate
