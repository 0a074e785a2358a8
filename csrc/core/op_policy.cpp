#include "core/op_policy.h"

#include <algorithm>
#include <string_view>
#include <utility>

#include "core/glob.h"
#include "core/op_facts.h"

namespace torch_mp::core {
namespace {

struct DefaultEntry {
  const char* op;
  OpCategory category;
  const char* reason;
};

constexpr OpCategory kLow = OpCategory::kLowPrecision;
constexpr OpCategory kFollow = OpCategory::kFollow;
constexpr OpCategory kWidest = OpCategory::kWidest;
constexpr OpCategory kFp32 = OpCategory::kFp32;

constexpr const char* kConv = "convolution: tensor cores / oneDNN, fp32 accumulation inside the kernel";
constexpr const char* kGemm = "matrix product: tensor cores (cuBLAS) / AVX512-BF16 (oneDNN), fp32 accumulation";
constexpr const char* kAttention = "fused attention: flash/memory-efficient kernels need low precision";
constexpr const char* kRnn = "recurrent layer: its gates are GEMMs (cuDNN / oneDNN RNN kernels)";
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
constexpr const char* kFactory = "creates a tensor in the dtype its arguments name: kept as the model wrote it";
constexpr const char* kCacheWrite =
    "writes its source into a copy of the tensor at the positions given: data movement, exact in any dtype; a KV cache "
    "it writes follows the attention that reads it, stored low where that runs low";

// clang-format off
const DefaultEntry kDefaultEntries[] = {
    // --- always low precision -----------------------------------------------------------------------------
    {"aten::conv1d", kLow, kConv},
    {"aten::conv2d", kLow, kConv},
    {"aten::conv3d", kLow, kConv},
    {"aten::conv_transpose1d", kLow, kConv},
    {"aten::conv_transpose2d", kLow, kConv},
    {"aten::conv_transpose3d", kLow, kConv},
    {"aten::convolution", kLow, kConv},
    {"aten::_convolution", kLow, kConv},
    {"aten::conv_tbc", kLow, kConv},
    {"aten::prelu", kLow, "parametric relu: autocast lists it with the convolutions it follows"},
    {"aten::linear", kLow, kGemm},
    {"aten::matmul", kLow, kGemm},
    {"aten::mm", kLow, kGemm},
    {"aten::bmm", kLow, kGemm},
    {"aten::mv", kLow, kGemm},
    {"aten::addmm", kLow, kGemm},
    {"aten::addmv", kLow, kGemm},
    {"aten::addr", kFollow, "outer product plus a matrix: nothing to sum, so low precision would only round"},
    {"aten::addbmm", kLow, kGemm},
    {"aten::baddbmm", kLow, kGemm},
    {"aten::einsum", kLow, kGemm},
    {"aten::chain_matmul", kLow, kGemm},
    {"aten::linalg_multi_dot", kLow, kGemm},
    {"aten::linalg_vecdot", kLow, kGemm},
    {"aten::scaled_dot_product_attention", kLow, kAttention},
    // the kernels torch.export names for it (run_decompositions: the CPU, flash, memory-efficient and cuDNN forms)
    {"aten::_scaled_dot_product_flash_attention_for_cpu", kLow, kAttention},
    {"aten::_scaled_dot_product_flash_attention", kLow, kAttention},
    {"aten::_scaled_dot_product_efficient_attention", kLow, kAttention},
    {"aten::_scaled_dot_product_cudnn_attention", kLow, kAttention},
    {"aten::_native_multi_head_attention", kLow, kAttention},
    {"aten::_transformer_encoder_layer_fwd", kLow,
     "fused transformer layer (nn.TransformerEncoderLayer fast path): GEMMs and attention in low precision, its "
     "layer norms and softmax accumulate in fp32 inside the kernel"},
    {"aten::lstm", kLow, kRnn},
    {"aten::gru", kLow, kRnn},
    {"aten::rnn_tanh", kLow, kRnn},
    {"aten::rnn_relu", kLow, kRnn},
    {"aten::lstm_cell", kLow, kRnn},
    {"aten::gru_cell", kLow, kRnn},
    {"aten::rnn_tanh_cell", kLow, kRnn},
    {"aten::rnn_relu_cell", kLow, kRnn},

    // --- follow: views and data movement ------------------------------------------------------------------
    {"aten::view", kFollow, kShape},
    {"aten::reshape", kFollow, kShape},
    {"aten::view_as", kFollow, kShape},
    {"aten::reshape_as", kFollow, kShape},
    {"aten::flatten", kFollow, kShape},
    {"aten::unflatten", kFollow, kShape},
    {"aten::squeeze", kFollow, kShape},
    {"aten::unsqueeze", kFollow, kShape},
    {"aten::permute", kFollow, kShape},
    {"aten::transpose", kFollow, kShape},
    {"aten::t", kFollow, kShape},
    {"aten::movedim", kFollow, kShape},
    {"aten::contiguous", kFollow, kShape},
    {"aten::expand", kFollow, kShape},
    {"aten::expand_as", kFollow, kShape},
    {"aten::slice", kFollow, kShape},
    {"aten::select", kFollow, kShape},
    {"aten::narrow", kFollow, kShape},
    {"aten::index", kFollow, kShape},
    {"aten::index_select", kFollow, kShape},
    {"aten::gather", kFollow, kShape},
    {"aten::masked_select", kFollow, kShape},
    {"aten::embedding", kFollow, kShape},
    {"aten::chunk", kFollow, kShape},
    {"aten::split", kFollow, kShape},
    {"aten::split_with_sizes", kFollow, kShape},
    {"aten::tensor_split", kFollow, kShape},
    {"aten::unbind", kFollow, kShape},
    {"aten::cat", kFollow, kShape},
    {"aten::concat", kFollow, kShape},
    {"aten::stack", kFollow, kShape},
    {"aten::repeat", kFollow, kShape},
    {"aten::tile", kFollow, kShape},
    {"aten::flip", kFollow, kShape},
    {"aten::roll", kFollow, kShape},
    {"aten::pad", kFollow, kShape},
    {"aten::constant_pad_nd", kFollow, kShape},
    {"aten::reflection_pad1d", kFollow, kShape},
    {"aten::reflection_pad2d", kFollow, kShape},
    {"aten::replication_pad1d", kFollow, kShape},
    {"aten::replication_pad2d", kFollow, kShape},
    {"aten::pixel_shuffle", kFollow, kShape},
    {"aten::pixel_unshuffle", kFollow, kShape},
    {"aten::channel_shuffle", kFollow, kShape},
    {"aten::clone", kFollow, kShape},
    {"aten::detach", kFollow, kShape},
    {"aten::alias", kFollow, kShape},
    {"aten::_unsafe_view", kFollow, kShape},
    {"aten::lift_fresh_copy", kFollow, "copies a constant the program lifted: no arithmetic"},
    {"aten::_unsafe_index", kFollow, kShape},
    {"prim::unchecked_cast", kFollow, kShape},
    {"aten::size", kFollow, kMetadata},
    {"aten::dim", kFollow, kMetadata},
    {"aten::numel", kFollow, kMetadata},
    {"aten::len", kFollow, kMetadata},
    {"aten::__contains__", kFollow, "asks whether a container holds a key, never reads tensor values"},
    {"prim::GetAttr", kFollow, "reads an attribute freezing kept (a cache the model fills): no arithmetic"},
    {"prim::Uninitialized", kFollow, "placeholder on a path that raises: holds no data"},
    {"aten::is_floating_point", kFollow, kMetadata},
    {"prim::device", kFollow, kMetadata},
    {"prim::is_nested", kFollow, kMetadata},
    {"prim::is_cuda", kFollow, kMetadata},
    {"prim::requires_grad", kFollow, kMetadata},
    {"aten::__is__", kFollow, kMetadata},
    {"aten::__isnot__", kFollow, kMetadata},
    {"prim::ListConstruct", kFollow, kContainer},
    {"prim::ListUnpack", kFollow, kContainer},
    {"prim::TupleConstruct", kFollow, kContainer},
    {"prim::TupleUnpack", kFollow, kContainer},
    {"prim::TupleIndex", kFollow, kContainer},
    {"prim::DictConstruct", kFollow, kContainer},
    {"prim::ConstantChunk", kFollow, kContainer},
    {"aten::__getitem__", kFollow, kContainer},
    {"aten::append", kFollow, kContainer},
    {"aten::list", kFollow, kContainer},
    {"aten::dict", kFollow, kContainer},
    {"aten::_set_item", kFollow, kContainer},
    {"aten::values", kFollow, kContainer},
    {"aten::dropout", kFollow, kEval},
    {"aten::feature_dropout", kFollow, kEval},
    {"aten::alpha_dropout", kFollow, kEval},
    {"aten::zeros_like", kFollow, kFactoryLike},
    {"aten::ones_like", kFollow, kFactoryLike},
    {"aten::empty_like", kFollow, kFactoryLike},
    {"aten::full_like", kFollow, kFactoryLike},
    {"aten::new_zeros", kFollow, kFactoryLike},
    {"aten::new_ones", kFollow, kFactoryLike},
    {"aten::new_empty", kFollow, kFactoryLike},
    {"aten::new_full", kFollow, kFactoryLike},
    {"aten::zero_", kFollow, "overwrites with zeros: exact in any dtype"},
    {"aten::fill_", kFollow, "overwrites with one value: exact in any dtype (a value the low dtype loses keeps fp32)"},
    {"aten::fill", kFollow, "a copy filled with one value: exact in any dtype (a value the low dtype loses keeps fp32)"},
    {"aten::slice_scatter", kFollow, "a copy with a slice replaced: data movement, exact in any dtype"},
    {"aten::select_scatter", kFollow, "a copy with a row replaced: data movement, exact in any dtype"},
    {"aten::copy_", kFollow, "copies its source into the tensor, converting to the tensor's dtype: no arithmetic"},
    {"aten::copy", kFollow, "a copy of its source in the tensor's dtype and shape (copy_ made functional): no arithmetic"},
    {"aten::index_copy", kFollow, kCacheWrite},

    // --- follow: pooling ------------------------------------------------------------------------------------
    {"aten::max_pool1d", kFollow, kPool},
    {"aten::max_pool2d", kFollow, kPool},
    {"aten::max_pool3d", kFollow, kPool},
    {"aten::max_pool2d_with_indices", kFollow, kPool},
    {"aten::adaptive_max_pool1d", kFollow, kPool},
    {"aten::adaptive_max_pool2d", kFollow, kPool},
    {"aten::avg_pool1d", kFollow, kPool},
    {"aten::avg_pool2d", kFollow, kPool},
    {"aten::adaptive_avg_pool1d", kFollow, kPool},
    {"aten::adaptive_avg_pool2d", kFollow, kPool},
    {"aten::_native_batch_norm_legit_no_training", kFollow,
     "eval-mode batch norm (torch.export's inference form): a per-channel scale and shift by stored statistics, "
     "computed in fp32 inside the kernel, no reduction"},
    {"aten::_adaptive_avg_pool2d", kFollow, kPool},
    {"aten::adaptive_avg_pool3d", kFollow, kPool},

    // --- follow: pointwise activations and arithmetic -------------------------------------------------------
    {"aten::relu", kFollow, kActivation},
    {"aten::relu6", kFollow, kActivation},
    {"aten::leaky_relu", kFollow, kActivation},
    {"aten::hardtanh", kFollow, kActivation},
    {"aten::hardswish", kFollow, kActivation},
    {"aten::hardsigmoid", kFollow, kActivation},
    {"aten::gelu", kFollow, kActivation},
    {"aten::silu", kFollow, kActivation},
    {"aten::mish", kFollow, kActivation},
    {"aten::sigmoid", kFollow, kActivation},
    {"aten::tanh", kFollow, kActivation},
    {"aten::elu", kFollow, kActivation},
    {"aten::selu", kFollow, kActivation},
    {"aten::celu", kFollow, kActivation},
    {"aten::glu", kFollow, kActivation},
    {"aten::clamp", kFollow, kActivation},
    {"aten::clamp_min", kFollow, kActivation},
    {"aten::clamp_max", kFollow, kActivation},
    {"aten::clip", kFollow, kActivation},
    {"aten::abs", kFollow, kArith},
    {"aten::neg", kFollow, kArith},
    {"aten::add", kFollow, kArith},
    {"aten::sub", kFollow, kArith},
    {"aten::diff", kFollow, "differences of neighbours: one subtraction per element, as aten::sub"},
    {"aten::rsub", kFollow, kArith},
    {"aten::mul", kFollow, kArith},
    {"aten::div", kFollow, kArith},
    {"aten::sqrt", kFollow, kArith},
    {"aten::square", kFollow, kArith},
    {"aten::sin", kFollow, kArith},
    {"aten::cos", kFollow, kArith},
    {"aten::erf", kFollow, kArith},
    {"aten::floor", kFollow, kArith},
    {"aten::ceil", kFollow, kArith},
    {"aten::round", kFollow, kArith},
    {"aten::sign", kFollow, kArith},
    {"aten::maximum", kFollow, kCompare},
    {"aten::minimum", kFollow, kCompare},
    {"aten::where", kFollow, kCompare},
    {"aten::masked_fill", kFollow, kCompare},
    {"aten::eq", kFollow, kCompare},
    {"aten::__and__", kFollow, "logical and of masks: no floating values"},
    {"aten::__or__", kFollow, "logical or of masks: no floating values"},
    {"aten::ne", kFollow, kCompare},
    {"aten::lt", kFollow, kCompare},
    {"aten::le", kFollow, kCompare},
    {"aten::gt", kFollow, kCompare},
    {"aten::ge", kFollow, kCompare},
    {"aten::argmax", kFollow, kCompare},
    {"aten::argmin", kFollow, kCompare},
    {"aten::max", kFollow, kCompare},
    {"aten::min", kFollow, kCompare},
    {"aten::amax", kFollow, kCompare},
    {"aten::amin", kFollow, kCompare},
    {"aten::topk", kFollow, kCompare},
    {"aten::sort", kFollow, kCompare},

    // --- widest: autocast's promote list ---------------------------------------------------------------------
    {"aten::addcdiv", kWidest, kPromote},
    {"aten::addcmul", kWidest, kPromote},
    {"aten::atan2", kWidest, kPromote},
    {"aten::bilinear", kWidest, kPromote},
    {"aten::cross", kWidest, kPromote},
    {"aten::dot", kWidest, kPromote},
    {"aten::grid_sampler", kWidest, kPromote},
    {"aten::index_put", kWidest, kPromote},
    {"aten::scatter_add", kWidest, kPromote},
    {"aten::tensordot", kWidest, kPromote},
    {"aten::lerp", kWidest, kPromote},

    // --- fp32 ----------------------------------------------------------------------------------------------
    {"aten::softmax", kFp32, kSoftmax},
    {"aten::log_softmax", kFp32, kSoftmax},
    {"aten::_softmax", kFp32, kSoftmax},
    {"aten::_log_softmax", kFp32, kSoftmax},
    {"aten::softmin", kFp32, kSoftmax},
    {"aten::logsumexp", kFp32, kSoftmax},
    {"aten::exp", kFp32, kTranscendental},
    {"aten::exp2", kFp32, kTranscendental},
    {"aten::expm1", kFp32, kTranscendental},
    {"aten::log", kFp32, kTranscendental},
    {"aten::log2", kFp32, kTranscendental},
    {"aten::log10", kFp32, kTranscendental},
    {"aten::log1p", kFp32, kTranscendental},
    {"aten::pow", kFp32, kTranscendental},
    {"aten::float_power", kFp32, kTranscendental},
    {"aten::reciprocal", kFp32, kTranscendental},
    {"aten::rsqrt", kFp32, kTranscendental},
    {"aten::softplus", kFp32, kTranscendental},
    {"aten::acos", kFp32, kTranscendental},
    {"aten::asin", kFp32, kTranscendental},
    {"aten::cosh", kFp32, kTranscendental},
    {"aten::sinh", kFp32, kTranscendental},
    {"aten::tan", kFp32, kTranscendental},
    {"aten::erfinv", kFp32, kTranscendental},
    {"aten::sum", kFp32, kReduce},
    {"aten::mean", kFp32, kReduce},
    {"aten::prod", kFp32, kReduce},
    {"aten::cumsum", kFp32, kReduce},
    {"aten::cumprod", kFp32, kReduce},
    {"aten::var", kFp32, kReduce},
    {"aten::std", kFp32, kReduce},
    {"aten::var_mean", kFp32, kReduce},
    {"aten::std_mean", kFp32, kReduce},
    {"aten::nansum", kFp32, kReduce},
    {"aten::nanmean", kFp32, kReduce},
    {"aten::norm", kFp32, kDistance},
    {"aten::frobenius_norm", kFp32, kDistance},
    {"aten::nuclear_norm", kFp32, kDistance},
    {"aten::linalg_norm", kFp32, kDistance},
    {"aten::linalg_vector_norm", kFp32, kDistance},
    {"aten::renorm", kFp32, kDistance},
    {"aten::dist", kFp32, kDistance},
    {"aten::pdist", kFp32, kDistance},
    {"aten::cdist", kFp32, kDistance},
    {"aten::cosine_similarity", kFp32, kDistance},
    {"aten::pairwise_distance", kFp32, kDistance},
    {"aten::layer_norm", kFp32, kNorm},
    {"aten::native_layer_norm", kFp32, kNorm},
    {"aten::rms_norm", kFp32, kNorm},
    {"aten::group_norm", kFp32, kNorm},
    {"aten::instance_norm", kFp32, kNorm},
    {"aten::batch_norm", kFp32, kNorm},
    // torch.export's forms of the norms (run_decompositions)
    {"aten::_native_batch_norm_legit", kFp32, kNorm},
    {"aten::native_batch_norm", kFp32, kNorm},
    {"aten::native_group_norm", kFp32, kNorm},
    {"aten::local_response_norm", kFp32, kNorm},
    {"aten::mse_loss", kFp32, kLoss},
    {"aten::l1_loss", kFp32, kLoss},
    {"aten::smooth_l1_loss", kFp32, kLoss},
    {"aten::huber_loss", kFp32, kLoss},
    {"aten::nll_loss", kFp32, kLoss},
    {"aten::nll_loss2d", kFp32, kLoss},
    {"aten::nll_loss_nd", kFp32, kLoss},
    {"aten::cross_entropy_loss", kFp32, kLoss},
    {"aten::binary_cross_entropy", kFp32, kLoss},
    {"aten::binary_cross_entropy_with_logits", kFp32, kLoss},
    {"aten::kl_div", kFp32, kLoss},
    {"aten::poisson_nll_loss", kFp32, kLoss},
    {"aten::cosine_embedding_loss", kFp32, kLoss},
    {"aten::hinge_embedding_loss", kFp32, kLoss},
    {"aten::margin_ranking_loss", kFp32, kLoss},
    {"aten::soft_margin_loss", kFp32, kLoss},
    {"aten::multi_margin_loss", kFp32, kLoss},
    {"aten::multilabel_margin_loss", kFp32, kLoss},
    {"aten::triplet_margin_loss", kFp32, kLoss},
    {"aten::upsample_nearest1d", kFp32, kInterpolate},
    {"aten::upsample_nearest2d", kFp32, kInterpolate},
    {"aten::upsample_nearest3d", kFp32, kInterpolate},
    {"aten::upsample_linear1d", kFp32, kInterpolate},
    {"aten::upsample_bilinear2d", kFp32, kInterpolate},
    {"aten::upsample_bicubic2d", kFp32, kInterpolate},
    {"aten::upsample_trilinear3d", kFp32, kInterpolate},
    {"aten::__interpolate", kFp32, kInterpolate},
    {"prim::dtype", kFp32,
     "reads its input's dtype: a low copy would change the answer (queries on observed tensors are answered "
     "with constants before planning)"},
    {"aten::zeros", kFp32, kFactory},
    {"aten::ones", kFp32, kFactory},
    {"aten::empty", kFp32, kFactory},
    {"aten::full", kFp32, kFactory},
    {"aten::arange", kFp32, kFactory},
    {"aten::linspace", kFp32, kFactory},
    {"aten::eye", kFp32, kFactory},
    {"aten::rand", kFp32, kFactory},
    {"aten::randn", kFp32, kFactory},
    {"aten::tensor", kFp32, kFactory},
    {"aten::scalar_tensor", kFp32, kFactory},
    {"aten::to", kFp32, kExplicitCast},
    {"aten::_assert_tensor_metadata", kFp32,
     "torch.export's check of a tensor's dtype and sizes: it must see the dtype the model had"},
    {"aten::_to_copy", kFp32, kExplicitCast},
    {"aten::type_as", kFp32, kExplicitCast},
    {"aten::float", kFp32, kExplicitCast},
};

// The fp16 CUDA policy's own entries, over the table above. ATen's CUDA layer and group norm kernels read fp16 and
// compute the statistics and the normalisation in fp32 (acc_type), so an fp16 input loses nothing there, and an fp32
// island would only add a cast on each side (50 cast kernels in BERT-base). Following its input, a norm between low
// ops runs low, as .half() runs it. bf16 keeps them fp32: its 8-bit significand would carry a transformer's residual
// stream (the norms' inputs and outputs) far less exactly than fp32 does.
constexpr const char* kNormOnCudaFp16 =
    "normalization: ATen's CUDA kernel computes the statistics in fp32 from an fp16 input, so it follows its input";
const DefaultEntry kCudaFloat16Entries[] = {
    {"aten::layer_norm", kFollow, kNormOnCudaFp16},
    {"aten::native_layer_norm", kFollow, kNormOnCudaFp16},
    {"aten::group_norm", kFollow, kNormOnCudaFp16},
    {"aten::native_group_norm", kFollow, kNormOnCudaFp16},
};
// clang-format on

} // namespace


OpPolicy OpPolicy::defaults(Target target, const CpuFeatures& cpu, std::optional<CudaCapability> gpu) {
  const std::optional<std::string> slow = slowLowPrecisionKernels(target, cpu, gpu);
  OpPolicy policy;
  policy.slowKernels_ = slow;
  policy.name_ = toString(target);
  for (const DefaultEntry& entry : kDefaultEntries) {
    if (computesLow(entry.category) && slow) {
      policy.set(entry.op, OpCategory::kFp32, std::string(entry.reason) + "; " + *slow);
      policy.entries_[entry.op].noFastKernel = true;
    } else {
      policy.set(entry.op, entry.category, entry.reason);
    }
  }
  if (target == Target::kCudaFloat16) {
    for (const DefaultEntry& entry : kCudaFloat16Entries) {
      policy.set(entry.op, entry.category, entry.reason);
    }
  }
  return policy;
}

const PolicyEntry* OpPolicy::find(const std::string& op) const {
  auto it = entries_.find(op);
  return it == entries_.end() ? nullptr : &it->second;
}

OpPolicy::Match OpPolicy::match(const std::string& op) const {
  if (const PolicyEntry* entry = find(op)) {
    return {entry, op};
  }
  const bool inPlace = op.size() > 1 && op.back() == '_' && op[op.size() - 2] != '_';  // not "aten::__and__"
  if (!inPlace) {
    return {};
  }
  std::string outOfPlace = op.substr(0, op.size() - 1);
  const PolicyEntry* entry = find(outOfPlace);
  if (!entry || computesLow(entry->category)) {
    return {};
  }
  return {entry, std::move(outOfPlace)};
}

OpCategory OpPolicy::categoryOf(const std::string& op) const {
  const PolicyEntry* entry = match(op).entry;
  return entry ? entry->category : OpCategory::kFp32;
}

void OpPolicy::set(const std::string& op, OpCategory category, std::string reason) {
  entries_[op] = PolicyEntry{category, std::move(reason)};
}

bool OpPolicy::remove(const std::string& op) {
  return entries_.erase(op) > 0;
}

void OpPolicy::exclude(ModuleRule exclusion) {
  exclusions_.push_back(std::move(exclusion));
}

namespace {

const ModuleRule* firstMatch(const std::vector<ModuleRule>& rules, const std::string& op, const std::string& scope) {
  for (const ModuleRule& rule : rules) {
    if (rule.matches(op, scope)) {
      return &rule;
    }
  }
  return nullptr;
}

} // namespace

const ModuleRule* OpPolicy::exclusionFor(const std::string& op, const std::string& scope) const {
  return firstMatch(exclusions_, op, scope);
}

void OpPolicy::forceLow(ModuleRule rule) {
  forcedLow_.push_back(std::move(rule));
}

const ModuleRule* OpPolicy::forcedLowFor(const std::string& op, const std::string& scope) const {
  return firstMatch(forcedLow_, op, scope);
}

bool OpPolicy::storesTableLow(const std::vector<TableReader>& readers) const {
  return std::all_of(readers.begin(), readers.end(), [&](const TableReader& reader) {
    const Match found = match(reader.op);
    return (found.entry && computesLow(found.entry->category)) ||
        (reader.readsFirst && factsOf(reader.op).tableLookup != nullptr);
  });
}

void OpPolicy::forceLowNode(std::string id, std::string reason) {
  forcedLowNodes_.insert_or_assign(std::move(id), std::move(reason));
}

const std::string* OpPolicy::forcedLowNode(const std::string& id) const {
  auto it = forcedLowNodes_.find(id);
  return it == forcedLowNodes_.end() ? nullptr : &it->second;
}

bool ModuleRule::matches(const std::string& op, const std::string& scope) const {
  if (ops && std::find(ops->begin(), ops->end(), op) == ops->end()) {
    return false;
  }
  if (scope.empty()) {
    return globMatches(pattern, "");  // the top module's own nodes: "*" only
  }
  // the module's path, then each enclosing module's ("a.b.c", "a.b", "a")
  for (std::string_view path = scope; !path.empty();) {
    if (globMatches(pattern, path)) {
      return true;
    }
    const size_t dot = path.rfind('.');
    path = dot == std::string_view::npos ? std::string_view() : path.substr(0, dot);
  }
  return false;
}

} // namespace torch_mp::core
