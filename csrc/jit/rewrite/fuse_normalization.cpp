#include "jit/rewrite/fuse_normalization.h"

#include <ATen/ATen.h>
#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/jit_log.h>

#include <map>
#include <optional>
#include <vector>

#include "jit/ir/ir_utils.h"
#include "jit/ir/norm_arguments.h"
#include "jit/ir/writers.h"
#include "kernels/fused_channel_norm.h"
#include "kernels/fused_pointwise.h"

namespace torch_mp::jit {
namespace {

using torch::jit::Block;
using torch::jit::Graph;
using torch::jit::Node;
using torch::jit::Value;

constexpr const char* kBatchNorm =
    "aten::batch_norm(Tensor input, Tensor? weight, Tensor? bias, Tensor? running_mean, Tensor? running_var, "
    "bool training, float momentum, float eps, bool cudnn_enabled) -> Tensor";

// One part of a fused call: the tensor it reads, how it is normalised, the nodes it replaces.
struct Part {
  Value* input = nullptr;
  int64_t groups = 0;
  std::optional<at::Tensor> scale;
  std::optional<at::Tensor> shift;
  std::optional<double> eps;  // a normalising part's
  std::vector<Node*> folded;  // producers first
};

std::optional<c10::IValue> constantOf(const Value* value) {
  return torch::jit::toIValue(value);
}

// The optional the op takes for a parameter the norm may lack (constantTensorOrNone: undefined).
std::optional<at::Tensor> present(const at::Tensor& parameter) {
  return parameter.defined() ? std::make_optional(parameter) : std::nullopt;
}

bool isFusibleDtype(std::optional<c10::ScalarType> dtype) {
  return dtype && kernels::isPointwiseDtype(*dtype);
}

// The node's single reader, if it has exactly one use, in the same block.
Node* onlyReader(const Node* node) {
  if (node->outputs().size() != 1 || node->output()->uses().size() != 1) {
    return nullptr;
  }
  Node* reader = node->output()->uses()[0].user;
  return reader->owningBlock() == node->owningBlock() ? reader : nullptr;
}

// The normalising part an instance / group norm node is (kGroupPerChannel is the op's -1 too), its input not
// yet resolved; nothing for other nodes.
std::optional<Part> normPart(Node* node) {
  const std::optional<SpatialNormArguments> arguments = spatialNormArguments(node);
  if (!arguments) {
    return std::nullopt;
  }
  Part part{.input = arguments->input, .groups = arguments->groups, .scale = present(arguments->weight),
            .shift = present(arguments->bias), .eps = arguments->eps};
  part.folded.push_back(node);
  return part;
}

// The groups-0 part an eval batch norm with constant parameters is: its per-channel scale and shift in fp32, as
// ATen's CPU kernel forms them (alpha = 1 / sqrt(var + eps) * w, beta = b - mean * alpha).
std::optional<Part> batchNormPart(Node* node) {
  if (node->kind() != c10::aten::batch_norm || !node->matches(kBatchNorm)) {
    return std::nullopt;
  }
  const std::optional<c10::IValue> training = constantOf(node->namedInput("training"));
  const std::optional<c10::IValue> eps = constantOf(node->namedInput("eps"));
  const std::optional<at::Tensor> weight = constantTensorOrNone(node->namedInput("weight"));
  const std::optional<at::Tensor> bias = constantTensorOrNone(node->namedInput("bias"));
  const std::optional<at::Tensor> mean = constantTensorOrNone(node->namedInput("running_mean"));
  const std::optional<at::Tensor> var = constantTensorOrNone(node->namedInput("running_var"));
  if (!training || !training->isBool() || training->toBool() || !eps || !eps->isDouble() || !weight || !bias ||
      !mean || !mean->defined() || !var || !var->defined()) {
    return std::nullopt;
  }
  at::Tensor scale = at::reciprocal(at::sqrt(var->to(at::kFloat) + eps->toDouble()));
  if (weight->defined()) {
    scale = scale * weight->to(at::kFloat);
  }
  at::Tensor shift = -(mean->to(at::kFloat) * scale);
  if (bias->defined()) {
    shift = bias->to(at::kFloat) + shift;
  }
  Part part{.input = node->namedInput("input"), .groups = 0, .scale = scale, .shift = shift};
  part.folded.push_back(node);
  return part;
}

class NormalizationFuser {
 public:
  NormalizationFuser(const std::shared_ptr<Graph>& graph, const ObservedValues& observed, CastLedger& casts)
      : graph_(graph), observed_(observed), casts_(casts), writers_(graph, /*isFrozen=*/true) {}

