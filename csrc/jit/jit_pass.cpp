// The load-time pass (torch_mp/jit_pass.h): registered once with torch::jit's pass manager as a pre-pass.
//
// Why a pre-pass: the profiling executor runs custom pre-passes on the no-grad path while the graph still holds its
// prim::profile nodes, that is, what every tensor was when the graph ran. With the TensorExpr fuser enabled (the
// default) it wipes those types before the post-passes run, so a post-pass would not know a single dtype.
//
// Contract, per graph the executor optimizes while the pass is enabled: a graph with profiled types, no tensor that
// needs a gradient, and frozen (see scanTensorSources) is converted with convert()'s stages
// (ConvertTypedGraph), its profile nodes consumed and its types left unspecialized as the executor leaves them; the
// result runs behind a guard on the tensor inputs' dtype and device (prim::TypeCheck), whose other branch is the
// unconverted graph as a prim::FallbackGraph, which the executor turns into a function it profiles and optimizes on
// its own. Any other graph, and any failure, leaves the graph exactly as it was.
#include "torch_mp/jit_pass.h"

#include <torch/csrc/jit/jit_log.h>
#include <torch/csrc/jit/passes/clear_profiling.h>
#include <torch/csrc/jit/passes/pass_manager.h>
#include <torch/csrc/jit/passes/tensorexpr_fuser.h>

#include <atomic>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "jit/pipeline.h"
#include "jit/value_observer.h"

