#include "jit/rewrite/channels_last_convolutions.h"

#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/jit_log.h>

#include <algorithm>
#include <optional>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/op_facts.h"
#include "jit/ir/casts.h"
#include "jit/ir/convolution_arguments.h"
#include "jit/ir/writers.h"
#include "jit/rewrite/channels_last_norms.h"

namespace torch_mp::jit {
namespace {

using torch::jit::Block;
using torch::jit::Graph;
using torch::jit::Node;
using torch::jit::Value;

// The weight of a 2-d convolution the example inputs ran on a CUDA device, when it is a constant floating 4-d tensor.
std::optional<at::Tensor> cudaConvolutionWeight(const Node* node, const ObservedValues& observed) {
  if (!convolution2dArguments(node)) {
    return std::nullopt;
  }
  auto seen = observed.find(node->output());
  if (seen == observed.end() || !seen->second.isTensor || !seen->second.device.is_cuda()) {
    return std::nullopt;
  }
  const std::optional<c10::IValue> weight = torch::jit::toIValue(node->input(1));
  if (!weight || !weight->isTensor()) {
    return std::nullopt;
  }
  const at::Tensor& tensor = weight->toTensor();
  if (tensor.dim() != 4 || !at::isFloatingType(tensor.scalar_type())) {
    return std::nullopt;
  }
  return tensor;
}

class ChannelsLastConverter {
 public:
  ChannelsLastConverter(std::shared_ptr<Graph> graph, const ObservedValues& observed)
      : graph_(std::move(graph)), observed_(observed) {}

  int run() {
    relayWeights(graph_->block());
    if (convolutions_ == 0) {
      return 0;
    }
    for (const auto& [original, copy] : relaid_) {
      if (!original->hasUses()) {
        original->node()->destroy();  // the NCHW copy is stored no more
      }
    }
    graphMayWrite_ = graphMayWrite(*graph_);
    inputDependentRank_ = valuesOfInputDependentRank(graph_->block(), observed_);
    markLayouts(graph_->block());
    for (Value* value : std::vector<Value*>(marked_)) {
      convertForOtherReaders(value);
    }
    for (Node* copy : droppedCopies_) {
      copy->output()->replaceAllUsesWith(copy->input(0));
      GRAPH_UPDATE("Dropped the contiguous copy ", copy->output()->debugName(), ": its readers all take NHWC");
      copy->destroy();
    }
    for (const auto& [norm, channels] : norms_) {
      writeNormForChannelsLast(*graph_, norm, channels);
    }
    for (Node* cast : castsIntoConvolutions_) {
      torch::jit::WithInsertPoint point(cast);
      cast->replaceInput(4, graph_->insertConstant(c10::MemoryFormat::ChannelsLast));
      GRAPH_UPDATE("The cast ", cast->output()->debugName(), " writes NHWC for the convolutions reading it");
    }
    return convolutions_;
  }

 private:
  void relayWeights(Block* block) {
    for (Node* node : block->nodes()) {
      for (Block* sub : node->blocks()) {
        relayWeights(sub);
      }
      const std::optional<at::Tensor> weight = cudaConvolutionWeight(node, observed_);
      if (!weight) {
        continue;
      }
      if (!weight->is_contiguous(at::MemoryFormat::ChannelsLast)) {
        node->replaceInput(1, relaidConstant(node->input(1), *weight));
        GRAPH_UPDATE("Stored the weight of ", node->output()->debugName(), " channels_last");
      }
      ++convolutions_;
    }
  }

  // The channels_last copy of a weight constant, made once however many convolutions read it, at the top of the graph
  // (where it dominates every reader); the NCHW original goes when nothing else reads it.
  Value* relaidConstant(Value* original, const at::Tensor& weight) {
    auto cached = relaid_.find(original);
    if (cached != relaid_.end()) {
      return cached->second;
    }
    torch::jit::WithInsertPoint guard(graph_->block()->nodes().front());
    const at::Tensor channelsLast = weight.contiguous(at::MemoryFormat::ChannelsLast);
    Value* copy = graph_->insertConstant(channelsLast);
    copy->setType(c10::TensorType::create(channelsLast));
    relaid_.emplace(original, copy);
    return copy;
  }

  static core::LayoutRole layoutOf(const Node* node) {
    return core::factsOf(node->kind().toQualString()).layout;
  }

