// A C++ user of torch_mp.
//
//   torch_mp_example run MODEL.pt SHAPE...          loads a (converted) TorchScript file with torch::jit::load and
//                                                   runs it on torch::randn(SHAPE) after torch::manual_seed(0);
//                                                   prints each output tensor's dtype, shape and sum
//   torch_mp_example convert IN.pt OUT.pt DTYPE SHAPE...
//                                                   converts a scripted eval-mode or frozen model in C++ (fp16 or
//                                                   bf16, CPU policy) and saves it; prints the report's summary as
//                                                   "key: value" lines
//   torch_mp_example run-mixed MODEL.pt fp16|bf16 SHAPE...
//                                                   loads a frozen fp32 file, enables the load-time pass
//                                                   (torch_mp/jit_pass.h) and runs the model on the same input
//                                                   with and without it; prints the output dtype, the low-precision
//                                                   nodes of the converted graph and the largest difference
//   torch_mp_example graphs MODEL.pt SHAPE...       (CUDA builds) runs the model on a CUDA input plainly and through
//                                                   torch_mp::cuda::CudaGraphRunner (default options: a model it
//                                                   cannot record runs plainly, with a warning); prints the median
//                                                   time of each, the largest difference between their outputs and
//                                                   the runner's recorded and refused signatures
#include <torch/script.h>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <string>
#include <vector>

#include "torch_mp/convert.h"
#include "torch_mp/jit_pass.h"
#ifdef TORCH_MP_WITH_CUDA
#include <c10/cuda/CUDAFunctions.h>

#include "cuda/cuda_graph_runner.h"
#endif

