// A cast the converted graph holds, as the report lists it (ConversionReport::casts): what CastLedger::recordOf reads
// off a cast. Apart from casts.h so that the report, a public header, does not carry the ledger with it.
#pragma once

#include <cstdint>
#include <string>

#include "jit/ir/ir_utils.h"

namespace torch_mp::jit {

struct CastRecord {
  NodeId id = -1;     // its item in the report's graph
  std::string value;  // debug name of the value cast
  std::string from;   // dtype names, e.g. "Float"
  std::string to;
  int64_t bytes = 0;  // read + written per inference, at the example inputs' sizes
  bool reached = true;  // whether the example inputs ran it (a cast on a path they skipped moves no bytes then)
};

} // namespace torch_mp::jit
