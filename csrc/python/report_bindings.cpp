#include "python/report_bindings.h"

#include <pybind11/stl.h>
#include <torch/extension.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "contract/conversion_report.h"
#include "contract/program_report.h"
#include "python/conversions.h"

namespace py = pybind11;

namespace torch_mp::python {
namespace {

py::object ruleKindOrNone(const std::optional<core::RuleKind>& kind) {
  return kind ? py::object(py::str(core::toString(*kind))) : py::none();
}

py::dict int8Dict(const core::Int8NodePlan& plan) {
  py::dict entry;
  entry["reason"] = core::toString(plan.reason);
  entry["saved_seconds"] = plan.savedSeconds;
  entry["quantize_seconds"] = plan.quantizeSeconds;
  return entry;
}

// The report as Python values (dicts, lists, numbers, strings): what `Report.data` holds and `json` writes.
py::dict reportDict(const contract::ConversionReport& report) {
  const auto idOf = [&report](contract::NodeId id) -> py::object {
    return report.nodeNames.empty() ? py::object(py::int_(id)) : py::object(py::str(report.nodeNames.at(id)));
  };
  py::dict phases;
  for (const auto& [name, seconds] : report.phases) {
    phases[py::str(name)] = seconds;
  }
  py::list nodes;
  for (const contract::NodeDecision& node : report.nodes) {
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
  for (const contract::KeptFp32Weight& weight : report.weightsKeptFp32) {
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
  for (const contract::CastRecord& cast : report.casts) {
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
  for (const contract::GraphItem& item : report.graph) {
    py::dict entry;
    entry["id"] = idOf(item.id);
    entry["kind"] = contract::toString(item.kind);
    entry["op"] = item.op;
    py::list inputs;
    for (contract::NodeId input : item.inputs) {
      inputs.append(idOf(input));
    }
    entry["inputs"] = inputs;
    if (item.kind == contract::GraphItem::Kind::kCast) {
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

void bindProgramRecords(py::module_& m) {
  py::class_<contract::ProgramNode>(m, "ProgramNode", "A planned node of an exported program, for program_report.")
      .def(py::init([](contract::NodeId id, std::string op, std::string scope, core::NodeDecision decision, bool low,
                       bool forcedToFp32, std::optional<double> amax, int64_t flops,
                       std::optional<core::Int8NodePlan> int8) {
             return contract::ProgramNode{id, std::move(op), std::move(scope), std::move(decision), low,
                                          forcedToFp32, amax, flops, int8};
           }),
           py::kw_only(), py::arg("id"), py::arg("op"), py::arg("scope"), py::arg("decision"), py::arg("low"),
           py::arg("forced_to_fp32"), py::arg("amax"), py::arg("flops"), py::arg("int8"));
  py::class_<contract::ProgramCast>(m, "ProgramCast", "A cast apply inserted, for program_report.")
      .def(py::init([](contract::NodeId id, std::string value, std::string fromDtype, std::string toDtype,
                       int64_t bytes) {
             return contract::ProgramCast{id, std::move(value), std::move(fromDtype), std::move(toDtype), bytes};
           }),
           py::kw_only(), py::arg("id"), py::arg("value"), py::arg("from_dtype"), py::arg("to_dtype"),
           py::arg("bytes"));
  py::class_<contract::ProgramGraphItem>(m, "ProgramGraphItem", "A node or cast of the converted program's graph.")
      .def(py::init([](contract::NodeId id, bool isCast, std::string op, std::vector<contract::NodeId> inputs,
                       int cast) {
             return contract::ProgramGraphItem{id, isCast, std::move(op), std::move(inputs), cast};
           }),
           py::kw_only(), py::arg("id"), py::arg("is_cast"), py::arg("op"), py::arg("inputs"), py::arg("cast"));
  py::class_<contract::ProgramWeight>(m, "ProgramWeight", "A tensor the converted program stores in fp32.")
      .def(py::init([](std::string name, int64_t bytes, std::vector<std::string> readers,
                       std::optional<contract::NodeId> decidedBy) {
             return contract::ProgramWeight{std::move(name), bytes, std::move(readers), decidedBy};
           }),
           py::kw_only(), py::arg("name"), py::arg("bytes"), py::arg("readers"), py::arg("decided_by"));
  py::class_<contract::NonFiniteValue>(m, "NonFiniteValue", "Where verification found NaN or inf that fp32 has not.")
      .def(py::init([](size_t run, std::optional<size_t> outputTensor, std::string value) {
             return contract::NonFiniteValue{run, outputTensor, std::move(value)};
           }),
           py::kw_only(), py::arg("run"), py::arg("output_tensor"), py::arg("value"));
  m.def(
      "program_report",
      [](const contract::ConversionRequest& request, std::vector<std::string> names,
         std::vector<contract::ProgramNode> nodes, std::vector<contract::ProgramCast> casts,
         std::vector<contract::ProgramGraphItem> graph, std::vector<contract::ProgramWeight> keptFp32,
         int64_t weightBytesBefore, int64_t weightBytesAfter, std::optional<contract::NonFiniteValue> nonFinite,
         std::vector<std::pair<std::string, double>> phases) {
        return contract::programReport(request, {.names = std::move(names),
                                                 .nodes = std::move(nodes),
                                                 .casts = std::move(casts),
                                                 .graph = std::move(graph),
                                                 .keptFp32 = std::move(keptFp32),
                                                 .weightBytesBefore = weightBytesBefore,
                                                 .weightBytesAfter = weightBytesAfter,
                                                 .nonFinite = std::move(nonFinite),
                                                 .phases = std::move(phases)});
      },
      py::arg("request"), py::kw_only(), py::arg("names"), py::arg("nodes"), py::arg("casts"), py::arg("graph"),
      py::arg("kept_fp32"), py::arg("weight_bytes_before"), py::arg("weight_bytes_after"), py::arg("non_finite"),
      py::arg("phases"),
      "The export front's ConversionReport (contract::programReport), every id an index into `names` (FX node names): "
      "ProgramNode per planned node, ProgramCast per cast, ProgramGraphItem per graph item, ProgramWeight per fp32 "
      "stored tensor, the weight bytes before and after, a NonFiniteValue or None, (stage, seconds) per stage.");
}

} // namespace

void bindReport(py::module_& m) {
  py::class_<contract::ConversionReport>(m, "ConversionReport", "What a conversion decided and what it cost.")
      .def("to_dict", &reportDict, "The report as dicts and lists (what Report.data holds).")
      .def("low_precision_nodes", &contract::ConversionReport::lowPrecisionNodes)
      .def_readonly("seconds", &contract::ConversionReport::seconds);
  bindProgramRecords(m);
}

} // namespace torch_mp::python
