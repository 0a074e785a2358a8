#include "python/export_bindings.h"

#include <pybind11/stl.h>
#include <torch/extension.h>

#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "contract/conversion_request.h"
#include "core/classify_node.h"
#include "core/flop_formulas.h"
#include "core/op_facts.h"
#include "core/precision_planner.h"
#include "core/range_guards.h"
#include "core/stored_weights.h"
#include "core/underflow_to_zero.h"
#include "jit/ir/tensor_statistics.h"
#include "python/conversions.h"

namespace py = pybind11;

namespace torch_mp::python {
namespace {

// The export front plans with the core, as convert does: one category per node, and per castable fp32 value its
// producer, the bytes one cast of it moves and its consumers. Returns per node "low" or "fp32" and whether the
// constraints forced it to fp32.
using DataflowValue = std::tuple<int, int64_t, std::vector<int>>;

std::pair<std::vector<std::string>, std::vector<bool>> planDataflow(
    const std::vector<std::string>& categories,
    const std::vector<DataflowValue>& values,
    const contract::ConversionRequest& request) {
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
  const core::PrecisionPlan plan = core::planPrecision(graph, request.planner);
  std::vector<std::string> precision;
  for (core::Precision p : plan.precision) {
    precision.emplace_back(precisionName(p));
  }
  return {precision, plan.forcedToFp32};
}

// core::classifyNode over every node of an exported program, with the request's policy and dtype. `nodeRule(i)`, the
// user's callable for node i, is asked only where the rule order reaches it.
std::vector<core::NodeDecision> classifyNodes(
    const std::vector<core::NodeFacts>& nodes,
    const contract::ConversionRequest& request,
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
    decisions.push_back(core::classifyNode(nodes[i], request.policy, request.lowDtype, query));
  }
  return decisions;
}

using Verdict = std::optional<core::GuardVerdict>;

void bindNodeFacts(py::module_& m) {
  py::class_<core::GuardVerdict>(m, "GuardVerdict", "A numeric guard's verdict (core::GuardVerdict).")
      .def_property_readonly("kind", [](const core::GuardVerdict& g) { return core::toString(g.kind); })
      .def_readonly("value", &core::GuardVerdict::value)
      .def_readonly("seen", &core::GuardVerdict::seen)
      .def_readonly("limit", &core::GuardVerdict::limit);
  py::enum_<core::Boundary>(m, "Boundary", "Whether a node is a graph input or output (core::Boundary).")
      .value("none", core::Boundary::kNone)
      .value("input", core::Boundary::kInput)
      .value("output", core::Boundary::kOutput);
  py::enum_<core::ControlFlow>(m, "ControlFlow", "The blocks or subgraphs a node runs (core::ControlFlow).")
      .value("none", core::ControlFlow::kNone)
      .value("planned_blocks", core::ControlFlow::kPlannedBlocks)
      .value("opaque_subgraphs", core::ControlFlow::kOpaqueSubgraphs);
  // Every field is a required keyword: a front cannot leave one at a default it did not mean.
  py::class_<core::NodeFacts>(m, "NodeFacts", "What a front knows of one node (core::NodeFacts), each field named.")
      .def(py::init([](std::string op, std::string scope, std::string id, core::Boundary boundary, bool unobserved,
                       bool notFp32, core::ControlFlow controlFlow, bool keptNonFinite, bool keptByFallback,
                       bool runsInt8, Verdict observedRange, Verdict underflowToZero, Verdict constantRange,
                       Verdict lostScalar, bool readsTableStoredLow, bool writesTensorList, bool sumsNothing) {
             return core::NodeFacts{.op = std::move(op),
                                    .scope = std::move(scope),
                                    .id = std::move(id),
                                    .boundary = boundary,
                                    .unobserved = unobserved,
                                    .notFp32 = notFp32,
                                    .controlFlow = controlFlow,
                                    .keptNonFinite = keptNonFinite,
                                    .keptByFallback = keptByFallback,
                                    .runsInt8 = runsInt8,
                                    .observedRange = std::move(observedRange),
                                    .underflowToZero = std::move(underflowToZero),
                                    .constantRange = std::move(constantRange),
                                    .lostScalar = std::move(lostScalar),
                                    .readsTableStoredLow = readsTableStoredLow,
                                    .writesTensorList = writesTensorList,
                                    .sumsNothing = sumsNothing};
           }),
           py::kw_only(), py::arg("op"), py::arg("scope"), py::arg("id"), py::arg("boundary"), py::arg("unobserved"),
           py::arg("not_fp32"), py::arg("control_flow"), py::arg("kept_non_finite"), py::arg("kept_by_fallback"),
           py::arg("runs_int8"), py::arg("observed_range"), py::arg("underflow_to_zero"), py::arg("constant_range"),
           py::arg("lost_scalar"), py::arg("reads_table_stored_low"), py::arg("writes_tensor_list"),
           py::arg("sums_nothing"))
      .def_readwrite("op", &core::NodeFacts::op)
      .def_readwrite("scope", &core::NodeFacts::scope)
      .def_readwrite("id", &core::NodeFacts::id)
      .def_readwrite("boundary", &core::NodeFacts::boundary)
      .def_readwrite("unobserved", &core::NodeFacts::unobserved)
      .def_readwrite("not_fp32", &core::NodeFacts::notFp32)
      .def_readwrite("control_flow", &core::NodeFacts::controlFlow)
      .def_readwrite("kept_non_finite", &core::NodeFacts::keptNonFinite)
      .def_readwrite("kept_by_fallback", &core::NodeFacts::keptByFallback)
      .def_readwrite("runs_int8", &core::NodeFacts::runsInt8)
      .def_readwrite("observed_range", &core::NodeFacts::observedRange)
      .def_readwrite("underflow_to_zero", &core::NodeFacts::underflowToZero)
      .def_readwrite("constant_range", &core::NodeFacts::constantRange)
      .def_readwrite("lost_scalar", &core::NodeFacts::lostScalar)
      .def_readwrite("reads_table_stored_low", &core::NodeFacts::readsTableStoredLow)
      .def_readwrite("writes_tensor_list", &core::NodeFacts::writesTensorList)
      .def_readwrite("sums_nothing", &core::NodeFacts::sumsNothing);

  py::class_<core::ObservedNumber>(m, "ObservedNumber", "What was observed of a computed fp32 tensor.")
      .def(py::init([](std::string name, double largestMagnitude, bool onlyIntegers) {
             return core::ObservedNumber{std::move(name), {largestMagnitude, onlyIntegers}};
           }),
           py::kw_only(), py::arg("name"), py::arg("largest_magnitude"), py::arg("only_integers"));
  py::class_<core::NamedNumber>(m, "NamedNumber", "A constant's largest magnitude, or a scalar, by name.")
      .def(py::init([](std::string name, double value) { return core::NamedNumber{std::move(name), value}; }),
           py::kw_only(), py::arg("name"), py::arg("value"));
  py::class_<core::RangeGuardNumbers>(m, "RangeGuardNumbers", "The numbers of a node the range guards judge.")
      .def(py::init([](std::vector<core::ObservedNumber> observed, std::vector<core::NamedNumber> constants,
                       std::vector<core::NamedNumber> scalars) {
             return core::RangeGuardNumbers{std::move(observed), std::move(constants), std::move(scalars)};
           }),
           py::kw_only(), py::arg("observed"), py::arg("constants"), py::arg("scalars"));
  py::class_<core::RangeGuardVerdicts>(m, "RangeGuardVerdicts",
                                       "The range guards' verdicts, each None or a GuardVerdict.")
      .def_readonly("observed_range", &core::RangeGuardVerdicts::observedRange)
      .def_readonly("constant_range", &core::RangeGuardVerdicts::constantRange)
      .def_readonly("lost_scalar", &core::RangeGuardVerdicts::lostScalar);
  m.def(
      "judge_ranges",
      [](const core::RangeGuardNumbers& numbers, const contract::ConversionRequest& request) {
        return core::judgeRanges(numbers, request.lowDtype);
      },
      py::arg("numbers"), py::arg("request"), "core/range_guards on a node's numbers, in the request's dtype.");

  py::class_<core::NodeDecision>(m, "NodeDecision", "What core::classifyNode decided of a node.")
      .def_property_readonly("category", [](const core::NodeDecision& d) { return core::toString(d.category); })
      .def_property_readonly("rule_kind", [](const core::NodeDecision& d) { return core::toString(d.kind); })
      .def_readonly("rule", &core::NodeDecision::rule)
      .def_readonly("reason", &core::NodeDecision::reason)
      .def_property_readonly("guard", [](const core::NodeDecision& d) {
        return d.guard ? py::object(guardDict(*d.guard)) : py::object(py::none());
      });
  m.def("classify_nodes", &classifyNodes, py::arg("nodes"), py::arg("request"), py::arg("node_rule") = py::none(),
        "core::classifyNode (the rule order both fronts share) with the request's policy and dtype over the NodeFacts "
        "of every node; node_rule(i): (category, reason) or None. Returns a NodeDecision per node.");
}

} // namespace

