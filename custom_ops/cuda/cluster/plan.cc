#include "cuda/cluster/plan.h"

#include <cstdint>

namespace lstm_ort {
namespace {

int NextPowerOfTwo(int n) {
  int p = 1;
  while (p < n) p <<= 1;
  return p;
}

// Estimated cycles of one step: the SM's issue of every warp's instructions (four schedulers),
// plus one thread's dependent chain (its h loads and FMAs), plus a fixed cost of the step's
// exchange. Fitted to the H100, T=1000 B1 (us per step): a step costs ~1 us however many blocks
// share it (H64 on 4 blocks 1.11, on 16 1.10; H128 on 16 1.18), and big blocks cost more (H64 on
// one block of 1024 threads meeting at __syncthreads 1.51; H128 on 4 blocks of 1024 threads 1.75),
// so the planner takes the thinnest blocks.
double StepCost(const ClusterPlan& p) {
  int log2_s = 0;
  while ((1 << log2_s) < p.S) ++log2_s;
  const double per_warp = p.KPT * p.NB           // FMAs
                          + p.KPT / 4 * p.NB     // float4 loads of h
                          + p.NB * (log2_s + 5)  // slice sums, gate gathers and pushes (shuffles)
                          + 30;                  // the cell and the step's bookkeeping
  const double issue = p.threads / 32 * per_warp / 4;
  const double chain = 4.0 * p.KPT + 30.0 * p.KPT / 4 + 4.0 * p.NB;
  const double exchange = 1500 + 8.0 * p.C;
  return issue + chain + exchange;
}

}  // namespace

std::optional<ClusterPlan> PlanCluster(int H, int B, int max_cluster, int only_c) {
  if (H < 1 || B < 1 || B > kClusterMaxBatch) return std::nullopt;
  std::optional<ClusterPlan> best;
  for (int C = 1; C <= max_cluster && C <= kClusterMaxBlocks; C <<= 1) {
    if (only_c > 0 && C != only_c) continue;
    for (int S = 2; S <= 8; S <<= 1) {
      ClusterPlan p;
      p.C = C;
      p.S = S;
      p.NB = NextPowerOfTwo(B);
      p.KPT = 8;
      while (p.KPT * S < H) p.KPT <<= 1;
      if (p.KPT > 32) continue;
      // Whole warps: U S a multiple of 8.
      const int unit_step = 8 / S;
      p.U = ((H + C - 1) / C + unit_step - 1) / unit_step * unit_step;
      p.C = (H + p.U - 1) / p.U;  // no block without units: it would take pushes it never waits for
      p.threads = 4 * p.U * S;
      if (p.threads > ClusterThreadsCap(p.KPT, p.NB)) continue;
      p.smem = 2 * sizeof(float) * p.NB * p.Rows() + 2 * sizeof(uint64_t);
      p.cost = StepCost(p);
      if (!best || p.cost < best->cost) best = p;
    }
  }
  return best;
}

}  // namespace lstm_ort
