#include "jit/rewrite/apply_precision_plan.h"

#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/jit_log.h>

#include <c10/util/flat_hash_map.h>
#include <c10/util/hash.h>

#include <algorithm>
#include <map>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "core/op_facts.h"
#include "core/stored_weights.h"
#include "jit/ir/ir_utils.h"
#include "jit/plan/numeric_guards.h"

namespace torch_mp::jit {
namespace {

using core::Precision;
using torch::jit::Block;
using torch::jit::Graph;
using torch::jit::Node;
using torch::jit::Value;


struct ValueAndDtypeHash {
  size_t operator()(const std::pair<Value*, c10::ScalarType>& key) const {
    return c10::hash_combine(std::hash<const Value*>{}(key.first), static_cast<size_t>(key.second));
  }
};

bool holdsFp32Tensor(const c10::IValue& value) {
  if (value.isTensor()) {
    return value.toTensor().scalar_type() == c10::ScalarType::Float;
  }
  if (value.isTensorList()) {
    for (const at::Tensor& tensor : value.toTensorVector()) {
      if (tensor.scalar_type() == c10::ScalarType::Float) {
        return true;
      }
    }
    return false;
  }
  if (value.isTuple()) {
    for (const c10::IValue& element : value.toTupleRef().elements()) {
      if (holdsFp32Tensor(element)) {
        return true;
      }
    }
  }
  return false;
}

class PlanApplier {
 public:
  PlanApplier(
      const std::shared_ptr<Graph>& graph,
      const DataflowMapping& mapping,
      const core::PrecisionPlan& plan,
      const ObservedValues& observed,
      c10::ScalarType lowDtype,
      CastLedger& casts)
      : graph_(graph),
        castArguments_(*graph),
        mapping_(mapping),
        plan_(plan),
        observed_(observed),
        lowDtype_(lowDtype),
        casts_(casts) {}

  void run() {
    findStoragesReadInFp32();
    for (size_t n = 0; n < mapping_.planned.size(); ++n) {
      forEachMember(n, [&](Node* member) {
        if (plan_.precision[n] == Precision::kLow) {
          for (Value* output : member->outputs()) {
            if (isObservedFp32(observed_, output)) {
              recordLowDtype(output);
            }
          }
        }
        collectCasts(member, static_cast<int>(n));  // reads the plan, not the recorded dtypes
      });
    }
    for (size_t n = 0; n < mapping_.planned.size(); ++n) {
      if (mapping_.planned[n].unobserved) {
        readLowConstantsInFp32(mapping_.planned[n].node);
      }
    }
    for (const CastRequest& request : requests_) {
      forEachCastGroup(request, [&](const CastRequest& group) {
        Value* cast = insertCastFor(group);
        for (const auto& [reader, index] : group.uses) {
          reader->replaceInput(index, cast);
        }
      });
    }
    for (const ReaderCast& own : readerCasts_) {
      torch::jit::WithInsertPoint guard(own.reader);
      Value* cast = casts_.create(castArguments_, own.reader->input(own.index), own.dtype);
      own.reader->replaceInput(own.index, cast);
    }
    for (size_t n = 0; n < mapping_.planned.size(); ++n) {
      if (plan_.precision[n] == Precision::kLow &&
          mapping_.dataflow.nodes[n].category == core::OpCategory::kLowFp32Output) {
        writeOutputsInFp32(mapping_.planned[n].node);
      }
    }
  }

 private:
  // One cast of a value to a dtype, and every (node, input index) that reads it.
  struct CastRequest {
    Value* value;
    c10::ScalarType dtype;
    std::vector<std::pair<Node*, size_t>> uses;
  };

  // A reader's own cast of a tied tensor it only reads, made right before it so that it sees every write until then.
  struct ReaderCast {
    Node* reader;
    size_t index;
    c10::ScalarType dtype;
  };

  template <typename Visit>
  void forEachMember(size_t n, const Visit& visit) {
    visit(mapping_.planned[n].node);
    for (Node* boundary : mapping_.planned[n].blockBoundaries) {
      visit(boundary);
    }
  }

  // setRecordedDtype with one type object per distinct fp32 type: the values' types are mostly equal (a frozen
  // graph's `Tensor` with the observed dtype), and a new type per value costs an allocation of the type and its
  // shapes. Types are immutable, so values may share one.
  void recordLowDtype(Value* value) {
    const c10::TypePtr type = value->type();  // a copy: setRecordedDtype replaces the value's
    for (const auto& [fp32, low] : lowTypes_) {
      if (*fp32 == *type) {
        value->setType(low);
        return;
      }
    }
    setRecordedDtype(value, lowDtype_);
    if (lowTypes_.size() < kLowTypesKept) {
      lowTypes_.emplace_back(type, value->type());
    }
  }

