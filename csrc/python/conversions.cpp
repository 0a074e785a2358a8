#include "python/conversions.h"

#include <torch/extension.h>

namespace torch_mp::python {

core::OpCategory parseCategory(const std::string& name) {
  auto category = core::categoryFromString(name);
  TORCH_CHECK_VALUE(category, "torch_mp: unknown op category '", name, "' (expected one of ",
                    joinedNames(core::kAllCategories), ")");
  return *category;
}

core::CpuFeatures cpuFeatures(const std::optional<std::string>& declared) {
  if (!declared) {
    return core::CpuFeatures::host();
  }
  std::optional<core::CpuFeatures> features = core::CpuFeatures::parse(*declared);
  TORCH_CHECK_VALUE(features, "torch_mp: unknown CPU feature in '", *declared, "'; use ", core::cpuFeaturesSyntax());
  return *features;
}

const char* precisionName(core::Precision precision) {
  return precision == core::Precision::kLow ? "low" : "fp32";
}

pybind11::dict guardDict(const core::GuardVerdict& guard) {
  pybind11::dict entry;
  entry["kind"] = core::toString(guard.kind);
  entry["value"] = guard.value;
  entry["seen"] = guard.seen;
  entry["limit"] = guard.limit;
  return entry;
}

} // namespace torch_mp::python
