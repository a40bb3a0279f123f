// Next-token choice from one row of logits, as generate.py's sample(): greedy (argmax, the first
// of equal maxima) when the temperature is 0, else softmax(logits / temperature) restricted to the
// smallest set of most probable tokens whose probability reaches top_p. Buffers are allocated
// once; sample() allocates nothing.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace qnn_delegate {
namespace llama {

class Sampler {
 public:
  Sampler(int64_t vocab_size, float temperature, float top_p, uint64_t seed);
  int64_t sample(const float* logits);

 private:
  int64_t vocab_size_;
  float temperature_, top_p_;
  std::mt19937_64 rng_;
  std::vector<double> probs_;
  std::vector<int32_t> order_;
};

}  // namespace llama
}  // namespace qnn_delegate
