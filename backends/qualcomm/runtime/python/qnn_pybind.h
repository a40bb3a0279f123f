// Real-QNN bindings of backends.qualcomm._qnn_delegate (see qnn_pybind.cpp).
#pragma once

#include <pybind11/pybind11.h>

namespace qnn_delegate {

void register_qnn_bindings(pybind11::module_& m);

}  // namespace qnn_delegate
