#include "cuda/developer_knobs.h"

#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "strategy_names.h"

namespace lstm_ort {

PersistentKnobs ParsePersistentKnobs(const char* tile, const char* chunks) {
  PersistentKnobs k;
  if (tile) std::sscanf(tile, "%d,%d", &k.only_u, &k.only_bb);
  if (chunks) k.resident_chunks = std::atoi(chunks);
  return k;
}

PersistentKnobs PersistentKnobsFromEnvironment() {
  return ParsePersistentKnobs(std::getenv("LSTM_ORT_PERSISTENT_TILE"), std::getenv("LSTM_ORT_PERSISTENT_CHUNKS"));
}

std::optional<Strategy> ParseStrategyOverride(const char* value) {
  if (!value || !*value) return std::nullopt;
  Strategy s;
  if (!ParseStrategy(value, &s))
    throw std::invalid_argument("LSTM_ORT_STRATEGY must be " + StrategyChoices() + ", got '" + value + "'");
  return s;
}

std::optional<Strategy> StrategyOverrideFromEnvironment() {
  return ParseStrategyOverride(std::getenv("LSTM_ORT_STRATEGY"));
}

std::optional<MmaOverride> ParseMmaOverride(const char* value) {
  if (!value || !*value) return std::nullopt;
  const std::string v = value;
  if (v == "fma") return MmaOverride{};
  for (MmaOperand op : {MmaOperand::kTf32x3, MmaOperand::kTf32, MmaOperand::kFp16, MmaOperand::kBf16})
    if (v == MmaOperandName(op)) return MmaOverride{op};
  throw std::invalid_argument("LSTM_ORT_MMA must be fma, 3xtf32, tf32, fp16 or bf16, got '" + v + "'");
}

namespace {

// Whether a knob is set to exactly `value`.
bool KnobIs(const char* name, const char* value) {
  const char* v = std::getenv(name);
  return v && std::string(v) == value;
}

// A knob's number; 0 when unset or not a number.
int IntFromEnvironment(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : 0;
}

}  // namespace

bool GemmStepForcedFromEnvironment() { return KnobIs("LSTM_ORT_GEMM_STEP", "1"); }

bool HalfStepWeightsDisabledFromEnvironment() { return KnobIs("LSTM_ORT_HALF_STEP_WEIGHTS", "0"); }

int ClusterSizeFromEnvironment() { return IntFromEnvironment("LSTM_ORT_CLUSTER_SIZE"); }

int ClusterSlicesFromEnvironment() { return IntFromEnvironment("LSTM_ORT_CLUSTER_SLICES"); }

bool LowRankStepwiseForcedFromEnvironment() { return KnobIs("LSTM_ORT_LOW_RANK_STEPWISE", "1"); }

std::optional<MmaOverride> MmaOverrideFromEnvironment() { return ParseMmaOverride(std::getenv("LSTM_ORT_MMA")); }

}  // namespace lstm_ort