void bindExportCore(py::module_& m) {
  bindNodeFacts(m);
  m.def("plan_dataflow", &planDataflow, py::arg("categories"), py::arg("values"), py::arg("request"),
        "Plans a dataflow graph with the request's planner: categories per node, (producer, cast bytes, consumers) per "
        "castable fp32 value; returns (precision per node, forced to fp32 per node).");
  m.def("fp32_cast_bytes", &core::fp32CastBytes, py::arg("elements"),
        "The bytes one cast of an fp32 tensor to the low dtype moves (core::fp32CastBytes), the cost plan_dataflow "
        "takes per value.");
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
         const std::vector<std::tuple<std::string, int, double>>& values, const contract::ConversionRequest& request) {
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
            viewNodes, viewValues, [&](int value) { return std::get<2>(values[value]); }, request.lowDtype);
        for (const auto& [node, verdict] : found) {
          verdicts[py::int_(node)] = py::cast(verdict);
        }
        return verdicts;
      },
      py::arg("nodes"), py::arg("values"), py::arg("request"),
      "core/underflow_to_zero, in the request's dtype, over a graph's view: per node (op, the value index per input "
      "or -1, the non-zero float scalars' magnitudes, whether a pow's exponent may be negative), per value (name, "
      "producing node or -1, smallest non-zero magnitude); returns {node index: GuardVerdict}.");
}

} // namespace torch_mp::python
