#include "backends/qualcomm/runtime/qnn/QnnRuntime.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>

#include "backends/qualcomm/runtime/PayloadLoader.h"
#include "backends/qualcomm/runtime/qnn/QnnLibrary.h"
#include "backends/qualcomm/runtime/qnn/QnnSystem.h"

namespace qnn_delegate {
namespace qnn {

namespace {

const fb::QnnHtpGraph* find_ids(const fb::QnnHtpContext* q, const std::string& name) {
  if (q->graphs() == nullptr) return nullptr;
  for (const fb::QnnHtpGraph* g : *q->graphs()) {
    if (g->name()->str() == name) return g;
  }
  return nullptr;
}

Status verify_section(const fb::QnnHtpContext* q) {
  if (q->binary() == nullptr || q->binary()->size() == 0) {
    return make_error(ErrorKind::InvalidProgram, "QNN context binary is empty");
  }
  const uint64_t sig = runtime::fnv1a64(q->binary()->data(), q->binary()->size());
  if (sig != q->signature()) {
    return make_error(ErrorKind::InvalidProgram,
                      "QNN context binary signature mismatch: stored 0x%016llx, computed 0x%016llx "
                      "(the binary was altered)",
                      (unsigned long long)q->signature(), (unsigned long long)sig);
  }
  return Status::Ok();
}

// Writes the event tree into out[n..], reusing the elements (and their strings' storage)
// left by earlier executes: after the first profiled execute this allocates nothing.
void collect_tree(const QnnFunctionTable& fn, uint64_t event, int depth, std::vector<QnnProfileSample>& out,
                  size_t& n) {
  QnnProfileEvent data{};
  if (fn.profile_get_event_data(event, &data) == 0) {
    if (n == out.size()) out.emplace_back();
    QnnProfileSample& s = out[n++];
    s.name.assign(data.identifier ? data.identifier : "?");
    s.unit = data.unit;
    s.value = data.value;
    s.is_node = data.type == kQnnProfileEventNode;
    s.type = data.type;
    s.depth = depth;
  }
  const uint64_t* subs = nullptr;
  uint32_t num_subs = 0;
  if (depth > 2 || fn.profile_get_sub_events(event, &subs, &num_subs) != 0) return;
  for (uint32_t i = 0; i < num_subs; ++i) collect_tree(fn, subs[i], depth + 1, out, n);
}

// Events of the last execute (QNN keeps the events of the latest call in the handle).
void collect_events(const QnnFunctionTable& fn, QnnHandle profile, std::vector<QnnProfileSample>& out) {
  const uint64_t* events = nullptr;
  uint32_t count = 0;
  size_t n = 0;
  if (fn.profile_get_events(profile, &events, &count) == 0) {
    for (uint32_t i = 0; i < count; ++i) collect_tree(fn, events[i], 0, out, n);
  }
  out.resize(n);
}

// contextValidateBinary, unless the backend said once that it cannot validate (QNN 2.51 on
// x86 returns 1000 and logs two error lines): then never again, and that first call is quiet.
std::atomic<bool> g_cannot_validate{false};

Status validate_binary(const QnnLibrary& lib, QnnHandle device, const uint8_t* data, size_t size, uint32_t soc_model) {
  if (g_cannot_validate.load()) return Status::Ok();
  QnnStatus st;
  {
    QnnLibrary::ScopedQuiet quiet;
    st = lib.fn().context_validate_binary(lib.backend(), device, nullptr, data, size);
  }
  if (st == kQnnNotSupported) {
    g_cannot_validate.store(true);
    QnnLibrary::take_messages();  // "does not support QnnContext_validateBinary": expected
    return Status::Ok();          // contextCreateFromBinary checks the binary anyway
  }
  if (st != 0) {
    return make_error(ErrorKind::InvalidProgram, "%s",
                      with_qnn_log("QNN contextValidateBinary (" + std::to_string(size) + " bytes, SoC model " +
                                   std::to_string(soc_model) + ") refused the context binary: " + qnn_error_text(st))
                          .c_str());
  }
  return Status::Ok();
}

// What can be checked before QNN's loader sees the bytes: their size, then QnnSystem's parse of
// the binary (a separate, metadata-only parser), and that every payload graph is in it. Skipped
// (with contextCreateFromBinary checking alone) only when libQnnSystem.so does not load.
Status precheck_binary(const fb::QnnHtpContext* q, const fb::QnnPayload* payload) {
  QNN_RETURN_IF_ERROR(precheck_context_binary(q->binary()->data(), q->binary()->size()));
  ContextBinaryInfo info;
  const Status s = read_context_binary_info(q->binary()->data(), q->binary()->size(), info);
  if (s.kind == ErrorKind::NotSupported) return Status::Ok();
  if (!s.ok())
    return make_error(ErrorKind::InvalidProgram, "QNN context binary refused before loading: %s", s.message.c_str());
  for (const fb::Graph* g : *payload->graphs()) {
    bool found = false;
    for (const ContextGraphInfo& gi : info.graphs) found = found || gi.name == g->name()->str();
    if (!found) {
      std::string names;
      for (const ContextGraphInfo& gi : info.graphs) names += (names.empty() ? "'" : ", '") + gi.name + "'";
      return make_error(ErrorKind::InvalidProgram, "graph '%s' is not in the QNN context binary (QnnSystem lists %s)",
                        g->name()->c_str(), names.c_str());
    }
  }
  return Status::Ok();
}

int clamp_level(int level) { return level < 0 ? 0 : (level > 2 ? 2 : level); }

// Payload view of a tensor (as the host engine describes it), for intermediate dumps.
engine::TensorInfo payload_info(const fb::Tensor* t) {
  engine::TensorInfo info;
  info.id = t->id();
  info.name = t->name()->str();
  info.kind = t->type();
  info.dtype = t->data_type();
  if (t->dims() != nullptr) info.dims.assign(t->dims()->begin(), t->dims()->end());
  info.numel = engine::product(info.dims);
  info.nbytes = engine::storage_bytes(info.dtype, info.numel);
  // per-tensor encoding and dim order: what the tensor dumper needs to log it as its edge node
  const fb::QuantizeParams* q = t->quant();
  if (q != nullptr &&
      (q->encoding() == fb::QnnQuantEncoding::SCALE_OFFSET || q->encoding() == fb::QnnQuantEncoding::BW_SCALE_OFFSET)) {
    info.quant.encoding = q->encoding();
    info.quant.bitwidth = q->bitwidth();
    info.quant.scale = q->scale();
    info.quant.offset = q->offset();
  }
  if (t->dim_order() != nullptr && t->dim_order()->size() == info.dims.size()) {
    info.dim_order.assign(t->dim_order()->begin(), t->dim_order()->end());
  }
  return info;
}

}  // namespace

bool has_qnn_context(const fb::QnnContextBinary* blob) {
  return blob != nullptr && blob->qnn_context() != nullptr && blob->qnn_context()->binary() != nullptr &&
         blob->qnn_context()->binary()->size() > 0;
}

size_t QnnGraphRunner::input_bytes(size_t i) const {
  return inputs_[i]->numel * (inputs_[i]->int64_narrowed ? 8 : inputs_[i]->element_size);
}

size_t QnnGraphRunner::output_bytes(size_t i) const {
  return outputs_[i]->numel * (outputs_[i]->int64_narrowed ? 8 : outputs_[i]->element_size);
}

Status QnnGraphRunner::bind(const fb::Graph* g, const std::vector<uint32_t>& ids) {
  name_ = g->name()->str();
  auto take = [&](const flatbuffers::Vector<uint32_t>* list, std::vector<std::unique_ptr<TensorDesc>>& descs,
                  std::vector<QnnTensor>& tensors, std::vector<std::vector<int32_t>>& scratch) -> Status {
    const size_t n = list ? list->size() : 0;
    for (size_t i = 0; i < n; ++i) {
      const uint32_t index = list->Get(i);
      if (g->tensors() == nullptr || index >= g->tensors()->size() || index >= ids.size()) {
        return make_error(ErrorKind::InvalidProgram, "graph '%s': I/O tensor %u out of range", name_.c_str(), index);
      }
      std::unique_ptr<TensorDesc> d;
      QNN_RETURN_IF_ERROR(describe_tensor(g->tensors()->Get(index), 1, d));
      core(d->tensor).id = ids[index];
      scratch.emplace_back(d->int64_narrowed ? d->numel : 0);
      tensors.push_back(d->tensor);
      descs.push_back(std::move(d));
    }
    return Status::Ok();
  };
  QNN_RETURN_IF_ERROR(take(g->inputs(), inputs_, in_tensors_, in_scratch_));
  QNN_RETURN_IF_ERROR(take(g->outputs(), outputs_, out_tensors_, out_scratch_));
  QNN_RETURN_IF_ERROR(bind_bits_views(g, ids));
  for (size_t i = 0; g->outputs() && i < g->outputs()->size(); ++i) {
    output_infos_.push_back(payload_info(g->tensors()->Get(g->outputs()->Get(i))));
  }
  return bind_readables(g, ids);
}

// Every APP_READ tensor must be passed on each graphExecute (else QNN error 6004): the
// ones outside the graph outputs get their buffers here, once.
Status QnnGraphRunner::bind_readables(const fb::Graph* g, const std::vector<uint32_t>& ids) {
  std::vector<bool> is_output(g->tensors()->size(), false);
  for (size_t i = 0; g->outputs() && i < g->outputs()->size(); ++i) {
    is_output[g->outputs()->Get(i)] = true;
  }
  size_t count = 0;
  for (size_t i = 0; i < g->tensors()->size(); ++i) {
    count += g->tensors()->Get(i)->type() == fb::QnnTensorType::APP_READ && !is_output[i];
  }
  readables_.resize(count);  // never resized again: descs and buffers stay where they are
  size_t k = 0;
  for (size_t i = 0; i < g->tensors()->size(); ++i) {
    const fb::Tensor* t = g->tensors()->Get(i);
    if (t->type() != fb::QnnTensorType::APP_READ || is_output[i]) continue;
    Readable& r = readables_[k++];
    QNN_RETURN_IF_ERROR(describe_tensor(t, 1, r.desc));
    if (i >= ids.size()) {
      return make_error(ErrorKind::InvalidProgram,
                        "graph '%s': APP_READ tensor '%s' has no QNN "
                        "tensor id in the context binary",
                        name_.c_str(), r.desc->name.c_str());
    }
    core(r.desc->tensor).id = ids[i];
    r.info = payload_info(t);
    r.storage.assign((r.desc->nbytes() + 7) / 8, 0);
    if (r.desc->int64_narrowed) r.widened.assign(r.desc->numel, 0);
    core(r.desc->tensor).buffer = {r.storage.data(), uint32_t(r.desc->nbytes())};
    out_tensors_.push_back(r.desc->tensor);
  }
  return Status::Ok();
}

// APP_WRITE tensors outside the graph inputs view an input's buffer (Tensor.bits_of_input):
// QNN takes them as graph inputs of their own, bound to that buffer on every execute.
Status QnnGraphRunner::bind_bits_views(const fb::Graph* g, const std::vector<uint32_t>& ids) {
  std::vector<bool> is_input(g->tensors()->size(), false);
  for (size_t i = 0; g->inputs() && i < g->inputs()->size(); ++i) is_input[g->inputs()->Get(i)] = true;
  for (size_t i = 0; i < g->tensors()->size(); ++i) {
    const fb::Tensor* t = g->tensors()->Get(i);
    if (t->type() != fb::QnnTensorType::APP_WRITE || is_input[i]) continue;
    const int32_t k = t->bits_of_input();
    BitsView v;
    QNN_RETURN_IF_ERROR(describe_tensor(t, 1, v.desc));
    if (k < 0 || size_t(k) >= inputs_.size() || i >= ids.size() || inputs_[k]->int64_narrowed ||
        inputs_[k]->nbytes() != v.desc->nbytes() || v.desc->int64_narrowed) {
      return make_error(ErrorKind::InvalidProgram,
                        "graph '%s': APP_WRITE tensor '%s' is not a graph "
                        "input and cannot view input %d (bits_of_input: an input of its byte size)",
                        name_.c_str(), v.desc->name.c_str(), k);
    }
    core(v.desc->tensor).id = ids[i];
    v.input = size_t(k);
    bits_views_.push_back(std::move(v));
  }
  for (const BitsView& v : bits_views_) in_tensors_.push_back(v.desc->tensor);
  return Status::Ok();
}

QnnGraphRunner::~QnnGraphRunner() { release_shared_buffers(); }

Status QnnGraphRunner::register_buffer(const TensorDesc& d, SharedBuffer& b) {
  const QnnLibrary* lib = QnnLibrary::get();
  b.bytes = std::max<size_t>(d.nbytes(), 1);
  b.fd = ::memfd_create("qnn_shared_buffer", MFD_CLOEXEC);
  if (b.fd < 0 || ::ftruncate(b.fd, off_t(b.bytes)) != 0) {
    return make_error(ErrorKind::MemoryAllocationFailed, "graph '%s': shared buffer of tensor '%s' (%zu bytes): %s",
                      name_.c_str(), d.name.c_str(), b.bytes, std::strerror(errno));
  }
  void* data = ::mmap(nullptr, b.bytes, PROT_READ | PROT_WRITE, MAP_SHARED, b.fd, 0);
  if (data == MAP_FAILED) {
    return make_error(ErrorKind::MemoryAllocationFailed, "graph '%s': mmap of the shared buffer of '%s': %s",
                      name_.c_str(), d.name.c_str(), std::strerror(errno));
  }
  b.data = data;
  const QnnTensorV1& t = core(d.tensor);
  QnnMemDescriptor m{};
  m.rank = t.rank;
  m.dims = t.dims;
  m.dtype = t.dtype;
  m.type = kQnnMemDmaBuf;
  m.dma_buf.fd = b.fd;
  m.dma_buf.data = b.data;
  QnnLibrary::take_messages();
  const QnnStatus dma = lib->fn().mem_register(context_, &m, 1, &b.handle);
  if (dma == 0) return Status::Ok();
  m.type = kQnnMemIon;
  m.dma_buf.data = nullptr;
  m.ion_fd = b.fd;
  const QnnStatus ion = lib->fn().mem_register(context_, &m, 1, &b.handle);
  if (ion == 0) return Status::Ok();
  b.handle = nullptr;
  return make_error(
      ErrorKind::NotSupported, "%s",
      with_qnn_log("shared_buffer: QNN refused to register graph '" + name_ + "' tensor '" + d.name + "' (" +
                   std::to_string(b.bytes) + " bytes): DMA-BUF " + qnn_error_text(dma) + ", ION " + qnn_error_text(ion))
          .c_str());
}

Status QnnGraphRunner::enable_shared_buffers() {
  if (!shared_.empty()) return Status::Ok();
  if (!bits_views_.empty() || !readables_.empty()) {
    return make_error(ErrorKind::NotSupported,
                      "graph '%s': shared_buffer with intermediate dumps or input bit views is not supported",
                      name_.c_str());
  }
  std::vector<SharedBuffer> buffers(inputs_.size() + outputs_.size());
  for (size_t i = 0; i < buffers.size(); ++i) {
    const TensorDesc& d = i < inputs_.size() ? *inputs_[i] : *outputs_[i - inputs_.size()];
    const Status s = register_buffer(d, buffers[i]);
    if (!s.ok()) {
      shared_.swap(buffers);
      release_shared_buffers();
      return s;
    }
  }
  shared_.swap(buffers);
  for (size_t i = 0; i < shared_.size(); ++i) {
    QnnTensorV1& t = core(i < inputs_.size() ? in_tensors_[i] : out_tensors_[i - inputs_.size()]);
    t.mem_kind = kQnnMemHandle;
    t.mem_handle = shared_[i].handle;
  }
  return Status::Ok();
}

void QnnGraphRunner::release_shared_buffers() {
  const QnnLibrary* lib = shared_.empty() ? nullptr : QnnLibrary::get();
  for (SharedBuffer& b : shared_) {
    if (b.handle != nullptr && lib != nullptr) lib->fn().mem_deregister(&b.handle, 1);
    if (b.data != nullptr) ::munmap(b.data, b.bytes);
    if (b.fd >= 0) ::close(b.fd);
  }
  shared_.clear();
}

Status QnnGraphRunner::prepare_profile(int profile_level) {
  const int level = clamp_level(profile_level);
  if (level == 0 || profiles_[level] != nullptr) return Status::Ok();
  const QnnStatus st = QnnLibrary::get()->fn().profile_create(
      backend_, level == 2 ? kQnnProfileDetailed : kQnnProfileBasic, &profiles_[level]);
  if (st != 0) {
    profiles_[level] = nullptr;
    return make_error(ErrorKind::Internal, "%s",
                      with_qnn_log("graph '" + name_ + "': QNN profileCreate (level " + std::to_string(level) +
                                   ") failed: " + qnn_error_text(st))
                          .c_str());
  }
  return Status::Ok();
}

Status QnnGraphRunner::execute(void* const* inputs, void* const* outputs, int profile_level,
                               std::vector<QnnProfileSample>* samples) {
  const QnnLibrary* lib = QnnLibrary::get();
  for (size_t i = 0; i < inputs_.size(); ++i) {
    void* data = inputs[i];
    if (inputs_[i]->int64_narrowed) {
      const auto* src = static_cast<const int64_t*>(inputs[i]);
      for (size_t k = 0; k < in_scratch_[i].size(); ++k) in_scratch_[i][k] = int32_t(src[k]);
      data = in_scratch_[i].data();
    }
    if (shared_.empty()) {
      core(in_tensors_[i]).buffer = {data, uint32_t(inputs_[i]->nbytes())};
    } else {
      std::memcpy(shared_[i].data, data, inputs_[i]->nbytes());
    }
  }
  for (size_t j = 0; j < bits_views_.size(); ++j) {
    core(in_tensors_[inputs_.size() + j]).buffer = {inputs[bits_views_[j].input],
                                                    uint32_t(bits_views_[j].desc->nbytes())};
  }
  for (size_t i = 0; i < outputs_.size() && shared_.empty(); ++i) {
    void* data = outputs_[i]->int64_narrowed ? out_scratch_[i].data() : outputs[i];
    core(out_tensors_[i]).buffer = {data, uint32_t(outputs_[i]->nbytes())};
  }
  const int level = clamp_level(profile_level);
  if (level > 0 && profiles_[level] == nullptr) {
    // Init created the handle of the level in effect then; a level raised at run time
    // afterwards (qnn_runtime_profile_level) allocates its handle once, here.
    QNN_RETURN_IF_ERROR(prepare_profile(level));
  }
  QnnHandle profile = profiles_[level];
  const QnnStatus st = lib->fn().graph_execute(graph_, in_tensors_.data(), uint32_t(in_tensors_.size()),
                                               out_tensors_.data(), uint32_t(out_tensors_.size()), profile, nullptr);
  if (st != 0) {
    return make_error(ErrorKind::Internal, "%s",
                      with_qnn_log("graph '" + name_ + "': QNN graphExecute failed: " + qnn_error_text(st)).c_str());
  }
  for (size_t i = 0; i < outputs_.size() && !shared_.empty(); ++i) {
    void* data = outputs_[i]->int64_narrowed ? out_scratch_[i].data() : outputs[i];
    std::memcpy(data, shared_[inputs_.size() + i].data, outputs_[i]->nbytes());
  }
  for (size_t i = 0; i < outputs_.size(); ++i) {
    if (!outputs_[i]->int64_narrowed) continue;
    auto* dst = static_cast<int64_t*>(outputs[i]);
    for (size_t k = 0; k < out_scratch_[i].size(); ++k) dst[k] = out_scratch_[i][k];
  }
  for (Readable& r : readables_) {
    const auto* src = reinterpret_cast<const int32_t*>(r.storage.data());
    for (size_t k = 0; k < r.widened.size(); ++k) r.widened[k] = src[k];
  }
  if (profile != nullptr) {
    collect_events(lib->fn(), profile, profile_samples_);
    if (samples != nullptr) *samples = profile_samples_;
  } else {
    profile_samples_.resize(0);
  }
  return Status::Ok();
}

Status QnnLoadedContext::load(const fb::QnnContextBinary* blob, const fb::QnnPayload* payload,
                              std::unique_ptr<QnnLoadedContext>& out) {
  if (!has_qnn_context(blob)) {
    return make_error(ErrorKind::NotSupported,
                      "the delegate has no QNN context binary (lowered "
                      "without the QNN libraries, or QNN refused a graph at lowering)");
  }
  const fb::QnnHtpContext* q = blob->qnn_context();
  QNN_RETURN_IF_ERROR(verify_section(q));
  QNN_RETURN_IF_ERROR(precheck_binary(q, payload));
  GraphIds ids;
  for (const fb::Graph* g : *payload->graphs()) {
    const fb::QnnHtpGraph* found = find_ids(q, g->name()->str());
    if (found == nullptr || found->tensor_ids() == nullptr) {
      return make_error(ErrorKind::InvalidProgram, "graph '%s' is not in the QNN context binary", g->name()->c_str());
    }
    ids.emplace_back(g->name()->str(), std::vector<uint32_t>(found->tensor_ids()->begin(), found->tensor_ids()->end()));
  }
  return load_binary(q->binary()->data(), q->binary()->size(), q->soc_model(), ids, payload, true, out);
}

Status QnnLoadedContext::load_binary(const uint8_t* binary, size_t size, uint32_t soc_model, const GraphIds& ids,
                                     const fb::QnnPayload* payload, bool validate,
                                     std::unique_ptr<QnnLoadedContext>& out) {
  std::string why;
  const QnnLibrary* lib = QnnLibrary::get(&why);
  if (lib == nullptr) return make_error(ErrorKind::NotSupported, "%s", why.c_str());
  QnnLibrary::take_messages();
  std::unique_ptr<QnnLoadedContext> ctx(new QnnLoadedContext());
  ctx->binary_size_ = size;
  HtpDeviceConfig soc{};
  soc.option = kHtpDeviceOptionSoc;
  soc.soc_model = soc_model;
  QnnConfig custom{};
  custom.option = kQnnConfigCustom;
  custom.custom = &soc;
  const QnnConfig* configs[] = {&custom, nullptr};
  QnnStatus st = lib->fn().device_create(lib->log(), soc_model ? configs : nullptr, &ctx->device_);
  if (st != 0) {
    return make_error(
        ErrorKind::NotSupported, "%s",
        with_qnn_log("QNN deviceCreate for SoC model " + std::to_string(soc_model) + " failed: " + qnn_error_text(st))
            .c_str());
  }
  if (validate) QNN_RETURN_IF_ERROR(validate_binary(*lib, ctx->device_, binary, size, soc_model));
  st = lib->fn().context_create_from_binary(lib->backend(), ctx->device_, nullptr, binary, size, &ctx->context_,
                                            nullptr);
  if (st != 0) {
    return make_error(ErrorKind::InvalidProgram, "%s",
                      with_qnn_log("QNN contextCreateFromBinary (" + std::to_string(size) + " bytes, SoC model " +
                                   std::to_string(soc_model) + ") failed: " + qnn_error_text(st))
                          .c_str());
  }
  for (const fb::Graph* g : *payload->graphs()) {
    const std::vector<uint32_t>* id_list = nullptr;
    for (const auto& entry : ids) {
      if (entry.first == g->name()->str()) id_list = &entry.second;
    }
    if (id_list == nullptr) {
      return make_error(ErrorKind::InvalidProgram, "graph '%s' is not in the QNN context binary", g->name()->c_str());
    }
    std::unique_ptr<QnnGraphRunner> runner(new QnnGraphRunner());
    runner->backend_ = lib->backend();
    runner->context_ = ctx->context_;
    st = lib->fn().graph_retrieve(ctx->context_, g->name()->c_str(), &runner->graph_);
    if (st != 0) {
      return make_error(
          ErrorKind::InvalidProgram, "%s",
          with_qnn_log("graph '" + g->name()->str() + "': QNN graphRetrieve failed: " + qnn_error_text(st)).c_str());
    }
    QNN_RETURN_IF_ERROR(runner->bind(g, *id_list));
    ctx->graphs_.push_back(std::move(runner));
  }
  out = std::move(ctx);
  return Status::Ok();
}

QnnLoadedContext::~QnnLoadedContext() {
  const QnnLibrary* lib = QnnLibrary::get();
  if (lib == nullptr) return;
  for (auto& g : graphs_) {
    for (QnnHandle& p : g->profiles_) {
      if (p) lib->fn().profile_free(p);
      p = nullptr;
    }
  }
  graphs_.clear();  // graph handles belong to the context
  if (context_) lib->fn().context_free(context_, nullptr);
  if (device_) lib->fn().device_free(device_);
}

QnnGraphRunner* QnnLoadedContext::find_graph(const char* name) const {
  for (const auto& g : graphs_) {
    if (name != nullptr && g->name() == name) return g.get();
  }
  return nullptr;
}

}  // namespace qnn
}  // namespace qnn_delegate
