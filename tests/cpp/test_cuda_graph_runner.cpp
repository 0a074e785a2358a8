// torch_mp::cuda::CudaGraphRunner on a GPU (CUDA builds; skipped where none is visible): replays equal the module's
// own calls bit for bit and are copies; past maxSignatures, for non-tensor inputs and for a forward that synchronises
// with the host it calls the module (one warning); the model's own errors are thrown as they are. A forward callable
// and an AOTInductor package (the package's test takes it from TORCH_MP_TEST_CUDA_PACKAGE, which
// tests/python/test_cuda_package_graphs.py sets) replay the same way.
#ifdef TORCH_MP_WITH_CUDA
#include <gtest/gtest.h>
#include <torch/csrc/inductor/aoti_package/model_package_loader.h>
#include <torch/torch.h>

#include <cstdlib>

#include <string>
#include <vector>

#include "cuda/cuda_graph_runner.h"

namespace torch_mp::cuda {
namespace {

torch::jit::Module scriptModule(const std::string& forward) {
  torch::jit::Module module("m");
  module.define(forward);
  return module;
}

// The warnings raised while it lives.
class CapturedWarnings : public c10::WarningHandler {
 public:
  CapturedWarnings() : guard_(this) {}
  void process(const c10::Warning& warning) override {
    messages.push_back(warning.msg());
  }
  std::vector<std::string> messages;

 private:
  c10::WarningUtils::WarningHandlerGuard guard_;
};

class CudaGraphRunnerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!torch::cuda::is_available()) {
      GTEST_SKIP() << "no CUDA GPU";
    }
  }
};

const char* const kAffine = "def forward(self, x):\n  return torch.relu(x * 2.0 + 1.0)\n";
const char* const kSyncs = "def forward(self, x):\n  if bool(x.sum() > 0):\n    return x * 2.0\n  return x\n";

TEST_F(CudaGraphRunnerTest, ReplaysEqualTheModuleAndReturnCopies) {
  torch::jit::Module module = scriptModule(kAffine);
  CudaGraphRunner runner(module);
  const at::Tensor x = torch::randn({4, 8}, torch::kCUDA);
  const at::Tensor first = runner.forward({x}).toTensor();
  EXPECT_TRUE(torch::equal(first, module.forward({x}).toTensor()));
  const at::Tensor second = runner.forward({torch::randn({4, 8}, torch::kCUDA)}).toTensor();
  EXPECT_FALSE(torch::equal(first, second));
  EXPECT_TRUE(torch::equal(first, module.forward({x}).toTensor()));  // not the buffer the second replay wrote
  EXPECT_EQ(runner.recordedSignatures(), 1u);
}

TEST_F(CudaGraphRunnerTest, SignaturesPastTheBoundRunTheModuleWithOneWarning) {
  torch::jit::Module module = scriptModule(kAffine);
  CudaGraphRunner runner(module, {.maxSignatures = 2});
  CapturedWarnings warnings;
  for (int64_t batch : {1, 2, 3, 4, 1}) {
    const at::Tensor x = torch::randn({batch, 8}, torch::kCUDA);
    EXPECT_TRUE(torch::equal(runner.forward({x}).toTensor(), module.forward({x}).toTensor())) << batch;
  }
  EXPECT_EQ(runner.recordedSignatures(), 2u);
  ASSERT_EQ(warnings.messages.size(), 1u);
  EXPECT_NE(warnings.messages[0].find("maxSignatures"), std::string::npos) << warnings.messages[0];
}

TEST_F(CudaGraphRunnerTest, AForwardThatSynchronisesRunsTheModuleWithOneWarning) {
  CudaGraphRunner runner(scriptModule(kSyncs));
  CapturedWarnings warnings;
  const at::Tensor x = torch::rand({16}, torch::kCUDA);
  EXPECT_TRUE(torch::equal(runner.forward({x}).toTensor(), x * 2.0));
  EXPECT_TRUE(torch::equal(runner.forward({-x}).toTensor(), -x));
  EXPECT_EQ(runner.recordedSignatures(), 0u);
  EXPECT_EQ(runner.refusedSignatures(), 1u);
  ASSERT_EQ(warnings.messages.size(), 1u);
  EXPECT_NE(warnings.messages[0].find("synchronises with the host"), std::string::npos) << warnings.messages[0];
}

