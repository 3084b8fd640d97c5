// The persistent planner (cuda/persistent/plan.cc) against fake devices: every plan it returns
// must be launchable (shared memory, co-residency) and consistent with the kernel's indexing.
#include <string>

#include "check.h"
#include "cuda/persistent/plan.h"
#include "fake_devices.h"

using namespace lstm_ort;

namespace {

// What the kernel and the scratch layout rely on, for a plan of `layers` layers.
void CheckPlan(const PersistentPlan& p, int layers, int D, int H, int B, const DeviceLimits& dev,
               const std::string& where) {
  const int K = RangeRows(layers, H, D);
  const auto fail = [&](const char* what) { unit::RecordFailure(__FILE__, __LINE__, where + ": " + what); };
  if (!unit::IsPowerOfTwo(p.U) || p.U > 64) fail("U is a power of two <= 64");
  if (!unit::IsPowerOfTwo(p.Bb) || p.Bb < 4 || p.Bb > 64) fail("Bb is a power of two in 4..64");
  if (p.Bb * p.U > 4 * kPersistentThreads) fail("a thread finishes at most 4 cells");
  if (p.R != (p.Bb == 4 ? 4 : 8)) fail("R is 4 for Bb = 4, else 8");
  if (p.P != (p.Bb / p.R) * p.U || p.P * p.S != kPersistentThreads) fail("P tiles x S slices = the block");
  if (p.n_u * p.U < H || (p.n_u - 1) * p.U >= H) fail("n_u blocks of U units cover H, none idle");
  if (p.n_b * p.Bb < B || (p.n_b - 1) * p.Bb >= B) fail("n_b slices of Bb rows cover B, none idle");
  if (p.Bp != p.n_b * p.Bb || p.Bp > (B + 63) / 64 * 64) fail("padded batch fits the h buffer (B rounded to 64)");
  if (p.blocks != layers * D * p.n_u * p.n_b) fail("one block per job");
  if (p.w_floats != static_cast<long long>(K) * (4 * p.U + 4)) fail("weight slice: K rows of 4U + 4 floats");
  if (p.KC % 8 != 0 || p.KC < 8) fail("chunks of whole cp.async groups of 8 rows");
  if (p.resident && p.StagedRows() < K) fail("resident h holds every row");
  if (!p.resident && (p.slots != 2 || p.KC > 256)) fail("streamed h: a ring of two chunks of <= 256 rows");
  const size_t smem = sizeof(float) * (p.w_floats + static_cast<size_t>(p.groups()) * p.P * p.R * 4 +
                                       static_cast<size_t>(p.StagedRows()) * p.Bb);
  if (p.smem != smem) fail("smem = weights + partial sums + staged h");
  if (p.smem > dev.smem_per_block) fail("smem within the opt-in maximum");
  const int per_sm = dev.blocks_per_sm(p.smem, p.R);
  if (per_sm < 1 || p.blocks > dev.sm_count * per_sm) fail("every block co-resident");
}

std::string Where(const char* device, int layers, int D, int H, int B) {
  return std::string(device) + " layers=" + std::to_string(layers) + " D=" + std::to_string(D) +
         " H=" + std::to_string(H) + " B=" + std::to_string(B);
}

}  // namespace

TEST(PlansAreLaunchable) {
  int planned = 0;
  for (const auto& device : unit::TestDevices())
    for (int layers : {1, 2, 3, 8})
      for (int D : {1, 2})
        for (int H : {1, 3, 8, 31, 64, 100, 128, 256, 500, 512, 1024, 2048})
          for (int B : {1, 2, 5, 16, 33, 64, 100, 256}) {
            const auto plan = PlanRange(layers, D, H, B, device.dev);
            if (!plan) continue;
            ++planned;
            CheckPlan(*plan, layers, D, H, B, device.dev, Where(device.name, layers, D, H, B));
          }
  CHECK(planned > 100);
}

TEST(NoPlanWhenWeightsDoNotFit) {
  // One unit's column of weights alone: K rows x 8 floats. H = 8192 needs 256 KiB on an H100.
  CHECK(!PlanRange(1, 1, 8192, 1, unit::H100()));
  CHECK(!PlanRange(1, 1, 2048, 1, unit::SmallGpu()));
  // Too many blocks to be co-resident: 8 SMs x 1 block cannot hold a 2-direction H = 1024 layer.
  CHECK(!PlanRange(1, 2, 1024, 64, unit::SmallGpu()));
  CHECK(PlanRange(1, 1, 8, 1, unit::SmallGpu()).has_value());
}

TEST(NoPlanForShapesTheKernelDoesNotRun) {
  const DeviceLimits dev = unit::H100();
  CHECK(!PlanRange(0, 1, 64, 4, dev));
  CHECK(!PlanRange(kMaxRangeLayers + 1, 1, 64, 4, dev));
  CHECK(!PlanRange(2, 2, 64, 4, dev));  // a wavefront range is unidirectional
  CHECK(!PlanRange(1, 1, 0, 4, dev));
  CHECK(!PlanRange(1, 1, 64, 0, dev));
}

TEST(RangeRowsCountTheLayerInputAboveTheFirst) {
  CHECK_EQ(RangeRows(1, 256, 1), 256);
  CHECK_EQ(RangeRows(3, 256, 1), 512);
  CHECK_EQ(RangeRows(2, 100, 2), 300);
}

