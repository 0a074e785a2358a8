// Runs an AOTInductor package (torch_mp.aoti_compile, python -m torch_mp aoti) in C++ with libtorch alone: no
// torch_mp, no Python, no TorchScript.
//
//   aoti_example PACKAGE.pt2 INPUTS.pt OUTPUTS.pt
//
// INPUTS.pt holds a list of tensors (Python: torch.save([x, ...], "INPUTS.pt")), the program's flat inputs; the
// outputs are written to OUTPUTS.pt as a tuple of tensors (Python: torch.load("OUTPUTS.pt")). Prints each output's
// dtype and shape.
#include <torch/csrc/inductor/aoti_package/model_package_loader.h>
#include <torch/serialize.h>

#include <fstream>
#include <iostream>
#include <iterator>
#include <utility>
#include <vector>

int main(int argc, char** argv) {
  if (argc != 4) {
    std::cerr << "usage: aoti_example PACKAGE.pt2 INPUTS.pt OUTPUTS.pt\n";
    return 2;
  }
  std::ifstream file(argv[2], std::ios::binary);
  const std::vector<char> bytes((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  const c10::IValue loaded = torch::pickle_load(bytes);
  std::vector<at::Tensor> inputs;
  for (const c10::IValue& input : loaded.toListRef()) {
    inputs.push_back(input.toTensor());
  }
  c10::InferenceMode inference;
  torch::inductor::AOTIModelPackageLoader loader(argv[1]);
  const std::vector<at::Tensor> outputs = loader.run(inputs);
  std::vector<c10::IValue> saved;  // a tuple: what torch.load reads with weights_only
  for (const at::Tensor& output : outputs) {
    std::cout << output.scalar_type() << " " << output.sizes() << "\n";
    saved.emplace_back(output);
  }
  const std::vector<char> written = torch::pickle_save(c10::ivalue::Tuple::create(std::move(saved)));
  std::ofstream(argv[3], std::ios::binary).write(written.data(), static_cast<std::streamsize>(written.size()));
  return 0;
}
