// Elementwise ops: one templated binary kernel (with numpy broadcasting) and
// one templated unary kernel; one table row per op type.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "backends/qualcomm/runtime/engine/DataType.h"
#include "backends/qualcomm/runtime/engine/ThreadPool.h"
#include "backends/qualcomm/runtime/engine/kernels/KernelUtil.h"

namespace qnn_delegate {
namespace engine {
namespace {

// ---- binary ---------------------------------------------------------------
// Integer division by -1 wraps (two's complement) instead of overflowing (UB).
template <typename T>
using Wide =
    typename std::conditional<std::is_integral<T>::value, std::make_unsigned<T>, std::common_type<T>>::type::type;
// Integer add/sub/mul as QNN 2.51's HTP computes them (measured on SM8650, tests/ops/test_integer_arithmetic.py):
// in int32, saturated to [-2^31, 2^31 - 1] on overflow (torch wraps). An INT_64 tensor runs as
// INT_32 on QNN (narrowed by wrapping): the same on the low 32 bits of each operand, sign-extended.
template <typename T, typename F>
T int32_saturated(T a, T b, F f) {
  const int64_t r = f(int64_t(int32_t(uint32_t(a))), int64_t(int32_t(uint32_t(b))));  // |r| < 2^62
  return T(std::min<int64_t>(std::max<int64_t>(r, INT32_MIN), INT32_MAX));
}
struct AddOp {
  template <typename T>
  static T apply(T a, T b) {
    if constexpr (std::is_integral<T>::value)
      return int32_saturated(a, b, [](int64_t x, int64_t y) { return x + y; });
    else
      return a + b;
  }
};
struct SubOp {
  template <typename T>
  static T apply(T a, T b) {
    if constexpr (std::is_integral<T>::value)
      return int32_saturated(a, b, [](int64_t x, int64_t y) { return x - y; });
    else
      return a - b;
  }
};
struct MulOp {
  template <typename T>
  static T apply(T a, T b) {
    if constexpr (std::is_integral<T>::value)
      return int32_saturated(a, b, [](int64_t x, int64_t y) { return x * y; });
    else
      return a * b;
  }
};
struct DivOp {
  template <typename T>
  static T apply(T a, T b) {
    if constexpr (std::is_floating_point<T>::value) {
      return a / b;
    } else {
      if (b == 0) return T(0);  // no UB on integer division by zero
      if (b == T(-1)) return T(Wide<T>(0) - Wide<T>(a));
      return a / b;
    }
  }
};
// Float only (see kFloatOnly): pow(base, exponent), as std::pow.
struct PowOp {
  static constexpr bool kFloatOnly = true;
  template <typename T>
  static T apply(T a, T b) {
    return T(std::pow(a, b));
  }
};

// floor_divide / remainder as PyTorch computes them (fmod: a composition, builders/op_division.py). Integers: a zero
// divisor gives 0 (torch raises; no UB here), b == -1 wraps instead of overflowing.
struct FloorDivOp {
  template <typename T>
  static T apply(T a, T b) {
    if constexpr (std::is_floating_point<T>::value) {
      if (b == T(0)) return a / b;
      const T mod = std::fmod(a, b);
      T div = (a - mod) / b;
      if (mod != T(0) && ((b < T(0)) != (mod < T(0)))) div -= T(1);
      if (div == T(0)) return std::copysign(T(0), a / b);
      T floored = std::floor(div);
      if (div - floored > T(0.5)) floored += T(1);
      return floored;
    } else {
      if (b == 0) return T(0);
      if (b == T(-1)) return T(Wide<T>(0) - Wide<T>(a));
      T q = a / b;
      if (a % b != 0 && ((a < 0) != (b < 0))) q -= 1;
      return q;
    }
  }
};
// remainder: the sign of the divisor (Python's %).
struct ModOp {
  template <typename T>
  static T apply(T a, T b) {
    if constexpr (std::is_floating_point<T>::value) {
      T r = std::fmod(a, b);
      if (r != T(0) && ((b < T(0)) != (r < T(0)))) r += b;
      return r;
    } else {
      if (b == 0 || b == T(-1)) return T(0);
      T r = a % b;
      if (r != 0 && ((r < 0) != (b < 0))) r += b;
      return r;
    }
  }
};
// maximum / minimum propagate NaN (as torch.maximum / minimum).
struct MaxOp {
  template <typename T>
  static T apply(T a, T b) {
    return a != a ? a : (b != b ? b : (a < b ? b : a));
  }
};
struct MinOp {
  template <typename T>
  static T apply(T a, T b) {
    return a != a ? a : (b != b ? b : (b < a ? b : a));
  }
};

// Prelu(x, slope): x where x >= 0, else x * slope (slope broadcast to x).
struct PreluOp {
  static constexpr bool kFloatOnly = true;
  template <typename T>
  static T apply(T a, T b) {
    return a >= T(0) ? a : a * b;
  }
};

// Ops without a `kFloatOnly = true` member accept FLOAT_32, INT_32 and INT_64.
template <typename Op, typename = void>
struct IsFloatOnly : std::false_type {};
template <typename Op>
struct IsFloatOnly<Op, std::void_t<decltype(Op::kFloatOnly)>> : std::integral_constant<bool, Op::kFloatOnly> {};

template <typename Op, typename T>
class BinaryKernel final : public Kernel {
 public:
  BinaryKernel(const OpView& v, const Dims& out_dims)
      : a_(v.inputs[0]->id),
        b_(v.inputs[1]->id),
        out_(v.outputs[0]->id),
        dims_(out_dims),
        numel_(product(out_dims)),
        a_numel_(v.inputs[0]->numel),
        b_numel_(v.inputs[1]->numel),
        sa_(broadcast_strides(v.inputs[0]->dims, out_dims)),
        sb_(broadcast_strides(v.inputs[1]->dims, out_dims)) {
    if (!dims_.empty()) outer_.assign(dims_.begin(), dims_.end() - 1);
  }