TEST(TileKnobRestrictsThePlan) {
  DeviceLimits dev = unit::H100();
  dev.only_u = 8;
  dev.only_bb = 16;
  const auto plan = PlanRange(1, 1, 256, 64, dev);
  CHECK(plan.has_value());
  if (plan) {
    CHECK_EQ(plan->U, 8);
    CHECK_EQ(plan->Bb, 16);
  }
  dev.only_u = 4;  // 64 x 4 blocks: more than the 132 SMs hold
  CHECK(!PlanRange(1, 1, 256, 64, dev));
  dev.only_u = 3;  // no such tile
  CHECK(!PlanRange(1, 1, 256, 64, dev));
}

TEST(ResidentChunksKnobSetsTheStagingGroups) {
  DeviceLimits dev = unit::H100();
  for (int chunks : {1, 2, 3, 4, 9, 0}) {
    dev.resident_chunks = chunks;
    const auto plan = PlanRange(1, 1, 128, 16, dev);
    CHECK(plan.has_value());
    if (plan) {
      CHECK(plan->resident);
      CHECK_EQ(plan->slots, chunks < 1 ? 1 : chunks > 4 ? 4 : chunks);
      CheckPlan(*plan, 1, 1, 128, 16, dev, "chunks=" + std::to_string(chunks));
    }
  }
}

TEST(StackRangesCoverEveryLayerOnce) {
  const DeviceLimits devices[] = {unit::H100(), unit::SmallGpu()};
  for (const DeviceLimits& dev : devices)
    for (bool wavefront : {false, true})
      for (int L : {1, 2, 3, 7, 8, 9, 20})
        for (int D : {1, 2})
          for (int H : {32, 256, 1024, 4096})
            for (int B : {1, 16, 128}) {
              const auto ranges = PlanStack(L, D, 100, H, B, wavefront, dev);
              int next = 0;
              for (const LayerRange& r : ranges) {
                CHECK_EQ(r.first, next);
                CHECK(r.count >= 1 && r.count <= kMaxRangeLayers);
                if (r.count > 1) {
                  CHECK(wavefront && D == 1);
                  CHECK(r.plan.has_value());  // only planned ranges group layers
                }
                if (r.plan) CheckPlan(*r.plan, r.count, D, H, B, dev, Where("stack", r.count, D, H, B));
                next += r.count;
              }
              CHECK_EQ(next, L);
            }
}

TEST(StackLeavesUnplannableLayersToV1) {
  const auto ranges = PlanStack(3, 1, 50, 8192, 4, true, unit::H100());
  CHECK_EQ(ranges.size(), size_t{3});
  for (const LayerRange& r : ranges) {
    CHECK_EQ(r.count, 1);
    CHECK(!r.plan);
  }
}

// Pinned plans, as the planner chose them when this test was written: a change to its cost model
// or limits shows up here first (update the pins if the change is meant).
TEST(PinnedPlansOnH100) {
  const DeviceLimits dev = unit::H100();
  const auto p = PlanRange(1, 1, 256, 16, dev);
  CHECK(p.has_value());
  if (p) {
    CHECK_EQ(p->U, 8);
    CHECK_EQ(p->Bb, 4);
    CHECK_EQ(p->blocks, 128);
    CHECK(p->resident);
    CHECK_EQ(p->smem, size_t{45056});
  }
  // A unidirectional stack that fits on chip runs as one wavefront.
  const auto stack = PlanStack(4, 1, 100, 256, 16, true, dev);
  CHECK_EQ(stack.size(), size_t{1});
  if (stack.size() == 1 && stack[0].plan) {
    CHECK_EQ(stack[0].count, 4);
    CHECK_EQ(stack[0].plan->U, 16);
    CHECK_EQ(stack[0].plan->Bb, 8);
    CHECK_EQ(stack[0].plan->blocks, 128);
    CHECK_EQ(stack[0].plan->smem, size_t{172032});
  }
  // Bidirectional: one layer per range.
  const auto bi = PlanStack(3, 2, 100, 512, 64, true, dev);
  CHECK_EQ(bi.size(), size_t{3});
  for (const LayerRange& r : bi) {
    CHECK(r.plan.has_value());
    if (r.plan) {
      CHECK_EQ(r.plan->U, 16);
      CHECK_EQ(r.plan->Bb, 32);
      CHECK_EQ(r.plan->blocks, 128);
    }
  }
}

TEST(ShortCallsShareOneRangesLaunches) {
  // L2 H128 B64 at T=1: a two-layer interval costs more than a one-layer one, which alone kept a
  // range per layer (13 launches); a range's own launches (projection, states, the kernel's
  // start) outweigh that, so the layers share one range. At H512 a two-layer interval costs more
  // than the launches save, and the layers keep a range each.
  const DeviceLimits dev = unit::H100();
  const auto one_step = PlanStack(2, 1, 1, 128, 64, true, dev);
  CHECK_EQ(one_step.size(), 1u);
  CHECK_EQ(one_step[0].count, 2);
  CHECK_EQ(PlanStack(2, 1, 1, 512, 64, true, dev).size(), 2u);
}
