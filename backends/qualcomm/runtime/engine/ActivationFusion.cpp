#include "backends/qualcomm/runtime/engine/ActivationFusion.h"

#include <cmath>
#include <cstdint>
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

// The codes of `t`'s encoding that [lo, hi] keeps: round(bound / scale) - offset, within
// the data type's range (ReLU6 observed up to 6 has a scale of f32(6 / 255), and 255 *
// scale may be a hair above 6: a bound within half a step quantizes to the end code).
void clamp_codes(const TensorInfo& t, float lo, float hi, int64_t& cmin, int64_t& cmax) {
  const double s = t.quant.scale, o = t.quant.offset;
  cmin = quant_min(t);
  cmax = quant_max(t);
  if (!(s > 0.0)) return;
  const double code_lo = std::nearbyint(double(lo) / s) - o, code_hi = std::nearbyint(double(hi) / s) - o;
  if (std::isfinite(code_lo) && code_lo > double(cmin)) cmin = code_lo > double(cmax) ? cmax : int64_t(code_lo);
  if (std::isfinite(code_hi) && code_hi < double(cmax)) cmax = code_hi < double(cmin) ? cmin : int64_t(code_hi);
}

}  // namespace

ActivationFusion plan_activation_fusion(const ::qnn_delegate::Graph* graph, const std::vector<TensorInfo>& tensors) {
  ActivationFusion f;
  const auto* ops = graph->ops();
  const size_t num_ops = ops ? ops->size() : 0, n = tensors.size();
  f.activation_of.assign(num_ops, -1);
  f.producer_of.assign(num_ops, -1);
  f.clamp_min.assign(num_ops, INT64_MIN);
  f.clamp_max.assign(num_ops, INT64_MAX);
  f.float_act.assign(num_ops, FloatActivation());
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
    if (m.kind == TensorKind::NATIVE && m.dtype == DType::FLOAT_32 && y.dtype == DType::FLOAT_32 && !m.is_quantized() &&
        !y.is_quantized()) {
      FloatActivation& a = f.float_act[static_cast<size_t>(j)];
      a.kind = type_is(act, ops::OpType::Relu) ? FloatActivation::Relu : FloatActivation::ReluMinMax;
      a.lo = lo;
      a.hi = hi;
      f.activation_of[i] = j;
      f.producer_of[static_cast<size_t>(j)] = int64_t(i);
      continue;
    }
    const bool readable = m.kind == TensorKind::APP_READ;
    if ((m.kind != TensorKind::NATIVE && !readable) || !is_quant_activation(m) || !is_quant_activation(y) ||
        m.dtype != y.dtype || !y.quant.per_tensor()) {
      continue;
    }
    clamp_codes(y, lo, hi, f.clamp_min[static_cast<size_t>(j)], f.clamp_max[static_cast<size_t>(j)]);
    if (!readable) f.activation_of[i] = j;
    f.producer_of[static_cast<size_t>(j)] = int64_t(i);
  }
  return f;
}

}  // namespace engine
}  // namespace qnn_delegate
