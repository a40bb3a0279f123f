// Resize and channel rearrangement on channel-last tensors [N, H, W, C] (ChannelShuffle: any
// rank, along `axis`):
// - ResizeNearestNeighbor, DepthToSpace, SpaceToDepth, ChannelShuffle move elements: one table of
//   source offsets per batch image (computed at init), copied by element size (any dtype, and
//   quantized codes when input and output share an encoding);
// - ResizeBilinear and Resize (cubic) on float32: per-row / per-column source indices and weights
//   computed at init.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "backends/qualcomm/runtime/engine/kernels/KernelUtil.h"

namespace qnn_delegate {
namespace engine {
namespace {

// ---- gather by offset table ----------------------------------------------------------------
template <typename T>
class OffsetCopyKernel final : public Kernel {
 public:
  OffsetCopyKernel(uint32_t in, uint32_t out, size_t batches, size_t in_batch, Buffer table, size_t per_batch)
      : in_(in), out_(out), batches_(batches), in_batch_(in_batch), table_(std::move(table)), per_batch_(per_batch) {}
  Status run(const RunContext& c) const override {
    const T* x = c.at<const T>(in_);
    T* y = c.at<T>(out_);
    const uint32_t* src = table_.as<uint32_t>();
    for (size_t n = 0; n < batches_; ++n) {
      const T* xb = x + n * in_batch_;
      T* yb = y + n * per_batch_;
      for (size_t i = 0; i < per_batch_; ++i) yb[i] = xb[src[i]];
    }
    return Status::Ok();
  }
  size_t owned_bytes() const override { return table_.size(); }

