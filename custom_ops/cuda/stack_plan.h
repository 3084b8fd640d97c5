// Which ranges of layers the persistent strategies cut a stack into (call_plan.h asks). Plain C++ (unit-tested); the device's
// limits come from the caller.
#pragma once

#include <optional>
#include <vector>

#include "cuda/heuristics.h"
#include "cuda/persistent/mma_plan.h"
#include "cuda/persistent/plan.h"
#include "lstm_ort/contract.h"

namespace lstm_ort {

// The persistent strategies (auto included) plan on the device's limits; v1 needs none.
inline bool UsesPersistentPlanner(Strategy strategy) {
  return strategy != Strategy::kTiled && strategy != Strategy::kSplitK;
}

std::vector<LayerRange> OneLayerPerRange(int L);

// v1 runs one layer per range; the persistent strategies cut the stack into ranges that fit,
// on tensor cores in operand type `mma` when given. `limits()` returns the DeviceLimits, and is
// called only when they are needed.
template <typename LimitsFn>
std::vector<LayerRange> PlanRanges(Strategy strategy, const Dims& d, LimitsFn&& limits,
                                   std::optional<MmaOperand> mma = std::nullopt) {
  if (!UsesPersistentPlanner(strategy)) return OneLayerPerRange(static_cast<int>(d.L));
  const int L = static_cast<int>(d.L), D = static_cast<int>(d.D), T = static_cast<int>(d.T);
  const int H = static_cast<int>(d.H), B = static_cast<int>(d.B);
  const bool wavefront = strategy != Strategy::kPersistent;
  if (!mma) return PlanStack(L, D, T, H, B, wavefront, limits());
  const DeviceLimits& dev = limits();
  return PlanStack(L, D, T, wavefront, [&](int layers) {
    auto plan = PlanMmaRange(layers, D, H, B, *mma, dev);
    return plan ? plan : PlanRange(layers, D, H, B, dev);  // e.g. too narrow for 16 x 16 tiles
  });
}

}  // namespace lstm_ort
