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

bool GemmStepForcedFromEnvironment() {
  const char* v = std::getenv("LSTM_ORT_GEMM_STEP");
  return v && std::string(v) == "1";
}

int ClusterSizeFromEnvironment() {
  const char* v = std::getenv("LSTM_ORT_CLUSTER_SIZE");
  return v ? std::atoi(v) : 0;
}

int ClusterSlicesFromEnvironment() {
  const char* v = std::getenv("LSTM_ORT_CLUSTER_SLICES");
  return v ? std::atoi(v) : 0;
}

bool LowRankStepwiseForcedFromEnvironment() {
  const char* v = std::getenv("LSTM_ORT_LOW_RANK_STEPWISE");
  return v && std::string(v) == "1";
}

std::optional<MmaOverride> MmaOverrideFromEnvironment() { return ParseMmaOverride(std::getenv("LSTM_ORT_MMA")); }

}  // namespace lstm_ort