namespace {

std::vector<int64_t> parseShape(int argc, char** argv, int first) {
  std::vector<int64_t> shape;
  for (int i = first; i < argc; ++i) {
    shape.push_back(std::stoll(argv[i]));
  }
  return shape;
}

void printOutputs(const c10::IValue& value) {
  if (value.isTensor()) {
    const at::Tensor& tensor = value.toTensor();
    std::cout << "output dtype=" << tensor.scalar_type() << " shape=" << tensor.sizes()
              << " sum=" << tensor.to(at::kDouble).sum().item<double>() << "\n";
  } else if (value.isTuple()) {
    for (const c10::IValue& element : value.toTupleRef().elements()) {
      printOutputs(element);
    }
  } else if (value.isList()) {
    for (const c10::IValue& element : value.toListRef()) {
      printOutputs(element);
    }
  }
}

int run(const std::string& path, const std::vector<int64_t>& shape) {
  torch::jit::Module module = torch::jit::load(path);
  torch::manual_seed(0);
  torch::NoGradGuard noGrad;
  printOutputs(module.forward({torch::randn(shape)}));
  return 0;
}

int convert(const std::string& in, const std::string& out, const std::string& dtype, const std::vector<int64_t>& shape) {
  torch::jit::Module module = torch::jit::load(in);
  module.eval();
  const torch_mp::core::LowDtype low =
      dtype == "bf16" ? torch_mp::core::LowDtype::kBFloat16 : torch_mp::core::LowDtype::kFloat16;
  torch::manual_seed(0);
  torch_mp::jit::ConvertedModule converted = torch_mp::jit::convertModule(
      module, {torch::randn(shape)}, torch_mp::jit::defaultOptions(c10::DeviceType::CPU, low));
  converted.module.save(out);
  const torch_mp::jit::ConversionReport& report = converted.report;
  std::cout << "dtype: " << report.dtype << "\npolicy: " << report.policy
            << "\nlow-precision nodes: " << report.lowPrecisionNodes() << "\nnodes: " << report.nodes.size()
            << "\ncasts: " << report.casts.size() << "\ncast bytes: " << report.castBytes
            << "\nweight bytes before: " << report.weightBytesBefore
            << "\nweight bytes after: " << report.weightBytesAfter << "\nseconds: " << report.seconds << "\n";
  return 0;
}

// The first call of a loaded module profiles it; the executor optimizes for the second, where the pass has the graph
// record its inputs, and again for the third, which the pass converts on what was recorded.
at::Tensor runProfiled(torch::jit::Module& module, const at::Tensor& input) {
  torch::NoGradGuard noGrad;
  module.forward({input});
  module.forward({input});
  const c10::IValue output = module.forward({input});
  TORCH_CHECK(output.isTensor(), "torch_mp_example run-mixed: the model must return one tensor");
  return output.toTensor();
}

int runMixed(const std::string& path, const std::string& dtype, const std::vector<int64_t>& shape) {
  TORCH_CHECK(dtype == "fp16" || dtype == "bf16", "torch_mp_example run-mixed: dtype must be fp16 or bf16");
  torch::manual_seed(0);
  const at::Tensor input = torch::randn(shape);
  torch::jit::Module fp32 = torch::jit::load(path);
  const at::Tensor reference = runProfiled(fp32, input);

  const torch_mp::core::LowDtype low =
      dtype == "bf16" ? torch_mp::core::LowDtype::kBFloat16 : torch_mp::core::LowDtype::kFloat16;
  torch_mp::jit::enableMixedPrecisionPass({.conversion = {.request = {.lowDtype = low}}});
  torch::jit::Module model = torch::jit::load(path);
  const at::Tensor output = runProfiled(model, input);
  torch_mp::jit::disableMixedPrecisionPass();

  const torch_mp::jit::PassActivity activity = torch_mp::jit::mixedPrecisionPassActivity();
  std::cout << "pass: " << torch_mp::jit::toString(activity.lastOutcome) << "\n";
  std::cout << "output dtype=" << output.scalar_type() << " shape=" << output.sizes() << "\n";
  std::cout << "low-precision nodes: " << (activity.lastReport ? activity.lastReport->lowPrecisionNodes() : 0)
            << ", casts: " << (activity.lastReport ? activity.lastReport->casts.size() : 0) << "\n";
  std::cout << "max difference against fp32: "
            << (output.to(at::kDouble) - reference.to(at::kDouble)).abs().max().item<double>() << "\n";
  return 0;
}

#ifdef TORCH_MP_WITH_CUDA
// Median milliseconds of `call` over 50 runs after 5 warm-up runs, the device synchronised around each.
template <typename Call>
double medianMilliseconds(const Call& call) {
  std::vector<double> times;
  for (int i = 0; i < 55; ++i) {
    c10::cuda::device_synchronize();
    const auto start = std::chrono::steady_clock::now();
    call();
    c10::cuda::device_synchronize();
    if (i >= 5) {
      times.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
    }
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

int graphs(const std::string& path, const std::vector<int64_t>& shape) {
  torch::jit::Module module = torch::jit::load(path, c10::Device(c10::kCUDA));
  torch::manual_seed(0);
  const at::Tensor input = torch::randn(shape, torch::kCUDA);
  torch::NoGradGuard noGrad;
  torch_mp::cuda::CudaGraphRunner runner(module);
  const c10::IValue plain = module.forward({input});
  const c10::IValue replayed = runner.forward({input});
  TORCH_CHECK(plain.isTensor() && replayed.isTensor(), "torch_mp_example graphs: the model must return one tensor");
  const double difference =
      (plain.toTensor().to(at::kDouble) - replayed.toTensor().to(at::kDouble)).abs().max().item<double>();
  std::cout << "plain " << medianMilliseconds([&] { module.forward({input}); }) << " ms, cuda graph "
            << medianMilliseconds([&] { runner.forward({input}); }) << " ms, max difference " << difference
            << ", signatures recorded " << runner.recordedSignatures() << " refused " << runner.refusedSignatures()
            << "\n";
  return 0;
}
#endif

} // namespace

int main(int argc, char** argv) {
  const std::string usage =
      "usage: torch_mp_example run MODEL.pt SHAPE... | torch_mp_example convert IN.pt OUT.pt fp16|bf16 SHAPE... | "
      "torch_mp_example run-mixed MODEL.pt fp16|bf16 SHAPE... | torch_mp_example graphs MODEL.pt SHAPE... (CUDA builds)";
  try {
    const std::string command = argc > 1 ? argv[1] : "";
    if (command == "run" && argc >= 4) {
      return run(argv[2], parseShape(argc, argv, 3));
    }
#ifdef TORCH_MP_WITH_CUDA
    if (command == "graphs" && argc >= 4) {
      return graphs(argv[2], parseShape(argc, argv, 3));
    }
#endif
    if (command == "run-mixed" && argc >= 5) {
      return runMixed(argv[2], argv[3], parseShape(argc, argv, 4));
    }
    if (command == "convert" && argc >= 6) {
      return convert(argv[2], argv[3], argv[4], parseShape(argc, argv, 5));
    }
    std::cerr << usage << "\n";
    return 2;
  } catch (const std::exception& error) {
    std::cerr << "torch_mp_example: " << error.what() << "\n";
    return 1;
  }
}
