#include "jit/rewrite/fuse_pointwise.h"

#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/jit_log.h>

#include <algorithm>
#include <map>
#include <optional>
#include <unordered_set>
#include <vector>

#include "jit/ir/ir_utils.h"
#include "jit/ir/writers.h"
#include "kernels/fused_pointwise.h"

namespace torch_mp::jit {
namespace {

using kernels::PointwiseOp;
using torch::jit::Block;
using torch::jit::Graph;
using torch::jit::Node;
using torch::jit::Value;

bool isFusibleDtype(std::optional<c10::ScalarType> dtype) {
  return dtype == c10::ScalarType::Float || dtype == c10::ScalarType::Half || dtype == c10::ScalarType::BFloat16;
}

// How an aten node maps to the kernel's program: its opcode, and for the arithmetic the constant number that is its
// second operand, where it is one.
struct PointwiseForm {
  PointwiseOp op;
  std::optional<double> number;
};

bool isConstantOne(const Value* value) {
  const std::optional<c10::IValue> constant = torch::jit::toIValue(value);
  return constant && ((constant->isInt() && constant->toInt() == 1) ||
                      (constant->isDouble() && constant->toDouble() == 1.0));
}

std::optional<PointwiseForm> formOf(const Node* node) {
  struct Unary {
    const char* schema;
    PointwiseOp op;
  };
  static const Unary unaries[] = {
      {"aten::relu(Tensor self) -> Tensor", PointwiseOp::kRelu},
      {"aten::neg(Tensor self) -> Tensor", PointwiseOp::kNeg},
  };
  for (const Unary& unary : unaries) {
    if (node->matches(unary.schema)) {
      return PointwiseForm{unary.op};
    }
  }
  struct Binary {
    const char* schema;
    PointwiseOp op;
    bool scalar;
    bool alpha;
  };
  static const Binary binaries[] = {
      {"aten::add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor", PointwiseOp::kAdd, false, true},
      {"aten::sub.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor", PointwiseOp::kSub, false, true},
      {"aten::mul.Tensor(Tensor self, Tensor other) -> Tensor", PointwiseOp::kMul, false, false},
      {"aten::div.Tensor(Tensor self, Tensor other) -> Tensor", PointwiseOp::kDiv, false, false},
      {"aten::add.Scalar(Tensor self, Scalar other, Scalar alpha=1) -> Tensor", PointwiseOp::kAdd, true, true},
      {"aten::sub.Scalar(Tensor self, Scalar other, Scalar alpha=1) -> Tensor", PointwiseOp::kSub, true, true},
      {"aten::mul.Scalar(Tensor self, Scalar other) -> Tensor", PointwiseOp::kMul, true, false},
      {"aten::div.Scalar(Tensor self, Scalar other) -> Tensor", PointwiseOp::kDiv, true, false},
  };
  for (const Binary& binary : binaries) {
    if (!node->matches(binary.schema) || (binary.alpha && !isConstantOne(node->input(2)))) {
      continue;
    }
    if (!binary.scalar) {
      return PointwiseForm{binary.op};
    }
    const std::optional<c10::IValue> other = torch::jit::toIValue(node->input(1));
    if (!other || !(other->isDouble() || other->isInt())) {
      return std::nullopt;  // a computed or complex number
    }
    return PointwiseForm{binary.op, other->toScalar().toDouble()};
  }
  return std::nullopt;
}

// How ATen's kernel on a device takes the number of `tensor op number`; the program does the same.
enum class NumberUse {
  kFloat,       // as an fp32 value
  kInOpDtype,   // rounded to the op's dtype first (the CPU's add and sub promote it to the tensor's dtype)
  kReciprocal,  // the tensor multiplied by the number's fp32 reciprocal (CUDA's division by a CPU scalar)
};

struct NumberRule {
  PointwiseOp op;
  c10::DeviceType device;
  NumberUse use;
};

// Per op and device, read off ATen's kernels (and checked against them by tests/python/test_cuda_fused_kernels.py):
// the CPU's add / sub kernels get the number converted to the common dtype by TensorIterator, its mul / div read the
// original in fp32 (original_scalar_value); CUDA's read it in fp32 (scalar_value<opmath_t>), and div_true_kernel_cuda
// multiplies by the number's fp32 reciprocal. A device not listed never fuses an op with a number.
constexpr NumberRule kNumberRules[] = {
    {PointwiseOp::kAdd, c10::DeviceType::CPU, NumberUse::kInOpDtype},
    {PointwiseOp::kSub, c10::DeviceType::CPU, NumberUse::kInOpDtype},
    {PointwiseOp::kMul, c10::DeviceType::CPU, NumberUse::kFloat},
    {PointwiseOp::kDiv, c10::DeviceType::CPU, NumberUse::kFloat},
    {PointwiseOp::kAdd, c10::DeviceType::CUDA, NumberUse::kFloat},
    {PointwiseOp::kSub, c10::DeviceType::CUDA, NumberUse::kFloat},
    {PointwiseOp::kMul, c10::DeviceType::CUDA, NumberUse::kFloat},
    {PointwiseOp::kDiv, c10::DeviceType::CUDA, NumberUse::kReciprocal},
};

// The fp32 reciprocal of a number where forming it in fp32 (1.0f / float(number)) and rounding the double one to
// fp32 agree, else nothing. They differ for some numbers fp32 does not hold (1e-3: 999.99994 against 1000). On a lent
// H200 with torch 2.11 (benchmarks/cuda_division_probe.py, 2026-11-27) ATen's CUDA x / 1e-3 equalled x * 1000 on all
// of 2^20 elements and x * 999.99994 on 26% of them, though the kernel's source reads as the fp32 reciprocal; no
// other torch version has been probed, so such a division is left to ATen.
std::optional<float> unambiguousReciprocal(double number) {
  const float inFloat = 1.0f / static_cast<float>(number);
  return inFloat == static_cast<float>(1.0 / number) ? std::make_optional(inFloat) : std::nullopt;
}

// How the device's kernel takes the form's number, or nothing where the program could not take it alike.
std::optional<NumberUse> numberUse(const PointwiseForm& form, c10::DeviceType device) {
  for (const NumberRule& rule : kNumberRules) {
    if (rule.op == form.op && rule.device == device) {
      if (rule.use == NumberUse::kReciprocal && !unambiguousReciprocal(*form.number)) {
        return std::nullopt;
      }
      return rule.use;
    }
  }
  return std::nullopt;
}

// Where a tensor of a chain lives: its sizes and its device. Every tensor of a chain has the root's placement.
struct Placement {
  std::vector<int64_t> sizes;
  c10::Device device;

