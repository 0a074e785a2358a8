// Which ops have an int8 kernel on the x86 lowering, as data: one row per op with its role and the reason. The int8
// planner (core/int8_planner) asks only this table; a front asks it through the planner's facts. The lowering is
// Inductor's oneDNN int8 passes (torch/_inductor/fx_passes/quantization.py, with freezing): they turn
// dequantize -> op -> quantize patterns of a program into onednn.qconv_pointwise / qlinear_pointwise calls and run the
// follow ops on uint8 tensors. This file knows nothing about TorchScript or FX.
#pragma once

#include <cstdint>
#include <string>

namespace torch_mp::core {

enum class Int8Role : uint8_t {
  kNone,    // in no row: no int8 form; it runs in the float plan's precision
  kKernel,  // an int8 kernel: uint8 activation (its first input) x int8 per-channel weight (a stored tensor)
  kFollow,  // exact on a quantized tensor's grid (max, views): runs on uint8 between int8 kernels, so the
            // quantize between them fuses into the kernel before it
  kEpilogue,  // fuses into the int8 kernel whose output it reads (a post-op: activation, residual add): a quantize
              // after it is the kernel's own, so a value it writes counts as the kernel's
  kNoKernel,  // heavy, but the lowering has no int8 kernel for it: float, with this reason
};

struct Int8OpFacts {
  const char* op;  // qualified name, all overloads
  Int8Role role;
  const char* reason;
  int8_t weightInput;  // kKernel: the input holding the weight (quantized per output channel along dim 0)
};

// The row of a qualified op name; nullptr where none.
const Int8OpFacts* int8FactsOf(const std::string& op);

const char* toString(Int8Role role);  // "none", "kernel", "follow", "no_kernel"

} // namespace torch_mp::core
