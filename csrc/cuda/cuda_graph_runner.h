// CUDA-graph replay of a TorchScript module's forward, for C++ servers: one launch per call instead of one per op,
// which is most of the time at batch 1. The C++ twin of torch_mp.cuda_graphs (Python).
//
//   torch_mp::cuda::CudaGraphRunner runner(torch::jit::load("model_fp16.pt"));
//   at::Tensor y = runner.forward({x}).toTensor();   // records a graph for x's signature once, then replays it
//
// Inputs are CUDA tensors (other values are not supported: a graph records one set of them). Each input signature
// (sizes, strides, dtype, device per tensor) gets its own graph with static input buffers; all graphs share one
// memory pool. forward copies the inputs in, replays, and returns deep copies of the outputs. A forward that
// synchronises with the host cannot be recorded: forward then throws a c10::Error saying so. Not thread-safe: one
// runner per thread, or a lock around forward. Built only with CUDA (TORCH_MP_WITH_CUDA).
#pragma once

#include <ATen/cuda/CUDAGraph.h>
#include <torch/csrc/jit/api/module.h>

#include <map>
#include <memory>
#include <vector>

namespace torch_mp::cuda {

class CudaGraphRunner {
 public:
  explicit CudaGraphRunner(torch::jit::Module module, int warmup = 3);

  c10::IValue forward(const std::vector<c10::IValue>& inputs);

  // How many input signatures have a graph.
  size_t recordedSignatures() const {
    return recordings_.size();
  }

 private:
  struct Recording {
    std::unique_ptr<at::cuda::CUDAGraph> graph;
    std::vector<at::Tensor> staticInputs;
    c10::IValue staticOutputs;
  };
  using Signature = std::vector<std::vector<int64_t>>;  // per input: dtype, device index, sizes, strides

  Recording record(const std::vector<at::Tensor>& inputs);

  torch::jit::Module module_;
  int warmup_;
  at::cuda::MempoolId_t pool_;
  std::map<Signature, Recording> recordings_;
};

} // namespace torch_mp::cuda
