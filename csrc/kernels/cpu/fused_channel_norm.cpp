// torch_mp::fused_channel_norm on the CPU (kernels/fused_channel_norm.h). Per part and sample, one pass sums each
// channel's values and squares in double (channels innermost where they are fastest in memory, so the pass reads
// memory in order), giving per group mean = S / M and biased var = max(Q / M - mean^2, 0): one read of the input, and
// double's 53 bits keep the difference accurate to ~1e-16 of mean^2, far inside fp32 statistics for any input whose
// |mean| / std is below ~1e4 (a Welford pass in fp32 would need a division per element). Then per (sample, channel)
// a = rstd * scale, b = shift - mean * a in fp32, and one pass writes relu?(x * a + b) as out_dtype, a row at a time
// (a pixel's channels, or a channel's pixels: whichever the output holds contiguously). Samples (stats) and rows (the
// write) run in parallel (at::parallel_for; compiled with -fopenmp).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <torch/library.h>

#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/fused_channel_norm.h"

namespace torch_mp::kernels {
namespace {

// Rows of up to this many values are loaded into fp32, transformed and stored by the loops below (4 KiB: in L1).
constexpr int64_t kRow = 1024;

// The row loops are built for three instruction sets and picked at load time (GCC's target_clones), as
// kernels/cpu/fused_pointwise.cpp's: fp16 / bf16 conversions and the affine map run 8-16 values at a time.
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define TORCH_MP_VECTOR_LOOP __attribute__((target_clones("avx512f", "avx2", "default"), optimize("O3")))
#else
#define TORCH_MP_VECTOR_LOOP
#endif

TORCH_MP_VECTOR_LOOP void loadRow(const float* source, int64_t stride, int64_t n, float* row) {
  if (stride == 1) {
    std::memcpy(row, source, n * sizeof(float));
    return;
  }
  for (int64_t k = 0; k < n; ++k) {
    row[k] = source[k * stride];
  }
}

TORCH_MP_VECTOR_LOOP void loadHalfRow(const c10::Half* source, int64_t stride, int64_t n, float* row) {
  for (int64_t k = 0; k < n; ++k) {
    row[k] = static_cast<float>(source[k * stride]);
  }
}

TORCH_MP_VECTOR_LOOP void storeHalfRow(const float* row, int64_t n, c10::Half* target) {
  for (int64_t k = 0; k < n; ++k) {
    target[k] = static_cast<c10::Half>(row[k]);
  }
}

// fp16 <-> fp32 with the F16C instructions where the CPU has them (every x86-64 CPU with AVX2): c10::Half's portable
// conversion, compiled without -mf16c, made a copy of 800k fp16 values take 2.7 ms against ATen's 0.1 ms (an AMD
// EPYC, one thread; 0.14 ms with F16C). Both round to nearest even; only NaN payloads may differ.
#if defined(__GNUC__) && defined(__x86_64__)
const bool kHasF16c = __builtin_cpu_supports("f16c");

__attribute__((target("avx,f16c"))) void loadHalfF16c(const c10::Half* source, int64_t n, float* row) {
  int64_t k = 0;
  for (; k + 8 <= n; k += 8) {
    _mm256_storeu_ps(row + k, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(source + k))));
  }
  loadHalfRow(source + k, 1, n - k, row + k);
}

