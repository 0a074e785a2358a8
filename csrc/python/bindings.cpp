// Python bindings: graph-level entry points only. The Python package (torch_mp/) builds on these.
#include <torch/csrc/jit/python/pybind_utils.h>
#include <torch/extension.h>

#include <string>
#include <tuple>
#include <vector>

#include "core/op_policy.h"
#include "jit/pipeline.h"

namespace py = pybind11;

namespace torch_mp {
namespace {

using PolicyRows = std::vector<std::tuple<std::string, std::string, std::string>>;  // op, category, reason

core::OpCategory parseCategory(const std::string& name) {
  auto category = core::categoryFromString(name);
  TORCH_CHECK_VALUE(category, "torch_mp: unknown op category '", name, "' (expected low, follow, widest or fp32)");
  return *category;
}

c10::ScalarType parseDtype(const std::string& name) {
  if (name == "float16") {
    return c10::ScalarType::Half;
  }
  if (name == "bfloat16") {
    return c10::ScalarType::BFloat16;
  }
  TORCH_CHECK_VALUE(false, "torch_mp: the low-precision dtype must be float16 or bfloat16, got ", name);
}

PolicyRows defaultPolicy(const std::string& targetName) {
  auto target = core::targetFromString(targetName);
  TORCH_CHECK_VALUE(target, "torch_mp: unknown policy target '", targetName,
                    "' (expected cuda_fp16, cuda_bf16, cpu_bf16 or cpu_fp16)");
  const core::OpPolicy policy = core::OpPolicy::defaults(*target);
  PolicyRows rows;
  for (const auto& [op, entry] : policy.entries()) {
    rows.emplace_back(op, core::toString(entry.category), entry.reason);
  }
  return rows;
}

std::pair<torch::jit::Module, std::string> convertModule(
    const torch::jit::Module& module,
    const py::tuple& exampleInputs,
    const std::string& dtype,
    const std::string& policyName,
    const PolicyRows& policyRows,
    const std::string& planner,
    bool verifyOutputs,
    bool fuseCasts) {
  jit::ConvertOptions options;
  options.lowDtype = parseDtype(dtype);
  options.policyName = policyName;
  for (const auto& [op, category, reason] : policyRows) {
    options.policy.set(op, parseCategory(category), reason);
  }
  TORCH_CHECK_VALUE(planner == "min-cut" || planner == "greedy", "torch_mp: planner must be 'min-cut' or 'greedy'");
  options.planner = planner == "min-cut" ? core::PlanMethod::kMinCut : core::PlanMethod::kGreedy;
  options.verifyOutputs = verifyOutputs;
  options.fuseCasts = fuseCasts;

  const c10::FunctionSchema& schema = module.get_method("forward").function().getSchema();
  const std::vector<c10::Argument>& arguments = schema.arguments();  // arguments[0] is self
  size_t required = 0;
  for (size_t i = 1; i < arguments.size(); ++i) {
    required += arguments[i].default_value() ? 0 : 1;
  }
  TORCH_CHECK_VALUE(
      exampleInputs.size() >= required && exampleInputs.size() < arguments.size(), "torch_mp: forward takes ",
      required == arguments.size() - 1 ? std::to_string(required)
                                       : std::to_string(required) + " to " + std::to_string(arguments.size() - 1),
      " inputs but example_inputs has ", exampleInputs.size());
  std::vector<c10::IValue> inputs;
  for (size_t i = 1; i < arguments.size(); ++i) {
    const c10::Argument& argument = arguments[i];
    if (i - 1 >= exampleInputs.size()) {
      inputs.push_back(*argument.default_value());
      continue;
    }
    try {
      inputs.push_back(torch::jit::toIValue(exampleInputs[i - 1], argument.type()));
    } catch (const std::exception& error) {
      TORCH_CHECK_TYPE(false, "torch_mp: example input ", i - 1, " ('", argument.name(), "') does not fit type ",
                       argument.type()->repr_str(), ": ", error.what());
    }
  }
  jit::ConvertedModule converted;
  {
    py::gil_scoped_release release;
    converted = jit::convertModule(module, inputs, options);
  }
  return {std::move(converted.module), converted.report.toJson()};
}

} // namespace
} // namespace torch_mp

PYBIND11_MODULE(_C, m) {
  m.doc() = "torch_mp: mixed-precision conversion of TorchScript graphs";
  m.def("default_policy", &torch_mp::defaultPolicy, py::arg("target"),
        "The default op policy for a target as (op, category, reason) rows.");
  m.def("convert_module", &torch_mp::convertModule, py::arg("module"), py::arg("example_inputs"), py::arg("dtype"),
        py::arg("policy_name"), py::arg("policy"), py::arg("planner"), py::arg("verify_outputs"),
        py::arg("fuse_casts") = true,
        "Freezes a copy of a scripted module and converts it; returns (module, report JSON).");
}