namespace torch_mp::jit {
namespace {

using torch::jit::Block;
using torch::jit::Graph;
using torch::jit::Node;
using torch::jit::Value;

struct PassState {
  std::mutex mutex;
  bool registered = false;
  std::optional<JitPassOptions> options;  // set while enabled
  PassActivity activity;
};

PassState& state() {
  static PassState instance;
  return instance;
}

std::atomic<bool> enabled{false};  // read without the lock by every graph the executor optimizes

bool isProfile(const Node* node) {
  return node->kind() == c10::prim::profile || node->kind() == c10::prim::profile_ivalue;
}

bool executed(const Node* profile) {
  if (!profile->hasAttribute(c10::attr::profiled_type)) {
    return false;
  }
  auto type = profile->ty(c10::attr::profiled_type)->cast<c10::TensorType>();
  return type && type->scalarType();
}

// What the profile says about the graph: whether any tensor was profiled, whether one needed a gradient.
void scanProfiles(const Block* block, bool& profiled, bool& needsGradient) {
  for (const Node* node : block->nodes()) {
    for (const Block* sub : node->blocks()) {
      scanProfiles(sub, profiled, needsGradient);
    }
    if (node->kind() == c10::prim::profile && executed(node)) {
      profiled = true;
      needsGradient = needsGradient || node->ty(c10::attr::profiled_type)->expectRef<c10::TensorType>()
                                           .requiresGrad().value_or(false);
    }
  }
}

// Whether the graph reads tensors from module attributes (prim::GetAttr) and holds no tensor constant: a module
// that was not frozen. A frozen graph may still read the few tensors freezing leaves as attributes (those it cannot
// prove unmutated, such as MultiheadAttention's in_proj_weight): they are planned like activations, cast per call.
void scanTensorSources(const Block* block, bool& readsAttributes, bool& holdsConstants) {
  for (const Node* node : block->nodes()) {
    for (const Block* sub : node->blocks()) {
      scanTensorSources(sub, readsAttributes, holdsConstants);
    }
    if (node->kind() == c10::prim::GetAttr) {
      readsAttributes = readsAttributes || containsTensor(node->output()->type());
    } else if (node->kind() == c10::prim::Constant) {
      holdsConstants = holdsConstants || node->output()->type()->kind() == c10::TypeKind::TensorType;
    }
  }
}

SkipReason whyNotConvertible(const Graph& graph) {
  bool profiled = false;
  bool needsGradient = false;
  scanProfiles(graph.block(), profiled, needsGradient);
  if (!profiled) {
    return SkipReason::kNoProfile;
  }
  if (needsGradient) {
    return SkipReason::kNeedsGradient;
  }
  bool readsAttributes = false;
  bool holdsConstants = false;
  scanTensorSources(graph.block(), readsAttributes, holdsConstants);
  if (readsAttributes && !holdsConstants) {
    return SkipReason::kNotFrozen;
  }
  return SkipReason::kNone;
}

void removeProfiles(Block* block) {
  for (auto it = block->nodes().begin(); it != block->nodes().end();) {
    for (Block* sub : it->blocks()) {
      removeProfiles(sub);
    }
    if (isProfile(*it)) {
      for (size_t i = 0; i < it->outputs().size(); ++i) {
        it->output(i)->replaceAllUsesWith(it->input(i));
      }
      it.destroyCurrent();
    } else {
      ++it;
    }
  }
}

// The profiled type of the value (from a profile node reading it that ran), or nullptr.
c10::TensorTypePtr profiledType(const Value* value) {
  for (const torch::jit::Use& use : value->uses()) {
    if (use.user->kind() == c10::prim::profile && executed(use.user)) {
      return use.user->ty(c10::attr::profiled_type)->expect<c10::TensorType>();
    }
  }
  return nullptr;
}

// Whether the profile shows the block ran (a profile node in it, at any depth, ran), did not (it has profile
// nodes, none ran), or cannot tell (it has none).
std::optional<bool> profiledAsRun(const Block* block) {
  std::optional<bool> ran;
  for (const Node* node : block->nodes()) {
    for (const Block* sub : node->blocks()) {
      const std::optional<bool> subRan = profiledAsRun(sub);
      if (subRan == true) {
        return true;
      }
      ran = ran.has_value() || subRan.has_value() ? std::make_optional(false) : ran;
    }
    if (node->kind() == c10::prim::profile) {
      if (executed(node)) {
        return true;
      }
      ran = false;
    }
  }
  return ran;
}

// The executor profiles values where nodes read them, not where blocks return them: a tensor that the branch taken
// returns and nothing else reads (the output of nn.TransformerEncoderLayer's fast path, returned through two nested
// Ifs) has no profile of its own. Where the profile tells which branch of an If ran, what it returned is what the
// If's output was profiled as (or was found to be, outer Ifs first). Collects those types, to be set once the
// profile nodes are gone.
void typesOfBranchReturns(Block* block, std::unordered_map<Value*, c10::TensorTypePtr>& types) {
  for (Node* node : block->nodes()) {
    if (node->kind() == c10::prim::If) {
      const std::optional<bool> first = profiledAsRun(node->blocks()[0]);
      const std::optional<bool> second = profiledAsRun(node->blocks()[1]);
      Block* taken = nullptr;
      if (first == true || (first != false && second == false)) {
        taken = second == true ? nullptr : node->blocks()[0];  // both ran: profiled more than once
      } else if (second == true || (second != false && first == false)) {
        taken = node->blocks()[1];
      }
      for (size_t i = 0; taken && i < node->outputs().size(); ++i) {
        Value* returned = taken->outputs()[i];
        auto known = types.find(node->output(i));
        c10::TensorTypePtr type = known != types.end() ? known->second : profiledType(node->output(i));
        if (type && !profiledType(returned) && returned->type()->kind() == c10::TypeKind::TensorType) {
          types.emplace(returned, type);
        }
      }
    }
    for (Block* sub : node->blocks()) {
      typesOfBranchReturns(sub, types);
    }
  }
}

// Removes the profile nodes that never ran (in branches not taken). PyTorch's RemoveProfileNodesAndSpecializeTypes
// leaves a value unspecialized when its profiles differ, and an unrun profile (no dtype) always differs from a run
// one: a tensor read in the branch not taken and returned by the one taken (`if not is_batched: output =
// output.squeeze(1)` in nn.GRU / LSTM / MultiheadAttention) would lose its dtype.
void removeUnexecutedProfiles(Block* block) {
  for (auto it = block->nodes().begin(); it != block->nodes().end();) {
    for (Block* sub : it->blocks()) {
      removeUnexecutedProfiles(sub);
    }
    if (it->kind() == c10::prim::profile && !executed(*it)) {
      it->output()->replaceAllUsesWith(it->input());
      it.destroyCurrent();
    } else {
      ++it;
    }
  }
}

// The device the profile saw the graph's computed tensors on (CUDA when any was), which picks the default policy.
c10::DeviceType deviceOf(const Block* block) {
  for (const Node* node : block->nodes()) {
    for (const Block* sub : node->blocks()) {
      if (deviceOf(sub) == c10::DeviceType::CUDA) {
        return c10::DeviceType::CUDA;
      }
    }
    for (const Value* output : node->outputs()) {
      auto type = output->type()->cast<c10::TensorType>();
      if (type && type->device() && type->device()->is_cuda()) {
        return c10::DeviceType::CUDA;
      }
    }
  }
  return c10::DeviceType::CPU;
}

ConvertOptions convertOptionsFor(const JitPassOptions& pass, c10::DeviceType device) {
  ConvertOptions options = defaultOptions(device, pass.dtype);
  if (pass.policy) {
    options.policy = *pass.policy;
    options.policyName = pass.policyName;
  }
  options.planner = pass.planner;
  options.verifyOutputs = false;  // nothing to run it on: the executor runs it next
  options.fuseCasts = pass.fuseCasts;
  options.fusedKernels = pass.fusedKernels;
  options.channelsLast = pass.channelsLast;
  options.fuseConvolutions = pass.fuseConvolutions;
  return options;
}

// What each tensor input must be for the converted graph to apply: the profiled dtype and device, no gradient;
// nullptr for an input with no profiled dtype or device, which is not checked.
std::vector<c10::TensorTypePtr> inputGuards(const Graph& graph) {
  std::vector<c10::TensorTypePtr> guards;
  for (const Value* input : graph.inputs()) {
    auto type = input->type()->cast<c10::TensorType>();
    guards.push_back(type && type->scalarType() && type->device()
                         ? c10::TensorType::get()
                               ->withScalarType(type->scalarType())
                               ->withDevice(type->device())
                               ->withRequiresGrad(false)
                         : nullptr);
  }
  return guards;
}

// Puts the graph's body behind `prim::TypeCheck` of the guarded inputs: the body runs where they match, `fallback`
// (a graph with the same inputs and outputs) as a prim::FallbackGraph where they do not.
void guardWithFallback(Graph& graph, const std::vector<c10::TensorTypePtr>& guards, std::shared_ptr<Graph> fallback) {
  std::vector<Value*> checked;
  std::vector<c10::TypePtr> types;
  for (size_t i = 0; i < guards.size(); ++i) {
    if (guards[i]) {
      checked.push_back(graph.inputs()[i]);
      types.push_back(guards[i]);
    }
  }
  if (checked.empty()) {
    return;
  }
  std::vector<Node*> body(graph.nodes().begin(), graph.nodes().end());
  Node* check = graph.create(c10::prim::TypeCheck, checked, checked.size() + 1);
  check->tys_(c10::attr::types, types);
  graph.prependNode(check);
  for (size_t i = 0; i < checked.size(); ++i) {
    check->output(i)->setType(types[i]);
  }
  check->outputs().back()->setType(c10::BoolType::get());

  Node* branch = graph.create(c10::prim::If, {check->outputs().back()}, graph.outputs().size());
  graph.appendNode(branch);
  Block* converted = branch->addBlock();
  Block* original = branch->addBlock();
  for (Node* node : body) {
    node->moveBefore(converted->return_node());
  }
  for (size_t i = 0; i < graph.outputs().size(); ++i) {
    converted->registerOutput(graph.outputs()[i]);
    branch->output(i)->setType(graph.outputs()[i]->type());
  }
  for (size_t i = 0; i < checked.size(); ++i) {
    checked[i]->replaceAllUsesAfterNodeWith(check, check->output(i));
  }
  for (size_t i = 0; i < graph.outputs().size(); ++i) {
    graph.return_node()->replaceInput(i, branch->output(i));
  }

  Node* call = graph.create(c10::prim::FallbackGraph, graph.inputs(), graph.outputs().size());
  call->g_(c10::attr::Subgraph, std::move(fallback));
  original->appendNode(call);
  for (size_t i = 0; i < call->outputs().size(); ++i) {
    call->output(i)->setType(branch->output(i)->type());
    original->registerOutput(call->output(i));
  }
}

void record(SkipReason outcome, std::optional<ConversionReport> report = std::nullopt, std::string error = "") {
  PassState& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.activity.lastOutcome = outcome;
  if (report) {
    s.activity.lastReport = std::move(report);
  }
  if (outcome == SkipReason::kNone) {
    s.activity.converted += 1;
  } else {
    s.activity.skipped += 1;
    if (outcome == SkipReason::kFailed) {
      s.activity.lastError = std::move(error);
    }
  }
}

} // namespace

void runMixedPrecisionPass(std::shared_ptr<Graph>& graph) {
  if (!enabled.load()) {
    return;
  }
  std::optional<JitPassOptions> options = mixedPrecisionPassOptions();
  if (!options) {
    return;
  }
  GRAPH_DEBUG("torch_mp pass: the graph as profiled:\n", *graph);
  const SkipReason reason = whyNotConvertible(*graph);
  if (reason != SkipReason::kNone) {
    GRAPH_DEBUG("torch_mp pass: leaving the graph as it is: ", toString(reason));
    record(reason);
    return;
  }
  std::shared_ptr<Graph> fallback = graph->copy();
  removeProfiles(fallback->block());
  torch::jit::ClearProfilingInformation(fallback);

  std::shared_ptr<Graph> converted = graph->copy();
  ConversionReport report;
  try {
    std::unordered_map<Value*, c10::TensorTypePtr> branchReturns;
    typesOfBranchReturns(converted->block(), branchReturns);
    removeUnexecutedProfiles(converted->block());
    torch::jit::RemoveProfileNodesAndSpecializeTypes(converted);
    removeProfiles(converted->block());  // profile_ivalue nodes, which that pass leaves
    for (const auto& [value, type] : branchReturns) {
      if (!value->type()->expectRef<c10::TensorType>().scalarType()) {
        value->setType(type);
      }
    }
    report = ConvertTypedGraph(converted, convertOptionsFor(*options, deviceOf(converted->block())));
  } catch (const std::exception& error) {
    TORCH_WARN("torch_mp: the mixed-precision pass left a graph in fp32 because its conversion failed: ",
               error.what());
    record(SkipReason::kFailed, std::nullopt, error.what());
    return;
  }
  if (report.lowPrecisionNodes() == 0) {
    GRAPH_DEBUG("torch_mp pass: leaving the graph as it is: ", toString(SkipReason::kNothingToLower));
    record(SkipReason::kNothingToLower, std::move(report));
    return;
  }
  const std::vector<c10::TensorTypePtr> guards = inputGuards(*converted);
  torch::jit::RemoveTensorTypeSpecializations(converted);
  guardWithFallback(*converted, guards, std::move(fallback));
  GRAPH_UPDATE("torch_mp pass: ", report.lowPrecisionNodes(), " nodes in ", report.dtype, ", ", report.casts.size(),
               " casts:\n", *converted);
  graph = std::move(converted);
  record(SkipReason::kNone, std::move(report));
}

const char* toString(SkipReason reason) {
  switch (reason) {
    case SkipReason::kNone:
      return "converted";
    case SkipReason::kNoProfile:
      return "no profiled tensor types (legacy executor, or no tensors)";
    case SkipReason::kNeedsGradient:
      return "a tensor needs a gradient (training, not inference)";
    case SkipReason::kNotFrozen:
      return "weights are read from module attributes: freeze the module (torch.jit.freeze) before saving it";
    case SkipReason::kNothingToLower:
      return "the plan put no node in low precision";
    case SkipReason::kFailed:
      return "the conversion failed";
  }
  return "?";
}

void enableMixedPrecisionPass(const JitPassOptions& options) {
  TORCH_CHECK_VALUE(
      options.dtype == c10::ScalarType::Half || options.dtype == c10::ScalarType::BFloat16,
      "torch_mp: the mixed-precision pass needs dtype float16 or bfloat16, got ", options.dtype);
  PassState& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (!s.registered) {
    torch::jit::registerPrePass(runMixedPrecisionPass);
    s.registered = true;
  }
  s.options = options;
  enabled.store(true);
}

void disableMixedPrecisionPass() {
  PassState& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  enabled.store(false);
  s.options.reset();
}

bool mixedPrecisionPassEnabled() {
  return enabled.load();
}

std::optional<JitPassOptions> mixedPrecisionPassOptions() {
  PassState& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  return s.options;
}

PassActivity mixedPrecisionPassActivity() {
  PassState& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  return s.activity;
}

} // namespace torch_mp::jit
