// CumulativeSum along one axis: y[..., i, ...] = sum of x[..., j, ...] over j <= i (exclusive:
// j < i; reverse: j >= i / j > i). FLOAT_32 (quantized graphs run it on dequantized values:
// QuantDispatch), INT_32 and INT_64 (wrapping as PyTorch's int64 cumsum).
#include <cstdint>
#include <type_traits>

#include "backends/qualcomm/runtime/engine/kernels/KernelUtil.h"

namespace qnn_delegate {
namespace engine {
namespace {

struct CumsumShape {
  size_t outer = 1, n = 1, inner = 1;
  bool exclusive = false, reverse = false;
};

template <typename T>
class CumsumKernel final : public Kernel {
 public:
  CumsumKernel(uint32_t in, uint32_t out, const CumsumShape& s) : in_(in), out_(out), s_(s) {}
  Status run(const RunContext& c) const override {
    const T* x = c.at<const T>(in_);
    T* y = c.at<T>(out_);
    for (size_t o = 0; o < s_.outer; ++o) {
      const size_t base = o * s_.n * s_.inner;
      for (size_t i = 0; i < s_.inner; ++i) run_line(x + base + i, y + base + i);
    }
    return Status::Ok();
  }

 private:
  // One line of n elements `inner` apart (x and y may alias: each x is read before y is written).
  void run_line(const T* x, T* y) const {
    T acc = T(0);
    for (size_t k = 0; k < s_.n; ++k) {
      const size_t j = (s_.reverse ? s_.n - 1 - k : k) * s_.inner;
      const T value = x[j];
      if (!s_.exclusive) acc = add(acc, value);
      y[j] = acc;
      if (s_.exclusive) acc = add(acc, value);
    }
  }
  static T add(T a, T b) {
    if constexpr (std::is_integral<T>::value) {
      using U = typename std::make_unsigned<T>::type;
      return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));  // wraps, no UB
    } else {
      return a + b;
    }
  }

  uint32_t in_, out_;
  CumsumShape s_;
};

Status create_cumsum(const OpView& v, KernelEnv&, KernelPtr& out) {
  QNN_RETURN_IF_ERROR(v.expect_arity(1, 1, 1));
  const TensorInfo& x = *v.inputs[0];
  if (x.dtype != DType::FLOAT_32 && x.dtype != DType::INT_32 && x.dtype != DType::INT_64) {
    return v.fail(ErrorKind::NotSupported, "input '%s' has data type %s (FLOAT_32, INT_32 or INT_64 needed)",
                  x.name.c_str(), dtype_name(x.dtype));
  }
  ParamReader params(v);
  int64_t axis = 0;
  CumsumShape s;
  QNN_RETURN_IF_ERROR(params.scalar_int("axis", DType::UINT_32, axis));
  QNN_RETURN_IF_ERROR(params.optional_bool("exclusive", s.exclusive));
  QNN_RETURN_IF_ERROR(params.optional_bool("reverse", s.reverse));
  if (axis < 0 || size_t(axis) >= x.rank()) {
    return v.fail(ErrorKind::InvalidProgram, "axis %lld is out of range for input '%s' %s",
                  static_cast<long long>(axis), x.name.c_str(), dims_to_string(x.dims).c_str());
  }
  s.outer = product(x.dims, 0, size_t(axis));
  s.n = x.dims[axis];
  s.inner = product(x.dims, size_t(axis) + 1);
  QNN_RETURN_IF_ERROR(v.expect_output(0, x.dims, x.dtype));
  const uint32_t y = v.outputs[0]->id;
  if (x.dtype == DType::INT_32) return emplace_kernel<CumsumKernel<int32_t>>(out, x.id, y, s);
  if (x.dtype == DType::INT_64) return emplace_kernel<CumsumKernel<int64_t>>(out, x.id, y, s);
  return emplace_kernel<CumsumKernel<float>>(out, x.id, y, s);
}

}  // namespace

QNN_REGISTER_KERNEL(Float, CumulativeSum, &create_cumsum);

}  // namespace engine
}  // namespace qnn_delegate
