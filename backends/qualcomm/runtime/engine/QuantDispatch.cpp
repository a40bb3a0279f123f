// Kernel choice per op from its tensors' data types:
// - no quantized tensor: the float kernel;
// - an integer kernel when one exists and accepts the op (Conv2d, FullyConnected, ...);
// - data movement ops whose tensors share one encoding: the byte-generic kernel as is;
// - unary uint8 / uint16 ops with a QNN-measured table in the payload: that table;
// - otherwise the float kernel on dequantized inputs, its outputs requantized
//   (f computed on the dequantized inputs, as in the PT2E reference). Quantized
//   STATIC inputs (weight-only fp16a8w, quantized gamma/tables) are dequantized once at init.
#include <cmath>
#include <cstring>
#include <string>

#include "qnn_payload_generated.h"

#include "backends/qualcomm/runtime/engine/Quant.h"
#include "backends/qualcomm/runtime/engine/kernels/KernelUtil.h"

namespace qnn_delegate {
namespace engine {
namespace {

bool op_has_quant(const OpView& v) {
  for (const TensorInfo* t : v.inputs)
    if (t->is_quantized()) return true;
  for (const TensorInfo* t : v.outputs)
    if (t->is_quantized()) return true;
  return false;
}

// The op's row of the generated op table (ops.toml); nullptr for a type the table lacks.
const ops::OpTraits* traits_of(const OpView& v) { return ops::find_op(v.type); }

bool is_op(const OpView& v, ops::OpType type) { return v.type == ops::op_name(type); }

// Moves bytes only (op table: data_movement).
bool is_data_movement(const OpView& v) {
  const ops::OpTraits* t = traits_of(v);
  return t != nullptr && t->data_movement;
}

bool is_index_tensor(const TensorInfo& t) { return t.dtype == DType::INT_32 || t.dtype == DType::INT_64; }

// All data tensors quantized with the same data type and encoding.
bool shares_one_encoding(const OpView& v) {
  const TensorInfo* first = v.outputs.empty() ? nullptr : v.outputs[0];
  if (first == nullptr || !first->is_quantized()) return false;
  auto same = [first](const TensorInfo* t) { return t->dtype == first->dtype && t->quant.same_as(first->quant); };
  for (const TensorInfo* t : v.outputs)
    if (!same(t)) return false;
  for (size_t i = 0; i < v.inputs.size(); ++i) {
    const bool gather_indices = is_op(v, ops::OpType::Gather) && i == 1 && is_index_tensor(*v.inputs[i]);
    if (!gather_indices && !same(v.inputs[i])) return false;
  }
  return true;
}

// QNN HTP's output quantization of 8-bit GroupNorm / InstanceNorm (measured on QNN 2.51,
// SM8650, one-op graphs with uint8 IO): in float16, code = floor(h(h(h(y) * h(1/scale)) +
// h(zero point)) + 1/2), h = round to float16. 96.2% -> 99.1% of codes equal to QNN's.
void quantize_u8_half(const float* x, uint8_t* q, size_t n, const QuantParams& p) {
  const float inv = round_to_half(float(1.0 / double(p.scale)));
  const float zero = round_to_half(-float(p.offset));
  for (size_t i = 0; i < n; ++i) {
    float r = std::floor(round_to_half(round_to_half(round_to_half(x[i]) * inv) + zero) + 0.5f);
    r = r < float(p.qmin) ? float(p.qmin) : (r > float(p.qmax) ? float(p.qmax) : r);
    q[i] = static_cast<uint8_t>(r != r ? float(p.qmin) : r);
  }
}

bool requantizes_in_half(const OpView& v, const KernelEnv& env) {
  return !env.reference_only && (is_op(v, ops::OpType::GroupNorm) || is_op(v, ops::OpType::InstanceNorm));
}

// Float kernel on float views of the op's tensors (local ids 0..n-1).
class DequantWrappedKernel final : public Kernel {
 public:
  static constexpr int kPassThrough = -1;
  static constexpr int kStaticFloat = -2;

