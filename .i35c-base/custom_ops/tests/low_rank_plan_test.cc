// The persistent factored recurrence's planner (cuda/low_rank/recurrence_plan.cc) against fake
// devices: every plan it returns must be launchable and cover what the kernel indexes.
#include <string>

#include "check.h"
#include "cuda/low_rank/recurrence_plan.h"
#include "fake_devices.h"

using namespace lstm_ort;

namespace {

void CheckPlan(const LowRankPlan& p, int D, int H, int B, int rank, const DeviceLimits& dev, const std::string& where) {
  const auto fail = [&](const char* what) { unit::RecordFailure(__FILE__, __LINE__, where + ": " + what); };
  if (p.rank != rank) fail("planned for the widest rank");
  for (int n : {p.CA, p.BA, p.Bb})
    if (!unit::IsPowerOfTwo(n) || n < 4 || n > 64) fail("CA, BA and Bb are powers of two in 4..64");
  if (!unit::IsPowerOfTwo(p.U) || p.U > 64) fail("U is a power of two <= 64");
  if (p.Pairs1() > kLrpThreads || p.Pairs2() > kLrpThreads) fail("one register tile per thread at most");
  if (p.Pairs1() * p.Slices1() != kLrpThreads || p.Pairs2() * p.Slices2() != kLrpThreads)
    fail("tiles x slices = the block");
  if (p.Bb * p.U > kLrpCellsPerThread * kLrpThreads) fail("a thread finishes at most 4 cells");
  if (p.n_ca * p.CA < rank || (p.n_ca - 1) * p.CA >= rank) fail("phase 1 tiles cover the rank, none idle");
  if (p.n_ba * p.BA < B || (p.n_ba - 1) * p.BA >= B) fail("phase 1 tiles cover the batch, none idle");
  if (p.n_u * p.U < H || (p.n_u - 1) * p.U >= H) fail("phase 2 tiles cover H, none idle");
  if (p.n_b * p.Bb < B || (p.n_b - 1) * p.Bb >= B) fail("phase 2 tiles cover the batch, none idle");
  if (p.per_dir < p.n_ca * p.n_ba || p.per_dir < p.n_u * p.n_b) fail("a block per tile of either phase");
  if (p.blocks != D * p.per_dir) fail("blocks = directions x blocks per direction");
  if (p.a_floats != static_cast<long long>(H) * p.CA || p.b_floats != static_cast<long long>(rank) * 4 * p.U)
    fail("resident tiles: A [H][CA], B [rank][4U]");
  if (p.stage_floats < static_cast<long long>(H) * p.BA || p.stage_floats < static_cast<long long>(rank) * p.Bb)
    fail("the staging buffer holds either phase's input");
  if (p.red_floats < static_cast<long long>(kLrpThreads) * kLrpTileRows * 4) fail("a partial tile per thread");
  for (long long n : {p.a_floats, p.b_floats, p.stage_floats})
    if (n % 4) fail("regions start float4-aligned");
  if (p.smem != sizeof(float) * (p.a_floats + p.b_floats + p.stage_floats + p.red_floats)) fail("smem adds up");
  if (p.smem > dev.smem_per_block) fail("smem within the opt-in maximum");
  const int per_sm = dev.blocks_per_sm(p.smem, kLrpTileRows);
  if (per_sm < 1 || p.blocks > dev.sm_count * per_sm) fail("every block co-resident");
}

}  // namespace

TEST(LowRankPlansAreLaunchable) {
  int planned = 0;
  for (const auto& device : unit::TestDevices())
    for (int D : {1, 2})
      for (int H : {1, 17, 128, 301, 512, 1024, 2048})
        for (int B : {1, 3, 16, 64, 65, 256})
          for (int rank : {1, 3, 32, 128, 256, 512}) {
            if (rank > 4 * H) continue;
            const auto plan = PlanLowRankRecurrence(D, H, B, rank, device.dev);
            if (!plan) continue;
            ++planned;
            CheckPlan(*plan, D, H, B, rank, device.dev,
                      std::string(device.name) + " D=" + std::to_string(D) + " H=" + std::to_string(H) +
                          " B=" + std::to_string(B) + " rank=" + std::to_string(rank));
          }
  CHECK(planned > 200);
}

TEST(LowRankTargetsPlanOnAnH100) {
  // The shapes at rank H/4, and the bidirectional seed: each factored layer stays on chip.
  for (int H : {512, 1024})
    for (int D : {1, 2}) CHECK(PlanLowRankRecurrence(D, H, 64, H / 4, unit::H100()).has_value());
}

TEST(LowRankFactorsTooLargeForTheChipDoNotPlan) {
  // B alone at H=4096, rank 4096 is 64 MiB of fp32: more than 132 blocks' shared memory.
  CHECK(!PlanLowRankRecurrence(1, 4096, 64, 4096, unit::H100()).has_value());
  CHECK(!PlanLowRankRecurrence(1, 512, 64, 0, unit::H100()).has_value());
}
