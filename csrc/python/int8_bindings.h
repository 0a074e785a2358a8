// The int8 planner's records and functions (core/int8_kernels, core/int8_planner) as Python classes with named fields:
// a misspelt field is an AttributeError, never a fact silently left at its default.
#pragma once

#include <pybind11/pybind11.h>

namespace torch_mp::python {

void bindInt8(pybind11::module_& m);

} // namespace torch_mp::python
