#include "backends/qualcomm/runtime/CompileOptions.h"

#include <cstdint>
#include <cstring>
#include <memory>

#include "qc_compiler_spec_generated.h"

namespace qnn_delegate {
namespace runtime {

engine::Status parse_compile_options(const void* data, size_t size, CompileOptions& out) {
  out = CompileOptions();
  if (data == nullptr || size == 0) return engine::Status::Ok();
  std::unique_ptr<uint64_t[]> aligned(new uint64_t[(size + 7) / 8]);
  std::memcpy(aligned.get(), data, size);
  const auto* bytes = reinterpret_cast<const uint8_t*>(aligned.get());
  flatbuffers::Verifier verifier(bytes, size);
  if (!verifier.VerifyBuffer<::qnn_delegate::QnnExecuTorchOptions>(nullptr)) {
    return engine::make_error(engine::ErrorKind::InvalidArgument,
                              "compile spec '%s' (%zu bytes) is not a valid QnnExecuTorchOptions "
                              "flatbuffer",
                              kCompileSpecKey, size);
  }
  const auto* o = flatbuffers::GetRoot<::qnn_delegate::QnnExecuTorchOptions>(bytes);
  out.log_level = o->log_level();
  out.profile_level = o->profile_level();
  out.dump_intermediate_outputs = o->dump_intermediate_outputs();
  out.shared_buffer = o->shared_buffer();
  if (o->backend_options() && o->backend_options()->htp_options()) {
    out.performance_mode = o->backend_options()->htp_options()->performance_mode();
  }
  if (o->graph_name()) {
    for (const auto* s : *o->graph_name()) out.graph_names.push_back(s ? s->str() : "");
  }
  return engine::Status::Ok();
}

}  // namespace runtime
}  // namespace qnn_delegate
