#include "core/op_facts.h"

#include <unordered_map>

namespace torch_mp::core {
namespace {

constexpr CastFusion kDtypeArgument = CastFusion::kDtypeArgument;
constexpr CastFusion kMixedTypeNormOnCpu = CastFusion::kMixedTypeNormOnCpu;
constexpr CastFusion kMixedTypeNorm = CastFusion::kMixedTypeNorm;
constexpr FlopFormula kConvolution = FlopFormula::kConvolution;
constexpr FlopFormula kTransposedConvolution = FlopFormula::kTransposedConvolution;
constexpr FlopFormula kGenericConvolution = FlopFormula::kGenericConvolution;
constexpr FlopFormula kContraction = FlopFormula::kContraction;
constexpr FlopFormula kBiasedContraction = FlopFormula::kBiasedContraction;
constexpr FlopFormula kAttention = FlopFormula::kAttention;
constexpr FlopFormula kMultiHeadAttention = FlopFormula::kMultiHeadAttention;
constexpr FlopFormula kTransformerEncoderLayer = FlopFormula::kTransformerEncoderLayer;
constexpr FlopFormula kRecurrent = FlopFormula::kRecurrent;
constexpr LayoutRole kKeeps = LayoutRole::kKeepsChannelsLast;
constexpr LayoutRole kMetadata = LayoutRole::kReadsMetadataOnly;
constexpr LayoutRole kCopiesContiguous = LayoutRole::kCopiesContiguous;
constexpr LayoutRole kNormalizesSpatially = LayoutRole::kNormalizesSpatially;
constexpr ZeroSensitivity kZeroAlways = ZeroSensitivity::kAlways;

// TensorIterator gives an elementwise op's output the layout of its inputs (the first input's when they differ).
constexpr const char* kElementwiseLayout = "elementwise (TensorIterator): the output takes the inputs' layout";
constexpr const char* kPerChannelLayout = "per-channel kernel with an NHWC path in cuDNN / ATen";
constexpr const char* kMetadataOnly = "reads sizes, dtype or device only";
// A view of an NHWC tensor is a strided tensor with its channels still innermost (a channel slice of [N, C, H, W] has
// strides [HWC, 1, WC, C]), which elementwise kernels and cuDNN read as NHWC: suggest_memory_format orders strides,
// it does not ask for density. No copy back to NCHW first.
constexpr const char* kNhwcView = "views without a copy; the strided NHWC result is read as it is";
constexpr const char* kListElement = "passes a list's tensor on as it is";
constexpr const char* kSpatialStatistics =
    "ATen reshapes to NCHW (instance_norm: batch_norm on a (1, N*C, H, W) view; group_norm: contiguous input)";
constexpr const char* kDivisor = "a divisor of 0 gives inf or NaN";
constexpr const char* kLogOfZero = "the log of 0 is -inf";

// clang-format off
const OpFacts kOpFacts[] = {
    {.op = "aten::__getitem__", .layout = kKeeps, .layoutReason = kListElement},
    {.op = "aten::__is__", .layout = kMetadata, .layoutReason = "compares identity, reads no element"},
    {.op = "aten::__isnot__", .layout = kMetadata, .layoutReason = "compares identity, reads no element"},
    {.op = "aten::_convolution", .flops = kGenericConvolution, .layout = kKeeps,
     .layoutReason = "traced convolution: same layout rule as aten::conv2d"},
    {.op = "aten::_native_multi_head_attention", .flops = kMultiHeadAttention},
    {.op = "aten::_transformer_encoder_layer_fwd", .flops = kTransformerEncoderLayer},
    {.op = "aten::adaptive_avg_pool2d", .layout = kKeeps,
     .layoutReason = "NHWC pooling kernel; output keeps the input's layout"},
    {.op = "aten::add", .layout = kKeeps, .layoutReason = kElementwiseLayout},
    {.op = "aten::addbmm", .flops = kBiasedContraction},
    {.op = "aten::addcdiv", .zeroSensitivity = kZeroAlways, .zeroSensitiveInput = 2, .zeroReason = kDivisor},
    {.op = "aten::addmm", .flops = kBiasedContraction, .rightHandMatrix = 2,
     .rightHandMatrixReason = "mat2: traced nn.Linear, Hugging Face's Conv1D (GPT-2)"},
    {.op = "aten::avg_pool2d", .layout = kKeeps,
     .layoutReason = "NHWC pooling kernel; output keeps the input's layout"},
    {.op = "aten::baddbmm", .flops = kBiasedContraction},
    {.op = "aten::batch_norm", .castFusion = kMixedTypeNorm, .normParameters = {1, 2, 3, 4}, .layout = kKeeps,
     .layoutReason = kPerChannelLayout},
    {.op = "aten::bmm", .flops = kContraction},
    {.op = "aten::cat", .layout = kKeeps,
     .layoutReason = "concatenating inputs of one layout writes that layout (the list is read here)"},
    {.op = "aten::chunk", .layout = kKeeps, .layoutReason = kNhwcView},
    {.op = "aten::clamp", .layout = kKeeps, .layoutReason = kElementwiseLayout},
    {.op = "aten::clamp_max", .layout = kKeeps, .layoutReason = kElementwiseLayout},
    {.op = "aten::clamp_min", .layout = kKeeps, .layoutReason = kElementwiseLayout},
    {.op = "aten::_unsafe_view", .preservesDtype = true},
    {.op = "aten::alias", .preservesDtype = true},
    {.op = "aten::clone", .preservesDtype = true},
    {.op = "aten::contiguous", .preservesDtype = true, .layout = kCopiesContiguous,
     .layoutReason = "a copy the model makes for NCHW kernels; NHWC readers need none"},
    {.op = "aten::conv1d", .flops = kConvolution},
    {.op = "aten::conv2d", .flops = kConvolution, .layout = kKeeps,
     .layoutReason = "cuDNN convolves NHWC natively and writes NHWC when its weight is channels_last"},
    {.op = "aten::conv3d", .flops = kConvolution},
    {.op = "aten::conv_transpose1d", .flops = kTransposedConvolution},
    {.op = "aten::conv_transpose2d", .flops = kTransposedConvolution},
    {.op = "aten::conv_transpose3d", .flops = kTransposedConvolution},
    {.op = "aten::convolution", .flops = kGenericConvolution},
    {.op = "aten::cudnn_convolution_add_relu", .layout = kKeeps,
     .layoutReason = "cuDNN fused convolution: same layout rule as aten::conv2d"},
    {.op = "aten::cudnn_convolution_relu", .layout = kKeeps,
     .layoutReason = "cuDNN fused convolution: same layout rule as aten::conv2d"},
    {.op = "aten::cumprod", .castFusion = kDtypeArgument},
    {.op = "aten::cumsum", .castFusion = kDtypeArgument},
    {.op = "aten::detach", .preservesDtype = true},
    {.op = "aten::dim", .layout = kMetadata, .layoutReason = kMetadataOnly},
    {.op = "aten::div", .layout = kKeeps, .layoutReason = kElementwiseLayout, .zeroSensitivity = kZeroAlways,
     .zeroSensitiveInput = 1, .zeroReason = kDivisor},
    {.op = "aten::dropout", .preservesDtype = true, .layout = kKeeps, .layoutReason = "identity at inference"},
    {.op = "aten::elu", .layout = kKeeps, .layoutReason = kElementwiseLayout},
    {.op = "aten::embedding", .tableLookup = "gathers rows of an embedding table"},
    {.op = "aten::expand", .preservesDtype = true},
    {.op = "aten::expand_as", .preservesDtype = true},
    {.op = "aten::flatten", .preservesDtype = true},
    {.op = "aten::floor_divide", .zeroSensitivity = kZeroAlways, .zeroSensitiveInput = 1, .zeroReason = kDivisor},
    {.op = "aten::fmod", .zeroSensitivity = kZeroAlways, .zeroSensitiveInput = 1,
     .zeroReason = "the remainder of a division by 0 is NaN"},
    {.op = "aten::gather", .tableLookup = "reads a table at an index tensor"},
    {.op = "aten::gelu", .layout = kKeeps, .layoutReason = kElementwiseLayout},
    {.op = "aten::group_norm", .castFusion = kMixedTypeNormOnCpu, .normParameters = {2, 3},
     .layout = kNormalizesSpatially, .layoutReason = kSpatialStatistics},
    {.op = "aten::gru", .flops = kRecurrent},
    {.op = "aten::hardsigmoid", .layout = kKeeps, .layoutReason = kElementwiseLayout},
    {.op = "aten::hardswish", .layout = kKeeps, .layoutReason = kElementwiseLayout},
    {.op = "aten::hardtanh", .layout = kKeeps, .layoutReason = kElementwiseLayout},
    {.op = "aten::index", .tableLookup = "reads a table at index tensors (positional and relative-position tables)"},
    {.op = "aten::index_select", .tableLookup = "selects rows of a table along one dim"},
    {.op = "aten::instance_norm", .castFusion = kMixedTypeNorm, .normParameters = {1, 2, 3, 4},
     .layout = kNormalizesSpatially, .layoutReason = kSpatialStatistics},
    {.op = "aten::layer_norm", .castFusion = kMixedTypeNormOnCpu, .normParameters = {2, 3}},
    {.op = "aten::leaky_relu", .layout = kKeeps, .layoutReason = kElementwiseLayout},
    {.op = "aten::len", .layout = kMetadata, .layoutReason = kMetadataOnly},
    {.op = "aten::linear", .flops = kContraction},
    {.op = "aten::log", .zeroSensitivity = kZeroAlways, .zeroSensitiveInput = 0, .zeroReason = kLogOfZero},
    {.op = "aten::log10", .zeroSensitivity = kZeroAlways, .zeroSensitiveInput = 0, .zeroReason = kLogOfZero},
    {.op = "aten::log2", .zeroSensitivity = kZeroAlways, .zeroSensitiveInput = 0, .zeroReason = kLogOfZero},
    {.op = "aten::log_softmax", .castFusion = kDtypeArgument},
    {.op = "aten::lstm", .flops = kRecurrent},
    {.op = "aten::matmul", .flops = kContraction, .rightHandMatrix = 1,
     .rightHandMatrixReason = "a 2-d `other` is mm's mat2 whatever the left operand's rank"},
    {.op = "aten::max_pool2d", .layout = kKeeps,
     .layoutReason = "NHWC pooling kernel; output keeps the input's layout"},
    {.op = "aten::mean", .castFusion = kDtypeArgument},
    {.op = "aten::mish", .layout = kKeeps, .layoutReason = kElementwiseLayout},
    {.op = "aten::mm", .flops = kContraction, .rightHandMatrix = 1, .rightHandMatrixReason = "mat2"},
    {.op = "aten::mul", .layout = kKeeps, .layoutReason = kElementwiseLayout},
    {.op = "aten::narrow", .preservesDtype = true, .layout = kKeeps, .layoutReason = kNhwcView},
    {.op = "aten::neg", .layout = kKeeps, .layoutReason = kElementwiseLayout},
    {.op = "aten::numel", .layout = kMetadata, .layoutReason = kMetadataOnly},
    {.op = "aten::permute", .preservesDtype = true},
    {.op = "aten::pow", .zeroSensitivity = ZeroSensitivity::kNegativeExponent, .zeroSensitiveInput = 0,
     .zeroReason = "0 to a negative power is inf"},
    {.op = "aten::prod", .castFusion = kDtypeArgument},
    {.op = "aten::reciprocal", .zeroSensitivity = kZeroAlways, .zeroSensitiveInput = 0,
     .zeroReason = "the reciprocal of 0 is inf"},
    {.op = "aten::relu", .layout = kKeeps, .layoutReason = kElementwiseLayout},
    {.op = "aten::relu6", .layout = kKeeps, .layoutReason = kElementwiseLayout},
    {.op = "aten::remainder", .zeroSensitivity = kZeroAlways, .zeroSensitiveInput = 1,
     .zeroReason = "the remainder of a division by 0 is NaN"},
    {.op = "aten::reshape", .preservesDtype = true},
    {.op = "aten::reshape_as", .preservesDtype = true},
    {.op = "aten::rnn_relu", .flops = kRecurrent},
    {.op = "aten::rnn_tanh", .flops = kRecurrent},
    {.op = "aten::rsqrt", .zeroSensitivity = kZeroAlways, .zeroSensitiveInput = 0,
     .zeroReason = "the reciprocal square root of 0 is inf"},
    {.op = "aten::scaled_dot_product_attention", .flops = kAttention},
    {.op = "aten::_scaled_dot_product_flash_attention_for_cpu", .flops = kAttention},
    {.op = "aten::_scaled_dot_product_flash_attention", .flops = kAttention},
    {.op = "aten::_scaled_dot_product_efficient_attention", .flops = kAttention},
    {.op = "aten::_scaled_dot_product_cudnn_attention", .flops = kAttention},
    {.op = "aten::select", .preservesDtype = true},
    {.op = "aten::sigmoid", .layout = kKeeps, .layoutReason = kElementwiseLayout},
    {.op = "aten::silu", .layout = kKeeps, .layoutReason = kElementwiseLayout},
    {.op = "aten::size", .layout = kMetadata, .layoutReason = kMetadataOnly},
    {.op = "aten::slice", .preservesDtype = true, .layout = kKeeps, .layoutReason = kNhwcView},
    {.op = "aten::softmax", .castFusion = kDtypeArgument},
    {.op = "aten::squeeze", .preservesDtype = true},
    {.op = "aten::split", .layout = kKeeps, .layoutReason = kNhwcView},
    {.op = "aten::split_with_sizes", .layout = kKeeps, .layoutReason = kNhwcView},
    {.op = "aten::sub", .layout = kKeeps, .layoutReason = kElementwiseLayout},
    {.op = "aten::sum", .castFusion = kDtypeArgument},
    {.op = "aten::t", .preservesDtype = true},
    {.op = "aten::take", .tableLookup = "reads a flattened table at an index tensor"},
    {.op = "aten::tanh", .layout = kKeeps, .layoutReason = kElementwiseLayout},
    {.op = "aten::to", .layout = kKeeps, .layoutReason = "a dtype cast keeps the memory format (preserve_format)"},
    {.op = "aten::transpose", .preservesDtype = true},
    {.op = "aten::true_divide", .zeroSensitivity = kZeroAlways, .zeroSensitiveInput = 1, .zeroReason = kDivisor},
    {.op = "aten::type_as", .layout = kKeeps,
     .layoutReason = "a dtype cast keeps the memory format (preserve_format)"},
    {.op = "aten::unbind", .layout = kKeeps, .layoutReason = kNhwcView},
    {.op = "aten::unflatten", .preservesDtype = true},
    {.op = "aten::unsqueeze", .preservesDtype = true},
    {.op = "aten::upsample_bilinear2d", .layout = kKeeps,
     .layoutReason = "NHWC upsampling kernel; output keeps the input's layout"},
    {.op = "aten::upsample_nearest2d", .layout = kKeeps,
     .layoutReason = "NHWC upsampling kernel; output keeps the input's layout"},
    {.op = "aten::view", .preservesDtype = true},
    {.op = "aten::view_as", .preservesDtype = true},
    {.op = "prim::ListConstruct", .layout = kKeeps,
     .layoutReason = "a list of tensors is only passed on; its readers decide (cat keeps NHWC)"},
    {.op = "prim::ListUnpack", .layout = kKeeps, .layoutReason = kListElement},
    {.op = "prim::device", .layout = kMetadata, .layoutReason = kMetadataOnly},
    {.op = "prim::dtype", .layout = kMetadata, .layoutReason = kMetadataOnly},
    {.op = "prim::is_cuda", .layout = kMetadata, .layoutReason = kMetadataOnly},
    {.op = "prim::shape", .layout = kMetadata, .layoutReason = kMetadataOnly},
    {.op = "prim::unchecked_cast", .preservesDtype = true},
    {.op = "torch_mp::fused_channel_norm", .layout = kKeeps,
     .layoutReason = "writes channels fastest where its first part has them fastest (NHWC in, NHWC out)"},
    {.op = "torch_mp::fused_pointwise", .layout = kKeeps,
     .layoutReason = "inputs of one dense layout are read in memory order; out is empty_like"},
};
// clang-format on

} // namespace

const OpFacts& factsOf(const std::string& op) {
  static const std::unordered_map<std::string, const OpFacts*> byName = [] {
    std::unordered_map<std::string, const OpFacts*> map;
    for (const OpFacts& facts : kOpFacts) {
      map.emplace(facts.op, &facts);
    }
    return map;
  }();
  static const OpFacts kNoFacts{""};
  auto it = byName.find(op);
  return it == byName.end() ? kNoFacts : *it->second;
}

} // namespace torch_mp::core