  bool keepsLayout(const Node* node) const {
    if (layoutOf(node) != core::LayoutRole::kKeepsChannelsLast) {
      return false;
    }
    // A list (prim::ListConstruct's, split's) is passed on NHWC only into readers that keep it: no copy goes into one.
    for (const Value* output : node->outputs()) {
      if (output->type()->kind() != c10::TypeKind::ListType) {
        continue;
      }
      for (const torch::jit::Use& use : output->uses()) {
        if (layoutOf(use.user) != core::LayoutRole::kKeepsChannelsLast) {
          return false;
        }
      }
    }
    return true;
  }

  // The channel count of a 4-d value whose rank the example inputs fix; nothing for any other.
  std::optional<int64_t> channelsOf(const Value* value) const {
    if (inputDependentRank_.count(value)) {
      return std::nullopt;
    }
    const std::optional<std::vector<int64_t>> sizes = sizesOf(observed_, value);
    if (!sizes || sizes->size() != 4) {
      return std::nullopt;
    }
    return (*sizes)[1];
  }

  // The channel count of a norm writeNormForChannelsLast can rewrite; nothing for any other node.
  std::optional<int64_t> rewritableNormChannels(const Node* node) const {
    if (layoutOf(node) != core::LayoutRole::kNormalizesSpatially) {
      return std::nullopt;
    }
    const std::optional<int64_t> channels = channelsOf(node->output());
    if (!channels || !isChannelsLastNormRewritable(node, *channels)) {
      return std::nullopt;
    }
    return channels;
  }

  // Whether `reader` takes an NHWC value as input `offset` without a contiguous copy, when the value's other
  // readers are decided: in the table, or the return of an If branch whose output may be NHWC (its readers decide).
  bool acceptsNhwc(const Node* reader, size_t offset) const {
    if (reader->kind() == c10::prim::Return) {
      const Node* owner = reader->owningBlock()->owningNode();
      return owner && owner->kind() == c10::prim::If && nhwc_.count(owner->output(offset));
    }
    switch (layoutOf(reader)) {
      case core::LayoutRole::kKeepsChannelsLast:
        return keepsLayout(reader);
      case core::LayoutRole::kReadsMetadataOnly:
      case core::LayoutRole::kCopiesContiguous:
        return true;
      case core::LayoutRole::kNormalizesSpatially:
        return offset == 0 && rewritableNormChannels(reader).has_value();
      case core::LayoutRole::kNeedsContiguous:
        return false;
    }
    return false;
  }

  // A model's own contiguous copy of an NHWC value goes where nothing may write (the copy could be what keeps a
  // write from reaching the original) and every reader takes NHWC, branch returns not counted (their If's output is
  // decided after this node).
  bool isDroppableCopy(const Node* copy) const {
    if (graphMayWrite_ || torch::jit::constant_as<int64_t>(copy->input(1)) !=
                              static_cast<int64_t>(c10::MemoryFormat::Contiguous)) {
      return false;
    }
    for (const torch::jit::Use& use : copy->output()->uses()) {
      if (use.user->kind() == c10::prim::Return || !acceptsNhwc(use.user, use.offset)) {
        return false;
      }
    }
    return true;
  }

  // Whether the node writes NHWC given that an input is: a layout-keeping op, a contiguous copy it drops, a norm it
  // rewrites. The latter two are noted, to be rewritten once every value's readers are decided.
  bool passesOnNhwc(Node* node) {
    switch (layoutOf(node)) {
      case core::LayoutRole::kKeepsChannelsLast:
        return keepsLayout(node);
      case core::LayoutRole::kCopiesContiguous:
        if (isDroppableCopy(node)) {
          droppedCopies_.push_back(node);
          return true;
        }
        return false;
      case core::LayoutRole::kNormalizesSpatially:
        if (const std::optional<int64_t> channels = rewritableNormChannels(node); channels && nhwc_.count(node->input(0))) {
          norms_.emplace_back(node, *channels);
          return true;
        }
        return false;
      case core::LayoutRole::kReadsMetadataOnly:
      case core::LayoutRole::kNeedsContiguous:
        return false;
    }
    return false;
  }

  void mark(Value* value) {
    if (nhwc_.insert(value).second) {
      marked_.push_back(value);
    }
  }

