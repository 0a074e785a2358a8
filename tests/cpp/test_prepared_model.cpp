// Prepare once, plan many times (jit/pipeline): one preparation gives any number of conversions, each the same as a
// conversion from scratch, without touching the preparation; nodes keep their ids across plans, and the fallback's
// kept nodes are named by id.
#include <gtest/gtest.h>
#include <torch/csrc/jit/api/module.h>
#include <torch/csrc/jit/testing/file_check.h>

#include <map>
#include <regex>

#include "jit/pipeline.h"
#include "jit/report/value_probe.h"
#include "test_utils.h"

namespace torch_mp::jit {
namespace {

using torch::jit::Module;
using torch::jit::testing::FileCheck;

Module matmulReluSoftmax() {
  Module module("Net");
  module.register_parameter("w1", torch::randn({16, 16}), /*is_buffer=*/false);
  module.register_parameter("w2", torch::randn({16, 16}), /*is_buffer=*/false);
  module.define(R"(
    def forward(self, x):
        h = torch.relu(torch.matmul(x, self.w1))
        return torch.softmax(torch.matmul(h, self.w2), -1)
  )");
  module.eval();
  return module;
}

ConvertOptions halfOptions() {
  return defaultOptions(c10::kCPU, core::LowDtype::kFloat16, core::CpuFeatures::all());
}

std::string forwardGraph(const Module& module) {
  return module.get_method("forward").graph()->toString();
}

// The graph's text with unnamed values numbered in order of appearance and no class-name mangling: two graphs of
// the same nodes, made apart, read the same.
std::string canonical(const std::string& text) {
  std::string out = std::regex_replace(text, std::regex("___torch_mangle_[0-9]+\\."), "");
  std::map<std::string, std::string> renamed;
  std::string result;
  const std::regex number("%[0-9]+\\b");
  auto begin = std::sregex_iterator(out.begin(), out.end(), number);
  size_t last = 0;
  for (auto it = begin; it != std::sregex_iterator(); ++it) {
    auto [slot, added] = renamed.emplace(it->str(), "%v" + std::to_string(renamed.size()));
    result += out.substr(last, it->position() - last) + slot->second;
    last = it->position() + it->length();
  }
  return result + out.substr(last);
}

const NodeDecision& decisionFor(const ConversionReport& report, const std::string& op, int skip = 0) {
  for (const NodeDecision& node : report.nodes) {
    if (node.op == op && skip-- == 0) {
      return node;
    }
  }
  throw std::runtime_error("no decision for " + op);
}

TEST(PreparedModelTest, EachPlanEqualsAConversionFromScratchAndLeavesThePreparationAsItWas) {
  Module original = matmulReluSoftmax();
  const at::Tensor x = torch::randn({4, 16});
  const PreparedModel prepared = prepareModule(original, {x});
  const std::string preparedGraph = forwardGraph(prepared.frozen);
  ConvertedModule scratch = convertModule(original, {x}, halfOptions());
  for (int plan = 0; plan < 2; ++plan) {
    SCOPED_TRACE(plan);
    ConvertedModule converted = convertPreparedModule(prepared, halfOptions());
    converted.module.get_method("forward").graph()->lint();
    EXPECT_EQ(canonical(forwardGraph(converted.module)), canonical(forwardGraph(scratch.module)));
    EXPECT_EQ(converted.report.lowPrecisionNodes(), scratch.report.lowPrecisionNodes());
    EXPECT_EQ(converted.report.casts.size(), scratch.report.casts.size());
    ASSERT_EQ(converted.report.nodes.size(), scratch.report.nodes.size());
    for (size_t n = 0; n < scratch.report.nodes.size(); ++n) {
      EXPECT_EQ(converted.report.nodes[n].id, scratch.report.nodes[n].id);
      EXPECT_EQ(converted.report.nodes[n].op, scratch.report.nodes[n].op);
    }
    expectSameOutputs({scratch.module.forward({x})}, {converted.module.forward({x})});
    EXPECT_EQ(forwardGraph(prepared.frozen), preparedGraph);  // fp32 still, ids and all
  }
  FileCheck().check("torch_mp_node")->check_not("Half")->run(preparedGraph);
  FileCheck().check_not("torch_mp_node")->check_not("torch_mp_cast")->check("Half")
      ->run(forwardGraph(scratch.module));
  // freezing is timed with the stages; a conversion from scratch uses its preparation up, with no clone (a plan of
  // a kept preparation clones it: test_prepare.py)
  std::vector<std::string> phases;
  for (const auto& [name, seconds] : scratch.report.phases) {
    phases.push_back(name);
  }
  EXPECT_EQ(std::vector<std::string>(phases.begin(), phases.begin() + 4),
            (std::vector<std::string>{"freeze", "cleanup", "observe", "plan"}));
}

TEST(PreparedModelTest, NodesKeptFp32ByIdStayFp32AndSayItIsTheFallback) {
  Module original = matmulReluSoftmax();
  const at::Tensor x = torch::randn({4, 16});
  const PreparedModel prepared = prepareModule(original, {x});
  const ConvertedModule plain = convertPreparedModule(prepared, halfOptions());
  const NodeDecision& second = decisionFor(plain.report, "aten::matmul", 1);
  ASSERT_EQ(second.precision, core::Precision::kLow);
  ConvertOptions options = halfOptions();
  options.run.keepFp32.fallback = {second.id};
  ConvertedModule kept = convertPreparedModule(prepared, options);
  const NodeDecision& keptSecond = decisionFor(kept.report, "aten::matmul", 1);
  EXPECT_EQ(keptSecond.id, second.id);
  EXPECT_EQ(keptSecond.precision, core::Precision::kFp32);
  EXPECT_EQ(keptSecond.ruleKind, core::RuleKind::kFallback);
  EXPECT_EQ(decisionFor(kept.report, "aten::matmul").precision, core::Precision::kLow);
  // the first matmul's result is cast back to fp32 for the second: one more cast than plain, no cast at the end
  FileCheck().check("aten::matmul")->check("Float")->check("aten::matmul")->check("aten::softmax")
      ->run(forwardGraph(kept.module));
  expectCloseOutputs({original.forward({x})}, {kept.module.forward({x})}, 1e-2);
}

TEST(PreparedModelTest, ProbesFindTheSameNodeInThePreparationAndInAConversionThatKeptItsIds) {
  Module original = matmulReluSoftmax();
  const at::Tensor x = torch::randn({4, 16});
  const PreparedModel prepared = prepareModule(original, {x});
  ConvertOptions options = halfOptions();
  options.run.keepNodeIds = true;
  const ConvertedModule converted = convertPreparedModule(prepared, options);
  FileCheck().check("torch_mp_node")->run(forwardGraph(converted.module));
  const NodeId first = decisionFor(converted.report, "aten::matmul").id;
  const NodeId relu = decisionFor(converted.report, "aten::relu").id;
  const std::vector<at::Tensor> low = probeNodeOutputs(converted.module, {x}, {first, relu, 12345});
  const std::vector<at::Tensor> reference = probeNodeOutputs(prepared.frozen, {x}, {first, relu, 12345});
  ASSERT_EQ(low.size(), 3u);
  EXPECT_EQ(low[0].scalar_type(), at::kHalf);
  EXPECT_EQ(reference[0].scalar_type(), at::kFloat);
  EXPECT_FALSE(low[2].defined());  // no such node
  const at::Tensor expected = torch::relu(torch::matmul(x, original.attr("w1").toTensor()));
  expectCloseOutputs({expected}, {reference[1]}, 0.0);
  expectCloseOutputs({expected}, {low[1].to(at::kFloat)}, 1e-2);
}

TEST(PreparedModelTest, ABadExampleInputFailsInPreparationAsAModelRunError) {
  Module original = matmulReluSoftmax();
  try {
    prepareModule(original, {torch::randn({4, 7})});
    FAIL() << "expected the model run to fail";
  } catch (const ModelRunError&) {
    SUCCEED();  // the model's own failure, told apart from a conversion failure by its type
  }
}

} // namespace
} // namespace torch_mp::jit
