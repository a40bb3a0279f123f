// GraphExecutor: loading and checking the tensors and graph inputs/outputs.
#include <cstring>

#include "backends/qualcomm/runtime/engine/GraphExecutor.h"
#include "backends/qualcomm/runtime/engine/Quant.h"

namespace qnn_delegate {
namespace engine {

namespace {

constexpr size_t kMaxRank = 8;
constexpr size_t kMaxTensorBytes = size_t(1) << 40;

bool is_supported_kind(TensorKind kind) {
  return kind == TensorKind::APP_WRITE || kind == TensorKind::APP_READ || kind == TensorKind::NATIVE ||
         kind == TensorKind::STATIC;
}

}  // namespace

Status GraphExecutor::load_tensors(const ::qnn_delegate::Graph* graph) {
  const auto* tensors = graph->tensors();
  const size_t n = tensors ? tensors->size() : 0;
  const size_t n_inputs = graph->inputs() ? graph->inputs()->size() : 0;
  tensors_.reserve(n + n_inputs);  // room for fp16 input shadows: no reallocation
  tensors_.resize(n);
  static_buffers_.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    QNN_RETURN_IF_ERROR(load_tensor(tensors->Get(i), i));
  }
  return Status::Ok();
}

Status GraphExecutor::load_tensor(const ::qnn_delegate::Tensor* t, size_t index) {
  TensorInfo& info = tensors_[index];
  info.name = t->name()->str();
  const char* g = name_.c_str();
  if (t->id() != index) {
    return make_error(ErrorKind::InvalidProgram,
                      "graph '%s': tensor '%s' at index %zu has id %u (ids must equal their index)", g,
                      info.name.c_str(), index, t->id());
  }
  info.id = t->id();
  info.kind = t->type();
  info.dtype = t->data_type();
  // A FLOAT_16 tensor inside the graph (fp16a8w's Conv2d / FullyConnected take FLOAT_16 on QNN)
  // is held as FLOAT_32 here: float kernels run on float32 values, the Casts to FLOAT_16 become
  // copies, rounded to float16 like every float output of an fp16 graph. Graph inputs / outputs
  // keep FLOAT_16 (the caller's memory).
  if (info.dtype == DType::FLOAT_16 && (info.kind == TensorKind::NATIVE || info.kind == TensorKind::STATIC)) {
    info.dtype = DType::FLOAT_32;
  }
  if (!is_supported_kind(info.kind)) {
    return make_error(ErrorKind::NotSupported, "graph '%s': tensor '%s' has unsupported type %s", g, info.name.c_str(),
                      kind_name(info.kind));
  }
  if (element_bits(info.dtype) == 0) {
    return make_error(ErrorKind::InvalidProgram, "graph '%s': tensor '%s' has unknown data type %d", g,
                      info.name.c_str(), static_cast<int>(info.dtype));
  }
  if (t->dims() != nullptr) info.dims.assign(t->dims()->begin(), t->dims()->end());
  if (info.dims.size() > kMaxRank) {
    return make_error(ErrorKind::NotSupported, "graph '%s': tensor '%s' has rank %zu (max %zu)", g, info.name.c_str(),
                      info.dims.size(), kMaxRank);
  }
  size_t numel = 1;
  for (uint32_t d : info.dims) {
    if (d != 0 && numel > kMaxTensorBytes / d) {
      return make_error(ErrorKind::InvalidProgram, "graph '%s': tensor '%s' dims %s are too large", g,
                        info.name.c_str(), dims_to_string(info.dims).c_str());
    }
    numel *= d;
  }
  info.numel = numel;
  info.nbytes = storage_bytes(info.dtype, numel);
  if (info.nbytes > kMaxTensorBytes) {
    return make_error(ErrorKind::InvalidProgram, "graph '%s': tensor '%s' dims %s are too large", g, info.name.c_str(),
                      dims_to_string(info.dims).c_str());
  }
  QNN_RETURN_IF_ERROR(load_quant_info(t->quant(), name_, info));
  QNN_RETURN_IF_ERROR(load_dim_order(t, info));
  if (info.kind == TensorKind::STATIC) return copy_static_data(info, t);
  if (t->data() != nullptr && t->data()->size() != 0) {
    return make_error(ErrorKind::InvalidProgram, "graph '%s': tensor '%s' of type %s carries data (only STATIC may)", g,
                      info.name.c_str(), kind_name(info.kind));
  }
  return Status::Ok();
}

// A dim order must be a permutation of 0..rank-1, and only graph IO tensors carry one.
Status GraphExecutor::load_dim_order(const ::qnn_delegate::Tensor* t, TensorInfo& info) {
  if (t->dim_order() == nullptr || t->dim_order()->size() == 0) return Status::Ok();
  const char* g = name_.c_str();
  if (info.kind != TensorKind::APP_WRITE && info.kind != TensorKind::APP_READ) {
    return make_error(ErrorKind::InvalidProgram,
                      "graph '%s': tensor '%s' of type %s has a dim order (only graph inputs / "
                      "outputs may)",
                      g, info.name.c_str(), kind_name(info.kind));
  }
  info.dim_order.assign(t->dim_order()->begin(), t->dim_order()->end());
  std::vector<bool> seen(info.dim_order.size(), false);
  bool valid = info.dim_order.size() == info.dims.size();
  for (uint8_t d : info.dim_order) {
    if (!valid || d >= seen.size() || seen[d]) {
      valid = false;
      break;
    }
    seen[d] = true;
  }
  if (!valid) {
    return make_error(ErrorKind::InvalidProgram,
                      "graph '%s': tensor '%s' has a dim order that is not a permutation of its "
                      "%zu dims",
                      g, info.name.c_str(), info.dims.size());
  }
  return Status::Ok();
}

Status GraphExecutor::copy_static_data(TensorInfo& info, const ::qnn_delegate::Tensor* t) {
  const size_t have = t->data() ? t->data()->size() : 0;
  const bool from_half = t->data_type() == DType::FLOAT_16;  // held as FLOAT_32 (load_tensor)
  const DType stored = from_half ? DType::FLOAT_16 : info.dtype;
  const size_t want = from_half ? storage_bytes(DType::FLOAT_16, info.numel) : info.nbytes;
  if (have != want) {
    return make_error(ErrorKind::InvalidProgram,
                      "graph '%s': STATIC tensor '%s' has %zu data bytes, expected %zu "
                      "(dims %s, %s)",
                      name_.c_str(), info.name.c_str(), have, want, dims_to_string(info.dims).c_str(),
                      dtype_name(stored));
  }
  Buffer buf(&allocator_, info.nbytes);
  if (!buf.valid()) {
    return make_error(ErrorKind::MemoryAllocationFailed, "graph '%s': cannot allocate %zu bytes for STATIC tensor '%s'",
                      name_.c_str(), info.nbytes, info.name.c_str());
  }
  if (from_half) {
    const uint8_t* half = t->data()->data();
    for (size_t i = 0; i < info.numel; ++i) {
      _Float16 h;
      std::memcpy(&h, half + 2 * i, sizeof h);
      buf.as<float>()[i] = static_cast<float>(h);
    }
  } else if (have) {
    std::memcpy(buf.data(), t->data()->data(), have);
  }
  if (fp16_ && info.dtype == DType::FLOAT_32) {
    round_to_half_inplace(buf.as<float>(), info.numel);
  }
  info.static_data = buf.data();
  static_buffers_.push_back(std::move(buf));
  return Status::Ok();
}

Status GraphExecutor::load_io(const ::qnn_delegate::Graph* graph) {
  const size_t n = tensors_.size();
  std::vector<bool> seen(n, false);
  auto load_list = [&](const flatbuffers::Vector<uint32_t>* ids, TensorKind kind, const char* what,
                       std::vector<uint32_t>& out) -> Status {
    for (size_t i = 0; ids && i < ids->size(); ++i) {
      const uint32_t id = ids->Get(i);
      if (id >= n) {
        return make_error(ErrorKind::InvalidProgram,
                          "graph '%s': %s %zu refers to tensor id %u, out of range (%zu tensors)", name_.c_str(), what,
                          i, id, n);
      }
      if (tensors_[id].kind != kind) {
        return make_error(ErrorKind::InvalidProgram, "graph '%s': %s %zu, tensor '%s', is %s, expected %s",
                          name_.c_str(), what, i, tensors_[id].name.c_str(), kind_name(tensors_[id].kind),
                          kind_name(kind));
      }
      if (seen[id]) {
        return make_error(ErrorKind::InvalidProgram, "graph '%s': tensor '%s' is listed twice as %s", name_.c_str(),
                          tensors_[id].name.c_str(), what);
      }
      seen[id] = true;
      out.push_back(id);
    }
    return Status::Ok();
  };
  QNN_RETURN_IF_ERROR(load_list(graph->inputs(), TensorKind::APP_WRITE, "graph input", input_ids_));
  QNN_RETURN_IF_ERROR(load_list(graph->outputs(), TensorKind::APP_READ, "graph output", output_ids_));
  for (TensorInfo& t : tensors_) {  // a dumped intermediate FLOAT_16 tensor: held as FLOAT_32 (load_tensor)
    if (t.kind == TensorKind::APP_READ && !seen[t.id] && t.dtype == DType::FLOAT_16) {
      t.dtype = DType::FLOAT_32;
      t.nbytes = storage_bytes(t.dtype, t.numel);
    }
  }
  for (const TensorInfo& t : tensors_) {
    if (t.kind == TensorKind::APP_WRITE && !seen[t.id]) {
      QNN_RETURN_IF_ERROR(load_bits_view(graph->tensors()->Get(t.id)->bits_of_input(), t));
      continue;
    }
    // APP_READ outside the graph outputs: readable after execute (intermediate dumps).
    if (t.kind == TensorKind::APP_READ && !seen[t.id]) readable_ids_.push_back(t.id);
  }
  return Status::Ok();
}

// An APP_WRITE tensor outside the graph inputs: a view of input k's buffer in its own data
// type (Tensor.bits_of_input), with the same element size, dims and dim order.
Status GraphExecutor::load_bits_view(int32_t k, const TensorInfo& view) {
  const char* g = name_.c_str();
  if (k < 0 || size_t(k) >= input_ids_.size()) {
    return make_error(ErrorKind::InvalidProgram,
                      "graph '%s': tensor '%s' is APP_WRITE but not listed in the graph inputs "
                      "(bits_of_input %d; %zu inputs)",
                      g, view.name.c_str(), k, input_ids_.size());
  }
  const TensorInfo& source = tensors_[input_ids_[k]];
  if (element_bits(source.dtype) != element_bits(view.dtype) || source.dims != view.dims ||
      source.dim_order != view.dim_order || view.quant.defined()) {
    return make_error(ErrorKind::InvalidProgram,
                      "graph '%s': tensor '%s' (%s %s) cannot view graph input %d, '%s' (%s %s): "
                      "element size, dims and dim order must match, and no encoding",
                      g, view.name.c_str(), dtype_name(view.dtype), dims_to_string(view.dims).c_str(), k,
                      source.name.c_str(), dtype_name(source.dtype), dims_to_string(source.dims).c_str());
  }
  bits_views_.push_back({view.id, uint32_t(k)});
  return Status::Ok();
}

}  // namespace engine
}  // namespace qnn_delegate
