// torch_mp::fused_channel_norm on CUDA (kernels/fused_channel_norm.h). Per normalising part, three launches:
//   1. per (sample, channel) mean and M2 over the pixels, Welford in fp32 per thread, merged across threads by
//      Chan's formula (exact for merging, no cancellation of a sum of squares): with channels fastest in memory a block
//      takes 32 adjacent channels of one sample, a warp reading 32 consecutive channels of a pixel at a time
//      (coalesced), its 8 warps 8 pixel rows; otherwise a block takes one channel of one sample, its threads reading
//      consecutive pixels;
//   2. per (sample, group) the channels' statistics merged the same way into mean and rstd = 1 / sqrt(var + eps);
//   3. the write, shared with the other parts: one thread per output element in the output's memory order (a grid-
//      stride loop), a = rstd * scale, b = shift - mean * a, relu?(x * a + b) rounded once to out_dtype (relu as
//      ATen's CUDA clamp_min: NaN kept, -0 becomes +0).
// Results agree with the CPU kernel within fp32 statistics rounding (tests/python/test_cuda_fused_kernels.py), not
// bit for bit: the statistics are summed in another order and precision.
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "kernels/fused_channel_norm.h"

namespace torch_mp::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int kLanes = 32;                   // channels per block where channels are fastest
constexpr int kRows = kThreads / kLanes;     // pixel rows per block there

// A Welford accumulator: count, mean, sum of squared deviations.
struct Moments {
  float count;
  float mean;
  float m2;
};

__device__ __forceinline__ void push(Moments& m, float x) {
  m.count += 1.0f;
  const float delta = x - m.mean;
  m.mean += delta / m.count;
  m.m2 += delta * (x - m.mean);
}

// Chan et al.'s merge of two accumulators.
__device__ __forceinline__ Moments merge(const Moments& a, const Moments& b) {
  const float count = a.count + b.count;
  if (count == 0.0f) {
    return a;
  }
  const float delta = b.mean - a.mean;
  const float share = b.count / count;
  return {count, a.mean + delta * share, a.m2 + b.m2 + delta * delta * a.count * share};
}

__device__ __forceinline__ Moments shuffleDown(const Moments& m, int offset) {
  return {__shfl_down_sync(0xffffffffu, m.count, offset), __shfl_down_sync(0xffffffffu, m.mean, offset),
          __shfl_down_sync(0xffffffffu, m.m2, offset)};
}

// Per (sample, channel) moments, channels fastest: block (channel tile, sample), thread (lane, row).
template <typename In>
__global__ void __launch_bounds__(kThreads) channelMomentsChannelsLast(
    const In* data, int64_t channels, int64_t pixels, int64_t sampleStride, int64_t pixelStride, float* means,
    float* m2s) {
  __shared__ Moments rows[kRows][kLanes];
  const int64_t n = blockIdx.y;
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kLanes + threadIdx.x;
  Moments m{0.0f, 0.0f, 0.0f};
  if (c < channels) {
    const In* source = data + n * sampleStride + c;
    for (int64_t p = threadIdx.y; p < pixels; p += kRows) {
      push(m, static_cast<float>(source[p * pixelStride]));
    }
  }
  rows[threadIdx.y][threadIdx.x] = m;
  __syncthreads();
  if (threadIdx.y == 0 && c < channels) {
    for (int r = 1; r < kRows; ++r) {
      m = merge(m, rows[r][threadIdx.x]);
    }
    means[n * channels + c] = m.mean;
    m2s[n * channels + c] = m.m2;
  }
}

