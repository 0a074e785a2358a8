#include "core/op_policy.h"

#include <cstdint>
#include <utility>

namespace torch_mp::core {
namespace {

// Which default policies an entry belongs to.
enum TargetMask : uint8_t {
  kCudaF16 = 1 << 0,
  kCudaBF16 = 1 << 1,
  kCpuBF16 = 1 << 2,
  kCpuF16 = 1 << 3,
  kAll = kCudaF16 | kCudaBF16 | kCpuBF16 | kCpuF16,
  kAllButCpuF16 = kCudaF16 | kCudaBF16 | kCpuBF16,
};

uint8_t maskOf(Target target) {
  switch (target) {
    case Target::kCudaFloat16:
      return kCudaF16;
    case Target::kCudaBFloat16:
      return kCudaBF16;
    case Target::kCpuBFloat16:
      return kCpuBF16;
    case Target::kCpuFloat16:
      return kCpuF16;
  }
  return 0;
}

struct DefaultEntry {
  const char* op;
  OpCategory category;
  const char* reason;
  uint8_t targets;
};

constexpr OpCategory kLow = OpCategory::kLowPrecision;
constexpr OpCategory kFollow = OpCategory::kFollow;
constexpr OpCategory kWidest = OpCategory::kWidest;
constexpr OpCategory kFp32 = OpCategory::kFp32;

constexpr const char* kConv = "convolution: tensor cores / oneDNN, fp32 accumulation inside the kernel";
constexpr const char* kGemm = "matrix product: tensor cores (cuBLAS) / AVX512-BF16 (oneDNN), fp32 accumulation";
constexpr const char* kAttention = "fused attention: flash/memory-efficient kernels need low precision";
constexpr const char* kRnn = "recurrent layer: its gates are GEMMs (cuDNN / oneDNN RNN kernels)";
constexpr const char* kRnnCpuF16 = "recurrent layer: no fast fp16 RNN kernel on CPU, fp32 is faster and exact";
constexpr const char* kShape = "view or data movement: no arithmetic, exact in any dtype";
constexpr const char* kPool = "pooling: max is exact; averages accumulate in fp32 inside the kernel";
constexpr const char* kActivation = "pointwise activation: bounded error, autocast runs it in its input dtype";
constexpr const char* kArith = "pointwise arithmetic: one rounding per element, autocast runs it as it arrives";
constexpr const char* kCompare = "comparison or selection: exact on already-rounded inputs";
constexpr const char* kMetadata = "reads shape or rank only, never values";
constexpr const char* kContainer = "packs or unpacks tensors without touching them";
constexpr const char* kEval = "identity at inference time";
constexpr const char* kFactoryLike = "creates a tensor shaped and typed like its input";
constexpr const char* kPromote = "type-promoting op: mixing in an fp32 operand keeps fp32 (autocast 'promote')";
constexpr const char* kReduce = "reduction: long sums lose precision and overflow fp16";
constexpr const char* kSoftmax = "softmax: exp overflows fp16, sums lose precision";
constexpr const char* kTranscendental = "exp/log/pow family: overflows or loses precision in 16 bits";
constexpr const char* kNorm = "normalization: mean/variance statistics need fp32";
constexpr const char* kLoss = "loss: reduction over many terms";
constexpr const char* kDistance = "distance/norm: sums of squares overflow fp16";
constexpr const char* kInterpolate = "interpolation: weighted sums of neighbours, kept fp32 for accuracy";
constexpr const char* kExplicitCast = "explicit cast written by the model: keeps its target dtype";

// clang-format off
const DefaultEntry kDefaultEntries[] = {
    // --- always low precision -----------------------------------------------------------------------------
    {"aten::conv1d", kLow, kConv, kAll},
    {"aten::conv2d", kLow, kConv, kAll},
    {"aten::conv3d", kLow, kConv, kAll},
    {"aten::conv_transpose1d", kLow, kConv, kAll},
    {"aten::conv_transpose2d", kLow, kConv, kAll},
    {"aten::conv_transpose3d", kLow, kConv, kAll},
    {"aten::convolution", kLow, kConv, kAll},
    {"aten::_convolution", kLow, kConv, kAll},
    {"aten::conv_tbc", kLow, kConv, kAll},
    {"aten::prelu", kLow, "parametric relu: autocast lists it with the convolutions it follows", kAll},
    {"aten::linear", kLow, kGemm, kAll},
    {"aten::matmul", kLow, kGemm, kAll},
    {"aten::mm", kLow, kGemm, kAll},
    {"aten::bmm", kLow, kGemm, kAll},
    {"aten::mv", kLow, kGemm, kAll},
    {"aten::addmm", kLow, kGemm, kAll},
    {"aten::addmv", kLow, kGemm, kAll},
    {"aten::addr", kLow, kGemm, kAll},
    {"aten::addbmm", kLow, kGemm, kAll},
    {"aten::baddbmm", kLow, kGemm, kAll},
    {"aten::einsum", kLow, kGemm, kAll},
    {"aten::chain_matmul", kLow, kGemm, kAll},
    {"aten::linalg_multi_dot", kLow, kGemm, kAll},
    {"aten::linalg_vecdot", kLow, kGemm, kAll},
    {"aten::scaled_dot_product_attention", kLow, kAttention, kAll},
    {"aten::_native_multi_head_attention", kLow, kAttention, kAll},
    {"aten::_transformer_encoder_layer_fwd", kLow,
     "fused transformer layer (nn.TransformerEncoderLayer fast path): GEMMs and attention in low precision, its "
     "layer norms and softmax accumulate in fp32 inside the kernel", kAll},
    {"aten::lstm", kLow, kRnn, kAllButCpuF16},
    {"aten::gru", kLow, kRnn, kAllButCpuF16},
    {"aten::rnn_tanh", kLow, kRnn, kAllButCpuF16},
    {"aten::rnn_relu", kLow, kRnn, kAllButCpuF16},
    {"aten::lstm_cell", kLow, kRnn, kAllButCpuF16},
    {"aten::gru_cell", kLow, kRnn, kAllButCpuF16},
    {"aten::rnn_tanh_cell", kLow, kRnn, kAllButCpuF16},
    {"aten::rnn_relu_cell", kLow, kRnn, kAllButCpuF16},
    {"aten::lstm", kFp32, kRnnCpuF16, kCpuF16},
    {"aten::gru", kFp32, kRnnCpuF16, kCpuF16},
    {"aten::rnn_tanh", kFp32, kRnnCpuF16, kCpuF16},
    {"aten::rnn_relu", kFp32, kRnnCpuF16, kCpuF16},

    // --- follow: views and data movement ------------------------------------------------------------------
    {"aten::view", kFollow, kShape, kAll},
    {"aten::reshape", kFollow, kShape, kAll},
    {"aten::view_as", kFollow, kShape, kAll},
    {"aten::reshape_as", kFollow, kShape, kAll},
    {"aten::flatten", kFollow, kShape, kAll},
    {"aten::unflatten", kFollow, kShape, kAll},
    {"aten::squeeze", kFollow, kShape, kAll},
    {"aten::unsqueeze", kFollow, kShape, kAll},
    {"aten::permute", kFollow, kShape, kAll},
    {"aten::transpose", kFollow, kShape, kAll},
    {"aten::t", kFollow, kShape, kAll},
    {"aten::movedim", kFollow, kShape, kAll},
    {"aten::contiguous", kFollow, kShape, kAll},
    {"aten::expand", kFollow, kShape, kAll},
    {"aten::expand_as", kFollow, kShape, kAll},
    {"aten::slice", kFollow, kShape, kAll},
    {"aten::select", kFollow, kShape, kAll},
    {"aten::narrow", kFollow, kShape, kAll},
    {"aten::index", kFollow, kShape, kAll},
    {"aten::index_select", kFollow, kShape, kAll},
    {"aten::gather", kFollow, kShape, kAll},
    {"aten::masked_select", kFollow, kShape, kAll},
    {"aten::embedding", kFollow, kShape, kAll},
    {"aten::chunk", kFollow, kShape, kAll},
    {"aten::split", kFollow, kShape, kAll},
    {"aten::split_with_sizes", kFollow, kShape, kAll},
    {"aten::tensor_split", kFollow, kShape, kAll},
    {"aten::unbind", kFollow, kShape, kAll},
    {"aten::cat", kFollow, kShape, kAll},
    {"aten::concat", kFollow, kShape, kAll},
    {"aten::stack", kFollow, kShape, kAll},
    {"aten::repeat", kFollow, kShape, kAll},
    {"aten::tile", kFollow, kShape, kAll},
    {"aten::flip", kFollow, kShape, kAll},
    {"aten::roll", kFollow, kShape, kAll},
    {"aten::pad", kFollow, kShape, kAll},
    {"aten::constant_pad_nd", kFollow, kShape, kAll},
    {"aten::reflection_pad1d", kFollow, kShape, kAll},
    {"aten::reflection_pad2d", kFollow, kShape, kAll},
    {"aten::replication_pad1d", kFollow, kShape, kAll},
    {"aten::replication_pad2d", kFollow, kShape, kAll},
    {"aten::pixel_shuffle", kFollow, kShape, kAll},
    {"aten::pixel_unshuffle", kFollow, kShape, kAll},
    {"aten::channel_shuffle", kFollow, kShape, kAll},
    {"aten::clone", kFollow, kShape, kAll},
    {"aten::detach", kFollow, kShape, kAll},
    {"prim::unchecked_cast", kFollow, kShape, kAll},
    {"aten::size", kFollow, kMetadata, kAll},
    {"aten::dim", kFollow, kMetadata, kAll},
    {"aten::numel", kFollow, kMetadata, kAll},
    {"aten::len", kFollow, kMetadata, kAll},
    {"aten::is_floating_point", kFollow, kMetadata, kAll},
    {"prim::device", kFollow, kMetadata, kAll},
    {"prim::is_nested", kFollow, kMetadata, kAll},
    {"prim::is_cuda", kFollow, kMetadata, kAll},
    {"prim::requires_grad", kFollow, kMetadata, kAll},
    {"aten::__is__", kFollow, kMetadata, kAll},
    {"aten::__isnot__", kFollow, kMetadata, kAll},
    {"prim::ListConstruct", kFollow, kContainer, kAll},
    {"prim::ListUnpack", kFollow, kContainer, kAll},
    {"prim::TupleConstruct", kFollow, kContainer, kAll},
    {"prim::TupleUnpack", kFollow, kContainer, kAll},
    {"prim::TupleIndex", kFollow, kContainer, kAll},
    {"prim::DictConstruct", kFollow, kContainer, kAll},
    {"prim::ConstantChunk", kFollow, kContainer, kAll},
    {"aten::__getitem__", kFollow, kContainer, kAll},
    {"aten::dropout", kFollow, kEval, kAll},
    {"aten::feature_dropout", kFollow, kEval, kAll},
    {"aten::alpha_dropout", kFollow, kEval, kAll},
    {"aten::zeros_like", kFollow, kFactoryLike, kAll},
    {"aten::ones_like", kFollow, kFactoryLike, kAll},
    {"aten::empty_like", kFollow, kFactoryLike, kAll},
    {"aten::full_like", kFollow, kFactoryLike, kAll},

    // --- follow: pooling ------------------------------------------------------------------------------------
    {"aten::max_pool1d", kFollow, kPool, kAll},
    {"aten::max_pool2d", kFollow, kPool, kAll},
    {"aten::max_pool3d", kFollow, kPool, kAll},
    {"aten::max_pool2d_with_indices", kFollow, kPool, kAll},
    {"aten::adaptive_max_pool1d", kFollow, kPool, kAll},
    {"aten::adaptive_max_pool2d", kFollow, kPool, kAll},
    {"aten::avg_pool1d", kFollow, kPool, kAll},
    {"aten::avg_pool2d", kFollow, kPool, kAll},
    {"aten::adaptive_avg_pool1d", kFollow, kPool, kAll},
    {"aten::adaptive_avg_pool2d", kFollow, kPool, kAll},
    {"aten::adaptive_avg_pool3d", kFollow, kPool, kAll},

    // --- follow: pointwise activations and arithmetic -------------------------------------------------------
    {"aten::relu", kFollow, kActivation, kAll},
    {"aten::relu6", kFollow, kActivation, kAll},
    {"aten::leaky_relu", kFollow, kActivation, kAll},
    {"aten::hardtanh", kFollow, kActivation, kAll},
    {"aten::hardswish", kFollow, kActivation, kAll},
    {"aten::hardsigmoid", kFollow, kActivation, kAll},
    {"aten::gelu", kFollow, kActivation, kAll},
    {"aten::silu", kFollow, kActivation, kAll},
    {"aten::mish", kFollow, kActivation, kAll},
    {"aten::sigmoid", kFollow, kActivation, kAll},
    {"aten::tanh", kFollow, kActivation, kAll},
    {"aten::elu", kFollow, kActivation, kAll},
    {"aten::selu", kFollow, kActivation, kAll},
    {"aten::celu", kFollow, kActivation, kAll},
    {"aten::glu", kFollow, kActivation, kAll},
    {"aten::clamp", kFollow, kActivation, kAll},
    {"aten::clamp_min", kFollow, kActivation, kAll},
    {"aten::clamp_max", kFollow, kActivation, kAll},
    {"aten::clip", kFollow, kActivation, kAll},
    {"aten::abs", kFollow, kArith, kAll},
    {"aten::neg", kFollow, kArith, kAll},
    {"aten::add", kFollow, kArith, kAll},
    {"aten::sub", kFollow, kArith, kAll},
    {"aten::rsub", kFollow, kArith, kAll},
    {"aten::mul", kFollow, kArith, kAll},
    {"aten::div", kFollow, kArith, kAll},
    {"aten::sqrt", kFollow, kArith, kAll},
    {"aten::square", kFollow, kArith, kAll},
    {"aten::sin", kFollow, kArith, kAll},
    {"aten::cos", kFollow, kArith, kAll},
    {"aten::erf", kFollow, kArith, kAll},
    {"aten::floor", kFollow, kArith, kAll},
    {"aten::ceil", kFollow, kArith, kAll},
    {"aten::round", kFollow, kArith, kAll},
    {"aten::sign", kFollow, kArith, kAll},
    {"aten::maximum", kFollow, kCompare, kAll},
    {"aten::minimum", kFollow, kCompare, kAll},
    {"aten::where", kFollow, kCompare, kAll},
    {"aten::masked_fill", kFollow, kCompare, kAll},
    {"aten::eq", kFollow, kCompare, kAll},
    {"aten::ne", kFollow, kCompare, kAll},
    {"aten::lt", kFollow, kCompare, kAll},
    {"aten::le", kFollow, kCompare, kAll},
    {"aten::gt", kFollow, kCompare, kAll},
    {"aten::ge", kFollow, kCompare, kAll},
    {"aten::argmax", kFollow, kCompare, kAll},
    {"aten::argmin", kFollow, kCompare, kAll},
    {"aten::max", kFollow, kCompare, kAll},
    {"aten::min", kFollow, kCompare, kAll},
    {"aten::amax", kFollow, kCompare, kAll},
    {"aten::amin", kFollow, kCompare, kAll},
    {"aten::topk", kFollow, kCompare, kAll},
    {"aten::sort", kFollow, kCompare, kAll},

    // --- widest: autocast's promote list ---------------------------------------------------------------------
    {"aten::addcdiv", kWidest, kPromote, kAll},
    {"aten::addcmul", kWidest, kPromote, kAll},
    {"aten::atan2", kWidest, kPromote, kAll},
    {"aten::bilinear", kWidest, kPromote, kAll},
    {"aten::cross", kWidest, kPromote, kAll},
    {"aten::dot", kWidest, kPromote, kAll},
    {"aten::grid_sampler", kWidest, kPromote, kAll},
    {"aten::index_put", kWidest, kPromote, kAll},
    {"aten::scatter_add", kWidest, kPromote, kAll},
    {"aten::tensordot", kWidest, kPromote, kAll},
    {"aten::lerp", kWidest, kPromote, kAll},

    // --- fp32 ----------------------------------------------------------------------------------------------
    {"aten::softmax", kFp32, kSoftmax, kAll},
    {"aten::log_softmax", kFp32, kSoftmax, kAll},
    {"aten::_softmax", kFp32, kSoftmax, kAll},
    {"aten::_log_softmax", kFp32, kSoftmax, kAll},
    {"aten::softmin", kFp32, kSoftmax, kAll},
    {"aten::logsumexp", kFp32, kSoftmax, kAll},
    {"aten::exp", kFp32, kTranscendental, kAll},
    {"aten::exp2", kFp32, kTranscendental, kAll},
    {"aten::expm1", kFp32, kTranscendental, kAll},
    {"aten::log", kFp32, kTranscendental, kAll},
    {"aten::log2", kFp32, kTranscendental, kAll},
    {"aten::log10", kFp32, kTranscendental, kAll},
    {"aten::log1p", kFp32, kTranscendental, kAll},
    {"aten::pow", kFp32, kTranscendental, kAll},
    {"aten::float_power", kFp32, kTranscendental, kAll},
    {"aten::reciprocal", kFp32, kTranscendental, kAll},
    {"aten::rsqrt", kFp32, kTranscendental, kAll},
    {"aten::softplus", kFp32, kTranscendental, kAll},
    {"aten::acos", kFp32, kTranscendental, kAll},
    {"aten::asin", kFp32, kTranscendental, kAll},
    {"aten::cosh", kFp32, kTranscendental, kAll},
    {"aten::sinh", kFp32, kTranscendental, kAll},
    {"aten::tan", kFp32, kTranscendental, kAll},
    {"aten::erfinv", kFp32, kTranscendental, kAll},
    {"aten::sum", kFp32, kReduce, kAll},
    {"aten::mean", kFp32, kReduce, kAll},
    {"aten::prod", kFp32, kReduce, kAll},
    {"aten::cumsum", kFp32, kReduce, kAll},
    {"aten::cumprod", kFp32, kReduce, kAll},
    {"aten::var", kFp32, kReduce, kAll},
    {"aten::std", kFp32, kReduce, kAll},
    {"aten::var_mean", kFp32, kReduce, kAll},
    {"aten::std_mean", kFp32, kReduce, kAll},
    {"aten::nansum", kFp32, kReduce, kAll},
    {"aten::nanmean", kFp32, kReduce, kAll},
    {"aten::norm", kFp32, kDistance, kAll},
    {"aten::frobenius_norm", kFp32, kDistance, kAll},
    {"aten::nuclear_norm", kFp32, kDistance, kAll},
    {"aten::linalg_norm", kFp32, kDistance, kAll},
    {"aten::linalg_vector_norm", kFp32, kDistance, kAll},
    {"aten::renorm", kFp32, kDistance, kAll},
    {"aten::dist", kFp32, kDistance, kAll},
    {"aten::pdist", kFp32, kDistance, kAll},
    {"aten::cdist", kFp32, kDistance, kAll},
    {"aten::cosine_similarity", kFp32, kDistance, kAll},
    {"aten::pairwise_distance", kFp32, kDistance, kAll},
    {"aten::layer_norm", kFp32, kNorm, kAll},
    {"aten::native_layer_norm", kFp32, kNorm, kAll},
    {"aten::rms_norm", kFp32, kNorm, kAll},
    {"aten::group_norm", kFp32, kNorm, kAll},
    {"aten::instance_norm", kFp32, kNorm, kAll},
    {"aten::batch_norm", kFp32, kNorm, kAll},
    {"aten::local_response_norm", kFp32, kNorm, kAll},
    {"aten::mse_loss", kFp32, kLoss, kAll},
    {"aten::l1_loss", kFp32, kLoss, kAll},
    {"aten::smooth_l1_loss", kFp32, kLoss, kAll},
    {"aten::huber_loss", kFp32, kLoss, kAll},
    {"aten::nll_loss", kFp32, kLoss, kAll},
    {"aten::nll_loss2d", kFp32, kLoss, kAll},
    {"aten::nll_loss_nd", kFp32, kLoss, kAll},
    {"aten::cross_entropy_loss", kFp32, kLoss, kAll},
    {"aten::binary_cross_entropy", kFp32, kLoss, kAll},
    {"aten::binary_cross_entropy_with_logits", kFp32, kLoss, kAll},
    {"aten::kl_div", kFp32, kLoss, kAll},
    {"aten::poisson_nll_loss", kFp32, kLoss, kAll},
    {"aten::cosine_embedding_loss", kFp32, kLoss, kAll},
    {"aten::hinge_embedding_loss", kFp32, kLoss, kAll},
    {"aten::margin_ranking_loss", kFp32, kLoss, kAll},
    {"aten::soft_margin_loss", kFp32, kLoss, kAll},
    {"aten::multi_margin_loss", kFp32, kLoss, kAll},
    {"aten::multilabel_margin_loss", kFp32, kLoss, kAll},
    {"aten::triplet_margin_loss", kFp32, kLoss, kAll},
    {"aten::upsample_nearest1d", kFp32, kInterpolate, kAll},
    {"aten::upsample_nearest2d", kFp32, kInterpolate, kAll},
    {"aten::upsample_nearest3d", kFp32, kInterpolate, kAll},
    {"aten::upsample_linear1d", kFp32, kInterpolate, kAll},
    {"aten::upsample_bilinear2d", kFp32, kInterpolate, kAll},
    {"aten::upsample_bicubic2d", kFp32, kInterpolate, kAll},
    {"aten::upsample_trilinear3d", kFp32, kInterpolate, kAll},
    {"aten::__interpolate", kFp32, kInterpolate, kAll},
    {"aten::to", kFp32, kExplicitCast, kAll},
    {"aten::type_as", kFp32, kExplicitCast, kAll},
    {"aten::float", kFp32, kExplicitCast, kAll},
};
// clang-format on

} // namespace

OpPolicy OpPolicy::defaults(Target target) {
  OpPolicy policy;
  const uint8_t mask = maskOf(target);
  for (const DefaultEntry& entry : kDefaultEntries) {
    if (entry.targets & mask) {
      policy.set(entry.op, entry.category, entry.reason);
    }
  }
  return policy;
}

const PolicyEntry* OpPolicy::find(const std::string& op) const {
  auto it = entries_.find(op);
  return it == entries_.end() ? nullptr : &it->second;
}

OpCategory OpPolicy::categoryOf(const std::string& op) const {
  const PolicyEntry* entry = find(op);
  return entry ? entry->category : OpCategory::kFp32;
}

void OpPolicy::set(const std::string& op, OpCategory category, std::string reason) {
  entries_[op] = PolicyEntry{category, std::move(reason)};
}

bool OpPolicy::remove(const std::string& op) {
  return entries_.erase(op) > 0;
}

const char* toString(OpCategory category) {
  switch (category) {
    case OpCategory::kLowPrecision:
      return "low";
    case OpCategory::kFollow:
      return "follow";
    case OpCategory::kWidest:
      return "widest";
    case OpCategory::kFp32:
      return "fp32";
  }
  return "?";
}

std::optional<OpCategory> categoryFromString(const std::string& name) {
  for (OpCategory category :
       {OpCategory::kLowPrecision, OpCategory::kFollow, OpCategory::kWidest, OpCategory::kFp32}) {
    if (name == toString(category)) {
      return category;
    }
  }
  return std::nullopt;
}

const char* toString(Target target) {
  switch (target) {
    case Target::kCudaFloat16:
      return "cuda_fp16";
    case Target::kCudaBFloat16:
      return "cuda_bf16";
    case Target::kCpuBFloat16:
      return "cpu_bf16";
    case Target::kCpuFloat16:
      return "cpu_fp16";
  }
  return "?";
}

std::optional<Target> targetFromString(const std::string& name) {
  for (Target target : {Target::kCudaFloat16, Target::kCudaBFloat16, Target::kCpuBFloat16, Target::kCpuFloat16}) {
    if (name == toString(target)) {
      return target;
    }
  }
  return std::nullopt;
}

} // namespace torch_mp::core
