// What the torch.export front (torch_mp/_export/) asks the core, as Python classes with named fields: a node's facts
// (core::NodeFacts) and the numbers the range guards judge go in, the core's decision (core::NodeDecision) comes out;
// a misspelt or missing field is a TypeError, never a fact silently false on this front only. Also the planner, the
// op facts, the FLOP formulas, stored weights' storing and the underflow-to-zero walk over the FX graph's view.
#pragma once

#include <pybind11/pybind11.h>

namespace torch_mp::python {

void bindExportCore(pybind11::module_& m);

} // namespace torch_mp::python
