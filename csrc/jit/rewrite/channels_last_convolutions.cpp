#include "jit/rewrite/channels_last_convolutions.h"

#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/jit_log.h>

#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/op_facts.h"
#include "jit/ir/convolution_arguments.h"

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
    markLayouts(graph_->block());
    for (Value* value : std::vector<Value*>(marked_)) {
      convertForOtherReaders(value);
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
    if (node->kind() == c10::prim::ListConstruct) {  // passed on NHWC only into readers that keep it
      for (const torch::jit::Use& use : node->output()->uses()) {
        if (layoutOf(use.user) != core::LayoutRole::kKeepsChannelsLast) {
          return false;
        }
      }
    }
    return true;
  }

  // Values that may hold an NHWC tensor: the outputs of re-laid convolutions, and of layout-keeping ops reading one.
  void markLayouts(Block* block) {
    for (Node* node : block->nodes()) {
      for (Block* sub : node->blocks()) {
        markLayouts(sub);
      }
      bool writesNhwc = cudaConvolutionWeight(node, observed_).has_value();
      if (!writesNhwc && keepsLayout(node)) {
        for (const Value* input : node->inputs()) {
          writesNhwc = writesNhwc || nhwc_.count(input);
        }
      }
      if (writesNhwc) {
        for (Value* output : node->outputs()) {
          if (nhwc_.insert(output).second) {
            marked_.push_back(output);
          }
        }
      }
    }
  }

  bool acceptsNhwc(const Node* reader) const {
    return keepsLayout(reader) || layoutOf(reader) == core::LayoutRole::kReadsMetadataOnly;
  }

  void convertForOtherReaders(Value* value) {
    std::vector<torch::jit::Use> others;
    for (const torch::jit::Use& use : value->uses()) {
      if (!acceptsNhwc(use.user)) {
        others.push_back(use);
      }
    }
    if (others.empty()) {
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
  std::unordered_set<const Value*> nhwc_;
  std::vector<Value*> marked_;                 // nhwc_ in graph order, so the rewrite is deterministic
  std::unordered_map<Value*, Value*> relaid_;  // NCHW weight constant -> its channels_last copy
};

} // namespace

int ConvertConvolutionsToChannelsLast(const std::shared_ptr<Graph>& graph, const ObservedValues& observed) {
  GRAPH_DUMP("Before ConvertConvolutionsToChannelsLast", graph);
  const int convolutions = ChannelsLastConverter(graph, observed).run();
  GRAPH_DUMP("After ConvertConvolutionsToChannelsLast", graph);
  return convolutions;
}

} // namespace torch_mp::jit
