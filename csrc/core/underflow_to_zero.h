// The underflow-to-zero guard, written once for both fronts, over an IR-free view of a graph: its nodes (op, the
// values each reads, the float scalars it reads) and values (who computes each). jit/plan/numeric_guards builds the
// view of a TorchScript graph, torch_mp/_export/facts.py that of an FX graph (through _C.underflow_to_zero).
//
// For each read where a 0 gives inf or NaN (core/op_facts' zeroSensitiveInput: a divisor, rsqrt's or log's argument,
// the base of a negative power), the value read is followed back through the views and copies that pass it on
// (preservesDtype) to the node computing it. Where the smallest non-zero magnitude seen along the way, or a float
// scalar that node reads (clamp_min(norm, 1e-12) in F.normalize), is below the low dtype's smallest number, the reader,
// the views between and the producer keep fp32: the value is never low on its way there.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/numeric_limits.h"
#include "core/op_policy.h"

namespace torch_mp::core {

struct GraphViewNode {
  std::string op;                   // "aten::div"
  std::vector<int> inputs;          // per input: the index of the tensor value it reads, or -1 (not a tensor value)
  std::vector<double> floatScalars;  // the magnitudes of the non-zero float scalars it reads
  bool exponentMayBeNegative = true;  // pow: its exponent may be negative (a constant that is not, or unknown)
};

struct GraphViewValue {
  std::string name;   // as the report names it
  int producer = -1;  // the node computing it, -1 for a graph input, a weight or a constant
};

// node index -> the verdict that keeps it fp32. `smallest(value)`: the value's smallest non-zero magnitude, observed
// or a constant's own (infinity where unknown or not an fp32 tensor); asked only along the walks.
std::map<int, GuardVerdict> underflowToZero(
    const std::vector<GraphViewNode>& nodes,
    const std::vector<GraphViewValue>& values,
    const std::function<double(int)>& smallest,
    LowDtype dtype);

} // namespace torch_mp::core
