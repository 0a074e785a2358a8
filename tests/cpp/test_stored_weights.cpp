// core::storingOf, the rule both fronts store weights by: low where only low nodes read, fp32 where only fp32 ones
// do, both where both do unless that outgrows the fp32 model's weights (then the largest stay fp32 only).
#include <gtest/gtest.h>

#include <vector>

#include "core/stored_weights.h"

namespace torch_mp::core {
namespace {

StoredTensor fp32(int64_t bytes, bool readLow, bool readFp32) {
  return StoredTensor{bytes, true, readLow, readFp32};
}

TEST(StoredWeightsTest, EachTensorIsStoredInThePrecisionsItsReadersRunIn) {
  const std::vector<Storing> storing = storingOf({fp32(4096, true, false), fp32(1024, true, true),
                                                  fp32(64, false, true), fp32(64, false, false),
                                                  StoredTensor{512, false, true, true}});
  // before 5760; after 2048 + (1024 + 512) + 64 + 0 + 512 = 4160: within the fp32 model's, so w is stored twice
  EXPECT_EQ(storing, (std::vector<Storing>{Storing::kLow, Storing::kBoth, Storing::kFp32, Storing::kAsIs,
                                           Storing::kAsIs}));
}

TEST(StoredWeightsTest, CopiesThatWouldOutgrowTheFp32WeightsGoLargestFirst) {
  // a tied table read low and fp32 (a head kept fp32): a copy would make 1.5x the fp32 bytes
  EXPECT_EQ(storingOf({fp32(1 << 20, true, true)}), (std::vector<Storing>{Storing::kFp32}));
  // two read in both: dropping the larger copy is enough to stay within the fp32 model's bytes
  const std::vector<Storing> storing =
      storingOf({fp32(1000, true, true), fp32(4000, true, true), fp32(8000, true, false)});
  // before 13000; after 1500 + 6000 + 4000 = 11500 <= 13000: both copies fit
  EXPECT_EQ(storing, (std::vector<Storing>{Storing::kBoth, Storing::kBoth, Storing::kLow}));
  const std::vector<Storing> tight = storingOf({fp32(1000, true, true), fp32(4000, true, true), fp32(800, true, false)});
  // before 5800; after 1500 + 6000 + 400 = 7900: the 4000-byte tensor's copy goes (5900), then the 1000-byte one's (5400)
  EXPECT_EQ(tight, (std::vector<Storing>{Storing::kFp32, Storing::kFp32, Storing::kLow}));
}

} // namespace
} // namespace torch_mp::core
