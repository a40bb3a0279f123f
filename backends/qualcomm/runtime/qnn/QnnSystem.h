// Qualcomm's libQnnSystem.so: what a QNN context binary holds (graphs, their input / output
// tensors, the QNN and HTP API versions and the SoC it was built for), read by QNN's own
// parser (QnnSystemContext getBinaryInfo) without creating a context. Loaded once per process
// from the folder of libQnnHtp.so.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "backends/qualcomm/runtime/engine/Status.h"
#include "backends/qualcomm/runtime/qnn/QnnAbi.h"

namespace qnn_delegate {
namespace qnn {

struct ContextTensorInfo {
  uint32_t id = 0;
  std::string name;
  int32_t kind = 0;  // QnnTensorKind
  uint32_t dtype = 0;
  std::vector<uint32_t> dims;
  // Quantization: encoding as QNN reports it (0 scale/offset, 1 axis, 2 bw, 3 bw-axis,
  // 0x7FFFFFFF none); per-tensor scale / offset, or per-channel scales / offsets on `axis`.
  int32_t encoding = kQnnEncUndefined;
  uint32_t bitwidth = 0;
  float scale = 0.0f;
  int32_t offset = 0;
  int32_t axis = -1;
  std::vector<float> scales;
  std::vector<int32_t> offsets;
};

struct ContextGraphInfo {
  std::string name;
  std::vector<ContextTensorInfo> inputs;
  std::vector<ContextTensorInfo> outputs;
};

struct ContextBinaryInfo {
  uint32_t info_version = 0;  // QnnSystemContext binary-info version (1..3)
  uint32_t backend_id = 0;    // 6 = HTP
  std::string build_id;       // QNN build that wrote the binary, e.g. "v2.51.0.260929181845"
  QnnVersion core_api{};
  QnnVersion backend_api{};
  QnnVersion context_blob_version{};
  std::string soc_version;
  uint32_t soc_model = 0;  // binary-info v3 only; 0 = not recorded
  uint64_t context_blob_size = 0;
  std::vector<ContextGraphInfo> graphs;
};

// Bounds applied to what QnnSystem reports before it is copied (a malformed binary must not
// make us read or allocate without limit).
inline constexpr size_t kMinContextBinaryBytes = 32;
inline constexpr uint32_t kMaxContextGraphs = 4096;
inline constexpr uint32_t kMaxGraphTensors = 65536;
inline constexpr uint32_t kMaxTensorRank = 16;

// Checks done before QNN sees the bytes: size (at least kMinContextBinaryBytes, below 4 GiB).
engine::Status precheck_context_binary(const void* data, size_t size);

// QnnSystem's info about a context binary (QnnSystemContext getMetadata; with an older system
// API, getBinaryInfo on a copy of the bytes, which it takes non-const). NotSupported when libQnnSystem.so does not
// load; InvalidProgram when QNN cannot parse the binary or reports something out of bounds (the message carries QNN's
// error).
engine::Status read_context_binary_info(const void* data, size_t size, ContextBinaryInfo& out);

// "libQnnSystem.so: system API 1.15.0 (<path>)", or why it does not load.
std::string qnn_system_status(bool* loaded);

}  // namespace qnn
}  // namespace qnn_delegate