  Status run(const RunContext& ctx) const override {
    const T* a = ctx.at<const T>(a_);
    const T* b = ctx.at<const T>(b_);
    T* out = ctx.at<T>(out_);
    apply_broadcast(a, b, out, numel_, a_numel_, b_numel_, dims_, sa_, sb_, outer_,
                    [](T x, T y) { return Op::apply(x, y); });
    return Status::Ok();
  }

 private:
  uint32_t a_, b_, out_;
  Dims dims_;
  size_t numel_, a_numel_, b_numel_;
  Index sa_, sb_;
  Dims outer_;  // all but the innermost axis (no allocation in run)
};

template <typename Op>
Status create_binary(const OpView& v, KernelEnv&, KernelPtr& out) {
  QNN_RETURN_IF_ERROR(v.expect_arity(2, 2, 1));
  const TensorInfo& a = *v.inputs[0];
  const TensorInfo& b = *v.inputs[1];
  if (a.dtype != b.dtype) {
    return v.fail(ErrorKind::InvalidProgram, "inputs '%s' (%s) and '%s' (%s) differ in data type", a.name.c_str(),
                  dtype_name(a.dtype), b.name.c_str(), dtype_name(b.dtype));
  }
  Dims out_dims;
  if (!broadcast_dims(a.dims, b.dims, out_dims)) {
    return v.fail(ErrorKind::InvalidProgram, "inputs '%s' %s and '%s' %s do not broadcast", a.name.c_str(),
                  dims_to_string(a.dims).c_str(), b.name.c_str(), dims_to_string(b.dims).c_str());
  }
  QNN_RETURN_IF_ERROR(v.expect_output(0, out_dims, a.dtype));
  if (IsFloatOnly<Op>::value && a.dtype != DType::FLOAT_32) {
    return v.fail(ErrorKind::NotSupported, "data type %s is not supported (FLOAT_32)", dtype_name(a.dtype));
  }
  switch (a.dtype) {
    case DType::FLOAT_32:
      return emplace_kernel<BinaryKernel<Op, float>>(out, v, out_dims);
    case DType::INT_32:
      return emplace_kernel<BinaryKernel<Op, int32_t>>(out, v, out_dims);
    case DType::INT_64:
      return emplace_kernel<BinaryKernel<Op, int64_t>>(out, v, out_dims);
    default:
      return v.fail(ErrorKind::NotSupported, "data type %s is not supported (FLOAT_32, INT_32, INT_64)",
                    dtype_name(a.dtype));
  }
}

// ---- unary ----------------------------------------------------------------
struct UnaryParams {
  float min_value = 0.f;
  float max_value = 0.f;
  float alpha = 1.f;
  float beta = 0.f;
};

struct ReluFn {
  static float apply(float x, const UnaryParams&) { return x > 0.f ? x : 0.f; }
};
struct ReluMinMaxFn {
  static float apply(float x, const UnaryParams& p) {
    return x < p.min_value ? p.min_value : (x > p.max_value ? p.max_value : x);
  }
};
struct SigmoidFn {
  static float apply(float x, const UnaryParams&) { return 1.f / (1.f + std::exp(-x)); }
};
struct TanhFn {
  static float apply(float x, const UnaryParams&) { return std::tanh(x); }
};
struct GeluFn {
  static float apply(float x, const UnaryParams&) { return 0.5f * x * (1.f + std::erf(x * 0.70710678118654752f)); }
};
struct HardSwishFn {
  static float apply(float x, const UnaryParams&) {
    const float r = x + 3.f;
    return x * (r < 0.f ? 0.f : (r > 6.f ? 6.f : r)) / 6.f;
  }
};

struct RsqrtFn {
  static float apply(float x, const UnaryParams&) { return 1.f / std::sqrt(x); }
};
struct SqrtFn {
  static float apply(float x, const UnaryParams&) { return std::sqrt(x); }
};
struct NegFn {
  static float apply(float x, const UnaryParams&) { return -x; }
};
struct AbsFn {
  static float apply(float x, const UnaryParams&) { return std::fabs(x); }
};
struct EluFn {
  static float apply(float x, const UnaryParams& p) { return x > 0.f ? x : p.alpha * std::expm1(x); }
};
// ElementWiseNeuron with operation HARD_SIGMOID (2), the only one emitted: clamp(alpha * x + beta, 0, 1).
constexpr int64_t kNeuronHardSigmoid = 2;
struct HardSigmoidFn {
  static float apply(float x, const UnaryParams& p) {
    const float y = std::fma(p.alpha, x, p.beta);
    return y != y ? y : (y < 0.f ? 0.f : (y > 1.f ? 1.f : y));
  }
};
struct ExpFn {
  static float apply(float x, const UnaryParams&) { return std::exp(x); }
};
struct LogFn {
  static float apply(float x, const UnaryParams&) { return std::log(x); }
};
struct SinFn {
  static float apply(float x, const UnaryParams&) { return std::sin(x); }
};
struct CosFn {
  static float apply(float x, const UnaryParams&) { return std::cos(x); }
};
struct AsinFn {
  static float apply(float x, const UnaryParams&) { return std::asin(x); }
};
struct AtanFn {
  static float apply(float x, const UnaryParams&) { return std::atan(x); }
};
struct CeilFn {
  static float apply(float x, const UnaryParams&) { return std::ceil(x); }
};
struct FloorFn {
  static float apply(float x, const UnaryParams&) { return std::floor(x); }
};
// Half to even, as torch.round (the default rounding mode of nearbyint).
struct RoundFn {
  static float apply(float x, const UnaryParams&) { return std::nearbyint(x); }
};
// As torch.sign: 0 for zeros of either sign and for NaN.
struct SignFn {
  static float apply(float x, const UnaryParams&) { return x > 0.f ? 1.f : (x < 0.f ? -1.f : 0.f); }
};

template <typename Fn>
class UnaryKernel final : public Kernel {
 public:
  UnaryKernel(const OpView& v, UnaryParams p, bool round_half)
      : in_(v.inputs[0]->id), out_(v.outputs[0]->id), numel_(v.inputs[0]->numel), p_(p), round_(round_half) {}
  bool rounds_fp16_outputs() const override { return round_; }

