#include "cuda/cuda_graph_runner.h"

#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/core/GradMode.h>
#include <c10/util/StringUtil.h>
#include <torch/csrc/inductor/aoti_package/model_package_loader.h>

#include <algorithm>
#include <stdexcept>
#include <string>

namespace torch_mp::cuda {
namespace {

// Why a graph cannot take these inputs, or "" where it can: a graph replays one recording, so every input is a tensor
// copied into a static buffer on the device of the capture.
std::string whyNotRecordable(const std::vector<c10::IValue>& inputs) {
  if (inputs.empty()) {
    return "forward needs at least one CUDA tensor";
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].isTensor() || !inputs[i].toTensor().is_cuda()) {
      return c10::str("input ", i, " is not a CUDA tensor; a CUDA graph replays one recording, so every input must "
                      "be a CUDA tensor copied into a static buffer");
    }
    const at::Tensor& tensor = inputs[i].toTensor();
    if (tensor.device() != inputs[0].toTensor().device()) {
      return c10::str("input ", i, " is on ", tensor.device(), ", input 0 on ", inputs[0].toTensor().device(),
                      "; a CUDA graph runs on one device");
    }
  }
  return "";
}

// Thrown by record where the forward cannot be captured (not where the model itself fails).
struct CaptureRefused : std::runtime_error {
  using std::runtime_error::runtime_error;
};

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
void runRefusingHostSynchronisation(const Forward& forward, const std::vector<c10::IValue>& stack) {
  try {
    HostSynchronisationRefused refused;
    forward(stack);
  } catch (const c10::Error& error) {
    throw CaptureRefused(c10::str(
        "torch_mp::cuda::CudaGraphRunner: the forward cannot be recorded as a CUDA graph because it synchronises "
        "with the host (item(), nonzero, shapes that depend on values). Call the module directly instead. CUDA said: ",
        error.what_without_backtrace()));
  }
}

} // namespace

CudaGraphRunner::CudaGraphRunner(Forward forward, CudaGraphOptions options)
    : forward_(std::move(forward)), options_(options), pool_(at::cuda::graph_pool_handle()) {
  TORCH_CHECK_VALUE(options_.warmup >= 1, "torch_mp::cuda::CudaGraphRunner: warmup must be at least 1, got ",
                    options_.warmup);
}

CudaGraphRunner::CudaGraphRunner(torch::jit::Module module, CudaGraphOptions options)
    : CudaGraphRunner(
          [module](const std::vector<c10::IValue>& inputs) mutable { return module.forward(inputs); }, options) {
  module.eval();
}

CudaGraphRunner CudaGraphRunner::forPackage(const std::string& path, CudaGraphOptions options) {
  // single-threaded: the package's calls run on the caller's stream, which the capture records; a pool of runners
  // would launch on streams of its own
  auto package = std::make_shared<torch::inductor::AOTIModelPackageLoader>(path, "model", /*run_single_threaded=*/true);
  return CudaGraphRunner(
      [package](const std::vector<c10::IValue>& inputs) -> c10::IValue {
        std::vector<at::Tensor> tensors;
        for (size_t i = 0; i < inputs.size(); ++i) {
          TORCH_CHECK_VALUE(inputs[i].isTensor(), "torch_mp::cuda::CudaGraphRunner: an AOTInductor package takes "
                            "tensors; input ", i, " is a ", inputs[i].tagKind());
          tensors.push_back(inputs[i].toTensor());
        }
        return c10::List<at::Tensor>(package->run(tensors));
      },
      options);
}

CudaGraphRunner::Recording CudaGraphRunner::record(const std::vector<at::Tensor>& inputs) {
  c10::NoGradGuard noGrad;
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
    // the first runs let the executor optimise the graph and cuBLAS / cuDNN pick their kernels, off the capture. At
    // least one plain run: an error there is the model's own (thrown as it is), an error of the next one is its
    // synchronisation.
    c10::cuda::CUDAStreamGuard onSide(side);
    at::cuda::CUDAEvent inputsReady;
    inputsReady.record(caller);
    inputsReady.block(side);
    for (int i = 0; i < std::max(options_.warmup - 1, 1); ++i) {
      forward_(stack);
    }
    runRefusingHostSynchronisation(forward_, stack);
    recording.graph = std::make_unique<at::cuda::CUDAGraph>();
    try {
      recording.graph->capture_begin(pool_);
      recording.staticOutputs = forward_(stack);
      recording.graph->capture_end();
    } catch (const c10::Error& error) {
      try {
        recording.graph->capture_end();  // leave the stream out of capture mode; the recording is unusable anyway
      } catch (const c10::Error&) {
      }
      throw CaptureRefused(c10::str("torch_mp::cuda::CudaGraphRunner: the forward cannot be recorded as a CUDA "
                                    "graph. CUDA said: ", error.what_without_backtrace()));
    }
  }
  caller.synchronize();
  side.synchronize();
  return recording;
}

c10::IValue CudaGraphRunner::forward(const std::vector<c10::IValue>& inputs) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto requiresGrad = [](const c10::IValue& input) {
    return input.isTensor() && input.toTensor().requires_grad();
  };
  if (c10::GradMode::is_enabled() && std::any_of(inputs.begin(), inputs.end(), requiresGrad)) {
    return forward_(inputs);  // a replay's outputs carry no autograd history
  }
  const std::string unrecordable = whyNotRecordable(inputs);
  if (!unrecordable.empty()) {
    TORCH_CHECK_VALUE(options_.fallBack, "torch_mp::cuda::CudaGraphRunner: ", unrecordable);
    return forward_(inputs);
  }
  std::vector<at::Tensor> tensors;
  Signature signature;
  for (const c10::IValue& input : inputs) {
    const at::Tensor& tensor = tensors.emplace_back(input.toTensor());
    std::vector<int64_t> key{static_cast<int64_t>(tensor.scalar_type()), tensor.device().index()};
    key.insert(key.end(), tensor.sizes().begin(), tensor.sizes().end());
    key.push_back(-1);
    key.insert(key.end(), tensor.strides().begin(), tensor.strides().end());
    signature.push_back(std::move(key));
  }
  auto it = recordings_.find(signature);
  if (it == recordings_.end()) {
    if (refused_.count(signature) > 0) {
      return forward_(inputs);
    }
    if (options_.maxSignatures > 0 && recordings_.size() >= options_.maxSignatures) {
      if (!warnedBound_) {
        warnedBound_ = true;
        TORCH_WARN("torch_mp::cuda::CudaGraphRunner: ", options_.maxSignatures, " input signatures have CUDA graphs "
                   "(maxSignatures); calls with other signatures run the module without one");
      }
      return forward_(inputs);
    }
    try {
      it = recordings_.emplace(signature, record(tensors)).first;
    } catch (const CaptureRefused& refusal) {
      TORCH_CHECK(options_.fallBack, refusal.what());
      refused_.insert(signature);
      if (!warnedRefusal_) {
        warnedRefusal_ = true;
        TORCH_WARN(refusal.what(), " The module runs without a CUDA graph for these inputs.");
      }
      return forward_(inputs);
    }
  }
  c10::NoGradGuard noGrad;
  c10::cuda::CUDAGuard deviceGuard(tensors[0].device());
  Recording& recording = it->second;
  for (size_t i = 0; i < tensors.size(); ++i) {
    recording.staticInputs[i].copy_(tensors[i]);
  }
  recording.graph->replay();
  return recording.staticOutputs.deepcopy();
}

} // namespace torch_mp::cuda
