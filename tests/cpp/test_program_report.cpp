// contract::programReport: the export front's records become the ConversionReport convert's pipeline fills (ids indexing
// the FX names, the planner's rule, casts and their bytes, graph items, fp32 weights with their reader's rule, the
// stages' seconds), and an id that indexes no name is an error.
#include <gtest/gtest.h>

#include <stdexcept>

#include "contract/program_report.h"

namespace torch_mp::contract {
namespace {

core::NodeDecision decided(core::OpCategory category, core::RuleKind kind, std::string rule) {
  return core::NodeDecision{.category = category, .kind = kind, .rule = rule, .reason = rule, .guard = std::nullopt};
}

// x -> linear -> cast -> relu, the linear's weight kept fp32 (a 128 KiB tensor)
ProgramRecords linearThenRelu() {
  ProgramRecords records;
  records.names = {"x", "linear", "relu", "_to_copy"};
  const core::NodeDecision matmul = decided(core::OpCategory::kLowPrecision, core::RuleKind::kPolicy, "low: matmul");
  const core::NodeDecision follow = decided(core::OpCategory::kFollow, core::RuleKind::kPolicy, "follow");
  records.nodes = {
      {.id = 1, .op = "aten::linear", .scope = "fc", .decision = matmul, .low = true, .amax = 3.0, .flops = 4096},
      {.id = 2, .op = "aten::relu", .decision = follow, .low = false, .forcedToFp32 = true},
  };
  records.casts = {{.id = 3, .value = "linear", .from = "Half", .to = "Float", .bytes = 96}};
  records.graph = {{.id = 0, .op = "x"},
                   {.id = 1, .op = "aten::linear", .inputs = {0}},
                   {.id = 3, .isCast = true, .op = "aten::_to_copy", .inputs = {1}, .cast = 0},
                   {.id = 2, .op = "aten::relu", .inputs = {3}}};
  records.keptFp32 = {{.name = "fc.weight", .bytes = 128 * 1024, .readers = {"aten::linear"}, .decidedBy = 1},
                      {.name = "fc.bias", .bytes = 64, .readers = {"aten::linear"}, .decidedBy = 1}};
  records.weightBytesBefore = 200'000;
  records.weightBytesAfter = 150'000;
  records.phases = {{"capture", 1.5}, {"plan", 0.25}};
  return records;
}

TEST(ProgramReportTest, RecordsBecomeTheReportConvertFills) {
  const ConversionReport report = programReport(ConversionRequest{}, linearThenRelu());
  EXPECT_EQ(report.capture, "export");
  EXPECT_EQ(report.dtype, "float16");
  EXPECT_EQ(report.nodeNames, (std::vector<std::string>{"x", "linear", "relu", "_to_copy"}));
  ASSERT_EQ(report.nodes.size(), 2u);
  const NodeDecision& linear = report.nodes[0];
  EXPECT_EQ(linear.output, "linear");
  EXPECT_EQ(linear.scope, "fc");
  EXPECT_EQ(linear.precision, core::Precision::kLow);
  EXPECT_EQ(linear.rule, "low: matmul");
  EXPECT_DOUBLE_EQ(linear.amax, 3.0);
  EXPECT_EQ(linear.flops, 4096);
  const NodeDecision& relu = report.nodes[1];
  EXPECT_EQ(relu.precision, core::Precision::kFp32);
  EXPECT_TRUE(relu.forcedToFp32);
  EXPECT_EQ(relu.rule, core::plannedRule("follow", core::OpCategory::kFollow, true, false));
  EXPECT_DOUBLE_EQ(relu.amax, -1.0);  // not observed as an fp32 tensor
  ASSERT_EQ(report.casts.size(), 1u);
  EXPECT_EQ(report.casts[0].bytes, 96);
  EXPECT_TRUE(report.casts[0].reached);
  EXPECT_EQ(report.castBytes, 96);
  ASSERT_EQ(report.graph.size(), 4u);
  EXPECT_EQ(report.graph[2].kind, GraphItem::Kind::kCast);
  EXPECT_EQ(report.graph[2].cast, 0);
  EXPECT_EQ(report.graph[3].kind, GraphItem::Kind::kNode);
  EXPECT_EQ(report.graph[3].cast, -1);
  EXPECT_EQ(report.weightBytesKeptFp32, 128 * 1024 + 64);
  ASSERT_EQ(report.weightsKeptFp32.size(), 1u);  // the bias is counted, not listed
  EXPECT_EQ(report.weightsKeptFp32[0].rule, "low: matmul");
  EXPECT_EQ(report.weightBytesBefore, 200'000);
  EXPECT_EQ(report.weightBytesAfter, 150'000);
  EXPECT_DOUBLE_EQ(report.seconds, 1.75);
  EXPECT_FALSE(report.nonFinite);
}

TEST(ProgramReportTest, AnUnknownOpIsListedOnce) {
  ProgramRecords records;
  records.names = {"a", "b"};
  for (NodeId id : {0, 1}) {
    records.nodes.push_back({.id = id, .op = "aten::mystery",
                             .decision = decided(core::OpCategory::kFp32, core::RuleKind::kUnknownOp, "fp32")});
  }
  EXPECT_EQ(programReport(ConversionRequest{}, records).unknownOps, std::vector<std::string>{"aten::mystery"});
}

TEST(ProgramReportTest, AnInt8NodeSaysItsInt8Rule) {
  ProgramRecords records = linearThenRelu();
  records.nodes[0].int8 = core::Int8NodePlan{.int8 = true, .reason = core::Int8Reason::kInt8};
  const NodeDecision linear = programReport(ConversionRequest{}, records).nodes[0];
  EXPECT_TRUE(linear.runsInt8());
  EXPECT_EQ(linear.ruleKind, core::RuleKind::kInt8);
  EXPECT_EQ(linear.rule.rfind("int8: ", 0), 0u);
}

TEST(ProgramReportTest, AnIdThatIndexesNoNameIsAnError) {
  ProgramRecords badCast = linearThenRelu();
  badCast.casts[0].id = 4;
  EXPECT_THROW(programReport(ConversionRequest{}, badCast), std::invalid_argument);
  ProgramRecords badInput = linearThenRelu();
  badInput.graph[1].inputs = {-1};
  EXPECT_THROW(programReport(ConversionRequest{}, badInput), std::invalid_argument);
  ProgramRecords badReader = linearThenRelu();
  badReader.keptFp32[0].decidedBy = 9;
  EXPECT_THROW(programReport(ConversionRequest{}, badReader), std::invalid_argument);
}

} // namespace
} // namespace torch_mp::contract
