#include "cuda/cuda_graph_runner.h"

#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/core/GradMode.h>

namespace torch_mp::cuda {
namespace {

std::vector<at::Tensor> cudaTensorInputs(const std::vector<c10::IValue>& inputs) {
  std::vector<at::Tensor> tensors;
  for (size_t i = 0; i < inputs.size(); ++i) {
    TORCH_CHECK_VALUE(inputs[i].isTensor() && inputs[i].toTensor().is_cuda(),
                      "torch_mp::cuda::CudaGraphRunner: input ", i, " is not a CUDA tensor; a CUDA graph replays "
                      "one recording, so every input must be a CUDA tensor copied into a static buffer");
    tensors.push_back(inputs[i].toTensor());
  }
  TORCH_CHECK_VALUE(!tensors.empty(), "torch_mp::cuda::CudaGraphRunner: forward needs at least one CUDA tensor");
  return tensors;
}

// Host synchronisation made an error while it lives; the previous mode comes back however the scope ends.
class HostSynchronisationRefused {
 public:
  HostSynchronisationRefused() : previous_(c10::cuda::warning_state().get_sync_debug_mode()) {
    c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_ERROR);
  }
  ~HostSynchronisationRefused() {
    c10::cuda::warning_state().set_sync_debug_mode(previous_);
  }
  HostSynchronisationRefused(const HostSynchronisationRefused&) = delete;
  HostSynchronisationRefused& operator=(const HostSynchronisationRefused&) = delete;

 private:
  c10::cuda::SyncDebugMode previous_;
};

// Runs the forward with host synchronisation made an error, so that a forward that cannot be captured is refused
// before a capture fails on it: a failed capture leaves CUDA's random generators in capture mode for the process.
void runRefusingHostSynchronisation(torch::jit::Module& module, std::vector<c10::IValue> stack) {
  try {
    HostSynchronisationRefused refused;
    module.forward(std::move(stack));
  } catch (const c10::Error& error) {
    TORCH_CHECK(false, "torch_mp::cuda::CudaGraphRunner: the forward cannot be recorded as a CUDA graph because it "
                "synchronises with the host (item(), nonzero, shapes that depend on values). Call the module directly "
                "instead. CUDA said: ", error.what_without_backtrace());
  }
}

} // namespace

CudaGraphRunner::CudaGraphRunner(torch::jit::Module module, int warmup)
    : module_(std::move(module)), warmup_(warmup), pool_(at::cuda::graph_pool_handle()) {
  TORCH_CHECK_VALUE(warmup_ >= 1, "torch_mp::cuda::CudaGraphRunner: warmup must be at least 1, got ", warmup_);
  module_.eval();
}

CudaGraphRunner::Recording CudaGraphRunner::record(const std::vector<at::Tensor>& inputs) {
  Recording recording;
  std::vector<c10::IValue> stack;
  for (const at::Tensor& input : inputs) {
    recording.staticInputs.push_back(input.clone());
    stack.emplace_back(recording.staticInputs.back());
  }
  const c10::Device device = inputs[0].device();
  c10::cuda::CUDAGuard deviceGuard(device);
  c10::cuda::CUDAStream side = c10::cuda::getStreamFromPool(false, device.index());
  c10::cuda::CUDAStream caller = c10::cuda::getCurrentCUDAStream(device.index());
  {
    // the first runs let the executor optimise the graph and cuBLAS / cuDNN pick their kernels, off the capture
    c10::cuda::CUDAStreamGuard onSide(side);
    at::cuda::CUDAEvent inputsReady;
    inputsReady.record(caller);
    inputsReady.block(side);
    for (int i = 0; i + 1 < warmup_; ++i) {
      module_.forward(stack);
    }
    runRefusingHostSynchronisation(module_, stack);
    recording.graph = std::make_unique<at::cuda::CUDAGraph>();
    try {
      recording.graph->capture_begin(pool_);
      recording.staticOutputs = module_.forward(stack);
      recording.graph->capture_end();
    } catch (const c10::Error& error) {
      try {
        recording.graph->capture_end();  // leave the stream out of capture mode; the recording is unusable anyway
      } catch (const c10::Error&) {
      }
      TORCH_CHECK(false, "torch_mp::cuda::CudaGraphRunner: the forward cannot be recorded as a CUDA graph. CUDA "
                  "said: ", error.what_without_backtrace());
    }
  }
  caller.synchronize();
  side.synchronize();
  return recording;
}

c10::IValue CudaGraphRunner::forward(const std::vector<c10::IValue>& inputs) {
  c10::NoGradGuard noGrad;
  const std::vector<at::Tensor> tensors = cudaTensorInputs(inputs);
  Signature signature;
  for (const at::Tensor& tensor : tensors) {
    std::vector<int64_t> key{static_cast<int64_t>(tensor.scalar_type()), tensor.device().index()};
    key.insert(key.end(), tensor.sizes().begin(), tensor.sizes().end());
    key.push_back(-1);
    key.insert(key.end(), tensor.strides().begin(), tensor.strides().end());
    signature.push_back(std::move(key));
  }
  auto it = recordings_.find(signature);
  if (it == recordings_.end()) {
    it = recordings_.emplace(signature, record(tensors)).first;
  }
  Recording& recording = it->second;
  for (size_t i = 0; i < tensors.size(); ++i) {
    recording.staticInputs[i].copy_(tensors[i]);
  }
  recording.graph->replay();
  return recording.staticOutputs.deepcopy();
}

} // namespace torch_mp::cuda
