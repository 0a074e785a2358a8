// torch_mp::fused_channel_norm on the CPU (kernels/fused_channel_norm.h). Per part and sample, one pass sums each
// channel's values and squares in double (channels innermost where they are fastest in memory, so the pass reads
// memory in order), giving per group mean = S / M and biased var = max(Q / M - mean^2, 0): one read of the input, and
// double's 53 bits keep the difference accurate to ~1e-16 of mean^2, far inside fp32 statistics for any input whose
// |mean| / std is below ~1e4 (a Welford pass in fp32 would need a division per element). Then per (sample, channel)
// a = rstd * scale, b = shift - mean * a in fp32, and one pass writes relu?(x * a + b) as out_dtype. Samples (stats)
// and pixels (the write) run in parallel (at::parallel_for; compiled with -fopenmp).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <torch/library.h>

#include <cmath>
#include <vector>

#include "kernels/fused_channel_norm.h"

namespace torch_mp::kernels {
namespace {

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
  const bool relu = problem.relu;
  auto value = [&](int64_t n, int64_t c, float x) {
    const float y = x * affine.a[n * channels + c] + affine.b[n * channels + c];
    return static_cast<Out>(relu && y < 0.0f ? 0.0f : y);  // as ATen's relu (clamp_min): NaN and -0 kept
  };
  if (problem.outChannelStride == 1) {  // channels fastest in the output: pixel by pixel
    at::parallel_for(0, problem.samples * problem.pixels, 256, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const int64_t n = i / problem.pixels;
        const int64_t p = i % problem.pixels;
        const In* source = data + n * part.sampleStride + p * part.pixelStride;
        Out* target = out + n * problem.outSampleStride + p * problem.outPixelStride;
        for (int64_t c = 0; c < channels; ++c) {
          target[c] = value(n, c, static_cast<float>(source[c * part.channelStride]));
        }
      }
    });
  } else {  // contiguous output: channel by channel
    at::parallel_for(0, problem.samples * channels, 1, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const int64_t n = i / channels;
        const int64_t c = i % channels;
        const In* source = data + n * part.sampleStride + c * part.channelStride;
        Out* target = out + n * problem.outSampleStride + c * problem.outChannelStride;
        for (int64_t p = 0; p < problem.pixels; ++p) {
          target[p] = value(n, c, static_cast<float>(source[p * part.pixelStride]));
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
