// Containers of tensors a module keeps as attributes (state_containers): a cache dict its forward fills is planned
// like any container, what it already holds is cast with the plan, and a state not seen whole keeps fp32.
#include <gtest/gtest.h>
#include <torch/csrc/jit/api/module.h>
#include <torch/csrc/jit/testing/file_check.h>

#include "jit/pipeline.h"
#include "test_utils.h"

namespace torch_mp::jit {
namespace {

using torch::jit::Module;
using torch::jit::testing::FileCheck;

// timm LeViT's attention-bias cache: a tensor derived from a weight, computed on the first call per device.
constexpr const char* kCachedProduct = R"(
    def forward(self, x):
        key = str(x.device)
        if key not in self.cache:
            self.cache[key] = self.weight * 2.0
        return torch.matmul(x, self.cache[key])
)";

const c10::TypePtr kCacheType = c10::DictType::create(c10::StringType::get(), c10::TensorType::get());

// `alias`: the module holds its cache under a second name too.
Module cachingModule(const std::string& forward, bool alias = false) {
  Module module("Cached");
  const c10::impl::GenericDict cache(c10::StringType::get(), c10::TensorType::get());
  module.register_parameter("weight", torch::randn({64, 64}), /*is_buffer=*/false);
  module.register_attribute("cache", kCacheType, cache);
  if (alias) {
    module.register_attribute("alias", kCacheType, cache);
  }
  module.register_attribute("calls", c10::IntType::get(), 0);
  module.define(forward);
  return module;
}

c10::impl::GenericDict cacheOf(const Module& module) {
  return module.attr("cache").toGenericDict();
}

ConvertedModule convertBf16(const Module& module, const at::Tensor& x) {
  return convertModule(module, {x}, defaultOptions(c10::kCPU, core::LowDtype::kBFloat16, core::CpuFeatures::all()), {});
}

TEST(StateContainersTest, CacheDictFilledByTheGraphIsPlannedLowAndItsWeightStoredLow) {
  Module original = cachingModule(kCachedProduct);
  const at::Tensor x = torch::randn({8, 64});
  const at::Tensor expected = original.forward({x}).toTensor();
  original.attr("cache").toGenericDict().clear();

  ConvertedModule converted = convertBf16(original, x);
  const auto& graph = *converted.module.get_method("forward").graph();
  graph.lint();
  // the cached product is a bf16 constant, and what the cache returns goes to the matmul without a cast
  FileCheck()
      .check("BFloat16(64, 64")->check("aten::_set_item")->check("aten::__getitem__")->check_not("aten::to(")
      ->check("aten::matmul")->run(graph);
  EXPECT_EQ(converted.report.casts.size(), 2u);  // x in, the product out
  EXPECT_EQ(converted.report.weightBytesAfter * 2, converted.report.weightBytesBefore);
  // the conversion's own runs leave no entry behind, in the result or in the user's module
  EXPECT_EQ(cacheOf(converted.module).size(), 0u);
  EXPECT_EQ(cacheOf(original).size(), 0u);

  for (int call = 0; call < 2; ++call) {  // a miss that fills the cache, then a hit
    const at::Tensor actual = converted.module.forward({x}).toTensor();
    EXPECT_EQ(actual.scalar_type(), at::kFloat);
    EXPECT_LE((actual - expected).abs().max().item<double>(), 2e-2 * expected.abs().max().item<double>());
  }
  ASSERT_EQ(cacheOf(converted.module).size(), 1u);
  EXPECT_EQ(cacheOf(converted.module).at("cpu").toTensor().scalar_type(), at::kBFloat16);
  EXPECT_EQ(cacheOf(original).size(), 0u);
}

TEST(StateContainersTest, EntriesTheCacheAlreadyHoldsAreCastWithThePlan) {
  Module original = cachingModule(kCachedProduct);
  const at::Tensor x = torch::randn({8, 64});
  const at::Tensor expected = original.forward({x}).toTensor();  // fills the cache: the write is never reached
  ASSERT_EQ(cacheOf(original).at("cpu").toTensor().scalar_type(), at::kFloat);

  ConvertedModule converted = convertBf16(original, x);
  FileCheck().check("aten::__getitem__")->check_not("aten::to(")->check("aten::matmul")
      ->run(*converted.module.get_method("forward").graph());
  EXPECT_EQ(cacheOf(converted.module).at("cpu").toTensor().scalar_type(), at::kBFloat16);
  EXPECT_EQ(cacheOf(original).at("cpu").toTensor().scalar_type(), at::kFloat);
  const at::Tensor actual = converted.module.forward({x}).toTensor();
  EXPECT_LE((actual - expected).abs().max().item<double>(), 2e-2 * expected.abs().max().item<double>());
}

// One dict under two attribute names: the read and the write share one precision, and the result keeps one dict.
TEST(StateContainersTest, OneDictUnderTwoNamesHasOnePrecision) {
  Module original = cachingModule(R"(
    def forward(self, x):
        key = str(x.device)
        if key not in self.cache:
            self.alias[key] = self.weight * 2.0
        return torch.matmul(x, self.cache[key])
  )", /*alias=*/true);
  const at::Tensor x = torch::randn({8, 64});
  const at::Tensor expected = original.forward({x}).toTensor();
  original.attr("cache").toGenericDict().clear();

  ConvertedModule converted = convertBf16(original, x);
  FileCheck().check("aten::__getitem__")->check_not("aten::to(")->check("aten::matmul")
      ->run(*converted.module.get_method("forward").graph());
  EXPECT_TRUE(converted.module.attr("cache").is(converted.module.attr("alias")));
  const at::Tensor actual = converted.module.forward({x}).toTensor();
  EXPECT_LE((actual - expected).abs().max().item<double>(), 2e-2 * expected.abs().max().item<double>());
}

// Assigning an attribute makes the state not seen whole: the cache keeps fp32 and its reader gets a cast.
TEST(StateContainersTest, GraphThatAssignsAnAttributeKeepsItsCacheFp32) {
  Module original = cachingModule(R"(
    def forward(self, x):
        self.calls = self.calls + 1
        key = str(x.device)
        if key not in self.cache:
            self.cache[key] = self.weight * 2.0
        return torch.matmul(x, self.cache[key])
  )");
  const at::Tensor x = torch::randn({8, 64});
  ConvertedModule converted = convertBf16(original, x);
  FileCheck().check("Float(64, 64")->check("aten::_set_item")->check("aten::__getitem__")->check("aten::to(")
      ->check("aten::matmul")->run(*converted.module.get_method("forward").graph());
  converted.module.forward({x});
  EXPECT_EQ(cacheOf(converted.module).at("cpu").toTensor().scalar_type(), at::kFloat);
}

// A cache returned to the caller keeps the dtype of what it holds.
TEST(StateContainersTest, CacheTheGraphReturnsKeepsFp32) {
  Module original = cachingModule(R"(
    def forward(self, x):
        key = str(x.device)
        if key not in self.cache:
            self.cache[key] = self.weight * 2.0
        return torch.matmul(x, self.cache[key]), self.cache
  )");
  const at::Tensor x = torch::randn({8, 64});
  ConvertedModule converted = convertBf16(original, x);
  FileCheck().check("aten::__getitem__")->check("aten::to(")->check("aten::matmul")
      ->run(*converted.module.get_method("forward").graph());
  const c10::IValue outputs = converted.module.forward({x});
  EXPECT_EQ(outputs.toTuple()->elements()[1].toGenericDict().at("cpu").toTensor().scalar_type(), at::kFloat);
}

} // namespace
} // namespace torch_mp::jit
