// What a TorchScript conversion is asked to do: ConvertOptions, one type from the Python API (torch_mp's options,
// bound once) and the load-time pass (JitPassOptions holds one) down to the stages, and the defaults for a device.
#pragma once

#include <c10/core/DeviceType.h>
#include <c10/core/ScalarType.h>

#include <optional>

#include "contract/conversion_request.h"
#include "core/fast_kernels.h"
#include "core/numeric_limits.h"
#include "jit/plan/graph_to_dataflow.h"

namespace torch_mp::jit {

// Which kernels a conversion may call (kernels=).
enum class Kernels {
  kPortable,  // only aten ops: the converted model loads in any libtorch
  kFused,     // also torch_mp::fused_pointwise (fuse_pointwise) and torch_mp::fused_channel_norm (fuse_normalization):
              // loading the model needs the torch_mp library
};

// TorchScript's conversion: the front-neutral request and run state (contract/conversion_request.h), the user's
// per-node rule as TorchScript describes a node, and the knobs only this front has.
struct ConvertOptions {
  contract::ConversionRequest request;
  contract::RunRequest run;
  // The user's per-node callables, asked after run.keepFp32 and the policy's exclusions, before the op table.
  NodeRule nodeRule;
  // Fold casts into the ops that read them (fuse_casts). Off: the casts the plan needs all stay (for comparison).
  bool fuseCasts = true;
  // kFused: chains of elementwise ops and casts (CPU tensors; CUDA tensors in a CUDA build) become
  // torch_mp::fused_pointwise calls; loading the model then needs the torch_mp library (`import torch_mp`, or
  // linking libtorch_mp).
  Kernels kernels = Kernels::kPortable;
  // CUDA convolutions: weights stored channels_last, activations NHWC between them (channels_last_convolutions).
  bool channelsLast = true;
  // CUDA conv (+bias) (+residual add) +relu chains become cuDNN fused convolutions (fuse_cudnn_convolutions): faster
  // than the unfused chain on an H200 (benchmarks/results/CUDA_SPEED.md, fp16).
  bool fuseConvolutions = true;
};

// The tensor dtype of a low dtype, for the passes that cast.
c10::ScalarType scalarTypeOf(core::LowDtype lowDtype);

// The default options for the device the model runs on and the low-precision dtype; `cpu` on a CPU, and the
// capability of the GPU on CUDA (nullopt: not known, taken as fast), say whether the heavy ops have fast
// low-precision kernels there (core/fast_kernels).
ConvertOptions defaultOptions(
    c10::DeviceType device,
    core::LowDtype lowDtype,
    const core::CpuFeatures& cpu = core::CpuFeatures::host(),
    std::optional<core::CudaCapability> gpu = std::nullopt);

} // namespace torch_mp::jit
