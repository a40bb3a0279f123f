#include "backends/qualcomm/runtime/engine/Quant.h"

#include "backends/qualcomm/runtime/engine/QuantSimd.h"

#include <cstring>
#include <limits>

namespace qnn_delegate {
namespace engine {

namespace {

// Bit width a fixed-point data type implies (0: not fixed-point).
uint32_t dtype_bitwidth(DType dt) {
  switch (dt) {
    case DType::UFIXED_POINT_8:
    case DType::SFIXED_POINT_8:
      return 8;
    case DType::UFIXED_POINT_16:
    case DType::SFIXED_POINT_16:
      return 16;
    case DType::SFIXED_POINT_32:
      return 32;
    case DType::SFIXED_POINT_4:
    case DType::UFIXED_POINT_4:
      return 4;
    default:
      return 0;
  }
}

bool is_unsigned_fixed(DType dt) {
  return dt == DType::UFIXED_POINT_8 || dt == DType::UFIXED_POINT_16 || dt == DType::UFIXED_POINT_4;
}

void range_of(DType dt, uint32_t bits, int64_t& lo, int64_t& hi) {
  if (is_unsigned_fixed(dt)) {
    lo = 0;
    hi = (int64_t(1) << bits) - 1;
  } else {
    lo = -(int64_t(1) << (bits - 1));
    hi = (int64_t(1) << (bits - 1)) - 1;
  }
}

template <typename T>
void copy_vector(const flatbuffers::Vector<T>* v, std::vector<T>& out) {
  if (v != nullptr) out.assign(v->begin(), v->end());
}

// Collects the error of one tensor's encoding: "graph 'g': tensor 't' (DTYPE, ENC): ...".
struct QuantChecker {
  const std::string& graph;
  const TensorInfo& t;

  Status fail(ErrorKind kind, const char* fmt, ...) const __attribute__((format(printf, 3, 4))) {
    char buf[512];
    va_list args;
    va_start(args, fmt);
    std::vsnprintf(buf, sizeof(buf), fmt, args);
    va_end(args);
    return make_error(kind, "graph '%s': tensor '%s' (%s, %s): %s", graph.c_str(), t.name.c_str(), dtype_name(t.dtype),
                      encoding_name(t.quant.encoding), buf);
  }

  Status check_scale(float s, const char* what, size_t index) const {
    if (!(std::isfinite(s) && s > 0.f)) {
      return fail(ErrorKind::InvalidProgram, "%s[%zu] = %g must be finite and > 0", what, index, s);
    }
    return Status::Ok();
  }

  Status check_offset(int32_t off, size_t index) const {
    int64_t lo, hi;
    range_of(t.dtype, t.quant.bitwidth, lo, hi);
    const int64_t zero_point = -int64_t(off);
    if (zero_point < lo || zero_point > hi) {
      return fail(ErrorKind::InvalidProgram, "offset[%zu] = %d puts the zero point outside [%lld, %lld]", index, off,
                  (long long)lo, (long long)hi);
    }
    return Status::Ok();
  }

  Status check_axis(int32_t axis, const char* what) const {
    if (axis < 0 || size_t(axis) >= t.rank()) {
      return fail(ErrorKind::InvalidProgram, "%s %d is out of range for dims %s", what, axis,
                  dims_to_string(t.dims).c_str());
    }
    return Status::Ok();
  }

  Status check_dtype_and_bitwidth() const {
    const QuantInfo& q = t.quant;
    const uint32_t bits = dtype_bitwidth(t.dtype);
    if (bits == 0) {
      return fail(ErrorKind::InvalidProgram, "a quantization encoding needs a fixed-point data type");
    }
    if (t.dtype == DType::UFIXED_POINT_4) {
      return fail(ErrorKind::NotSupported, "unsigned 4-bit tensors are not supported");
    }
    const bool sub_byte_ok = t.dtype == DType::SFIXED_POINT_4 && (q.bitwidth == 4 || q.bitwidth == 2);
    if (q.bitwidth != bits && !sub_byte_ok) {
      return fail(ErrorKind::InvalidProgram, "bitwidth %u does not match the data type (expected %u%s)", q.bitwidth,
                  bits, t.dtype == DType::SFIXED_POINT_4 ? " or 2" : "");
    }
    const bool activation = t.kind != TensorKind::STATIC;
    if (activation && !(t.dtype == DType::UFIXED_POINT_8 || t.dtype == DType::UFIXED_POINT_16)) {
      return fail(ErrorKind::NotSupported,
                  "%s tensors must be UFIXED_POINT_8 or UFIXED_POINT_16 (only STATIC data may be "
                  "signed or sub-byte)",
                  kind_name(t.kind));
    }
    if (activation && !q.per_tensor()) {
      return fail(ErrorKind::NotSupported, "%s tensors need a per-tensor encoding", kind_name(t.kind));
    }
    return Status::Ok();
  }