  bool operator==(const Placement& other) const {
    return sizes == other.sizes && device == other.device;
  }
  bool operator!=(const Placement& other) const {
    return !(*this == other);
  }
};

class PointwiseFuser {
 public:
  PointwiseFuser(
      const std::shared_ptr<Graph>& graph,
      const ObservedValues& observed,
      CastLedger& casts)
      : graph_(graph), observed_(observed), casts_(casts), writers_(graph, /*isFrozen=*/true) {}

  int run() {
    visit(graph_->block());
    return fused_;
  }

 private:
  // One chain being built: its members in program order (producers first), its leaf tensors, its program.
  struct Chain {
    std::vector<Node*> members;
    std::vector<Value*> inputs;
    std::vector<int64_t> program;
    std::vector<double> scalars;
    // per value on the stack: a dtype that holds it exactly (Float when nothing narrower is known), so a rounding
    // that changes nothing (relu of a bf16 value, rounded to bf16 again) is left out
    std::vector<c10::ScalarType> exactIn;
    size_t maxDepth = 0;
  };

  void visit(Block* block) {
    // roots from the end, so a root takes the longest chain ending at it; a fused chain's members (all before its
    // root) are gone when the walk goes on from the first node the fusion inserted
    for (Node* node = block->return_node()->prev(); node != block->param_node();) {
      for (Block* sub : node->blocks()) {
        visit(sub);
      }
      std::optional<Placement> placement = fusiblePlacement(node);
      Node* inserted = placement ? fuseFrom(node, *placement) : nullptr;
      node = (inserted ? inserted : node)->prev();
    }
  }

