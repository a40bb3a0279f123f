// Comparisons, logic and select: ops whose inputs and outputs differ in data type.
// - ElementWiseEqual / NotEqual / Less / LessEqual / Greater / GreaterEqual: two inputs of one
//   data type (FLOAT_32, INT_32, INT_64, BOOL_8), numpy broadcasting, BOOL_8 output (NaN: every
//   comparison false but NotEqual, as IEEE and torch);
// - ElementWiseAnd / Or / Xor (BOOL_8, broadcasting) and ElementWiseNot (BOOL_8);
// - ElementWiseSelect: condition BOOL_8, then / else of one data type (FLOAT_32, INT_32, INT_64,
//   BOOL_8), all three broadcast to the output;
// - IsNan: FLOAT_32 -> BOOL_8 (isinf / isnan of a graph input are INT_32 comparisons of its
//   bits instead, builders/op_logic.py ClassifyBuilder: QNN 2.51 HTP cannot finalize IsInf).
// Quantized inputs run through QuantDispatch's float path (dequantized values compared; the
// BOOL_8 output is not quantized).
#include <cmath>
#include <cstring>
#include <type_traits>

#include "backends/qualcomm/runtime/engine/kernels/KernelUtil.h"

namespace qnn_delegate {
namespace engine {
namespace {

struct EqualOp {
  template <typename T>
  static bool apply(T a, T b) {
    return a == b;
  }
};
struct NotEqualOp {
  template <typename T>
  static bool apply(T a, T b) {
    return a != b;
  }
};
struct LessOp {
  template <typename T>
  static bool apply(T a, T b) {
    return a < b;
  }
};
struct LessEqualOp {
  template <typename T>
  static bool apply(T a, T b) {
    return a <= b;
  }
};
struct GreaterOp {
  template <typename T>
  static bool apply(T a, T b) {
    return a > b;
  }
};
struct GreaterEqualOp {
  template <typename T>
  static bool apply(T a, T b) {
    return a >= b;
  }
};
// Logical ops read any nonzero byte as true and write 0 / 1.
struct AndOp {
  template <typename T>
  static bool apply(T a, T b) {
    return a != 0 && b != 0;
  }
};
struct OrOp {
  template <typename T>
  static bool apply(T a, T b) {
    return a != 0 || b != 0;
  }
};
struct XorOp {
  template <typename T>
  static bool apply(T a, T b) {
    return (a != 0) != (b != 0);
  }
};

// Broadcast walk shared by the kernels below: `dims` is the output's, strides per input.
class Broadcast {
 public:
  Broadcast() = default;
  Broadcast(const Dims& out_dims, const std::vector<const TensorInfo*>& inputs)
      : dims_(out_dims), numel_(product(out_dims)) {
    for (size_t i = 0; i < inputs.size() && i < 3; ++i) {
      strides_[i] = broadcast_strides(inputs[i]->dims, out_dims);
      full_[i] = inputs[i]->numel == numel_;
    }
    count_ = inputs.size();
  }

  // f(out_index, offset_0, offset_1, offset_2) for every output element, in order.
  template <typename F>
  void for_each(F f) const {
    if (numel_ == 0) return;
    bool all_full = true;
    for (size_t i = 0; i < count_; ++i) all_full = all_full && full_[i];
    if (all_full) {
      for (size_t o = 0; o < numel_; ++o) f(o, o, o, o);
      return;
    }
    Index idx{};
    size_t o = 0;
    do {
      size_t off[3] = {0, 0, 0};
      for (size_t d = 0; d < dims_.size(); ++d) {
        for (size_t i = 0; i < count_; ++i) off[i] += idx[d] * strides_[i][d];
      }
      f(o++, off[0], off[1], off[2]);
    } while (next_index(idx, dims_));
  }

  size_t numel() const { return numel_; }

 private:
  Dims dims_;
  size_t numel_ = 0;
  size_t count_ = 0;
  Index strides_[3] = {};
  bool full_[3] = {false, false, false};
};

Status broadcast_output(const OpView& v, const std::vector<const TensorInfo*>& inputs, Dims& out) {
  out = inputs[0]->dims;
  for (size_t i = 1; i < inputs.size(); ++i) {
    Dims next;
    if (!broadcast_dims(out, inputs[i]->dims, next)) {
      return v.fail(ErrorKind::InvalidProgram, "input '%s' %s does not broadcast with %s", inputs[i]->name.c_str(),
                    dims_to_string(inputs[i]->dims).c_str(), dims_to_string(out).c_str());
    }
    out = next;
  }
  if (out.size() > kMaxDims) {
    return v.fail(ErrorKind::NotSupported, "rank %zu exceeds %zu", out.size(), kMaxDims);
  }
  return Status::Ok();
}

// ---- comparisons and binary logic: T x T -> BOOL_8 ----------------------------------
template <typename Op, typename T>
class PredicateKernel final : public Kernel {
 public:
  PredicateKernel(const OpView& v, const Dims& out_dims)
      : a_(v.inputs[0]->id), b_(v.inputs[1]->id), out_(v.outputs[0]->id), walk_(out_dims, {v.inputs[0], v.inputs[1]}) {}

