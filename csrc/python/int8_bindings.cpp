#include "python/int8_bindings.h"

#include <pybind11/stl.h>
#include <torch/extension.h>

#include "core/activation_clipping.h"
#include "core/int8_kernels.h"
#include "core/int8_planner.h"
#include "python/conversions.h"

namespace py = pybind11;

namespace torch_mp::python {

void bindInt8(py::module_& m) {
  py::enum_<core::Int8Role>(m, "Int8Role", "What an op does in an int8 plan (core/int8_kernels).")
      .value("none", core::Int8Role::kNone)
      .value("kernel", core::Int8Role::kKernel)
      .value("follow", core::Int8Role::kFollow)
      .value("no_kernel", core::Int8Role::kNoKernel)
      .value("epilogue", core::Int8Role::kEpilogue);
  py::class_<core::Int8OpFacts>(m, "Int8OpFacts", "A row of core/int8_kernels' table.")
      .def_property_readonly("op", [](const core::Int8OpFacts& f) { return std::string(f.op); })
      .def_readonly("role", &core::Int8OpFacts::role)
      .def_property_readonly("reason", [](const core::Int8OpFacts& f) { return std::string(f.reason); })
      .def_readonly("weight_input", &core::Int8OpFacts::weightInput);
  m.def(
      "int8_facts",
      [](const std::string& op) -> std::optional<core::Int8OpFacts> {
        const core::Int8OpFacts* facts = core::int8FactsOf(op);
        return facts ? std::optional<core::Int8OpFacts>(*facts) : std::nullopt;
      },
      py::arg("op"), "The row of core/int8_kernels for a qualified op name, or None.");

  py::enum_<core::Int8Reason>(m, "Int8Reason", "Why a node is int8 or not (core/int8_planner).")
      .value("int8", core::Int8Reason::kInt8)
      .value("no_int8_form", core::Int8Reason::kNoInt8Form)
      .value("no_kernel", core::Int8Reason::kNoKernel)
      .value("weight_computed", core::Int8Reason::kWeightComputed)
      .value("range_guard", core::Int8Reason::kRangeGuard)
      .value("kept_by_fallback", core::Int8Reason::kKeptByFallback)
      .value("costs_more", core::Int8Reason::kCostsMore);

  py::class_<core::Int8CostModel>(m, "Int8CostModel", "Seconds an int8 kernel saves and a quantize pass costs.")
      .def(py::init<>())
      .def_static(
          "for_cpu", [](const std::optional<std::string>& features) { return core::Int8CostModel::forCpu(cpuFeatures(features)); },
          py::arg("cpu_features") = py::none(),
          "The model for a CPU with these features (default: this CPU's, or TORCH_MP_CPU_FEATURES).")
      .def_static(
          "reduced_range",
          [](const std::optional<std::string>& features) { return core::Int8CostModel::reducedRange(cpuFeatures(features)); },
          py::arg("cpu_features") = py::none(),
          "Whether activations take the reduced range [0, 127] on that CPU (no VNNI).")
      .def_readwrite("fp32_multiply_adds_per_second", &core::Int8CostModel::fp32MultiplyAddsPerSecond)
      .def_readwrite("int8_speedup", &core::Int8CostModel::int8Speedup)
      .def_readwrite("low_float_speedup", &core::Int8CostModel::lowFloatSpeedup)
      .def_readwrite("bytes_per_second", &core::Int8CostModel::bytesPerSecond)
      .def_readwrite("seconds_per_pass", &core::Int8CostModel::secondsPerPass);

  py::class_<core::Int8NodeFacts>(m, "Int8NodeFacts", "What the int8 planner needs of a candidate node.")
      .def(py::init([](std::string op, int64_t flops, bool runsLowFloat, bool weightStored, bool keptByFallback) {
             return core::Int8NodeFacts{std::move(op), flops, runsLowFloat, weightStored, keptByFallback};
           }),
           py::kw_only(), py::arg("op"), py::arg("flops"), py::arg("runs_low_float"), py::arg("weight_stored"),
           py::arg("kept_by_fallback"))
      .def_readonly("op", &core::Int8NodeFacts::op)
      .def_readonly("flops", &core::Int8NodeFacts::flops);
  py::class_<core::Int8ValueFacts>(m, "Int8ValueFacts", "A value int8 nodes would read quantized.")
      .def(py::init([](int producer, std::vector<int> readers, int64_t numel, double min, double max, bool finite) {
             return core::Int8ValueFacts{producer, std::move(readers), numel, min, max, finite};
           }),
           py::kw_only(), py::arg("producer"), py::arg("readers"), py::arg("numel"), py::arg("min"), py::arg("max"),
           py::arg("finite"))
      .def_readonly("producer", &core::Int8ValueFacts::producer)
      .def_readonly("readers", &core::Int8ValueFacts::readers);
  py::class_<core::Int8NodePlan>(m, "Int8NodePlan", "The int8 planner's decision on a node.")
      .def_readonly("int8", &core::Int8NodePlan::int8)
      .def_readonly("reason", &core::Int8NodePlan::reason)
      .def_readonly("saved_seconds", &core::Int8NodePlan::savedSeconds)
      .def_readonly("quantize_seconds", &core::Int8NodePlan::quantizeSeconds);
  m.def(
      "plan_int8",
      [](const std::vector<core::Int8NodeFacts>& nodes, const std::vector<core::Int8ValueFacts>& values,
         const core::Int8CostModel& model) {
        for (const core::Int8ValueFacts& value : values) {
          TORCH_CHECK_VALUE(value.producer < static_cast<int>(nodes.size()), "torch_mp: value produced by node ",
                            value.producer, " of ", nodes.size());
          for (int reader : value.readers) {
            TORCH_CHECK_VALUE(reader >= 0 && reader < static_cast<int>(nodes.size()), "torch_mp: value read by node ",
                              reader, " of ", nodes.size());
          }
        }
        return core::planInt8(nodes, values, model);
      },
      py::arg("nodes"), py::arg("values"), py::arg("cost_model"),
      "Which candidate nodes run int8 (core/int8_planner: the exact minimum of float time lost and quantize passes).");

  py::class_<core::ActivationQuantization>(m, "ActivationQuantization", "uint8 affine parameters of an activation.")
      .def_readonly("scale", &core::ActivationQuantization::scale)
      .def_readonly("zero_point", &core::ActivationQuantization::zeroPoint)
      .def_readonly("qmin", &core::ActivationQuantization::qmin)
      .def_readonly("qmax", &core::ActivationQuantization::qmax);
  m.def("activation_quantization", &core::activationQuantization, py::arg("min"), py::arg("max"),
        py::arg("reduced_range"), "uint8 affine quantization of an activation from its observed range.");

  py::class_<core::ValueHistogram>(m, "ValueHistogram",
                                    "What observation kept of a value for clipping (core/activation_clipping).")
      .def(py::init([](double low, double high, int64_t zeros, std::vector<double> count, std::vector<double> sum,
                       std::vector<double> sumOfSquares) {
             TORCH_CHECK_VALUE(sum.size() == count.size() && sumOfSquares.size() == count.size(),
                               "torch_mp: a histogram's count, sum and sum_of_squares have one entry per bin");
             return core::ValueHistogram{low, high, zeros, std::move(count), std::move(sum), std::move(sumOfSquares)};
           }),
           py::kw_only(), py::arg("low"), py::arg("high"), py::arg("zeros"), py::arg("count"), py::arg("sum"),
           py::arg("sum_of_squares"))
      .def_readonly("low", &core::ValueHistogram::low)
      .def_readonly("high", &core::ValueHistogram::high)
      .def_readonly("zeros", &core::ValueHistogram::zeros)
      .def_readonly("count", &core::ValueHistogram::count)
      .def_readonly("sum", &core::ValueHistogram::sum)
      .def_readonly("sum_of_squares", &core::ValueHistogram::sumOfSquares);
  py::class_<core::ActivationRange>(m, "ActivationRange", "The range an activation is quantized over.")
      .def_readonly("min", &core::ActivationRange::min)
      .def_readonly("max", &core::ActivationRange::max)
      .def_readonly("clipped", &core::ActivationRange::clipped)
      .def_readonly("squared_error", &core::ActivationRange::squaredError)
      .def_readonly("min_max_squared_error", &core::ActivationRange::minMaxSquaredError);
  m.def("clipped_range", &core::clippedRange, py::arg("histogram"), py::arg("reduced_range"),
        "The observed range, or a clipped one where that has less expected squared error (core/activation_clipping).");
}

} // namespace torch_mp::python
