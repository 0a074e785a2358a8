// torch_mp::fused_pointwise on the CPU (kernels/fused_pointwise.h): the program run over chunks of elements, one
// loop per instruction over a chunk's fp32 rows, chunks in parallel (at::parallel_for; this file is compiled with
// -fopenmp).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/fused_pointwise.h"

namespace torch_mp::kernels {
namespace {

// Elements per step: the stack (kMaxPointwiseStack rows of this many floats, 8 KiB) stays in L1.
constexpr int64_t kChunk = 1024;

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
    row[k] = row[k] < 0.0f ? 0.0f : row[k];  // as ATen's clamp_min(x, 0): NaN stays NaN, -0 stays -0
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

at::Tensor fusedPointwiseCpu(
    at::TensorList inputs,
    c10::IntArrayRef program,
    c10::ArrayRef<double> scalars,
    c10::ScalarType outDtype) {
  return runFusedPointwise(inputs, program, scalars, outDtype, [&](const DensePointwise& dense) {
    at::parallel_for(0, dense.out.numel(), 16 * kChunk, [&](int64_t begin, int64_t end) {
      for (int64_t start = begin; start < end; start += kChunk) {
        runChunk(program, dense.inputs, scalars, dense.out, start, std::min(kChunk, end - start));
      }
    });
  });
}

} // namespace

TORCH_LIBRARY_IMPL(torch_mp, CPU, m) {
  m.impl("fused_pointwise", &fusedPointwiseCpu);
}

} // namespace torch_mp::kernels
