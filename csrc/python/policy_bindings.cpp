#include "python/policy_bindings.h"

#include <pybind11/stl.h>
#include <torch/extension.h>

#include <iterator>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/fast_kernels.h"
#include "core/op_policy.h"
#include "python/conversions.h"

namespace py = pybind11;

namespace torch_mp::python {
namespace {

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

std::vector<std::string> cpuFeatureNames(const std::optional<std::string>& declared) {
  std::vector<std::string> names;
  for (core::CpuFeature feature : cpuFeatures(declared).list()) {
    names.emplace_back(core::toString(feature));
  }
  return names;
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

} // namespace

void bindPolicy(py::module_& m) {
  m.attr("CATEGORIES") = namesOf(core::kAllCategories);
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
}

} // namespace torch_mp::python
