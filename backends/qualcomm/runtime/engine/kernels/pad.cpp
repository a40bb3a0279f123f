// Pad (FLOAT_32; quantized graphs run it on dequantized values: QuantDispatch): out dim i =
// before_i + in dim i + after_i. scheme 0 CONSTANT (pad_constant_value), 1 MIRROR_SYMMETRIC
// (edge repeated), 2 MIRROR_REFLECT (edge not repeated), 3 EDGE. The source index of every
// output position of every axis is computed at init (-1: the constant).
#include <cstdint>
#include <vector>

#include "backends/qualcomm/runtime/engine/kernels/KernelUtil.h"

namespace qnn_delegate {
namespace engine {
namespace {

enum Scheme : int64_t { kConstant = 0, kSymmetric = 1, kReflect = 2, kEdge = 3 };

// Source index of output position `o` of an axis of length n padded by `before`; -1: constant.
long source_index(long o, long before, long n, int64_t scheme) {
  long i = o - before;
  if (i >= 0 && i < n) return i;
  switch (scheme) {
    case kConstant:
      return -1;
    case kEdge:
      return i < 0 ? 0 : n - 1;
    case kReflect:
      return i < 0 ? -i : 2 * (n - 1) - i;
    default:
      return i < 0 ? -i - 1 : 2 * n - 1 - i;  // symmetric
  }
}

class PadKernel final : public Kernel {
 public:
  PadKernel(uint32_t in, uint32_t out, Dims in_dims, Dims out_dims, std::vector<std::vector<long>> maps, float value)
      : in_(in),
        out_(out),
        in_dims_(std::move(in_dims)),
        out_dims_(std::move(out_dims)),
        maps_(std::move(maps)),
        value_(value) {
    in_strides_.assign(in_dims_.size(), 1);
    for (size_t a = in_dims_.size(); a-- > 1;) in_strides_[a - 1] = in_strides_[a] * in_dims_[a];
  }

  Status run(const RunContext& ctx) const override {
    const float* x = ctx.at<const float>(in_);
    float* y = ctx.at<float>(out_);
    if (out_dims_.empty()) {
      y[0] = x[0];
      return Status::Ok();
    }
    fill(x, y, 0, 0, false);
    return Status::Ok();
  }

 private:
  // Writes the output block of axis `axis` at `y` (returns the next write position); `offset`:
  // input element offset so far; `constant`: an outer axis already fell into the constant pad.
  float* fill(const float* x, float* y, size_t axis, size_t offset, bool constant) const {
    const auto& map = maps_[axis];
    const bool last = axis + 1 == out_dims_.size();
    for (long src : map) {
      const bool pad = constant || src < 0;
      const size_t at = pad ? offset : offset + size_t(src) * in_strides_[axis];
      if (last) {
        *y++ = pad ? value_ : x[at];
      } else {
        y = fill(x, y, axis + 1, at, pad);
      }
    }
    return y;
  }

  uint32_t in_, out_;
  Dims in_dims_, out_dims_;
  std::vector<std::vector<long>> maps_;
  std::vector<size_t> in_strides_;
  float value_;
};

Status create_pad(const OpView& v, KernelEnv&, KernelPtr& out) {
  QNN_RETURN_IF_ERROR(v.expect_arity(1, 1, 1));
  const TensorInfo& x = *v.inputs[0];
  QNN_RETURN_IF_ERROR(v.expect_float(x));
  ParamReader params(v);
  int64_t scheme = 0;
  float value = 0.f;
  std::vector<int64_t> pad;
  const uint32_t rank = uint32_t(x.rank());
  QNN_RETURN_IF_ERROR(params.scalar_int("scheme", DType::UINT_32, scheme));
  QNN_RETURN_IF_ERROR(params.optional_float("pad_constant_value", value));
  QNN_RETURN_IF_ERROR(params.tensor_int("pad_amount", DType::UINT_32, {rank, 2}, pad));
  if (scheme < kConstant || scheme > kEdge) {
    return v.fail(ErrorKind::NotSupported, "scheme %lld (0 constant, 1 symmetric, 2 reflect, 3 edge)",
                  static_cast<long long>(scheme));
  }
  Dims out_dims(x.dims);
  std::vector<std::vector<long>> maps(rank);
  for (uint32_t a = 0; a < rank; ++a) {
    const long n = long(x.dims[a]), before = long(pad[2 * a]), after = long(pad[2 * a + 1]);
    const long limit = scheme == kReflect ? n - 1 : n;  // a mirror reaches at most the far edge
    if (scheme != kConstant && (n == 0 || before > limit || after > limit)) {
      return v.fail(ErrorKind::InvalidProgram,
                    "padding %ld+%ld of axis %u of '%s' %s exceeds what scheme %lld can mirror", before, after, a,
                    x.name.c_str(), dims_to_string(x.dims).c_str(), static_cast<long long>(scheme));
    }
    out_dims[a] = uint32_t(n + before + after);
    for (long o = 0; o < long(out_dims[a]); ++o) maps[a].push_back(source_index(o, before, n, scheme));
  }
  QNN_RETURN_IF_ERROR(v.expect_output(0, out_dims, DType::FLOAT_32));
  return emplace_kernel<PadKernel>(out, x.id, v.outputs[0]->id, x.dims, out_dims, std::move(maps), value);
}

}  // namespace

QNN_REGISTER_KERNEL(Float, Pad, &create_pad);

}  // namespace engine
}  // namespace qnn_delegate