TEST_F(CudaGraphRunnerTest, WithoutFallBackARefusalThrows) {
  CudaGraphRunner runner(scriptModule(kSyncs), {.fallBack = false});
  EXPECT_THROW(runner.forward({torch::rand({16}, torch::kCUDA)}), c10::Error);
  EXPECT_THROW(runner.forward({torch::rand({16})}), c10::ValueError);
}

TEST_F(CudaGraphRunnerTest, NonTensorInputsRunTheModule) {
  torch::jit::Module module = scriptModule("def forward(self, x, scale: float):\n  return x * scale\n");
  CudaGraphRunner runner(module);
  const at::Tensor x = torch::randn({4}, torch::kCUDA);
  EXPECT_TRUE(torch::equal(runner.forward({x, 3.0}).toTensor(), x * 3.0));
  EXPECT_EQ(runner.recordedSignatures(), 0u);
}

TEST_F(CudaGraphRunnerTest, TheModelsOwnErrorIsThrownAsItIs) {
  CudaGraphRunner runner(scriptModule("def forward(self, x):\n  return torch.mm(x, x)\n"));
  CapturedWarnings warnings;
  try {
    runner.forward({torch::randn({2, 3}, torch::kCUDA)});
    FAIL() << "a 2x3 matrix times itself must fail";
  } catch (const std::exception& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("mat1 and mat2 shapes cannot be multiplied"), std::string::npos) << message;
    EXPECT_EQ(message.find("cannot be recorded"), std::string::npos) << message;
  }
  EXPECT_EQ(runner.recordedSignatures() + runner.refusedSignatures(), 0u);
  EXPECT_TRUE(warnings.messages.empty());
}

TEST_F(CudaGraphRunnerTest, AForwardCallableIsRecordedOncePerSignature) {
  torch::jit::Module module = scriptModule(kAffine);
  int calls = 0;
  CudaGraphRunner runner([&](const std::vector<c10::IValue>& inputs) {
    ++calls;
    return module.forward(inputs);
  });
  const at::Tensor x = torch::randn({4, 8}, torch::kCUDA);
  EXPECT_TRUE(torch::equal(runner.forward({x}).toTensor(), module.forward({x}).toTensor()));
  const int recorded = calls;  // the warm-up runs, the synchronisation check, the capture
  EXPECT_TRUE(torch::equal(runner.forward({x * 3.0}).toTensor(), module.forward({x * 3.0}).toTensor()));
  EXPECT_EQ(calls, recorded);  // replayed, not called
  EXPECT_EQ(runner.recordedSignatures(), 1u);
}

TEST_F(CudaGraphRunnerTest, APackageReplaysEqualItsOwnCalls) {
  const char* path = std::getenv("TORCH_MP_TEST_CUDA_PACKAGE");
  if (path == nullptr) {
    GTEST_SKIP() << "TORCH_MP_TEST_CUDA_PACKAGE names no package (tests/python/test_cuda_package_graphs.py sets it)";
  }
  torch::inductor::AOTIModelPackageLoader plain(path);
  auto runner = CudaGraphRunner::forPackage(path);
  for (int round = 0; round < 3; ++round) {
    const at::Tensor x = torch::randn({2, 16}, torch::kCUDA);
    const std::vector<at::Tensor> expected = plain.run({x});
    const c10::List<at::Tensor> replayed = runner.forward({x}).toTensorList();
    ASSERT_EQ(replayed.size(), expected.size());
    for (size_t i = 0; i < expected.size(); ++i) {
      EXPECT_TRUE(torch::equal(replayed[i], expected[i])) << "round " << round << ", output " << i;
    }
  }
  EXPECT_EQ(runner.recordedSignatures(), 1u);
  EXPECT_THROW(runner.forward({torch::randn({2, 16}, torch::kCUDA), 1.0}), c10::ValueError);  // a package takes tensors
}

} // namespace
} // namespace torch_mp::cuda
#endif
