#include "backends/qualcomm/runtime/qnn/QnnTensorDesc.h"

#include <cstdlib>
#include <cstring>
#include <map>
#include <set>

#include "backends/qualcomm/runtime/engine/HtpRequant.h"

namespace qnn_delegate {
namespace qnn {

size_t qnn_element_size(QnnDType dtype) {
  switch (dtype) {
    case kQnnInt8:
    case kQnnUInt8:
    case kQnnSFixed8:
    case kQnnUFixed8:
    case kQnnBool8:
    case kQnnSFixed4:
    case kQnnUFixed4:
      return 1;
    case kQnnInt16:
    case kQnnUInt16:
    case kQnnFloat16:
    case kQnnSFixed16:
    case kQnnUFixed16:
      return 2;
    case kQnnInt32:
    case kQnnUInt32:
    case kQnnFloat32:
    case kQnnSFixed32:
      return 4;
    case kQnnInt64:
    case kQnnUInt64:
      return 8;
    default:
      return 0;
  }
}

namespace {

QnnTensorKind kind_of(fb::QnnTensorType t) {
  switch (t) {
    case fb::QnnTensorType::APP_WRITE:
      return kQnnAppWrite;
    case fb::QnnTensorType::APP_READ:
      return kQnnAppRead;
    case fb::QnnTensorType::APP_READWRITE:
      return kQnnAppReadWrite;
    case fb::QnnTensorType::STATIC:
      return kQnnStatic;
    case fb::QnnTensorType::NULL_TENSOR:
      return kQnnNullTensor;
    default:
      return kQnnNative;
  }
}

// Per-axis scales / offsets of the payload as parallel arrays.
void copy_axis(const fb::QuantizeParams* q, TensorDesc& d) {
  const size_t n = q->scales() ? q->scales()->size() : 0;
  d.scales.assign(n, 0.f);
  d.offsets.assign(n, 0);
  d.scale_offsets.resize(n);
  for (size_t i = 0; i < n; ++i) {
    d.scales[i] = q->scales()->Get(i);
    d.offsets[i] = (q->offsets() && i < q->offsets()->size()) ? q->offsets()->Get(i) : 0;
    d.scale_offsets[i] = {d.scales[i], d.offsets[i]};
  }
}

Status fill_quant(const fb::QuantizeParams* q, TensorDesc& d, bool sub_byte) {
  QnnQuantParams& out = core(d.tensor).quant;
  std::memset(&out, 0, sizeof(out));
  out.definition = kQnnQuantDefinitionUndefined;
  out.encoding = kQnnEncUndefined;
  if (q == nullptr || q->encoding() == fb::QnnQuantEncoding::UNDEFINED) return Status::Ok();
  out.definition = kQnnQuantDefined;
  const uint32_t bits = q->bitwidth();
  switch (q->encoding()) {
    case fb::QnnQuantEncoding::SCALE_OFFSET:
    case fb::QnnQuantEncoding::BW_SCALE_OFFSET:
      if (sub_byte || q->encoding() == fb::QnnQuantEncoding::BW_SCALE_OFFSET) {
        out.encoding = kQnnEncBwScaleOffset;
        out.bw_scale_offset = {bits, q->scale(), q->offset()};
      } else {
        out.encoding = kQnnEncScaleOffset;
        out.scale_offset = {q->scale(), q->offset()};
      }
      return Status::Ok();
    case fb::QnnQuantEncoding::AXIS_SCALE_OFFSET:
    case fb::QnnQuantEncoding::BW_AXIS_SCALE_OFFSET:
      copy_axis(q, d);
      if (sub_byte || q->encoding() == fb::QnnQuantEncoding::BW_AXIS_SCALE_OFFSET) {
        out.encoding = kQnnEncBwAxisScaleOffset;
        out.bw_axis_scale_offset = {bits, q->axis(), uint32_t(d.scales.size()), d.scales.data(), d.offsets.data()};
      } else {
        out.encoding = kQnnEncAxisScaleOffset;
        out.axis_scale_offset = {q->axis(), uint32_t(d.scale_offsets.size()), d.scale_offsets.data()};
      }
      return Status::Ok();
    case fb::QnnQuantEncoding::BLOCKWISE_EXPANSION: {
      // LPBQ goes to QNN as the same weight in 8-bit per-channel codes k * q (see
      // expand_block_scales): QNN 2.51 computes its own BLOCKWISE_EXPANSION exactly so where it
      // works, and wrongly or not at all elsewhere.
      copy_axis(q, d);
      const size_t channels = d.scales.size();
      const size_t total = q->block_scales() ? q->block_scales()->size() : 0;
      if (channels == 0 || total % channels != 0 || q->block_size() == 0) {
        return make_error(ErrorKind::InvalidProgram,
                          "tensor '%s': LPBQ has %zu block scales for "
                          "%zu channels (block size %u)",
                          d.name.c_str(), total, channels, q->block_size());
      }
      d.block_scales.assign(q->block_scales()->begin(), q->block_scales()->end());
      out.encoding = kQnnEncAxisScaleOffset;
      out.axis_scale_offset = {q->axis(), uint32_t(channels), d.scale_offsets.data()};
      return Status::Ok();
    }
    default:
      return make_error(ErrorKind::NotSupported,
                        "tensor '%s': quantization encoding %d has no QNN "
                        "counterpart",
                        d.name.c_str(), int(q->encoding()));
  }
}

// LPBQ codes q (one int8 per element) -> k * q with k the block scale of the element's
// (channel, block): codes in [-120, 105] for 4-bit q and k <= 15.
Status expand_block_scales(const fb::QuantizeParams* q, TensorDesc& d) {
  const int rank = int(d.dims.size());
  const int axis = q->axis(), block_axis = q->block_axis();
  if (axis < 0 || axis >= rank || block_axis < 0 || block_axis >= rank || axis == block_axis) {
    return make_error(ErrorKind::InvalidProgram,
                      "tensor '%s': LPBQ axis %d / block axis %d of a "
                      "rank-%d tensor",
                      d.name.c_str(), axis, block_axis, rank);
  }
  size_t axis_stride = 1, block_stride = 1;
  for (int i = rank - 1; i > axis; --i) axis_stride *= d.dims[i];
  for (int i = rank - 1; i > block_axis; --i) block_stride *= d.dims[i];
  const size_t channels = d.dims[axis], blocks = d.block_scales.size() / channels;
  if (channels != d.scales.size() || blocks * q->block_size() != d.dims[block_axis]) {
    return make_error(ErrorKind::InvalidProgram, "tensor '%s': LPBQ scales do not fit dims", d.name.c_str());
  }
  for (size_t i = 0; i < d.numel; ++i) {
    const size_t c = i / axis_stride % channels;
    const size_t b = i / block_stride % d.dims[block_axis] / q->block_size();
    const int32_t v = int32_t(int8_t(d.data[i])) * int32_t(d.block_scales[c * blocks + b]);
    if (v < -128 || v > 127) {
      return make_error(ErrorKind::InvalidProgram,
                        "tensor '%s': LPBQ code x block scale %d does "
                        "not fit int8",
                        d.name.c_str(), v);
    }
    d.data[i] = uint8_t(int8_t(v));
  }
  return Status::Ok();
}

// Sub-byte signed values packed low bits first -> one sign-extended int8 per element.
void unpack_sub_byte(const uint8_t* src, size_t src_size, uint32_t bits, size_t numel, std::vector<uint8_t>& dst) {
  const uint32_t per_byte = 8 / bits;
  const uint32_t mask = (1u << bits) - 1;
  dst.assign(numel, 0);
  for (size_t i = 0; i < numel && i / per_byte < src_size; ++i) {
    int32_t v = (src[i / per_byte] >> ((i % per_byte) * bits)) & mask;
    if (v & (1 << (bits - 1))) v -= (1 << bits);
    dst[i] = static_cast<uint8_t>(static_cast<int8_t>(v));
  }
}

void narrow_int64(const uint8_t* src, size_t numel, std::vector<uint8_t>& dst) {
  dst.resize(numel * 4);
  for (size_t i = 0; i < numel; ++i) {
    int64_t v;
    std::memcpy(&v, src + i * 8, 8);
    const int32_t n = static_cast<int32_t>(v);
    std::memcpy(dst.data() + i * 4, &n, 4);
  }
}

void set_header(TensorDesc& d, uint32_t version, QnnTensorKind kind, QnnDType dtype) {
  std::memset(&d.tensor, 0, sizeof(d.tensor));
  d.tensor.version = version;
  QnnTensorV1& c = core(d.tensor);
  c.name = d.name.c_str();
  c.kind = kind;
  c.data_format = 0;
  c.dtype = dtype;
  c.rank = uint32_t(d.dims.size());
  c.dims = d.dims.empty() ? nullptr : d.dims.data();
  c.mem_kind = kQnnMemRaw;
  if (version == 2) d.tensor.v2.sparse.layout = 0x7FFFFFFF;
  d.numel = 1;
  for (uint32_t v : d.dims) d.numel *= v;
  d.element_size = qnn_element_size(dtype);
}

}  // namespace

Status describe_tensor(const fb::Tensor* t, uint32_t version, std::unique_ptr<TensorDesc>& out) {
  out.reset(new TensorDesc());
  TensorDesc& d = *out;
  d.name = t->name()->str();
  if (t->dims()) d.dims.assign(t->dims()->begin(), t->dims()->end());
  auto dtype = static_cast<QnnDType>(static_cast<int32_t>(t->data_type()));
  const bool sub_byte = dtype == kQnnSFixed4 || dtype == kQnnUFixed4;
  QnnDType qnn_dtype = dtype;
  if (dtype == kQnnInt64) qnn_dtype = kQnnInt32;
  if (dtype == kQnnSFixed4) qnn_dtype = kQnnSFixed8;
  if (dtype == kQnnUFixed4) qnn_dtype = kQnnUFixed8;
  if (qnn_element_size(qnn_dtype) == 0) {
    return make_error(ErrorKind::NotSupported, "tensor '%s': data type %d has no QNN counterpart", d.name.c_str(),
                      int(dtype));
  }
  set_header(d, version, kind_of(t->type()), qnn_dtype);
  d.int64_narrowed = dtype == kQnnInt64;
  QNN_RETURN_IF_ERROR(fill_quant(t->quant(), d, sub_byte));
  if (t->type() == fb::QnnTensorType::STATIC) {
    const uint8_t* src = t->data() ? t->data()->data() : nullptr;
    const size_t size = t->data() ? t->data()->size() : 0;
    if (sub_byte) {
      const uint32_t bits = t->quant() ? t->quant()->bitwidth() : 4;
      unpack_sub_byte(src, size, bits == 0 || bits > 4 ? 4 : bits, d.numel, d.data);
    } else if (d.int64_narrowed) {
      if (size < d.numel * 8) {
        return make_error(ErrorKind::InvalidProgram, "tensor '%s': %zu data bytes for %zu int64", d.name.c_str(), size,
                          d.numel);
      }
      narrow_int64(src, d.numel, d.data);
    } else {
      if (size < d.nbytes()) {
        return make_error(ErrorKind::InvalidProgram, "tensor '%s': %zu data bytes, %zu expected", d.name.c_str(), size,
                          d.nbytes());
      }
      d.data.assign(src, src + d.nbytes());
    }
    const bool lpbq = t->quant() && t->quant()->encoding() == fb::QnnQuantEncoding::BLOCKWISE_EXPANSION;
    if (lpbq && d.element_size != 1) {
      return make_error(ErrorKind::NotSupported,
                        "tensor '%s': LPBQ codes of %zu bytes (int8 or "
                        "4-bit expected)",
                        d.name.c_str(), d.element_size);
    }
    if (lpbq) QNN_RETURN_IF_ERROR(expand_block_scales(t->quant(), d));
    core(d.tensor).buffer = {d.data.data(), uint32_t(d.data.size())};
  } else if (t->quant() && t->quant()->encoding() == fb::QnnQuantEncoding::BLOCKWISE_EXPANSION) {
    return make_error(ErrorKind::NotSupported, "tensor '%s': LPBQ encoding on a non-static tensor", d.name.c_str());
  }
  return Status::Ok();
}

namespace {

bool has_weights(const std::string& type) {
  return type == "Conv2d" || type == "DepthWiseConv2d" || type == "TransposeConv2d" || type == "Conv3d" ||
         type == "TransposeConv3d" || type == "FullyConnected";
}

// 2^(8 - bits) for a weighted op whose sub-byte weights QNN computes better as 8-bit codes
// (engine::sub_byte_widening), else 1. The host engine takes the same decision from the
// same tensors (QuantGemm.cpp, prepare_requant).
int32_t widening_of(const fb::Graph* g, const fb::Op* op, const std::vector<std::unique_ptr<TensorDesc>>& tensors) {
  const auto* in = op->inputs();
  const auto* out = op->outputs();
  if (!has_weights(op->type()->str()) || in == nullptr || in->size() < 2 || out == nullptr || out->size() < 1) {
    return 1;
  }
  const auto* all = g->tensors();
  for (size_t k = 0; k < in->size() && k < 3; ++k) {
    if (in->Get(k) >= all->size() || in->Get(k) >= tensors.size()) return 1;
  }
  if (out->Get(0) >= all->size()) return 1;
  const fb::Tensor* x = all->Get(in->Get(0));
  const fb::Tensor* w = all->Get(in->Get(1));
  const fb::Tensor* y = all->Get(out->Get(0));
  const fb::QuantizeParams* wq = w->quant();
  if (w->type() != fb::QnnTensorType::STATIC || w->data_type() != fb::QnnDataType::SFIXED_POINT_4 || wq == nullptr ||
      (wq->encoding() != fb::QnnQuantEncoding::SCALE_OFFSET &&
       wq->encoding() != fb::QnnQuantEncoding::BW_SCALE_OFFSET &&
       wq->encoding() != fb::QnnQuantEncoding::AXIS_SCALE_OFFSET &&
       wq->encoding() != fb::QnnQuantEncoding::BW_AXIS_SCALE_OFFSET)) {
    return 1;
  }
  const TensorDesc* wd = tensors[in->Get(1)].get();
  if (wd == nullptr) return 1;
  for (int32_t o : wd->offsets) {
    if (o != 0) return 1;
  }
  if (wd->scales.empty() && wq->offset() != 0) return 1;
  const bool u16 =
      x->data_type() == fb::QnnDataType::UFIXED_POINT_16 && y->data_type() == fb::QnnDataType::UFIXED_POINT_16;
  int64_t max_bias = 0;
  if (in->size() > 2) {
    const fb::Tensor* b = all->Get(in->Get(2));
    const TensorDesc* bd = tensors[in->Get(2)].get();
    if (b->data_type() == fb::QnnDataType::SFIXED_POINT_32) {
      if (bd == nullptr || b->type() != fb::QnnTensorType::STATIC) return 1;
      for (size_t i = 0; i + 4 <= bd->data.size(); i += 4) {
        int32_t v = 0;
        std::memcpy(&v, bd->data.data() + i, 4);
        max_bias = std::max<int64_t>(max_bias, std::llabs(int64_t(v)));
      }
    }
  }
  return engine::sub_byte_widening(wq->bitwidth() ? wq->bitwidth() : 4, u16, max_bias);
}

void widen_weights(TensorDesc& d, int32_t f) {
  for (auto& byte : d.data) byte = uint8_t(int8_t(int32_t(int8_t(byte)) * f));
  QnnQuantParams& q = core(d.tensor).quant;
  if (q.encoding == kQnnEncBwAxisScaleOffset || q.encoding == kQnnEncAxisScaleOffset) {
    const uint32_t axis =
        q.encoding == kQnnEncBwAxisScaleOffset ? q.bw_axis_scale_offset.axis : q.axis_scale_offset.axis;
    for (size_t i = 0; i < d.scales.size(); ++i) {
      d.scales[i] /= float(f);
      d.scale_offsets[i] = {d.scales[i], 0};
    }
    q.encoding = kQnnEncAxisScaleOffset;
    q.axis_scale_offset = {int32_t(axis), uint32_t(d.scale_offsets.size()), d.scale_offsets.data()};
  } else {
    const float scale = q.encoding == kQnnEncBwScaleOffset ? q.bw_scale_offset.scale : q.scale_offset.scale;
    q.encoding = kQnnEncScaleOffset;
    q.scale_offset = {scale / float(f), 0};
  }
}

void widen_bias(TensorDesc& d, int32_t f) {
  for (size_t i = 0; i + 4 <= d.data.size(); i += 4) {
    int32_t v = 0;
    std::memcpy(&v, d.data.data() + i, 4);
    v *= f;
    std::memcpy(d.data.data() + i, &v, 4);
  }
  QnnQuantParams& q = core(d.tensor).quant;
  if (q.encoding == kQnnEncAxisScaleOffset) {
    for (size_t i = 0; i < d.scales.size(); ++i) {
      d.scales[i] /= float(f);
      d.scale_offsets[i].scale = d.scales[i];
    }
  } else if (q.encoding == kQnnEncScaleOffset) {
    q.scale_offset.scale /= float(f);
  } else if (q.encoding == kQnnEncBwScaleOffset) {
    q.bw_scale_offset.scale /= float(f);
  } else if (q.encoding == kQnnEncBwAxisScaleOffset) {
    for (size_t i = 0; i < d.scales.size(); ++i) d.scales[i] /= float(f);
  }
}

}  // namespace

void widen_sub_byte_weights(const fb::Graph* g, std::vector<std::unique_ptr<TensorDesc>>& tensors) {
  const size_t num_ops = g->ops() ? g->ops()->size() : 0;
  if (num_ops == 0 || g->tensors() == nullptr) return;
  // factor per weight / bias tensor; -1 when its ops disagree (a shared tensor): left as is
  std::map<uint32_t, int32_t> factor;
  std::vector<int32_t> op_factor(num_ops, 1);
  std::set<uint32_t> done;  // tensors widened (once, however many ops use them)
  auto vote = [&](uint32_t id, int32_t f) {
    auto it = factor.find(id);
    if (it == factor.end())
      factor[id] = f;
    else if (it->second != f)
      it->second = -1;
  };
  for (size_t i = 0; i < num_ops; ++i) {
    const fb::Op* op = g->ops()->Get(i);
    if (!has_weights(op->type()->str()) || op->inputs() == nullptr || op->inputs()->size() < 2) continue;
    op_factor[i] = widening_of(g, op, tensors);
    for (size_t k = 1; k < op->inputs()->size() && k < 3; ++k) vote(op->inputs()->Get(k), op_factor[i]);
  }
  for (size_t i = 0; i < num_ops; ++i) {
    const fb::Op* op = g->ops()->Get(i);
    if (op_factor[i] <= 1) continue;
    bool agreed = true;
    for (size_t k = 1; k < op->inputs()->size() && k < 3; ++k) {
      agreed = agreed && factor[op->inputs()->Get(k)] == op_factor[i];
    }
    if (!agreed) continue;
    const uint32_t w = op->inputs()->Get(1);
    if (done.insert(w).second) widen_weights(*tensors[w], op_factor[i]);
    if (op->inputs()->size() > 2) {
      const uint32_t b = op->inputs()->Get(2);
      if (tensors[b] && g->tensors()->Get(b)->data_type() == fb::QnnDataType::SFIXED_POINT_32 &&
          done.insert(b).second) {
        widen_bias(*tensors[b], op_factor[i]);
      }
    }
  }
}

Status describe_param_tensor(const fb::Param* p, const std::string& name, std::unique_ptr<TensorDesc>& out) {
  out.reset(new TensorDesc());
  TensorDesc& d = *out;
  d.name = name;
  if (p->dims()) d.dims.assign(p->dims()->begin(), p->dims()->end());
  auto dtype = static_cast<QnnDType>(static_cast<int32_t>(p->data_type()));
  if (dtype == kQnnInt64) dtype = kQnnInt32;
  if (dtype == kQnnUInt64) dtype = kQnnUInt32;
  set_header(d, 1, kQnnStatic, dtype);
  core(d.tensor).quant.definition = kQnnQuantDefinitionUndefined;
  core(d.tensor).quant.encoding = kQnnEncUndefined;
  d.data.assign(d.nbytes(), 0);
  for (size_t i = 0; i < d.numel; ++i) {
    uint8_t* dst = d.data.data() + i * d.element_size;
    if (dtype == kQnnFloat32) {
      const float v = (p->float_data() && i < p->float_data()->size()) ? p->float_data()->Get(i) : 0.f;
      std::memcpy(dst, &v, 4);
      continue;
    }
    const int64_t v = (p->int_data() && i < p->int_data()->size()) ? p->int_data()->Get(i) : 0;
    if (d.element_size == 4) {
      const int32_t n = int32_t(v);
      std::memcpy(dst, &n, 4);
    } else if (d.element_size == 2) {
      const int16_t n = int16_t(v);
      std::memcpy(dst, &n, 2);
    } else if (d.element_size == 1) {
      dst[0] = uint8_t(v);
    } else {
      return make_error(ErrorKind::NotSupported, "param '%s': data type %d not supported", name.c_str(), int(dtype));
    }
  }
  core(d.tensor).buffer = {d.data.data(), uint32_t(d.data.size())};
  return Status::Ok();
}

}  // namespace qnn
}  // namespace qnn_delegate
