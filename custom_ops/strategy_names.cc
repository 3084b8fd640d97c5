#include "strategy_names.h"

#include <cstring>

namespace lstm_ort {
namespace {

struct NamedStrategy {
  const char* name;
  Strategy value;
};

// In enum order.
constexpr NamedStrategy kStrategies[] = {
    {"auto", Strategy::kAuto},
    {"tiled", Strategy::kTiled},
    {"splitk", Strategy::kSplitK},
    {"persistent", Strategy::kPersistent},
    {"wavefront", Strategy::kWavefront},
};
constexpr int kCount = sizeof(kStrategies) / sizeof(kStrategies[0]);

}  // namespace

bool ParseStrategy(const char* name, Strategy* out) {
  for (const NamedStrategy& s : kStrategies) {
    if (std::strcmp(name, s.name) == 0) {
      *out = s.value;
      return true;
    }
  }
  return false;
}

const char* StrategyName(Strategy strategy) {
  for (const NamedStrategy& s : kStrategies)
    if (s.value == strategy) return s.name;
  return "?";
}

std::string StrategyNames(const char* separator) {
  std::string out;
  for (int i = 0; i < kCount; ++i) out += std::string(i ? separator : "") + kStrategies[i].name;
  return out;
}

std::string StrategyChoices() {
  std::string out;
  for (int i = 0; i < kCount; ++i) out += std::string(i == 0 ? "" : i + 1 == kCount ? " or " : ", ") + kStrategies[i].name;
  return out;
}

}  // namespace lstm_ort
