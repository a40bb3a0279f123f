// Quantization encoding of one tensor (QNN QuantizeParams), validated at init.
// real = scale * (q + offset); offset = -zero_point.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "qnn_payload_generated.h"

namespace qnn_delegate {
namespace engine {

using QuantEncoding = ::qnn_delegate::QnnQuantEncoding;

struct QuantInfo {
  QuantEncoding encoding = QuantEncoding::UNDEFINED;
  uint32_t bitwidth = 8;
  float scale = 0.f;   // per tensor
  int32_t offset = 0;  // per tensor
  int32_t axis = -1;   // per channel / blockwise: channel axis
  std::vector<float> scales;
  std::vector<int32_t> offsets;  // empty = all zero
  int32_t block_axis = -1;       // blockwise only
  uint32_t block_size = 0;
  uint32_t block_scale_bitwidth = 4;
  std::vector<uint8_t> block_scales;  // [channel * num_blocks + block]

  bool defined() const { return encoding != QuantEncoding::UNDEFINED; }
  bool per_tensor() const {
    return encoding == QuantEncoding::SCALE_OFFSET || encoding == QuantEncoding::BW_SCALE_OFFSET;
  }
  bool per_channel() const {
    return encoding == QuantEncoding::AXIS_SCALE_OFFSET || encoding == QuantEncoding::BW_AXIS_SCALE_OFFSET;
  }
  bool blockwise() const { return encoding == QuantEncoding::BLOCKWISE_EXPANSION; }
  int32_t channel_offset(size_t c) const { return offsets.empty() ? 0 : offsets[c]; }
  bool same_as(const QuantInfo& o) const;
};

const char* encoding_name(QuantEncoding e);

}  // namespace engine
}  // namespace qnn_delegate
