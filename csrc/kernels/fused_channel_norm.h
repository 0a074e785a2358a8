// torch_mp::fused_channel_norm: instance / group norms, inference batch norms and plain copies of tensors split along
// channels, their concatenation along dim 1 and a following relu, in one read of each input and one write.
//
//   torch_mp::fused_channel_norm(Tensor[] parts, int[] groups, Tensor?[] scales, Tensor?[] shifts, float eps,
//                                bool relu, ScalarType out_dtype) -> Tensor
//
//   out = [relu](cat([norm_0(parts[0]), norm_1(parts[1]), ...], dim=1)), written once as out_dtype
//
// Each part is an (N, C_i, *spatial) tensor (rank >= 3; N and spatial sizes the same for all parts), fp32, fp16 or
// bf16, read in place in any layout whose spatial dims collapse into one (NCHW contiguous, channels_last, or a channel
// slice of either: what split / narrow along dim 1 give); other strides are read from a contiguous copy. Part i with
// groups[i] = G > 0 is group-normalised: per sample and group of C_i / G channels, mean and biased variance over its
// channels and pixels, y = (x - mean) / sqrt(var + eps); groups[i] = -1 is one group per channel (an instance norm,
// whatever C_i is at run time). Part i with groups[i] = 0 is not normalised. Either way y is then scaled and shifted
// per channel by scales[i] / shifts[i] (C_i elements, any floating dtype, taken as fp32; None: 1 / 0): for groups 0
// that is an inference batch norm whose scale w / sqrt(running_var + eps) and shift b - running_mean * scale the
// caller computed, or with neither a plain copy (a cast where the part's dtype is not out_dtype).
//
// Numerics as ATen's CPU kernels: statistics in fp32 or wider, then per (sample, channel) a = rstd * scale,
// b = shift - mean * a, y = x * a + b in fp32, relu (NaN kept), one rounding to out_dtype. ATen's results agree within
// the rounding of the statistics (tests/cpp/test_fused_channel_norm.cpp states the bounds); a relu of an fp16 / bf16
// value equals the relu before rounding it, so a relu after a low-precision cat is exact to fold.
//
// The output is channels_last-like (channels fastest, then the collapsed spatial dims, then N) where parts[0] has
// channels fastest (stride(1) == 1), else contiguous. Backends: kernels/cpu/fused_channel_norm.cpp (always) and
// kernels/cuda/fused_channel_norm.cu (CUDA builds), registered as torch_mp::fused_pointwise's are.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/DeviceType.h>

#include <cstdint>
#include <optional>
#include <vector>

namespace torch_mp::kernels {

constexpr const char* kFusedChannelNormOp = "torch_mp::fused_channel_norm";

// Whether the op has a kernel for tensors on devices of this type (as hasFusedPointwiseKernel).
bool hasFusedChannelNormKernel(c10::DeviceType device);

// One part as a backend's kernel reads it: element (n, c, p) of `input` (p: the collapsed spatial index) at
// data + n * sampleStride + c * channelStride + p * pixelStride; its output channels begin at `offset`.
struct ChannelNormPart {
  at::Tensor input;
  int64_t channels = 0;
  int64_t groups = 0;
  int64_t offset = 0;
  int64_t sampleStride = 0;
  int64_t channelStride = 0;
  int64_t pixelStride = 0;
  at::Tensor scale;  // fp32, `channels` elements, on the input's device (ones where the op got None)
  at::Tensor shift;  // fp32, likewise (zeros)
};

// What every backend runs on: the checked parts, the output (N, sum C_i, *spatial) and its strides in the same terms.
struct ChannelNormProblem {
  std::vector<ChannelNormPart> parts;
  at::Tensor out;
  int64_t samples = 0;
  int64_t pixels = 0;
  int64_t outSampleStride = 0;
  int64_t outChannelStride = 0;
  int64_t outPixelStride = 0;
  double eps = 0.0;
  bool relu = false;
};

// The argument checks and layout decisions every backend shares; the output is allocated, not yet written.
ChannelNormProblem prepareChannelNorm(
    at::TensorList parts,
    c10::IntArrayRef groups,
    const c10::List<std::optional<at::Tensor>>& scales,
    const c10::List<std::optional<at::Tensor>>& shifts,
    double eps,
    bool relu,
    c10::ScalarType outDtype);

} // namespace torch_mp::kernels
