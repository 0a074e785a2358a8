// Python bindings, the module torch_mp._C. The options, the op policy, the prepared model and the report are bound C++
// objects; the Python package (torch_mp/) is a view of them: it keeps no second copy of the policy, and only the
// user's rule callables are called back from C++. Bindings convert types, the work is the core's and the passes': this
// file binds the options, preparation, conversion and the load-time pass; by topic, policy_bindings (the op policy),
// export_bindings (what the export front asks the core), report_bindings (the report), int8_bindings (the int8
// planner); conversions holds what they share.
#include <torch/csrc/DynamicTypes.h>
#include <torch/csrc/jit/python/pybind_utils.h>
#include <torch/extension.h>
#include <torch/version.h>

#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "contract/conversion_request.h"
#include "core/op_policy.h"
#include "core/precision_planner.h"
#include "jit/pipeline.h"
#include "jit/report/value_probe.h"
#include "python/conversions.h"
#include "python/export_bindings.h"
#include "python/int8_bindings.h"
#include "python/policy_bindings.h"
#include "python/report_bindings.h"
#include "torch_mp/jit_pass.h"

namespace py = pybind11;

namespace torch_mp {
namespace {

core::LowDtype lowDtypeNamed(const std::string& name) {
  if (name == "float16") {
    return core::LowDtype::kFloat16;
  }
  if (name == "bfloat16") {
    return core::LowDtype::kBFloat16;
  }
  TORCH_CHECK_VALUE(false, "torch_mp: the low-precision dtype must be float16 or bfloat16, got ", name);
}

// The vocabularies of the request and TorchScript's options as Python spells them (torch_mp.options reads them as
// _C.PLANNERS and _C.KERNELS).
template <typename Enum>
struct Named {
  Enum value;
  const char* name;
};
constexpr Named<core::PlanMethod> kPlanners[] = {{core::PlanMethod::kMinCut, "min-cut"},
                                                 {core::PlanMethod::kGreedy, "greedy"}};
constexpr Named<jit::Kernels> kKernels[] = {{jit::Kernels::kPortable, "portable"}, {jit::Kernels::kFused, "fused"}};

template <typename Enum, size_t N>
Enum parseNamed(const Named<Enum> (&names)[N], const std::string& name, const char* what) {
  for (const Named<Enum>& named : names) {
    if (name == named.name) {
      return named.value;
    }
  }
  std::string expected;
  for (const Named<Enum>& named : names) {
    expected += (expected.empty() ? "'" : ", '") + std::string(named.name) + "'";
  }
  TORCH_CHECK_VALUE(false, "torch_mp: ", what, " must be one of ", expected, ", got '", name, "'");
}

template <typename Enum, size_t N>
py::tuple vocabulary(const Named<Enum> (&names)[N]) {
  py::tuple tuple(N);
  for (size_t i = 0; i < N; ++i) {
    tuple[i] = names[i].name;
  }
  return tuple;
}

core::PlanMethod parsePlanner(const std::string& planner) {
  return parseNamed(kPlanners, planner, "planner");
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

std::vector<std::vector<c10::IValue>> calibrationStacks(
    const torch::jit::Module& module, const std::vector<py::tuple>& calibrationInputs) {
  const c10::FunctionSchema& schema = module.get_method("forward").function().getSchema();
  std::vector<std::vector<c10::IValue>> calibration;
  for (size_t i = 0; i < calibrationInputs.size(); ++i) {
    const std::string name = "calibration_inputs[" + std::to_string(i) + "]";
    calibration.push_back(forwardInputs(schema.arguments(), calibrationInputs[i], name, name + " input"));
  }
  return calibration;
}

std::vector<c10::IValue> exampleStack(const torch::jit::Module& module, const py::tuple& exampleInputs) {
  const c10::FunctionSchema& schema = module.get_method("forward").function().getSchema();
  return forwardInputs(schema.arguments(), exampleInputs, "example_inputs", "example input");
}

py::object shapeOrNone(const std::optional<std::vector<int64_t>>& shape) {
  return shape ? py::object(py::tuple(py::cast(*shape))) : py::none();
}

py::object dtypeObject(c10::ScalarType dtype) {
  return py::reinterpret_borrow<py::object>(reinterpret_cast<PyObject*>(torch::getTHPDtype(dtype)));
}

// A C++ node rule calling the Python one: rule(id, op, scope, output, input_shapes, input_dtypes, constants) returns
// None or (category, reason). Python exceptions become a ValueError naming the node.
jit::NodeRule nodeRuleFrom(py::object rule) {
  if (rule.is_none()) {
    return {};
  }
  auto shared = std::shared_ptr<py::object>(new py::object(std::move(rule)), [](py::object* held) {
    py::gil_scoped_acquire acquire;  // the last owner may be a thread without the GIL
    delete held;
  });
  return [shared](const jit::NodeDescription& node) -> std::optional<jit::NodeOverride> {
    py::gil_scoped_acquire acquire;
    py::object verdict;
    try {
      py::list shapes;
      py::list dtypes;
      for (size_t i = 0; i < node.inputShapes.size(); ++i) {
        shapes.append(shapeOrNone(node.inputShapes[i]));
        dtypes.append(node.inputDtypes[i] ? dtypeObject(*node.inputDtypes[i]) : py::none());
      }
      py::dict constants;
      for (const auto& [name, value] : node.constants) {
        constants[py::str(name)] = torch::jit::toPyObject(value);
      }
      verdict = (*shared)(node.id, node.op, node.scope, node.output, py::tuple(shapes), py::tuple(dtypes), constants);
    } catch (py::error_already_set& error) {
      TORCH_CHECK_VALUE(false, "torch_mp: a node rule failed on ", node.op, " (output %", node.output, ", module '",
                        node.scope, "'): ", error.what());
    }
    if (verdict.is_none()) {
      return std::nullopt;
    }
    auto [category, reason] = verdict.cast<std::tuple<std::string, std::string>>();
    return jit::NodeOverride{python::parseCategory(category), core::RuleKind::kCallable, reason};
  };
}

// The load-time pass: `conversion` with `calibrate`; policy_per_graph for each graph's default policy.
void enableJitPass(const jit::ConvertOptions& conversion, bool policyPerGraph, bool calibrate) {
  jit::enableMixedPrecisionPass({.conversion = conversion, .policyPerGraph = policyPerGraph, .calibrate = calibrate});
}

// (converted, skipped, calibrating, last outcome, last report or None, last error, last graph or None)
std::tuple<
    int64_t,
    int64_t,
    int64_t,
    std::string,
    std::optional<jit::ConversionReport>,
    std::string,
    std::shared_ptr<torch::jit::Graph>>
jitPassActivity() {
  const jit::PassActivity activity = jit::mixedPrecisionPassActivity();
  return {activity.converted, activity.skipped, activity.calibrating, jit::toString(activity.lastOutcome),
          activity.lastReport, activity.lastError, activity.lastGraph};
}

std::shared_ptr<jit::PreparedModel> prepareModule(
    const torch::jit::Module& module,
    const py::tuple& exampleInputs,
    const std::vector<py::tuple>& calibrationInputs) {
  const std::vector<c10::IValue> inputs = exampleStack(module, exampleInputs);
  const std::vector<std::vector<c10::IValue>> calibration = calibrationStacks(module, calibrationInputs);
  py::gil_scoped_release release;
  return std::make_shared<jit::PreparedModel>(jit::prepareModule(module, inputs, calibration));
}

std::pair<torch::jit::Module, jit::ConversionReport> convertPrepared(
    const jit::PreparedModel& prepared, const jit::ConvertOptions& options) {
  py::gil_scoped_release release;
  jit::ConvertedModule converted = jit::convertPreparedModule(prepared, options);
  return {std::move(converted.module), std::move(converted.report)};
}

std::pair<torch::jit::Module, jit::ConversionReport> convertPreparedInPlace(
    jit::PreparedModel& prepared, const jit::ConvertOptions& options) {
  py::gil_scoped_release release;
  jit::ConvertedModule converted = jit::convertPreparedModule(std::move(prepared), options);
  return {std::move(converted.module), std::move(converted.report)};
}

std::vector<at::Tensor> probeNodes(
    const torch::jit::Module& module, const py::tuple& inputs, const std::vector<jit::NodeId>& ids) {
  const c10::FunctionSchema& schema = module.get_method("forward").function().getSchema();
  std::vector<c10::IValue> values = forwardInputs(schema.arguments(), inputs, "inputs", "input");
  py::gil_scoped_release release;
  return jit::probeNodeOutputs(module, values, ids);
}

} // namespace
} // namespace torch_mp

PYBIND11_MODULE(_C, m) {
  using namespace torch_mp;
  m.doc() = "torch_mp: mixed-precision conversion of TorchScript graphs";
  // torch_mp.ModelRunError: the model's own failure on its inputs, a ValueError, with c10's message minus backtrace
  static const py::handle modelRunError =
      py::exception<jit::ModelRunError>(m, "ModelRunError", PyExc_ValueError).release();
  py::register_exception_translator([](std::exception_ptr thrown) {
    try {
      if (thrown) {
        std::rethrow_exception(thrown);
      }
    } catch (const jit::ModelRunError& error) {
      PyErr_SetString(modelRunError.ptr(), error.what_without_backtrace());
    }
  });
  // the torch whose headers compiled the extension: its operator ids (c10::aten::*) are that torch's (torch_mp._compat)
  m.attr("BUILT_WITH_TORCH") = py::make_tuple(TORCH_VERSION_MAJOR, TORCH_VERSION_MINOR, TORCH_VERSION_PATCH);
  m.attr("PLANNERS") = vocabulary(kPlanners);
  m.attr("KERNELS") = vocabulary(kKernels);
  python::bindPolicy(m);
  py::class_<contract::ConversionRequest>(m, "ConversionRequest",
                                          "What a conversion is asked to do, whatever front converts.")
      .def(py::init([](const std::string& dtype, const core::OpPolicy& policy, const std::string& planner,
                       bool verify, bool keepIoDtypes) {
             return contract::ConversionRequest{.lowDtype = lowDtypeNamed(dtype),
                                                .policy = policy,
                                                .planner = parsePlanner(planner),
                                                .verifyOutputs = verify,
                                                .keepIoDtypes = keepIoDtypes};
           }),
           py::kw_only(), py::arg("dtype"), py::arg("policy"), py::arg("planner"), py::arg("verify"),
           py::arg("keep_io_dtypes"), "The request as torch_mp.ConversionOptions holds it (torch_mp/options.py).")
      .def("__copy__", [](const contract::ConversionRequest& request) { return request; });
  py::class_<jit::ConvertOptions>(m, "ConvertOptions",
                                  "A TorchScript conversion: the request, the run's state, the front's own knobs.")
      .def(py::init([](const contract::ConversionRequest& request, bool fuseCasts, const std::string& kernels,
                       bool channelsLast, bool fuseConvolutions, py::object nodeRule) {
             return jit::ConvertOptions{.request = request,
                                        .nodeRule = nodeRuleFrom(std::move(nodeRule)),
                                        .fuseCasts = fuseCasts,
                                        .kernels = parseNamed(kKernels, kernels, "kernels"),
                                        .channelsLast = channelsLast,
                                        .fuseConvolutions = fuseConvolutions};
           }),
           py::kw_only(), py::arg("request"), py::arg("fuse_casts"), py::arg("kernels"), py::arg("channels_last"),
           py::arg("fuse_convolutions"), py::arg("node_rule"),
           "The options as torch_mp's TorchScript options hold them, bound once (torch_mp/options.py).")
      .def("__copy__", [](const jit::ConvertOptions& options) { return options; })
      .def_property(
          "verify_outputs", [](const jit::ConvertOptions& o) { return o.request.verifyOutputs; },
          [](jit::ConvertOptions& o, bool verify) { o.request.verifyOutputs = verify; })
      .def_property(
          "keep_fp32", [](const jit::ConvertOptions& o) { return o.run.keepFp32.fallback; },
          [](jit::ConvertOptions& o, std::unordered_set<jit::NodeId> ids) { o.run.keepFp32.fallback = std::move(ids); },
          "Node ids kept fp32 (the accuracy fallback's).")
      .def_property(
          "keep_fp32_non_finite", [](const jit::ConvertOptions& o) { return o.run.keepFp32.nonFinite; },
          [](jit::ConvertOptions& o, std::unordered_set<jit::NodeId> ids) {
            o.run.keepFp32.nonFinite = std::move(ids);
          },
          "Node ids kept fp32 because their low-precision outputs were NaN or inf where fp32's are finite.")
      .def_property(
          "keep_node_ids", [](const jit::ConvertOptions& o) { return o.run.keepNodeIds; },
          [](jit::ConvertOptions& o, bool keep) { o.run.keepNodeIds = keep; });

  python::bindExportCore(m);
  python::bindInt8(m);
  python::bindReport(m);

  py::class_<jit::PreparedModel, std::shared_ptr<jit::PreparedModel>>(
      m, "PreparedModel", "A model frozen, cleaned up and observed once, planned any number of times.")
      .def("convert", &convertPrepared, py::arg("options"),
           "Converts a copy with these options; returns (module, ConversionReport).")
      .def("convert_in_place", &convertPreparedInPlace, py::arg("options"),
           "Converts the prepared module itself, using the preparation up; returns (module, ConversionReport).")
      .def_property_readonly(
          "frozen", [](const jit::PreparedModel& prepared) { return prepared.frozen; },
          "The prepared fp32 module, its nodes numbered as in every conversion of it (for probe_nodes).")
      .def_property_readonly("phases", [](const jit::PreparedModel& prepared) { return prepared.forward.phases; });
  m.def("prepare_module", &prepareModule, py::arg("module"), py::arg("example_inputs"), py::arg("calibration_inputs"),
        "Freezes a copy of a scripted module, cleans it up and observes it on the inputs.");
  m.def("probe_nodes", &probeNodes, py::arg("module"), py::arg("inputs"), py::arg("ids"),
        "Runs a module whose nodes carry ids and returns the first output of each node named (undefined where "
        "absent).");

  m.def("enable_jit_pass", &enableJitPass, py::arg("conversion"), py::arg("policy_per_graph"), py::arg("calibrate"),
        "Enables the load-time mixed-precision pass (registered once per process).");
  m.def("disable_jit_pass", &jit::disableMixedPrecisionPass, "Disables the load-time pass.");
  m.def("jit_pass_enabled", &jit::mixedPrecisionPassEnabled);
  m.def("jit_pass_activity", &jitPassActivity,
        "(graphs converted, graphs skipped, graphs set to calibrate, last outcome, last ConversionReport or None, "
        "last error, last converted Graph or None)");
}
