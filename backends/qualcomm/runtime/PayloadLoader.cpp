#include "backends/qualcomm/runtime/PayloadLoader.h"

#include <cstdlib>
#include <cstring>

#include "flatbuffers/flatbuffers.h"

namespace qnn_delegate {
namespace runtime {

AlignedBlob::AlignedBlob(const void* src, size_t size) {
  if (reinterpret_cast<uintptr_t>(src) % 16 == 0) {
    data = static_cast<const uint8_t*>(src);
    return;
  }
  storage.reset(new uint64_t[(size + 7) / 8 + 1]);
  if (size) std::memcpy(storage.get(), src, size);
  data = reinterpret_cast<const uint8_t*>(storage.get());
}

using engine::ErrorKind;
using engine::make_error;
using engine::Status;

namespace {

constexpr flatbuffers::voffset_t kSchemaVersionField = 4;
constexpr flatbuffers::voffset_t kSignatureField = 6;
constexpr flatbuffers::voffset_t kPayloadField = 8;

// Structural check of the container only (not the nested payload), so a
// corrupted payload is reported as a signature mismatch.
bool verify_container_shallow(const uint8_t* data, size_t size) {
  if (size < 8 || !flatbuffers::BufferHasIdentifier(data, "QNNB")) return false;
  flatbuffers::Verifier verifier(data, size);
  if (!verifier.VerifyOffset(0)) return false;
  const auto* table = flatbuffers::GetRoot<flatbuffers::Table>(data);
  return table->VerifyTableStart(verifier) && table->VerifyField<uint32_t>(verifier, kSchemaVersionField, 4) &&
         table->VerifyField<uint64_t>(verifier, kSignatureField, 8) && table->VerifyOffset(verifier, kPayloadField) &&
         verifier.VerifyVector(table->GetPointer<const flatbuffers::Vector<uint8_t>*>(kPayloadField)) &&
         verifier.EndTable();
}

}  // namespace

uint64_t fnv1a64(const uint8_t* data, size_t size) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (size_t i = 0; i < size; ++i) {
    h ^= data[i];
    h *= 0x100000001b3ULL;
  }
  return h;
}

Status verify_context_binary(const uint8_t* data, size_t size, const ::qnn_delegate::QnnPayload** payload) {
  if (data == nullptr || size == 0) {
    return make_error(ErrorKind::InvalidProgram, "qnn-delegate blob is empty");
  }
  if (size >= 8 && !flatbuffers::BufferHasIdentifier(data, "QNNB")) {
    return make_error(ErrorKind::InvalidProgram,
                      "qnn-delegate blob (%zu bytes) does not carry the file identifier 'QNNB'", size);
  }
  if (!verify_container_shallow(data, size)) {
    return make_error(ErrorKind::InvalidProgram,
                      "qnn-delegate blob (%zu bytes) failed the flatbuffers verifier "
                      "(QnnContextBinary): truncated or corrupted",
                      size);
  }
  const auto* ctx = ::qnn_delegate::GetQnnContextBinary(data);
  if (ctx->schema_version() != kSchemaVersion) {
    return make_error(ErrorKind::InvalidProgram, "qnn-delegate blob has schema_version %u, this runtime reads %u",
                      ctx->schema_version(), kSchemaVersion);
  }
  const auto* bytes = ctx->payload();
  if (bytes == nullptr || bytes->size() == 0) {
    return make_error(ErrorKind::InvalidProgram, "qnn-delegate blob has no payload");
  }
  const uint64_t sig = fnv1a64(bytes->data(), bytes->size());
  if (sig != ctx->signature()) {
    return make_error(ErrorKind::InvalidProgram,
                      "qnn-delegate payload signature mismatch: stored 0x%016llx, computed "
                      "0x%016llx (the payload was altered)",
                      (unsigned long long)ctx->signature(), (unsigned long long)sig);
  }
  flatbuffers::Verifier nested(bytes->data(), bytes->size());
  if (!nested.VerifyBuffer<::qnn_delegate::QnnPayload>(nullptr)) {
    return make_error(ErrorKind::InvalidProgram,
                      "qnn-delegate payload (%u bytes) failed the flatbuffers verifier (QnnPayload)", bytes->size());
  }
  const auto* p = flatbuffers::GetRoot<::qnn_delegate::QnnPayload>(bytes->data());
  if (p->schema_version() != kSchemaVersion) {
    return make_error(ErrorKind::InvalidProgram, "qnn-delegate payload has schema_version %u, this runtime reads %u",
                      p->schema_version(), kSchemaVersion);
  }
  if (p->graphs() == nullptr || p->graphs()->size() == 0) {
    return make_error(ErrorKind::InvalidProgram, "qnn-delegate payload has no graphs");
  }
  *payload = p;
  return Status::Ok();
}

namespace {

// A verified payload whose scalars are aligned (copied when the nested bytes are not).
struct VerifiedPayload {
  std::unique_ptr<AlignedBlob> blob;
  std::unique_ptr<uint64_t[]> nested_copy;
  const ::qnn_delegate::QnnPayload* payload = nullptr;
};

Status verify_aligned(const void* data, size_t size, VerifiedPayload& out) {
  out.blob.reset(new AlignedBlob(data, size));
  QNN_RETURN_IF_ERROR(verify_context_binary(out.blob->data, size, &out.payload));
  const auto* bytes = ::qnn_delegate::GetQnnContextBinary(out.blob->data)->payload();
  if (reinterpret_cast<uintptr_t>(bytes->data()) % 16 != 0) {
    out.nested_copy.reset(new uint64_t[(bytes->size() + 7) / 8 + 1]);
    std::memcpy(out.nested_copy.get(), bytes->data(), bytes->size());
    out.payload = flatbuffers::GetRoot<::qnn_delegate::QnnPayload>(out.nested_copy.get());
  }
  return Status::Ok();
}

}  // namespace

Status load_graphs(const void* data, size_t size, const engine::EngineOptions& options, int graph_index,
                   std::vector<std::unique_ptr<engine::GraphExecutor>>& graphs) {
  VerifiedPayload v;
  QNN_RETURN_IF_ERROR(verify_aligned(data, size, v));
  if (v.payload->context_binary_only()) {
    return make_error(ErrorKind::NotSupported,
                      "the host engine cannot run graph '%s': the delegate wraps a QNN context binary made "
                      "elsewhere (from_context_binary), whose ops only QNN knows",
                      v.payload->graphs()->Get(0)->name()->c_str());
  }
  const size_t n = v.payload->graphs()->size();
  if (graph_index >= 0 && size_t(graph_index) >= n) {
    return make_error(ErrorKind::InvalidArgument, "graph index %d out of range (payload has %zu graphs)", graph_index,
                      n);
  }
  for (size_t i = 0; i < n; ++i) {
    if (graph_index >= 0 && size_t(graph_index) != i) continue;
    std::unique_ptr<engine::GraphExecutor> g;
    QNN_RETURN_IF_ERROR(engine::GraphExecutor::build(v.payload->graphs()->Get(i), options, g));
    graphs.push_back(std::move(g));
  }
  return Status::Ok();
}

Status load_graph_for_method(const void* data, size_t size, const engine::EngineOptions& options,
                             const char* method_name, std::unique_ptr<engine::GraphExecutor>& graph) {
  VerifiedPayload v;
  QNN_RETURN_IF_ERROR(verify_aligned(data, size, v));
  const auto* graphs = v.payload->graphs();
  size_t index = 0;
  for (size_t i = 0; method_name != nullptr && i < graphs->size(); ++i) {
    if (graphs->Get(i)->name()->str() == method_name) {
      index = i;
      break;
    }
  }
  return engine::GraphExecutor::build(graphs->Get(index), options, graph);
}

engine::EngineOptions engine_options_from_env() {
  engine::EngineOptions o;
  const char* v = std::getenv("QNN_DELEGATE_REFERENCE_KERNELS");
  o.reference_only = v != nullptr && v[0] != '\0' && v[0] != '0';
  return o;
}

}  // namespace runtime
}  // namespace qnn_delegate
