// TopK along the last axis (FLOAT_32 or INT_32 values, INT_32 indices): the k
// largest elements of each row in descending order, ties by lower index first,
// NaN counts as the largest value (as in PyTorch). (QNN 2.51's HTP puts the higher
// index first among equal values; the quantized sort sorts INT_32 keys without ties.)
#include <algorithm>
#include <cmath>
#include <numeric>

#include "backends/qualcomm/runtime/engine/kernels/KernelUtil.h"

namespace qnn_delegate {
namespace engine {
namespace {

inline bool ranks_before(const int32_t* row, int32_t a, int32_t b) {
  return row[a] != row[b] ? row[a] > row[b] : a < b;
}

inline bool ranks_before(const float* row, int32_t a, int32_t b) {
  const float x = row[a], y = row[b];
  const bool xn = std::isnan(x), yn = std::isnan(y);
  if (xn != yn) return xn;
  if (!xn && x != y) return x > y;
  return a < b;
}

template <typename T>
class TopKKernel final : public Kernel {
 public:
  TopKKernel(uint32_t in, uint32_t values, uint32_t indices, size_t rows, size_t n, size_t k)
      : in_(in), values_(values), indices_(indices), rows_(rows), n_(n), k_(k) {}
  Status run(const RunContext& c) const override {
    const T* x = c.at<const T>(in_);
    T* values = c.at<T>(values_);
    int32_t* indices = c.at<int32_t>(indices_);
    int32_t* order = static_cast<int32_t*>(c.scratch);  // n_ entries
    for (size_t r = 0; r < rows_; ++r) {
      const T* row = x + r * n_;
      std::iota(order, order + n_, 0);
      std::partial_sort(order, order + k_, order + n_, [row](int32_t a, int32_t b) { return ranks_before(row, a, b); });
      for (size_t j = 0; j < k_; ++j) {
        values[r * k_ + j] = row[order[j]];
        indices[r * k_ + j] = order[j];
      }
    }
    return Status::Ok();
  }
  size_t scratch_bytes() const override { return n_ * sizeof(int32_t); }

 private:
  uint32_t in_, values_, indices_;
  size_t rows_, n_, k_;
};

Status create_topk(const OpView& v, KernelEnv&, KernelPtr& out) {
  QNN_RETURN_IF_ERROR(v.expect_arity(1, 1, 2));
  const TensorInfo& x = *v.inputs[0];
  const bool int32 = x.dtype == DType::INT_32;
  if (!int32) QNN_RETURN_IF_ERROR(v.expect_float(x));
  if (x.rank() == 0) return v.fail(ErrorKind::InvalidProgram, "input '%s' is a scalar", x.name.c_str());
  int64_t k = 0;
  QNN_RETURN_IF_ERROR(ParamReader(v).scalar_int("k", DType::UINT_32, k));
  const size_t n = x.dims.back();
  if (k < 1 || size_t(k) > n) {
    return v.fail(ErrorKind::InvalidProgram, "k=%lld is outside [1, %zu] (last dim of '%s' %s)",
                  static_cast<long long>(k), n, x.name.c_str(), dims_to_string(x.dims).c_str());
  }
  Dims out_dims = x.dims;
  out_dims.back() = static_cast<uint32_t>(k);
  QNN_RETURN_IF_ERROR(v.expect_output(0, out_dims, int32 ? DType::INT_32 : DType::FLOAT_32));
  QNN_RETURN_IF_ERROR(v.expect_output(1, out_dims, DType::INT_32));
  if (int32) {
    return emplace_kernel<TopKKernel<int32_t>>(out, x.id, v.outputs[0]->id, v.outputs[1]->id, product(x.dims) / n, n,
                                               size_t(k));
  }
  return emplace_kernel<TopKKernel<float>>(out, x.id, v.outputs[0]->id, v.outputs[1]->id, product(x.dims) / n, n,
                                           size_t(k));
}

}  // namespace

QNN_REGISTER_KERNEL(Float, TopK, &create_topk);

}  // namespace engine
}  // namespace qnn_delegate
