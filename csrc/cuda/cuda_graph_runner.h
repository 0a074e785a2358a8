// CUDA-graph replay of a TorchScript module's forward or an AOTInductor package's, for C++ servers: one launch per
// call instead of one per op, which is most of the time at batch 1 (AOTInductor has no CUDA graphs of its own). The
// C++ twin of the wrapper torch_mp.load returns on a GPU (Python: torch_mp/cuda_graphs.py, GraphsBySignature).
//
//   torch_mp::cuda::CudaGraphRunner runner(torch::jit::load("model_fp16.pt", torch::kCUDA));
//   at::Tensor y = runner.forward({x}).toTensor();   // records a graph for x's signature once, then replays it
//
//   auto package = torch_mp::cuda::CudaGraphRunner::forPackage("model.pt2");   // torch_mp.aoti_compile's, for CUDA
//   at::Tensor y = package.forward({x}).toTensorList()[0];                     // the package's outputs, as a list
//
// Each input signature (sizes, strides, dtype, device per tensor) gets its own graph with static input buffers; all
// graphs share one memory pool. forward copies the inputs in, replays, and returns deep copies of the outputs. At most
// maxSignatures signatures get a graph; with fallBack (the default) forward calls the module itself for the others,
// for inputs a graph cannot take (a value that is not a tensor, a tensor off the GPU or on another GPU than the
// first) and for signatures whose capture failed (the forward synchronises with the host), which it remembers and
// warns about once; without fallBack those throw a c10::Error. Inputs that require grad, with grad mode on, always
// get a plain call (a replay's outputs carry no autograd history). An error of the model itself (a wrong input
// shape) is thrown as the module threw it: the first run of a new signature is a plain one. A mutex serialises
// forward, so one runner may serve several threads (its calls do not overlap). Built only with CUDA
// (TORCH_MP_WITH_CUDA).
#pragma once

#include <ATen/cuda/CUDAGraph.h>
#include <torch/csrc/jit/api/module.h>

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

namespace torch_mp::cuda {

struct CudaGraphOptions {
  int warmup = 3;  // plain runs before a capture (the executor optimises, cuBLAS / cuDNN pick kernels); at least 1
  // Input signatures recorded at most; 0: no bound. 8 holds the batch sizes a server pads to (1, 2, 4, ..., 128)
  // while bounding the memory and recording time spent when shapes vary freely (torch_mp.load's default too).
  size_t maxSignatures = 8;
  bool fallBack = true;  // call the module where a graph cannot be recorded, instead of throwing
};

// What a runner records and replays: the model's forward, from inputs to outputs.
using Forward = std::function<c10::IValue(const std::vector<c10::IValue>&)>;

class CudaGraphRunner {
 public:
  explicit CudaGraphRunner(torch::jit::Module module, CudaGraphOptions options = {});
  // An AOTInductor package (a .pt2 of CUDA code), loaded to run single-threaded on the caller's stream, as a capture
  // needs; its inputs are tensors, its outputs a list of tensors.
  static CudaGraphRunner forPackage(const std::string& path, CudaGraphOptions options = {});
  CudaGraphRunner(Forward forward, CudaGraphOptions options = {});

  c10::IValue forward(const std::vector<c10::IValue>& inputs);

  // How many input signatures have a graph.
  size_t recordedSignatures() const {
    return recordings_.size();
  }
  // How many input signatures could not be recorded (with fallBack, they run the module itself).
  size_t refusedSignatures() const {
    return refused_.size();
  }

 private:
  struct Recording {
    std::unique_ptr<at::cuda::CUDAGraph> graph;
    std::vector<at::Tensor> staticInputs;
    c10::IValue staticOutputs;
  };
  using Signature = std::vector<std::vector<int64_t>>;  // per input: dtype, device index, sizes, strides

  Recording record(const std::vector<at::Tensor>& inputs);

  Forward forward_;
  CudaGraphOptions options_;
  at::cuda::MempoolId_t pool_;
  std::map<Signature, Recording> recordings_;
  std::set<Signature> refused_;
  bool warnedRefusal_ = false;
  bool warnedBound_ = false;
  std::mutex mutex_;
};

} // namespace torch_mp::cuda
