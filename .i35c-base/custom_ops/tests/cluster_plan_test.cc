// The cluster kernel's planner (cuda/cluster/plan.cc): every plan it returns must be one the
// kernel can run (its thread layout, registers and shared memory), for every H and B it accepts.
#include <string>

#include "check.h"
#include "cuda/cluster/plan.h"
#include "fake_devices.h"
#include "cuda/stack_plan.h"

using namespace lstm_ort;

namespace {

void CheckPlan(const ClusterPlan& p, int H, int B, int max_cluster, const std::string& where) {
  const auto fail = [&](const char* what) { unit::RecordFailure(__FILE__, __LINE__, where + ": " + what); };
  if (p.C < 1 || p.C > max_cluster) fail("C within the device's clusters");
  if (p.S != 2 && p.S != 4 && p.S != 8) fail("2, 4 or 8 slices: a unit's 4S lanes share a warp");
  if (p.KPT != 8 && p.KPT != 16 && p.KPT != 32) fail("KPT is a compiled variant");
  if (p.NB != 1 && p.NB != 2 && p.NB != 4 && p.NB != 8) fail("NB is a compiled variant");
  if (p.NB < B || p.NB >= 2 * B) fail("NB is B rounded up to a power of two");
  if (p.Rows() < H) fail("the slices' rows cover H");
  if (p.C * p.U < H || (p.C - 1) * p.U >= H) fail("the blocks' units cover H, every block has some");
  if (p.threads != 4 * p.U * p.S || p.threads % 32) fail("4 U S threads, whole warps");
  if (p.threads > kClusterMaxThreads) fail("within the variant's launch bounds");
  if (p.NB > 4 * p.S) fail("a group has a lane per batch row");
  if (p.smem != 2 * sizeof(float) * p.NB * p.Rows() + 16) fail("two h buffers and two mbarriers");
  if (p.cost <= 0) fail("a cost");
}

}  // namespace

TEST(ClusterPlansEveryAcceptedShape) {
  for (int max_cluster : {8, 16})
    for (int H = 1; H <= 256; ++H)
      for (int B = 1; B <= kClusterMaxBatch; ++B) {
        const auto p = PlanCluster(H, B, max_cluster);
        const std::string where = "H" + std::to_string(H) + " B" + std::to_string(B) + " max " + std::to_string(max_cluster);
        if (!p) {
          // Only H > 128 at clusters of 8 may fail: 4H x H weights need more registers than 8 SMs x 512 x 32.
          CHECK(max_cluster == 8 && H > 128);
          continue;
        }
        CheckPlan(*p, H, B, max_cluster, where);
      }
}

TEST(ClusterRefusesWhatItCannotHold) {
  CHECK(!PlanCluster(257, 1, 16));                 // a column's rows exceed 8 lanes x 32 registers
  CHECK(!PlanCluster(128, kClusterMaxBatch + 1, 16));
  CHECK(!PlanCluster(128, 1, 0));                  // no clusters on the device (before sm_90)
  CHECK(!PlanCluster(0, 1, 16));
  CHECK(PlanCluster(256, 1, 16).has_value());
  CHECK(PlanCluster(64, 8, 1).has_value());        // a single block where the weights fit one SM
}

TEST(ClusterSizeKnobPlansThatSizeOnly) {
  for (int C : {4, 8, 16}) {
    const auto p = PlanCluster(128, 1, 16, C);
    CHECK(p.has_value());
    if (p) CHECK_EQ(p->C, C);  // 128 units split evenly
  }
  CHECK(!PlanCluster(128, 1, 16, 1));  // 256 KB of fp32 weights do not fit one SM's registers
}

TEST(ClusterRangesRunEveryLayerAndSayHow) {
  const ClusterPlan plan = *PlanCluster(128, 1, 16, 8);
  const auto ranges = ClusterRanges(3, plan);
  CHECK_EQ(static_cast<int>(ranges.size()), 3);
  for (int l = 0; l < 3; ++l) {
    CHECK_EQ(ranges[l].first, l);
    CHECK(ranges[l].cluster.has_value() && !ranges[l].plan.has_value());
  }
  const std::string text = DescribeRanges(ranges, StepKernel::kSplitK);
  CHECK_EQ(text.substr(0, 30), std::string("layer 0: cluster (8 blocks of "));
  CHECK(text.find("layer 2: cluster") != std::string::npos);
}