__attribute__((target("avx,f16c"))) void storeHalfF16c(const float* row, int64_t n, c10::Half* target) {
  int64_t k = 0;
  for (; k + 8 <= n; k += 8) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(target + k),
                     _mm256_cvtps_ph(_mm256_loadu_ps(row + k), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  storeHalfRow(row + k, n - k, target + k);
}
#else
constexpr bool kHasF16c = false;
void loadHalfF16c(const c10::Half*, int64_t, float*) {}
void storeHalfF16c(const float*, int64_t, c10::Half*) {}
#endif

void loadRow(const c10::Half* source, int64_t stride, int64_t n, float* row) {
  if (stride == 1 && kHasF16c) {
    loadHalfF16c(source, n, row);
  } else {
    loadHalfRow(source, stride, n, row);
  }
}

// bf16 -> fp32 by bits (the upper half of an fp32): exact, branch-free.
TORCH_MP_VECTOR_LOOP void loadRow(const c10::BFloat16* source, int64_t stride, int64_t n, float* row) {
  const auto* bits = reinterpret_cast<const uint16_t*>(source);
  for (int64_t k = 0; k < n; ++k) {
    const uint32_t wide = static_cast<uint32_t>(bits[k * stride]) << 16;
    std::memcpy(&row[k], &wide, sizeof(float));
  }
}

TORCH_MP_VECTOR_LOOP void storeRow(const float* row, int64_t n, float* target) {
  std::memcpy(target, row, n * sizeof(float));
}

void storeRow(const float* row, int64_t n, c10::Half* target) {
  if (kHasF16c) {
    storeHalfF16c(row, n, target);
  } else {
    storeHalfRow(row, n, target);
  }
}

// fp32 -> bf16 rounding to nearest even by bits, NaN kept NaN: the same results as c10::BFloat16, branch-free.
TORCH_MP_VECTOR_LOOP void storeRow(const float* row, int64_t n, c10::BFloat16* target) {
  auto* bits = reinterpret_cast<uint16_t*>(target);
  for (int64_t k = 0; k < n; ++k) {
    uint32_t wide;
    std::memcpy(&wide, &row[k], sizeof(float));
    const uint32_t rounded = (wide + 0x7FFFu + ((wide >> 16) & 1u)) >> 16;
    bits[k] = static_cast<uint16_t>(row[k] != row[k] ? 0x7FC0u : rounded);
  }
}

// row = row * a + b, per value (a, b rows) or for the whole row (a, b numbers); then relu as ATen's (clamp_min:
// NaN and -0 kept).
TORCH_MP_VECTOR_LOOP void affineRow(float* row, const float* a, const float* b, int64_t n) {
  for (int64_t k = 0; k < n; ++k) {
    row[k] = row[k] * a[k] + b[k];
  }
}

TORCH_MP_VECTOR_LOOP void affineRow(float* row, float a, float b, int64_t n) {
  for (int64_t k = 0; k < n; ++k) {
    row[k] = row[k] * a + b;
  }
}

TORCH_MP_VECTOR_LOOP void reluRow(float* row, int64_t n) {
  for (int64_t k = 0; k < n; ++k) {
    row[k] = row[k] < 0.0f ? 0.0f : row[k];
  }
}

// Per (sample, channel) of one part: the fp32 factor and offset its write applies.
struct Affine {
  std::vector<float> a;
  std::vector<float> b;
};

template <typename In>
Affine affineOf(const ChannelNormPart& part, int64_t samples, int64_t pixels, double eps) {
  const int64_t channels = part.channels;
  const float* scale = part.scale.const_data_ptr<float>();
  const float* shift = part.shift.const_data_ptr<float>();
  Affine affine{std::vector<float>(samples * channels), std::vector<float>(samples * channels)};
  if (part.groups == 0) {
    for (int64_t n = 0; n < samples; ++n) {
      std::copy(scale, scale + channels, affine.a.begin() + n * channels);
      std::copy(shift, shift + channels, affine.b.begin() + n * channels);
    }
    return affine;
  }
  const In* data = part.input.const_data_ptr<In>();
  const int64_t perGroup = channels / part.groups;
  at::parallel_for(0, samples, 1, [&](int64_t begin, int64_t end) {
    std::vector<double> sum(channels);
    std::vector<double> squares(channels);
    for (int64_t n = begin; n < end; ++n) {
      std::fill(sum.begin(), sum.end(), 0.0);
      std::fill(squares.begin(), squares.end(), 0.0);
      const In* sample = data + n * part.sampleStride;
      if (part.channelStride == 1) {
        for (int64_t p = 0; p < pixels; ++p) {
          const In* pixel = sample + p * part.pixelStride;
          for (int64_t c = 0; c < channels; ++c) {
            const double v = static_cast<float>(pixel[c]);
            sum[c] += v;
            squares[c] += v * v;
          }
        }
      } else {
        for (int64_t c = 0; c < channels; ++c) {
          const In* row = sample + c * part.channelStride;
          double s = 0.0;
          double q = 0.0;
          for (int64_t p = 0; p < pixels; ++p) {
            const double v = static_cast<float>(row[p * part.pixelStride]);
            s += v;
            q += v * v;
          }
          sum[c] = s;
          squares[c] = q;
        }
      }
      const double count = static_cast<double>(perGroup * pixels);
      for (int64_t g = 0; g < part.groups; ++g) {
        double s = 0.0;
        double q = 0.0;
        for (int64_t c = g * perGroup; c < (g + 1) * perGroup; ++c) {
          s += sum[c];
          q += squares[c];
        }
        const double mean = s / count;
        const double var = std::max(q / count - mean * mean, 0.0);
        const auto rstd = static_cast<float>(1.0 / std::sqrt(var + eps));
        for (int64_t c = g * perGroup; c < (g + 1) * perGroup; ++c) {
          const float a = rstd * scale[c];
          affine.a[n * channels + c] = a;
          affine.b[n * channels + c] = shift[c] - static_cast<float>(mean) * a;
        }
      }
    }
  });
  return affine;
}

template <typename In, typename Out>
void writePart(const ChannelNormProblem& problem, const ChannelNormPart& part) {
  const Affine affine = affineOf<In>(part, problem.samples, problem.pixels, problem.eps);
  const In* data = part.input.const_data_ptr<In>();
  Out* out = problem.out.mutable_data_ptr<Out>() + part.offset * problem.outChannelStride;
  const int64_t channels = part.channels;
  if (problem.outChannelStride == 1) {  // channels fastest in the output: a pixel's channels are a row
    at::parallel_for(0, problem.samples * problem.pixels, 16, [&](int64_t begin, int64_t end) {
      float row[kRow];
      for (int64_t i = begin; i < end; ++i) {
        const int64_t n = i / problem.pixels;
        const int64_t p = i % problem.pixels;
        for (int64_t c = 0; c < channels; c += kRow) {
          const int64_t length = std::min(kRow, channels - c);
          loadRow(data + n * part.sampleStride + p * part.pixelStride + c * part.channelStride, part.channelStride,
                  length, row);
          affineRow(row, &affine.a[n * channels + c], &affine.b[n * channels + c], length);
          if (problem.relu) {
            reluRow(row, length);
          }
          storeRow(row, length, out + n * problem.outSampleStride + p * problem.outPixelStride + c);
        }
      }
    });
  } else {  // contiguous output: a channel's pixels are a row
    at::parallel_for(0, problem.samples * channels, 1, [&](int64_t begin, int64_t end) {
      float row[kRow];
      for (int64_t i = begin; i < end; ++i) {
        const int64_t n = i / channels;
        const int64_t c = i % channels;
        for (int64_t p = 0; p < problem.pixels; p += kRow) {
          const int64_t length = std::min(kRow, problem.pixels - p);
          loadRow(data + n * part.sampleStride + c * part.channelStride + p * part.pixelStride, part.pixelStride,
                  length, row);
          affineRow(row, affine.a[n * channels + c], affine.b[n * channels + c], length);
          if (problem.relu) {
            reluRow(row, length);
          }
          storeRow(row, length, out + n * problem.outSampleStride + c * problem.outChannelStride + p);
        }
      }
    });
  }
}

template <typename In>
void writePartAs(const ChannelNormProblem& problem, const ChannelNormPart& part) {
  switch (problem.out.scalar_type()) {
    case c10::ScalarType::Half:
      writePart<In, c10::Half>(problem, part);
      break;
    case c10::ScalarType::BFloat16:
      writePart<In, c10::BFloat16>(problem, part);
      break;
    default:
      writePart<In, float>(problem, part);
  }
}

at::Tensor fusedChannelNormCpu(
    at::TensorList parts,
    c10::IntArrayRef groups,
    const c10::List<std::optional<at::Tensor>>& scales,
    const c10::List<std::optional<at::Tensor>>& shifts,
    double eps,
    bool relu,
    c10::ScalarType outDtype) {
  const ChannelNormProblem problem = prepareChannelNorm(parts, groups, scales, shifts, eps, relu, outDtype);
  if (problem.out.numel() == 0) {
    return problem.out;
  }
  for (const ChannelNormPart& part : problem.parts) {
    switch (part.input.scalar_type()) {
      case c10::ScalarType::Half:
        writePartAs<c10::Half>(problem, part);
        break;
      case c10::ScalarType::BFloat16:
        writePartAs<c10::BFloat16>(problem, part);
        break;
      default:
        writePartAs<float>(problem, part);
    }
  }
  return problem.out;
}

} // namespace

TORCH_LIBRARY_IMPL(torch_mp, CPU, m) {
  m.impl("fused_channel_norm", &fusedChannelNormCpu);
}

} // namespace torch_mp::kernels