  // A low_fp32_output node computes low; one cast right after it gives every reader the fp32 value the plan
  // promised. A reader planned low then reads low -> fp32 -> low, which CancelCasts takes back to the low output,
  // and fuse_casts may fold the cast into the node's own kernel.
  void writeOutputsInFp32(Node* node) {
    for (Value* output : node->outputs()) {
      if (!isObservedFp32(observed_, output)) {
        continue;
      }
      torch::jit::WithInsertPoint guard(node->next());
      Value* cast = casts_.create(castArguments_, output, c10::ScalarType::Float);
      output->replaceAllUsesWith(cast);
      cast->node()->replaceInput(0, output);
    }
  }

  // Swaps in low-precision constants now; records the casts the node's other inputs need. The node is a member of
  // planner node `planned`.
  void collectCasts(Node* node, int planned) {
    const Precision wanted = plan_.precision[planned];
    for (size_t i = 0; i < node->inputs().size(); ++i) {
      Value* input = node->input(i);
      if (input->node()->kind() == c10::prim::Constant) {
        if (wanted == Precision::kLow) {
          if (storagesReadInFp32_.count(constantStorage(input))) {
            requestCast(input, lowDtype_, node, i);
          } else if (Value* low = lowConstant(input)) {
            node->replaceInput(i, low);
          }
        }
        continue;
      }
      auto it = mapping_.values.find(input);
      if (it == mapping_.values.end()) {
        continue;
      }
      const core::DataflowGraph::Value& value = mapping_.dataflow.values[it->second];
      const Precision produced = core::producedPrecision(mapping_.dataflow, plan_.precision, it->second);
      const bool readsOnly = value.tie != core::Tie::kNone && accessOf(value, planned) == core::Access::kReadsOnly;
      if (!readsOnly) {
        if (value.tie != core::Tie::kAll && produced != wanted) {
          requestCast(input, dtypeOf(wanted), node, i);
        }
        continue;
      }
      const Precision copy = core::copyPrecision(mapping_.dataflow, plan_.precision, it->second);
      if (copy != produced) {
        requestCast(input, dtypeOf(copy), node, i);  // the copy its sharing readers write
      }
      if (wanted != copy) {
        readerCasts_.push_back({node, i, dtypeOf(wanted)});
      }
    }
  }

  static core::Access accessOf(const core::DataflowGraph::Value& value, int consumer) {
    for (size_t i = 0; i < value.consumers.size(); ++i) {
      if (value.consumers[i] == consumer) {
        return value.access[i];
      }
    }
    return core::Access::kShares;
  }

  c10::ScalarType dtypeOf(Precision precision) const {
    return precision == Precision::kLow ? lowDtype_ : c10::ScalarType::Float;
  }

  // A node the example inputs never reached reads its weights as low-precision copies cast back to fp32, so no
  // weight is stored twice: not one the reached path also reads in low precision, nor one of its own (freezing
  // folds the slow path of nn.MultiheadAttention into weight slices only it reads). A weight beyond the low
  // dtype's range stays as it is, and so does one read where a 0 gives inf or NaN (core/op_facts: a divisor) with
  // values the low dtype turns into 0 (a learned scale of 1e-9).
  // A weight the converted graph also reads in fp32 elsewhere is read as it is.
  void readLowConstantsInFp32(Node* node) {
    for (size_t i = 0; i < node->inputs().size(); ++i) {
      Value* input = node->input(i);
      const void* storage = constantStorage(input);
      if (!storage || storagesReadInFp32_.count(storage) || (!lowConstants_.count(input) && !storableLow(node, i))) {
        continue;
      }
      if (Value* low = lowConstant(input)) {
        requestCast(low, c10::ScalarType::Float, node, i);
      }
    }
  }

  // Whether an unobserved node's tensor-constant input `i` may be stored low and cast back (readLowConstantsInFp32).
  bool storableLow(const Node* node, size_t i) const {
    const at::Tensor weight = torch::jit::toIValue(node->input(i))->toTensor();
    if (weight.scalar_type() != c10::ScalarType::Float) {
      return false;
    }
    const FiniteMagnitudes magnitudes = finiteMagnitudes(weight);
    const bool zeroSensitive = core::factsOf(node->kind().toQualString()).zeroSensitiveInput == static_cast<int>(i);
    return magnitudes.largest <= largestFinite(lowDtype_) &&
        (!zeroSensitive || magnitudes.smallest >= smallestNonZero(lowDtype_));
  }