  // Values that may hold an NHWC tensor: the outputs of re-laid convolutions, of layout-keeping ops reading one, and
  // of an If where a branch may return one (a branch returning NCHW instead is read correctly by the same readers).
  void markLayouts(Block* block) {
    for (Node* node : block->nodes()) {
      for (Block* sub : node->blocks()) {
        markLayouts(sub);
      }
      if (node->kind() == c10::prim::If) {
        for (size_t i = 0; i < node->outputs().size(); ++i) {
          for (const Block* branch : node->blocks()) {
            if (nhwc_.count(branch->outputs()[i])) {
              mark(node->output(i));
            }
          }
        }
        continue;
      }
      if (cudaConvolutionWeight(node, observed_)) {
        noteCastIntoConvolution(node->input(0));
        for (Value* output : node->outputs()) {
          mark(output);
        }
        continue;
      }
      const bool readsNhwc =
          std::any_of(node->inputs().begin(), node->inputs().end(), [&](const Value* in) { return nhwc_.count(in); });
      if (readsNhwc && passesOnNhwc(node)) {
        for (Value* output : node->outputs()) {
          mark(output);
        }
      }
    }
  }

  // The cast of an NCHW value that only re-laid convolutions read (a model's input cast to the low dtype) writes NHWC
  // at once: one copy instead of the cast's and then cuDNN's own to NHWC.
  void noteCastIntoConvolution(Value* input) {
    Node* cast = input->node();
    if (!plainCastTarget(cast) || nhwc_.count(cast->input(0)) || !channelsOf(input) || notedCasts_.count(cast)) {
      return;
    }
    for (const torch::jit::Use& use : input->uses()) {
      if (use.offset != 0 || !cudaConvolutionWeight(use.user, observed_)) {
        return;
      }
    }
    notedCasts_.insert(cast);
    castsIntoConvolutions_.push_back(cast);
  }

  void convertForOtherReaders(Value* value) {
    std::vector<torch::jit::Use> others;
    for (const torch::jit::Use& use : value->uses()) {
      if (!acceptsNhwc(use.user, use.offset)) {
        others.push_back(use);
      }
    }
    if (others.empty()) {
      return;
    }
    // A cast none of whose readers takes NHWC (the model's output cast back to fp32) writes NCHW itself: one copy
    // where the cast and a contiguous copy after it made two.
    if (others.size() == value->uses().size() && plainCastTarget(value->node())) {
      torch::jit::WithInsertPoint guard(value->node());
      value->node()->replaceInput(4, graph_->insertConstant(c10::MemoryFormat::Contiguous));
      GRAPH_UPDATE("The cast ", value->debugName(), " writes NCHW for its readers outside NHWC");
      return;
    }
    torch::jit::WithInsertPoint guard(value->node()->next());
    Value* contiguousFormat = graph_->insertConstant(static_cast<int64_t>(c10::MemoryFormat::Contiguous));
    Node* contiguous = graph_->create(c10::aten::contiguous, {value, contiguousFormat});
    graph_->insertNode(contiguous);
    contiguous->output()->setType(value->type());
    for (const torch::jit::Use& use : others) {
      use.user->replaceInput(use.offset, contiguous->output());
    }
    GRAPH_UPDATE("Readers of ", value->debugName(), " outside NHWC read ", contiguous->output()->debugName());
  }

  std::shared_ptr<Graph> graph_;
  const ObservedValues& observed_;
  int convolutions_ = 0;
  bool graphMayWrite_ = true;
  std::unordered_set<const Value*> inputDependentRank_;
  std::unordered_set<const Value*> nhwc_;
  std::vector<Value*> marked_;                 // nhwc_ in graph order, so the rewrite is deterministic
  std::unordered_map<Value*, Value*> relaid_;  // NCHW weight constant -> its channels_last copy
  std::vector<Node*> droppedCopies_;           // contiguous copies whose readers all take NHWC
  std::vector<std::pair<Node*, int64_t>> norms_;  // instance / group norms (and their channels) written in stock
                                                 // ops that keep NHWC
  std::unordered_set<const Node*> notedCasts_;
  std::vector<Node*> castsIntoConvolutions_;   // notedCasts_ in graph order
};

} // namespace

int ConvertConvolutionsToChannelsLast(const std::shared_ptr<Graph>& graph, const ObservedValues& observed) {
  GRAPH_DUMP("Before ConvertConvolutionsToChannelsLast", graph);
  const int convolutions = ChannelsLastConverter(graph, observed).run();
  GRAPH_DUMP("After ConvertConvolutionsToChannelsLast", graph);
  return convolutions;
}

} // namespace torch_mp::jit
