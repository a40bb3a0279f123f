// Activation fusion as QNN HTP does it: a quantized Conv2d / DepthWiseConv2d /
// FullyConnected whose output feeds only a Relu / ReluMinMax requantizes its
// accumulator straight into the activation's output encoding (one rounding),
// instead of rounding into its own output encoding and requantizing again.
// Measured on QNN 2.51 (SM8650): Conv2d -> ReLU6 in 8a8w is 76.9% equal to the
// unfused two-rounding arithmetic and 100% equal to the fused one.
//
// A pair is fused when the producer's output is read by the activation alone and
// both are quantized with the same data type, or both are float32 and the producer's
// output is NATIVE (not dumped). When the activation's output
// encoding reaches beyond its clamp range (e.g. a ReLU output whose encoding a
// concat shares with signed tensors), HTP still fuses and clamps the codes to
// the clamp range's (measured on QNN 2.51: conv -> relu -> cat, 8a8w, 92.7%
// equal to two roundings, 100% to the fused clamp). When the
// producer's output is itself read by the caller (a graph output or a dumped
// intermediate, APP_READ), HTP still fuses (QNN's final outputs are the same
// with and without intermediate dumps): the producer runs as is and the
// activation's step runs the producer again into the activation's encoding.
#pragma once

#include <cstdint>
#include <vector>

#include "backends/qualcomm/runtime/engine/Tensor.h"
#include "qnn_payload_generated.h"

namespace qnn_delegate {
namespace engine {

struct ActivationFusion {
  // Per producer op: index of the activation op it computes instead of its own
  // output (-1 = none).
  std::vector<int64_t> activation_of;
  // Per activation op: index of its producer when that producer computes it
  // (-1 = none): its step is a no-op when activation_of[producer] names it, and
  // runs the producer into the activation's output otherwise (APP_READ producer output).
  std::vector<int64_t> producer_of;
  // Per activation op fused into its producer: the output codes its clamp keeps (the whole
  // range of the output's data type when its encoding lies inside the clamp range).
  std::vector<int64_t> clamp_min, clamp_max;
  // Per activation op fused into a float producer: the activation it applies (the float
  // Conv2d / DepthWiseConv2d / FullyConnected kernels apply it as they store, then round
  // to fp16 in fp16 graphs: round(act(round(y))) = round(act(y)) for these clamps).
  std::vector<FloatActivation> float_act;
};

ActivationFusion plan_activation_fusion(const ::qnn_delegate::Graph* graph, const std::vector<TensorInfo>& tensors);

}  // namespace engine
}  // namespace qnn_delegate
