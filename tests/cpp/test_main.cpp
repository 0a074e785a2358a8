// Entry point of the C++ tests. ctest runs each test in its own process; seeding here gives every test the same
// random inputs on every machine, so a tolerance that holds here holds in CI. TORCH_MP_TEST_SEED picks another
// seed, to check that the tolerances hold for inputs other than the ones CI draws.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdlib>

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  const char* seed = std::getenv("TORCH_MP_TEST_SEED");
  torch::manual_seed(seed != nullptr ? std::strtoull(seed, nullptr, 10) : 0);
  return RUN_ALL_TESTS();
}
