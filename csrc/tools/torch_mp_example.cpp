// A C++ user of torch_mp.
//
//   torch_mp_example run MODEL.pt SHAPE...          loads a (converted) TorchScript file with torch::jit::load and
//                                                   runs it on torch::randn(SHAPE) after torch::manual_seed(0);
//                                                   prints each output tensor's dtype, shape and sum
//   torch_mp_example convert IN.pt OUT.pt DTYPE SHAPE...
//                                                   converts a scripted eval-mode or frozen model in C++ (fp16 or
//                                                   bf16, CPU policy) and saves it; prints the report as JSON
#include <torch/script.h>

#include <iostream>
#include <string>
#include <vector>

#include "jit/pipeline.h"

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
  const c10::ScalarType low = dtype == "bf16" ? c10::ScalarType::BFloat16 : c10::ScalarType::Half;
  torch::manual_seed(0);
  torch_mp::jit::ConvertedModule converted = torch_mp::jit::convertModule(
      module, {torch::randn(shape)}, torch_mp::jit::defaultOptions(c10::DeviceType::CPU, low));
  converted.module.save(out);
  std::cout << converted.report.toJson() << "\n";
  return 0;
}

} // namespace

int main(int argc, char** argv) {
  const std::string usage =
      "usage: torch_mp_example run MODEL.pt SHAPE... | torch_mp_example convert IN.pt OUT.pt fp16|bf16 SHAPE...";
  try {
    const std::string command = argc > 1 ? argv[1] : "";
    if (command == "run" && argc >= 4) {
      return run(argv[2], parseShape(argc, argv, 3));
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
