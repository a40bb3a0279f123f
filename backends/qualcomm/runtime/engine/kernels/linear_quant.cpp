// Integer FullyConnected (weights [N,K], K contiguous: u8 x s8 dot products)
// and MatMul of two quantized activations: sum_k (qa + offa) * (qb + offb),
// exact in Acc, requantized with sa * sb / s_out (QuantGemm.h Requant: HTP's arithmetic
// for uint8 a, b and out).
#include "backends/qualcomm/runtime/engine/kernels/LinearShape.h"
#include "backends/qualcomm/runtime/engine/kernels/QuantGemm.h"

#ifdef QNN_X86
#include <immintrin.h>
#endif

namespace qnn_delegate {
namespace engine {
namespace {

struct QFcSetup {
  FcShape s;
  QWeights* w;
  Requant rq;
  TrackingAllocator* alloc;
};

template <typename A, typename W, typename Acc, typename O>
class QFcKernel final : public Kernel {
 public:
  explicit QFcKernel(QFcSetup& s) : s_(s.s) { core_.init(std::move(*s.w), std::move(s.rq), 1, s.alloc); }
  size_t owned_bytes() const override { return core_.owned_bytes(); }
  size_t scratch_bytes() const override { return core_.slots() * core_.slot_bytes(); }
  const char* path() const override { return core_.path_name(); }
  Status run(const RunContext& c) const override {
    core_.gemm_parallel(c.at<const A>(s_.x), s_.K, 0, s_.M, c.at<O>(s_.out), s_.N, static_cast<char*>(c.scratch));
    return Status::Ok();
  }

