// Python bindings: graph-level entry points only. The Python package (torch_mp/) builds on these.
#include <torch/csrc/DynamicTypes.h>
#include <torch/csrc/jit/python/pybind_utils.h>
#include <torch/extension.h>

#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "core/fast_kernels.h"
#include "core/op_policy.h"
#include "jit/pipeline.h"
#include "jit/value_probe.h"
#include "torch_mp/jit_pass.h"

namespace py = pybind11;

namespace torch_mp {
namespace {

using PolicyRows = std::vector<std::tuple<std::string, std::string, std::string>>;  // op, category, reason

// "a, b, c": the names of an enum's values.
template <typename Enum, size_t N>
std::string joinedNames(const Enum (&values)[N]) {
  std::string joined;
  for (size_t i = 0; i < N; ++i) {
    joined += (i ? ", " : "") + std::string(core::toString(values[i]));
  }
  return joined;
}

core::OpCategory parseCategory(const std::string& name) {
  auto category = core::categoryFromString(name);
  TORCH_CHECK_VALUE(category, "torch_mp: unknown op category '", name, "' (expected one of ",
                    joinedNames(core::kAllCategories), ")");
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

// The host's CPU features, or those `declared` names ("all", "none", "avx512_bf16,amx_bf16").
core::CpuFeatures cpuFeatures(const std::optional<std::string>& declared) {
  if (!declared) {
    return core::CpuFeatures::host();
  }
  std::optional<core::CpuFeatures> features = core::CpuFeatures::parse(*declared);
  TORCH_CHECK_VALUE(features, "torch_mp: unknown CPU feature in '", *declared, "'; use ", core::cpuFeaturesSyntax());
  return *features;
}

std::vector<std::string> cpuFeatureNames(const std::optional<std::string>& declared) {
  std::vector<std::string> names;
  for (core::CpuFeature feature : cpuFeatures(declared).list()) {
    names.emplace_back(core::toString(feature));
  }
  return names;
}

// The names of an enum's values, in the order of `values`.
template <typename Enum, size_t N>
py::tuple namesOf(const Enum (&values)[N]) {
  py::tuple names(N);
  for (size_t i = 0; i < N; ++i) {
    names[i] = core::toString(values[i]);
  }
  return names;
}

core::Target targetNamed(const std::string& name) {
  auto target = core::targetFromString(name);
  TORCH_CHECK_VALUE(target, "torch_mp: unknown policy target '", name, "' (expected one of ",
                    joinedNames(core::kAllTargets), ")");
  return *target;
}

using Capability = std::optional<std::pair<int, int>>;  // (major, minor)

std::optional<core::CudaCapability> cudaCapability(const Capability& capability) {
  if (!capability) {
    return std::nullopt;
  }
  return core::CudaCapability{capability->first, capability->second};
}

// The default policy's rows, and why its heavy ops were kept fp32 (or None).
std::pair<PolicyRows, std::optional<std::string>> defaultPolicy(
    const std::string& targetName,
    const std::optional<std::string>& cpu,
    const Capability& gpu) {
  const core::OpPolicy policy = core::OpPolicy::defaults(targetNamed(targetName), cpuFeatures(cpu), cudaCapability(gpu));
  PolicyRows rows;
  for (const auto& [op, entry] : policy.entries()) {
    rows.emplace_back(op, core::toString(entry.category), entry.reason);
  }
  return {rows, policy.slowKernels()};
}

// The forward's inputs from Python values, defaults filling trailing arguments left out. Errors call the values
// `what` and each one `element` and its index.
std::vector<c10::IValue> forwardInputs(
    const std::vector<c10::Argument>& arguments,  // arguments[0] is self
    const py::tuple& values,
    const std::string& what,
    const std::string& element) {
  size_t required = 0;
  for (size_t i = 1; i < arguments.size(); ++i) {
    required += arguments[i].default_value() ? 0 : 1;
  }
  TORCH_CHECK_VALUE(
      values.size() >= required && values.size() < arguments.size(), "torch_mp: forward takes ",
      required == arguments.size() - 1 ? std::to_string(required)
                                       : std::to_string(required) + " to " + std::to_string(arguments.size() - 1),
      " inputs but ", what, " has ", values.size());
  std::vector<c10::IValue> inputs;
  for (size_t i = 1; i < arguments.size(); ++i) {
    const c10::Argument& argument = arguments[i];
    if (i - 1 >= values.size()) {
      inputs.push_back(*argument.default_value());
      continue;
    }
    try {
      inputs.push_back(torch::jit::toIValue(values[i - 1], argument.type()));
    } catch (const std::exception& error) {
      TORCH_CHECK_TYPE(false, "torch_mp: ", element, " ", i - 1, " ('", argument.name(), "') does not fit type ",
                       argument.type()->repr_str(), ": ", error.what());
    }
  }
  return inputs;
}

py::object shapeOrNone(const std::optional<std::vector<int64_t>>& shape) {
  return shape ? py::object(py::tuple(py::cast(*shape))) : py::none();
}

// A C++ node rule calling the Python one: rule(op, scope, output, input_shapes, input_dtypes, constants) returns
// None or (category, kind, reason). Python exceptions become a ValueError naming the node.
jit::NodeRule nodeRuleFrom(py::object rule) {
  if (rule.is_none()) {
    return {};
  }
  auto shared = std::make_shared<py::object>(std::move(rule));
  return [shared](const jit::NodeDescription& node) -> std::optional<jit::NodeOverride> {
    py::gil_scoped_acquire acquire;
    py::object verdict;
    try {
      py::list shapes;
      py::list dtypes;
      for (size_t i = 0; i < node.inputShapes.size(); ++i) {
        shapes.append(shapeOrNone(node.inputShapes[i]));
        dtypes.append(node.inputDtypes[i] ? py::reinterpret_borrow<py::object>(
                                                 reinterpret_cast<PyObject*>(torch::getTHPDtype(*node.inputDtypes[i])))
                                           : py::none());
      }
      py::dict constants;
      for (const auto& [name, value] : node.constants) {
        constants[py::str(name)] = torch::jit::toPyObject(value);
      }
      verdict = (*shared)(node.op, node.scope, node.output, py::tuple(shapes), py::tuple(dtypes), constants);
    } catch (py::error_already_set& error) {
      TORCH_CHECK_VALUE(false, "torch_mp: a node rule failed on ", node.op, " (output %", node.output, ", module '",
                        node.scope, "'): ", error.what());
    }
    if (verdict.is_none()) {
      return std::nullopt;
    }
    auto [category, kind, reason] = verdict.cast<std::tuple<std::string, std::string, std::string>>();
    const std::optional<core::RuleKind> ruleKind = core::ruleKindFromString(kind);
    TORCH_CHECK_VALUE(ruleKind, "torch_mp: a node rule named an unknown rule kind '", kind, "'");
    return jit::NodeOverride{parseCategory(category), *ruleKind, reason};
  };
}

core::PlanMethod parsePlanner(const std::string& planner) {
  TORCH_CHECK_VALUE(planner == "min-cut" || planner == "greedy", "torch_mp: planner must be 'min-cut' or 'greedy'");
  return planner == "min-cut" ? core::PlanMethod::kMinCut : core::PlanMethod::kGreedy;
}

core::OpPolicy policyFrom(const PolicyRows& rows) {
  core::OpPolicy policy;
  for (const auto& [op, category, reason] : rows) {
    policy.set(op, parseCategory(category), reason);
  }
  return policy;
}

// policyRows: None for each graph's default policy.
void enableJitPass(
    const std::string& dtype,
    const std::optional<std::string>& policyName,
    const std::optional<PolicyRows>& policyRows,
    const std::string& planner,
    bool fuseCasts,
    bool fusedKernels,
    bool channelsLast,
    bool fuseConvolutions) {
  jit::JitPassOptions options;
  options.dtype = parseDtype(dtype);
  if (policyRows) {
    options.policy = policyFrom(*policyRows);
    options.policyName = policyName.value_or("custom");
  }
  options.planner = parsePlanner(planner);
  options.fuseCasts = fuseCasts;
  options.fusedKernels = fusedKernels;
  options.channelsLast = channelsLast;
  options.fuseConvolutions = fuseConvolutions;
  jit::enableMixedPrecisionPass(options);
}

// (converted, skipped, last outcome, last report JSON or None, last error)
std::tuple<int64_t, int64_t, std::string, std::optional<std::string>, std::string> jitPassActivity() {
  const jit::PassActivity activity = jit::mixedPrecisionPassActivity();
  return {activity.converted, activity.skipped, jit::toString(activity.lastOutcome),
          activity.lastReport ? std::make_optional(activity.lastReport->toJson()) : std::nullopt, activity.lastError};
}

std::pair<torch::jit::Module, std::string> convertModule(
    const torch::jit::Module& module,
    const py::tuple& exampleInputs,
    const std::string& dtype,
    const std::string& policyName,
    const PolicyRows& policyRows,
    const std::string& planner,
    bool verifyOutputs,
    py::object nodeRule,
    const std::vector<py::tuple>& calibrationInputs,
    bool lowPrecisionIO,
    bool fuseCasts,
    bool fusedKernels,
    bool channelsLast,
    bool fuseConvolutions) {
  jit::ConvertOptions options;
  options.lowDtype = parseDtype(dtype);
  options.policyName = policyName;
  options.policy = policyFrom(policyRows);
  options.planner = parsePlanner(planner);
  options.verifyOutputs = verifyOutputs;
  options.nodeRule = nodeRuleFrom(std::move(nodeRule));
  options.lowPrecisionIO = lowPrecisionIO;
  options.fuseCasts = fuseCasts;
  options.fusedKernels = fusedKernels;
  options.channelsLast = channelsLast;
  options.fuseConvolutions = fuseConvolutions;

  const c10::FunctionSchema& schema = module.get_method("forward").function().getSchema();
  std::vector<c10::IValue> inputs = forwardInputs(schema.arguments(), exampleInputs, "example_inputs", "example input");
  std::vector<std::vector<c10::IValue>> calibration;
  for (size_t i = 0; i < calibrationInputs.size(); ++i) {
    calibration.push_back(
        forwardInputs(schema.arguments(), calibrationInputs[i], "calibration_inputs[" + std::to_string(i) + "]",
                      "calibration_inputs[" + std::to_string(i) + "] input"));
  }
  jit::ConvertedModule converted;
  {
    py::gil_scoped_release release;
    converted = jit::convertModule(module, inputs, options, calibration);
  }
  return {std::move(converted.module), converted.report.toJson()};
}

std::vector<at::Tensor> probeValues(
    const torch::jit::Module& module,
    const py::tuple& inputs,
    const std::vector<std::string>& names) {
  const c10::FunctionSchema& schema = module.get_method("forward").function().getSchema();
  std::vector<c10::IValue> values = forwardInputs(schema.arguments(), inputs, "inputs", "input");
  py::gil_scoped_release release;
  return jit::probeValues(module, values, names);
}

} // namespace
} // namespace torch_mp

PYBIND11_MODULE(_C, m) {
  m.doc() = "torch_mp: mixed-precision conversion of TorchScript graphs";
  m.attr("MODEL_RUN_FAILED") = torch_mp::jit::kModelRunFailed;
  m.attr("CATEGORIES") = torch_mp::namesOf(torch_mp::core::kAllCategories);
  m.attr("TARGETS") = torch_mp::namesOf(torch_mp::core::kAllTargets);
  {
    py::tuple kinds(std::size(torch_mp::core::kRuleKindNames));
    for (size_t i = 0; i < kinds.size(); ++i) {
      kinds[i] = torch_mp::core::kRuleKindNames[i].name;
    }
    m.attr("RULE_KINDS") = kinds;  // what a node's rule_kind in the report can be
  }
  m.def(
      "target_for",
      [](bool cuda, bool float16) { return torch_mp::core::toString(torch_mp::core::targetFor(cuda, float16)); },
      py::arg("cuda"), py::arg("float16"), "The default policy target's name for the device kind and low dtype.");
  m.def("default_policy", &torch_mp::defaultPolicy, py::arg("target"), py::arg("cpu_features") = py::none(),
        py::arg("cuda_capability") = py::none(),
        "The default op policy for a target as (op, category, reason) rows, for the CPU features named (default: "
        "this CPU's, or TORCH_MP_CPU_FEATURES) and the GPU's (major, minor) compute capability (default: unknown), "
        "with why its heavy ops were kept fp32 (no fast kernels there) or None.");
  m.def("cpu_features", &torch_mp::cpuFeatureNames, py::arg("declared") = py::none(),
        "The CPU features that decide fast low-precision kernels: this CPU's (or TORCH_MP_CPU_FEATURES), or those "
        "`declared` names.");
  m.def("convert_module", &torch_mp::convertModule, py::arg("module"), py::arg("example_inputs"), py::arg("dtype"),
        py::arg("policy_name"), py::arg("policy"), py::arg("planner"), py::arg("verify_outputs"),
        py::arg("node_rule"), py::arg("calibration_inputs"), py::arg("low_precision_io"), py::arg("fuse_casts"),
        py::arg("fused_kernels"), py::arg("channels_last"), py::arg("fuse_convolutions"), "Freezes a copy of a scripted module and converts it; returns (module, report JSON).");
  m.def("enable_jit_pass", &torch_mp::enableJitPass, py::arg("dtype"), py::arg("policy_name"), py::arg("policy"),
        py::arg("planner"), py::arg("fuse_casts"), py::arg("fused_kernels"), py::arg("channels_last"),
        py::arg("fuse_convolutions"), "Enables the load-time mixed-precision pass (registered once per process).");
  m.def("disable_jit_pass", &torch_mp::jit::disableMixedPrecisionPass, "Disables the load-time pass.");
  m.def("jit_pass_enabled", &torch_mp::jit::mixedPrecisionPassEnabled);
  m.def("jit_pass_activity", &torch_mp::jitPassActivity,
        "(graphs converted, graphs skipped, last outcome, last report JSON or None, last error)");
  m.def("probe_values", &torch_mp::probeValues, py::arg("module"), py::arg("inputs"), py::arg("names"),
        "Runs a converted module's forward and returns the named top-level values (undefined where absent).");
}
