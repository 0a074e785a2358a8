// Whether the dispatcher holds a kernel of an op for dense tensors on a device type: what a pass asks before it emits
// an op (one of torch_mp's fused kernels, aten's mm.dtype) that the model must then be able to run there. A CPU-only
// build of torch_mp registers its kernels for the CPU alone; a CPU build of torch has no CUDA kernel of any op.
#pragma once

#include <ATen/core/operator_name.h>
#include <c10/core/DeviceType.h>

namespace torch_mp::kernels {

bool hasKernelFor(const c10::OperatorName& op, c10::DeviceType device);

} // namespace torch_mp::kernels
