#include "jit/rewrite/fuse_casts.h"

#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/jit_log.h>

#include <algorithm>
#include <unordered_set>
#include <utility>
#include <vector>

#include "core/op_facts.h"
#include "jit/ir/ir_utils.h"
#include "jit/ir/writers.h"

namespace torch_mp::jit {
namespace {

using torch::jit::Block;
using torch::jit::Graph;
using torch::jit::Node;
using torch::jit::Use;
using torch::jit::Value;

bool isLowFloat(std::optional<c10::ScalarType> dtype) {
  return dtype == c10::ScalarType::Half || dtype == c10::ScalarType::BFloat16;
}

// Ops whose `dtype=` argument upcasts `self` inside the kernel (case A).
bool hasUpcastingDtypeArgument(const Node* node) {
  return core::factsOf(node->kind().toQualString()).castFusion == core::CastFusion::kDtypeArgument;
}

// add / sub / mul / div with two tensor operands (case B).
bool isTensorArithmetic(const Node* node) {
  static const char* const schemas[] = {
      "aten::add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor",
      "aten::sub.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor",
      "aten::mul.Tensor(Tensor self, Tensor other) -> Tensor",
      "aten::div.Tensor(Tensor self, Tensor other) -> Tensor",
  };
  for (const char* schema : schemas) {
    if (node->matches(schema)) {
      return true;
    }
  }
  return false;
}

// The parameter tensors' input indices of a norm whose kernel on `device` takes a Half or BFloat16 input with fp32
// parameters, computes in fp32 and writes the input's dtype (ATen's "mixed type" norm kernels, case E); empty for
// other nodes and devices.
std::vector<size_t> mixedTypeNormParameters(const Node* node, std::optional<c10::DeviceType> device) {
  const core::OpFacts& facts = core::factsOf(node->kind().toQualString());
  const bool onCpu =
      facts.castFusion == core::CastFusion::kMixedTypeNormOnCpu || facts.castFusion == core::CastFusion::kMixedTypeNorm;
  const bool onCuda = facts.castFusion == core::CastFusion::kMixedTypeNorm;
  std::vector<size_t> parameters;
  if (!((device == c10::DeviceType::CPU && onCpu) || (device == c10::DeviceType::CUDA && onCuda))) {
    return parameters;
  }
  for (int8_t index : facts.normParameters) {
    if (index >= 0 && static_cast<size_t>(index) < node->inputs().size()) {
      parameters.push_back(static_cast<size_t>(index));
    }
  }
  return parameters;
}

using KernelQuery = std::function<bool(const c10::OperatorName&, c10::DeviceType)>;

class CastFuser {
 public:
  CastFuser(
      const std::shared_ptr<Graph>& graph,
      CastLedger& casts,
      const ObservedValues& observed,
      const KernelQuery& kernelExists)
      : graph_(graph),
        observed_(observed),
        casts_(casts),
        kernelExists_(kernelExists),
        writers_(graph, /*isFrozen=*/true),
        inputDependentRank_(valuesOfInputDependentRank(graph->block(), observed)) {}

  bool run() {
    std::vector<Node*> upcasts;
    collectUpcasts(graph_->block(), upcasts);
    bool changed = false;
    for (Node* cast : upcasts) {
      changed |= fuseReaders(cast);
    }
    return changed;
  }

 private:
  // Plain casts to fp32 of a low-precision value nobody writes in place, in program order.
  void collectUpcasts(Block* block, std::vector<Node*>& upcasts) {
    for (Node* node : block->nodes()) {
      for (Block* sub : node->blocks()) {
        collectUpcasts(sub, upcasts);
      }
      if (plainCastTarget(node) == c10::ScalarType::Float && isLowFloat(recordedDtype(node->input(0))) &&
          !writers_.hasWriters(node->input(0)) && !writers_.hasWriters(node->output())) {
        upcasts.push_back(node);
      }
    }
  }

  bool fuseReaders(Node* cast) {
    if (fuseIntoProduct(cast)) {
      return true;
    }
    Value* upcast = cast->output();
    Value* low = cast->input(0);
    bool changed = false;
    const std::vector<Use> uses = upcast->uses();  // the loop rewrites them
    for (const Use& use : uses) {
      Node* reader = use.user;
      if (reader->input(use.offset) != upcast) {
        continue;
      }
      if (fuseIntoDtypeArgument(reader, use.offset, low) || fuseIntoArithmetic(reader, use.offset, low) ||
          shortenChain(reader, use.offset, low) || fuseIntoNorm(reader, use.offset, low)) {
        changed = true;
      }
    }
    if (changed && !upcast->hasUses()) {
      casts_.fuse(cast);
    }
    return changed;
  }

