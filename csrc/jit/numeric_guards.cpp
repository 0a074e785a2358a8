#include "jit/numeric_guards.h"

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <torch/csrc/jit/ir/constants.h>

#include <cmath>
#include <cstdio>

namespace torch_mp::jit {
namespace {

using torch::jit::Node;
using torch::jit::Value;

std::string dtypeName(c10::ScalarType dtype) {
  return dtype == c10::ScalarType::Half ? "float16" : "bfloat16";
}

std::string formatMagnitude(double value) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.3g", value);
  return text;
}

} // namespace

double largestFinite(c10::ScalarType lowDtype) {
  return lowDtype == c10::ScalarType::Half ? 65504.0 : 3.3895313892515355e38;
}

std::optional<GuardVerdict> NumericGuards::observedOutOfRange(
    const Node* node,
    const std::vector<Node*>& boundaries) const {
  const double overflowLimit = largestFinite(lowDtype_) / 2;
  const double kSmallestNormal = std::ldexp(1.0, -14);
  // 2^(significand bits): the first integer the low dtype skips is one past it
  const double exactIntegerLimit = lowDtype_ == c10::ScalarType::Half ? 2048.0 : 256.0;
  // from 2^24 on every fp32 value is an integer: holding only integers says nothing there
  constexpr double kFp32ExactIntegerLimit = 16777216.0;
  std::optional<GuardVerdict> verdict;
  auto check = [&](const Value* value) {
    auto it = observed_.find(value);
    // constants are checked by constantOutOfRange: a tiny bias is harmless, it is added to larger values
    if (verdict || value->node()->kind() == c10::prim::Constant || it == observed_.end() ||
        it->second.dtype != c10::ScalarType::Float) {
      return;
    }
    const double largest = it->second.largestMagnitude;
    auto name = [&] { return "range guard: %" + value->debugName(); };  // built only for a verdict
    if (largest > overflowLimit) {
      verdict = GuardVerdict{value, largest, overflowLimit,
                             name() + " observed up to " + formatMagnitude(largest) + ", above half of " +
                                 dtypeName(lowDtype_) + "'s max " + formatMagnitude(2 * overflowLimit) +
                                 ", so the node keeps fp32"};
    } else if (it->second.onlyIntegers && largest > exactIntegerLimit && largest < kFp32ExactIntegerLimit) {
      verdict = GuardVerdict{value, largest, exactIntegerLimit,
                             name() + " holds integers up to " + formatMagnitude(largest) +
                                 " (positions, indices, coordinates?); " + dtypeName(lowDtype_) +
                                 " holds every integer only up to " + formatMagnitude(exactIntegerLimit) +
                                 ", so the node keeps fp32"};
    } else if (lowDtype_ == c10::ScalarType::Half && largest > 0.0 && largest < kSmallestNormal) {
      verdict = GuardVerdict{value, largest, kSmallestNormal,
                             name() + " observed only up to " + formatMagnitude(largest) +
                                 ", below float16's smallest normal 6.1e-05, so the node keeps fp32"};
    }
  };
  auto checkNode = [&](const Node* member) {
    for (const Value* input : member->inputs()) {
      check(input);
      if (input->node()->kind() == c10::prim::ListConstruct) {  // einsum, cat, stack read tensors in a list
        for (const Value* element : input->node()->inputs()) {
          check(element);
        }
      }
    }
    for (const Value* output : member->outputs()) {
      check(output);
    }
  };
  checkNode(node);
  for (const Node* member : boundaries) {
    checkNode(member);
  }
  return verdict;
}

// bf16's max, 3.39e38, is below fp32's, so masks of torch.finfo(torch.float32).min do not fit either.
std::optional<GuardVerdict> NumericGuards::constantOutOfRange(const Node* node) {
  for (const Value* input : node->inputs()) {
    if (input->node()->kind() != c10::prim::Constant) {
      continue;
    }
    auto cached = largestConstantMagnitude_.find(input);
    if (cached == largestConstantMagnitude_.end()) {
      double largest = 0.0;
      const c10::IValue value = torch::jit::toIValue(input).value();
      if (value.isDouble() && std::isfinite(value.toDouble())) {
        largest = std::abs(value.toDouble());
      } else if (value.isTensor() && value.toTensor().scalar_type() == c10::ScalarType::Float) {
        largest = largestFiniteMagnitude(value.toTensor());
      }
      cached = largestConstantMagnitude_.emplace(input, largest).first;
    }
    if (cached->second > largestFinite(lowDtype_)) {
      return GuardVerdict{input, cached->second, largestFinite(lowDtype_),
                          "range guard: constant %" + input->debugName() + " has values beyond " +
                              c10::toString(lowDtype_) + "'s range, so the node keeps fp32"};
    }
  }
  return std::nullopt;
}

// Kernels convert a scalar to the tensor's dtype (clamp does). A scalar more than 1/16 off after rounding (for fp16
// below 2^-20, about 9.5e-7) keeps the node in fp32.
std::optional<GuardVerdict> NumericGuards::scalarLostInLowDtype(const Node* node) const {
  for (const Value* input : node->inputs()) {
    if (input->node()->kind() != c10::prim::Constant || input->type()->kind() != c10::TypeKind::FloatType) {
      continue;
    }
    const double scalar = torch::jit::constant_as<double>(input).value();
    if (scalar == 0.0 || !std::isfinite(scalar)) {
      continue;
    }
    const double rounded = lowDtype_ == c10::ScalarType::Half ? static_cast<float>(c10::Half(scalar))
                                                               : static_cast<float>(c10::BFloat16(scalar));
    if (std::abs(rounded - scalar) > std::abs(scalar) / 16) {
      return GuardVerdict{input, scalar, rounded,
                          "range guard: scalar %" + input->debugName() + " = " + formatMagnitude(scalar) +
                              " becomes " + formatMagnitude(rounded) + " in " + dtypeName(lowDtype_) +
                              ", so the node keeps fp32"};
    }
  }
  return std::nullopt;
}

} // namespace torch_mp::jit
