// Which ranges a call runs (cuda/stack_plan.cc) and their description.
#include <string>

#include "check.h"
#include "cuda/stack_plan.h"
#include "fake_devices.h"

using namespace lstm_ort;

namespace {

Dims Sizes(int64_t L, int64_t D, int64_t H, int64_t B) { return MakeDims(L, D, 50, B, 16, H); }

}  // namespace

TEST(V1PlansWithoutTheDevice) {
  for (Strategy s : {Strategy::kTiled, Strategy::kSplitK}) {
    bool asked = false;
    const DeviceLimits dev = unit::H100();
    const auto ranges = PlanRanges(s, Sizes(3, 2, 64, 4), [&]() -> const DeviceLimits& {
      asked = true;
      return dev;
    });
    CHECK(!asked);
    CHECK_EQ(ranges.size(), size_t{3});
    for (size_t l = 0; l < ranges.size(); ++l) {
      CHECK_EQ(ranges[l].first, static_cast<int>(l));
      CHECK_EQ(ranges[l].count, 1);
      CHECK(!ranges[l].plan);
    }
  }
}

TEST(PersistentPlansOneLayerPerRange) {
  const DeviceLimits dev = unit::H100();
  bool asked = false;
  const auto ranges = PlanRanges(Strategy::kPersistent, Sizes(4, 1, 64, 4), [&]() -> const DeviceLimits& {
    asked = true;
    return dev;
  });
  CHECK(asked);
  CHECK_EQ(ranges.size(), size_t{4});
  for (const LayerRange& r : ranges) {
    CHECK_EQ(r.count, 1);
    CHECK(r.plan.has_value());
  }
}

TEST(AutoPlansLikeWavefront) {
  const DeviceLimits dev = unit::H100();
  const auto limits = [&]() -> const DeviceLimits& { return dev; };
  const auto a = PlanRanges(Strategy::kAuto, Sizes(6, 1, 128, 8), limits);
  const auto w = PlanRanges(Strategy::kWavefront, Sizes(6, 1, 128, 8), limits);
  CHECK_EQ(a.size(), w.size());
  for (size_t i = 0; i < a.size() && i < w.size(); ++i) {
    CHECK_EQ(a[i].first, w[i].first);
    CHECK_EQ(a[i].count, w[i].count);
  }
}