  // Case D: to(mm(%a, %b), fp32) => mm.dtype(%a, %b, fp32) where the device has that kernel.
  bool fuseIntoProduct(Node* cast) {
    Value* product = cast->input(0);
    Node* producer = product->node();
    if (product->uses().size() != 1 || producer->outputs().size() != 1) {
      return false;  // another reader needs the low product
    }
    const std::optional<c10::Symbol> form = outDtypeForm(producer);
    auto observed = observed_.find(product);
    if (!form || observed == observed_.end() ||
        !kernelExists_(c10::OperatorName(form->toQualString(), "dtype"), observed->second.device.type())) {
      return false;
    }
    torch::jit::WithInsertPoint guard(producer);
    Node* fused = graph_->create(
        *form,
        {producer->input(0), producer->input(1),
         graph_->insertConstant(static_cast<int64_t>(c10::ScalarType::Float))});
    graph_->insertNode(fused);
    fused->output()->setType(cast->output()->type());
    fused->output()->copyMetadata(cast->output());
    copyNodeId(producer, fused);
    cast->output()->replaceAllUsesWith(fused->output());
    GRAPH_UPDATE("Fused upcast into ", fused->kind().toQualString(), ".dtype writing ", fused->output()->debugName());
    casts_.fuse(cast);
    producer->destroy();
    return true;
  }

  // aten::mm or aten::bmm when the node computes exactly that (matmul on observed 2-d x 2-d or 3-d x 3-d tensors
  // with one batch size), else nothing.
  std::optional<c10::Symbol> outDtypeForm(const Node* node) const {
    if (node->inputs().size() != 2) {
      return std::nullopt;
    }
    if (node->kind() == c10::aten::mm || node->kind() == c10::aten::bmm) {
      return node->kind();
    }
    if (node->kind() != c10::aten::matmul) {
      return std::nullopt;
    }
    if (definedInLoopBody(node->output()) || inputDependentRank_.count(node->input(0)) ||
        inputDependentRank_.count(node->input(1))) {
      return std::nullopt;
    }
    // the operands are the plan's casts and low-precision weight copies: sizes through casts and of constants
    const std::optional<std::vector<int64_t>> a = sizesOf(observed_, node->input(0));
    const std::optional<std::vector<int64_t>> b = sizesOf(observed_, node->input(1));
    if (!a || !b) {
      return std::nullopt;
    }
    if (a->size() == 2 && b->size() == 2) {
      return c10::aten::mm;
    }
    if (a->size() == 3 && b->size() == 3 && (*a)[0] == (*b)[0]) {
      return c10::aten::bmm;
    }
    return std::nullopt;
  }

  // Case A: softmax(%y, dim, None) => softmax(%x, dim, fp32).
  bool fuseIntoDtypeArgument(Node* reader, size_t offset, Value* low) {
    if (offset != 0 || !hasUpcastingDtypeArgument(reader) || reader->outputs().size() != 1 ||
        recordedDtype(reader->output()) != c10::ScalarType::Float) {
      return false;
    }
    const c10::FunctionSchema* schema = reader->maybeSchema();
    if (!schema || schema->arguments().empty() || schema->arguments()[0].name() != "self") {
      return false;
    }
    const std::optional<int> dtypeIndex = schema->argumentIndexWithName("dtype");
    if (!dtypeIndex || static_cast<size_t>(*dtypeIndex) >= reader->inputs().size()) {
      return false;
    }
    const auto dtypeArgument = torch::jit::toIValue(reader->input(*dtypeIndex));
    if (!dtypeArgument || !dtypeArgument->isNone()) {
      return false;  // dtype already set (or not a constant): the op's own choice stays
    }
    torch::jit::WithInsertPoint guard(reader);
    reader->replaceInput(*dtypeIndex, graph_->insertConstant(static_cast<int64_t>(c10::ScalarType::Float)));
    reader->replaceInput(0, low);
    GRAPH_UPDATE("Fused upcast into ", reader->kind().toQualString(), " (dtype=Float) reading ", low->debugName());
    return true;
  }

  // Case B: add(%y, %f) => add(%x, %f) where type promotion yields fp32 anyway.
  bool fuseIntoArithmetic(Node* reader, size_t offset, Value* low) {
    if (offset > 1 || !isTensorArithmetic(reader) || recordedDtype(reader->output()) != c10::ScalarType::Float) {
      return false;
    }
    Value* other = reader->input(1 - offset);
    if (other == reader->input(offset) || recordedDtype(other) != c10::ScalarType::Float ||
        other->node()->kind() == c10::prim::NumToTensor) {
      return false;
    }
    const std::optional<int64_t> otherDim = knownDim(other);
    const std::optional<int64_t> lowDim = knownDim(low);
    if (!otherDim || !lowDim) {
      return false;
    }
    if (*otherDim == 0 && *lowDim != 0) {
      return false;  // a 0-dim fp32 tensor does not win over a dimensioned low one: the result would be low
    }
    reader->replaceInput(offset, low);
    GRAPH_UPDATE("Fused upcast into ", reader->kind().toQualString(), " (promotes to Float) reading ",
                 low->debugName());
    return true;
  }

