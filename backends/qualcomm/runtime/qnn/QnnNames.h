// Names the qnn/ sources share: the engine's status helpers and the payload schema's
// namespace (declared once here instead of in every .cpp).
#pragma once

#include "backends/qualcomm/runtime/engine/Status.h"

namespace qnn_delegate {
namespace qnn {

using engine::ErrorKind;
using engine::make_error;
using engine::Status;
namespace fb = ::qnn_delegate;

}  // namespace qnn
}  // namespace qnn_delegate
