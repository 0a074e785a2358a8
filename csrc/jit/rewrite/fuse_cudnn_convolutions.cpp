#include "jit/rewrite/fuse_cudnn_convolutions.h"

#include <ATen/TensorOperators.h>

#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/jit_log.h>

#include <optional>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "jit/ir/casts.h"
#include "jit/ir/convolution_arguments.h"
#include "jit/ir/ir_utils.h"
#include "jit/ir/writers.h"

namespace torch_mp::jit {
namespace {

using torch::jit::Block;
using torch::jit::Graph;
using torch::jit::Node;
using torch::jit::Value;

constexpr const char* kAdd = "aten::add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor";
constexpr const char* kRelu = "aten::relu(Tensor self) -> Tensor";

bool isCudnnDtype(c10::ScalarType dtype) {
  return dtype == c10::ScalarType::Float || dtype == c10::ScalarType::Half || dtype == c10::ScalarType::BFloat16;
}

bool isConstantOne(const Value* value) {
  const std::optional<c10::IValue> constant = torch::jit::toIValue(value);
  return constant && ((constant->isInt() && constant->toInt() == 1) ||
                      (constant->isDouble() && constant->toDouble() == 1.0));
}

// Whether an int[] value is a constant list, or a list built of constants, of ones only.
bool allOnes(const Value* list) {
  if (list->node()->kind() == c10::prim::ListConstruct) {
    for (const Value* element : list->node()->inputs()) {
      if (!isConstantOne(element)) {
        return false;
      }
    }
    return true;
  }
  const std::optional<c10::IValue> constant = torch::jit::toIValue(list);
  if (!constant || !constant->isIntList()) {
    return false;
  }
  for (const int64_t element : constant->toIntVector()) {
    if (element != 1) {
      return false;
    }
  }
  return true;
}

// The single reader of a value, when it has exactly one use and the reader matches `schema`.
Node* soleReader(const Value* value, const char* schema) {
  if (value->uses().size() != 1) {
    return nullptr;
  }
  Node* reader = value->uses()[0].user;
  return reader->matches(schema) ? reader : nullptr;
}

class ConvolutionFuser {
 public:
  ConvolutionFuser(const std::shared_ptr<Graph>& graph, const ObservedValues& observed)
      : graph_(graph), observed_(observed) {}

  // The writers and the ranks are found only where a convolution is: each costs a walk of the whole graph.
  FusedConvolutions run() {
    std::vector<Node*> convolutions;
    collectConvolutions(graph_->block(), convolutions);
    if (convolutions.empty()) {
      return fused_;
    }
    writers_.emplace(graph_);
    inputDependentRank_ = valuesOfInputDependentRank(graph_->block(), observed_);
    for (Node* conv : convolutions) {
      fuse(conv);
    }
    return fused_;
  }

 private:
  // The convolutions in the order they are fused: a block's after those of the blocks its nodes hold. Where two
  // convolutions feed one add, the first fused takes it.
  static void collectConvolutions(Block* block, std::vector<Node*>& order) {
    std::vector<Node*> convolutions;
    for (Node* node : block->nodes()) {
      for (Block* sub : node->blocks()) {
        collectConvolutions(sub, order);
      }
      if (convolution2dArguments(node)) {
        convolutions.push_back(node);
      }
    }
    order.insert(order.end(), convolutions.begin(), convolutions.end());
  }

  // The dtype cuDNN would run the convolution in, when it runs it and the fused kernel accepts its arguments.
  std::optional<c10::ScalarType> fusibleConvolutionDtype(const Node* conv,
                                                         const ConvolutionArguments& arguments) const {
    const std::optional<c10::IValue> weight = torch::jit::toIValue(conv->input(1));
    if (!weight || !weight->isTensor()) {
      return std::nullopt;
    }
    const at::Tensor& w = weight->toTensor();
    auto seen = observed_.find(conv->output());
    if (seen == observed_.end() || !seen->second.isTensor || !seen->second.device.is_cuda() || w.dim() != 4 ||
        !isCudnnDtype(w.scalar_type())) {
      return std::nullopt;
    }
    const std::optional<c10::IValue> bias = torch::jit::toIValue(conv->input(2));
    if (!bias || !(bias->isNone() || (bias->isTensor() && bias->toTensor().dim() == 1 &&
                                      bias->toTensor().size(0) == w.size(0) &&
                                      bias->toTensor().scalar_type() == w.scalar_type()))) {
      return std::nullopt;
    }
    if (!allOnes(conv->input(arguments.dilation)) || !isConstantOne(conv->input(arguments.groups))) {
      return std::nullopt;
    }
    if (recordedDtype(conv->input(0)) != w.scalar_type() || writers_->hasWriters(conv->input(0))) {
      return std::nullopt;
    }
    return w.scalar_type();
  }

  std::optional<std::vector<int64_t>> observedSizes(const Value* value) const {
    auto fused = fusedSizes_.find(value);
    if (fused != fusedSizes_.end()) {
      return fused->second;
    }
    if (inputDependentRank_.count(value) || definedInLoopBody(value)) {
      return std::nullopt;
    }
    return sizesOf(observed_, value);
  }

  // The residual %z that cuDNN can add to the convolution's output %c as it is.
  bool isFusibleResidual(const Value* z, const Value* c, c10::ScalarType dtype) const {
    if (z == c || recordedDtype(z) != dtype || writers_->hasWriters(z)) {
      return false;
    }
    const auto zSizes = observedSizes(z);
    const auto cSizes = observedSizes(c);
    return zSizes && cSizes && *zSizes == *cSizes && zSizes->size() == 4;
  }