// Per (sample, channel) moments, pixels fastest: block (channel, sample), threads along the pixels.
template <typename In>
__global__ void __launch_bounds__(kThreads) channelMomentsContiguous(
    const In* data, int64_t channels, int64_t pixels, int64_t sampleStride, int64_t channelStride,
    int64_t pixelStride, float* means, float* m2s) {
  __shared__ Moments warps[kThreads / 32];
  const int64_t n = blockIdx.y;
  const int64_t c = blockIdx.x;
  const In* source = data + n * sampleStride + c * channelStride;
  Moments m{0.0f, 0.0f, 0.0f};
  for (int64_t p = threadIdx.x; p < pixels; p += kThreads) {
    push(m, static_cast<float>(source[p * pixelStride]));
  }
  for (int offset = 16; offset > 0; offset /= 2) {
    m = merge(m, shuffleDown(m, offset));
  }
  if (threadIdx.x % 32 == 0) {
    warps[threadIdx.x / 32] = m;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kThreads / 32; ++w) {
      m = merge(m, warps[w]);
    }
    means[n * channels + c] = m.mean;
    m2s[n * channels + c] = m.m2;
  }
}

// Per (sample, group): the group's channels merged (each over `pixels` values), then mean and rstd.
__global__ void groupStatistics(
    const float* means, const float* m2s, int64_t samples, int64_t channels, int64_t groups, int64_t pixels,
    double eps, float* groupMeans, float* groupRstds) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= samples * groups) {
    return;
  }
  const int64_t n = i / groups;
  const int64_t perGroup = channels / groups;
  Moments m{0.0f, 0.0f, 0.0f};
  for (int64_t c = (i % groups) * perGroup; c < (i % groups + 1) * perGroup; ++c) {
    m = merge(m, Moments{static_cast<float>(pixels), means[n * channels + c], m2s[n * channels + c]});
  }
  const float var = fmaxf(m.m2 / m.count, 0.0f);
  groupMeans[i] = m.mean;
  groupRstds[i] = static_cast<float>(1.0 / sqrt(static_cast<double>(var) + eps));
}

// The write of one part into its channels of the output. `groupMeans` null: a groups-0 part.
template <typename In, typename Out>
__global__ void __launch_bounds__(kThreads) writePart(
    const In* data, int64_t channels, int64_t pixels, int64_t samples, int64_t sampleStride, int64_t channelStride,
    int64_t pixelStride, const float* scale, const float* shift, const float* groupMeans, const float* groupRstds,
    int64_t groups, Out* out, int64_t outSampleStride, int64_t outChannelStride, int64_t outPixelStride, bool relu) {
  const int64_t numel = samples * channels * pixels;
  const bool channelsFastest = outChannelStride == 1;
  const int64_t perGroup = groups > 0 ? channels / groups : 1;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < numel;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t n, c, p;
    if (channelsFastest) {
      c = i % channels;
      p = (i / channels) % pixels;
      n = i / (channels * pixels);
    } else {
      p = i % pixels;
      c = (i / pixels) % channels;
      n = i / (channels * pixels);
    }
    float a = scale[c];
    float b = shift[c];
    if (groupMeans != nullptr) {
      const int64_t g = n * groups + c / perGroup;
      a = groupRstds[g] * scale[c];
      b = shift[c] - groupMeans[g] * a;
    }
    float y = static_cast<float>(data[n * sampleStride + c * channelStride + p * pixelStride]) * a + b;
    if (relu) {
      y = isnan(y) ? y : fmaxf(y, 0.0f);
    }
    out[n * outSampleStride + c * outChannelStride + p * outPixelStride] = static_cast<Out>(y);
  }
}

unsigned blocksFor(int64_t work) {
  const cudaDeviceProp* properties = at::cuda::getCurrentDeviceProperties();
  const int64_t resident =
      static_cast<int64_t>(properties->multiProcessorCount) * (properties->maxThreadsPerMultiProcessor / kThreads);
  return static_cast<unsigned>(std::max<int64_t>(1, std::min((work + kThreads - 1) / kThreads, resident)));
}

