#include "jit/ir/tensor_statistics.h"

#include <ATen/Functions.h>

namespace torch_mp::jit {

TensorStatistics tensorStatistics(const at::Tensor& tensor, bool checkIntegers) {
  TensorStatistics statistics{finiteMagnitudes(tensor), true};
  if (checkIntegers && statistics.magnitudes.largest > kIntegerCheckAbove) {
    statistics.onlyIntegers = at::equal(tensor, tensor.round());  // NaN never equals itself: not integers
  }
  return statistics;
}

} // namespace torch_mp::jit
