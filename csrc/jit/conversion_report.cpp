#include "jit/conversion_report.h"

#include <torch/csrc/jit/ir/constants.h>

#include <algorithm>
#include <functional>
#include <iomanip>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

namespace torch_mp::jit {
namespace {

std::string quoted(const std::string& text) {
  std::ostringstream out;
  out << '"';
  for (char c : text) {
    switch (c) {
      case '"':
        out << "\\\"";
        break;
      case '\\':
        out << "\\\\";
        break;
      case '\n':
        out << "\\n";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out << "\\u" << std::hex << std::setw(4) << std::setfill('0') << static_cast<int>(c) << std::dec;
        } else {
          out << c;
        }
    }
  }
  out << '"';
  return out.str();
}

// A finite number with 6 significant digits (JSON has no inf or nan; magnitudes here are finite).
std::string number(double value) {
  std::ostringstream out;
  out << std::setprecision(6) << value;
  return out.str();
}

void collectTensors(const c10::IValue& value, const std::function<void(const at::Tensor&)>& visit) {
  if (value.isTensor()) {
    visit(value.toTensor());
  } else if (value.isTensorList()) {
    for (const at::Tensor& tensor : value.toTensorVector()) {
      visit(tensor);
    }
  } else if (value.isList()) {
    for (const c10::IValue& element : value.toListRef()) {
      collectTensors(element, visit);
    }
  } else if (value.isTuple()) {
    for (const c10::IValue& element : value.toTupleRef().elements()) {
      collectTensors(element, visit);
    }
  }
}

// Calls visit(constant node, tensor) for every tensor held by a constant of the block or its sub-blocks.
void forEachConstantTensor(
    const torch::jit::Block* block, const std::function<void(const torch::jit::Node*, const at::Tensor&)>& visit) {
  for (const torch::jit::Node* node : block->nodes()) {
    for (const torch::jit::Block* sub : node->blocks()) {
      forEachConstantTensor(sub, visit);
    }
    if (node->kind() != c10::prim::Constant || node->outputs().size() != 1) {
      continue;
    }
    if (auto value = torch::jit::toIValue(node->output())) {
      collectTensors(*value, [&](const at::Tensor& tensor) { visit(node, tensor); });
    }
  }
}

} // namespace

int ConversionReport::lowPrecisionNodes() const {
  int count = 0;
  for (const NodeDecision& node : nodes) {
    count += node.precision == "low";
  }
  return count;
}

double ConversionReport::lowPrecisionFlopFraction() const {
  int64_t total = 0;
  int64_t low = 0;
  for (const NodeDecision& node : nodes) {
    total += node.flops;
    low += node.precision == "low" ? node.flops : 0;
  }
  return total ? static_cast<double>(low) / static_cast<double>(total) : 1.0;
}

