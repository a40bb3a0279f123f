#include "backends/qualcomm/runtime/engine/DataType.h"

namespace qnn_delegate {
namespace engine {

int element_bits(DType dt) {
  switch (dt) {
    case DType::INT_8:
    case DType::UINT_8:
    case DType::SFIXED_POINT_8:
    case DType::UFIXED_POINT_8:
    case DType::BOOL_8:
      return 8;
    case DType::INT_16:
    case DType::UINT_16:
    case DType::FLOAT_16:
    case DType::SFIXED_POINT_16:
    case DType::UFIXED_POINT_16:
      return 16;
    case DType::INT_32:
    case DType::UINT_32:
    case DType::FLOAT_32:
    case DType::SFIXED_POINT_32:
      return 32;
    case DType::INT_64:
    case DType::UINT_64:
      return 64;
    case DType::SFIXED_POINT_4:
    case DType::UFIXED_POINT_4:
      return 4;
    default:
      return 0;
  }
}

size_t storage_bytes(DType dt, size_t numel) {
  const size_t bits = static_cast<size_t>(element_bits(dt));
  return (numel * bits + 7) / 8;
}

size_t element_size(DType dt) {
  const int bits = element_bits(dt);
  return bits >= 8 ? static_cast<size_t>(bits / 8) : 0;
}

const char* dtype_name(DType dt) {
  const char* name = ::qnn_delegate::EnumNameQnnDataType(dt);
  return (name && *name) ? name : "<unknown data type>";
}

const char* kind_name(TensorKind kind) {
  const char* name = ::qnn_delegate::EnumNameQnnTensorType(kind);
  return (name && *name) ? name : "<unknown tensor type>";
}

} // namespace engine
} // namespace qnn_delegate
