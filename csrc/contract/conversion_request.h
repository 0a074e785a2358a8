// What a conversion is asked to do, whatever front converts: the request (ConversionRequest: dtype, op policy,
// planner, verification, IO dtypes) and what one run of a prepared model adds (RunRequest: nodes kept fp32 by id, ids
// kept in the result). Torch-free: compiled without Torch's headers (CMake target torch_mp_contract). A front's own
// knobs live with the front (TorchScript's: jit/convert_options.h).
#pragma once

#include <unordered_set>

#include "contract/node_id.h"
#include "core/numeric_limits.h"
#include "core/op_policy.h"
#include "core/policy_vocabulary.h"

namespace torch_mp::contract {

struct ConversionRequest {
  // float16 or bfloat16 by its type: a request cannot hold another dtype (Python's names are parsed where the
  // request is bound, csrc/python/bindings.cpp).
  core::LowDtype lowDtype = core::LowDtype::kFloat16;
  // The op table, its module-path exclusions and its name (which the report gives).
  core::OpPolicy policy;
  core::PlanMethod planner = core::PlanMethod::kMinCut;
  // Run the converted model on the example inputs and check that every output keeps its dtype, and on the calibration
  // inputs too that no output or observed value turns NaN or inf where fp32's is finite (the report's nonFinite says
  // where).
  bool verifyOutputs = true;
  // Inputs and outputs keep their dtypes. Off: fp32 tensor inputs and outputs (top level and in returned
  // tuples/lists) take the low dtype, for models that feed one another.
  bool keepIoDtypes = true;
};

// Nodes kept fp32 by id, whatever the policy and the user's rules say: the verification's repair of outputs that
// turned non-finite in low precision, and the accuracy fallback's choice.
struct KeptFp32 {
  std::unordered_set<NodeId> nonFinite;
  std::unordered_set<NodeId> fallback;
};

// What one run of a prepared model adds to the request: the fallback's and the repair's state.
struct RunRequest {
  // Asked first, before the policy's exclusions, the user's node rule and the op table.
  KeptFp32 keepFp32;
  // The converted model keeps its node ids, so values can be found by node (probeNodeOutputs). Off for a model
  // handed to a user: ids show in its printed graph.
  bool keepNodeIds = false;
};

} // namespace torch_mp::contract
