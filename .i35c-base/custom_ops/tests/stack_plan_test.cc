// Which ranges a call runs (cuda/stack_plan.cc) and their description.
#include <string>

#include "check.h"
#include "cuda/stack_plan.h"
#include "fake_devices.h"

using namespace lstm_ort;

namespace {

Dims Sizes(int64_t L, int64_t D, int64_t H, int64_t B) {
  Dims d;
  d.L = L;
  d.D = D;
  d.T = 50;
  d.I = 16;
  d.H = H;
  d.B = B;
  return d;
}

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

TEST(DescriptionNamesEachRange) {
  PersistentPlan p;
  p.blocks = 96;
  p.U = 8;
  p.Bb = 16;
  p.smem = 100 * 1024 + 17;
  const std::vector<LayerRange> ranges = {{0, 1, std::nullopt, std::nullopt}, {1, 3, p, std::nullopt}, {4, 1, p, std::nullopt}};
  CHECK_EQ(DescribeRanges(ranges, StepKernel::kSplitK),
           std::string("layer 0: v1 splitk (one launch per step); "
                       "layers 1-3: wavefront (96 blocks of 8 units x 16 rows, 100 KiB shared memory); "
                       "layer 4: persistent (96 blocks of 8 units x 16 rows, 100 KiB shared memory)"));
  CHECK_EQ(DescribeRanges(OneLayerPerRange(2), StepKernel::kTiled),
           std::string("layer 0: v1 tiled (one launch per step); layer 1: v1 tiled (one launch per step)"));
}