  Status init(const OpView& v, KernelEnv& env, KernelFactory float_factory) {
    half_requant_ = requantizes_in_half(v, env);
    const size_t n = v.inputs.size() + v.outputs.size();
    locals_.reserve(n);  // stable addresses for the inner OpView
    ptrs_.assign(n, nullptr);
    OpView inner;
    inner.op = v.op;
    inner.graph_name = v.graph_name;
    inner.name = v.name;
    inner.type = v.type;
    for (const TensorInfo* t : v.inputs) {
      QNN_RETURN_IF_ERROR(add_local(v, *t, false, env));
      inner.inputs.push_back(&locals_.back());
    }
    for (const TensorInfo* t : v.outputs) {
      QNN_RETURN_IF_ERROR(add_local(v, *t, true, env));
      inner.outputs.push_back(&locals_.back());
    }
    QNN_RETURN_IF_ERROR(float_factory(inner, env, inner_));
    if (inner_) path_ = std::string("dequant+") + inner_->path();
    return Status::Ok();
  }
  const char* path() const override { return path_.c_str(); }

  Status run(const RunContext& ctx) const override {
    char* scratch = static_cast<char*>(ctx.scratch);
    for (const Slot& s : slots_) {
      ptrs_[s.local] = scratch + s.scratch_offset;
      if (!s.is_output) {
        dequantize_any(ctx.ptrs[s.graph_id], reinterpret_cast<float*>(scratch + s.scratch_offset), s.numel, s.dtype,
                       s.qp);
      }
    }
    for (const auto& p : pass_through_) ptrs_[p.first] = ctx.ptrs[p.second];
    RunContext inner_ctx;
    inner_ctx.ptrs = ptrs_.data();
    inner_ctx.scratch = scratch + own_scratch_;
    QNN_RETURN_IF_ERROR(inner_->run(inner_ctx));
    for (const Slot& s : slots_) {
      if (s.is_output && half_requant_ && s.dtype == DType::UFIXED_POINT_8) {
        quantize_u8_half(reinterpret_cast<const float*>(scratch + s.scratch_offset),
                         static_cast<uint8_t*>(ctx.ptrs[s.graph_id]), s.numel, s.qp);
      } else if (s.is_output) {
        quantize_any(reinterpret_cast<const float*>(scratch + s.scratch_offset), ctx.ptrs[s.graph_id], s.numel, s.dtype,
                     s.qp);
      }
    }
    return Status::Ok();
  }
  size_t scratch_bytes() const override { return own_scratch_ + inner_->scratch_bytes(); }
  size_t owned_bytes() const override {
    size_t n = inner_->owned_bytes();
    for (const Buffer& b : static_floats_) n += b.size();
    return n;
  }

 private:
  struct Slot {
    uint32_t local, graph_id;
    DType dtype;
    QuantParams qp;
    size_t scratch_offset, numel;
    bool is_output;
  };

  Status add_local(const OpView& v, const TensorInfo& t, bool is_output, KernelEnv& env) {
    const uint32_t local = uint32_t(locals_.size());
    locals_.push_back(t);
    TensorInfo& f = locals_.back();
    f.id = local;
    if (!t.is_quantized()) {
      pass_through_.push_back({local, t.id});
      return Status::Ok();
    }
    f.dtype = DType::FLOAT_32;
    f.quant = QuantInfo();
    f.nbytes = t.numel * sizeof(float);
    if (t.kind == TensorKind::STATIC) return dequantize_static_input(v, t, f, env);
    if (!is_quant_activation(t)) {
      return v.fail(ErrorKind::NotSupported, "tensor '%s' (%s) is not a per-tensor activation", t.name.c_str(),
                    dtype_name(t.dtype));
    }
    slots_.push_back({local, t.id, t.dtype, quant_params_of(t), own_scratch_, t.numel, is_output});
    own_scratch_ += align_up(f.nbytes);
    return Status::Ok();
  }

