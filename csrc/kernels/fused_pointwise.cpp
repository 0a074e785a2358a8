#include "kernels/fused_pointwise.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <cstring>
#include <vector>

namespace torch_mp::kernels {
namespace {

// Elements per step: the stack (kMaxPointwiseStack rows of this many floats, 8 KiB) stays in L1.
constexpr int64_t kChunk = 1024;

bool isSupportedDtype(c10::ScalarType dtype) {
  return dtype == c10::ScalarType::Float || dtype == c10::ScalarType::Half || dtype == c10::ScalarType::BFloat16;
}

// The stack depth after each instruction, checked once so the loop below never leaves its bounds.
void checkProgram(c10::IntArrayRef program, size_t inputs, size_t scalars) {
  TORCH_CHECK(program.size() % 2 == 0, "torch_mp::fused_pointwise: the program is (opcode, operand) pairs");
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
        TORCH_CHECK(isSupportedDtype(static_cast<c10::ScalarType>(operand)),
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
  }
  TORCH_CHECK(depth == 1, "torch_mp::fused_pointwise: the program leaves ", depth, " values instead of one");
}

// The loops below run on one chunk. They are built for three instruction sets and picked at load time (GCC's
// target_clones), so a wheel built for baseline x86-64 still runs them 16 floats at a time on AVX-512 machines.
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define TORCH_MP_VECTOR_LOOP __attribute__((target_clones("avx512f", "avx2", "default"), optimize("O3")))
#else
#define TORCH_MP_VECTOR_LOOP
#endif

// bf16 <-> fp32 by bits (the upper half of an fp32), rounding to nearest even, NaN kept NaN: branch-free, so the
// loops vectorise, and the same results as c10::BFloat16.
TORCH_MP_VECTOR_LOOP void loadBFloat16(const uint16_t* source, int64_t n, float* row) {
  for (int64_t k = 0; k < n; ++k) {
    const uint32_t bits = static_cast<uint32_t>(source[k]) << 16;
    std::memcpy(&row[k], &bits, sizeof(float));
  }
}

TORCH_MP_VECTOR_LOOP void storeBFloat16(const float* row, int64_t n, uint16_t* target) {
  for (int64_t k = 0; k < n; ++k) {
    uint32_t bits;
    std::memcpy(&bits, &row[k], sizeof(float));
    const uint32_t rounded = (bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16;
    target[k] = static_cast<uint16_t>(row[k] != row[k] ? 0x7FC0u : rounded);
  }
}

TORCH_MP_VECTOR_LOOP void roundBFloat16(float* row, int64_t n) {
  for (int64_t k = 0; k < n; ++k) {
    uint32_t bits;
    std::memcpy(&bits, &row[k], sizeof(float));
    const uint32_t rounded = (bits + 0x7FFFu + ((bits >> 16) & 1u)) & 0xFFFF0000u;
    float value;
    std::memcpy(&value, &rounded, sizeof(float));
    row[k] = row[k] != row[k] ? row[k] : value;
  }
}

TORCH_MP_VECTOR_LOOP void loadHalf(const c10::Half* source, int64_t n, float* row) {
  for (int64_t k = 0; k < n; ++k) {
    row[k] = static_cast<float>(source[k]);
  }
}

TORCH_MP_VECTOR_LOOP void storeHalf(const float* row, int64_t n, c10::Half* target) {
  for (int64_t k = 0; k < n; ++k) {
    target[k] = static_cast<c10::Half>(row[k]);
  }
}

TORCH_MP_VECTOR_LOOP void roundHalf(float* row, int64_t n) {
  for (int64_t k = 0; k < n; ++k) {
    row[k] = static_cast<float>(static_cast<c10::Half>(row[k]));
  }
}

void load(const at::Tensor& input, int64_t begin, int64_t n, float* row) {
  switch (input.scalar_type()) {
    case c10::ScalarType::BFloat16:
      loadBFloat16(reinterpret_cast<const uint16_t*>(input.const_data_ptr<c10::BFloat16>()) + begin, n, row);
      break;
    case c10::ScalarType::Half:
      loadHalf(input.const_data_ptr<c10::Half>() + begin, n, row);
      break;
    default:
      std::memcpy(row, input.const_data_ptr<float>() + begin, n * sizeof(float));
  }
}

void store(const float* row, int64_t begin, int64_t n, const at::Tensor& out) {
  switch (out.scalar_type()) {
    case c10::ScalarType::BFloat16:
      storeBFloat16(row, n, reinterpret_cast<uint16_t*>(out.mutable_data_ptr<c10::BFloat16>()) + begin);
      break;
    case c10::ScalarType::Half:
      storeHalf(row, n, out.mutable_data_ptr<c10::Half>() + begin);
      break;
    default:
      std::memcpy(out.mutable_data_ptr<float>() + begin, row, n * sizeof(float));
  }
}

TORCH_MP_VECTOR_LOOP void relu(float* row, int64_t n) {
  for (int64_t k = 0; k < n; ++k) {
    row[k] = row[k] > 0.0f ? row[k] : (row[k] != row[k] ? row[k] : 0.0f);  // NaN stays NaN, as in aten
  }
}

TORCH_MP_VECTOR_LOOP void neg(float* row, int64_t n) {
  for (int64_t k = 0; k < n; ++k) {
    row[k] = -row[k];
  }
}

TORCH_MP_VECTOR_LOOP void add(float* left, const float* right, int64_t n) {
  for (int64_t k = 0; k < n; ++k) {
    left[k] += right[k];
  }
}

TORCH_MP_VECTOR_LOOP void sub(float* left, const float* right, int64_t n) {
  for (int64_t k = 0; k < n; ++k) {
    left[k] -= right[k];
  }
}

TORCH_MP_VECTOR_LOOP void mul(float* left, const float* right, int64_t n) {
  for (int64_t k = 0; k < n; ++k) {
    left[k] *= right[k];
  }
}

TORCH_MP_VECTOR_LOOP void div(float* left, const float* right, int64_t n) {
  for (int64_t k = 0; k < n; ++k) {
    left[k] /= right[k];
  }
}

// Runs the program on elements [begin, begin + n).
void runChunk(
    c10::IntArrayRef program,
    const std::vector<at::Tensor>& inputs,
    c10::ArrayRef<double> scalars,
    const at::Tensor& out,
    int64_t begin,
    int64_t n) {
  // rows a little longer than 4 KiB: reading one row while writing the next at 4 KiB distance would alias in L1
  float stack[kMaxPointwiseStack][kChunk + 16];
  int top = 0;
  for (size_t pc = 0; pc < program.size(); pc += 2) {
    const int64_t operand = program[pc + 1];
    float* last = top > 0 ? stack[top - 1] : nullptr;
    switch (static_cast<PointwiseOp>(program[pc])) {
      case PointwiseOp::kInput:
        load(inputs[operand], begin, n, stack[top]);
        ++top;
        break;
      case PointwiseOp::kScalar:
        std::fill(stack[top], stack[top] + n, static_cast<float>(scalars[operand]));
        ++top;
        break;
      case PointwiseOp::kRound:
        if (operand == static_cast<int64_t>(c10::ScalarType::Half)) {
          roundHalf(last, n);
        } else if (operand == static_cast<int64_t>(c10::ScalarType::BFloat16)) {
          roundBFloat16(last, n);
        }
        break;
      case PointwiseOp::kRelu:
        relu(last, n);
        break;
      case PointwiseOp::kNeg:
        neg(last, n);
        break;
      case PointwiseOp::kAdd:
        add(stack[top - 2], last, n);
        --top;
        break;
      case PointwiseOp::kSub:
        sub(stack[top - 2], last, n);
        --top;
        break;
      case PointwiseOp::kMul:
        mul(stack[top - 2], last, n);
        --top;
        break;
      case PointwiseOp::kDiv:
        div(stack[top - 2], last, n);
        --top;
        break;
    }
  }
  store(stack[0], begin, n, out);
}

// The program run with ATen ops on whole fp32 tensors, which broadcast: for inputs whose sizes differ at run time
// though they were equal on the example inputs (say, a [1, n] tensor beside a batch of them). Same values as the
// per-element loop: every op computes in fp32 and rounds where the program says.
at::Tensor runBroadcasting(at::TensorList inputs, c10::IntArrayRef program, c10::ArrayRef<double> scalars,
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
  return stack.back().to(outDtype);
}

at::Tensor fusedPointwiseCpu(
    at::TensorList inputs,
    c10::IntArrayRef program,
    c10::ArrayRef<double> scalars,
    c10::ScalarType outDtype) {
  TORCH_CHECK(!inputs.empty(), "torch_mp::fused_pointwise: needs at least one input tensor");
  TORCH_CHECK(isSupportedDtype(outDtype), "torch_mp::fused_pointwise: cannot write ", outDtype);
  checkProgram(program, inputs.size(), scalars.size());
  // Inputs laid out alike in memory without gaps (contiguous, or all channels_last) are read in memory order and
  // the output gets their layout; otherwise contiguous copies are read.
  bool sameSizes = true;
  bool sameDenseLayout = true;
  for (const at::Tensor& input : inputs) {
    TORCH_CHECK(isSupportedDtype(input.scalar_type()), "torch_mp::fused_pointwise: cannot read ",
                input.scalar_type());
    sameSizes = sameSizes && input.sizes() == inputs[0].sizes();
    sameDenseLayout = sameDenseLayout && input.strides() == inputs[0].strides() &&
        input.is_non_overlapping_and_dense();
  }
  if (!sameSizes) {
    return runBroadcasting(inputs, program, scalars, outDtype);
  }
  std::vector<at::Tensor> operands;
  for (const at::Tensor& input : inputs) {
    operands.push_back(sameDenseLayout ? input : input.contiguous());
  }
  at::Tensor out = sameDenseLayout ? at::empty_like(inputs[0], inputs[0].options().dtype(outDtype))
                                   : at::empty(inputs[0].sizes(), inputs[0].options().dtype(outDtype));
  at::parallel_for(0, out.numel(), 16 * kChunk, [&](int64_t begin, int64_t end) {
    for (int64_t start = begin; start < end; start += kChunk) {
      runChunk(program, operands, scalars, out, start, std::min(kChunk, end - start));
    }
  });
  return out;
}

} // namespace

TORCH_LIBRARY(torch_mp, m) {
  m.def("fused_pointwise(Tensor[] inputs, int[] program, float[] scalars, ScalarType out_dtype) -> Tensor");
}

TORCH_LIBRARY_IMPL(torch_mp, CPU, m) {
  m.impl("fused_pointwise", &fusedPointwiseCpu);
}

} // namespace torch_mp::kernels