template <typename In, typename Out>
void runPart(const ChannelNormProblem& problem, const ChannelNormPart& part, cudaStream_t stream) {
  const In* data = static_cast<const In*>(part.input.const_data_ptr());
  at::Tensor groupMeans;
  at::Tensor groupRstds;
  if (part.groups > 0) {
    const at::TensorOptions options = part.input.options().dtype(at::kFloat);
    const at::Tensor means = at::empty({problem.samples, part.channels}, options);
    const at::Tensor m2s = at::empty({problem.samples, part.channels}, options);
    if (part.channelStride == 1) {
      const dim3 grid(static_cast<unsigned>((part.channels + kLanes - 1) / kLanes),
                      static_cast<unsigned>(problem.samples));
      channelMomentsChannelsLast<In><<<grid, dim3(kLanes, kRows), 0, stream>>>(
          data, part.channels, problem.pixels, part.sampleStride, part.pixelStride, means.mutable_data_ptr<float>(),
          m2s.mutable_data_ptr<float>());
    } else {
      const dim3 grid(static_cast<unsigned>(part.channels), static_cast<unsigned>(problem.samples));
      channelMomentsContiguous<In><<<grid, kThreads, 0, stream>>>(
          data, part.channels, problem.pixels, part.sampleStride, part.channelStride, part.pixelStride,
          means.mutable_data_ptr<float>(), m2s.mutable_data_ptr<float>());
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    groupMeans = at::empty({problem.samples, part.groups}, options);
    groupRstds = at::empty({problem.samples, part.groups}, options);
    const int64_t count = problem.samples * part.groups;
    groupStatistics<<<static_cast<unsigned>((count + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
        means.const_data_ptr<float>(), m2s.const_data_ptr<float>(), problem.samples, part.channels, part.groups,
        problem.pixels, problem.eps, groupMeans.mutable_data_ptr<float>(), groupRstds.mutable_data_ptr<float>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
  Out* out = static_cast<Out*>(problem.out.mutable_data_ptr()) + part.offset * problem.outChannelStride;
  writePart<In, Out><<<blocksFor(problem.samples * part.channels * problem.pixels), kThreads, 0, stream>>>(
      data, part.channels, problem.pixels, problem.samples, part.sampleStride, part.channelStride, part.pixelStride,
      part.scale.const_data_ptr<float>(), part.shift.const_data_ptr<float>(),
      groupMeans.defined() ? groupMeans.const_data_ptr<float>() : nullptr,
      groupRstds.defined() ? groupRstds.const_data_ptr<float>() : nullptr, part.groups, out,
      problem.outSampleStride, problem.outChannelStride, problem.outPixelStride, problem.relu);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

template <typename In>
void runPartAs(const ChannelNormProblem& problem, const ChannelNormPart& part, cudaStream_t stream) {
  switch (problem.out.scalar_type()) {
    case c10::ScalarType::Half:
      runPart<In, c10::Half>(problem, part, stream);
      break;
    case c10::ScalarType::BFloat16:
      runPart<In, c10::BFloat16>(problem, part, stream);
      break;
    default:
      runPart<In, float>(problem, part, stream);
  }
}

at::Tensor fusedChannelNormCuda(
    at::TensorList parts,
    c10::IntArrayRef groups,
    const c10::List<std::optional<at::Tensor>>& scales,
    const c10::List<std::optional<at::Tensor>>& shifts,
    double eps,
    bool relu,
    c10::ScalarType outDtype) {
  TORCH_CHECK(!parts.empty() && parts[0].is_cuda(), "torch_mp::fused_channel_norm: the CUDA kernel got a part on ",
              parts.empty() ? std::string("no device") : parts[0].device().str());
  const c10::cuda::CUDAGuard guard(parts[0].device());
  const ChannelNormProblem problem = prepareChannelNorm(parts, groups, scales, shifts, eps, relu, outDtype);
  if (problem.out.numel() == 0) {
    return problem.out;
  }
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  for (const ChannelNormPart& part : problem.parts) {
    switch (part.input.scalar_type()) {
      case c10::ScalarType::Half:
        runPartAs<c10::Half>(problem, part, stream);
        break;
      case c10::ScalarType::BFloat16:
        runPartAs<c10::BFloat16>(problem, part, stream);
        break;
      default:
        runPartAs<float>(problem, part, stream);
    }
  }
  return problem.out;
}

} // namespace

TORCH_LIBRARY_IMPL(torch_mp, CUDA, m) {
  m.impl("fused_channel_norm", &fusedChannelNormCuda);
}

} // namespace torch_mp::kernels
