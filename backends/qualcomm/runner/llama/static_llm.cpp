#include "backends/qualcomm/runner/llama/static_llm.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <executorch/runtime/core/exec_aten/util/dim_order_util.h>
#include <executorch/runtime/core/exec_aten/util/scalar_type_util.h>

#include "backends/qualcomm/runner/program_check.h"
#include "backends/qualcomm/runner/runner_util.h"

namespace qnn_delegate {
namespace llama {

using executorch::aten::ScalarType;
using executorch::extension::FileDataLoader;
using executorch::runtime::Error;
using executorch::runtime::EValue;
using executorch::runtime::HierarchicalAllocator;
using executorch::runtime::MemoryAllocator;
using executorch::runtime::MemoryManager;
using executorch::runtime::Method;
using executorch::runtime::MethodMeta;
using executorch::runtime::Program;
using executorch::runtime::Span;
using executorch::runtime::Tag;
using qnn_delegate::runner::Buffer;
using qnn_delegate::runner::error_name;
using qnn_delegate::runner::zeroed;

namespace {

constexpr size_t kMethodPoolBytes = 8u << 20;
constexpr size_t kTempPoolBytes = 4u << 20;
constexpr float kMaskValue = -255.0f;  // static_decoder.MASK_VALUE

uint64_t planned_memory_limit() {
  const long pages = sysconf(_SC_PHYS_PAGES), page_size = sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page_size <= 0) return uint64_t(4) << 30;
  return static_cast<uint64_t>(pages) * static_cast<uint64_t>(page_size) / 2;
}

std::string dims_text(const std::vector<int64_t>& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + "]";
}

}  // namespace

// A tensor input the runner fills: sizes, contiguous strides and its data (owned or a cache buffer).
struct InputTensor {
  std::vector<executorch::aten::SizesType> sizes;
  std::vector<executorch::aten::DimOrderType> dim_order;
  std::vector<executorch::aten::StridesType> strides;
  ScalarType dtype = ScalarType::Float;
  Buffer owned;
  void* data = nullptr;
  std::unique_ptr<executorch::aten::TensorImpl> impl;
};

struct MethodMemory {
  std::string name;
  int64_t n_tokens = 0;
  std::vector<Buffer> planned;
  std::vector<Span<uint8_t>> spans;
  std::unique_ptr<HierarchicalAllocator> planned_memory;
  Buffer method_pool, temp_pool;
  std::unique_ptr<MemoryAllocator> method_allocator, temp_allocator;
  std::unique_ptr<MemoryManager> memory_manager;
  std::vector<InputTensor> inputs;  // tokens, positions, mask, K of each layer, V of each layer
  std::optional<Method> method;     // last: destroyed first
};

namespace {

// Planned buffers (bounded: their sizes come from the file) and the memory manager of `name`.
Error make_memory(Program& program, const char* name, MethodMemory& m) {
  auto meta = program.method_meta(name);
  if (!meta.ok()) return meta.error();
  const uint64_t limit = planned_memory_limit();
  uint64_t total = 0;
  for (size_t i = 0; i < meta->num_memory_planned_buffers(); ++i) {
    auto size = meta->memory_planned_buffer_size(i);
    if (!size.ok() || *size < 0 || static_cast<uint64_t>(*size) > limit - total) {
      std::fprintf(stderr, "error: method '%s': planned buffer %zu has an invalid size: the program is corrupted\n",
                   name, i);
      return Error::InvalidProgram;
    }
    total += static_cast<uint64_t>(*size);
    m.planned.push_back(zeroed(static_cast<size_t>(*size)));
    if (!m.planned.back()) return Error::MemoryAllocationFailed;
    m.spans.emplace_back(m.planned.back().get(), static_cast<size_t>(*size));
  }
  m.planned_memory.reset(new HierarchicalAllocator({m.spans.data(), m.spans.size()}));
  m.method_pool = zeroed(kMethodPoolBytes);
  m.temp_pool = zeroed(kTempPoolBytes);
  if (!m.method_pool || !m.temp_pool) return Error::MemoryAllocationFailed;
  m.method_allocator.reset(new MemoryAllocator(kMethodPoolBytes, m.method_pool.get()));
  m.temp_allocator.reset(new MemoryAllocator(kTempPoolBytes, m.temp_pool.get()));
  m.memory_manager.reset(new MemoryManager(m.method_allocator.get(), m.planned_memory.get(), m.temp_allocator.get()));
  return Error::Ok;
}

Error load_into(Program& program, const char* name, MethodMemory& m) {
  m.name = name;
  Error e = make_memory(program, name, m);
  if (e != Error::Ok) {
    std::fprintf(stderr, "error: cannot prepare the memory of method '%s' (%s)\n", name, error_name(e).c_str());
    return e;
  }
  auto method = program.load_method(name, m.memory_manager.get());
  if (!method.ok()) {
    std::fprintf(stderr, "error: cannot load method '%s' (%s)\n", name, error_name(method.error()).c_str());
    return method.error();
  }
  m.method.emplace(std::move(method.get()));
  return Error::Ok;
}

// Integer values of a constant method's outputs, in order: each an Int / Bool or an integer
// tensor (get_eos_ids: one Int output per id, or one int64 tensor in older programs).
Error read_constant(Program& program, const char* name, std::vector<int64_t>& values) {
  MethodMemory m;
  Error e = load_into(program, name, m);
  if (e == Error::Ok) e = m.method->execute();
  if (e != Error::Ok || m.method->outputs_size() < 1) {
    std::fprintf(stderr, "error: metadata method '%s' failed (%s)\n", name, error_name(e).c_str());
    return e == Error::Ok ? Error::InvalidProgram : e;
  }
  values.clear();
  for (size_t i = 0; i < m.method->outputs_size(); ++i) {
    const EValue& v = m.method->get_output(i);
    if (v.isInt()) {
      values.push_back(v.toInt());
    } else if (v.isBool()) {
      values.push_back(v.toBool() ? 1 : 0);
    } else if (v.isTensor() && v.toTensor().scalar_type() == ScalarType::Long) {
      const auto& t = v.toTensor();
      values.insert(values.end(), t.const_data_ptr<int64_t>(), t.const_data_ptr<int64_t>() + t.numel());
    } else if (v.isTensor() && v.toTensor().scalar_type() == ScalarType::Int) {
      const auto& t = v.toTensor();
      values.insert(values.end(), t.const_data_ptr<int32_t>(), t.const_data_ptr<int32_t>() + t.numel());
    } else {
      std::fprintf(stderr, "error: metadata method '%s' does not return an integer\n", name);
      return Error::InvalidProgram;
    }
  }
  if (values.empty()) {
    std::fprintf(stderr, "error: metadata method '%s' returns no value\n", name);
    return Error::InvalidProgram;
  }
  return Error::Ok;
}

std::vector<int64_t> tensor_dims(const executorch::runtime::TensorInfo& info) {
  return std::vector<int64_t>(info.sizes().begin(), info.sizes().end());
}

}  // namespace

StaticLlm::StaticLlm() = default;
StaticLlm::~StaticLlm() {
  prefill_.reset();
  decode_.reset();
}

Error StaticLlm::load(const std::string& path, bool use_prefill) {
  path_ = path;
  auto loader = FileDataLoader::from(path.c_str());
  if (!loader.ok()) {
    std::fprintf(stderr, "error: --model_path '%s' cannot be opened (%s)\n", path.c_str(),
                 error_name(loader.error()).c_str());
    return loader.error();
  }
  loader_.emplace(std::move(loader.get()));
  auto size = loader_->size();
  auto program = Program::load(&*loader_, Program::Verification::InternalConsistency);
  if (!program.ok()) {
    std::fprintf(stderr, "error: --model_path '%s' is not a valid program (%s)\n", path.c_str(),
                 error_name(program.error()).c_str());
    return program.error();
  }
  program_.emplace(std::move(program.get()));
  std::string why;
  if (!runner::check_program_fields(path, size.ok() ? *size : 0, why)) {
    std::fprintf(stderr, "error: --model_path '%s' is not a valid program (InvalidProgram): %s\n", path.c_str(),
                 why.c_str());
    return Error::InvalidProgram;
  }
  Error e = load_metadata();
  if (e != Error::Ok) return e;
  const bool program_has_prefill = program_->method_meta("prefill").ok();
  if (use_prefill && program_has_prefill) {
    e = load_method("prefill", shape_.ar_len, prefill_);
    if (e != Error::Ok) return e;
  }
  e = load_method("decode", 1, decode_);
  if (e != Error::Ok) return e;
  const int64_t slots = shape_.context_len - 1;
  const size_t per_layer = static_cast<size_t>(shape_.n_kv_heads * shape_.head_dim * slots) * cache_esize_;
  k_cache_.assign(shape_.n_layers, std::vector<uint8_t>(per_layer, 0));
  v_cache_.assign(shape_.n_layers, std::vector<uint8_t>(per_layer, 0));
  // decode reads the cache buffers themselves (C - 1 past slots)
  for (int64_t l = 0; l < shape_.n_layers; ++l) {
    decode_->inputs[3 + l].data = k_cache_[l].data();
    decode_->inputs[3 + shape_.n_layers + l].data = v_cache_[l].data();
  }
  for (auto* m : {prefill_.get(), decode_.get()}) {
    if (m == nullptr) continue;
    for (auto& t : m->inputs) {
      t.impl.reset(new executorch::aten::TensorImpl(t.dtype, static_cast<ssize_t>(t.sizes.size()), t.sizes.data(),
                                                    t.data, t.dim_order.data(), t.strides.data()));
    }
  }
  return Error::Ok;
}

Error StaticLlm::load_metadata() {
  if (!program_->method_meta("decode").ok()) {
    std::fprintf(stderr,
                 "error: --model_path '%s' has no method 'decode': not a program of "
                 "backends.qualcomm.llm.export_static_llm (InvalidProgram)\n",
                 path_.c_str());
    return Error::InvalidProgram;
  }
  struct Field {
    const char* name;
    int64_t* out;
  } fields[] = {{"get_max_context_len", &shape_.context_len}, {"get_ar_len", &shape_.ar_len},
                {"get_n_layers", &shape_.n_layers},           {"get_n_kv_heads", &shape_.n_kv_heads},
                {"get_head_dim", &shape_.head_dim},           {"get_vocab_size", &shape_.vocab_size}};
  std::vector<int64_t> values;
  for (const Field& f : fields) {
    if (!program_->method_meta(f.name).ok()) {
      std::fprintf(stderr, "error: --model_path '%s' has no metadata method '%s' (InvalidProgram)\n", path_.c_str(),
                   f.name);
      return Error::InvalidProgram;
    }
    Error e = read_constant(*program_, f.name, values);
    if (e != Error::Ok) return e;
    if (values[0] <= 0 || values[0] > (int64_t(1) << 24)) {
      std::fprintf(stderr, "error: metadata '%s' = %lld is out of range (InvalidProgram)\n", f.name,
                   static_cast<long long>(values[0]));
      return Error::InvalidProgram;
    }
    *f.out = values[0];
  }
  if (shape_.ar_len >= shape_.context_len || shape_.context_len < 2) {
    std::fprintf(stderr, "error: metadata: AR length %lld does not fit the context %lld (InvalidProgram)\n",
                 static_cast<long long>(shape_.ar_len), static_cast<long long>(shape_.context_len));
    return Error::InvalidProgram;
  }
  if (program_->method_meta("get_eos_ids").ok() && read_constant(*program_, "get_eos_ids", values) == Error::Ok) {
    for (int64_t id : values) {
      if (id >= 0) eos_ids_.push_back(id);
    }
  }
  if (program_->method_meta("get_bos_id").ok() && read_constant(*program_, "get_bos_id", values) == Error::Ok) {
    bos_id_ = values[0];
  }
  return Error::Ok;
}

Error StaticLlm::load_method(const char* name, int64_t n_tokens, std::unique_ptr<MethodMemory>& out) {
  out.reset(new MethodMemory());
  out->n_tokens = n_tokens;
  Error e = load_into(*program_, name, *out);
  if (e != Error::Ok) return e;
  return check_io(*out);
}

// Every input and output against the layout of docs/llm.md; input buffers allocated (a decode
// call's K / V inputs get the cache buffers later, in load()).
Error StaticLlm::check_io(MethodMemory& m) {
  auto meta = m.method->method_meta();
  const int64_t L = shape_.n_layers, N = m.n_tokens, C = shape_.context_len, H = shape_.n_kv_heads, D = shape_.head_dim;
  if (meta.num_inputs() != size_t(3 + 2 * L) || meta.num_outputs() != size_t(1 + 2 * L)) {
    std::fprintf(stderr,
                 "error: method '%s' has %zu inputs and %zu outputs; a %lld-layer static LLM has %lld and %lld "
                 "(InvalidProgram)\n",
                 m.name.c_str(), meta.num_inputs(), meta.num_outputs(), static_cast<long long>(L),
                 static_cast<long long>(3 + 2 * L), static_cast<long long>(1 + 2 * L));
    return Error::InvalidProgram;
  }
  m.inputs.resize(meta.num_inputs());
  for (size_t i = 0; i < meta.num_inputs(); ++i) {
    std::vector<int64_t> want;
    const char* what;
    bool integer = false;
    if (i == 0) {
      want = {1, N}, what = "tokens", integer = true;
    } else if (i == 1) {
      want = {1, N}, what = "positions", integer = true;
    } else if (i == 2) {
      want = {1, N, C}, what = "mask";
    } else if (i < size_t(3 + L)) {
      want = {1, H, D, C - N}, what = "past K";
    } else {
      want = {1, H, C - N, D}, what = "past V";
    }
    auto tag = meta.input_tag(i);
    auto info = meta.input_tensor_meta(i);
    const bool tensor = tag.ok() && *tag == Tag::Tensor && info.ok();
    const ScalarType dtype = tensor ? info->scalar_type() : ScalarType::Undefined;
    const bool cache = i >= 3;
    if (tensor && cache && i == 3 && cache_esize_ == 0 && (dtype == ScalarType::Float || dtype == ScalarType::Byte)) {
      cache_dtype_ = dtype;  // float32, or the uint8 codes of an 8-bit cache (export's uint8_cache_io)
      cache_esize_ = executorch::runtime::elementSize(dtype);
    }
    const bool dtype_ok = integer ? (dtype == ScalarType::Int || dtype == ScalarType::Long)
                          : cache ? dtype == cache_dtype_
                                  : dtype == ScalarType::Float;
    if (!tensor || !dtype_ok || tensor_dims(*info) != want) {
      std::fprintf(stderr,
                   "error: method '%s' input %zu (%s) is %s %s; expected %s %s (InvalidProgram): the runner "
                   "drives programs of backends.qualcomm.llm.export_static_llm\n",
                   m.name.c_str(), i, what, tensor ? executorch::runtime::toString(dtype) : "not a tensor",
                   tensor ? dims_text(tensor_dims(*info)).c_str() : "",
                   integer ? "int32"
                   : cache ? (i == 3 ? "float32 or uint8" : executorch::runtime::toString(cache_dtype_))
                           : "float32",
                   dims_text(want).c_str());
      return Error::InvalidProgram;
    }
    InputTensor& t = m.inputs[i];
    t.dtype = dtype;
    for (int64_t d : want) t.sizes.push_back(static_cast<executorch::aten::SizesType>(d));
    t.dim_order.resize(want.size());
    for (size_t d = 0; d < want.size(); ++d) t.dim_order[d] = static_cast<executorch::aten::DimOrderType>(d);
    t.strides.assign(want.size(), 1);
    executorch::runtime::dim_order_to_stride(t.sizes.data(), t.dim_order.data(), want.size(), t.strides.data());
    const bool cache_of_decode = i >= 3 && N == 1;  // the cache buffers themselves
    if (!cache_of_decode) {
      size_t nbytes = executorch::runtime::elementSize(dtype);
      for (int64_t d : want) nbytes *= static_cast<size_t>(d);
      t.owned = zeroed(nbytes);
      if (!t.owned) return Error::MemoryAllocationFailed;
      t.data = t.owned.get();
    }
  }
  for (size_t i = 0; i < meta.num_outputs(); ++i) {
    std::vector<int64_t> want = i == 0              ? std::vector<int64_t>{1, N, shape_.vocab_size}
                                : i < size_t(1 + L) ? std::vector<int64_t>{1, H, D, N}
                                                    : std::vector<int64_t>{1, H, N, D};
    auto info = meta.output_tensor_meta(i);
    const ScalarType want_dtype = i == 0 ? ScalarType::Float : cache_dtype_;  // new entries: the cache's dtype
    if (!info.ok() || info->scalar_type() != want_dtype || tensor_dims(*info) != want) {
      std::fprintf(stderr, "error: method '%s' output %zu is not a %s tensor %s (InvalidProgram)\n", m.name.c_str(), i,
                   executorch::runtime::toString(want_dtype), dims_text(want).c_str());
      return Error::InvalidProgram;
    }
  }
  return Error::Ok;
}

void StaticLlm::reset() {
  for (auto& k : k_cache_) std::fill(k.begin(), k.end(), 0);
  for (auto& v : v_cache_) std::fill(v.begin(), v.end(), 0);
}

Error StaticLlm::call(MethodMemory& m, const uint64_t* tokens, int64_t n_valid, int64_t start, const float*& logits) {
  const int64_t N = m.n_tokens, C = shape_.context_len, L = shape_.n_layers, H = shape_.n_kv_heads, D = shape_.head_dim,
                past = C - N, slots = C - 1;
  for (int64_t i = 0; i < N; ++i) {
    const int64_t id = i < n_valid ? static_cast<int64_t>(tokens[i]) : 0, pos = std::min(start + i, C - 1);
    if (m.inputs[0].dtype == ScalarType::Int) {
      static_cast<int32_t*>(m.inputs[0].data)[i] = static_cast<int32_t>(id);
      static_cast<int32_t*>(m.inputs[1].data)[i] = static_cast<int32_t>(pos);
    } else {
      static_cast<int64_t*>(m.inputs[0].data)[i] = id;
      static_cast<int64_t*>(m.inputs[1].data)[i] = pos;
    }
  }
  // Mask: cache slots below `start` and the new columns up to each row's own are visible.
  float* mask = static_cast<float*>(m.inputs[2].data);
  for (int64_t r = 0; r < N; ++r) {
    float* row = mask + r * C;
    std::fill(row, row + C, kMaskValue);
    std::fill(row, row + std::min(start, past), 0.0f);
    std::fill(row + past, row + past + r + 1, 0.0f);
  }
  if (past != slots) {  // prefill: the first C - N slots of every buffer
    const size_t e = cache_esize_;
    for (int64_t l = 0; l < L; ++l) {
      uint8_t* k = static_cast<uint8_t*>(m.inputs[3 + l].data);
      uint8_t* v = static_cast<uint8_t*>(m.inputs[3 + L + l].data);
      for (int64_t hd = 0; hd < H * D; ++hd) {
        std::memcpy(k + hd * past * e, k_cache_[l].data() + hd * slots * e, past * e);
      }
      for (int64_t h = 0; h < H; ++h) {
        std::memcpy(v + h * past * D * e, v_cache_[l].data() + h * slots * D * e, past * D * e);
      }
    }
  }
  for (size_t i = 0; i < m.inputs.size(); ++i) {
    const Error e = m.method->set_input(EValue(executorch::aten::Tensor(m.inputs[i].impl.get())), i);
    if (e != Error::Ok) {
      std::fprintf(stderr, "error: method '%s': set_input(%zu) failed (%s)\n", m.name.c_str(), i,
                   error_name(e).c_str());
      return e;
    }
  }
  const Error e = m.method->execute();
  if (e != Error::Ok) {
    std::fprintf(stderr, "error: method '%s' failed at position %lld (%s)\n", m.name.c_str(),
                 static_cast<long long>(start), error_name(e).c_str());
    return e;
  }
  write_new_entries(m, start, n_valid);
  logits = m.method->get_output(0).toTensor().const_data_ptr<float>() + (n_valid - 1) * shape_.vocab_size;
  return Error::Ok;
}

// New entries of a call (outputs 1 .. 2L) written at positions start .. start + n_valid - 1; the
// entries of position C - 1 have no slot (no later call reads them).
void StaticLlm::write_new_entries(MethodMemory& m, int64_t start, int64_t n_valid) {
  const int64_t N = m.n_tokens, L = shape_.n_layers, H = shape_.n_kv_heads, D = shape_.head_dim,
                slots = shape_.context_len - 1;
  const int64_t n = std::min(start + n_valid, slots) - start;
  if (n <= 0) return;
  const size_t e = cache_esize_;
  for (int64_t l = 0; l < L; ++l) {
    const auto* k_new = static_cast<const uint8_t*>(m.method->get_output(1 + l).toTensor().const_data_ptr());
    const auto* v_new = static_cast<const uint8_t*>(m.method->get_output(1 + L + l).toTensor().const_data_ptr());
    for (int64_t hd = 0; hd < H * D; ++hd) {
      std::memcpy(k_cache_[l].data() + (hd * slots + start) * e, k_new + hd * N * e, n * e);
    }
    for (int64_t h = 0; h < H; ++h) {
      std::memcpy(v_cache_[l].data() + (h * slots + start) * D * e, v_new + h * N * D * e, n * D * e);
    }
  }
}

Error StaticLlm::prefill(const uint64_t* tokens, int64_t n, int64_t start, const float*& logits) {
  const int64_t C = shape_.context_len;
  if (n < 1 || start < 0 || start + n > C) {
    std::fprintf(stderr, "error: a prompt of %lld tokens at position %lld exceeds the context of %lld\n",
                 static_cast<long long>(n), static_cast<long long>(start), static_cast<long long>(C));
    return Error::InvalidArgument;
  }
  const int64_t chunk = prefill_ ? prefill_->n_tokens : 0;
  int64_t pos = start;
  while (pos < start + n) {
    const int64_t left = start + n - pos;
    Error e;
    int64_t take;
    if (chunk > 0 && pos <= C - chunk) {
      take = std::min(chunk, left);
      e = call(*prefill_, tokens + (pos - start), take, pos, logits);
    } else {
      take = 1;
      e = call(*decode_, tokens + (pos - start), 1, pos, logits);
    }
    if (e != Error::Ok) return e;
    pos += take;
  }
  return Error::Ok;
}

Error StaticLlm::decode(uint64_t token, int64_t pos, const float*& logits) {
  if (pos < 0 || pos >= shape_.context_len) {
    std::fprintf(stderr, "error: position %lld is outside the context of %lld\n", static_cast<long long>(pos),
                 static_cast<long long>(shape_.context_len));
    return Error::InvalidArgument;
  }
  return call(*decode_, &token, 1, pos, logits);
}

}  // namespace llama
}  // namespace qnn_delegate