  // Case C: to(to(%x, fp32), D) => to(%x, D); %x is Half or BFloat16, which fp32 holds exactly.
  bool shortenChain(Node* reader, size_t offset, Value* low) {
    if (offset != 0 || !plainCastTarget(reader)) {
      return false;
    }
    reader->replaceInput(0, low);
    GRAPH_UPDATE("Shortened cast chain: ", reader->output()->debugName(), " now casts ", low->debugName());
    return true;
  }

  // Case E: to(norm(to(%x, fp32), fp32 parameters), low) => norm(%x, fp32 parameters) where the device has the
  // mixed-type kernel.
  bool fuseIntoNorm(Node* reader, size_t offset, Value* low) {
    const std::vector<size_t> parameters =
        offset == 0 ? mixedTypeNormParameters(reader, deviceOf(low)) : std::vector<size_t>();
    if (parameters.empty() || writers_.hasWriters(reader->output())) {
      return false;
    }
    bool anyParameter = false;
    for (size_t index : parameters) {
      const Value* parameter = reader->input(index);
      if (parameter->type()->kind() == c10::TypeKind::NoneType) {
        continue;
      }
      if (recordedDtype(parameter) != c10::ScalarType::Float) {
        return false;  // the mixed kernels take fp32 parameters (or all of the input's dtype)
      }
      anyParameter = true;
    }
    if (!anyParameter) {
      return false;  // without an fp32 parameter ATen takes its low-dtype kernel, not the mixed one
    }
    const std::vector<Use> outputUses = reader->output()->uses();
    if (outputUses.empty()) {
      return false;
    }
    for (const Use& use : outputUses) {
      if (plainCastTarget(use.user) != recordedDtype(low) || writers_.hasWriters(use.user->output())) {
        return false;  // an fp32 reader needs the fp32 result, or a writer would see the shared result
      }
    }
    reader->replaceInput(0, low);
    reader->output()->setType(reader->output()->type()->expectRef<c10::TensorType>().withScalarType(
        recordedDtype(low)));
    for (const Use& use : outputUses) {
      Node* downcast = use.user;
      downcast->output()->replaceAllUsesWith(reader->output());
      casts_.fuse(downcast);
    }
    GRAPH_UPDATE("Fused casts around ", reader->kind().toQualString(), " reading ", low->debugName());
    return true;
  }

  // The device type a tensor value lives on, from its complete type or its observation (through plain casts, which
  // keep devices); nothing when unknown.
  std::optional<c10::DeviceType> deviceOf(const Value* value) const {
    return askThroughPlainCasts(value, [&](const Value* step) -> std::optional<c10::DeviceType> {
      if (auto tensorType = step->type()->cast<c10::TensorType>()) {
        if (auto device = tensorType->device()) {
          return device->type();
        }
      }
      auto it = observed_.find(step);
      if (it != observed_.end() && it->second.isTensor) {
        return it->second.device.type();
      }
      return std::nullopt;
    });
  }

  // The number of dimensions a value has, from its complete type or its observed sizes; nothing when unknown. Plain
  // casts keep their input's sizes, so an inserted cast's dim is its input's. A rank that depends on the input is
  // unknown (a plain cast's rank varies exactly when its input's does, so checking the value itself suffices).
  std::optional<int64_t> knownDim(const Value* value) const {
    if (inputDependentRank_.count(value)) {
      return std::nullopt;
    }
    return askThroughPlainCasts(value, [&](const Value* step) -> std::optional<int64_t> {
      if (auto tensorType = step->type()->cast<c10::TensorType>()) {
        if (auto dim = tensorType->dim()) {
          return static_cast<int64_t>(*dim);
        }
      }
      auto it = observed_.find(step);
      if (it == observed_.end() || !it->second.isTensor || definedInLoopBody(step)) {
        return std::nullopt;
      }
      const std::optional<std::vector<int64_t>> sizes = knownSizes(it->second);
      return sizes ? std::make_optional(static_cast<int64_t>(sizes->size())) : std::nullopt;
    });
  }

  std::shared_ptr<Graph> graph_;
  const ObservedValues& observed_;
  CastLedger& casts_;
  const KernelQuery& kernelExists_;
  WriterQuery writers_;
  const std::unordered_set<const Value*> inputDependentRank_;
};

} // namespace

bool FuseCasts(
    const std::shared_ptr<Graph>& graph,
    CastLedger& casts,
    const ObservedValues& observed,
    const KernelQuery& kernelExists) {
  GRAPH_DUMP("Before FuseCasts", graph);
  const bool changed = CastFuser(graph, casts, observed, kernelExists).run();
  GRAPH_DUMP("After FuseCasts", graph);
  return changed;
}

} // namespace torch_mp::jit