  // The fp32 constant storages that are not copied low although low nodes read them: their low readers cast them at
  // run time (core/stored_weights decides, from who reads each storage).
  void findStoragesReadInFp32() {
    std::unordered_map<const Node*, size_t> plannerNodeOf;
    for (size_t n = 0; n < mapping_.planned.size(); ++n) {
      forEachMember(n, [&](Node* member) { plannerNodeOf.emplace(member, n); });
    }
    std::vector<const void*> storages;
    std::vector<core::StoredTensor> tensors;
    for (const auto& [storage, held] : constantStorages(*graph_)) {
      core::StoredTensor& tensor = tensors.emplace_back();
      tensor.bytes = held.bytes;
      tensor.fp32 = held.fp32;
      for (const Node* reader : held.readers) {
        (readsFp32Storage(reader, storage, plannerNodeOf) ? tensor.readFp32 : tensor.readLow) = true;
      }
      storages.push_back(storage);
    }
    const std::vector<core::Storing> storing = core::storingOf(tensors);
    for (size_t i = 0; i < storing.size(); ++i) {
      if (storing[i] == core::Storing::kFp32 && tensors[i].readLow) {
        storagesReadInFp32_.insert(storages[i]);
      }
    }
  }

  bool readsFp32Storage(
      const Node* reader,
      const void* storage,
      const std::unordered_map<const Node*, size_t>& plannerNodeOf) const {
    auto planned = plannerNodeOf.find(reader);
    if (planned != plannerNodeOf.end() && plan_.precision[planned->second] == Precision::kLow) {
      return false;
    }
    for (size_t i = 0; i < reader->inputs().size(); ++i) {
      if (constantStorage(reader->input(i)) != storage ||
          torch::jit::toIValue(reader->input(i))->toTensor().scalar_type() != c10::ScalarType::Float) {
        continue;
      }
      const bool castBack = planned != plannerNodeOf.end() && mapping_.planned[planned->second].unobserved &&
          storableLow(reader, i);
      if (!castBack) {
        return true;
      }
    }
    return false;
  }

  void requestCast(Value* value, c10::ScalarType dtype, Node* reader, size_t index) {
    auto [slot, added] = requestIndex_.emplace(std::make_pair(value, dtype), requests_.size());
    if (added) {
      requests_.push_back({value, dtype, {}});
    }
    requests_[slot->second].uses.emplace_back(reader, index);
  }

  // Readers inside a branch the example inputs did not take get a cast of their own in that branch; the others share
  // one. A cast placed above both would run on every inference for readers that (on these inputs) never run, such
  // as the slow paths of nn.TransformerEncoderLayer beside its fast path. Calls `insert` on each group: on the
  // request itself where its readers form one.
  template <typename Insert>
  void forEachCastGroup(const CastRequest& request, const Insert& insert) const {
    auto planned = mapping_.values.find(request.value);
    if (planned != mapping_.values.end() && mapping_.dataflow.values[planned->second].tie == core::Tie::kReaders) {
      insert(request);  // its readers write the copy they share
      return;
    }
    const Block* defining = request.value->node()->owningBlock();
    std::vector<const Block*> branches;
    branches.reserve(request.uses.size());
    for (const auto& use : request.uses) {
      branches.push_back(outermostUntakenBlock(use.first->owningBlock(), defining, observed_));
    }
    if (std::all_of(branches.begin(), branches.end(), [&](const Block* b) { return b == branches.front(); })) {
      insert(request);
      return;
    }
    std::vector<CastRequest> groups;
    std::map<const Block*, size_t> groupOfBranch;
    for (size_t u = 0; u < request.uses.size(); ++u) {
      auto [slot, added] = groupOfBranch.emplace(branches[u], groups.size());
      if (added) {
        groups.push_back({request.value, request.dtype, {}});
      }
      groups[slot->second].uses.push_back(request.uses[u]);
    }
    for (const CastRequest& group : groups) {
      insert(group);
    }
  }

  // The cast goes as deep as it can while dominating every reader: into the branch of a prim::If that holds all
  // its readers (so other branches do not pay for it), never into a loop body (it would run every iteration).
  Value* insertCastFor(const CastRequest& request) {
    Value* value = request.value;
    Block* defining = value->node()->owningBlock();
    Block* common = request.uses.front().first->owningBlock();
    for (const auto& use : request.uses) {
      common = commonBlock(common, use.first->owningBlock());
    }
    std::vector<Block*> chain;  // from the readers' common block up to, not including, the defining block
    for (Block* b = common; b != defining; b = parentBlock(b)) {
      chain.push_back(b);
    }
    Node* insertBefore = value->node()->next();
    for (auto it = chain.rbegin(); it != chain.rend() && (*it)->owningNode()->kind() == c10::prim::If; ++it) {
      insertBefore = (*it)->param_node()->next();
    }
    torch::jit::WithInsertPoint guard(insertBefore);
    return casts_.create(castArguments_, value, request.dtype);
  }

