// torch_mp::fused_channel_norm: the schema and what every backend's kernel shares (kernels/fused_channel_norm.h).
#include "kernels/fused_channel_norm.h"

#include <ATen/ATen.h>
#include <torch/library.h>

#include "kernels/dispatcher_kernels.h"
#include "kernels/fused_pointwise.h"

namespace torch_mp::kernels {
namespace {

// Whether the spatial dims (2..) of `tensor` collapse into one index with a single stride.
bool spatialCollapses(const at::Tensor& tensor) {
  for (int64_t d = 2; d + 1 < tensor.dim(); ++d) {
    if (tensor.size(d + 1) != 1 && tensor.stride(d) != tensor.stride(d + 1) * tensor.size(d + 1)) {
      return false;
    }
  }
  return true;
}

// The per-channel fp32 factor on the part's device, or `fill` where the op got None.
at::Tensor perChannel(const std::optional<at::Tensor>& given, const at::Tensor& input, double fill, const char* what) {
  const at::TensorOptions options = input.options().dtype(at::kFloat);
  if (!given || !given->defined()) {
    return at::full({input.size(1)}, fill, options);
  }
  TORCH_CHECK(given->numel() == input.size(1), "torch_mp::fused_channel_norm: a ", what, " of ", given->numel(),
              " elements for ", input.size(1), " channels");
  return given->reshape({-1}).to(options).contiguous();
}

} // namespace

bool hasFusedChannelNormKernel(c10::DeviceType device) {
  return hasKernelFor(c10::OperatorName(kFusedChannelNormOp, ""), device);
}

ChannelNormProblem prepareChannelNorm(
    at::TensorList parts,
    c10::IntArrayRef groups,
    const c10::List<std::optional<at::Tensor>>& scales,
    const c10::List<std::optional<at::Tensor>>& shifts,
    double eps,
    bool relu,
    c10::ScalarType outDtype) {
  TORCH_CHECK(!parts.empty(), "torch_mp::fused_channel_norm: needs at least one part");
  TORCH_CHECK(groups.size() == parts.size() && scales.size() == parts.size() && shifts.size() == parts.size(),
              "torch_mp::fused_channel_norm: groups, scales and shifts need one entry per part");
  TORCH_CHECK(isPointwiseDtype(outDtype), "torch_mp::fused_channel_norm: cannot write ", outDtype);
  const at::Tensor& first = parts[0];
  TORCH_CHECK(first.dim() >= 3, "torch_mp::fused_channel_norm: parts are (N, C, *spatial), got ", first.dim(),
              " dims");
  ChannelNormProblem problem;
  problem.eps = eps;
  problem.relu = relu;
  problem.samples = first.size(0);
  problem.pixels = 1;
  for (int64_t d = 2; d < first.dim(); ++d) {
    problem.pixels *= first.size(d);
  }
  int64_t channels = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    const at::Tensor& input = parts[i];
    TORCH_CHECK(isPointwiseDtype(input.scalar_type()), "torch_mp::fused_channel_norm: cannot read ",
                input.scalar_type());
    TORCH_CHECK(input.device() == first.device(), "torch_mp::fused_channel_norm: parts on ", first.device(),
                " and ", input.device());
    TORCH_CHECK(input.dim() == first.dim() && input.size(0) == first.size(0) &&
                    input.sizes().slice(2) == first.sizes().slice(2),
                "torch_mp::fused_channel_norm: part ", i, " has sizes ", input.sizes(), ", part 0 ", first.sizes(),
                ": only the channels may differ");
    const int64_t partGroups = groups[i] == -1 ? input.size(1) : groups[i];  // -1: one group per channel
    TORCH_CHECK(partGroups >= 0 && (partGroups == 0 || input.size(1) % partGroups == 0),
                "torch_mp::fused_channel_norm: ", input.size(1), " channels do not split into ", partGroups,
                " groups");
    ChannelNormPart part;
    part.input = spatialCollapses(input) ? input : input.contiguous();
    part.channels = input.size(1);
    part.groups = partGroups;
    part.offset = channels;
    part.sampleStride = part.input.stride(0);
    part.channelStride = part.input.stride(1);
    part.pixelStride = part.input.dim() > 2 ? part.input.stride(part.input.dim() - 1) : 1;
    part.scale = perChannel(scales.get(i), input, 1.0, "scale");
    part.shift = perChannel(shifts.get(i), input, 0.0, "shift");
    channels += part.channels;
    problem.parts.push_back(std::move(part));
  }
  std::vector<int64_t> sizes = first.sizes().vec();
  sizes[1] = channels;
  // channels fastest when the first part has them fastest (an NHWC activation and its slices), else contiguous
  const bool channelsLast = first.size(1) > 1 && first.stride(1) == 1;
  std::vector<int64_t> strides(sizes.size());
  if (channelsLast) {
    int64_t stride = channels;
    for (int64_t d = static_cast<int64_t>(sizes.size()) - 1; d >= 2; --d) {
      strides[d] = stride;
      stride *= sizes[d];
    }
    strides[1] = 1;
    strides[0] = stride;
  } else {
    int64_t stride = 1;
    for (int64_t d = static_cast<int64_t>(sizes.size()) - 1; d >= 0; --d) {
      strides[d] = stride;
      stride *= sizes[d];
    }
  }
  problem.out = at::empty_strided(sizes, strides, first.options().dtype(outDtype));
  problem.outSampleStride = strides[0];
  problem.outChannelStride = strides[1];
  problem.outPixelStride = channelsLast ? channels : 1;
  return problem;
}

TORCH_LIBRARY_FRAGMENT(torch_mp, m) {
  m.def(
      "fused_channel_norm(Tensor[] parts, int[] groups, Tensor?[] scales, Tensor?[] shifts, float eps, bool relu, "
      "ScalarType out_dtype) -> Tensor");
}

} // namespace torch_mp::kernels
