// What torch_mp knows of each op besides its precision category (core/op_policy): one row per op, one field per fact,
// so teaching torch_mp an op is one row here and one entry in op_policy's table. Every pass asks this table; none
// keeps a list of its own. This file knows nothing about TorchScript.
//
// Facts:
//   preservesDtype  its one tensor output always has its first input's dtype (views, reshapes, copies): dtypes the
//                   example inputs did not reach are completed through it (value_observer)
//   castFusion      how a cast of its input folds into its own kernel (fuse_casts): a dtype= argument that upcasts
//                   its input, or a norm whose CPU kernel takes a low input with fp32 parameters (normParameters)
//   flops           the formula for its multiply-add FLOPs (flop_estimate): what the report's low-FLOP share counts
//   tableLookup     it reads elements of its first argument by index: a constant table it reads runs low, stored once
//                   (graph_to_dataflow); the reason
//   layout          what it does with a channels_last tensor (channels_last_convolutions); the reason
//   zeroSensitive   an input whose value turning 0 makes the result inf or NaN (a divisor, log's argument): no value
//                   that underflows the low dtype reaches it low (numeric_guards); the reason
//   rightHandMatrix the input a GEMM multiplies as its right-hand matrix: a low CPU weight there is stored
//                   column-major (column_major_matmul_weights); the reason
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace torch_mp::core {

enum class CastFusion : uint8_t {
  kNone,
  kDtypeArgument,        // softmax(x, dim, dtype=fp32) computes what softmax(x.float(), dim) does, bit for bit
  kMixedTypeNormOnCpu,   // ATen's CPU kernel reads a Half / BFloat16 input with fp32 parameters, computes in fp32
                         // and writes the input's dtype; its CUDA kernel refuses fp32 parameters for a low input
  kMixedTypeNorm,        // as kMixedTypeNormOnCpu, and ATen's CUDA kernel does the same (benchmarks/cuda_norm_probe)
};

enum class FlopFormula : uint8_t {
  kNone,
  kConvolution,              // conv1d/2d/3d(input, weight, ...)
  kTransposedConvolution,    // conv_transpose1d/2d/3d(input, weight, ...)
  kGenericConvolution,       // _convolution / convolution(input, weight, ..., transposed, ...)
  kContraction,              // linear / matmul / mm / bmm(a, b): the product of its first two inputs
  kBiasedContraction,        // addmm / baddbmm / addbmm(bias, a, b): the product of inputs 1 and 2
  kAttention,                // scaled_dot_product_attention(q, k, v, ...)
  kMultiHeadAttention,       // _native_multi_head_attention: projections and attention
  kTransformerEncoderLayer,  // _transformer_encoder_layer_fwd: projections, attention and the feed-forward
  kRecurrent,                // lstm / gru / rnn_*: the gate GEMMs over every step and layer
};

// What an op does with a channels_last tensor. A 4-d tensor in channels_last order (NHWC in memory, NCHW in sizes)
// holds the same values as a contiguous one; what differs is what an op writes and what it costs: an op that keeps
// the layout lets a chain of convolutions stay NHWC (cuDNN's fast layout for fp16 / bf16 tensor cores) with no
// transposes between them; any other op gets a contiguous copy first, since it may depend on strides (aten::view
// fails on a channels_last tensor, a custom op may read data_ptr as NCHW).
enum class LayoutRole : uint8_t {
  kNeedsContiguous,    // everything not listed otherwise: reads a contiguous copy
  kKeepsChannelsLast,  // computes per element or per channel, or views without moving channels, and writes the
                       // layout it reads: the chain stays NHWC
  kReadsMetadataOnly,  // reads sizes, dtype or device, never elements: any layout will do, nothing to convert
  kCopiesContiguous,   // the model's own contiguous copy: reads any layout; dropped where its readers all keep NHWC
  kNormalizesSpatially,  // statistics over each sample's spatial dims (instance / group norm) in an NCHW-only ATen
                         // kernel: written in stock ops that keep NHWC (channels_last_norms)
};

// When an op's zeroSensitiveInput matters.
enum class ZeroSensitivity : uint8_t {
  kNone,
  kAlways,            // a 0 there gives inf or NaN
  kNegativeExponent,  // pow: only with a negative exponent (its second input), or one not known while converting
};

struct OpFacts {
  const char* op;  // qualified name, all overloads: "aten::relu"
  bool preservesDtype = false;
  CastFusion castFusion = CastFusion::kNone;
  std::array<int8_t, 4> normParameters = {-1, -1, -1, -1};  // kMixedTypeNorm*: inputs that are parameters
  FlopFormula flops = FlopFormula::kNone;
  const char* tableLookup = nullptr;
  LayoutRole layout = LayoutRole::kNeedsContiguous;
  const char* layoutReason = nullptr;
  ZeroSensitivity zeroSensitivity = ZeroSensitivity::kNone;
  int8_t zeroSensitiveInput = -1;
  const char* zeroReason = nullptr;
  int8_t rightHandMatrix = -1;
  const char* rightHandMatrixReason = nullptr;
};

// The facts of a qualified op name; an op in no row has none (every field its default).
const OpFacts& factsOf(const std::string& op);

} // namespace torch_mp::core
