// StageRunner: one phase per stage in the order stages first ran, a stage run again adding to its phase; the
// pipeline's phases in order, adding up to the report's seconds.
#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "jit/stage_runner.h"
#include "test_utils.h"

namespace torch_mp::jit {
namespace {

std::vector<std::string> namesOf(const Phases& phases) {
  std::vector<std::string> names;
  for (const auto& [name, seconds] : phases) {
    names.push_back(name);
  }
  return names;
}

TEST(StageRunnerTest, AStageRunAgainAddsToItsPhaseAndStagesReturnWhatTheyReturn) {
  auto graph = parseGraph(kConvReluSoftmax);
  Phases phases;
  StageRunner stages(phases);
  const auto pause = [] { std::this_thread::sleep_for(std::chrono::milliseconds(20)); };
  stages.run("first", graph, pause);
  EXPECT_EQ(stages.run("second", graph, [] { return 7; }), 7);
  stages.run("first", graph, pause);
  ASSERT_EQ(namesOf(phases), (std::vector<std::string>{"first", "second"}));
  EXPECT_GE(phases[0].second, 0.040);  // both runs of `first`
}

TEST(StageRunnerTest, ThePipelinesPhasesComeInOrderAndAddUpToItsSeconds) {
  auto graph = parseGraph(kConvReluSoftmax);
  const at::Tensor x = torch::randn({1, 3, 8, 8});
  inlineInputAsConstant(*graph, 1, torch::randn({4, 3, 3, 3}));
  const ConvertOptions options = defaultOptions(c10::DeviceType::CPU, core::LowDtype::kBFloat16, core::CpuFeatures::all());
  const ConversionReport report = convertGraphInPlace(graph, {x}, options);
  EXPECT_EQ(namesOf(report.phases),
            (std::vector<std::string>{
                "cleanup", "observe", "plan", "apply", "cancel", "tidy", "kernels", "report", "verify"}));
  double sum = 0.0;
  for (const auto& [name, seconds] : report.phases) {
    EXPECT_GE(seconds, 0.0) << name;
    sum += seconds;
  }
  EXPECT_DOUBLE_EQ(sum, report.seconds);
}

} // namespace
} // namespace torch_mp::jit
