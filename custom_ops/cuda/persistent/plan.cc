#include "cuda/persistent/plan.h"

#include <algorithm>

namespace lstm_ort {
namespace {

// Cycles per interval that no split removes: grid barrier, L2 round trips, the cell update.
constexpr double kIntervalOverhead = 2500;

// Cycles of a range's own launches however short the call: its input projection, its states in
// and out and its kernel's start, ~10 us of the GPU's timeline (H200, T=1 L2 H128 B64: 13
// launches in ~45 us with one range per layer). A short call merges layers into one range where a
// long one would not. Counted up to kMaxStepsForRangeLaunchCost steps only: longer calls keep the
// ranges they were measured with (the interval estimates decide there).
constexpr double kRangeLaunchCycles = 20000;
constexpr int kMaxStepsForRangeLaunchCost = 16;

int RoundUp(int n, int m) { return (n + m - 1) / m * m; }

}  // namespace

int RangeRows(int layers, int H, int D) { return layers > 1 ? D * H + H : H; }

std::optional<PersistentPlan> PlanRange(int layers, int D, int H, int B, const DeviceLimits& dev) {
  if (layers < 1 || layers > kMaxRangeLayers || (layers > 1 && D != 1) || H < 1 || B < 1) return std::nullopt;
  const int K = RangeRows(layers, H, D);
  std::optional<PersistentPlan> best;
  for (int U = 1; U <= 64 && U / 2 < H; U *= 2) {
    for (int Bb = 4; Bb <= 64 && (Bb == 4 || Bb / 2 < B); Bb *= 2) {
      if ((dev.only_u && U != dev.only_u) || (dev.only_bb && Bb != dev.only_bb)) continue;
      PersistentPlan p;
      p.U = U;
      p.Bb = Bb;
      p.R = Bb == 4 ? 4 : 8;
      p.P = (Bb / p.R) * U;
      if (p.P > kPersistentThreads || Bb * U > 4 * kPersistentThreads) continue;  // a thread finishes at most 4 cells
      p.S = kPersistentThreads / p.P;
      p.n_u = (H + U - 1) / U;
      p.n_b = (B + Bb - 1) / Bb;
      p.Bp = p.n_b * Bb;
      p.blocks = layers * D * p.n_u * p.n_b;
      p.w_floats = static_cast<long long>(K) * (4 * U + 4);
      const size_t fixed = sizeof(float) * (p.w_floats + static_cast<size_t>(p.groups()) * p.P * p.R * 4);
      if (fixed >= dev.smem_per_block) continue;
      // Every row at once when it fits, in up to 4 chunks that are waited for one by one;
      // otherwise two chunks (<= 256 rows) in turn.
      const int chunks = std::max(1, std::min(4, dev.resident_chunks));
      p.KC = RoundUp((K + chunks - 1) / chunks, 8);
      p.resident = fixed + sizeof(float) * chunks * p.KC * Bb <= dev.smem_per_block;
      p.slots = p.resident ? chunks : 2;
      if (!p.resident) {
        p.KC = std::min(RoundUp(K, 8), 256);
        while (p.KC > 16 && fixed + sizeof(float) * 2 * p.KC * Bb > dev.smem_per_block) p.KC /= 2;
      }
      p.smem = fixed + sizeof(float) * p.StagedRows() * Bb;
      if (p.smem > dev.smem_per_block) continue;
      const int per_sm = dev.blocks_per_sm(p.smem, p.R);
      if (per_sm < 1 || p.blocks > per_sm * dev.sm_count) continue;
      const int waves = (p.blocks + dev.sm_count - 1) / dev.sm_count;
      const double fma = static_cast<double>(Bb) * 4 * U * K / 128;
      const double load = static_cast<double>(Bb) * K * 4 / 64;
      p.cost = waves * (fma + (p.resident ? 0.25 : 0.5) * load) + 64.0 * p.groups() + kIntervalOverhead;
      if (!best || p.cost < best->cost || (p.cost == best->cost && p.blocks < best->blocks)) best = p;
    }
  }
  return best;
}

std::vector<LayerRange> PlanStack(int L, int D, int T, int H, int B, bool wavefront, const DeviceLimits& dev) {
  return PlanStack(L, D, T, wavefront, [&](int layers) { return PlanRange(layers, D, H, B, dev); });
}

std::vector<LayerRange> PlanStack(int L, int D, int T, bool wavefront, const RangePlanner& plan_range) {
  std::vector<LayerRange> ranges;
  for (int first = 0; first < L;) {
    LayerRange best{first, 1, plan_range(1)};
    if (wavefront && D == 1 && best.plan) {
      // Fewest estimated cycles per layer: more layers share intervals but spread thinner, and
      // share one range's launches.
      const double launches = T <= kMaxStepsForRangeLaunchCost ? kRangeLaunchCycles : 0;
      double best_per_layer = T * best.plan->cost + launches;
      for (int n = 2; n <= std::min(L - first, kMaxRangeLayers); ++n) {
        auto plan = plan_range(n);
        if (!plan) break;
        const double per_layer = ((T + n - 1) * plan->cost + launches) / n;
        if (per_layer < best_per_layer) {
          best_per_layer = per_layer;
          best = LayerRange{first, n, plan};
        }
      }
    }
    ranges.push_back(best);
    first += best.count;
  }
  return ranges;
}

}  // namespace lstm_ort
