// Verifies a delegate blob (QnnContextBinary container, FNV-1a signature,
// nested QnnPayload) and builds the engine graphs from it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backends/qualcomm/runtime/engine/GraphExecutor.h"
#include "backends/qualcomm/runtime/engine/Status.h"

namespace qnn_delegate {
namespace runtime {

constexpr uint32_t kSchemaVersion = 1;

uint64_t fnv1a64(const uint8_t* data, size_t size);

// A blob's bytes at a 16-byte aligned address (flatbuffers reads 8-byte fields in
// place): the caller's bytes when aligned, else a copy owned here.
struct AlignedBlob {
  const uint8_t* data = nullptr;
  std::unique_ptr<uint64_t[]> storage;
  AlignedBlob(const void* src, size_t size);
};

// Verifies `data` and returns the nested payload (which points into `data`).
engine::Status verify_context_binary(const uint8_t* data, size_t size, const ::qnn_delegate::QnnPayload** payload);

// Verifies the blob and builds graph `graph_index`, or every graph when
// graph_index < 0. Copies `data` first when it is not 16-byte aligned.
engine::Status load_graphs(const void* data, size_t size, const engine::EngineOptions& options, int graph_index,
                           std::vector<std::unique_ptr<engine::GraphExecutor>>& graphs);

// Verifies the blob and builds the graph named `method_name` (graph 0 when
// no graph has that name or method_name is null).
engine::Status load_graph_for_method(const void* data, size_t size, const engine::EngineOptions& options,
                                     const char* method_name, std::unique_ptr<engine::GraphExecutor>& graph);

// Options of the reference ("oracle") kernels: QNN_DELEGATE_REFERENCE_KERNELS=1.
engine::EngineOptions engine_options_from_env();

}  // namespace runtime
}  // namespace qnn_delegate
