// The public C++ API of ahead-of-time conversion: torch_mp::jit::convertModule (a scripted or frozen module and example
// inputs in, a frozen mixed-precision module and its report out), its options and its one typed failure. With
// torch_mp/jit_pass.h (the load-time pass) and, in a CUDA build, cuda/cuda_graph_runner.h, the headers the package
// installs: they include Torch's, the contract's (the request and the report, contract/) and the core's vocabulary
// those name, and no other of torch_mp's.
#pragma once

#include <ATen/core/ivalue.h>
#include <c10/core/DeviceType.h>
#include <c10/core/ScalarType.h>
#include <c10/util/Exception.h>
#include <torch/csrc/jit/api/module.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "contract/conversion_report.h"
#include "contract/conversion_request.h"
#include "core/fast_kernels.h"
#include "core/numeric_limits.h"
#include "core/policy_vocabulary.h"

namespace torch_mp::jit {

using contract::ConversionReport;
using contract::NodeId;

// Which kernels a conversion may call (kernels=).
enum class Kernels {
  kPortable,  // only aten ops: the converted model loads in any libtorch
  kFused,     // also torch_mp::fused_pointwise (fuse_pointwise) and torch_mp::fused_channel_norm (fuse_normalization):
              // loading the model needs the torch_mp library
};

// What a per-node rule sees of a node.
struct NodeDescription {
  NodeId id = -1;      // the same in every plan made from one preparation
  std::string op;      // "aten::conv2d"
  std::string scope;   // module path, "layer1.0.conv1"
  std::string output;  // debug name of the first output (for people: programs go by `id`)
  // per input: the observed sizes and dtype of a tensor; nothing for other inputs
  std::vector<std::optional<std::vector<int64_t>>> inputShapes;
  std::vector<std::optional<c10::ScalarType>> inputDtypes;
  std::vector<std::pair<std::string, c10::IValue>> constants;  // schema argument name -> constant input value
};

using NodeOverride = core::NodeOverride;  // a rule's verdict on one node

// Nothing: the node is left to the op policy.
using NodeRule = std::function<std::optional<NodeOverride>(const NodeDescription&)>;

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

// The default options for the device the model runs on and the low-precision dtype; `cpu` on a CPU, and the
// capability of the GPU on CUDA (nullopt: not known, taken as fast), say whether the heavy ops have fast
// low-precision kernels there (core/fast_kernels).
ConvertOptions defaultOptions(
    c10::DeviceType device,
    core::LowDtype lowDtype,
    const core::CpuFeatures& cpu = core::CpuFeatures::host(),
    std::optional<core::CudaCapability> gpu = std::nullopt);

// The model itself failed on the example or calibration inputs (not the conversion): a c10::ValueError, raised in
// Python as torch_mp.ModelRunError (a ValueError).
class ModelRunError : public c10::ValueError {
 public:
  using c10::ValueError::ValueError;
};

struct ConvertedModule {
  torch::jit::Module module;
  ConversionReport report;
};

// Freezes a copy of a scripted module in eval mode (or of an already frozen one), prepares it on the example inputs
// (and on `calibrationInputs`, more forward inputs observed for value ranges only) and converts it. The module passed
// in is not modified. Throws ModelRunError when the model fails on its inputs.
ConvertedModule convertModule(
    const torch::jit::Module& module,
    const std::vector<c10::IValue>& exampleInputs,
    const ConvertOptions& options,
    const std::vector<std::vector<c10::IValue>>& calibrationInputs = {});

} // namespace torch_mp::jit
