#include "backends/qualcomm/runner/llama/sampler.h"

#include <algorithm>
#include <cmath>

namespace qnn_delegate {
namespace llama {

Sampler::Sampler(int64_t vocab_size, float temperature, float top_p, uint64_t seed)
    : vocab_size_(vocab_size),
      temperature_(temperature),
      top_p_(top_p),
      rng_(seed),
      probs_(temperature > 0 ? vocab_size : 0),
      order_(temperature > 0 && top_p < 1.0f ? vocab_size : 0) {}

int64_t Sampler::sample(const float* logits) {
  if (temperature_ <= 0.0f) return std::max_element(logits, logits + vocab_size_) - logits;
  const double max_logit = *std::max_element(logits, logits + vocab_size_);
  double total = 0.0;
  for (int64_t i = 0; i < vocab_size_; ++i) {
    probs_[i] = std::exp((double(logits[i]) - max_logit) / temperature_);
    total += probs_[i];
  }
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  if (top_p_ >= 1.0f) {
    double u = uniform(rng_) * total;
    for (int64_t i = 0; i < vocab_size_; ++i) {
      u -= probs_[i];
      if (u < 0.0) return i;
    }
    return vocab_size_ - 1;
  }
  // Nucleus: the most probable tokens until their share reaches top_p (at least one).
  for (int64_t i = 0; i < vocab_size_; ++i) order_[i] = static_cast<int32_t>(i);
  std::sort(order_.begin(), order_.end(), [this](int32_t a, int32_t b) { return probs_[a] > probs_[b]; });
  double kept = 0.0;
  int64_t n = 0;
  while (n < vocab_size_) {
    kept += probs_[order_[n++]];
    if (kept >= top_p_ * total) break;
  }
  double u = uniform(rng_) * kept;
  for (int64_t i = 0; i < n; ++i) {
    u -= probs_[order_[i]];
    if (u < 0.0) return order_[i];
  }
  return order_[n - 1];
}

}  // namespace llama
}  // namespace qnn_delegate
