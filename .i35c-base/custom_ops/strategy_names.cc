#include "strategy_names.h"

#include "name_table.h"

namespace lstm_ort {
namespace {

// In enum order.
constexpr NamedValue<Strategy> kStrategies[] = {
    {"auto", Strategy::kAuto},
    {"tiled", Strategy::kTiled},
    {"splitk", Strategy::kSplitK},
    {"persistent", Strategy::kPersistent},
    {"wavefront", Strategy::kWavefront},
    {"cluster", Strategy::kCluster},
};

}  // namespace

bool ParseStrategy(const char* name, Strategy* out) { return LookUpName(kStrategies, name, out); }

const char* StrategyName(Strategy strategy) { return NameOf(kStrategies, strategy); }

std::string StrategyNames(const char* separator) { return JoinNames(kStrategies, separator); }

std::string StrategyChoices() { return ChoicesOf(kStrategies); }

}  // namespace lstm_ort
