// The export front's report (torch_mp/_export/report.py): the ConversionReport convert's pipeline assembles, filled
// from what the export front's stages hand on, by FX node: the core's decision per planned node and its plan, the
// casts, graph and fp32 weights apply made, the verification's finding, the stages' seconds. Every id indexes the FX
// node names the report is written with (ConversionReport::nodeNames).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "contract/conversion_report.h"
#include "contract/conversion_request.h"
#include "core/classify_node.h"
#include "core/int8_planner.h"

namespace torch_mp::contract {

// A planned node: the core's decision (core::classifyNode) and what the planner made of it.
struct ProgramNode {
  NodeId id = -1;
  std::string op;
  std::string scope;
  core::NodeDecision decision;
  bool low = false;
  bool forcedToFp32 = false;
  std::optional<double> amax;  // its first output's largest observed magnitude, where that is an fp32 tensor
  int64_t flops = 0;
  std::optional<core::Int8NodePlan> int8;  // the int8 planner's verdict, in an int8 conversion
};

struct ProgramCast {
  NodeId id = -1;
  std::string value;  // the name of the value cast
  std::string from;   // dtype names, as CastRecord's
  std::string to;
  int64_t bytes = 0;
};

// An item of the converted program's graph (GraphItem's kNode or kCast).
struct ProgramGraphItem {
  NodeId id = -1;
  bool isCast = false;
  std::string op;
  std::vector<NodeId> inputs;
  int cast = -1;  // a cast's index in the casts
};

// A tensor the converted program stores in fp32.
struct ProgramWeight {
  std::string name;
  int64_t bytes = 0;
  std::vector<std::string> readers;  // the ops reading it
  std::optional<NodeId> decidedBy;   // its first reader the plan decided
};

struct ProgramRecords {
  std::vector<std::string> names;  // the FX node names every id indexes
  std::vector<ProgramNode> nodes;
  std::vector<ProgramCast> casts;
  std::vector<ProgramGraphItem> graph;
  std::vector<ProgramWeight> keptFp32;
  int64_t weightBytesBefore = 0;
  int64_t weightBytesAfter = 0;
  std::optional<NonFiniteValue> nonFinite;
  std::vector<std::pair<std::string, double>> phases;  // (stage, seconds), in order
};

// The report of an exported program converted with this request. Throws std::invalid_argument (Python: ValueError)
// for an id that indexes no name.
ConversionReport programReport(const ConversionRequest& request, ProgramRecords records);

} // namespace torch_mp::contract
