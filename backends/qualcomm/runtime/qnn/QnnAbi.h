// Our own declarations of the part of Qualcomm's QNN C ABI that qnn-delegate
// calls (core API 2.x, HTP backend API 5.x). Written from the public ABI
// facts (struct layouts, enum values, the order of the provider's function
// table); no vendor header is used. Only what we call is declared; the
// layouts are checked by static_asserts below and by tests against the
// real library (backends/qualcomm/tests/qnn/test_qnn_abi.py).
#pragma once

#include <cstdarg>
#include <cstddef>
#include <cstdint>

namespace qnn_delegate {
namespace qnn {

extern "C" {

using QnnStatus = uint64_t;  // 0 = success, else an error code (see qnn_error_name)
using QnnHandle = void*;

// ---- versions ---------------------------------------------------------------
struct QnnVersion {
  uint32_t major;
  uint32_t minor;
  uint32_t patch;
};
struct QnnApiVersion {
  QnnVersion core;
  QnnVersion backend;
};

// ---- data types, tensor kinds ----------------------------------------------
enum QnnDType : int32_t {
  kQnnInt8 = 0x0008,
  kQnnInt16 = 0x0016,
  kQnnInt32 = 0x0032,
  kQnnInt64 = 0x0064,
  kQnnUInt8 = 0x0108,
  kQnnUInt16 = 0x0116,
  kQnnUInt32 = 0x0132,
  kQnnUInt64 = 0x0164,
  kQnnFloat16 = 0x0216,
  kQnnFloat32 = 0x0232,
  kQnnSFixed4 = 0x0304,
  kQnnSFixed8 = 0x0308,
  kQnnSFixed16 = 0x0316,
  kQnnSFixed32 = 0x0332,
  kQnnUFixed4 = 0x0404,
  kQnnUFixed8 = 0x0408,
  kQnnUFixed16 = 0x0416,
  kQnnBool8 = 0x0508,
  kQnnDTypeUndefined = 0x7FFFFFFF,
};

enum QnnTensorKind : int32_t {
  kQnnAppWrite = 0,
  kQnnAppRead = 1,
  kQnnAppReadWrite = 2,
  kQnnNative = 3,
  kQnnStatic = 4,
  kQnnNullTensor = 5,
};

// ---- quantization -------------------------------------------------------------
enum QnnQuantDefinition : int32_t {
  kQnnQuantImplGenerated = 0,
  kQnnQuantDefined = 1,
  kQnnQuantDefinitionUndefined = 0x7FFFFFFF
};
enum QnnQuantEncodingKind : int32_t {
  kQnnEncScaleOffset = 0,
  kQnnEncAxisScaleOffset = 1,
  kQnnEncBwScaleOffset = 2,
  kQnnEncBwAxisScaleOffset = 3,
  kQnnEncBlockwiseExpansion = 5,
  kQnnEncUndefined = 0x7FFFFFFF,
};

struct QnnScaleOffset {
  float scale;
  int32_t offset;
};
struct QnnAxisScaleOffset {
  int32_t axis;
  uint32_t count;
  QnnScaleOffset* values;
};
struct QnnBwScaleOffset {
  uint32_t bitwidth;
  float scale;
  int32_t offset;
};
struct QnnBwAxisScaleOffset {
  uint32_t bitwidth;
  int32_t axis;
  uint32_t count;
  float* scales;
  int32_t* offsets;  // may be null (all zero)
};
// LPBQ (checked against public users of the ABI; not sent: QNN 2.51 computes some LPBQ ops
// wrong, so LPBQ weights go to QNN as 8-bit per-channel codes, see QnnTensorDesc.h).
enum QnnBlockScaleStorage : int32_t { kQnnBlockScale8 = 0, kQnnBlockScale16 = 1 };
struct QnnBlockwiseExpansion {
  int32_t axis;
  QnnScaleOffset* per_channel;  // one per index of `axis`
  uint32_t blocks_per_axis;
  uint32_t block_scale_bitwidth;
  QnnBlockScaleStorage block_scale_storage;
  uint8_t* block_scales;  // [channel][block]
};

struct QnnQuantParams {
  QnnQuantDefinition definition;
  QnnQuantEncodingKind encoding;
  union {
    QnnScaleOffset scale_offset;
    QnnAxisScaleOffset axis_scale_offset;
    QnnBwScaleOffset bw_scale_offset;
    QnnBwAxisScaleOffset bw_axis_scale_offset;
    QnnBlockwiseExpansion* blockwise;
    uint8_t reserved[32];  // the widest member of the library's union
  };
};

// ---- tensors ------------------------------------------------------------------
enum QnnMemKind : int32_t { kQnnMemRaw = 0, kQnnMemHandle = 1 };
struct QnnBuffer {
  void* data;
  uint32_t size;
};

struct QnnTensorV1 {
  uint32_t id;
  const char* name;
  QnnTensorKind kind;
  uint32_t data_format;  // 0 = dense
  QnnDType dtype;
  QnnQuantParams quant;
  uint32_t rank;
  uint32_t* dims;
  QnnMemKind mem_kind;
  union {
    QnnBuffer buffer;
    QnnHandle mem_handle;
  };
};

struct QnnSparseParams {
  int32_t layout;  // 0x7FFFFFFF = none
  uint32_t specified_elements;
  uint32_t sparse_dims;
};

// Tensor v2: the v1 fields (same offsets; the library's v2 memory union adds a raw
// retrieve pointer of the same size), then the v2 additions.
struct QnnTensorV2 {
  QnnTensorV1 common;
  uint8_t* dynamic_dims;  // null = static shape
  QnnSparseParams sparse;
  uint8_t is_produced;
};

struct QnnTensor {
  uint32_t version;  // 1 or 2
  union {
    QnnTensorV1 v1;
    QnnTensorV2 v2;
  };
};

// ---- params and op configs -----------------------------------------------------
struct QnnScalar {
  QnnDType dtype;
  union {
    float f32;
    double f64;
    uint64_t u64;
    int64_t i64;
    uint32_t u32;
    int32_t i32;
    uint16_t u16;
    int16_t i16;
    uint8_t u8;
    int8_t i8;
    uint8_t b8;
    const char* str;
  };
};

enum QnnParamKind : int32_t { kQnnParamScalar = 0, kQnnParamTensor = 1 };
struct QnnParam {
  QnnParamKind kind;
  const char* name;
  union {
    QnnScalar scalar;
    QnnTensor tensor;
  };
};

struct QnnOpConfigV1 {
  const char* name;
  const char* package;
  const char* type;
  uint32_t num_params;
  QnnParam* params;
  uint32_t num_inputs;
  QnnTensor* inputs;
  uint32_t num_outputs;
  QnnTensor* outputs;
};
struct QnnOpConfig {
  uint32_t version;  // 1
  QnnOpConfigV1 v1;
};

// ---- configs ----------------------------------------------------------------------
// Generic config record of backend / device / context / graph: an option then a
// pointer-sized union; option 0 = "custom" (pointer to a backend-specific record).
struct QnnConfig {
  int32_t option;
  union {
    void* custom;
    int32_t i32;
    uint64_t u64;
  };
};
inline constexpr int32_t kQnnConfigCustom = 0;

// HTP device custom config: 4-byte option, union at byte offset 8 (HTP API 5.51).
inline constexpr int32_t kHtpDeviceOptionSoc = 0;
struct HtpDeviceConfig {
  int32_t option;
  union alignas(8) {
    uint32_t soc_model;
    uint8_t reserved[16];
  };
};

// HTP graph custom config.
inline constexpr int32_t kHtpGraphOptionOptimization = 1;
inline constexpr int32_t kHtpGraphOptionPrecision = 2;
inline constexpr int32_t kHtpGraphOptionVtcmMb = 3;
inline constexpr int32_t kHtpOptimizationFinalizeFlag = 3;  // "O" level: 1..3
inline constexpr int32_t kQnnPrecisionFloat16 = 1;
struct HtpGraphConfig {
  int32_t option;
  union alignas(8) {
    struct {
      int32_t type;
      float value;
    } optimization;
    int32_t precision;
    uint32_t vtcm_mb;
    uint8_t reserved[48];
  };
};

// ---- logging, profiling -------------------------------------------------------------
enum QnnLogLevel : int32_t { kQnnLogError = 1, kQnnLogWarn = 2, kQnnLogInfo = 3, kQnnLogVerbose = 4, kQnnLogDebug = 5 };
// Called with a printf format and its va_list.
using QnnLogCallback = void (*)(const char* fmt, QnnLogLevel level, uint64_t timestamp, va_list args);

inline constexpr uint32_t kQnnProfileBasic = 1;
inline constexpr uint32_t kQnnProfileDetailed = 2;
inline constexpr uint32_t kQnnProfileEventExecute = 400;
inline constexpr uint32_t kQnnProfileEventNode = 404;
inline constexpr uint32_t kQnnProfileUnitMicroseconds = 1;
inline constexpr uint32_t kQnnProfileUnitCycles = 3;
struct QnnProfileEvent {
  uint32_t type;
  uint32_t unit;
  uint64_t value;
  const char* identifier;
};

// ---- memory registration (QnnMem) ---------------------------------------------------
enum QnnMemType : int32_t { kQnnMemIon = 1, kQnnMemCustom = 2, kQnnMemDmaBuf = 3 };
struct QnnMemDescriptor {
  uint32_t rank;  // memory shape
  uint32_t* dims;
  const char* shape_config;  // may be null
  QnnDType dtype;
  QnnMemType type;
  union {
    int32_t ion_fd;
    void* custom;
    struct {
      int32_t fd;
      void* data;
    } dma_buf;
  };
};
inline constexpr QnnStatus kQnnMemUnsupportedType = 8005;

// ---- the provider's function table -----------------------------------------------------
// Only the slots we call are typed; the others are opaque placeholders that keep
// the order.
using QnnFnSlot = void*;
struct QnnFunctionTable {
  QnnFnSlot property_has_capability;
  QnnStatus (*backend_create)(QnnHandle log, const QnnConfig** config, QnnHandle* backend);
  QnnFnSlot backend_set_config;
  QnnStatus (*backend_get_api_version)(QnnApiVersion* version);
  QnnStatus (*backend_get_build_id)(const char** id);
  QnnFnSlot backend_register_op_package;
  QnnFnSlot backend_get_supported_operations;
  QnnStatus (*backend_validate_op_config)(QnnHandle backend, QnnOpConfig op);
  QnnStatus (*backend_free)(QnnHandle backend);

  QnnStatus (*context_create)(QnnHandle backend, QnnHandle device, const QnnConfig** config, QnnHandle* context);
  QnnFnSlot context_set_config;
  QnnStatus (*context_get_binary_size)(QnnHandle context, uint64_t* size);
  QnnStatus (*context_get_binary)(QnnHandle context, void* buffer, uint64_t size, uint64_t* written);
  QnnStatus (*context_create_from_binary)(QnnHandle backend, QnnHandle device, const QnnConfig** config,
                                          const void* binary, uint64_t size, QnnHandle* context, QnnHandle profile);
  QnnStatus (*context_free)(QnnHandle context, QnnHandle profile);

  QnnStatus (*graph_create)(QnnHandle context, const char* name, const QnnConfig** config, QnnHandle* graph);
  QnnFnSlot graph_create_subgraph;
  QnnFnSlot graph_set_config;
  QnnStatus (*graph_add_node)(QnnHandle graph, QnnOpConfig op);
  QnnStatus (*graph_finalize)(QnnHandle graph, QnnHandle profile, QnnHandle signal);
  QnnStatus (*graph_retrieve)(QnnHandle context, const char* name, QnnHandle* graph);
  QnnStatus (*graph_execute)(QnnHandle graph, const QnnTensor* inputs, uint32_t num_inputs, QnnTensor* outputs,
                             uint32_t num_outputs, QnnHandle profile, QnnHandle signal);
  QnnFnSlot graph_execute_async;

  QnnFnSlot tensor_create_context_tensor;
  QnnStatus (*tensor_create_graph_tensor)(QnnHandle graph, QnnTensor* tensor);

  QnnStatus (*log_create)(QnnLogCallback callback, QnnLogLevel max_level, QnnHandle* log);
  QnnStatus (*log_set_log_level)(QnnHandle log, QnnLogLevel max_level);
  QnnStatus (*log_free)(QnnHandle log);

  QnnStatus (*profile_create)(QnnHandle backend, uint32_t level, QnnHandle* profile);
  QnnFnSlot profile_set_config;
  QnnStatus (*profile_get_events)(QnnHandle profile, const uint64_t** events, uint32_t* count);
  QnnStatus (*profile_get_sub_events)(uint64_t event, const uint64_t** events, uint32_t* count);
  QnnStatus (*profile_get_event_data)(uint64_t event, QnnProfileEvent* data);
  QnnFnSlot profile_get_extended_event_data;
  QnnStatus (*profile_free)(QnnHandle profile);

  QnnStatus (*mem_register)(QnnHandle context, const struct QnnMemDescriptor* descriptors, uint32_t count,
                            QnnHandle* handles);
  QnnStatus (*mem_deregister)(const QnnHandle* handles, uint32_t count);

  QnnFnSlot device_get_platform_info;
  QnnFnSlot device_free_platform_info;
  QnnFnSlot device_get_infrastructure;
  QnnStatus (*device_create)(QnnHandle log, const QnnConfig** config, QnnHandle* device);
  QnnFnSlot device_set_config;
  QnnFnSlot device_get_info;
  QnnStatus (*device_free)(QnnHandle device);

  QnnFnSlot signal_create;
  QnnFnSlot signal_set_config;
  QnnFnSlot signal_trigger;
  QnnFnSlot signal_free;

  QnnFnSlot error_get_message;
  QnnFnSlot error_get_verbose_message;
  QnnFnSlot error_free_verbose_message;

  QnnFnSlot graph_prepare_execution_environment;
  QnnFnSlot graph_release_execution_environment;
  QnnFnSlot graph_get_property;

  QnnStatus (*context_validate_binary)(QnnHandle backend, QnnHandle device, const QnnConfig** config,
                                       const void* binary, uint64_t size);
};

// One provider of a backend library.
struct QnnProvider {
  uint32_t backend_id;
  const char* name;
  QnnApiVersion api_version;
  QnnFunctionTable functions;  // a union of one member in the library
};

using QnnGetProvidersFn = QnnStatus (*)(const QnnProvider*** providers, uint32_t* count);

// ---- libQnnSystem.so: context-binary info (system API 1.x) ---------------------------
// QnnSystemInterface_getProviders lists providers {backend id, name, system API version,
// function table}; the table starts with systemContextCreate, systemContextGetBinaryInfo,
// systemContextGetMetadata, systemContextFree.
struct QnnSystemGraphInfo {  // graph info v1; v2 / v3 append fields after these
  const char* name;
  uint32_t num_inputs;
  QnnTensor* inputs;
  uint32_t num_outputs;
  QnnTensor* outputs;
};
struct QnnSystemGraphInfoEntry {
  uint32_t version;  // 1, 2 or 3
  union {
    QnnSystemGraphInfo v1;
    uint8_t reserved[80];  // v3, the widest
  };
};
// Binary info v1 / v2 (v2 appends a platform-info pointer).
struct QnnSystemBinaryInfoV1 {
  uint32_t backend_id;
  const char* build_id;
  QnnVersion core_api;
  QnnVersion backend_api;
  const char* soc_version;
  QnnVersion hw_info_version;
  QnnVersion context_blob_version;
  uint32_t hw_info_size;
  void* hw_info;
  uint64_t context_blob_size;
  uint32_t num_context_tensors;
  QnnTensor* context_tensors;
  uint32_t num_graphs;
  QnnSystemGraphInfoEntry* graphs;
  void* platform_info;  // v2 only
};
// Binary info v3: no hardware-info blob; context metadata and the SoC model appended.
struct QnnSystemBinaryInfoV3 {
  uint32_t backend_id;
  const char* build_id;
  QnnVersion core_api;
  QnnVersion backend_api;
  const char* soc_version;
  QnnVersion context_blob_version;
  uint64_t context_blob_size;
  uint32_t num_context_tensors;
  QnnTensor* context_tensors;
  uint32_t num_graphs;
  QnnSystemGraphInfoEntry* graphs;
  void* platform_info;
  uint32_t metadata_size;
  void* metadata;
  uint32_t soc_model;
};
struct QnnSystemBinaryInfo {
  uint32_t version;  // 1, 2 or 3
  union {
    QnnSystemBinaryInfoV1 v1;  // versions 1 and 2
    QnnSystemBinaryInfoV3 v3;
  };
};
struct QnnSystemFunctionTable {
  QnnStatus (*context_create)(QnnHandle* system_context);
  QnnStatus (*context_get_binary_info)(QnnHandle system_context, void* binary, uint64_t size,
                                       const QnnSystemBinaryInfo** info, uint64_t* info_size);
  QnnStatus (*context_get_metadata)(QnnHandle system_context, const void* binary, uint64_t size,
                                    const QnnSystemBinaryInfo** info);
  QnnStatus (*context_free)(QnnHandle system_context);
};
struct QnnSystemProvider {
  uint32_t backend_id;
  const char* name;
  QnnVersion system_api_version;
  QnnSystemFunctionTable functions;
};
using QnnSystemGetProvidersFn = QnnStatus (*)(const QnnSystemProvider*** providers, uint32_t* count);

// ---- libQnnSaver.so -------------------------------------------------------------------
// QnnSaver_initialize(configs) must precede the saver's QnnInterface_getProviders; config
// option 0 = output directory (a string), option 2 = the backend id whose custom configs it records.
struct QnnSaverConfig {
  int32_t option;
  union {
    const char* output_directory;
    uint32_t backend_id;
    uint64_t reserved;
  };
};
inline constexpr int32_t kQnnSaverOptionOutputDirectory = 0;
inline constexpr int32_t kQnnSaverOptionBackendId = 2;
using QnnSaverInitializeFn = QnnStatus (*)(const QnnSaverConfig** configs);

}  // extern "C"

// Layout checks (x86_64 / aarch64 LP64).
static_assert(sizeof(QnnQuantParams) == 40, "QnnQuantParams layout");
static_assert(offsetof(QnnTensorV1, quant) == 32, "QnnTensorV1 layout");
static_assert(sizeof(QnnTensorV1) == 112, "QnnTensorV1 layout");
static_assert(offsetof(QnnTensorV1, rank) == 72, "QnnTensorV1 layout");
static_assert(offsetof(QnnTensorV1, buffer) == 96, "QnnTensorV1 layout");
static_assert(offsetof(QnnTensor, v1) == 8, "QnnTensor layout");
static_assert(offsetof(QnnTensorV2, dynamic_dims) == 112, "QnnTensorV2 layout");
static_assert(offsetof(QnnTensorV2, sparse) == 120, "QnnTensorV2 layout");
static_assert(offsetof(QnnTensorV2, is_produced) == 132, "QnnTensorV2 layout");
static_assert(sizeof(QnnTensorV2) == 136, "QnnTensorV2 layout");
static_assert(offsetof(QnnParam, scalar) == 16, "QnnParam layout");
static_assert(offsetof(QnnProvider, functions) == 40, "QnnProvider layout");
static_assert(offsetof(QnnOpConfig, v1) == 8, "QnnOpConfig layout");
static_assert(offsetof(HtpDeviceConfig, soc_model) == 8, "HTP device config: union at 8");
static_assert(offsetof(QnnFunctionTable, device_free) == 43 * sizeof(void*), "function table order");
static_assert(offsetof(QnnMemDescriptor, dtype) == 24 && sizeof(QnnMemDescriptor) == 48, "QnnMemDescriptor layout");
static_assert(offsetof(QnnSystemGraphInfo, outputs) == 32, "QnnSystemGraphInfo layout");
static_assert(offsetof(QnnMemDescriptor, dtype) == 24 && sizeof(QnnMemDescriptor) == 48, "QnnMemDescriptor layout");
static_assert(offsetof(QnnSystemGraphInfoEntry, v1) == 8, "QnnSystemGraphInfoEntry layout");
static_assert(offsetof(QnnSystemBinaryInfoV1, num_graphs) == 112, "QnnSystemBinaryInfoV1 layout");
static_assert(offsetof(QnnSystemBinaryInfoV1, graphs) == 120, "QnnSystemBinaryInfoV1 layout");
static_assert(offsetof(QnnSystemBinaryInfoV3, graphs) == 96, "QnnSystemBinaryInfoV3 layout");
static_assert(offsetof(QnnSystemBinaryInfo, v1) == 8, "QnnSystemBinaryInfo layout");
static_assert(offsetof(QnnSystemProvider, functions) == 32, "QnnSystemProvider layout");
static_assert(offsetof(QnnFunctionTable, context_validate_binary) == 54 * sizeof(void*), "function table order");

inline constexpr QnnStatus kQnnNotSupported = 1000;

// Core API major version these declarations follow.
inline constexpr uint32_t kQnnCoreApiMajor = 2;
// HTP backend API major version these declarations follow.
inline constexpr uint32_t kQnnHtpApiMajor = 5;
// Backend id of the HTP provider.
inline constexpr uint32_t kQnnHtpBackendId = 6;
// Backend id of the saver provider (libQnnSaver.so).
inline constexpr uint32_t kQnnSaverBackendId = 2;

}  // namespace qnn
}  // namespace qnn_delegate
