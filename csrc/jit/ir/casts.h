// Plain dtype casts, and the ledger of the casts a conversion creates.
//
// A plain cast is `aten::to(%x, dtype, false, false, None)`: it keeps sizes, rank, device and layout, and only
// rounds. Every cast the conversion adds is created by one CastLedger, which marks it (attribute `torch_mp_cast`,
// the same on every cast, so equal casts still merge in common-subexpression elimination) and accounts for it:
// passes that fold a cast into its readers hand it to `fuse` (counted, with the bytes it would have moved), passes
// that find it changes nothing hand it to `cancel`; what is left at the end is read off the graph by its mark, so a
// cast any pass (PyTorch's dead-code elimination included) destroyed is simply gone. `takeMark` removes the marks
// at the end (a graph handed to the user carries none), saying which casts they were.
#pragma once

#include <torch/csrc/jit/ir/ir.h>

#include <array>
#include <cstdint>
#include <optional>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "contract/conversion_report.h"
#include "jit/ir/observed_values.h"

namespace torch_mp::jit {

using contract::CastRecord;

// The target dtype of a plain dtype cast, or nothing for any other node.
std::optional<c10::ScalarType> plainCastTarget(const torch::jit::Node* node);

// The first answer `ask` gives for `value` or, walking back through plain casts (which keep sizes, rank and device),
// for the value each cast read; nothing when none answers. `ask` returns an std::optional.
template <typename Ask>
auto askThroughPlainCasts(const torch::jit::Value* value, const Ask& ask) -> decltype(ask(value)) {
  for (;;) {
    if (auto answer = ask(value)) {
      return answer;
    }
    if (!plainCastTarget(value->node())) {
      return std::nullopt;
    }
    value = value->node()->input(0);
  }
}

// The constant arguments of plain casts (dtype, non_blocking=false, copy=false, memory_format=None), each constant
// shared by up to kReadersPerConstant casts made through one CastArguments: thousands of casts add a few constants,
// not four each for PyTorch's pooling to merge again. Not one for all of them: a value's uses are a vector that
// destroying a reader scans and shifts (Node::dropInput), so cancelling or fusing thousands of casts that share one
// constant is quadratic (0.26 s at 96k nodes). A constant is placed ahead of the first cast that reads it, in the
// graph's top block, and moved ahead of any later cast inserted before it, so it dominates every reader. One per
// pass: a later pass (dead-code elimination, constant pooling) may remove or merge them.
class CastArguments {
 public:
  explicit CastArguments(torch::jit::Graph& graph) : graph_(graph) {}

  torch::jit::Graph& graph() const {
    return graph_;
  }
  // The inputs of `aten::to` casting `value` to `dtype`.
  std::array<torch::jit::Value*, 5> of(torch::jit::Value* value, c10::ScalarType dtype);

 private:
  // The node of the graph's top block that holds the insertion point or that it is at.
  torch::jit::Node* nodeAheadOfInsertPoint();
  // `cached`, or a new constant of that value where it has none or it has kReadersPerConstant uses, placed or moved
  // before `ahead`.
  torch::jit::Value* shared(torch::jit::Value*& cached, const c10::IValue& constant, torch::jit::Node* ahead);

  static constexpr size_t kReadersPerConstant = 64;

  torch::jit::Graph& graph_;
  std::unordered_map<c10::ScalarType, torch::jit::Value*> dtypes_;
  torch::jit::Value* false_ = nullptr;
  torch::jit::Value* none_ = nullptr;
  std::unordered_set<const torch::jit::Node*> constants_;  // every node the above held
};

// Inserts a plain cast of `value` to `dtype` at the graph's insertion point, its output typed with the new dtype. Not
// the conversion's own: those come from CastLedger::create.
torch::jit::Value* insertCast(CastArguments& arguments, torch::jit::Value* value, c10::ScalarType dtype);

class CastLedger {
 public:
  // Bytes are counted at the sizes `observed` holds (0 for a value it lacks).
  explicit CastLedger(const ObservedValues& observed) : observed_(observed) {}

  // Inserts a cast of the conversion at the insertion point of the arguments' graph.
  torch::jit::Value* create(CastArguments& arguments, torch::jit::Value* value, c10::ScalarType dtype);
  // Whether a ledger created this node.
  static bool created(const torch::jit::Node* node);

  // Destroys a cast nobody reads any more because its readers now convert inside their own kernels; counted as
  // fused when the conversion created it.
  void fuse(torch::jit::Node* cast);
  // Destroys a cast whose result always equals `sameValue` (a no-op or a lossless round trip); its readers read
  // `sameValue` instead.
  static void cancel(torch::jit::Node* cast, torch::jit::Value* sameValue);

  int fusedCasts() const {
    return fusedCasts_;
  }
  int64_t fusedCastBytes() const {
    return fusedCastBytes_;
  }

  // What a cast moves per inference, at the observed size of the value it reads.
  CastRecord recordOf(const torch::jit::Node* cast) const;

  // Removes the ledger's mark from the node (a cast stays a cast); whether it carried one.
  static bool takeMark(torch::jit::Node* node);

 private:
  const ObservedValues& observed_;
  int fusedCasts_ = 0;
  int64_t fusedCastBytes_ = 0;
};

} // namespace torch_mp::jit