std::string ConversionReport::toJson() const {
  std::ostringstream out;
  out << "{\"dtype\": " << quoted(dtype) << ", \"policy\": " << quoted(policy) << ", \"planner\": " << quoted(planner)
      << ", \"seconds\": " << seconds << ", \"phases\": {";
  for (size_t i = 0; i < phases.size(); ++i) {
    out << (i ? ", " : "") << quoted(phases[i].first) << ": " << phases[i].second;
  }
  out << "}, \"weight_bytes_before\": " << weightBytesBefore
      << ", \"weight_bytes_after\": " << weightBytesAfter << ", \"weight_bytes_kept_fp32\": " << weightBytesKeptFp32
      << ", \"cast_bytes\": " << castBytes
      << ", \"fused_casts\": " << fusedCasts << ", \"fused_cast_bytes\": " << fusedCastBytes
      << ", \"fused_pointwise\": " << fusedPointwise
      << ", \"channels_last_convolutions\": " << channelsLastConvolutions
      << ", \"fused_convolutions\": " << fusedConvolutions
      << ", \"unobserved_nodes\": " << unobservedNodes
      << ", \"ranges_observed\": " << (rangesObserved ? "true" : "false")
      << ", \"low_precision_flop_fraction\": " << lowPrecisionFlopFraction() << ", \"unknown_ops\": [";
  for (size_t i = 0; i < unknownOps.size(); ++i) {
    out << (i ? ", " : "") << quoted(unknownOps[i]);
  }
  out << "], \"nodes\": [";
  for (size_t i = 0; i < nodes.size(); ++i) {
    const NodeDecision& node = nodes[i];
    out << (i ? ", " : "") << "{\"op\": " << quoted(node.op) << ", \"output\": " << quoted(node.output)
        << ", \"scope\": " << quoted(node.scope) << ", \"precision\": " << quoted(node.precision)
        << ", \"rule\": " << quoted(node.rule) << ", \"rule_kind\": " << quoted(core::toString(node.ruleKind))
        << ", \"amax\": " << (node.amax < 0 ? std::string("null") : number(node.amax))
        << ", \"flops\": " << node.flops << "}";
  }
  out << "], \"weights_kept_fp32\": [";
  for (size_t i = 0; i < weightsKeptFp32.size(); ++i) {
    const KeptFp32Weight& weight = weightsKeptFp32[i];
    out << (i ? ", " : "") << "{\"name\": " << quoted(weight.name) << ", \"bytes\": " << weight.bytes
        << ", \"readers\": [";
    for (size_t r = 0; r < weight.readers.size(); ++r) {
      out << (r ? ", " : "") << quoted(weight.readers[r]);
    }
    out << "], \"rule\": " << quoted(weight.rule) << ", \"rule_kind\": " << quoted(weight.ruleKind ? core::toString(*weight.ruleKind) : "") << "}";
  }
  out << "], \"casts\": [";
  for (size_t i = 0; i < casts.size(); ++i) {
    const CastRecord& cast = casts[i];
    out << (i ? ", " : "") << "{\"value\": " << quoted(cast.value) << ", \"from\": " << quoted(cast.from)
        << ", \"to\": " << quoted(cast.to) << ", \"bytes\": " << cast.bytes
        << ", \"reached\": " << (cast.reached ? "true" : "false") << "}";
  }
  out << "]}";
  return out.str();
}

void reportKeptFp32Weights(const torch::jit::Graph& graph, ConversionReport& report) {
  std::unordered_map<std::string, const NodeDecision*> decisionOf;
  for (const NodeDecision& decision : report.nodes) {
    decisionOf.emplace(decision.output, &decision);
  }
  std::unordered_map<const void*, size_t> entryOf;  // storage -> index in `kept`
  std::vector<KeptFp32Weight> kept;
  forEachConstantTensor(graph.block(), [&](const torch::jit::Node* constant, const at::Tensor& tensor) {
    if (!tensor.has_storage() || tensor.scalar_type() != c10::ScalarType::Float) {
      return;
    }
    auto [slot, added] = entryOf.emplace(tensor.storage().unsafeGetStorageImpl(), kept.size());
    if (added) {
      kept.push_back({constant->output()->debugName(), static_cast<int64_t>(tensor.storage().nbytes()), {}, "", std::nullopt});
    }
    KeptFp32Weight& weight = kept[slot->second];
    for (const torch::jit::Use& use : constant->output()->uses()) {
      weight.readers.push_back(use.user->kind().toQualString());
      if (weight.rule.empty() && !use.user->outputs().empty()) {
        auto decided = decisionOf.find(use.user->output(0)->debugName());
        if (decided != decisionOf.end()) {
          weight.rule = decided->second->rule;
          weight.ruleKind = decided->second->ruleKind;
        }
      }
    }
  });
  report.weightBytesKeptFp32 = 0;
  report.weightsKeptFp32.clear();
  for (KeptFp32Weight& weight : kept) {
    report.weightBytesKeptFp32 += weight.bytes;
    if (weight.bytes > kKeptFp32ListedBytes) {
      report.weightsKeptFp32.push_back(std::move(weight));
    }
  }
  std::stable_sort(report.weightsKeptFp32.begin(), report.weightsKeptFp32.end(),
                   [](const KeptFp32Weight& a, const KeptFp32Weight& b) { return a.bytes > b.bytes; });
}

int64_t constantBytes(const torch::jit::Graph& graph) {
  std::unordered_set<const void*> seen;
  int64_t total = 0;
  forEachConstantTensor(graph.block(), [&](const torch::jit::Node* /*constant*/, const at::Tensor& tensor) {
    if (tensor.has_storage() && seen.insert(tensor.storage().unsafeGetStorageImpl()).second) {
      total += static_cast<int64_t>(tensor.storage().nbytes());
    }
  });
  return total;
}

} // namespace torch_mp::jit