  Status run(const RunContext& ctx) const override {
    const T* a = ctx.at<const T>(a_);
    const T* b = ctx.at<const T>(b_);
    uint8_t* out = ctx.at<uint8_t>(out_);
    walk_.for_each([&](size_t o, size_t ia, size_t ib, size_t) { out[o] = Op::apply(a[ia], b[ib]) ? 1 : 0; });
    return Status::Ok();
  }

 private:
  uint32_t a_, b_, out_;
  Broadcast walk_;
};

Status check_two_same_dtype(const OpView& v, Dims& out_dims) {
  QNN_RETURN_IF_ERROR(v.expect_arity(2, 2, 1));
  const TensorInfo& a = *v.inputs[0];
  const TensorInfo& b = *v.inputs[1];
  if (a.dtype != b.dtype) {
    return v.fail(ErrorKind::InvalidProgram, "inputs '%s' (%s) and '%s' (%s) differ in data type", a.name.c_str(),
                  dtype_name(a.dtype), b.name.c_str(), dtype_name(b.dtype));
  }
  QNN_RETURN_IF_ERROR(broadcast_output(v, {&a, &b}, out_dims));
  return v.expect_output(0, out_dims, DType::BOOL_8);
}

template <typename Op>
Status create_compare(const OpView& v, KernelEnv&, KernelPtr& out) {
  Dims out_dims;
  QNN_RETURN_IF_ERROR(check_two_same_dtype(v, out_dims));
  switch (v.inputs[0]->dtype) {
    case DType::FLOAT_32:
      return emplace_kernel<PredicateKernel<Op, float>>(out, v, out_dims);
    case DType::INT_32:
      return emplace_kernel<PredicateKernel<Op, int32_t>>(out, v, out_dims);
    case DType::INT_64:
      return emplace_kernel<PredicateKernel<Op, int64_t>>(out, v, out_dims);
    case DType::BOOL_8:
      return emplace_kernel<PredicateKernel<Op, uint8_t>>(out, v, out_dims);
    default:
      return v.fail(ErrorKind::NotSupported, "data type %s is not supported (FLOAT_32, INT_32, INT_64, BOOL_8)",
                    dtype_name(v.inputs[0]->dtype));
  }
}

template <typename Op>
Status create_logical(const OpView& v, KernelEnv&, KernelPtr& out) {
  Dims out_dims;
  QNN_RETURN_IF_ERROR(check_two_same_dtype(v, out_dims));
  if (v.inputs[0]->dtype != DType::BOOL_8) {
    return v.fail(ErrorKind::NotSupported, "data type %s is not supported (BOOL_8)", dtype_name(v.inputs[0]->dtype));
  }
  return emplace_kernel<PredicateKernel<Op, uint8_t>>(out, v, out_dims);
}

// ---- ElementWiseNot ----------------------------------------------------------------
class NotKernel final : public Kernel {
 public:
  explicit NotKernel(const OpView& v) : in_(v.inputs[0]->id), out_(v.outputs[0]->id), numel_(v.inputs[0]->numel) {}
  Status run(const RunContext& ctx) const override {
    const uint8_t* in = ctx.at<const uint8_t>(in_);
    uint8_t* out = ctx.at<uint8_t>(out_);
    for (size_t i = 0; i < numel_; ++i) out[i] = in[i] == 0 ? 1 : 0;
    return Status::Ok();
  }

 private:
  uint32_t in_, out_;
  size_t numel_;
};

Status create_not(const OpView& v, KernelEnv&, KernelPtr& out) {
  QNN_RETURN_IF_ERROR(v.expect_arity(1, 1, 1));
  if (v.inputs[0]->dtype != DType::BOOL_8) {
    return v.fail(ErrorKind::NotSupported, "data type %s is not supported (BOOL_8)", dtype_name(v.inputs[0]->dtype));
  }
  QNN_RETURN_IF_ERROR(v.expect_output(0, v.inputs[0]->dims, DType::BOOL_8));
  return emplace_kernel<NotKernel>(out, v);
}

// ---- ElementWiseSelect -------------------------------------------------------------
template <typename T>
class SelectKernel final : public Kernel {
 public:
  SelectKernel(const OpView& v, const Dims& out_dims)
      : c_(v.inputs[0]->id),
        a_(v.inputs[1]->id),
        b_(v.inputs[2]->id),
        out_(v.outputs[0]->id),
        walk_(out_dims, {v.inputs[0], v.inputs[1], v.inputs[2]}) {}

