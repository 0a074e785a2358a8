// What each op does with a channels_last tensor, as data: the table the channels_last pass reads.
//
// A 4-d tensor in channels_last order (NHWC in memory, NCHW in sizes) holds the same values as a contiguous one;
// every ATen op computes the same result from either. What differs is what an op writes and what it costs: an op
// that keeps the layout lets a chain of convolutions stay NHWC (cuDNN's fast layout for fp16 / bf16 tensor cores)
// with no transposes between them; an op outside the table gets a contiguous copy first, since it may depend on
// strides (aten::view fails on a channels_last tensor, a custom op may read data_ptr as NCHW). Ops we know nothing
// about are outside: a transpose too many costs time, a wrong layout could cost correctness.
// This file knows nothing about TorchScript.
#pragma once

#include <string>

namespace torch_mp::core {

enum class LayoutRole {
  kKeepsChannelsLast,  // computes per element or per channel and writes the layout it reads: the chain stays NHWC
  kReadsMetadataOnly,  // reads sizes, dtype or device, never elements: any layout will do, nothing to convert
  kNeedsContiguous,    // everything else (and every op in no table): reads a contiguous copy
};

struct LayoutEntry {
  LayoutRole role;
  const char* reason;
};

// The entry for a qualified op name ("aten::relu", all overloads), or nullptr when the op is in no table.
const LayoutEntry* findLayoutEntry(const std::string& op);

LayoutRole layoutRoleOf(const std::string& op);

} // namespace torch_mp::core