 private:
  uint32_t in_, out_;
  size_t batches_, in_batch_;
  Buffer table_;
  size_t per_batch_;
};

template <typename T>
Status copy_kernel(const TensorInfo& x, const TensorInfo& y, size_t batches, size_t in_batch, Buffer table,
                   size_t per_batch, KernelPtr& out) {
  return emplace_kernel<OffsetCopyKernel<T>>(out, x.id, y.id, batches, in_batch, std::move(table), per_batch);
}

// Source offset (within one batch image) of output element `o` of a batch image.
using SourceOf = size_t (*)(const void* ctx, size_t o);

Status make_offset_copy(const OpView& v, KernelEnv& env, size_t batches, const void* ctx, SourceOf source,
                        KernelPtr& out) {
  const TensorInfo& x = *v.inputs[0];
  const TensorInfo& y = *v.outputs[0];
  if (x.dtype != y.dtype) {
    return v.fail(ErrorKind::InvalidProgram, "output '%s' must have the data type of input '%s'", y.name.c_str(),
                  x.name.c_str());
  }
  size_t elem = 0;
  QNN_RETURN_IF_ERROR(byte_element_size(v, x, elem));
  const size_t per_batch = batches ? y.numel / batches : 0;
  const size_t in_batch = batches ? x.numel / batches : 0;
  if (in_batch > UINT32_MAX) return v.fail(ErrorKind::NotSupported, "input image too large for 32-bit offsets");
  Buffer table(env.allocator, per_batch * sizeof(uint32_t));
  if (per_batch && !table.valid()) {
    return v.fail(ErrorKind::MemoryAllocationFailed, "cannot allocate %zu bytes for the offset table",
                  per_batch * sizeof(uint32_t));
  }
  uint32_t* t = table.as<uint32_t>();
  for (size_t o = 0; o < per_batch; ++o) t[o] = uint32_t(source(ctx, o));
  switch (elem) {
    case 1:
      return copy_kernel<uint8_t>(x, y, batches, in_batch, std::move(table), per_batch, out);
    case 2:
      return copy_kernel<uint16_t>(x, y, batches, in_batch, std::move(table), per_batch, out);
    case 4:
      return copy_kernel<uint32_t>(x, y, batches, in_batch, std::move(table), per_batch, out);
    case 8:
      return copy_kernel<uint64_t>(x, y, batches, in_batch, std::move(table), per_batch, out);
    default:
      return v.fail(ErrorKind::NotSupported, "element size %zu is not supported", elem);
  }
}

// Output / input image dims [H, W, C] of an NHWC op (rank 4 checked by the caller).
struct Image {
  size_t ih, iw, ic, oh, ow, oc;
};

Status nhwc_image(const OpView& v, Image& im) {
  QNN_RETURN_IF_ERROR(v.expect_arity(1, 1, 1));
  const TensorInfo& x = *v.inputs[0];
  const TensorInfo& y = *v.outputs[0];
  QNN_RETURN_IF_ERROR(v.expect_rank(x, 4));
  QNN_RETURN_IF_ERROR(v.expect_rank(y, 4));
  if (x.dims[0] != y.dims[0]) {
    return v.fail(ErrorKind::InvalidProgram, "output '%s' %s and input '%s' %s differ in batch", y.name.c_str(),
                  dims_to_string(y.dims).c_str(), x.name.c_str(), dims_to_string(x.dims).c_str());
  }
  im = {size_t(x.dims[1]), size_t(x.dims[2]), size_t(x.dims[3]),
        size_t(y.dims[1]), size_t(y.dims[2]), size_t(y.dims[3])};
  return Status::Ok();
}

// ---- ResizeNearestNeighbor (TensorFlow semantics, as QNN) --------------------------------
struct NearestCtx {
  Image im;
  bool align, half;
};

size_t nearest_index(size_t o, size_t in, size_t out, bool align, bool half) {
  const float scale = (align && out > 1) ? float(in - 1) / float(out - 1) : float(in) / float(out);
  const float src = half ? (float(o) + 0.5f) * scale : float(o) * scale;
  const float idx = align ? std::round(src) : std::floor(src);
  return std::min(size_t(std::max(idx, 0.f)), in - 1);
}

size_t nearest_source(const void* p, size_t o) {
  const NearestCtx& c = *static_cast<const NearestCtx*>(p);
  const size_t ch = o % c.im.oc, pix = o / c.im.oc;
  const size_t h = nearest_index(pix / c.im.ow, c.im.ih, c.im.oh, c.align, c.half);
  const size_t w = nearest_index(pix % c.im.ow, c.im.iw, c.im.ow, c.align, c.half);
  return (h * c.im.iw + w) * c.im.ic + ch;
}

Status read_corner_params(const OpView& v, bool& align, bool& half) {
  ParamReader params(v);
  align = false;
  half = false;
  QNN_RETURN_IF_ERROR(params.optional_bool("align_corners", align));
  QNN_RETURN_IF_ERROR(params.optional_bool("half_pixel_centers", half));
  if (align && half) {
    return v.fail(ErrorKind::InvalidProgram, "align_corners and half_pixel_centers are exclusive");
  }
  return Status::Ok();
}

Status create_resize_nearest(const OpView& v, KernelEnv& env, KernelPtr& out) {
  NearestCtx ctx{};
  QNN_RETURN_IF_ERROR(nhwc_image(v, ctx.im));
  QNN_RETURN_IF_ERROR(read_corner_params(v, ctx.align, ctx.half));
  if (ctx.im.ic != ctx.im.oc || ctx.im.ih == 0 || ctx.im.iw == 0) {
    return v.fail(ErrorKind::InvalidProgram, "output channels must equal input channels, input non-empty");
  }
  return make_offset_copy(v, env, size_t(v.inputs[0]->dims[0]), &ctx, &nearest_source, out);
}

// ---- DepthToSpace / SpaceToDepth (mode DCR = 0, CRD = 1) ---------------------------------
struct BlockCtx {
  Image im;
  size_t bh, bw;
  bool crd;
};

// Depth index of (channel c, block row i, block column j) in the deep tensor.
size_t deep_index(const BlockCtx& b, size_t c, size_t i, size_t j, size_t shallow_c) {
  return b.crd ? (c * b.bh + i) * b.bw + j : (i * b.bw + j) * shallow_c + c;
}

size_t depth_to_space_source(const void* p, size_t o) {
  const BlockCtx& b = *static_cast<const BlockCtx*>(p);
  const size_t c = o % b.im.oc, pix = o / b.im.oc;
  const size_t y = pix / b.im.ow, x = pix % b.im.ow;
  return ((y / b.bh) * b.im.iw + x / b.bw) * b.im.ic + deep_index(b, c, y % b.bh, x % b.bw, b.im.oc);
}

size_t space_to_depth_source(const void* p, size_t o) {
  const BlockCtx& b = *static_cast<const BlockCtx*>(p);
  const size_t d = o % b.im.oc, pix = o / b.im.oc;
  const size_t y = pix / b.im.ow, x = pix % b.im.ow;
  size_t c, i, j;
  if (b.crd) {
    c = d / (b.bh * b.bw);
    i = (d / b.bw) % b.bh;
    j = d % b.bw;
  } else {
    i = d / (b.bw * b.im.ic);
    j = (d / b.im.ic) % b.bw;
    c = d % b.im.ic;
  }
  return ((y * b.bh + i) * b.im.iw + x * b.bw + j) * b.im.ic + c;
}

Status read_block(const OpView& v, BlockCtx& b) {
  QNN_RETURN_IF_ERROR(nhwc_image(v, b.im));
  ParamReader params(v);
  std::vector<int64_t> block;
  int64_t mode = 0;
  QNN_RETURN_IF_ERROR(params.tensor_int("block_size", DType::UINT_32, {2}, block));
  if (params.has("mode")) QNN_RETURN_IF_ERROR(params.scalar_int("mode", DType::UINT_32, mode));
  if (block[0] <= 0 || block[1] <= 0 || mode < 0 || mode > 1) {
    return v.fail(ErrorKind::InvalidProgram, "block_size must be positive and mode DCR (0) or CRD (1)");
  }
  b.bh = size_t(block[0]);
  b.bw = size_t(block[1]);
  b.crd = mode == 1;
  return Status::Ok();
}

Status create_depth_to_space(const OpView& v, KernelEnv& env, KernelPtr& out) {
  BlockCtx b{};
  QNN_RETURN_IF_ERROR(read_block(v, b));
  if (b.im.oh != b.im.ih * b.bh || b.im.ow != b.im.iw * b.bw || b.im.ic != b.im.oc * b.bh * b.bw) {
    return v.fail(ErrorKind::InvalidProgram, "output dims do not match input dims and block_size");
  }
  return make_offset_copy(v, env, size_t(v.inputs[0]->dims[0]), &b, &depth_to_space_source, out);
}

Status create_space_to_depth(const OpView& v, KernelEnv& env, KernelPtr& out) {
  BlockCtx b{};
  QNN_RETURN_IF_ERROR(read_block(v, b));
  if (b.im.ih != b.im.oh * b.bh || b.im.iw != b.im.ow * b.bw || b.im.oc != b.im.ic * b.bh * b.bw) {
    return v.fail(ErrorKind::InvalidProgram, "output dims do not match input dims and block_size");
  }
  return make_offset_copy(v, env, size_t(v.inputs[0]->dims[0]), &b, &space_to_depth_source, out);
}

// ---- ChannelShuffle: output channel k = a * groups + b reads input channel b * (C / groups) + a
struct ShuffleCtx {
  size_t channels, inner, groups;
};

size_t shuffle_source(const void* p, size_t o) {
  const ShuffleCtx& s = *static_cast<const ShuffleCtx*>(p);
  const size_t inner = o % s.inner, k = (o / s.inner) % s.channels, outer = o / (s.inner * s.channels);
  const size_t per_group = s.channels / s.groups;
  const size_t src = (k % s.groups) * per_group + k / s.groups;
  return (outer * s.channels + src) * s.inner + inner;
}

Status create_channel_shuffle(const OpView& v, KernelEnv& env, KernelPtr& out) {
  QNN_RETURN_IF_ERROR(v.expect_arity(1, 1, 1));
  const TensorInfo& x = *v.inputs[0];
  ParamReader params(v);
  int64_t groups = 0, axis = int64_t(x.rank()) - 1;
  QNN_RETURN_IF_ERROR(params.scalar_int("num_groups", DType::UINT_32, groups));
  if (params.has("axis")) QNN_RETURN_IF_ERROR(params.scalar_int("axis", DType::UINT_32, axis));
  if (axis < 0 || size_t(axis) >= x.rank() || groups <= 0 || x.dims[axis] % groups) {
    return v.fail(ErrorKind::InvalidProgram, "num_groups %lld must divide dim %lld of input '%s' %s",
                  static_cast<long long>(groups), static_cast<long long>(axis), x.name.c_str(),
                  dims_to_string(x.dims).c_str());
  }
  QNN_RETURN_IF_ERROR(v.expect_output(0, x.dims, x.dtype));
  ShuffleCtx s{size_t(x.dims[axis]), product(x.dims, axis + 1), size_t(groups)};
  return make_offset_copy(v, env, 1, &s, &shuffle_source, out);
}

// ---- ResizeBilinear / Resize (cubic), float32 ---------------------------------------------
// Per output coordinate: `taps` source indices and weights.
struct Taps {
  Buffer index, weight;
};

constexpr size_t kMaxTaps = 4;

float source_coordinate(size_t o, size_t in, size_t out, bool align, bool half, bool clamp_negative) {
  if (align) return out > 1 ? float(o) * (float(in - 1) / float(out - 1)) : 0.f;
  const float scale = float(in) / float(out);
  float src = half ? std::fma(float(o) + 0.5f, scale, -0.5f) : float(o) * scale;
  if (clamp_negative && src < 0.f) src = 0.f;
  return src;
}

// Keys' cubic kernel, |t| <= 1 and 1 < |t| < 2 (Horner steps fused as written).
float cubic_near(float t, float a) { return std::fma(std::fma(a + 2.f, t, -(a + 3.f)) * t, t, 1.f); }
float cubic_far(float t, float a) { return std::fma(std::fma(std::fma(a, t, -(5.f * a)), t, 8.f * a), t, -(4.f * a)); }

// Source taps of one axis: 2 (bilinear, torch's clamped lambda) or 4 (cubic, edge-clamped).
Status axis_taps(const OpView& v, KernelEnv& env, size_t in, size_t out, size_t taps, bool align, bool half,
                 float coeff, Taps& t) {
  t.index = Buffer(env.allocator, out * taps * sizeof(uint32_t));
  t.weight = Buffer(env.allocator, out * taps * sizeof(float));
  if (out && (!t.index.valid() || !t.weight.valid())) {
    return v.fail(ErrorKind::MemoryAllocationFailed, "cannot allocate resize tables");
  }
  uint32_t* idx = t.index.as<uint32_t>();
  float* w = t.weight.as<float>();
  for (size_t o = 0; o < out; ++o) {
    const float src = source_coordinate(o, in, out, align, half, taps == 2);
    const float fl = std::floor(src);
    const float f = src - fl;
    const long base = long(fl);
    auto clamp = [in](long i) { return uint32_t(std::min(std::max(i, 0L), long(in) - 1)); };
    if (taps == 2) {
      idx[2 * o] = clamp(base);
      idx[2 * o + 1] = clamp(base + 1);
      w[2 * o] = 1.f - f;
      w[2 * o + 1] = f;
    } else {
      const float ws[4] = {cubic_far(f + 1.f, coeff), cubic_near(f, coeff), cubic_near(1.f - f, coeff),
                           cubic_far(2.f - f, coeff)};
      for (size_t k = 0; k < 4; ++k) {
        idx[4 * o + k] = clamp(base - 1 + long(k));
        w[4 * o + k] = ws[k];
      }
    }
  }
  return Status::Ok();
}

class InterpolateKernel final : public Kernel {
 public:
  InterpolateKernel(uint32_t in, uint32_t out, size_t n, const Image& im, size_t taps, Taps rows, Taps cols)
      : in_(in), out_(out), n_(n), im_(im), taps_(taps), rows_(std::move(rows)), cols_(std::move(cols)) {}
  Status run(const RunContext& c) const override {
    const float* x = c.at<const float>(in_);
    float* y = c.at<float>(out_);
    const uint32_t* ri = rows_.index.as<uint32_t>();
    const float* rw = rows_.weight.as<float>();
    const uint32_t* ci = cols_.index.as<uint32_t>();
    const float* cw = cols_.weight.as<float>();
    const size_t C = im_.ic;
    for (size_t n = 0; n < n_; ++n) {
      const float* xb = x + n * im_.ih * im_.iw * C;
      for (size_t oy = 0; oy < im_.oh; ++oy)
        for (size_t ox = 0; ox < im_.ow; ++ox) {
          float* py = y + ((n * im_.oh + oy) * im_.ow + ox) * C;
          for (size_t ch = 0; ch < C; ++ch) {
            float acc = 0.f;
            for (size_t a = 0; a < taps_; ++a) {
              const float* row = xb + size_t(ri[oy * taps_ + a]) * im_.iw * C;
              float racc = 0.f;
              for (size_t b = 0; b < taps_; ++b) {  // taps_ <= kMaxTaps: each tap fused
                racc = std::fma(cw[ox * taps_ + b], row[size_t(ci[ox * taps_ + b]) * C + ch], racc);
              }
              acc += rw[oy * taps_ + a] * racc;
            }
            py[ch] = acc;
          }
        }
    }
    return Status::Ok();
  }
  size_t owned_bytes() const override {
    return rows_.index.size() + rows_.weight.size() + cols_.index.size() + cols_.weight.size();
  }

