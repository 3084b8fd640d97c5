#include "cuda/persistent/mma_plan.h"

#include <algorithm>

namespace lstm_ort {
namespace {

// Cycles per interval that no split removes: grid barrier, L2 round trips, the cell update.
constexpr double kIntervalOverhead = 2500;
// Multiply-adds per cycle one SM's tensor cores sustain through WMMA from shared memory,
// for tf32 operands; the 16-bit types run twice as fast.
constexpr double kTf32MacsPerCycle = 512;

int RoundUp(int n, int m) { return (n + m - 1) / m * m; }

// One warp's tiles and k share for a block of Bb x 4U outputs (mma_plan.h); false if the tiles
// cannot be spread over the eight warps.
bool SplitTiles(int Bb, int U, int* tpw, int* ksplit) {
  const int tiles_m = Bb / kMmaTileRows, tiles = tiles_m * (U / 4);
  if (tiles >= 16) {
    if (tiles != 16 || tiles_m < 2) return false;
    *tpw = 2;
    *ksplit = 1;
  } else {
    *tpw = 1;
    *ksplit = tiles >= 8 ? 1 : 8 / tiles;
  }
  return true;
}

}  // namespace

std::optional<PersistentPlan> PlanMmaRange(int layers, int D, int H, int B, MmaOperand op, const DeviceLimits& dev) {
  if (layers < 1 || layers > kMaxRangeLayers || (layers > 1 && D != 1) || H < 1 || B < 1) return std::nullopt;
  const int K = RangeRows(layers, H, D), kstep = MmaKStep(op), bytes = MmaOperandBytes(op);
  // Row paddings that keep WMMA's 32-byte alignment and spread rows over the banks.
  const int pad = 16 / bytes;
  std::optional<PersistentPlan> best;
  for (int U = 4; U <= 64 && U / 2 < H; U *= 2) {
    for (int Bb = kMmaTileRows; Bb <= 128 && (Bb == kMmaTileRows || Bb / 2 < B); Bb *= 2) {
      if ((dev.only_u && U != dev.only_u) || (dev.only_bb && Bb != dev.only_bb)) continue;
      if (Bb * U > 4 * kPersistentThreads) continue;  // a thread finishes at most 4 cells
      PersistentPlan p;
      p.mma = true;
      p.operand = op;
      p.U = U;
      p.Bb = Bb;
      if (!SplitTiles(Bb, U, &p.tpw, &p.ksplit)) continue;
      p.n_u = (H + U - 1) / U;
      p.n_b = (B + Bb - 1) / Bb;
      p.Bp = p.n_b * Bb;
      p.blocks = layers * D * p.n_u * p.n_b;
      p.kw = RoundUp(K, kstep);
      p.ws = 4 * U + pad;
      p.bbp = Bb + pad;
      const size_t red = sizeof(float) * p.ksplit * Bb * (4 * U + 4);
      const size_t fixed = static_cast<size_t>(bytes) * p.kw * p.ws + red;
      if (fixed >= dev.smem_per_block) continue;
      const size_t row = static_cast<size_t>(bytes) * p.bbp;
      const int chunks = std::max(1, std::min(4, dev.resident_chunks));
      p.KC = RoundUp((K + chunks - 1) / chunks, kstep);
      p.resident = fixed + row * chunks * p.KC <= dev.smem_per_block;
      p.slots = p.resident ? chunks : 2;
      if (!p.resident) {
        p.KC = std::min(RoundUp(K, kstep), 256);
        while (p.KC > 2 * kstep && fixed + row * 2 * p.KC > dev.smem_per_block) p.KC = RoundUp(p.KC / 2, kstep);
      }
      p.smem = fixed + row * p.StagedRows();
      if (p.smem > dev.smem_per_block) continue;
      const int per_sm = dev.mma_blocks_per_sm ? dev.mma_blocks_per_sm(p.smem) : dev.blocks_per_sm(p.smem, 8);
      if (per_sm < 1 || p.blocks > per_sm * dev.sm_count) continue;
      const int waves = (p.blocks + dev.sm_count - 1) / dev.sm_count;
      const double products = op == MmaOperand::kTf32x3 ? 3 : 1;
      const double rate = kTf32MacsPerCycle * (bytes == 2 ? 2 : 1);
      const double macs = static_cast<double>(Bb) * 4 * U * p.kw * products / rate;
      const double load = static_cast<double>(Bb) * K * bytes / 64;
      p.cost = waves * (macs + (p.resident ? 0.25 : 0.5) * load) + 32.0 * p.ksplit + kIntervalOverhead;
      if (!best || p.cost < best->cost || (p.cost == best->cost && p.blocks < best->blocks)) best = p;
    }
  }
  return best;
}

}  // namespace lstm_ort