  Status check_per_tensor() const {
    QNN_RETURN_IF_ERROR(check_scale(t.quant.scale, "scale", 0));
    return check_offset(t.quant.offset, 0);
  }

  Status check_channels(size_t channels) const {
    const QuantInfo& q = t.quant;
    if (q.scales.size() != channels) {
      return fail(ErrorKind::InvalidProgram, "has %zu scales, expected %zu (dims %s, axis %d)", q.scales.size(),
                  channels, dims_to_string(t.dims).c_str(), q.axis);
    }
    if (!q.offsets.empty() && q.offsets.size() != channels) {
      return fail(ErrorKind::InvalidProgram, "has %zu offsets, expected %zu (dims %s, axis %d)", q.offsets.size(),
                  channels, dims_to_string(t.dims).c_str(), q.axis);
    }
    for (size_t c = 0; c < channels; ++c) {
      QNN_RETURN_IF_ERROR(check_scale(q.scales[c], "scales", c));
      QNN_RETURN_IF_ERROR(check_offset(q.channel_offset(c), c));
    }
    return Status::Ok();
  }

  Status check_per_channel() const {
    QNN_RETURN_IF_ERROR(check_axis(t.quant.axis, "axis"));
    return check_channels(t.dims[t.quant.axis]);
  }

  Status check_blockwise() const {
    const QuantInfo& q = t.quant;
    if (t.kind != TensorKind::STATIC) {
      return fail(ErrorKind::NotSupported, "blockwise encodings are for STATIC weights only");
    }
    QNN_RETURN_IF_ERROR(check_axis(q.axis, "axis"));
    QNN_RETURN_IF_ERROR(check_axis(q.block_axis, "block_axis"));
    if (q.block_axis == q.axis) {
      return fail(ErrorKind::InvalidProgram, "block_axis equals axis (%d)", q.axis);
    }
    const size_t depth = t.dims[q.block_axis];
    if (q.block_size == 0 || depth % q.block_size != 0) {
      return fail(ErrorKind::InvalidProgram, "block_size %u does not divide dim %zu of block_axis %d", q.block_size,
                  depth, q.block_axis);
    }
    if (q.block_scale_bitwidth == 0 || q.block_scale_bitwidth > 8) {
      return fail(ErrorKind::InvalidProgram, "block_scale_bitwidth %u is not in 1..8", q.block_scale_bitwidth);
    }
    QNN_RETURN_IF_ERROR(check_channels(t.dims[q.axis]));
    const size_t expected = size_t(t.dims[q.axis]) * (depth / q.block_size);
    if (q.block_scales.size() != expected) {
      return fail(ErrorKind::InvalidProgram, "has %zu block_scales, expected %zu (channels x blocks)",
                  q.block_scales.size(), expected);
    }
    const unsigned limit = 1u << q.block_scale_bitwidth;
    for (size_t i = 0; i < expected; ++i) {
      if (q.block_scales[i] >= limit) {
        return fail(ErrorKind::InvalidProgram, "block_scales[%zu] = %u does not fit %u bits", i, q.block_scales[i],
                    q.block_scale_bitwidth);
      }
    }
    for (size_t c = 0; c < q.offsets.size(); ++c) {
      if (q.offsets[c] != 0) {
        return fail(ErrorKind::InvalidProgram, "blockwise offsets must be 0 (offsets[%zu] = %d)", c, q.offsets[c]);
      }
    }
    return Status::Ok();
  }

