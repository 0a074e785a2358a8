// A node's id as both fronts name nodes in the contract: TorchScript numbers its nodes (jit/ir/ir_utils), the export
// front indexes its FX node names (ConversionReport::nodeNames).
#pragma once

#include <cstdint>

namespace torch_mp::contract {

using NodeId = int64_t;

} // namespace torch_mp::contract
