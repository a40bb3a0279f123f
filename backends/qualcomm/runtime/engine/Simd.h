// SIMD code paths of the host engine's kernels. The library is compiled for any x86-64 CPU
// (no -march): a kernel's AVX2 / AVX-512 code is compiled per function with the target
// attributes below and picked when the kernel is created, from what this CPU has
// (__builtin_cpu_supports, read once) capped by env QNN_HOST_ENGINE_KERNELS (plain: no SIMD
// path; avx2: no AVX-512 path; read when a kernel is created, so tests can run every path).
// Every path of a kernel computes the same bits: the float code is compiled with
// -ffp-contract=off and each fused multiply-add is written out (std::fma, _mm*_fmadd_ps).
#pragma once

#if defined(__x86_64__) || defined(__i386__)
#define QNN_X86 1
// AVX2 + FMA + F16C (every CPU with AVX2 and FMA has F16C).
#define QNN_TARGET_AVX2 __attribute__((target("avx2,fma,f16c")))
// AVX-512 F / BW / DQ / VL on top of QNN_TARGET_AVX2.
#define QNN_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma,f16c")))
// AVX-512 VNNI (vpdpbusd).
#define QNN_TARGET_VNNI __attribute__((target("avx512f,avx512bw,avx512vnni")))
// A plain loop compiled twice, for x86-64 and for x86-64-v3 (AVX2, FMA, F16C), the copy picked
// when the library is loaded (ifunc): for loops whose std::fma / fp16 conversions would
// otherwise be library calls. Same bits either way.
#define QNN_FMA_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define QNN_TARGET_AVX2
#define QNN_TARGET_AVX512
#define QNN_TARGET_VNNI
#define QNN_FMA_CLONES
#endif

namespace qnn_delegate {
namespace engine {

// Plain: portable C++ only; Avx2: AVX2 + FMA + F16C; Avx512: that and AVX-512 F/BW/DQ/VL.
enum class SimdLevel { Plain = 0, Avx2 = 1, Avx512 = 2 };

// What this CPU supports (read once).
SimdLevel cpu_simd_level();
bool cpu_has_avx512_vnni();  // implies cpu_simd_level() == Avx512

// The level kernels created now may use: cpu_simd_level() capped by QNN_HOST_ENGINE_KERNELS.
SimdLevel simd_level();

// QNN_HOST_ENGINE_KERNELS=plain: kernels created now take their plain C++ loops.
bool plain_kernels_forced();

}  // namespace engine
}  // namespace qnn_delegate