 private:
  FcShape s_;
  QGemmCore<A, W, Acc, O> core_;
};

Status create_qfc(const OpView& v, KernelEnv& env, KernelPtr& out) {
  QNN_RETURN_IF_ERROR(v.expect_arity(3, 3, 1));
  const TensorInfo& x = *v.inputs[0];
  const TensorInfo& w = *v.inputs[1];
  const TensorInfo& b = *v.inputs[2];
  const TensorInfo& y = *v.outputs[0];
  const bool bias_ok = b.kind == TensorKind::STATIC && (b.is_quantized() || b.is_float());
  if (!is_quant_activation(x) || !is_quant_activation(y) || !bias_ok || !integer_weights_supported(w, 0, 1)) {
    return Status::Ok();  // declined: float kernel on dequantized tensors
  }
  QFcSetup s;
  QNN_RETURN_IF_ERROR(fc_shape(v, y.dtype, s.s));
  QWeights qw;
  QNN_RETURN_IF_ERROR(prepare_qweights(v, w, s.s.N, false, env.allocator, qw));
  prepare_requant(x, w, qw, b, y, s.rq);
  s.w = &qw;
  s.alloc = env.allocator;
  out =
      make_integer_kernel<QFcKernel>(x.dtype == DType::UFIXED_POINT_16, qw.wide, y.dtype == DType::UFIXED_POINT_16, s);
  return Status::Ok();
}

// ---- MatMul -----------------------------------------------------------------
struct QMatMulSetup {
  MatMulShape s;
  int32_t off_a, off_b;
  Requant rq;  // hr[0]: no bias
};

#ifdef QNN_X86
// GCC 12's AVX-512 intrinsics start from an undefined vector and warn
// (-Wmaybe-uninitialized) where inlined: silenced for this code.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// Row k, columns n0 .. n0 + 8 (mask m) of B as doubles holding (b + off_b): from the double copy
// (offset already added) or straight from the uint8 / uint16 tensor (the same exact values).
QNN_TARGET_AVX512 inline __m512d load_b8(const double* p, __mmask8 m, __m512d) { return _mm512_maskz_loadu_pd(m, p); }
QNN_TARGET_AVX512 inline __m512d load_b8(const uint8_t* p, __mmask8 m, __m512d ob) {
  return _mm512_add_pd(_mm512_cvtepi32_pd(_mm256_cvtepu8_epi32(_mm_maskz_loadu_epi8(m, p))), ob);
}
QNN_TARGET_AVX512 inline __m512d load_b8(const uint16_t* p, __mmask8 m, __m512d ob) {
  return _mm512_add_pd(_mm512_cvtepi32_pd(_mm256_cvtepu16_epi32(_mm_maskz_loadu_epi16(m, p))), ob);
}

// R rows of C = ad [R][K] x B [K][N] (B row k at b + k * ldb; doubles holding exact integers:
// every partial sum is an integer below 2^53, so the FMA order does not matter) with AVX-512:
// R rows x 16 columns in 2R zmm accumulators, the N % 16 tail masked. Requantized in lanes when
// `lanes` (the PT2E float reference, Requant::apply's !htp branch: fma(acc, mult, bias), round
// half even, - out_offset, clamp; the same operations lane by lane), else by Requant::apply.
template <int R, typename O, typename BT>
QNN_TARGET_AVX512 void matmul_rows_avx512(const double* ad, const BT* b, double off_b, size_t ldb, size_t K, size_t N,
                                          const Requant& rq, bool lanes, O* c, size_t ldc) {
  const __m512d mult = _mm512_set1_pd(lanes ? rq.mult[0] : 0.0), bias = _mm512_set1_pd(lanes ? rq.bias[0] : 0.0);
  const __m512d off = _mm512_set1_pd(double(rq.out_offset)), ob = _mm512_set1_pd(off_b);
  const __m512d lo = _mm512_set1_pd(double(rq.qmin)), hi = _mm512_set1_pd(double(rq.qmax));
  for (size_t n0 = 0; n0 < N; n0 += 16) {
    const size_t cols = std::min<size_t>(16, N - n0);
    const __mmask8 m0 = __mmask8(cols >= 8 ? 0xFF : (1u << cols) - 1);
    const __mmask8 m1 = __mmask8(cols >= 16 ? 0xFF : (cols > 8 ? (1u << (cols - 8)) - 1 : 0));
    __m512d acc[R][2];
    for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_pd();
    for (size_t k = 0; k < K; ++k) {
      const __m512d b0 = load_b8(b + k * ldb + n0, m0, ob);
      const __m512d b1 = load_b8(b + k * ldb + n0 + 8, m1, ob);
      for (int r = 0; r < R; ++r) {
        const __m512d av = _mm512_set1_pd(ad[r * K + k]);
        acc[r][0] = _mm512_fmadd_pd(av, b0, acc[r][0]);
        acc[r][1] = _mm512_fmadd_pd(av, b1, acc[r][1]);
      }
    }
    for (int r = 0; r < R; ++r) {
      O* row = c + r * ldc + n0;
      if (lanes) {
        for (int h = 0; h < 2; ++h) {
          const __mmask8 m = h == 0 ? m0 : m1;
          if (m == 0) continue;
          __m512d v = _mm512_roundscale_pd(_mm512_fmadd_pd(acc[r][h], mult, bias),
                                           _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
          v = _mm512_min_pd(_mm512_max_pd(_mm512_sub_pd(v, off), lo), hi);
          const __m256i q = _mm512_cvtpd_epi32(v);
          if constexpr (sizeof(O) == 1) {
            _mm256_mask_cvtepi32_storeu_epi8(row + 8 * h, m, q);
          } else {
            _mm256_mask_cvtepi32_storeu_epi16(row + 8 * h, m, q);
          }
        }
      } else {
        alignas(64) double sums[16];
        _mm512_store_pd(sums, acc[r][0]);
        _mm512_store_pd(sums + 8, acc[r][1]);
        for (size_t j = 0; j < cols; ++j) row[j] = rq.apply<O>(int64_t(sums[j]), 0);
      }
    }
  }
}
#pragma GCC diagnostic pop
#endif

// A / B: input element types; Acc: int32 when both are 8-bit; O: output type.
// Products (qa + offa) * (qb + offb) are below 2^32 and K < 2^20, so every partial sum
// is an integer below 2^53: accumulated in double (vectorized FMAs) they are the exact
// integer sums. Batches are split over the pool; per slot scratch holds B as double
// [K][N] with its offset, one row of A and the N sums.
template <typename A, typename B, typename Acc, typename O>
class QMatMulKernel final : public Kernel {
 public:
  explicit QMatMulKernel(QMatMulSetup& s)
      : q_(std::move(s)),
        slots_(qgemm_slots()),
        blocked_(!plain_kernels_forced()),
        avx512_(blocked_ && simd_level() == SimdLevel::Avx512) {}
  size_t scratch_bytes() const override { return slots_ * slot_bytes(); }
  // "blocked-avx512": the AVX-512 tile with lane requantization (PT2E reference) or scalar (HTP);
  // "direct-avx512": the same tile reading B in place (M <= 4 rows, B's rows contiguous).
  const char* path() const override {
    if (avx512_) return direct() ? "direct-avx512" : "blocked-avx512";
    return blocked_ ? "blocked" : "plain";
  }
  Status run(const RunContext& c) const override {
    const MatMulShape& s = q_.s;
    const A* a = c.at<const A>(s.a);
    const B* b = c.at<const B>(s.b);
    O* out = c.at<O>(s.out);
    char* scratch = static_cast<char*>(c.scratch);
    const bool serial = s.batches * s.M * s.N * s.K < kMinParallelQMacs;
    auto run_slot = [&](size_t slot) {
      const size_t b0 = serial ? (slot == 0 ? 0 : s.batches) : s.batches * slot / slots_;
      const size_t b1 = serial ? s.batches : s.batches * (slot + 1) / slots_;
      double* buf = reinterpret_cast<double*>(scratch + slot * slot_bytes());
      for (size_t bi = b0; bi < b1; ++bi) {
        size_t oa = 0, ob = 0, rem = bi;
        for (size_t d = s.batch.size(); d-- > 0;) {
          const size_t i = rem % s.batch[d];
          rem /= s.batch[d];
          oa += i * s.sa[d];
          ob += i * s.sb[d];
        }
        multiply(a + oa * s.M * s.K, b + ob * s.K * s.N, buf, out + bi * s.M * s.N);
      }
    };
    parallel_slots(slots_, serial, run_slot);
    return Status::Ok();
  }

 private:
  bool direct() const { return q_.s.M <= kRows && (q_.s.tb ? q_.s.K : 1) == 1; }
  // B as double [K][N], kRows rows of A as double [kRows][K], N sums.
  size_t slot_bytes() const { return align64((q_.s.K * q_.s.N + kRows * q_.s.K + q_.s.N) * sizeof(double)); }

  static constexpr size_t kRows = 4;  // rows of A per register tile
  typedef double VecD __attribute__((vector_size(32)));

  // (Through memory: a 32-byte vector return value would change the ABI without AVX.)
  static void load4(const double* p, VecD& v) { __builtin_memcpy(&v, p, sizeof(v)); }

  // Rows m0 .. m0 + kRows of C: 4 rows x 8 columns of sums in registers over the k loop (the
  // sums are exact integers in any order, so they equal the plain loop's).
  void rows_blocked(const A* a, const double* bd, double* ad, size_t m0, O* c) const {
    const MatMulShape& s = q_.s;
    const size_t M = s.M, N = s.N, K = s.K;
    const size_t sam = s.ta ? 1 : K, sak = s.ta ? M : 1;
    const double oa = q_.off_a;
    for (size_t r = 0; r < kRows; ++r)
      for (size_t k = 0; k < K; ++k) ad[r * K + k] = double(a[(m0 + r) * sam + k * sak]) + oa;
#ifdef QNN_X86
    if (avx512_) {
      matmul_rows_avx512<kRows, O>(ad, bd, 0.0, N, K, N, q_.rq, !q_.rq.htp, c + m0 * N, N);
      return;
    }
#endif
    size_t n0 = 0;
    for (; n0 + 8 <= N; n0 += 8) {
      VecD acc[kRows][2] = {};
      for (size_t k = 0; k < K; ++k) {
        VecD b0, b1;
        load4(bd + k * N + n0, b0);
        load4(bd + k * N + n0 + 4, b1);
#pragma GCC unroll 4
        for (size_t r = 0; r < kRows; ++r) {
          const double av = ad[r * K + k];
          acc[r][0] += av * b0;
          acc[r][1] += av * b1;
        }
      }
      for (size_t r = 0; r < kRows; ++r)
        for (size_t j = 0; j < 8; ++j) {
          c[(m0 + r) * N + n0 + j] = q_.rq.apply<O>(int64_t(acc[r][j / 4][j % 4]), 0);
        }
    }
    for (size_t r = 0; r < kRows; ++r)
      for (size_t n = n0; n < N; ++n) {
        double sum = 0.0;
        for (size_t k = 0; k < K; ++k) sum += ad[r * K + k] * bd[k * N + n];
        c[(m0 + r) * N + n] = q_.rq.apply<O>(int64_t(sum), 0);
      }
  }

#ifdef QNN_X86
  // All M <= kRows rows of C in one AVX-512 tile, B converted to double as it is loaded (each
  // element once) instead of copied to the double B first: the same sums.
  void rows_direct(const double* ad, const B* b, size_t ldb, O* c) const {
    const MatMulShape& s = q_.s;
    const bool lanes = !q_.rq.htp;
    switch (s.M) {
      case 1:
        return matmul_rows_avx512<1, O>(ad, b, double(q_.off_b), ldb, s.K, s.N, q_.rq, lanes, c, s.N);
      case 2:
        return matmul_rows_avx512<2, O>(ad, b, double(q_.off_b), ldb, s.K, s.N, q_.rq, lanes, c, s.N);
      case 3:
        return matmul_rows_avx512<3, O>(ad, b, double(q_.off_b), ldb, s.K, s.N, q_.rq, lanes, c, s.N);
      default:
        return matmul_rows_avx512<4, O>(ad, b, double(q_.off_b), ldb, s.K, s.N, q_.rq, lanes, c, s.N);
    }
  }
#endif

  void multiply(const A* a, const B* b, double* buf, O* c) const {
    const MatMulShape& s = q_.s;
    const size_t M = s.M, N = s.N, K = s.K;
    const size_t sam = s.ta ? 1 : K, sak = s.ta ? M : 1;
    const size_t sbk = s.tb ? 1 : N, sbn = s.tb ? K : 1;
    const double oa = q_.off_a, ob = q_.off_b;
    double* bd = buf;
    double* ad = buf + K * N;
    double* acc = ad + kRows * K;
#ifdef QNN_X86
    if (avx512_ && direct()) {  // one row tile (decode attention): B read as it is
      for (size_t m = 0; m < M; ++m)
        for (size_t k = 0; k < K; ++k) ad[m * K + k] = double(a[m * sam + k * sak]) + oa;
      rows_direct(ad, b, sbk, c);
      return;
    }
#endif
    for (size_t k = 0; k < K; ++k)
      for (size_t n = 0; n < N; ++n) bd[k * N + n] = double(b[k * sbk + n * sbn]) + ob;
    size_t m_begin = 0;
    if (blocked_) {
      for (; m_begin + kRows <= M; m_begin += kRows) rows_blocked(a, bd, ad, m_begin, c);
    }
    for (size_t m = m_begin; m < M; ++m) {
      for (size_t k = 0; k < K; ++k) ad[k] = double(a[m * sam + k * sak]) + oa;
      std::fill(acc, acc + N, 0.0);
      for (size_t k = 0; k < K; ++k) {
        const double av = ad[k];
        const double* brow = bd + k * N;
        for (size_t n = 0; n < N; ++n) acc[n] += av * brow[n];
      }
      for (size_t n = 0; n < N; ++n) c[m * N + n] = q_.rq.apply<O>(int64_t(acc[n]), 0);
    }
  }

  QMatMulSetup q_;
  size_t slots_ = 1;
  bool blocked_ = true;  // register tiles (QNN_HOST_ENGINE_KERNELS=plain: the row loop only)
  bool avx512_ = false;  // blocked on AVX-512 (not with QNN_HOST_ENGINE_KERNELS=avx2)
};

Status create_qmatmul(const OpView& v, KernelEnv&, KernelPtr& out) {
  QNN_RETURN_IF_ERROR(v.expect_arity(2, 2, 1));
  const TensorInfo& a = *v.inputs[0];
  const TensorInfo& b = *v.inputs[1];
  const TensorInfo& y = *v.outputs[0];
  if (!is_quant_activation(a) || !is_quant_activation(b) || !is_quant_activation(y)) {
    return Status::Ok();  // declined
  }
  QMatMulSetup s;
  QNN_RETURN_IF_ERROR(matmul_shape(v, y.dtype, s.s));
  if (s.s.K >= (size_t(1) << 20)) return v.fail(ErrorKind::NotSupported, "quantized MatMul: K >= 2^20");
  s.off_a = a.quant.offset;
  s.off_b = b.quant.offset;
  const double m = double(a.quant.scale) * double(b.quant.scale) / double(y.quant.scale);
  s.rq.htp = a.dtype == DType::UFIXED_POINT_8 && b.dtype == DType::UFIXED_POINT_8 && y.dtype == DType::UFIXED_POINT_8;
  if (s.rq.htp) {
    s.rq.hr = {htp_requant_of(m)};
  } else {
    s.rq.mult = {m};
    s.rq.bias = {0.0};
  }
  s.rq.out_offset = y.quant.offset;
  s.rq.qmin = quant_min(y);
  s.rq.qmax = quant_max(y);
  // Reuse the (x, w, out) instantiation helper: "W" is B's type here.
  const bool a16 = a.dtype == DType::UFIXED_POINT_16, b16 = b.dtype == DType::UFIXED_POINT_16;
  const bool y16 = y.dtype == DType::UFIXED_POINT_16;
  auto make = [&](auto ta, auto tb, auto to) -> KernelPtr {
    using A = decltype(ta);
    using B = decltype(tb);
    using O = decltype(to);
    using Acc = typename std::conditional<sizeof(A) == 1 && sizeof(B) == 1, int32_t, int64_t>::type;
    return KernelPtr(new QMatMulKernel<A, B, Acc, O>(s));
  };
  if (!a16 && !b16)
    out = y16 ? make(uint8_t(), uint8_t(), uint16_t()) : make(uint8_t(), uint8_t(), uint8_t());
  else if (!a16)
    out = y16 ? make(uint8_t(), uint16_t(), uint16_t()) : make(uint8_t(), uint16_t(), uint8_t());
  else if (!b16)
    out = y16 ? make(uint16_t(), uint8_t(), uint16_t()) : make(uint16_t(), uint8_t(), uint8_t());
  else
    out = y16 ? make(uint16_t(), uint16_t(), uint16_t()) : make(uint16_t(), uint16_t(), uint8_t());
  return Status::Ok();
}

}  // namespace

QNN_REGISTER_KERNEL(Quant, FullyConnected, &create_qfc);
QNN_REGISTER_KERNEL(Quant, MatMul, &create_qmatmul);

}  // namespace engine
}  // namespace qnn_delegate
