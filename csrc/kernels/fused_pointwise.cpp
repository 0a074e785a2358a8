// torch_mp::fused_pointwise: the schema and what every backend's kernel shares (kernels/fused_pointwise.h).
#include "kernels/fused_pointwise.h"

#include <ATen/ATen.h>
#include <torch/library.h>

#include <utility>
#include <vector>

#include "kernels/dispatcher_kernels.h"

namespace torch_mp::kernels {
namespace {

// The stack depth after each instruction, checked once so the kernels never leave their bounds.
std::vector<int> checkProgram(c10::IntArrayRef program, size_t inputs, size_t scalars) {
  TORCH_CHECK(program.size() % 2 == 0, "torch_mp::fused_pointwise: the program is (opcode, operand) pairs");
  std::vector<int> depths;
  depths.reserve(program.size() / 2);
  int depth = 0;
  for (size_t pc = 0; pc < program.size(); pc += 2) {
    const auto op = static_cast<PointwiseOp>(program[pc]);
    const int64_t operand = program[pc + 1];
    switch (op) {
      case PointwiseOp::kInput:
        TORCH_CHECK(operand >= 0 && static_cast<size_t>(operand) < inputs, "torch_mp::fused_pointwise: no input ",
                    operand);
        ++depth;
        break;
      case PointwiseOp::kScalar:
        TORCH_CHECK(operand >= 0 && static_cast<size_t>(operand) < scalars, "torch_mp::fused_pointwise: no scalar ",
                    operand);
        ++depth;
        break;
      case PointwiseOp::kRound:
        TORCH_CHECK(operand >= 0 && operand < static_cast<int64_t>(c10::ScalarType::NumOptions) &&
                        isPointwiseDtype(static_cast<c10::ScalarType>(operand)),
                    "torch_mp::fused_pointwise: cannot round to dtype ", operand);
        [[fallthrough]];
      case PointwiseOp::kRelu:
      case PointwiseOp::kNeg:
        TORCH_CHECK(depth >= 1, "torch_mp::fused_pointwise: unary op on an empty stack");
        break;
      case PointwiseOp::kAdd:
      case PointwiseOp::kSub:
      case PointwiseOp::kMul:
      case PointwiseOp::kDiv:
        TORCH_CHECK(depth >= 2, "torch_mp::fused_pointwise: binary op on fewer than two values");
        --depth;
        break;
      default:
        TORCH_CHECK(false, "torch_mp::fused_pointwise: unknown opcode ", program[pc]);
    }
    TORCH_CHECK(depth <= kMaxPointwiseStack, "torch_mp::fused_pointwise: the program needs more than ",
                kMaxPointwiseStack, " values at once");
    depths.push_back(depth);
  }
  TORCH_CHECK(depth == 1, "torch_mp::fused_pointwise: the program leaves ", depth, " values instead of one");
  return depths;
}

} // namespace

bool hasFusedPointwiseKernel(c10::DeviceType device) {
  return hasKernelFor(c10::OperatorName(kFusedPointwiseOp, ""), device);
}

bool isPointwiseDtype(c10::ScalarType dtype) {
  return dtype == c10::ScalarType::Float || dtype == c10::ScalarType::Half || dtype == c10::ScalarType::BFloat16;
}

at::Tensor runWithAtenOps(at::TensorList inputs, c10::IntArrayRef program, c10::ArrayRef<double> scalars,
                          c10::ScalarType outDtype) {
  std::vector<at::Tensor> stack;
  auto pop = [&stack] {
    at::Tensor top = std::move(stack.back());
    stack.pop_back();
    return top;
  };
  for (size_t pc = 0; pc < program.size(); pc += 2) {
    const int64_t operand = program[pc + 1];
    switch (static_cast<PointwiseOp>(program[pc])) {
      case PointwiseOp::kInput:
        stack.push_back(inputs[operand].to(at::kFloat));
        break;
      case PointwiseOp::kScalar:
        // on the inputs' device: a CPU number beside CUDA tensors would be a CPU scalar, which CUDA's division
        // multiplies by its reciprocal instead of dividing
        stack.push_back(at::scalar_tensor(scalars[operand], inputs[0].options().dtype(at::kFloat)));
        break;
      case PointwiseOp::kRound:
        stack.back() = stack.back().to(static_cast<c10::ScalarType>(operand)).to(at::kFloat);
        break;
      case PointwiseOp::kRelu:
        stack.back() = at::relu(stack.back());
        break;
      case PointwiseOp::kNeg:
        stack.back() = at::neg(stack.back());
        break;
      default: {
        const at::Tensor right = pop();
        const at::Tensor left = pop();
        const auto op = static_cast<PointwiseOp>(program[pc]);
        stack.push_back(op == PointwiseOp::kAdd   ? at::add(left, right)
                        : op == PointwiseOp::kSub ? at::sub(left, right)
                        : op == PointwiseOp::kMul ? at::mul(left, right)
                                                  : at::div(left, right));
      }
    }
  }
  return stack.back().to(inputs[0].device(), outDtype);
}

at::Tensor runFusedPointwise(
    at::TensorList inputs,
    c10::IntArrayRef program,
    c10::ArrayRef<double> scalars,
    c10::ScalarType outDtype,
    c10::function_ref<void(const DensePointwise&)> runDense) {
  TORCH_CHECK(!inputs.empty(), "torch_mp::fused_pointwise: needs at least one input tensor");
  TORCH_CHECK(isPointwiseDtype(outDtype), "torch_mp::fused_pointwise: cannot write ", outDtype);
  DensePointwise dense;
  dense.depths = checkProgram(program, inputs.size(), scalars.size());
  // Inputs laid out alike in memory without gaps (contiguous, or all channels_last) are read in memory order and
  // the output gets their layout; otherwise contiguous copies are read.
  bool sameSizes = true;
  bool sameDenseLayout = true;
  for (const at::Tensor& input : inputs) {
    TORCH_CHECK(isPointwiseDtype(input.scalar_type()), "torch_mp::fused_pointwise: cannot read ",
                input.scalar_type());
    sameSizes = sameSizes && input.sizes() == inputs[0].sizes();
    sameDenseLayout = sameDenseLayout && input.strides() == inputs[0].strides() &&
        input.is_non_overlapping_and_dense();
  }
  if (!sameSizes) {
    return runWithAtenOps(inputs, program, scalars, outDtype);
  }
  for (const at::Tensor& input : inputs) {
    dense.inputs.push_back(sameDenseLayout ? input : input.contiguous());
  }
  dense.out = sameDenseLayout ? at::empty_like(inputs[0], inputs[0].options().dtype(outDtype))
                              : at::empty(inputs[0].sizes(), inputs[0].options().dtype(outDtype));
  if (dense.out.numel() > 0) {
    runDense(dense);
  }
  return dense.out;
}

TORCH_LIBRARY(torch_mp, m) {
  m.def("fused_pointwise(Tensor[] inputs, int[] program, float[] scalars, ScalarType out_dtype) -> Tensor");
}

} // namespace torch_mp::kernels
