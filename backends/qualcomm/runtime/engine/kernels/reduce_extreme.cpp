// ReduceMax / ReduceMin over a set of axes (FLOAT_32: NaN propagates, as torch.amax;
// BOOL_8: any / all) and Argmax / Argmin along one axis (INT_32 indices: the first extreme,
// NaN counts as the extreme, as in PyTorch).
#include <cmath>
#include <limits>

#include "backends/qualcomm/runtime/engine/kernels/ReduceGeometry.h"

namespace qnn_delegate {
namespace engine {
namespace {

// ---- ReduceMax / ReduceMin ----------------------------------------------------

struct MaxOf {
  static float init(float) { return -std::numeric_limits<float>::infinity(); }
  static uint8_t init(uint8_t) { return 0; }
  static float pick(float acc, float x) { return (std::isnan(x) || x > acc) ? x : acc; }
  static uint8_t pick(uint8_t acc, uint8_t x) { return (acc | x) ? 1 : 0; }
};

struct MinOf {
  static float init(float) { return std::numeric_limits<float>::infinity(); }
  static uint8_t init(uint8_t) { return 1; }
  static float pick(float acc, float x) { return (std::isnan(x) || x < acc) ? x : acc; }
  static uint8_t pick(uint8_t acc, uint8_t x) { return (acc && x) ? 1 : 0; }
};

// Walks the input in order (ReduceGeometry::for_each_run).
template <typename T, typename Op>
class ExtremeKernel final : public Kernel {
 public:
  ExtremeKernel(uint32_t in, uint32_t out, const ReduceGeometry& g) : in_(in), out_(out), g_(g) {}
  Status run(const RunContext& c) const override {
    const T* x = c.at<const T>(in_);
    T* y = c.at<T>(out_);
    for (size_t k = 0; k < g_.out_numel; ++k) y[k] = Op::init(T());
    g_.for_each_run([x, y](size_t i, size_t o, size_t n, size_t stride) {
      for (size_t j = 0; j < n; ++j) {
        T& acc = y[o + j * stride];
        acc = Op::pick(acc, x[i + j]);
      }
    });
    return Status::Ok();
  }

 private:
  uint32_t in_, out_;
  ReduceGeometry g_;
};

template <typename Op>
Status create_extreme(const OpView& v, KernelEnv&, KernelPtr& out) {
  QNN_RETURN_IF_ERROR(v.expect_arity(1, 1, 1));
  const TensorInfo& x = *v.inputs[0];
  if (x.dtype != DType::FLOAT_32 && x.dtype != DType::BOOL_8) {
    return v.fail(ErrorKind::NotSupported, "input '%s' must be FLOAT_32 or BOOL_8", x.name.c_str());
  }
  ReduceGeometry g;
  QNN_RETURN_IF_ERROR(reduce_geometry(v, x, true, g));
  QNN_RETURN_IF_ERROR(v.expect_output(0, g.out_dims, x.dtype));
  if (x.dtype == DType::BOOL_8) return emplace_kernel<ExtremeKernel<uint8_t, Op>>(out, x.id, v.outputs[0]->id, g);
  return emplace_kernel<ExtremeKernel<float, Op>>(out, x.id, v.outputs[0]->id, g);
}

// ---- shared by the single-axis ops: [outer, n, inner] around `axis` -----------

struct AxisSplit {
  size_t outer = 1, n = 1, inner = 1;
};

Status read_axis(const OpView& v, const TensorInfo& x, AxisSplit& split, int64_t& axis) {
  QNN_RETURN_IF_ERROR(ParamReader(v).scalar_int("axis", DType::UINT_32, axis));
  if (axis < 0 || size_t(axis) >= x.rank()) {
    return v.fail(ErrorKind::InvalidProgram, "axis %lld is out of range for input '%s' %s",
                  static_cast<long long>(axis), x.name.c_str(), dims_to_string(x.dims).c_str());
  }
  split.outer = product(x.dims, 0, size_t(axis));
  split.n = x.dims[axis];
  split.inner = product(x.dims, size_t(axis) + 1);
  return Status::Ok();
}

// ---- Argmax / Argmin ---------------------------------------------------------

// Whether x replaces the current extreme `best` (NaN wins and stays; ties keep the first).
template <bool kMax>
inline bool beats(float x, float best) {
  if (std::isnan(best)) return false;
  if (std::isnan(x)) return true;
  return kMax ? x > best : x < best;
}

template <bool kMax>
class ArgExtremeKernel final : public Kernel {
 public:
  ArgExtremeKernel(uint32_t in, uint32_t out, const AxisSplit& s) : in_(in), out_(out), s_(s) {}
  Status run(const RunContext& c) const override {
    const float* x = c.at<const float>(in_);
    int32_t* y = c.at<int32_t>(out_);
    for (size_t o = 0; o < s_.outer; ++o) {
      const float* block = x + o * s_.n * s_.inner;
      for (size_t i = 0; i < s_.inner; ++i) {
        int32_t best = 0;
        for (size_t j = 1; j < s_.n; ++j) {
          if (beats<kMax>(block[j * s_.inner + i], block[size_t(best) * s_.inner + i])) best = int32_t(j);
        }
        y[o * s_.inner + i] = best;
      }
    }
    return Status::Ok();
  }

 private:
  uint32_t in_, out_;
  AxisSplit s_;
};

template <bool kMax>
Status create_arg_extreme(const OpView& v, KernelEnv&, KernelPtr& out) {
  QNN_RETURN_IF_ERROR(v.expect_arity(1, 1, 1));
  const TensorInfo& x = *v.inputs[0];
  QNN_RETURN_IF_ERROR(v.expect_float(x));
  AxisSplit split;
  int64_t axis = 0;
  QNN_RETURN_IF_ERROR(read_axis(v, x, split, axis));
  if (split.n == 0) {
    return v.fail(ErrorKind::InvalidProgram, "axis %lld of input '%s' %s is empty", static_cast<long long>(axis),
                  x.name.c_str(), dims_to_string(x.dims).c_str());
  }
  bool keep_dims = false;
  QNN_RETURN_IF_ERROR(ParamReader(v).optional_bool("keep_dims", keep_dims));
  Dims out_dims;
  for (size_t d = 0; d < x.rank(); ++d) {
    if (d != size_t(axis))
      out_dims.push_back(x.dims[d]);
    else if (keep_dims)
      out_dims.push_back(1);
  }
  QNN_RETURN_IF_ERROR(v.expect_output(0, out_dims, DType::INT_32));
  return emplace_kernel<ArgExtremeKernel<kMax>>(out, x.id, v.outputs[0]->id, split);
}

}  // namespace

QNN_REGISTER_KERNEL(Float, ReduceMax, &create_extreme<MaxOf>);
QNN_REGISTER_KERNEL(Float, ReduceMin, &create_extreme<MinOf>);
QNN_REGISTER_KERNEL(Float, Argmax, &create_arg_extreme<true>);
QNN_REGISTER_KERNEL(Float, Argmin, &create_arg_extreme<false>);

}  // namespace engine
}  // namespace qnn_delegate
