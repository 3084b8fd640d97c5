// Developer knobs: environment variables that force the CUDA path's choices in experiments
// (docs/ops.md). Parsing is plain C++ and unit-tested; the planner's knobs are read once per
// device with its limits (device_limits.cc), LSTM_ORT_STRATEGY once per kernel instance.
#pragma once

#include <optional>

#include "cuda/persistent/mma_operand.h"
#include "lstm_ort/contract.h"

namespace lstm_ort {

struct PersistentKnobs {
  int only_u = 0, only_bb = 0;  // LSTM_ORT_PERSISTENT_TILE=U,Bb: plan with this tile only
  int resident_chunks = 1;      // LSTM_ORT_PERSISTENT_CHUNKS: cp.async groups of resident h (the planner keeps 1..4)
};

// From the variables' values, null where unset. Values are read as sscanf("%d,%d") and atoi do:
// what does not parse stays 0.
PersistentKnobs ParsePersistentKnobs(const char* tile, const char* chunks);
PersistentKnobs PersistentKnobsFromEnvironment();

// LSTM_ORT_STRATEGY: nothing when unset or empty; std::invalid_argument naming the strategies
// for a value that is none of them.
std::optional<Strategy> ParseStrategyOverride(const char* value);
std::optional<Strategy> StrategyOverrideFromEnvironment();

// LSTM_ORT_MMA: the persistent kernels' product, overriding what the precision chooses: "fma"
// (the FP32 FMA kernel) or a tensor-core operand ("3xtf32", "tf32", "fp16", "bf16"). Unset or
// empty: no override. std::invalid_argument for anything else.
struct MmaOverride {
  std::optional<MmaOperand> operand;  // empty: the FMA kernel
};
std::optional<MmaOverride> ParseMmaOverride(const char* value);
std::optional<MmaOverride> MmaOverrideFromEnvironment();

// LSTM_ORT_GEMM_STEP=1: every layer of an fp32 call on v1's cuBLAS step, persistent plans or not
// (for measuring where it wins). Anything else: no override.
bool GemmStepForcedFromEnvironment();

// LSTM_ORT_HALF_STEP_WEIGHTS=0: v1's cuBLAS step in the reduced modes reads the fp32 weights as
// before the 16-bit copies (heuristics.h StepWeightsFor), for measuring what the copies gain.
// The streaming step still serves the batches it would with copies. Anything else: no override.
bool HalfStepWeightsDisabledFromEnvironment();

// LSTM_ORT_CLUSTER_SIZE=C: the cluster kernel plans with clusters of C blocks only (for
// measurement; read at every call). Unset, empty or not a number: 0, the planner's choice.
int ClusterSizeFromEnvironment();

// LSTM_ORT_CLUSTER_SLICES=S: the cluster kernel plans with S lanes per gate column only (2, 4
// or 8; for measurement; read at every call). Unset or not a number: 0, the planner's choice.
int ClusterSlicesFromEnvironment();

// LSTM_ORT_LOW_RANK_STEPWISE=1: factored recurrences on the per-step path (cuBLAS h A, then one
// launch per step) even where the persistent one plans (for tests and measurement).
bool LowRankStepwiseForcedFromEnvironment();

}  // namespace lstm_ort