  // The node's output placement when it is an op the kernel has, reading and writing tensors of fusible dtypes that
  // all have that placement (sizes and device); else nothing.
  std::optional<Placement> fusiblePlacement(const Node* node) const {
    const std::optional<PointwiseForm> form = formOf(node);
    if (node->outputs().size() != 1 || (!form && !isFusibleDtype(plainCastTarget(node))) ||
        writers_.hasWriters(node->output())) {
      return std::nullopt;
    }
    const std::optional<Placement> written = placementOf(node->output());
    if (!written || written->sizes.empty() ||
        (form && form->number && !numberUse(*form, written->device.type()))) {
      return std::nullopt;
    }
    const size_t tensorOperands = form && form->op >= PointwiseOp::kAdd && !form->number ? 2 : 1;
    for (size_t i = 0; i < tensorOperands; ++i) {
      if (placementOf(node->input(i)) != written) {
        return std::nullopt;
      }
    }
    return written;
  }

  // The placement of a tensor of a fusible dtype on a device the kernel runs on: a constant's own, or what the
  // example inputs showed of the value or of the value a plain cast (which keeps sizes and device) read. Nothing for
  // other values, nor inside loop bodies, where a value's sizes may change between iterations.
  std::optional<Placement> placementOf(const Value* value) const {
    if (value->node()->kind() == c10::prim::Constant) {
      const std::optional<c10::IValue> constant = torch::jit::toIValue(value);
      if (!constant || !constant->isTensor()) {
        return std::nullopt;
      }
      const at::Tensor& tensor = constant->toTensor();
      if (!isFusibleDtype(tensor.scalar_type()) || !hasKernel(tensor.device().type())) {
        return std::nullopt;
      }
      return Placement{tensor.sizes().vec(), tensor.device()};
    }
    if (!isFusibleDtype(recordedDtype(value)) || definedInLoopBody(value)) {
      return std::nullopt;
    }
    const ObservedValue* seen = observedThroughCasts(observed_, value);
    if (!seen || !hasKernel(seen->device.type())) {
      return std::nullopt;
    }
    std::optional<std::vector<int64_t>> sizes = knownSizes(*seen);
    if (!sizes) {
      return std::nullopt;
    }
    return Placement{std::move(*sizes), seen->device};
  }

  // Whether this build of the library has a kernel for the device type, asked of the dispatcher once per type: a
  // fused call on a device without one could not run (a CPU-only build never fuses CUDA values).
  bool hasKernel(c10::DeviceType device) const {
    auto known = hasKernel_.find(device);
    if (known == hasKernel_.end()) {
      known = hasKernel_.emplace(device, kernels::hasFusedPointwiseKernel(device)).first;
    }
    return known->second;
  }

  // Replaces the chain ending at `root` by one fused call where that is worth it; returns the first node it inserted
  // (nullptr when it fused nothing).
  Node* fuseFrom(Node* root, const Placement& placement) {
    Chain chain;
    emitNode(root, placement, chain);
    const bool worthIt = chain.members.size() >= 2 && chain.maxDepth <= static_cast<size_t>(kernels::kMaxPointwiseStack);
    if (!worthIt) {
      return nullptr;
    }
    const auto written = static_cast<int64_t>(*recordedDtype(root->output()));
    const size_t end = chain.program.size();
    if (chain.program[end - 2] == static_cast<int64_t>(PointwiseOp::kRound) && chain.program[end - 1] == written) {
      chain.program.resize(end - 2);  // writing the output rounds to its dtype the same way
    }
    torch::jit::WithInsertPoint guard(root);
    Node* list = graph_->insertNode(graph_->createList(c10::TensorType::get(), chain.inputs));
    Value* inputs = list->output();
    Node* fusedNode = graph_->create(
        c10::Symbol::fromQualString(kernels::kFusedPointwiseOp),
        {inputs, graph_->insertConstant(chain.program), graph_->insertConstant(chain.scalars),
         graph_->insertConstant(written)});
    graph_->insertNode(fusedNode);
    fusedNode->output()->copyMetadata(root->output());
    copyNodeId(root, fusedNode);
    root->output()->replaceAllUsesWith(fusedNode->output());
    GRAPH_UPDATE("Fused ", chain.members.size(), " pointwise ops into ", fusedNode->output()->debugName());
    for (auto it = chain.members.rbegin(); it != chain.members.rend(); ++it) {  // readers before what they read
      if (plainCastTarget(*it)) {
        casts_.fuse(*it);
      } else {
        (*it)->destroy();
      }
    }
    ++fused_;
    return list;
  }

