#include "jit/convert_options.h"

#include <c10/util/Exception.h>

namespace torch_mp::jit {

c10::ScalarType scalarTypeOf(core::LowDtype lowDtype) {
  switch (lowDtype) {
    case core::LowDtype::kFloat16:
      return c10::ScalarType::Half;
    case core::LowDtype::kBFloat16:
      return c10::ScalarType::BFloat16;
  }
  TORCH_INTERNAL_ASSERT(false, "torch_mp: a LowDtype out of its enum");
}

ConvertOptions defaultOptions(
    c10::DeviceType device,
    core::LowDtype lowDtype,
    const core::CpuFeatures& cpu,
    std::optional<core::CudaCapability> gpu) {
  const core::Target target =
      core::targetFor(device == c10::DeviceType::CUDA, lowDtype == core::LowDtype::kFloat16);
  ConvertOptions options;
  options.request.lowDtype = lowDtype;
  options.request.policy = core::OpPolicy::defaults(target, cpu, gpu);
  return options;
}

} // namespace torch_mp::jit
