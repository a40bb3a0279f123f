#include "backends/qualcomm/runtime/engine/ActivationFusion.h"

#include <cstring>
#include <limits>

#include "backends/qualcomm/runtime/engine/Params.h"
#include "backends/qualcomm/runtime/engine/Quant.h"

namespace qnn_delegate {
namespace engine {
namespace {

using ::qnn_delegate::Op;

bool type_is(const Op* op, ops::OpType type) {
  return op->type() != nullptr && std::strcmp(op->type()->c_str(), ops::op_name(type)) == 0;
}

bool is_fusable_producer(const Op* op) {
  return type_is(op, ops::OpType::Conv2d) || type_is(op, ops::OpType::DepthWiseConv2d) ||
         type_is(op, ops::OpType::FullyConnected);
}

// Clamp range of a Relu / ReluMinMax op; false for any other op or bad params.
bool activation_range(const Op* op, float& lo, float& hi) {
  if (type_is(op, ops::OpType::Relu)) {
    lo = 0.f;
    hi = std::numeric_limits<float>::infinity();
    return true;
  }
  if (!type_is(op, ops::OpType::ReluMinMax)) return false;
  OpView view;
  view.op = op;
  ParamReader params(view);
  return params.scalar_float("min_value", lo).ok() && params.scalar_float("max_value", hi).ok() &&
         lo <= hi;  // false for NaN
}

bool single_id(const flatbuffers::Vector<uint32_t>* ids, size_t n, uint32_t& id) {
  if (ids == nullptr || ids->size() != 1 || ids->Get(0) >= n) return false;
  id = ids->Get(0);
  return true;
}

// Whether saturating to `t`'s encoding already clamps to [lo, hi] (ReLU6 observed up
// to 6 has a scale of f32(6 / 255), and 255 * scale may be a hair above 6).
bool encoding_within(const TensorInfo& t, float lo, float hi) {
  if (!t.quant.per_tensor()) return false;
  const double s = t.quant.scale, o = t.quant.offset;
  const double real_min = s * (double(quant_min(t)) + o);
  const double real_max = s * (double(quant_max(t)) + o);
  const double half_step = 0.5 * s;  // a bound within half a step quantizes to the end code
  return real_min >= double(lo) - half_step && real_max <= double(hi) + half_step;
}

} // namespace

ActivationFusion plan_activation_fusion(const ::qnn_delegate::Graph* graph,
                                        const std::vector<TensorInfo>& tensors) {
  ActivationFusion f;
  const auto* ops = graph->ops();
  const size_t num_ops = ops ? ops->size() : 0, n = tensors.size();
  f.activation_of.assign(num_ops, -1);
  f.producer_of.assign(num_ops, -1);
  std::vector<int64_t> reader(n, -1);  // the one op reading a tensor; -2 = several
  for (size_t i = 0; i < num_ops; ++i) {
    const auto* ins = ops->Get(i)->inputs();
    for (size_t k = 0; ins && k < ins->size(); ++k) {
      const uint32_t id = ins->Get(k);
      if (id < n) reader[id] = reader[id] == -1 ? int64_t(i) : -2;
    }
  }
  for (size_t i = 0; i < num_ops; ++i) {
    const Op* producer = ops->Get(i);
    uint32_t mid = 0, out = 0;
    if (!is_fusable_producer(producer) || !single_id(producer->outputs(), n, mid)) continue;
    const int64_t j = reader[mid];
    if (j <= int64_t(i)) continue;
    const Op* act = ops->Get(static_cast<size_t>(j));
    float lo = 0.f, hi = 0.f;
    if (!activation_range(act, lo, hi) || !single_id(act->outputs(), n, out)) continue;
    const TensorInfo& m = tensors[mid];
    const TensorInfo& y = tensors[out];
    const bool readable = m.kind == TensorKind::APP_READ;
    if ((m.kind != TensorKind::NATIVE && !readable) || !is_quant_activation(m) || !is_quant_activation(y) ||
        m.dtype != y.dtype || !encoding_within(y, lo, hi)) {
      continue;
    }
    if (!readable) f.activation_of[i] = j;
    f.producer_of[static_cast<size_t>(j)] = int64_t(i);
  }
  return f;
}

} // namespace engine
} // namespace qnn_delegate
