// Python bindings. The options, the op policy, the prepared model and the report are bound C++ objects; the Python
// package (torch_mp/) is a view of them: it keeps no second copy of the policy, and only the user's rule callables
// are called back from C++.
#include <torch/csrc/DynamicTypes.h>
#include <torch/csrc/jit/python/pybind_utils.h>
#include <torch/extension.h>
#include <torch/version.h>

#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "core/classify_node.h"
#include "core/fast_kernels.h"
#include "core/flop_formulas.h"
#include "core/numeric_limits.h"
#include "core/op_facts.h"
#include "core/op_policy.h"
#include "core/precision_planner.h"
#include "core/range_guards.h"
#include "core/stored_weights.h"
#include "core/underflow_to_zero.h"
#include "jit/ir/tensor_statistics.h"
#include "jit/pipeline.h"
#include "jit/plan/numeric_guards.h"
#include "jit/report/assemble_report.h"
#include "jit/report/value_probe.h"
#include "python/int8_bindings.h"
#include "torch_mp/jit_pass.h"

namespace py = pybind11;

namespace torch_mp {
namespace {

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
py::tuple namesOf(const Enum (&values)[N]) {
  py::tuple names(N);
  for (size_t i = 0; i < N; ++i) {
    names[i] = core::toString(values[i]);
  }
  return names;
}

core::OpCategory parseCategory(const std::string& name) {
  auto category = core::categoryFromString(name);
  TORCH_CHECK_VALUE(category, "torch_mp: unknown op category '", name, "' (expected one of ",
                    joinedNames(core::kAllCategories), ")");
  return *category;
}

core::LowDtype lowDtypeNamed(const std::string& name) {
  if (name == "float16") {
    return core::LowDtype::kFloat16;
  }
  if (name == "bfloat16") {
    return core::LowDtype::kBFloat16;
  }
  TORCH_CHECK_VALUE(false, "torch_mp: the low-precision dtype must be float16 or bfloat16, got ", name);
}

// The options' vocabularies as Python spells them (torch_mp.options reads them as _C.PLANNERS and _C.KERNELS).
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

core::Target targetNamed(const std::string& name) {
  auto target = core::targetFromString(name);
  TORCH_CHECK_VALUE(target, "torch_mp: unknown policy target '", name, "' (expected one of ",
                    joinedNames(core::kAllTargets), ")");
  return *target;
}

using Capability = std::optional<std::pair<int, int>>;  // (major, minor)

core::OpPolicy defaultPolicy(
    const std::string& targetName, const std::optional<std::string>& cpu, const Capability& gpu) {
  std::optional<core::CudaCapability> capability;
  if (gpu) {
    capability = core::CudaCapability{gpu->first, gpu->second};
  }
  return core::OpPolicy::defaults(targetNamed(targetName), cpuFeatures(cpu), capability);
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
    return jit::NodeOverride{parseCategory(category), core::RuleKind::kCallable, reason};
  };
}

const char* precisionName(core::Precision precision) {
  return precision == core::Precision::kLow ? "low" : "fp32";
}

py::object ruleKindOrNone(const std::optional<core::RuleKind>& kind) {
  return kind ? py::object(py::str(core::toString(*kind))) : py::none();
}

// A numeric guard's verdict: {"kind": "underflow to zero", "value": "26", "seen": 1e-12, "limit": 5.96e-08}.
py::dict int8Dict(const core::Int8NodePlan& plan) {
  py::dict entry;
  entry["reason"] = core::toString(plan.reason);
  entry["saved_seconds"] = plan.savedSeconds;
  entry["quantize_seconds"] = plan.quantizeSeconds;
  return entry;
}

py::dict guardDict(const core::GuardVerdict& guard) {
  py::dict entry;
  entry["kind"] = core::toString(guard.kind);
  entry["value"] = guard.value;
  entry["seen"] = guard.seen;
  entry["limit"] = guard.limit;
  return entry;
}

// The torch.export front (torch_mp/_export/) plans with the core, as convert does: one category per node, and per
// castable fp32 value its producer, the bytes one cast of it moves and its consumers. Returns per node "low" or
// "fp32" and whether the constraints forced it to fp32.
using DataflowValue = std::tuple<int, int64_t, std::vector<int>>;

std::pair<std::vector<std::string>, std::vector<bool>> planDataflow(
    const std::vector<std::string>& categories,
    const std::vector<DataflowValue>& values,
    const jit::ConvertOptions& options) {
  core::DataflowGraph graph;
  for (const std::string& category : categories) {
    graph.addNode(parseCategory(category));
  }
  const int nodeCount = static_cast<int>(categories.size());
  for (const auto& [producer, castBytes, consumers] : values) {
    TORCH_CHECK_VALUE(producer >= 0 && producer < nodeCount, "torch_mp: value produced by node ", producer, " of ",
                      nodeCount);
    const int value = graph.addValue(producer, castBytes);
    for (int consumer : consumers) {
      TORCH_CHECK_VALUE(consumer >= 0 && consumer < nodeCount, "torch_mp: value read by node ", consumer, " of ",
                        nodeCount);
      graph.addUse(value, consumer);
    }
  }
  const core::PrecisionPlan plan = core::planPrecision(graph, options.planner);
  std::vector<std::string> precision;
  for (core::Precision p : plan.precision) {
    precision.emplace_back(precisionName(p));
  }
  return {precision, plan.forcedToFp32};
}


core::GuardKind guardKindNamed(const std::string& kind) {
  for (const core::GuardKindName& name : core::kGuardKindNames) {
    if (kind == name.name) {
      return name.kind;
    }
  }
  TORCH_CHECK_VALUE(false, "torch_mp: unknown guard kind '", kind, "'");
}

// A guard's verdict from its dict (guardDict's), or nothing for None.
std::optional<core::GuardVerdict> guardFrom(const py::handle& entry) {
  if (entry.is_none()) {
    return std::nullopt;
  }
  const py::dict guard = py::reinterpret_borrow<py::dict>(entry);
  return core::GuardVerdict{guardKindNamed(guard["kind"].cast<std::string>()), guard["value"].cast<std::string>(),
                            guard["seen"].cast<double>(), guard["limit"].cast<double>()};
}

// The export front's facts of one node, a dict keyed as core::NodeFacts' fields in snake case, with the numbers
// core/range_guards judges in place of their verdicts: observed [(value, largest magnitude, only integers)],
// constants [(value, largest magnitude)], scalars [(name, value)]; a key left out is the field's default.
core::NodeFacts nodeFactsFrom(const py::dict& entry, core::LowDtype dtype) {
  core::NodeFacts facts;
  auto flag = [&](const char* key) { return entry.contains(key) && entry[key].cast<bool>(); };
  auto guard = [&](const char* key) { return entry.contains(key) ? guardFrom(entry[key]) : std::nullopt; };
  auto numbers = [&](const char* key) {
    std::vector<core::NamedNumber> listed;
    if (entry.contains(key)) {
      for (const auto& [name, value] : entry[key].cast<std::vector<std::pair<std::string, double>>>()) {
        listed.push_back({name, value});
      }
    }
    return listed;
  };
  std::vector<core::ObservedNumber> observed;
  if (entry.contains("observed")) {
    for (const auto& [name, largest, onlyIntegers] :
         entry["observed"].cast<std::vector<std::tuple<std::string, double, bool>>>()) {
      observed.push_back({name, {largest, onlyIntegers}});
    }
  }
  facts.op = entry["op"].cast<std::string>();
  facts.scope = entry.contains("scope") ? entry["scope"].cast<std::string>() : "";
  facts.id = entry.contains("id") ? entry["id"].cast<std::string>() : "";
  facts.unobserved = flag("unobserved");
  facts.notFp32 = flag("not_fp32");
  facts.controlFlow = flag("opaque_subgraphs") ? core::ControlFlow::kOpaqueSubgraphs : core::ControlFlow::kNone;
  facts.keptNonFinite = flag("kept_non_finite");
  facts.keptByFallback = flag("kept_by_fallback");
  facts.runsInt8 = flag("runs_int8");
  facts.observedRange = core::observedRangeGuard(observed, dtype);
  facts.underflowToZero = guard("underflow_to_zero");
  facts.constantRange = core::constantRangeGuard(numbers("constants"), dtype);
  facts.lostScalar = core::lostScalarGuard(numbers("scalars"), dtype);
  facts.readsTableStoredLow = flag("reads_table_stored_low");
  facts.writesTensorList = flag("writes_tensor_list");
  facts.sumsNothing = flag("sums_nothing");
  return facts;
}

// core::classifyNode over every node of an exported program, with the options' policy and dtype: (category, rule
// kind, rule, reason, guard dict or None) per node. `nodeRule(i)`, the user's callable for node i, is asked only where
// the rule order reaches it.
std::vector<core::NodeDecision> classifyNodes(
    const std::vector<py::dict>& nodes,
    const jit::ConvertOptions& options,
    const py::object& nodeRule) {
  std::vector<core::NodeDecision> decisions;
  decisions.reserve(nodes.size());
  for (size_t i = 0; i < nodes.size(); ++i) {
    core::NodeRuleQuery query;
    if (!nodeRule.is_none()) {
      query = [&nodeRule, i]() -> std::optional<core::NodeOverride> {
        py::object chosen = nodeRule(i);
        if (chosen.is_none()) {
          return std::nullopt;
        }
        auto [category, reason] = chosen.cast<std::tuple<std::string, std::string>>();
        return core::NodeOverride{parseCategory(category), core::RuleKind::kCallable, reason};
      };
    }
    decisions.push_back(
        core::classifyNode(nodeFactsFrom(nodes[i], options.lowDtype), options.policy, options.lowDtype, query));
  }
  return decisions;
}

// The export front's report (torch_mp/_export/report.py reads it off the converted FX program): the ConversionReport
// convert's pipeline assembles, its ids indexes into `names` (the FX node names it is written with).
using ProgramNode = std::tuple<jit::NodeId, std::string, std::string, core::NodeDecision, bool, bool,
                               std::optional<double>, int64_t, std::optional<core::Int8NodePlan>>;
// id, op, scope, decision, low, forced, amax, flops, the int8 planner's verdict
using ProgramCast = std::tuple<jit::NodeId, std::string, std::string, std::string, int64_t>;  // id, value, from, to, bytes
using ProgramItem = std::tuple<jit::NodeId, bool, std::string, std::vector<jit::NodeId>, int>;  // id, cast, op, inputs,
                                                                                                // index in casts
using ProgramWeight = std::tuple<std::string, int64_t, std::vector<std::string>, std::optional<jit::NodeId>>;
using ProgramNonFinite = std::tuple<size_t, std::optional<size_t>, std::string>;  // run, output tensor, value

jit::ConversionReport programReport(
    const jit::ConvertOptions& options,
    std::vector<std::string> names,
    const std::vector<ProgramNode>& nodes,
    const std::vector<ProgramCast>& casts,
    const std::vector<ProgramItem>& graph,
    const std::vector<ProgramWeight>& kept,
    std::pair<int64_t, int64_t> weightBytes,
    const std::optional<ProgramNonFinite>& nonFinite,
    std::vector<std::pair<std::string, double>> phases) {
  const auto named = [&names](jit::NodeId id) {
    TORCH_CHECK_VALUE(id >= 0 && id < static_cast<jit::NodeId>(names.size()), "torch_mp: report id ", id, " of ",
                      names.size(), " names");
    return id;
  };
  jit::ConversionReport report = jit::reportFor(options);
  for (const auto& [id, op, scope, decided, low, forced, amax, flops, int8] : nodes) {
    jit::NodeDecision node;
    node.id = named(id);
    node.op = op;
    node.output = names[id];
    node.scope = scope;
    node.precision = low ? core::Precision::kLow : core::Precision::kFp32;
    node.category = decided.category;
    node.forcedToFp32 = forced;
    node.rule = core::plannedRule(decided.rule, decided.category, forced, low);
    node.reason = decided.reason;
    node.ruleKind = decided.kind;
    node.guard = decided.guard;
    node.amax = amax.value_or(-1.0);
    node.flops = flops;
    node.int8 = int8;
    if (node.runsInt8()) {
      node.rule = std::string("int8: ") + core::int8FactsOf(op)->reason;
      node.reason = core::int8FactsOf(op)->reason;
      node.ruleKind = core::RuleKind::kInt8;
    }
    if (decided.kind == core::RuleKind::kUnknownOp &&
        std::find(report.unknownOps.begin(), report.unknownOps.end(), op) == report.unknownOps.end()) {
      report.unknownOps.push_back(op);
    }
    report.nodes.push_back(std::move(node));
  }
  for (const auto& [id, value, from, to, bytes] : casts) {
    report.casts.push_back({.id = named(id), .value = value, .from = from, .to = to, .bytes = bytes, .reached = true});
    report.castBytes += bytes;
  }
  for (const auto& [id, isCast, op, inputs, cast] : graph) {
    for (jit::NodeId input : inputs) {
      named(input);
    }
    report.graph.push_back({.id = named(id), .kind = isCast ? jit::GraphItem::Kind::kCast : jit::GraphItem::Kind::kNode,
                            .op = op, .inputs = inputs, .cast = isCast ? cast : -1});
  }
  std::vector<jit::KeptFp32Weight> weights;
  for (const auto& [name, bytes, readers, decidedBy] : kept) {
    weights.push_back({.name = name, .bytes = bytes, .readers = readers,
                       .decidedBy = decidedBy ? std::optional<jit::NodeId>(named(*decidedBy)) : std::nullopt});
  }
  report.weightBytesBefore = weightBytes.first;
  report.weightBytesAfter = weightBytes.second;
  report.setKeptFp32Weights(std::move(weights));
  if (nonFinite) {
    const auto& [run, tensor, value] = *nonFinite;
    report.nonFinite = jit::NonFiniteValue{run, tensor, value};
  }
  report.seconds = 0.0;
  for (const auto& [stage, seconds] : phases) {
    report.seconds += seconds;
  }
  report.phases = std::move(phases);
  report.capture = "export";
  report.nodeNames = std::move(names);
  return report;
}

void bindCoreForExport(py::module_& m) {
  py::class_<core::NodeDecision>(m, "NodeDecision", "What core::classifyNode decided of a node.")
      .def_property_readonly("category", [](const core::NodeDecision& d) { return core::toString(d.category); })
      .def_property_readonly("rule_kind", [](const core::NodeDecision& d) { return core::toString(d.kind); })
      .def_readonly("rule", &core::NodeDecision::rule)
      .def_readonly("reason", &core::NodeDecision::reason)
      .def_property_readonly("guard", [](const core::NodeDecision& d) {
        return d.guard ? py::object(guardDict(*d.guard)) : py::object(py::none());
      });
  m.def("program_report", &programReport, py::arg("options"), py::arg("names"), py::arg("nodes"), py::arg("casts"),
        py::arg("graph"), py::arg("kept_fp32"), py::arg("weight_bytes"), py::arg("non_finite"), py::arg("phases"),
        "The export front's ConversionReport, its ids indexes into `names` (FX node names): per planned node (id, op, "
        "scope, NodeDecision, low, forced to fp32, largest observed magnitude or None, FLOPs); per cast (id, value, "
        "from, to, bytes); per graph item (id, is a cast, op, input ids, index in casts); per fp32 stored tensor "
        "(name, bytes, readers' ops, first decided reader's id or None); (bytes before, after); where verification "
        "found a non-finite value (run, output tensor or None, value name) or None; (stage, seconds) per stage.");
  m.def("plan_dataflow", &planDataflow, py::arg("categories"), py::arg("values"), py::arg("options"),
        "Plans a dataflow graph with the options' planner: categories per node, (producer, cast bytes, consumers) per "
        "castable fp32 value; returns (precision per node, forced to fp32 per node).");
  m.def(
      "value_statistics",
      [](const at::Tensor& tensor, bool checkIntegers) {
        const jit::TensorStatistics seen = jit::tensorStatistics(tensor, checkIntegers);
        return std::make_tuple(
            seen.magnitudes.largest, seen.magnitudes.smallest, seen.onlyIntegers, seen.magnitudes.allFinite);
      },
      py::arg("tensor"), py::arg("check_integers"),
      "What one observation of an fp32 tensor adds, as the TorchScript front's observer computes it: (largest "
      "finite magnitude, smallest finite non-zero magnitude or inf, only integers (checked where check_integers "
      "and the largest magnitude exceeds 256), all finite).");
  m.def("all_finite", &jit::allFinite, py::arg("tensor"),
        "Whether a floating tensor holds no NaN or inf (dense fp32, bf16 and fp16 CPU tensors read in place).");
  m.def(
      "op_facts",
      [](const std::string& op) {
        const core::OpFacts& facts = core::factsOf(op);
        py::dict entry;
        entry["preserves_dtype"] = facts.preservesDtype;
        entry["table_lookup"] = facts.tableLookup ? py::object(py::str(facts.tableLookup)) : py::object(py::none());
        return entry;
      },
      py::arg("op"),
      "What core/op_facts knows of an op that the export front asks: preserves_dtype (its one tensor output has its "
      "first input's dtype: views, reshapes, copies), table_lookup (why a constant table it reads runs low, or None).");
  m.def(
      "estimate_flops",
      [](const std::string& op, std::vector<std::optional<core::Sizes>> inputs, std::optional<core::Sizes> output,
         std::optional<bool> transposed, std::vector<core::Sizes> recurrentWeights,
         std::vector<std::optional<int64_t>> integers, std::optional<int64_t> firstInputElements) {
        return core::flopsOf(core::factsOf(op).flops,
                             {std::move(inputs), std::move(output), transposed, std::move(recurrentWeights),
                              std::move(integers), firstInputElements});
      },
      py::arg("op"), py::arg("input_sizes"), py::arg("output_sizes"), py::arg("transposed") = py::none(),
      py::arg("recurrent_weights") = std::vector<core::Sizes>{},
      py::arg("integers") = std::vector<std::optional<int64_t>>{}, py::arg("first_input_elements") = py::none(),
      "Multiply-add FLOPs of a heavy op (core/flop_formulas) from its inputs' sizes (None: not a tensor), its first "
      "output's, a convolution's transposed flag, a recurrent op's weight sizes (its params list), its int inputs and "
      "its first input's element count (core::FlopOperands); 0 for other ops.");
  m.attr("RECURRENT_WEIGHTS_ARGUMENT") = core::kRecurrentWeightsArgument;
  m.def("sums_nothing", &core::sumsNothing, py::arg("op"), py::arg("einsum_equation"), py::arg("first_input_sizes"),
        "Whether a product sums nothing (core/flop_formulas): an einsum every index of which reaches the output, or a "
        "matmul / mm / bmm / linear whose first input's last dim is 1. It then follows instead of running low.");
  m.def(
      "storing_of",
      [](const std::vector<std::tuple<int64_t, bool, bool, bool>>& stored) {
        std::vector<core::StoredTensor> tensors;
        for (const auto& [bytes, fp32, readLow, readFp32] : stored) {
          tensors.push_back({bytes, fp32, readLow, readFp32});
        }
        std::vector<std::string> storing;
        for (core::Storing how : core::storingOf(tensors)) {
          storing.emplace_back(how == core::Storing::kLow    ? "low"
                               : how == core::Storing::kFp32 ? "fp32"
                               : how == core::Storing::kBoth ? "both"
                                                             : "as is");
        }
        return storing;
      },
      py::arg("tensors"),
      "How each stored tensor is kept (core/stored_weights), from (bytes, holds fp32, read low, read not low) per "
      "tensor: 'low', 'fp32', 'both' or 'as is'.");
  m.def(
      "underflow_to_zero",
      [](const std::vector<std::tuple<std::string, std::vector<int>, std::vector<double>, bool>>& nodes,
         const std::vector<std::tuple<std::string, int, double>>& values, const jit::ConvertOptions& options) {
        std::vector<core::GraphViewNode> viewNodes;
        for (const auto& [op, inputs, scalars, exponentMayBeNegative] : nodes) {
          viewNodes.push_back({op, inputs, scalars, exponentMayBeNegative});
        }
        std::vector<core::GraphViewValue> viewValues;
        for (const auto& [name, producer, smallest] : values) {
          TORCH_CHECK_VALUE(producer < static_cast<int>(viewNodes.size()), "torch_mp: value ", name,
                            " produced by node ", producer, " of ", viewNodes.size());
          viewValues.push_back({name, producer});
        }
        for (const core::GraphViewNode& node : viewNodes) {
          for (int input : node.inputs) {
            TORCH_CHECK_VALUE(input < static_cast<int>(viewValues.size()), "torch_mp: node ", node.op, " reads value ",
                              input, " of ", viewValues.size());
          }
        }
        py::dict verdicts;
        const auto found = core::underflowToZero(
            viewNodes, viewValues, [&](int value) { return std::get<2>(values[value]); }, options.lowDtype);
        for (const auto& [node, verdict] : found) {
          verdicts[py::int_(node)] = guardDict(verdict);
        }
        return verdicts;
      },
      py::arg("nodes"), py::arg("values"), py::arg("options"),
      "core/underflow_to_zero, in the options' dtype, over a graph's view: per node (op, the value index per input or -1, the non-zero float "
      "scalars' magnitudes, whether a pow's exponent may be negative), per value (name, producing node or -1, "
      "smallest non-zero magnitude); returns {node index: guard dict}.");
  m.def("classify_nodes", &classifyNodes, py::arg("nodes"), py::arg("options"), py::arg("node_rule") = py::none(),
        "core::classifyNode (the rule order both fronts share) with the options' policy and dtype over the facts of "
        "every node, each a dict keyed as core::NodeFacts' fields in snake case (op, scope, id, not_fp32, "
        "opaque_subgraphs, kept_non_finite, kept_by_fallback, runs_int8, underflow_to_zero, reads_table_stored_low, "
        "writes_tensor_list, sums_nothing, unobserved) and the numbers core/range_guards judges (observed: [(value, "
        "largest magnitude, only integers)], constants: [(value, largest magnitude)], scalars: [(name, value)]); "
        "node_rule(i): (category, reason) or None. Returns a NodeDecision per node.");
}

// The report as Python values (dicts, lists, numbers, strings): what `Report.data` holds and `json` writes.
py::dict reportDict(const jit::ConversionReport& report) {
  const auto idOf = [&report](jit::NodeId id) -> py::object {
    return report.nodeNames.empty() ? py::object(py::int_(id)) : py::object(py::str(report.nodeNames.at(id)));
  };
  py::dict phases;
  for (const auto& [name, seconds] : report.phases) {
    phases[py::str(name)] = seconds;
  }
  py::list nodes;
  for (const jit::NodeDecision& node : report.nodes) {
    py::dict entry;
    entry["id"] = idOf(node.id);
    entry["op"] = node.op;
    entry["output"] = node.output;
    entry["scope"] = node.scope;
    entry["precision"] = node.runsInt8() ? "int8" : precisionName(node.precision);
    entry["int8"] = node.int8 ? py::object(int8Dict(*node.int8)) : py::object(py::none());
    entry["category"] = core::toString(node.category);
    entry["forced_to_fp32"] = node.forcedToFp32;
    entry["rule"] = node.rule;
    entry["rule_kind"] = core::toString(node.ruleKind);
    entry["reason"] = node.reason;
    entry["amax"] = node.amax < 0 ? py::object(py::none()) : py::object(py::float_(node.amax));
    entry["flops"] = node.flops;
    entry["guard"] = node.guard ? py::object(guardDict(*node.guard)) : py::object(py::none());
    nodes.append(std::move(entry));
  }
  py::list weights;
  for (const jit::KeptFp32Weight& weight : report.weightsKeptFp32) {
    py::dict entry;
    entry["name"] = weight.name;
    entry["bytes"] = weight.bytes;
    entry["readers"] = py::cast(weight.readers);
    entry["decided_by"] = weight.decidedBy ? idOf(*weight.decidedBy) : py::object(py::none());
    entry["rule"] = weight.rule;
    entry["rule_kind"] = ruleKindOrNone(weight.ruleKind);
    weights.append(std::move(entry));
  }
  py::list casts;
  for (const jit::CastRecord& cast : report.casts) {
    py::dict entry;
    entry["id"] = idOf(cast.id);
    entry["value"] = cast.value;
    entry["from"] = cast.from;
    entry["to"] = cast.to;
    entry["bytes"] = cast.bytes;
    entry["reached"] = cast.reached;
    casts.append(std::move(entry));
  }
  py::list graph;
  for (const jit::GraphItem& item : report.graph) {
    py::dict entry;
    entry["id"] = idOf(item.id);
    entry["kind"] = jit::toString(item.kind);
    entry["op"] = item.op;
    py::list inputs;
    for (jit::NodeId input : item.inputs) {
      inputs.append(idOf(input));
    }
    entry["inputs"] = inputs;
    if (item.kind == jit::GraphItem::Kind::kCast) {
      entry["cast"] = item.cast;
    }
    graph.append(std::move(entry));
  }
  py::dict data;
  data["dtype"] = report.dtype;
  data["policy"] = report.policy;
  data["planner"] = report.planner;
  data["capture"] = report.capture;
  data["slow_kernels"] = report.slowKernels ? py::object(py::str(*report.slowKernels)) : py::object(py::none());
  data["seconds"] = report.seconds;
  data["phases"] = phases;
  data["weight_bytes_before"] = report.weightBytesBefore;
  data["weight_bytes_after"] = report.weightBytesAfter;
  data["weight_bytes_kept_fp32"] = report.weightBytesKeptFp32;
  data["cast_bytes"] = report.castBytes;
  data["fused_casts"] = report.fusedCasts;
  data["fused_cast_bytes"] = report.fusedCastBytes;
  data["fused_pointwise"] = report.fusedPointwise;
  data["fused_normalizations"] = report.fusedNormalizations;
  data["column_major_matmul_weights"] = report.columnMajorMatmulWeights;
  data["channels_last_convolutions"] = report.channelsLastConvolutions;
  data["fused_convolutions"] = report.fusedConvolutions;
  data["unobserved_nodes"] = report.unobservedNodes;
  data["ranges_observed"] = report.rangesObserved;
  if (report.nonFinite) {
    py::dict where;
    where["run"] = report.nonFinite->run;
    where["tensor"] = report.nonFinite->outputTensor ? py::object(py::int_(*report.nonFinite->outputTensor))
                                                     : py::object(py::none());
    where["value"] = report.nonFinite->outputTensor ? py::object(py::none()) : py::object(py::str(report.nonFinite->value));
    data["non_finite"] = std::move(where);
  } else {
    data["non_finite"] = py::none();
  }
  data["low_precision_flop_fraction"] = report.lowPrecisionFlopFraction();
  data["unknown_ops"] = py::cast(report.unknownOps);
  data["nodes"] = nodes;
  data["weights_kept_fp32"] = weights;
  data["casts"] = casts;
  data["graph"] = graph;
  return data;
}

std::tuple<std::string, std::optional<std::vector<std::string>>, std::string> moduleRuleRow(const core::ModuleRule& e) {
  return {e.pattern, e.ops, e.reason};
}

// One list of module-path rules of the policy (exclusions, forced low): `add(pattern, ops, reason)`, `list()` as
// (pattern, ops or None, reason) rows in the order added, `match(op, scope)` the first rule matching a node or None.
void bindModuleRules(
    py::class_<core::OpPolicy>& policy,
    const char* add,
    const char* list,
    const char* match,
    void (core::OpPolicy::*addRule)(core::ModuleRule),
    const std::vector<core::ModuleRule>& (core::OpPolicy::*rules)() const,
    const core::ModuleRule* (core::OpPolicy::*ruleFor)(const std::string&, const std::string&) const,
    const std::string& what) {
  policy.def(
      add,
      [addRule](core::OpPolicy& self, std::string pattern, std::optional<std::vector<std::string>> ops,
                std::string reason) { (self.*addRule)({std::move(pattern), std::move(ops), std::move(reason)}); },
      py::arg("pattern"), py::arg("ops"), py::arg("reason"));
  policy.def(
      list,
      [rules](const core::OpPolicy& self) {
        std::vector<std::tuple<std::string, std::optional<std::vector<std::string>>, std::string>> rows;
        for (const core::ModuleRule& rule : (self.*rules)()) {
          rows.push_back(moduleRuleRow(rule));
        }
        return rows;
      },
      ("(pattern, ops or None, reason) per " + what + ", in the order added.").c_str());
  policy.def(
      match,
      [ruleFor](const core::OpPolicy& self, const std::string& op, const std::string& scope) -> py::object {
        const core::ModuleRule* rule = (self.*ruleFor)(op, scope);
        return rule ? py::cast(moduleRuleRow(*rule)) : py::none();
      },
      py::arg("op"), py::arg("scope"),
      ("The first " + what + " matching a node of `op` in module `scope`, or None.").c_str());
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
  python::bindInt8(m);
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
  bindCoreForExport(m);
  // the torch whose headers compiled the extension: its operator ids (c10::aten::*) are that torch's (torch_mp._compat)
  m.attr("BUILT_WITH_TORCH") = py::make_tuple(TORCH_VERSION_MAJOR, TORCH_VERSION_MINOR, TORCH_VERSION_PATCH);
  m.attr("CATEGORIES") = namesOf(core::kAllCategories);
  m.attr("PLANNERS") = vocabulary(kPlanners);
  m.attr("KERNELS") = vocabulary(kKernels);
  m.attr("TARGETS") = namesOf(core::kAllTargets);
  {
    py::tuple kinds(std::size(core::kRuleKindNames));
    for (size_t i = 0; i < kinds.size(); ++i) {
      kinds[i] = core::kRuleKindNames[i].name;
    }
    m.attr("RULE_KINDS") = kinds;  // what a node's rule_kind in the report can be
    py::tuple guards(std::size(core::kGuardKindNames));
    for (size_t i = 0; i < guards.size(); ++i) {
      guards[i] = core::kGuardKindNames[i].name;
    }
    m.attr("GUARD_KINDS") = guards;  // what a node's guard["kind"] in the report can be
  }
  m.def(
      "target_for", [](bool cuda, bool float16) { return core::toString(core::targetFor(cuda, float16)); },
      py::arg("cuda"), py::arg("float16"), "The default policy target's name for the device kind and low dtype.");
  m.def("cpu_features", &cpuFeatureNames, py::arg("declared") = py::none(),
        "The CPU features that decide fast low-precision kernels: this CPU's (or TORCH_MP_CPU_FEATURES), or those "
        "`declared` names.");

  py::class_<core::OpPolicy> policy(
      m, "OpPolicy", "The op table (op -> category, reason), module-path exclusions and forced-low rules, a name.");
  policy.def(py::init<>())
      .def(py::init<const core::OpPolicy&>())
      .def_static("defaults", &defaultPolicy, py::arg("target"), py::arg("cpu_features") = py::none(),
                  py::arg("cuda_capability") = py::none(),
                  "The default policy for a target, for the CPU features named (default: this CPU's, or "
                  "TORCH_MP_CPU_FEATURES) and the GPU's (major, minor) compute capability (default: unknown).")
      .def_property("name", &core::OpPolicy::name, &core::OpPolicy::setName)
      .def_property_readonly("slow_kernels", &core::OpPolicy::slowKernels,
                             "Why defaults() kept the heavy ops fp32 (no fast kernels there), or None.")
      .def(
          "set",
          [](core::OpPolicy& policy, const std::string& op, const std::string& category, std::string reason) {
            policy.set(op, parseCategory(category), std::move(reason));
          },
          py::arg("op"), py::arg("category"), py::arg("reason"))
      .def("remove", &core::OpPolicy::remove, py::arg("op"), "Returns whether the op was listed.")
      .def(
          "category",
          [](const core::OpPolicy& policy, const std::string& op) { return core::toString(policy.categoryOf(op)); },
          py::arg("op"), "The op's category; fp32 for an op in no list.")
      .def(
          "entry",
          [](const core::OpPolicy& policy, const std::string& op) -> py::object {
            const core::PolicyEntry* entry = policy.find(op);
            return entry ? py::make_tuple(core::toString(entry->category), entry->reason, entry->noFastKernel)
                         : py::object(py::none());
          },
          py::arg("op"),
          "(category, reason, no fast kernel) of an op, or None when it is in no list; the last is True for a heavy "
          "op the default policy keeps fp32 because the device has no fast kernels for the low dtype.")
      .def(
          "rows",
          [](const core::OpPolicy& policy) {
            std::vector<std::tuple<std::string, std::string, std::string>> rows;
            for (const auto& [op, entry] : policy.entries()) {
              rows.emplace_back(op, core::toString(entry.category), entry.reason);
            }
            return rows;
          },
          "(op, category, reason) per listed op, sorted by op.")
      .def("__len__", [](const core::OpPolicy& policy) { return policy.entries().size(); })
      .def("__contains__",
           [](const core::OpPolicy& policy, const std::string& op) { return policy.find(op) != nullptr; });
  bindModuleRules(policy, "exclude", "exclusions", "excluded_by", &core::OpPolicy::exclude,
                  &core::OpPolicy::exclusions, &core::OpPolicy::exclusionFor, "exclusion");
  bindModuleRules(policy, "force_low", "forced_low", "forced_low_by", &core::OpPolicy::forceLow,
                  &core::OpPolicy::forcedLow, &core::OpPolicy::forcedLowFor, "forced-low rule");
  policy.def(
      "stores_table_low",
      [](const core::OpPolicy& self, const std::vector<std::pair<std::string, bool>>& readers) {
        std::vector<core::OpPolicy::TableReader> tableReaders;
        for (const auto& [op, readsFirst] : readers) {
          tableReaders.push_back({op, readsFirst});
        }
        return self.storesTableLow(tableReaders);
      },
      py::arg("readers"),
      "Whether a constant table read by these (op, reads it as its first input) is stored once, low, its lookups "
      "running low (core::OpPolicy::storesTableLow).");
  policy.def("force_low_node", &core::OpPolicy::forceLowNode, py::arg("id"), py::arg("reason"))
      .def("forced_low_nodes", &core::OpPolicy::forcedLowNodes, "{node id: reason} of the nodes forced low.")
      .def(
          "forced_low_node",
          [](const core::OpPolicy& self, const std::string& id) -> std::optional<std::string> {
            const std::string* reason = self.forcedLowNode(id);
            return reason ? std::make_optional(*reason) : std::nullopt;
          },
          py::arg("id"), "The reason the node with this id is forced low, or None.");

  py::class_<jit::ConvertOptions>(m, "ConvertOptions", "Everything a conversion is asked to do but its inputs.")
      .def(py::init([](const std::string& dtype, const core::OpPolicy& policy, const std::string& planner,
                       bool verify, bool keepIoDtypes, bool fuseCasts, const std::string& kernels,
                       bool channelsLast, bool fuseConvolutions, py::object nodeRule) {
             return jit::ConvertOptions{
                 .lowDtype = lowDtypeNamed(dtype),
                 .policy = policy,
                 .planner = parsePlanner(planner),
                 .verifyOutputs = verify,
                 .nodeRule = nodeRuleFrom(std::move(nodeRule)),
                 .keepIoDtypes = keepIoDtypes,
                 .fuseCasts = fuseCasts,
                 .kernels = parseNamed(kKernels, kernels, "kernels"),
                 .channelsLast = channelsLast,
                 .fuseConvolutions = fuseConvolutions};
           }),
           py::kw_only(), py::arg("dtype"), py::arg("policy"), py::arg("planner"), py::arg("verify"),
           py::arg("keep_io_dtypes"), py::arg("fuse_casts"), py::arg("kernels"), py::arg("channels_last"),
           py::arg("fuse_convolutions"), py::arg("node_rule"),
           "The options as torch_mp.ConversionOptions holds them, bound once (torch_mp/options.py).")
      .def("__copy__", [](const jit::ConvertOptions& options) { return options; })
      .def_readwrite("verify_outputs", &jit::ConvertOptions::verifyOutputs)
      .def_property(
          "keep_fp32", [](const jit::ConvertOptions& o) { return o.keepFp32.fallback; },
          [](jit::ConvertOptions& o, std::unordered_set<jit::NodeId> ids) { o.keepFp32.fallback = std::move(ids); },
          "Node ids kept fp32 (the accuracy fallback's).")
      .def_property(
          "keep_fp32_non_finite", [](const jit::ConvertOptions& o) { return o.keepFp32.nonFinite; },
          [](jit::ConvertOptions& o, std::unordered_set<jit::NodeId> ids) { o.keepFp32.nonFinite = std::move(ids); },
          "Node ids kept fp32 because their low-precision outputs were NaN or inf where fp32's are finite.")
      .def_readwrite("keep_node_ids", &jit::ConvertOptions::keepNodeIds);

  py::class_<jit::ConversionReport>(m, "ConversionReport", "What a conversion decided and what it cost.")
      .def("to_dict", &reportDict, "The report as dicts and lists (what Report.data holds).")
      .def("low_precision_nodes", &jit::ConversionReport::lowPrecisionNodes)
      .def_readonly("seconds", &jit::ConversionReport::seconds);

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
