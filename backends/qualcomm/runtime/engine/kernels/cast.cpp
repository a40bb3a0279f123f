// Cast between FLOAT_32, INT_32, INT_64, BOOL_8, UINT_8 (and from INT_16) (saturating, NaN -> 0:
// no undefined float -> int conversions), and FLOAT_16 <-> FLOAT_32 (a float16 graph input /
// output; round to nearest even, inf and NaN kept). A per-tensor quantized activation cast to an integer
// type, as QNN HTP does (measured on QNN 2.51): uint8 gives its codes; uint16 to INT_32 its real
// value rounded to the nearest integer, halves to even (HTP's op validation refuses that Cast,
// a payload built without it runs so). To FLOAT_32 it is dequantized (QuantDispatch's wrapped
// path).
#include <cmath>
#include <limits>
#include <type_traits>

#include "backends/qualcomm/runtime/engine/Quant.h"
#include "backends/qualcomm/runtime/engine/kernels/KernelUtil.h"

namespace qnn_delegate {
namespace engine {
namespace {

struct Bool8 {
  uint8_t v;
};

template <typename D, typename S>
inline D convert(S s) {
  if constexpr (std::is_same<D, Bool8>::value) {
    return Bool8{uint8_t(s != S(0) ? 1 : 0)};
  } else if constexpr (std::is_floating_point<S>::value && std::is_integral<D>::value) {
    if (std::isnan(s)) return D(0);
    if (s <= S(std::numeric_limits<D>::min())) return std::numeric_limits<D>::min();
    if (s >= S(std::numeric_limits<D>::max())) return std::numeric_limits<D>::max();
    return D(s);
  } else if constexpr (std::is_integral<S>::value && std::is_integral<D>::value) {
    if constexpr (std::is_signed<S>::value) {
      if (s < S(0) && !std::is_signed<D>::value) return D(0);
    }
    using W = long double;
    const W w = W(s);
    if (w < W(std::numeric_limits<D>::min())) return std::numeric_limits<D>::min();
    if (w > W(std::numeric_limits<D>::max())) return std::numeric_limits<D>::max();
    return D(s);
  } else {
    return D(s);
  }
}

template <typename D, typename S>
class CastKernel final : public Kernel {
 public:
  CastKernel(uint32_t in, uint32_t out, size_t n) : in_(in), out_(out), n_(n) {}
  Status run(const RunContext& c) const override {
    const S* x = c.at<const S>(in_);
    D* y = c.at<D>(out_);
    for (size_t i = 0; i < n_; ++i) y[i] = convert<D>(load(x[i]));
    return Status::Ok();
  }

 private:
  template <typename T>
  static auto load(T v) {
    return v;
  }
  static uint8_t load(Bool8 v) { return v.v; }
  uint32_t in_, out_;
  size_t n_;
};

template <typename S>
Status emplace_for_dst(const OpView& v, DType dst, KernelPtr& out) {
  const uint32_t in = v.inputs[0]->id, o = v.outputs[0]->id;
  const size_t n = v.inputs[0]->numel;
  if constexpr (std::is_same<S, float>::value) {
    if (dst == DType::FLOAT_16) return emplace_kernel<CastKernel<_Float16, float>>(out, in, o, n);
  }
  switch (dst) {
    case DType::FLOAT_32:
      return emplace_kernel<CastKernel<float, S>>(out, in, o, n);
    case DType::INT_32:
      return emplace_kernel<CastKernel<int32_t, S>>(out, in, o, n);
    case DType::INT_64:
      return emplace_kernel<CastKernel<int64_t, S>>(out, in, o, n);
    case DType::UINT_8:
      return emplace_kernel<CastKernel<uint8_t, S>>(out, in, o, n);
    case DType::BOOL_8:
      return emplace_kernel<CastKernel<Bool8, S>>(out, in, o, n);
    default:
      return v.fail(ErrorKind::NotSupported, "cast to %s is not supported", dtype_name(dst));
  }
}

Status create_cast(const OpView& v, KernelEnv&, KernelPtr& out) {
  QNN_RETURN_IF_ERROR(v.expect_arity(1, 1, 1));
  const TensorInfo& x = *v.inputs[0];
  const DType dst = v.outputs[0]->dtype;
  QNN_RETURN_IF_ERROR(v.expect_output(0, x.dims, dst));
  switch (x.dtype) {
    case DType::FLOAT_16:
      if (dst != DType::FLOAT_32) return v.fail(ErrorKind::NotSupported, "cast from FLOAT_16 to %s", dtype_name(dst));
      return emplace_kernel<CastKernel<float, _Float16>>(out, x.id, v.outputs[0]->id, x.numel);
    case DType::FLOAT_32:
      return emplace_for_dst<float>(v, dst, out);
    case DType::INT_32:
      return emplace_for_dst<int32_t>(v, dst, out);
    case DType::INT_64:
      return emplace_for_dst<int64_t>(v, dst, out);
    case DType::INT_16:  // the bits of a float16 graph input (isinf / isnan)
      return emplace_for_dst<int16_t>(v, dst, out);
    case DType::UINT_8:
      return emplace_for_dst<uint8_t>(v, dst, out);
    case DType::BOOL_8:
      return emplace_for_dst<Bool8>(v, dst, out);
    default:
      return v.fail(ErrorKind::NotSupported, "cast from %s is not supported", dtype_name(x.dtype));
  }
}

// uint16 real values rounded to the nearest integer, halves to even, as int32.
class RoundedCastKernel final : public Kernel {
 public:
  RoundedCastKernel(uint32_t in, uint32_t out, size_t n, const QuantParams& p) : in_(in), out_(out), n_(n), p_(p) {}
  Status run(const RunContext& c) const override {
    const uint16_t* x = c.at<const uint16_t>(in_);
    int32_t* y = c.at<int32_t>(out_);
    for (size_t i = 0; i < n_; ++i) {
      y[i] = convert<int32_t>(std::nearbyint(double(int32_t(x[i]) + p_.offset) * double(p_.scale)));
    }
    return Status::Ok();
  }

 private:
  uint32_t in_, out_;
  size_t n_;
  QuantParams p_;
};

// Quantized input to an integer output (uint8: codes; uint16 to INT_32: rounded values); else
// `out` stays empty (the float kernel on dequantized values).
Status create_quant_cast(const OpView& v, KernelEnv&, KernelPtr& out) {
  QNN_RETURN_IF_ERROR(v.expect_arity(1, 1, 1));
  const TensorInfo& x = *v.inputs[0];
  const DType dst = v.outputs[0]->dtype;
  if (!is_quant_activation(x) || v.outputs[0]->is_quantized()) return Status::Ok();
  QNN_RETURN_IF_ERROR(v.expect_output(0, x.dims, dst));
  if (x.dtype == DType::UFIXED_POINT_8 && dst != DType::FLOAT_32) return emplace_for_dst<uint8_t>(v, dst, out);
  if (x.dtype == DType::UFIXED_POINT_16 && dst == DType::INT_32) {
    return emplace_kernel<RoundedCastKernel>(out, x.id, v.outputs[0]->id, x.numel, quant_params_of(x));
  }
  return Status::Ok();
}

}  // namespace

QNN_REGISTER_KERNEL(Float, Cast, &create_cast);
QNN_REGISTER_KERNEL(Quant, Cast, &create_quant_cast);

}  // namespace engine
}  // namespace qnn_delegate