  void fuse(Node* conv) {
    const ConvolutionArguments arguments = *convolution2dArguments(conv);
    const std::optional<c10::ScalarType> dtype = fusibleConvolutionDtype(conv, arguments);
    if (!dtype) {
      return;
    }
    Value* stride = conv->input(arguments.stride);
    Value* padding = conv->input(arguments.padding);
    Value* dilation = conv->input(arguments.dilation);
    Value* groups = conv->input(arguments.groups);
    Value* c = conv->output();
    if (Node* relu = soleReader(c, kRelu)) {
      replace({relu, conv}, c10::Symbol::fromQualString("aten::cudnn_convolution_relu"),
              {conv->input(0), conv->input(1), conv->input(2), stride, padding, dilation, groups});
      fused_.convRelu += 1;
      return;
    }
    Node* add = soleReader(c, kAdd);
    if (!add || !isConstantOne(add->input(2))) {
      return;
    }
    Value* z = add->input(0) == c ? add->input(1) : add->input(0);
    Node* relu = soleReader(add->output(), kRelu);
    if (!relu || !isFusibleResidual(z, c, *dtype)) {
      return;
    }
    Value* bias = conv->input(2);
    if (Node* residualConvolution = biasedConvolutionOnlyAdded(z, add)) {
      bias = foldedBias(bias, residualConvolution);
    }
    replace({relu, add, conv}, c10::Symbol::fromQualString("aten::cudnn_convolution_add_relu"),
            {conv->input(0), conv->input(1), z, add->input(2), bias, stride, padding, dilation, groups});
    fused_.convAddRelu += 1;
  }

  // The CUDA convolution that computes the residual %z with a constant bias of %z's dtype, when the add is its only
  // reader: that bias can be added inside the fused call instead of in a kernel of its own (a ResNet downsampling
  // branch).
  Node* biasedConvolutionOnlyAdded(Value* z, const Node* add) const {
    Node* producer = z->node();
    if (z->uses().size() != 1 || z->uses()[0].user != add || !convolution2dArguments(producer)) {
      return nullptr;
    }
    auto seen = observed_.find(z);
    const std::optional<c10::IValue> bias = torch::jit::toIValue(producer->input(2));
    if (seen == observed_.end() || !seen->second.device.is_cuda() || !bias || !bias->isTensor() ||
        bias->toTensor().dim() != 1 || bias->toTensor().scalar_type() != recordedDtype(z)) {
      return nullptr;
    }
    return producer;
  }

  // `bias` (None or a constant of the fused dtype) plus the residual convolution's bias, summed in fp32 and rounded
  // once (alpha is 1); the residual convolution runs without its bias.
  Value* foldedBias(Value* bias, Node* residualConvolution) {
    const at::Tensor residualBias = torch::jit::toIValue(residualConvolution->input(2))->toTensor();
    const std::optional<c10::IValue> own = torch::jit::toIValue(bias);
    at::Tensor sum = residualBias.to(at::kFloat);
    if (own->isTensor()) {
      sum = sum + own->toTensor().to(at::kFloat);
    }
    torch::jit::WithInsertPoint point(graph_->block()->nodes().front());
    Value* folded = graph_->insertConstant(sum.to(residualBias.scalar_type()));
    residualConvolution->replaceInput(2, graph_->insertConstant(c10::IValue()));
    GRAPH_UPDATE("Folded the bias of ", residualConvolution->output()->debugName(), " into a fused convolution");
    fused_.foldedResidualBiases += 1;
    return folded;
  }

  // Puts the fused node where the relu (`chain[0]`) was, where every input is defined, and drops the chain, last
  // reader first. The fused node keeps the convolution's (`chain.back()`) scope, source range and node id.
  void replace(const std::vector<Node*>& chain, c10::Symbol fusedKind, const std::vector<Value*>& inputs) {
    Node* relu = chain.front();
    Node* fused = graph_->create(fusedKind, inputs);
    fused->insertBefore(relu);
    fused->copyMetadata(chain.back());
    copyNodeId(chain.back(), fused);
    fused->output()->copyMetadata(relu->output());
    // The next block's residual add reads this result: its sizes are the relu's, which nobody observed under the new
    // value (a ResNet's identity shortcut would otherwise fuse only in every other block).
    if (std::optional<std::vector<int64_t>> sizes = observedSizes(relu->output())) {
      fusedSizes_.emplace(fused->output(), std::move(*sizes));
    }
    relu->output()->replaceAllUsesWith(fused->output());
    GRAPH_UPDATE("Fused ", chain.back()->output()->debugName(), " into ", fusedKind.toQualString());
    for (Node* node : chain) {
      node->destroy();
    }
  }

  std::shared_ptr<Graph> graph_;
  const ObservedValues& observed_;
  std::optional<WriterQuery> writers_;
  std::unordered_set<const Value*> inputDependentRank_;
  std::unordered_map<const Value*, std::vector<int64_t>> fusedSizes_;  // a fused call's output: its relu's sizes
  FusedConvolutions fused_;
};

} // namespace

FusedConvolutions FuseCudnnConvolutions(const std::shared_ptr<Graph>& graph, const ObservedValues& observed) {
  GRAPH_DUMP("Before FuseCudnnConvolutions", graph);
  const FusedConvolutions fused = ConvolutionFuser(graph, observed).run();
  GRAPH_DUMP("After FuseCudnnConvolutions", graph);
  return fused;
}

} // namespace torch_mp::jit