  Status dequantize_static_input(const OpView& v, const TensorInfo& t, TensorInfo& f, KernelEnv& env) {
    Buffer buf(env.allocator, f.nbytes);
    if (!buf.valid()) {
      return v.fail(ErrorKind::MemoryAllocationFailed, "cannot allocate %zu bytes to dequantize '%s'", f.nbytes,
                    t.name.c_str());
    }
    dequantize_static(t, buf.as<float>());
    if (env.fp16) round_to_half_inplace(buf.as<float>(), t.numel);
    f.static_data = buf.data();
    ptrs_[f.id] = buf.data();
    static_floats_.push_back(std::move(buf));
    return Status::Ok();
  }

  std::vector<TensorInfo> locals_;
  std::vector<Slot> slots_;
  bool half_requant_ = false;                                // 8-bit outputs quantized as HTP does (quantize_u8_half)
  std::vector<std::pair<uint32_t, uint32_t>> pass_through_;  // local id, graph id
  std::vector<Buffer> static_floats_;
  mutable std::vector<void*> ptrs_;  // by local id; rewritten on every run
  size_t own_scratch_ = 0;
  KernelPtr inner_;
  std::string path_;  // "dequant+" and the float kernel's path
};

// Output code is a function of one input code (op table: lut).
bool is_unary_lut_op(const OpView& v) {
  const ops::OpTraits* t = traits_of(v);
  return t != nullptr && t->unary_lut;
}

// Unary quantized op as a table of output codes by input code:
// - QNN's own table when the payload carries one (Op.lookup_table, measured on QNN HTP at
//   lowering: 256 codes for uint8, 65536 for uint16), so the engine computes what QNN does;
// - else a table built at init by running the float kernel on every dequantized input value
//   (256 for uint8, 65536 for uint16; same numbers as the wrapped path, which dequantizes,
//   runs the same elementwise float kernel and quantizes each element alike).
class LutKernel final : public Kernel {
 public:
  const char* path() const override { return "lut"; }
  Status init_from_payload(const OpView& v, const flatbuffers::Vector<uint8_t>& table, KernelEnv& env) {
    bind(v);
    const size_t bytes = table.size();
    if (wide_) {
      table16_ = Buffer(env.allocator, bytes);
      if (!table16_.valid()) {
        return v.fail(ErrorKind::MemoryAllocationFailed, "cannot allocate %zu bytes for its lookup table", bytes);
      }
      uint16_t* t = table16_.as<uint16_t>();
      for (size_t i = 0; i < 65536; ++i) t[i] = uint16_t(table.Get(2 * i) | (table.Get(2 * i + 1) << 8));
    } else {
      std::memcpy(lut_, table.data(), 256);
    }
    return Status::Ok();
  }

  Status init_from_float(const OpView& v, KernelEnv& env, KernelFactory float_factory) {
    bind(v);
    const size_t codes = wide_ ? 65536 : 256;
    TensorInfo x, y;
    x.id = 0;
    x.name = v.inputs[0]->name;
    y.id = 1;
    y.name = v.outputs[0]->name;
    for (TensorInfo* t : {&x, &y}) {
      t->dims = {uint32_t(codes)};
      t->numel = codes;
      t->nbytes = codes * sizeof(float);
    }
    OpView table_view;
    table_view.op = v.op;
    table_view.graph_name = v.graph_name;
    table_view.name = v.name;
    table_view.type = v.type;
    table_view.inputs = {&x};
    table_view.outputs = {&y};
    KernelPtr table_kernel;
    QNN_RETURN_IF_ERROR(float_factory(table_view, env, table_kernel));
    std::vector<float> xs(codes), ys(codes);
    std::vector<char> scratch(table_kernel->scratch_bytes() + 1);
    const QuantParams pin = quant_params_of(*v.inputs[0]), pout = quant_params_of(*v.outputs[0]);
    for (size_t q = 0; q < codes; ++q) xs[q] = float(int32_t(q) + pin.offset) * pin.scale;
    void* ptrs[2] = {xs.data(), ys.data()};
    RunContext ctx;
    ctx.ptrs = ptrs;
    ctx.scratch = scratch.data();
    QNN_RETURN_IF_ERROR(table_kernel->run(ctx));
    if (wide_) {
      table16_ = Buffer(env.allocator, codes * sizeof(uint16_t));
      if (!table16_.valid()) {
        return v.fail(ErrorKind::MemoryAllocationFailed, "cannot allocate its 65536-code lookup table");
      }
      for (size_t q = 0; q < codes; ++q) table16_.as<uint16_t>()[q] = quantize_one<uint16_t>(ys[q], pout);
      return Status::Ok();
    }
    for (size_t q = 0; q < codes; ++q) lut_[q] = quantize_one<uint8_t>(ys[q], pout);
    return Status::Ok();
  }

