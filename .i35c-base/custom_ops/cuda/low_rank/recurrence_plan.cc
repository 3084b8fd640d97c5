#include "cuda/low_rank/recurrence_plan.h"

namespace lstm_ort {
namespace {

int Tiles(int n, int tile) { return (n + tile - 1) / tile; }

// Cycles per step that no split removes: two grid barriers and two L2 round trips.
constexpr double kStepOverhead = 4000;

// Per-thread cycles of one phase: the FMA loop (16 FMAs and two shared loads per K row), summing
// the partial sums, and staging the input from L2 (16 bytes per copy, all in flight at once).
double PhaseCycles(long long fmas_per_thread, int pairs, long long staged_per_thread) {
  return 1.5 * fmas_per_thread + 30.0 * LowRankPlan::Groups(pairs) + staged_per_thread;
}

}  // namespace

std::optional<LowRankPlan> PlanLowRankRecurrence(int D, int H, int B, int rank, const DeviceLimits& dev) {
  if (D < 1 || D > 2 || H < 1 || B < 1 || rank < 1) return std::nullopt;
  std::optional<LowRankPlan> best;
  for (int CA = 4; CA <= 64 && (CA == 4 || CA / 2 < rank); CA *= 2)
    for (int BA = 4; BA <= 64 && (BA == 4 || BA / 2 < B); BA *= 2)
      for (int U = 1; U <= 64 && (U == 1 || U / 2 < H); U *= 2)
        for (int Bb = 4; Bb <= 64 && (Bb == 4 || Bb / 2 < B); Bb *= 2) {
          LowRankPlan p;
          p.rank = rank;
          p.CA = CA;
          p.BA = BA;
          p.U = U;
          p.Bb = Bb;
          if (p.Pairs1() > kLrpThreads || p.Pairs2() > kLrpThreads) continue;
          p.n_ca = Tiles(rank, CA);
          p.n_ba = Tiles(B, BA);
          p.n_u = Tiles(H, U);
          p.n_b = Tiles(B, Bb);
          const int tiles1 = p.n_ca * p.n_ba, tiles2 = p.n_u * p.n_b;
          p.per_dir = tiles1 > tiles2 ? tiles1 : tiles2;
          p.blocks = D * p.per_dir;
          p.a_floats = static_cast<long long>(H) * CA;
          p.b_floats = static_cast<long long>(rank) * 4 * U;
          const long long stage1 = static_cast<long long>(H) * BA, stage2 = static_cast<long long>(rank) * Bb;
          p.stage_floats = stage1 > stage2 ? stage1 : stage2;
          p.red_floats = static_cast<long long>(kLrpThreads) * kLrpTileRows * 4;
          p.smem = sizeof(float) * (p.a_floats + p.b_floats + p.stage_floats + p.red_floats);
          if (p.smem > dev.smem_per_block) continue;
          const int per_sm = dev.blocks_per_sm(p.smem, kLrpTileRows);
          if (per_sm < 1 || p.blocks > per_sm * dev.sm_count) continue;
          const long long fma1 = static_cast<long long>(BA) * CA * H / kLrpThreads;
          const long long fma2 = static_cast<long long>(Bb) * 4 * U * rank / kLrpThreads;
          p.cost = PhaseCycles(fma1, p.Pairs1(), stage1 / kLrpThreads) +
                   PhaseCycles(fma2, p.Pairs2(), stage2 / kLrpThreads) + kStepOverhead;
          if (!best || p.cost < best->cost || (p.cost == best->cost && p.blocks < best->blocks)) best = p;
        }
  return best;
}

}  // namespace lstm_ort
