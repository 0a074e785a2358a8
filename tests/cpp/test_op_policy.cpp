// OpPolicy's rules that both fronts ask by op name: whether a constant table is stored low (storesTableLow), the
// nodes forced low by id (forceLowNode), and the flag a heavy op kept fp32 for want of fast kernels carries.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/fast_kernels.h"
#include "core/op_policy.h"

namespace torch_mp::core {
namespace {

OpPolicy cpuFp16(const CpuFeatures& cpu) {
  return OpPolicy::defaults(Target::kCpuFloat16, cpu);
}

TEST(OpPolicyTest, ATableIsStoredLowOnlyWhereEveryReaderIsALookupOfItOrRunsLow) {
  const OpPolicy fast = cpuFp16(CpuFeatures::all());
  // a tied embedding and output layer where the linear runs low
  EXPECT_TRUE(fast.storesTableLow({{"aten::embedding", true}, {"aten::linear", true}}));
  EXPECT_TRUE(fast.storesTableLow({{"aten::embedding", true}, {"aten::embedding", true}}));
  // an fp32 reader (a norm), or a lookup op reading the table elsewhere than as its table, keeps it fp32
  EXPECT_FALSE(fast.storesTableLow({{"aten::embedding", true}, {"aten::layer_norm", false}}));
  EXPECT_FALSE(fast.storesTableLow({{"aten::embedding", false}}));
  // on a CPU without fp16 kernels the linear is fp32: the tied table stays fp32 for it
  EXPECT_FALSE(cpuFp16(CpuFeatures::none()).storesTableLow({{"aten::embedding", true}, {"aten::linear", true}}));
}

TEST(OpPolicyTest, NodesForcedLowByIdKeepTheLastReasonGiven) {
  OpPolicy policy = cpuFp16(CpuFeatures::all());
  EXPECT_EQ(policy.forcedLowNode("12"), nullptr);
  policy.forceLowNode("12", "checked");
  policy.forceLowNode("linear_3", "fx");
  policy.forceLowNode("12", "checked again");
  ASSERT_NE(policy.forcedLowNode("12"), nullptr);
  EXPECT_EQ(*policy.forcedLowNode("12"), "checked again");
  EXPECT_EQ(*policy.forcedLowNode("linear_3"), "fx");
  EXPECT_EQ(policy.forcedLowNode("13"), nullptr);
  EXPECT_EQ(policy.forcedLowNodes().size(), 2u);
}

TEST(OpPolicyTest, OnlyHeavyOpsTheDefaultsKeepFp32ForWantOfFastKernelsCarryTheFlag) {
  const OpPolicy slow = cpuFp16(CpuFeatures::none());
  ASSERT_NE(slow.find("aten::conv2d"), nullptr);
  EXPECT_TRUE(slow.find("aten::conv2d")->noFastKernel);
  EXPECT_FALSE(slow.find("aten::softmax")->noFastKernel);  // fp32 for its numerics, not for its kernels
  EXPECT_FALSE(cpuFp16(CpuFeatures::all()).find("aten::conv2d")->noFastKernel);
  OpPolicy edited = slow;
  edited.set("aten::conv2d", OpCategory::kFp32, "the user's");
  EXPECT_FALSE(edited.find("aten::conv2d")->noFastKernel);
}

} // namespace
} // namespace torch_mp::core