  Status check() const {
    QNN_RETURN_IF_ERROR(check_dtype_and_bitwidth());
    const QuantInfo& q = t.quant;
    if (q.per_tensor()) return check_per_tensor();
    if (q.per_channel()) return check_per_channel();
    if (q.blockwise()) return check_blockwise();
    return fail(ErrorKind::InvalidProgram, "unknown quantization encoding %d", int(q.encoding));
  }
};

void read_quant(const ::qnn_delegate::QuantizeParams* p, QuantInfo& q) {
  q.encoding = p->encoding();
  q.bitwidth = p->bitwidth();
  q.scale = p->scale();
  q.offset = p->offset();
  q.axis = p->axis();
  copy_vector(p->scales(), q.scales);
  copy_vector(p->offsets(), q.offsets);
  q.block_axis = p->block_axis();
  q.block_size = p->block_size();
  q.block_scale_bitwidth = p->block_scale_bitwidth();
  copy_vector(p->block_scales(), q.block_scales);
}

}  // namespace

const char* encoding_name(QuantEncoding e) {
  const char* name = ::qnn_delegate::EnumNameQnnQuantEncoding(e);
  return (name && *name) ? name : "<unknown encoding>";
}

bool QuantInfo::same_as(const QuantInfo& o) const {
  return encoding == o.encoding && bitwidth == o.bitwidth && scale == o.scale && offset == o.offset && axis == o.axis &&
         scales == o.scales && offsets == o.offsets && block_axis == o.block_axis && block_size == o.block_size &&
         block_scales == o.block_scales;
}

bool is_fixed_point(DType dt) { return dtype_bitwidth(dt) != 0; }

bool is_quant_activation(const TensorInfo& t) {
  return (t.dtype == DType::UFIXED_POINT_8 || t.dtype == DType::UFIXED_POINT_16) && t.quant.per_tensor();
}

int64_t quant_min(const TensorInfo& t) {
  int64_t lo, hi;
  range_of(t.dtype, t.quant.bitwidth, lo, hi);
  return lo > t.clamp_min ? lo : t.clamp_min;
}

int64_t quant_max(const TensorInfo& t) {
  int64_t lo, hi;
  range_of(t.dtype, t.quant.bitwidth, lo, hi);
  return hi < t.clamp_max ? hi : t.clamp_max;
}

Status load_quant_info(const ::qnn_delegate::QuantizeParams* p, const std::string& graph, TensorInfo& info) {
  info.quant = QuantInfo();
  if (p != nullptr) read_quant(p, info.quant);
  if (!info.quant.defined()) {
    if (is_fixed_point(info.dtype)) {
      return make_error(ErrorKind::InvalidProgram,
                        "graph '%s': tensor '%s' has data type %s but no quantization encoding", graph.c_str(),
                        info.name.c_str(), dtype_name(info.dtype));
    }
    return Status::Ok();
  }
  QNN_RETURN_IF_ERROR((QuantChecker{graph, info}.check()));
  info.nbytes = (info.numel * info.quant.bitwidth + 7) / 8;
  return Status::Ok();
}

void unpack_int8(const TensorInfo& t, int8_t* dst) {
  const uint8_t* src = static_cast<const uint8_t*>(t.static_data);
  const uint32_t bits = t.dtype == DType::SFIXED_POINT_4 ? t.quant.bitwidth : 8;
  if (bits == 8) {
    std::memcpy(dst, src, t.numel);
    return;
  }
  const uint32_t per_byte = 8 / bits, mask = (1u << bits) - 1, sign = 1u << (bits - 1);
  for (size_t i = 0; i < t.numel; ++i) {
    const uint32_t v = (src[i / per_byte] >> ((i % per_byte) * bits)) & mask;
    dst[i] = static_cast<int8_t>(int32_t(v ^ sign) - int32_t(sign));  // sign-extend
  }
}

int64_t static_q_at(const TensorInfo& t, size_t i) {
  const void* d = t.static_data;
  switch (t.dtype) {
    case DType::UFIXED_POINT_8:
      return static_cast<const uint8_t*>(d)[i];
    case DType::UFIXED_POINT_16:
      return static_cast<const uint16_t*>(d)[i];
    case DType::SFIXED_POINT_8:
      return static_cast<const int8_t*>(d)[i];
    case DType::SFIXED_POINT_16:
      return static_cast<const int16_t*>(d)[i];
    case DType::SFIXED_POINT_32:
      return static_cast<const int32_t*>(d)[i];
    case DType::SFIXED_POINT_4: {
      const uint32_t bits = t.quant.bitwidth, per_byte = 8 / bits, sign = 1u << (bits - 1);
      const uint32_t v = (static_cast<const uint8_t*>(d)[i / per_byte] >> ((i % per_byte) * bits)) & ((1u << bits) - 1);
      return int32_t(v ^ sign) - int32_t(sign);
    }
    default:
      return 0;
  }
}

size_t channel_at(const TensorInfo& t, size_t i) {
  const QuantInfo& q = t.quant;
  if (q.per_tensor() || !q.defined()) return 0;
  return (i / product(t.dims, size_t(q.axis) + 1)) % t.dims[q.axis];
}

float channel_scale_at(const TensorInfo& t, size_t i) {
  return t.quant.per_tensor() ? t.quant.scale : t.quant.scales[channel_at(t, i)];
}

uint32_t block_scale_at(const TensorInfo& t, size_t i) {
  const QuantInfo& q = t.quant;
  if (!q.blockwise()) return 1;
  const size_t depth = t.dims[q.block_axis];
  const size_t k = (i / product(t.dims, size_t(q.block_axis) + 1)) % depth;
  return q.block_scales[channel_at(t, i) * (depth / q.block_size) + k / q.block_size];
}

bool is_symmetric(const TensorInfo& t) {
  if (t.quant.offset != 0) return false;
  for (int32_t o : t.quant.offsets)
    if (o != 0) return false;
  return true;
}

float scale_at(const TensorInfo& t, size_t i, int32_t& offset) {
  offset = t.quant.per_tensor() ? t.quant.offset : t.quant.channel_offset(channel_at(t, i));
  return channel_scale_at(t, i) * float(block_scale_at(t, i));
}

void dequantize_static(const TensorInfo& t, float* dst) {
  for (size_t i = 0; i < t.numel; ++i) {
    int32_t offset = 0;
    const float s = scale_at(t, i, offset);
    dst[i] = float(static_q_at(t, i) + offset) * s;
  }
}

QuantParams quant_params_of(const TensorInfo& t) {
  QuantParams p;
  p.scale = t.quant.scale;
  p.inv_scale = float(1.0 / double(t.quant.scale));
  p.offset = t.quant.offset;
  p.qmin = int32_t(quant_min(t));
  p.qmax = int32_t(quant_max(t));
  return p;
}

// The AVX2 loops (QuantSimd.h, the same bits) where this CPU and QNN_HOST_ENGINE_KERNELS allow.
void quantize_any(const float* x, void* q, size_t n, DType dt, const QuantParams& p) {
#if QNN_X86
  if (simd_level() >= SimdLevel::Avx2) {
    if (dt == DType::UFIXED_POINT_16) {
      quantize_rne_avx2(x, static_cast<uint16_t*>(q), n, p);
    } else {
      quantize_rne_avx2(x, static_cast<uint8_t*>(q), n, p);
    }
    return;
  }
#endif
  if (dt == DType::UFIXED_POINT_16) {
    quantize_run(x, static_cast<uint16_t*>(q), n, p);
  } else {
    quantize_run(x, static_cast<uint8_t*>(q), n, p);
  }
}

void dequantize_any(const void* q, float* x, size_t n, DType dt, const QuantParams& p) {
#if QNN_X86
  if (simd_level() >= SimdLevel::Avx2) {
    if (dt == DType::UFIXED_POINT_16) {
      dequantize_avx2(static_cast<const uint16_t*>(q), x, n, p);
    } else {
      dequantize_avx2(static_cast<const uint8_t*>(q), x, n, p);
    }
    return;
  }
#endif
  if (dt == DType::UFIXED_POINT_16) {
    dequantize_run(static_cast<const uint16_t*>(q), x, n, p);
  } else {
    dequantize_run(static_cast<const uint8_t*>(q), x, n, p);
  }
}

}  // namespace engine
}  // namespace qnn_delegate
