// What one observation of an fp32 tensor adds to its value's ObservedValue, computed once for both fronts: the
// TorchScript front's observer (prepare/value_observer) and the export front's FX interpreter (through the binding
// value_statistics) call it, so that a value's magnitudes, finiteness and integrality mean the same on both.
#pragma once

#include <ATen/core/Tensor.h>

#include "jit/ir/observed_values.h"

namespace torch_mp::jit {

struct TensorStatistics {
  FiniteMagnitudes magnitudes;
  bool onlyIntegers = true;
};

// finiteMagnitudes, and whether the tensor holds only integers: checked only where `checkIntegers` and its largest
// magnitude exceeds kIntegerCheckAbove (a pass; NaN is not an integer), else true.
TensorStatistics tensorStatistics(const at::Tensor& tensor, bool checkIntegers);

} // namespace torch_mp::jit
