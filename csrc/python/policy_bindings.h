// The op policy (core/op_policy) as a Python class, with the vocabularies of its categories, targets, rule kinds and
// guard kinds, and the CPU features that decide its defaults.
#pragma once

#include <pybind11/pybind11.h>

namespace torch_mp::python {

void bindPolicy(pybind11::module_& m);

} // namespace torch_mp::python
