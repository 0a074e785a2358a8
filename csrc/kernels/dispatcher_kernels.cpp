#include "kernels/dispatcher_kernels.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/DispatchKey.h>
#include <c10/core/TensorOptions.h>

#include <optional>

namespace torch_mp::kernels {

bool hasKernelFor(const c10::OperatorName& op, c10::DeviceType device) {
  const std::optional<c10::OperatorHandle> handle = c10::Dispatcher::singleton().findOp(op);
  if (!handle) {
    return false;
  }
  c10::DispatchKey key;
  try {
    // the dispatch key of a dense tensor on such a device (CPU -> CPU, CUDA -> CUDA)
    key = c10::computeDispatchKey(std::nullopt, std::nullopt, c10::Device(device));
  } catch (const c10::Error&) {
    return false;  // a device type without dense tensors
  }
  return handle->hasKernelForDispatchKey(key);
}

} // namespace torch_mp::kernels