  // Chunks of kChunk elements (fp16: rounded while they are in L1), split over the pool when
  // there are enough of them (each element is computed alone: the same bits on any split).
  Status run(const RunContext& ctx) const override {
    Job job{this, ctx.at<const float>(in_), ctx.at<float>(out_)};
    const size_t chunks = (numel_ + kChunk - 1) / kChunk;
    if (numel_ < kMinParallelElems) {
      run_chunks(&job, 0, chunks);
    } else {
      ThreadPool::instance().parallel_for(chunks, &run_chunks, &job);
    }
    return Status::Ok();
  }

 private:
  static constexpr size_t kChunk = 512;
  static constexpr size_t kMinParallelElems = size_t(1) << 14;
  struct Job {
    const UnaryKernel* k;
    const float* in;
    float* out;
  };
  static void run_chunks(void* ctx, size_t begin, size_t end) {
    const Job& j = *static_cast<const Job*>(ctx);
    const UnaryKernel& k = *j.k;
    for (size_t c = begin; c < end; ++c) {
      const size_t i0 = c * kChunk, i1 = std::min(k.numel_, i0 + kChunk);
      for (size_t i = i0; i < i1; ++i) j.out[i] = Fn::apply(j.in[i], k.p_);
      if (k.round_) round_to_half_inplace(j.out + i0, i1 - i0);
    }
  }

