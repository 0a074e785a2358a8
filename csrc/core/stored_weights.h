// How each stored tensor of a converted model is kept, from who reads it: the rule both fronts store weights by
// (jit/rewrite/apply_precision_plan for a frozen module's constants, torch_mp/_export/apply.py for an exported program's
// parameters, buffers and lifted constants).
//
// An fp32 tensor only low nodes read is stored low; one only fp32 nodes read stays fp32; one read in both precisions
// is stored twice, fp32 and low (a copy saves a cast per inference), unless those copies would make the weights larger
// than the fp32 model's (a language model's embedding table tied to an output layer kept fp32): then the largest such
// tensors are stored once, fp32, their low readers casting them per call, until the weights no longer outgrow the fp32
// model's. A tensor that is not fp32 stays as it is.
#pragma once

#include <cstdint>
#include <vector>

namespace torch_mp::core {

struct StoredTensor {
  int64_t bytes = 0;      // its storage's
  bool fp32 = false;      // holds fp32 values
  bool readLow = false;   // a node planned low reads it
  bool readFp32 = false;  // a node that is not reads it
};

enum class Storing : uint8_t {
  kAsIs,  // not fp32, or nothing reads it
  kLow,   // stored once, in the low dtype
  kFp32,  // stored once, fp32 (its low readers, if any, cast it per call)
  kBoth,  // stored fp32 and low
};

// Per tensor, in order. The low dtype takes half an fp32 tensor's bytes.
std::vector<Storing> storingOf(const std::vector<StoredTensor>& tensors);

} // namespace torch_mp::core