  Status run(const RunContext& ctx) const override {
    if (wide_) {
      const uint16_t* x = ctx.at<const uint16_t>(in_);
      uint16_t* y = ctx.at<uint16_t>(out_);
      const uint16_t* t = table16_.as<uint16_t>();
      for (size_t i = 0; i < numel_; ++i) y[i] = t[x[i]];
      return Status::Ok();
    }
    const uint8_t* x = ctx.at<const uint8_t>(in_);
    uint8_t* y = ctx.at<uint8_t>(out_);
    for (size_t i = 0; i < numel_; ++i) y[i] = lut_[x[i]];
    return Status::Ok();
  }
  size_t owned_bytes() const override { return table16_.size(); }

 private:
  void bind(const OpView& v) {
    in_ = v.inputs[0]->id;
    out_ = v.outputs[0]->id;
    numel_ = v.inputs[0]->numel;
    wide_ = v.inputs[0]->dtype == DType::UFIXED_POINT_16;
  }

  uint32_t in_ = 0, out_ = 0;
  size_t numel_ = 0;
  bool wide_ = false;
  uint8_t lut_[256] = {};
  Buffer table16_;  // uint16 ops: 65536 output codes
};

// A unary op from a per-tensor uint8 (or uint16) activation to one of the same data type and dims.
bool is_table_op(const OpView& v, DType dtype) {
  return is_unary_lut_op(v) && v.inputs.size() == 1 && v.outputs.size() == 1 && v.inputs[0]->dtype == dtype &&
         v.outputs[0]->dtype == dtype && is_quant_activation(*v.inputs[0]) && is_quant_activation(*v.outputs[0]) &&
         v.inputs[0]->dims == v.outputs[0]->dims;
}

bool takes_lut(const OpView& v) {
  return is_table_op(v, DType::UFIXED_POINT_8) || is_table_op(v, DType::UFIXED_POINT_16);
}

// The op's Op.lookup_table, or nullptr when it has none.
const flatbuffers::Vector<uint8_t>* stored_table(const OpView& v) {
  return v.op != nullptr ? v.op->lookup_table() : nullptr;
}

// silu as lowered here: ElementWiseMultiply(x, gate = Sigmoid(x) in FLOAT_32); with a stored
// table its output is table[x] (the gate is left unread).
bool is_silu_multiply(const OpView& v, DType dtype) {
  return is_op(v, ops::OpType::ElementWiseMultiply) && v.inputs.size() == 2 && v.outputs.size() == 1 &&
         v.inputs[0]->dtype == dtype && v.outputs[0]->dtype == dtype && v.inputs[1]->dtype == DType::FLOAT_32 &&
         is_quant_activation(*v.inputs[0]) && is_quant_activation(*v.outputs[0]) &&
         v.inputs[0]->dims == v.outputs[0]->dims && v.inputs[1]->dims == v.outputs[0]->dims;
}

// A stored table must belong to a unary uint8 / uint16 op (or silu's Multiply) and hold one
// code per input code.
Status check_stored_table(const OpView& v, const flatbuffers::Vector<uint8_t>& table) {
  const bool narrow = is_table_op(v, DType::UFIXED_POINT_8) || is_silu_multiply(v, DType::UFIXED_POINT_8);
  const bool wide = is_table_op(v, DType::UFIXED_POINT_16) || is_silu_multiply(v, DType::UFIXED_POINT_16);
  if (!narrow && !wide) {
    return v.fail(ErrorKind::InvalidProgram,
                  "malformed payload: lookup_table on an op that is not a unary uint8 / uint16 "
                  "per-tensor activation op (or silu's Multiply by a FLOAT_32 sigmoid gate)");
  }
  const size_t expected = narrow ? 256 : 65536 * 2;
  if (table.size() != expected) {
    return v.fail(ErrorKind::InvalidProgram, "malformed payload: lookup_table has %u bytes, expected %zu (%s codes)",
                  table.size(), expected, narrow ? "256 uint8" : "65536 uint16");
  }
  return Status::Ok();
}

Status create_wrapped(const OpView& v, KernelEnv& graph_env, KernelFactory float_factory, KernelPtr& out) {
  KernelEnv env = graph_env;  // the float kernel writes scratch, not the op's outputs
  env.round_fp16_outputs = false;
  if (takes_lut(v) && !env.reference_only) {
    std::unique_ptr<LutKernel> k(new LutKernel());
    QNN_RETURN_IF_ERROR(k->init_from_float(v, env, float_factory));
    out = std::move(k);
    return Status::Ok();
  }
  std::unique_ptr<DequantWrappedKernel> k(new DequantWrappedKernel());
  QNN_RETURN_IF_ERROR(k->init(v, env, float_factory));
  out = std::move(k);
  return Status::Ok();
}

}  // namespace

// kernels/layer_norm.cpp: quantized LayerNorm as QNN computes it (`out` left empty when not applicable).
Status create_layer_norm_quant(const OpView& v, KernelEnv& env, KernelPtr& out);
// kernels/softmax.cpp: quantized Softmax over the last axis (the wrapper's numbers, fused, threaded).
Status create_softmax_quant(const OpView& v, KernelEnv& env, KernelPtr& out);

Status create_dispatched_kernel(const OpView& v, KernelEnv& env, KernelPtr& out) {
  const KernelRegistry& floats = float_kernel_registry();
  const auto f = floats.find(v.type);
  if (const flatbuffers::Vector<uint8_t>* table = stored_table(v)) {
    QNN_RETURN_IF_ERROR(check_stored_table(v, *table));
    if (!env.reference_only) {
      std::unique_ptr<LutKernel> k(new LutKernel());
      QNN_RETURN_IF_ERROR(k->init_from_payload(v, *table, env));
      out = std::move(k);
      return Status::Ok();
    }
  }
  const bool quantized = op_has_quant(v);
  if (!quantized && f != floats.end()) return f->second(v, env, out);
  const KernelRegistry& quants = quant_kernel_registry();
  const auto q = quants.find(v.type);
  if (q != quants.end()) {
    QNN_RETURN_IF_ERROR(q->second(v, env, out));
    if (out) return Status::Ok();
  }
  if (f == floats.end()) {
    return v.fail(ErrorKind::NotSupported, "no kernel accepts the data types of this op");
  }
  if (is_data_movement(v) && shares_one_encoding(v)) return f->second(v, env, out);
  if (is_op(v, ops::OpType::LayerNorm) && !env.reference_only) {
    QNN_RETURN_IF_ERROR(create_layer_norm_quant(v, env, out));
    if (out) return Status::Ok();
  }
  if (is_op(v, ops::OpType::Softmax) && !env.reference_only) {
    QNN_RETURN_IF_ERROR(create_softmax_quant(v, env, out));
    if (out) return Status::Ok();
  }
  return create_wrapped(v, env, f->second, out);
}

}  // namespace engine
}  // namespace qnn_delegate