  // A constant with every fp32 tensor inside it cast to the low dtype; other entries are kept as they are.
  c10::IValue castConstant(const c10::IValue& value) {
    if (value.isTensor()) {
      const at::Tensor& tensor = value.toTensor();
      return tensor.scalar_type() == c10::ScalarType::Float ? c10::IValue(lowCopy(tensor)) : value;
    }
    if (value.isTensorList()) {
      c10::List<at::Tensor> cast;
      for (const at::Tensor& tensor : value.toTensorVector()) {
        cast.push_back(tensor.scalar_type() == c10::ScalarType::Float ? lowCopy(tensor) : tensor);
      }
      return cast;
    }
    if (value.isTuple()) {
      std::vector<c10::IValue> elements;
      for (const c10::IValue& element : value.toTupleRef().elements()) {
        elements.push_back(castConstant(element));
      }
      return c10::ivalue::Tuple::create(std::move(elements));
    }
    return value;
  }

  // Constants that view one storage (freezing folds weight slices, such as nn.MultiheadAttention's q/k/v
  // projections, into views of the packed weight) get views of one low-precision copy of that storage, so the
  // converted model stores it once, as the fp32 model did.
  at::Tensor lowCopy(const at::Tensor& tensor) {
    const void* storage = tensor.storage().unsafeGetStorageImpl();
    auto it = lowStorages_.find(storage);
    if (it == lowStorages_.end()) {
      const int64_t elements = static_cast<int64_t>(tensor.storage().nbytes() / sizeof(float));
      at::Tensor whole = tensor.new_empty({0}).set_(tensor.storage(), 0, {elements}, {1});
      it = lowStorages_.emplace(storage, whole.detach().to(lowDtype_)).first;
    }
    return it->second.as_strided(tensor.sizes(), tensor.strides(), tensor.storage_offset());
  }

  // The low-precision version of a constant, or nullptr when it holds no fp32 tensor.
  Value* lowConstant(Value* constant) {
    auto it = lowConstants_.find(constant);
    if (it != lowConstants_.end()) {
      return it->second;
    }
    const c10::IValue original = torch::jit::toIValue(constant).value();
    Value* low = nullptr;
    if (holdsFp32Tensor(original)) {
      torch::jit::WithInsertPoint guard(constant->node()->next());
      low = graph_->insertConstant(castConstant(original));
      if (constant->hasDebugName()) {
        low->setDebugName(constant->debugName() + "_" + shortName(lowDtype_));
      }
      GRAPH_UPDATE("Stored constant ", constant->debugName(), " in ", c10::toString(lowDtype_));
    }
    lowConstants_.emplace(constant, low);
    return low;
  }

  static std::string shortName(c10::ScalarType dtype) {
    return dtype == c10::ScalarType::BFloat16 ? "bf16" : "fp16";
  }

  const std::shared_ptr<Graph>& graph_;
  CastArguments castArguments_;
  const DataflowMapping& mapping_;
  const core::PrecisionPlan& plan_;
  const ObservedValues& observed_;
  c10::ScalarType lowDtype_;
  std::vector<CastRequest> requests_;
  std::vector<ReaderCast> readerCasts_;
  std::unordered_map<const void*, at::Tensor> lowStorages_;  // fp32 storage -> its low-precision copy
  ska::flat_hash_map<std::pair<Value*, c10::ScalarType>, size_t, ValueAndDtypeHash> requestIndex_;
  std::unordered_map<Value*, Value*> lowConstants_;
  std::unordered_set<const void*> storagesReadInFp32_;
  static constexpr size_t kLowTypesKept = 8;  // types compared per value, at most
  std::vector<std::pair<c10::TypePtr, c10::TypePtr>> lowTypes_;  // an fp32 tensor type -> the same in lowDtype_
  CastLedger& casts_;
};

} // namespace

void applyPrecisionPlan(
    const std::shared_ptr<Graph>& graph,
    const DataflowMapping& mapping,
    const core::PrecisionPlan& plan,
    const ObservedValues& observed,
    c10::ScalarType lowDtype,
    CastLedger& casts) {
  GRAPH_DUMP("Before applyPrecisionPlan", graph);
  PlanApplier(graph, mapping, plan, observed, lowDtype, casts).run();
  GRAPH_DUMP("After applyPrecisionPlan", graph);
}

} // namespace torch_mp::jit
