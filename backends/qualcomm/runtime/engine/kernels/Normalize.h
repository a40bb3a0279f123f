// The affine step shared by the normalization kernels (layer_norm.cpp, group_norm.cpp).
#pragma once

#include <cstddef>

namespace qnn_delegate {
namespace engine {

// y[i] = fma((x[i] - m) * inv, gamma[i], beta ? beta[i] : 0), i < n (x - 0 is x: RmsNorm
// passes m = 0). Compiled for x86-64 and x86-64-v3 (Simd.h: QNN_FMA_CLONES); same bits.
void normalize_row(const float* x, float* y, size_t n, float m, float inv, const float* gamma, const float* beta);

}  // namespace engine
}  // namespace qnn_delegate
