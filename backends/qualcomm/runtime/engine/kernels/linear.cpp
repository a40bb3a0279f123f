// FullyConnected and MatMul. Reference: plain triple loops (the oracle).
// Fast: FullyConnected on pre-packed weights (GEMM); MatMul row-major
// (i-k-j) or dot-product loops per batch.
#include <algorithm>

#include "backends/qualcomm/runtime/engine/kernels/Gemm.h"
#include "backends/qualcomm/runtime/engine/kernels/LinearShape.h"

namespace qnn_delegate {
namespace engine {
namespace {

// C[m,n] = sum_k A[m*sam + k*sak] * B[k*sbk + n*sbn]
void gemm_strided(const float* A, size_t sam, size_t sak, const float* B, size_t sbk, size_t sbn, float* C, size_t M,
                  size_t N, size_t K) {
  for (size_t m = 0; m < M; ++m)
    for (size_t n = 0; n < N; ++n) {
      float acc = 0.f;
      for (size_t k = 0; k < K; ++k) acc += A[m * sam + k * sak] * B[k * sbk + n * sbn];
      C[m * N + n] = acc;
    }
}

// ---- FullyConnected ---------------------------------------------------------
class FcReferenceKernel final : public Kernel {
 public:
  FcReferenceKernel(const FcShape& s, FloatActivation act) : s_(s), act_(act) {}
  Status run(const RunContext& c) const override {
    const float* x = c.at<const float>(s_.x);
    const float* w = c.at<const float>(s_.w);
    const float* b = c.at<const float>(s_.b);
    float* out = c.at<float>(s_.out);
    for (size_t m = 0; m < s_.M; ++m)
      for (size_t n = 0; n < s_.N; ++n) {
        const float acc = dot_tail_fused<8>(b[n], x + m * s_.K, 1, w + n * s_.K, 1, s_.K);
        out[m * s_.N + n] = act_.apply(acc);
      }
    return Status::Ok();
  }

 private:
  FcShape s_;
  FloatActivation act_;  // fused Relu / ReluMinMax (ActivationFusion.h)
};

class FcPackedKernel final : public Kernel {
 public:
  FcPackedKernel(const FcShape& s, const float* w, TrackingAllocator* a, const GemmEpilogue& ep)
      : s_(s), path_(gemm_path()), packed_(a, packed_b_floats(path_, s.K, s.N) * sizeof(float)), ep_(ep) {
    if (packed_.valid()) pack_b_nk(path_, w, s.K, s.N, packed_.as<float>());
  }
  const char* path() const override { return gemm_path_name(path_); }
  bool valid() const { return packed_.valid(); }
  size_t owned_bytes() const override { return packed_.size(); }
  bool rounds_fp16_outputs() const override { return ep_.round_half; }
  Status run(const RunContext& c) const override {
    gemm_packed(path_, c.at<const float>(s_.x), s_.K, packed_.as<float>(), c.at<const float>(s_.b), c.at<float>(s_.out),
                s_.N, s_.M, s_.N, s_.K, ep_);
    return Status::Ok();
  }

 private:
  FcShape s_;
  GemmPath path_;
  Buffer packed_;
  GemmEpilogue ep_;  // fused activation, fp16 rounding
};

Status create_fully_connected(const OpView& v, KernelEnv& env, KernelPtr& out) {
  QNN_RETURN_IF_ERROR(v.expect_arity(3, 3, 1));
  for (const TensorInfo* t : v.inputs) QNN_RETURN_IF_ERROR(v.expect_float(*t));
  FcShape s;
  QNN_RETURN_IF_ERROR(fc_shape(v, DType::FLOAT_32, s));
  const TensorInfo& w = *v.inputs[1];
  const FloatActivation act = v.outputs[0]->fused_act;
  if (env.reference_only || w.static_data == nullptr) return emplace_kernel<FcReferenceKernel>(out, s, act);
  GemmEpilogue ep;
  ep.act = act;
  ep.round_half = env.round_fp16_outputs;
  auto* k = new FcPackedKernel(s, static_cast<const float*>(w.static_data), env.allocator, ep);
  out.reset(k);
  if (!k->valid()) return v.fail(ErrorKind::MemoryAllocationFailed, "cannot allocate packed weights");
  return Status::Ok();
}

// ---- MatMul -------------------------------------------------------------------
class MatMulKernel final : public Kernel {
 public:
  MatMulKernel(const MatMulShape& s, bool reference) : s_(s), reference_(reference) {}
  Status run(const RunContext& c) const override {
    const float* a = c.at<const float>(s_.a);
    const float* b = c.at<const float>(s_.b);
    float* out = c.at<float>(s_.out);
    Index idx{};
    for (size_t bi = 0; bi < s_.batches; ++bi) {
      size_t oa = 0, ob = 0;
      for (size_t d = 0; d < s_.batch.size(); ++d) {
        oa += idx[d] * s_.sa[d];
        ob += idx[d] * s_.sb[d];
      }
      multiply(a + oa * s_.M * s_.K, b + ob * s_.K * s_.N, out + bi * s_.M * s_.N);
      next_index(idx, s_.batch);
    }
    return Status::Ok();
  }

 private:
  void multiply(const float* a, const float* b, float* c) const {
    const size_t M = s_.M, N = s_.N, K = s_.K;
    const size_t sam = s_.ta ? 1 : K, sak = s_.ta ? M : 1;
    const size_t sbk = s_.tb ? 1 : N, sbn = s_.tb ? K : 1;
    if (reference_ || s_.ta) {
      gemm_strided(a, sam, sak, b, sbk, sbn, c, M, N, K);
    } else if (!s_.tb) {
      gemm_rowmajor(a, K, b, N, c, N, M, N, K);
    } else {
      for (size_t m = 0; m < M; ++m)
        for (size_t n = 0; n < N; ++n) {
          c[m * N + n] = dot_tail_fused<8>(0.f, a + m * K, 1, b + n * K, 1, K);
        }
    }
  }

  MatMulShape s_;
  bool reference_;
};

Status create_matmul(const OpView& v, KernelEnv& env, KernelPtr& out) {
  QNN_RETURN_IF_ERROR(v.expect_arity(2, 2, 1));
  for (const TensorInfo* t : v.inputs) QNN_RETURN_IF_ERROR(v.expect_float(*t));
  MatMulShape s;
  QNN_RETURN_IF_ERROR(matmul_shape(v, DType::FLOAT_32, s));
  return emplace_kernel<MatMulKernel>(out, s, env.reference_only);
}

}  // namespace

QNN_REGISTER_KERNEL(Float, FullyConnected, &create_fully_connected);
QNN_REGISTER_KERNEL(Float, MatMul, &create_matmul);

}  // namespace engine
}  // namespace qnn_delegate