  // Appends the node's program: its operands' (fused producers or inputs), then its op and its rounding.
  void emitNode(Node* node, const Placement& placement, Chain& chain) {
    const std::optional<PointwiseForm> form = formOf(node);
    const c10::ScalarType written = *recordedDtype(node->output());
    emitOperand(node->input(0), placement, chain);
    if (form) {
      PointwiseOp op = form->op;
      if (form->number) {
        emitNumber(*form->number, *numberUse(*form, placement.device.type()), written, op, chain);
      } else if (form->op >= PointwiseOp::kAdd) {
        emitOperand(node->input(1), placement, chain);
      }
      emit(chain, op, 0);
      if (form->op >= PointwiseOp::kAdd) {  // two values in, one computed in fp32 out
        chain.exactIn.pop_back();
        chain.exactIn.back() = c10::ScalarType::Float;
      }  // relu and neg keep every value of a dtype in it
    }
    if (written != c10::ScalarType::Float && chain.exactIn.back() != written) {
      emit(chain, PointwiseOp::kRound, static_cast<int64_t>(written));
      chain.exactIn.back() = written;
    }
    chain.members.push_back(node);
  }

  // Pushes the number of `tensor op number` as the device's ATen kernel takes it (kNumberRules), `op` becoming the
  // op that applies it; `written` is the op's dtype.
  static void emitNumber(double number, NumberUse use, c10::ScalarType written, PointwiseOp& op, Chain& chain) {
    if (use == NumberUse::kReciprocal) {
      number = *unambiguousReciprocal(number);
      op = PointwiseOp::kMul;
    }
    emit(chain, PointwiseOp::kScalar, static_cast<int64_t>(chain.scalars.size()));
    chain.scalars.push_back(number);
    chain.exactIn.push_back(c10::ScalarType::Float);
    chain.maxDepth = std::max(chain.maxDepth, chain.exactIn.size());
    if (use == NumberUse::kInOpDtype && written != c10::ScalarType::Float) {
      emit(chain, PointwiseOp::kRound, static_cast<int64_t>(written));
      chain.exactIn.back() = written;
    }
  }

  void emitOperand(Value* value, const Placement& placement, Chain& chain) {
    Node* producer = value->node();
    if (canAbsorb(producer, placement)) {
      emitNode(producer, placement, chain);
      return;
    }
    auto known = std::find(chain.inputs.begin(), chain.inputs.end(), value);
    const int64_t index = known - chain.inputs.begin();
    if (known == chain.inputs.end()) {
      chain.inputs.push_back(value);
    }
    emit(chain, PointwiseOp::kInput, index);
    chain.exactIn.push_back(recordedDtype(value).value_or(c10::ScalarType::Float));
    chain.maxDepth = std::max(chain.maxDepth, chain.exactIn.size());
  }

  // A producer joins the chain when it is fusible with the same placement, only the chain reads it, and nothing
  // writes what it reads (it is computed at the root's position instead of its own).
  bool canAbsorb(Node* producer, const Placement& placement) const {
    if (producer->kind() == c10::prim::Param || producer->outputs().size() != 1 ||
        producer->output()->uses().size() != 1 ||
        producer->output()->uses()[0].user->owningBlock() != producer->owningBlock() ||
        fusiblePlacement(producer) != placement) {
      return false;
    }
    for (const Value* input : producer->inputs()) {
      if (writers_.hasWriters(input)) {
        return false;
      }
    }
    return true;
  }

  static void emit(Chain& chain, PointwiseOp op, int64_t operand) {
    chain.program.push_back(static_cast<int64_t>(op));
    chain.program.push_back(operand);
  }

  std::shared_ptr<Graph> graph_;
  const ObservedValues& observed_;
  CastLedger& casts_;
  WriterQuery writers_;
  mutable std::map<c10::DeviceType, bool> hasKernel_;
  int fused_ = 0;
};

} // namespace

int FusePointwise(const std::shared_ptr<Graph>& graph, const ObservedValues& observed, CastLedger& casts) {
  GRAPH_DUMP("Before FusePointwise", graph);
  const int fused = PointwiseFuser(graph, observed, casts).run();
  GRAPH_DUMP("After FusePointwise", graph);
  return fused;
}

} // namespace torch_mp::jit
