// Replaces dtype queries on observed tensors with constants.
//
//   %d : int = prim::dtype(%x)        where %x was observed as fp32   =>   uses of %d read the constant 6, and the
//                                                                         query is removed
//
// The converted graph is specialised to the dtypes of the example inputs anyway (its casts name fixed dtypes).
// Answering the query from the observation keeps it meaning the original dtype after %x becomes low precision,
// without forcing an fp32 copy of %x just to read its dtype.
#pragma once

#include <torch/csrc/jit/ir/ir.h>

#include <memory>

#include "jit/ir/observed_values.h"

namespace torch_mp::jit {

// Returns whether the graph changed.
bool SpecializeDtypeQueries(const std::shared_ptr<torch::jit::Graph>& graph, const ObservedValues& observed);

} // namespace torch_mp::jit