  uint32_t in_, out_;
  size_t numel_;
  UnaryParams p_;
  bool round_;
};

template <typename Fn>
Status create_unary(const OpView& v, KernelEnv& env, KernelPtr& out) {
  QNN_RETURN_IF_ERROR(v.expect_arity(1, 1, 1));
  QNN_RETURN_IF_ERROR(v.expect_float(*v.inputs[0]));
  QNN_RETURN_IF_ERROR(v.expect_output(0, v.inputs[0]->dims, DType::FLOAT_32));
  UnaryParams p;
  if (std::is_same<Fn, ReluMinMaxFn>::value) {
    ParamReader params(v);
    QNN_RETURN_IF_ERROR(params.scalar_float("min_value", p.min_value));
    QNN_RETURN_IF_ERROR(params.scalar_float("max_value", p.max_value));
    if (!(p.min_value <= p.max_value)) {
      return v.fail(ErrorKind::InvalidProgram, "min_value %g > max_value %g", p.min_value, p.max_value);
    }
  }
  if (std::is_same<Fn, EluFn>::value) {
    ParamReader params(v);
    QNN_RETURN_IF_ERROR(params.scalar_float("alpha", p.alpha));
  }
  if (std::is_same<Fn, HardSigmoidFn>::value) {
    ParamReader params(v);
    int64_t operation = -1;
    QNN_RETURN_IF_ERROR(params.scalar_int("operation", DType::UINT_32, operation));
    if (operation != kNeuronHardSigmoid) {
      return v.fail(ErrorKind::NotSupported, "ElementWiseNeuron operation %lld is not supported (2: HARD_SIGMOID)",
                    static_cast<long long>(operation));
    }
    QNN_RETURN_IF_ERROR(params.scalar_float("alpha", p.alpha));
    QNN_RETURN_IF_ERROR(params.scalar_float("beta", p.beta));
  }
  return emplace_kernel<UnaryKernel<Fn>>(out, v, p, env.round_fp16_outputs);
}

}  // namespace

QNN_REGISTER_KERNEL(Float, ElementWiseAdd, &create_binary<AddOp>);
QNN_REGISTER_KERNEL(Float, ElementWiseSubtract, &create_binary<SubOp>);
QNN_REGISTER_KERNEL(Float, ElementWiseMultiply, &create_binary<MulOp>);
QNN_REGISTER_KERNEL(Float, ElementWiseDivide, &create_binary<DivOp>);
QNN_REGISTER_KERNEL(Float, ElementWisePower, &create_binary<PowOp>);
QNN_REGISTER_KERNEL(Float, ElementWiseFloorDiv, &create_binary<FloorDivOp>);
QNN_REGISTER_KERNEL(Float, ElementWiseMod, &create_binary<ModOp>);
QNN_REGISTER_KERNEL(Float, ElementWiseMaximum, &create_binary<MaxOp>);
QNN_REGISTER_KERNEL(Float, ElementWiseMinimum, &create_binary<MinOp>);
QNN_REGISTER_KERNEL(Float, Prelu, &create_binary<PreluOp>);
QNN_REGISTER_KERNEL(Float, Relu, &create_unary<ReluFn>);
QNN_REGISTER_KERNEL(Float, ReluMinMax, &create_unary<ReluMinMaxFn>);
QNN_REGISTER_KERNEL(Float, Sigmoid, &create_unary<SigmoidFn>);
QNN_REGISTER_KERNEL(Float, Tanh, &create_unary<TanhFn>);
QNN_REGISTER_KERNEL(Float, Gelu, &create_unary<GeluFn>);
QNN_REGISTER_KERNEL(Float, HardSwish, &create_unary<HardSwishFn>);
QNN_REGISTER_KERNEL(Float, ElementWiseRsqrt, &create_unary<RsqrtFn>);
QNN_REGISTER_KERNEL(Float, ElementWiseSquareRoot, &create_unary<SqrtFn>);
QNN_REGISTER_KERNEL(Float, ElementWiseNeg, &create_unary<NegFn>);
QNN_REGISTER_KERNEL(Float, ElementWiseAbs, &create_unary<AbsFn>);
QNN_REGISTER_KERNEL(Float, ElementWiseExp, &create_unary<ExpFn>);
QNN_REGISTER_KERNEL(Float, ElementWiseLog, &create_unary<LogFn>);
QNN_REGISTER_KERNEL(Float, ElementWiseSin, &create_unary<SinFn>);
QNN_REGISTER_KERNEL(Float, ElementWiseCos, &create_unary<CosFn>);
QNN_REGISTER_KERNEL(Float, ElementWiseAsin, &create_unary<AsinFn>);
QNN_REGISTER_KERNEL(Float, ElementWiseAtan, &create_unary<AtanFn>);
QNN_REGISTER_KERNEL(Float, ElementWiseCeil, &create_unary<CeilFn>);
QNN_REGISTER_KERNEL(Float, ElementWiseFloor, &create_unary<FloorFn>);
QNN_REGISTER_KERNEL(Float, ElementWiseRound, &create_unary<RoundFn>);
QNN_REGISTER_KERNEL(Float, ElementWiseSign, &create_unary<SignFn>);
QNN_REGISTER_KERNEL(Float, Elu, &create_unary<EluFn>);
QNN_REGISTER_KERNEL(Float, ElementWiseNeuron, &create_unary<HardSigmoidFn>);

}  // namespace engine
}  // namespace qnn_delegate
