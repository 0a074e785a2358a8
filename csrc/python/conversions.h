// Type conversions the binding files share: names Python spells to the core's enums and back, CPU features by name,
// a guard's verdict as the report's dict.
#pragma once

#include <pybind11/pybind11.h>

#include <cstddef>
#include <optional>
#include <string>

#include "core/fast_kernels.h"
#include "core/op_policy.h"
#include "core/precision_planner.h"

namespace torch_mp::python {

// "a, b, c": the names of an enum's values.
template <typename Enum, size_t N>
std::string joinedNames(const Enum (&values)[N]) {
  std::string joined;
  for (size_t i = 0; i < N; ++i) {
    joined += (i ? ", " : "") + std::string(core::toString(values[i]));
  }
  return joined;
}

// The names of an enum's values, in the order of `values`.
template <typename Enum, size_t N>
pybind11::tuple namesOf(const Enum (&values)[N]) {
  pybind11::tuple names(N);
  for (size_t i = 0; i < N; ++i) {
    names[i] = core::toString(values[i]);
  }
  return names;
}

// A category by its name; a ValueError listing the names for another.
core::OpCategory parseCategory(const std::string& name);

// The host's CPU features (or TORCH_MP_CPU_FEATURES), or those `declared` names ("all", "none",
// "avx512_bf16,amx_bf16").
core::CpuFeatures cpuFeatures(const std::optional<std::string>& declared);

// "low" or "fp32", as the report and plan_dataflow write a precision.
const char* precisionName(core::Precision precision);

// A guard's verdict as the report writes it: {"kind": "underflow to zero", "value": "26", "seen": 1e-12,
// "limit": 5.96e-08}.
pybind11::dict guardDict(const core::GuardVerdict& guard);

} // namespace torch_mp::python