  int run() {
    visit(graph_->block());
    return fused_;
  }

 private:
  void visit(Block* block) {
    // from the end, so that a cat is seen before the norms it may take in
    for (Node* node = block->return_node()->prev(); node != block->param_node();) {
      for (Block* sub : node->blocks()) {
        visit(sub);
      }
      Node* inserted = node->kind() == c10::aten::cat ? fuseCat(node) : fuseNorm(node);
      node = (inserted ? inserted : node)->prev();
    }
  }

  // Whether a value is a tensor of a fusible dtype that the example inputs showed on a device with a kernel.
  bool fusibleTensor(const Value* value) const {
    if (!isFusibleDtype(recordedDtype(value))) {
      return false;
    }
    const ObservedValue* seen = observedThroughCasts(observed_, value);
    if (!seen || !seen->isTensor) {
      return false;
    }
    auto known = hasKernel_.find(seen->device.type());
    if (known == hasKernel_.end()) {
      known = hasKernel_.emplace(seen->device.type(), kernels::hasFusedChannelNormKernel(seen->device.type())).first;
    }
    const std::optional<std::vector<int64_t>> sizes = knownSizes(*seen);
    return known->second && sizes && sizes->size() >= 3;
  }

  // A plain cast to fp32 that only `reader` reads, in its block: folded into the read.
  static bool widensOnlyFor(const Value* value, const Node* reader) {
    const Node* cast = value->node();
    return plainCastTarget(cast) == c10::ScalarType::Float && onlyReader(cast) == reader;
  }

  // A norm node's part with its input resolved (through a folded widening cast), if it fuses.
  std::optional<Part> resolvedNorm(Node* node) const {
    std::optional<Part> part = normPart(node);
    if (!part) {
      part = batchNormPart(node);
    }
    if (!part || !fusibleTensor(part->input) || !fusibleTensor(node->output())) {
      return std::nullopt;
    }
    if (widensOnlyFor(part->input, node) && isFusibleDtype(recordedDtype(part->input->node()->input(0)))) {
      part->folded.insert(part->folded.begin(), part->input->node());
      part->input = part->input->node()->input(0);
    }
    return part;
  }

  // A cat's element as a part: a norm (through a narrowing cast that only the list reads, when the norm writes fp32),
  // else a copy of the element (of the value a folded cast read).
  std::optional<Part> catPart(Value* element, Node* list, c10::ScalarType catDtype) const {
    if (recordedDtype(element) != catDtype || !fusibleTensor(element)) {
      return std::nullopt;
    }
    Node* producer = element->node();
    std::vector<Node*> casts;
    if (plainCastTarget(producer) && onlyReader(producer) == list && fusibleTensor(producer->input(0))) {
      casts.push_back(producer);
      element = producer->input(0);
      producer = element->node();
    }
    if (onlyReader(producer) == (casts.empty() ? list : casts[0]) &&
        (casts.empty() || recordedDtype(element) == c10::ScalarType::Float)) {
      if (std::optional<Part> part = resolvedNorm(producer)) {
        part->folded.insert(part->folded.end(), casts.begin(), casts.end());
        return part;
      }
    }
    Part copy{.input = element, .groups = 0, .folded = casts};
    return copy;
  }

  Node* fuseCat(Node* cat) {
    const std::optional<c10::IValue> dim = cat->inputs().size() == 2 ? constantOf(cat->input(1)) : std::nullopt;
    Node* list = cat->input(0)->node();
    const std::optional<c10::ScalarType> catDtype = recordedDtype(cat->output());
    if (!dim || !dim->isInt() || dim->toInt() != 1 || list->kind() != c10::prim::ListConstruct ||
        onlyReader(list) != cat || !isFusibleDtype(catDtype)) {
      return nullptr;
    }
    std::vector<Part> parts;
    bool normalises = false;
    for (Value* element : list->inputs()) {
      std::optional<Part> part = catPart(element, list, *catDtype);
      if (!part) {
        return nullptr;
      }
      normalises = normalises || part->groups != 0 || part->scale;
      parts.push_back(std::move(*part));
    }
    if (!normalises || !oneEps(parts)) {
      return nullptr;
    }
    std::vector<Node*> members = {list, cat};
    return fuse(std::move(parts), members);
  }

