#include "cuda/cluster/plan.h"

#include <cstdint>

namespace lstm_ort {
namespace {

int NextPowerOfTwo(int n) {
  int p = 1;
  while (p < n) p <<= 1;
  return p;
}

// Estimated microseconds of one step, fitted to the H100 (T=1000, H 16-256, B 1-8, every cluster
// size at the planned slices; the plan it picks measured within 3% of the best on average, 8% at
// worst): one thread's dependent chain (~3.6 cycles per instruction), the SM's issue of every
// warp's instructions, and in a cluster of several blocks the exchange of h (a fixed cost, and one
// push landing per value). A cluster of one block meets at __syncthreads, which costs about as
// much as its chain, so tiny layers run on one SM (H16 B1: 0.41 us per step against 0.49 on more).
double StepMicroseconds(const ClusterPlan& p, int B, int H) {
  int log2_s = 0;
  while ((1 << log2_s) < p.S) ++log2_s;
  const int pushes_per_lane = p.C > 1 ? (p.C + 4 * p.S - 1) / (4 * p.S) : 0;
  const double per_warp = 1.25 * p.KPT * p.NB               // FMAs and float4 loads of h
                          + p.NB * (log2_s + 6 + pushes_per_lane)  // slice sums, gate gathers, pushes
                          + 60;                                 // the cell and the step's bookkeeping
  const double warps = p.threads / 32;
  double us = 0.159 + 0.0019 * per_warp + 0.000223 * warps * per_warp;
  if (p.C > 1) us += 0.109 + 0.000644 * B * H;
  return us;
}

// The fewest slices whose lanes hold a column's H rows (KPT <= 32): more slices cost shuffle
// rounds and warps that measured slower than longer FMA chains in every case (H64 B1 on 16
// blocks: S=2 0.52 us per step, S=4 0.56, S=8 0.68).
int FewestSlices(int H) {
  for (int S = 2; S <= 8; S <<= 1)
    if (S * 32 >= H) return S;
  return 0;
}

}  // namespace

std::optional<ClusterPlan> PlanCluster(int H, int B, int max_cluster, int only_c, int only_s) {
  if (H < 1 || B < 1 || B > kClusterMaxBatch) return std::nullopt;
  const int S = only_s > 0 ? only_s : FewestSlices(H);
  if (S != 2 && S != 4 && S != 8) return std::nullopt;
  int kpt = 8;  // a lane's rows of its column: the slices hold H
  while (kpt * S < H) kpt <<= 1;
  if (kpt > 32) return std::nullopt;
  const int unit_step = 8 / S;  // whole warps: U S a multiple of 8
  std::optional<ClusterPlan> best;
  for (int C = 1; C <= max_cluster && C <= kClusterMaxBlocks; C <<= 1) {
    if (only_c > 0 && C != only_c) continue;
    ClusterPlan p;
    p.C = C;
    p.S = S;
    p.NB = NextPowerOfTwo(B);
    p.KPT = kpt;
    p.U = ((H + C - 1) / C + unit_step - 1) / unit_step * unit_step;
    p.C = (H + p.U - 1) / p.U;  // no block without units: it would take pushes it never waits for
    p.threads = 4 * p.U * S;
    if (p.threads > kClusterMaxThreads) continue;
    p.smem = 2 * sizeof(float) * p.NB * p.Rows() + 2 * sizeof(uint64_t);
    p.cost = StepMicroseconds(p, B, H);
    if (!best || p.cost < best->cost) best = p;
  }
  return best;
}

}  // namespace lstm_ort
