#include "core/underflow_to_zero.h"

#include <algorithm>

#include "core/op_facts.h"

namespace torch_mp::core {

std::map<int, GuardVerdict> underflowToZero(
    const std::vector<GraphViewNode>& nodes,
    const std::vector<GraphViewValue>& values,
    const std::function<double(int)>& smallest,
    LowDtype dtype) {
  const double limit = smallestNonZero(dtype);
  std::map<int, GuardVerdict> verdicts;
  for (int reader = 0; reader < static_cast<int>(nodes.size()); ++reader) {
    const OpFacts& facts = factsOf(nodes[reader].op);
    const int index = facts.zeroSensitiveInput;
    if (index < 0 || index >= static_cast<int>(nodes[reader].inputs.size()) || nodes[reader].inputs[index] < 0 ||
        (facts.zeroSensitivity == ZeroSensitivity::kNegativeExponent && !nodes[reader].exponentMayBeNegative)) {
      continue;
    }
    std::vector<int> path{reader};
    int value = nodes[reader].inputs[index];
    double least = smallest(value);
    for (int producer = values[value].producer;
         producer >= 0 && factsOf(nodes[producer].op).preservesDtype && !nodes[producer].inputs.empty() &&
         nodes[producer].inputs[0] >= 0;
         producer = values[value].producer) {
      path.push_back(producer);
      value = nodes[producer].inputs[0];
      least = std::min(least, smallest(value));
    }
    if (const int producer = values[value].producer; producer >= 0) {
      path.push_back(producer);
      for (double scalar : nodes[producer].floatScalars) {
        least = std::min(least, scalar);
      }
    }
    if (least >= limit) {
      continue;
    }
    const GuardVerdict verdict{GuardKind::kUnderflowToZero, values[value].name, least, limit};
    for (int member : path) {
      verdicts.emplace(member, verdict);
    }
  }
  return verdicts;
}

} // namespace torch_mp::core
