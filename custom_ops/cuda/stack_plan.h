// Which ranges of layers one call runs, and how, in words. Plain C++ (unit-tested); the device's
// limits come from the caller.
#pragma once

#include <string>
#include <vector>

#include "cuda/heuristics.h"
#include "cuda/persistent/plan.h"
#include "lstm_ort/contract.h"

namespace lstm_ort {

// The persistent strategies (auto included) plan on the device's limits; v1 needs none.
inline bool UsesPersistentPlanner(Strategy strategy) {
  return strategy != Strategy::kTiled && strategy != Strategy::kSplitK;
}

std::vector<LayerRange> OneLayerPerRange(int L);

// v1 runs one layer per range; the persistent strategies cut the stack into ranges that fit.
// `limits()` returns the DeviceLimits, and is called only when they are needed.
template <typename LimitsFn>
std::vector<LayerRange> PlanRanges(Strategy strategy, const Dims& d, LimitsFn&& limits) {
  if (!UsesPersistentPlanner(strategy)) return OneLayerPerRange(static_cast<int>(d.L));
  return PlanStack(static_cast<int>(d.L), static_cast<int>(d.D), static_cast<int>(d.T), static_cast<int>(d.H),
                   static_cast<int>(d.B), strategy != Strategy::kPersistent, limits());
}

// "layer 0: v1 tiled (one launch per step); layers 1-3: wavefront (...)", for reports.
std::string DescribeRanges(const std::vector<LayerRange>& ranges, StepKernel v1_step);

}  // namespace lstm_ort