  Status run(const RunContext& ctx) const override {
    const uint8_t* c = ctx.at<const uint8_t>(c_);
    const T* a = ctx.at<const T>(a_);
    const T* b = ctx.at<const T>(b_);
    T* out = ctx.at<T>(out_);
    walk_.for_each([&](size_t o, size_t ic, size_t ia, size_t ib) { out[o] = c[ic] != 0 ? a[ia] : b[ib]; });
    return Status::Ok();
  }

 private:
  uint32_t c_, a_, b_, out_;
  Broadcast walk_;
};

Status create_select(const OpView& v, KernelEnv&, KernelPtr& out) {
  QNN_RETURN_IF_ERROR(v.expect_arity(3, 3, 1));
  const TensorInfo& c = *v.inputs[0];
  const TensorInfo& a = *v.inputs[1];
  const TensorInfo& b = *v.inputs[2];
  if (c.dtype != DType::BOOL_8) {
    return v.fail(ErrorKind::InvalidProgram, "condition '%s' is %s (BOOL_8)", c.name.c_str(), dtype_name(c.dtype));
  }
  if (a.dtype != b.dtype) {
    return v.fail(ErrorKind::InvalidProgram, "inputs '%s' (%s) and '%s' (%s) differ in data type", a.name.c_str(),
                  dtype_name(a.dtype), b.name.c_str(), dtype_name(b.dtype));
  }
  Dims out_dims;
  QNN_RETURN_IF_ERROR(broadcast_output(v, {&c, &a, &b}, out_dims));
  QNN_RETURN_IF_ERROR(v.expect_output(0, out_dims, a.dtype));
  switch (a.dtype) {
    case DType::FLOAT_32:
      return emplace_kernel<SelectKernel<float>>(out, v, out_dims);
    case DType::INT_32:
      return emplace_kernel<SelectKernel<int32_t>>(out, v, out_dims);
    case DType::INT_64:
      return emplace_kernel<SelectKernel<int64_t>>(out, v, out_dims);
    case DType::BOOL_8:
      return emplace_kernel<SelectKernel<uint8_t>>(out, v, out_dims);
    default:
      return v.fail(ErrorKind::NotSupported, "data type %s is not supported (FLOAT_32, INT_32, INT_64, BOOL_8)",
                    dtype_name(a.dtype));
  }
}

// ---- IsNan ------------------------------------------------------------------------
struct IsNanFn {
  static bool apply(float x) { return std::isnan(x); }
};

template <typename Fn>
class ClassifyKernel final : public Kernel {
 public:
  explicit ClassifyKernel(const OpView& v) : in_(v.inputs[0]->id), out_(v.outputs[0]->id), numel_(v.inputs[0]->numel) {}

  Status run(const RunContext& ctx) const override {
    const float* in = ctx.at<const float>(in_);
    uint8_t* out = ctx.at<uint8_t>(out_);
    for (size_t i = 0; i < numel_; ++i) out[i] = Fn::apply(in[i]) ? 1 : 0;
    return Status::Ok();
  }

 private:
  uint32_t in_, out_;
  size_t numel_;
};

template <typename Fn>
Status create_classify(const OpView& v, KernelEnv&, KernelPtr& out) {
  QNN_RETURN_IF_ERROR(v.expect_arity(1, 1, 1));
  QNN_RETURN_IF_ERROR(v.expect_float(*v.inputs[0]));
  QNN_RETURN_IF_ERROR(v.expect_output(0, v.inputs[0]->dims, DType::BOOL_8));
  return emplace_kernel<ClassifyKernel<Fn>>(out, v);
}

}  // namespace

QNN_REGISTER_KERNEL(Float, ElementWiseEqual, &create_compare<EqualOp>);
QNN_REGISTER_KERNEL(Float, ElementWiseNotEqual, &create_compare<NotEqualOp>);
QNN_REGISTER_KERNEL(Float, ElementWiseLess, &create_compare<LessOp>);
QNN_REGISTER_KERNEL(Float, ElementWiseLessEqual, &create_compare<LessEqualOp>);
QNN_REGISTER_KERNEL(Float, ElementWiseGreater, &create_compare<GreaterOp>);
QNN_REGISTER_KERNEL(Float, ElementWiseGreaterEqual, &create_compare<GreaterEqualOp>);
QNN_REGISTER_KERNEL(Float, ElementWiseAnd, &create_logical<AndOp>);
QNN_REGISTER_KERNEL(Float, ElementWiseOr, &create_logical<OrOp>);
QNN_REGISTER_KERNEL(Float, ElementWiseXor, &create_logical<XorOp>);
QNN_REGISTER_KERNEL(Float, ElementWiseNot, &create_not);
QNN_REGISTER_KERNEL(Float, ElementWiseSelect, &create_select);
QNN_REGISTER_KERNEL(Float, IsNan, &create_classify<IsNanFn>);

}  // namespace engine
}  // namespace qnn_delegate
