// Uses both public headers of the installed package: converts a scripted conv net ahead of time, and runs it
// through the load-time pass. Exits 0 only if both give fp32 outputs computed in the low dtype.
#include <torch/script.h>
#include <torch_mp/convert.h>
#include <torch_mp/jit_pass.h>

#include <iostream>

int main() {
  torch::jit::Module module("Net");
  module.register_parameter("weight", torch::randn({4, 3, 3, 3}), /*is_buffer=*/false);
  module.define(R"(
    def forward(self, x):
        return torch.relu(torch.conv2d(x, self.weight)).sum(dim=1)
  )");
  module.eval();
  const at::Tensor x = torch::randn({1, 3, 8, 8});
  torch::NoGradGuard noGrad;
  const at::Tensor expected = module.forward({x}).toTensor();

  torch_mp::jit::ConvertedModule converted = torch_mp::jit::convertModule(
      module, {x}, torch_mp::jit::defaultOptions(c10::DeviceType::CPU, at::kBFloat16));
  const at::Tensor ahead = converted.module.forward({x}).toTensor();

  torch_mp::jit::enableMixedPrecisionPass({.dtype = at::kBFloat16});
  torch::jit::Module frozen = torch::jit::freeze(module);
  frozen.forward({x});  // profiles
  frozen.forward({x});  // records its inputs to calibrate on
  const at::Tensor atLoad = frozen.forward({x}).toTensor();
  const torch_mp::jit::PassActivity activity = torch_mp::jit::mixedPrecisionPassActivity();

  const bool ok = ahead.scalar_type() == at::kFloat && atLoad.scalar_type() == at::kFloat &&
      converted.report.lowPrecisionNodes() > 0 && activity.converted == 1 && torch::allclose(ahead, expected, 0, 0.1) &&
      torch::allclose(atLoad, expected, 0, 0.1);
  std::cout << "convertModule: " << converted.report.lowPrecisionNodes() << " low-precision nodes; pass: "
            << torch_mp::jit::toString(activity.lastOutcome) << "; " << (ok ? "ok" : "FAILED") << "\n";
  return ok ? 0 : 1;
}
