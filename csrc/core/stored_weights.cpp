#include "core/stored_weights.h"

#include <algorithm>
#include <functional>
#include <utility>

namespace torch_mp::core {

std::vector<Storing> storingOf(const std::vector<StoredTensor>& tensors) {
  std::vector<Storing> storing(tensors.size(), Storing::kAsIs);
  int64_t before = 0;
  int64_t after = 0;
  std::vector<std::pair<int64_t, size_t>> readInBoth;  // (bytes, index)
  for (size_t i = 0; i < tensors.size(); ++i) {
    const StoredTensor& tensor = tensors[i];
    before += tensor.bytes;
    if (!tensor.fp32) {
      after += tensor.bytes;
      continue;
    }
    after += (tensor.readFp32 ? tensor.bytes : 0) + (tensor.readLow ? tensor.bytes / 2 : 0);
    if (tensor.readLow && tensor.readFp32) {
      storing[i] = Storing::kBoth;
      readInBoth.emplace_back(tensor.bytes, i);
    } else if (tensor.readLow) {
      storing[i] = Storing::kLow;
    } else if (tensor.readFp32) {
      storing[i] = Storing::kFp32;
    }
  }
  std::sort(readInBoth.begin(), readInBoth.end(), std::greater<>());
  for (auto it = readInBoth.begin(); it != readInBoth.end() && after > before; ++it) {
    storing[it->second] = Storing::kFp32;
    after -= it->first / 2;
  }
  return storing;
}

} // namespace torch_mp::core
