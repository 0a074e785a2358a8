// The report (contract::ConversionReport) as a Python class read into dicts (`Report.data`), and the export front's
// report from its records (contract::programReport): each record a class with named fields.
#pragma once

#include <pybind11/pybind11.h>

namespace torch_mp::python {

void bindReport(pybind11::module_& m);

} // namespace torch_mp::python