 private:
  uint32_t in_, out_;
  size_t n_;
  Image im_;
  size_t taps_;
  Taps rows_, cols_;
};

Status make_interpolate(const OpView& v, KernelEnv& env, size_t taps, bool align, bool half, float coeff,
                        KernelPtr& out) {
  Image im{};
  QNN_RETURN_IF_ERROR(nhwc_image(v, im));
  const TensorInfo& x = *v.inputs[0];
  QNN_RETURN_IF_ERROR(v.expect_float(x));
  QNN_RETURN_IF_ERROR(v.expect_float(*v.outputs[0]));
  if (im.ic != im.oc || im.ih == 0 || im.iw == 0) {
    return v.fail(ErrorKind::InvalidProgram, "output channels must equal input channels, input non-empty");
  }
  Taps rows, cols;
  QNN_RETURN_IF_ERROR(axis_taps(v, env, im.ih, im.oh, taps, align, half, coeff, rows));
  QNN_RETURN_IF_ERROR(axis_taps(v, env, im.iw, im.ow, taps, align, half, coeff, cols));
  return emplace_kernel<InterpolateKernel>(out, x.id, v.outputs[0]->id, size_t(x.dims[0]), im, taps, std::move(rows),
                                           std::move(cols));
}

Status create_resize_bilinear(const OpView& v, KernelEnv& env, KernelPtr& out) {
  bool align = false, half = false;
  QNN_RETURN_IF_ERROR(read_corner_params(v, align, half));
  return make_interpolate(v, env, 2, align, half, 0.f, out);
}

// Resize: cubic only (nearest / linear lower to ResizeNearestNeighbor / ResizeBilinear).
Status create_resize(const OpView& v, KernelEnv& env, KernelPtr& out) {
  ParamReader params(v);
  int64_t interpolation = 0, transformation = 0;
  float coeff = -0.75f;
  bool exclude_outside = false;
  QNN_RETURN_IF_ERROR(params.scalar_int("interpolation_mode", DType::UINT_32, interpolation));
  QNN_RETURN_IF_ERROR(params.scalar_int("transformation_mode", DType::UINT_32, transformation));
  QNN_RETURN_IF_ERROR(params.optional_float("cubic_coeff", coeff));
  QNN_RETURN_IF_ERROR(params.optional_bool("exclude_outside", exclude_outside));
  // transformation_mode: 0 half_pixel, 1 pytorch_half_pixel, 2 align_corners (3 asymmetric: not here)
  if (interpolation != 2 || transformation > 2 || exclude_outside) {
    return v.fail(ErrorKind::NotSupported,
                  "only cubic interpolation (2) with transformation_mode 0..2 and exclude_outside = false "
                  "is supported, got interpolation_mode %lld, transformation_mode %lld",
                  static_cast<long long>(interpolation), static_cast<long long>(transformation));
  }
  return make_interpolate(v, env, 4, transformation == 2, transformation != 2, coeff, out);
}

}  // namespace

QNN_REGISTER_KERNEL(Float, ResizeNearestNeighbor, &create_resize_nearest);
QNN_REGISTER_KERNEL(Float, ResizeBilinear, &create_resize_bilinear);
QNN_REGISTER_KERNEL(Float, Resize, &create_resize);
QNN_REGISTER_KERNEL(Float, DepthToSpace, &create_depth_to_space);
QNN_REGISTER_KERNEL(Float, SpaceToDepth, &create_space_to_depth);
QNN_REGISTER_KERNEL(Float, ChannelShuffle, &create_channel_shuffle);

}  // namespace engine
}  // namespace qnn_delegate
