// A QNN tensor description built from one payload tensor, with the storage its
// pointers refer to (name, dims, quantization arrays, converted static data).
//
// Conversions to what the HTP backend accepts:
// - INT_64 becomes INT_32 (static data narrowed; graph I/O converted by the runner);
// - SFIXED_POINT_4 (2 or 4-bit values packed in bytes) becomes SFIXED_POINT_8 with one
//   value per byte and a BW_* encoding of the original bit width;
// - BLOCKWISE_EXPANSION (LPBQ: 4-bit codes q, integer block scales k, float channel scales)
//   becomes SFIXED_POINT_8 AXIS_SCALE_OFFSET codes k * q with the channel scales: the same
//   integer products. QNN 2.51 (SM8650, x86) computes its own LPBQ exactly so where it works
//   (FullyConnected with N <= K, 1x1 Conv2d), but a Conv2d with a larger kernel from the
//   first tap only, a FullyConnected with N > K with channels >= K zero, and some block
//   sizes (64x64, block 8) crash graphExecute.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "qnn_payload_generated.h"

#include "backends/qualcomm/runtime/engine/Status.h"
#include "backends/qualcomm/runtime/qnn/QnnAbi.h"
#include "backends/qualcomm/runtime/qnn/QnnNames.h"

namespace qnn_delegate {
namespace qnn {

struct TensorDesc {
  QnnTensor tensor{};  // points into the members below: never copy or move a TensorDesc
  std::string name;
  std::vector<uint32_t> dims;
  std::vector<QnnScaleOffset> scale_offsets;
  std::vector<float> scales;
  std::vector<int32_t> offsets;
  std::vector<uint8_t> block_scales;  // LPBQ: [channel][block], folded into `data`
  std::vector<uint8_t> data;          // static data after conversion
  bool int64_narrowed = false;
  size_t numel = 1;
  size_t element_size = 4;  // of the QNN tensor

  TensorDesc() = default;
  TensorDesc(const TensorDesc&) = delete;
  TensorDesc& operator=(const TensorDesc&) = delete;

  size_t nbytes() const { return numel * element_size; }
};

// Builds `out` (a QnnTensor of `version` 1 or 2) from payload tensor `t`. Static
// data is converted and owned by `out`.
engine::Status describe_tensor(const ::qnn_delegate::Tensor* t, uint32_t version, std::unique_ptr<TensorDesc>& out);

// Sub-byte weights of weighted ops with uint16 activations (and their int32 biases) as the
// same values in 8-bit codes (engine::sub_byte_widening): QNN 2.51 computes them with 16x
// (4-bit) less accumulator precision otherwise. `tensors` are describe_tensor's of `g`
// (null entries are skipped).
void widen_sub_byte_weights(const ::qnn_delegate::Graph* g, std::vector<std::unique_ptr<TensorDesc>>& tensors);

// A STATIC tensor for a TENSOR op param.
engine::Status describe_param_tensor(const ::qnn_delegate::Param* p, const std::string& name,
                                     std::unique_ptr<TensorDesc>& out);

// Element size in bytes of a QNN data type (0 for unknown).
size_t qnn_element_size(QnnDType dtype);

// Fields shared by tensor v1 and v2.
inline QnnTensorV1& core(QnnTensor& t) { return t.v1; }
inline const QnnTensorV1& core(const QnnTensor& t) { return t.v1; }

}  // namespace qnn
}  // namespace qnn_delegate
