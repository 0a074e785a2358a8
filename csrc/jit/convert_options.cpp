#include "jit/convert_options.h"

#include <c10/util/Exception.h>

namespace torch_mp::jit {

void checkLowDtype(c10::ScalarType lowDtype) {
  TORCH_CHECK_VALUE(
      lowDtype == c10::ScalarType::Half || lowDtype == c10::ScalarType::BFloat16,
      "torch_mp: the low-precision dtype must be float16 or bfloat16, got ", lowDtype);
}

ConvertOptions defaultOptions(
    c10::DeviceType device,
    c10::ScalarType lowDtype,
    const core::CpuFeatures& cpu,
    std::optional<core::CudaCapability> gpu) {
  checkLowDtype(lowDtype);
  const core::Target target =
      core::targetFor(device == c10::DeviceType::CUDA, lowDtype == c10::ScalarType::Half);
  ConvertOptions options;
  options.lowDtype = lowDtype;
  options.policy = core::OpPolicy::defaults(target, cpu, gpu);
  return options;
}

} // namespace torch_mp::jit