  Node* fuseNorm(Node* node) {
    std::optional<Part> part = normPart(node) ? resolvedNorm(node) : std::nullopt;
    if (!part) {
      return nullptr;
    }
    std::vector<Node*> members;
    return fuse({std::move(*part)}, members);
  }

  // All normalising parts share one eps (the op takes one).
  static bool oneEps(const std::vector<Part>& parts) {
    std::optional<double> eps;
    for (const Part& part : parts) {
      if (part.eps) {
        if (eps && *eps != *part.eps) {
          return false;
        }
        eps = part.eps;
      }
    }
    return true;
  }

  // Replaces the parts' nodes and `members` (the list and cat, if any; its last node is the root, else the last
  // part's last node is) by one call, taking in a narrowing cast of an fp32 root and a relu after it; returns the
  // first node inserted (nullptr where nothing is fused, as nothing must write what the call reads).
  Node* fuse(std::vector<Part> parts, std::vector<Node*>& members) {
    for (Part& part : parts) {
      members.insert(members.end() - (members.empty() ? 0 : 2), part.folded.begin(), part.folded.end());
    }
    Node* root = members.back();
    bool relu = false;
    if (Node* reader = onlyReader(root); reader && recordedDtype(root->output()) == c10::ScalarType::Float &&
                                         isFusibleDtype(plainCastTarget(reader)) && fusibleTensor(reader->output())) {
      members.push_back(reader);
      root = reader;
    }
    if (Node* reader = onlyReader(root); reader && reader->matches("aten::relu(Tensor self) -> Tensor") &&
                                         recordedDtype(reader->output()) == recordedDtype(root->output())) {
      members.push_back(reader);
      root = reader;
      relu = true;
    }
    for (const Node* member : members) {
      for (const Value* input : member->inputs()) {
        if (writers_.hasWriters(input)) {
          return nullptr;
        }
      }
    }
    double eps = 0.0;
    std::vector<Value*> inputs;
    std::vector<int64_t> groups;
    std::vector<Value*> scales;
    std::vector<Value*> shifts;
    torch::jit::WithInsertPoint guard(root);
    auto constant = [this](const std::optional<at::Tensor>& tensor) {
      return tensor ? graph_->insertConstant(*tensor) : graph_->insertConstant(c10::IValue());
    };
    for (const Part& part : parts) {
      eps = part.eps.value_or(eps);
      inputs.push_back(part.input);
      groups.push_back(part.groups);
      scales.push_back(constant(part.scale));
      shifts.push_back(constant(part.shift));
    }
    Node* first = graph_->insertNode(graph_->createList(c10::TensorType::get(), inputs));
    Value* scaleList = graph_->insertNode(graph_->createList(c10::OptionalType::ofTensor(), scales))->output();
    Value* shiftList = graph_->insertNode(graph_->createList(c10::OptionalType::ofTensor(), shifts))->output();
    const c10::ScalarType outDtype = *recordedDtype(root->output());
    Node* fused = graph_->create(
        c10::Symbol::fromQualString(kernels::kFusedChannelNormOp),
        {first->output(), graph_->insertConstant(groups), scaleList, shiftList, graph_->insertConstant(eps),
         graph_->insertConstant(relu), graph_->insertConstant(static_cast<int64_t>(outDtype))});
    graph_->insertNode(fused);
    fused->output()->copyMetadata(root->output());
    copyNodeId(root, fused);
    root->output()->replaceAllUsesWith(fused->output());
    GRAPH_UPDATE("Fused ", members.size(), " nodes into ", fused->output()->debugName());
    for (auto it = members.rbegin(); it != members.rend(); ++it) {  // readers before what they read
      if (plainCastTarget(*it)) {
        casts_.fuse(*it);
      } else {
        (*it)->destroy();
      }
    }
    ++fused_;
    return first;
  }

  std::shared_ptr<Graph> graph_;
  const ObservedValues& observed_;
  CastLedger& casts_;
  WriterQuery writers_;
  mutable std::map<c10::DeviceType, bool> hasKernel_;
  int fused_ = 0;
};

} // namespace

int FuseNormalization(const std::shared_ptr<Graph>& graph, const ObservedValues& observed, CastLedger& casts) {
  GRAPH_DUMP("Before FuseNormalization", graph);
  const int fused = NormalizationFuser(graph, observed, casts).run();
  GRAPH_DUMP("After FuseNormalization", graph);
  return fused;
}

} // namespace torch_mp::jit
