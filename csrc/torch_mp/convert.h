// Conversion ahead of time: torch_mp::jit::convertModule (a scripted or frozen module and example inputs in, a
// frozen mixed-precision module and its report out) and its options.
#pragma once

#include "jit/pipeline.h"
