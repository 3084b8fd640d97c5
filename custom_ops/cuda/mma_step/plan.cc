#include "cuda/mma_step/plan.h"

#include <algorithm>

namespace lstm_ort {
namespace {

// Estimated cycles (H100, ~1.75 GHz), calibrated on the H100 (docs/ops.md, "The tensor-core step").
// Multiply-adds per cycle one SM sustains through mma.sync from shared memory, 16-bit operands;
// tf32 runs at half that, and 3xTF32 makes three products.
constexpr double kMacsPerCycle16 = 1024;
// Bytes per cycle one SM reads from L2 (h rows and weight rows; everything a step reads stays in L2).
constexpr double kL2BytesPerCycle = 64;
// A block's fixed cycles: its first chunk's latency, the epilogue's loads and writes.
constexpr double kBlockCycles = 1800;
// Cycles between launches of a graph, and a launch's own start.
constexpr double kLaunchCycles = 2500;

int OperandBytes(MmaOperand op) { return op == MmaOperand::kTf32x3 ? 4 : 2; }

}  // namespace

bool MmaStepTakes(MmaOperand op) {
  return op == MmaOperand::kFp16 || op == MmaOperand::kBf16 || op == MmaOperand::kTf32x3;
}

size_t MmaStepSmem(MmaOperand op, int tile) {
  const MmaStepTile& t = kMmaStepTileTable[tile];
  return static_cast<size_t>(MmaStepSmemBytes(OperandBytes(op), t.bm, t.bn, t.ksplit));
}

int MmaStepKernelKey(MmaOperand op, int tile, bool resident) {
  return (resident ? 4 * kMmaStepTiles : 0) + static_cast<int>(op) * kMmaStepTiles + tile;
}

size_t MmaStepResidentSmem(MmaOperand op, int tile, int layers, int H) {
  const MmaStepTile& t = kMmaStepTileTable[tile];
  const int k_rows = layers > 1 ? 2 * H : H;  // above a range's first layer, [x | h]
  return static_cast<size_t>(MmaStepResidentSmemBytes(OperandBytes(op), t.bm, t.bn, t.ksplit, k_rows));
}

bool MmaStepResidentFits(const MmaStepPlan& p, int H, const DeviceLimits& dev) {
  const size_t smem = MmaStepResidentSmem(p.operand, p.tile, p.layers, H);
  if (smem > dev.smem_per_block || !dev.blocks_per_sm) return false;
  const int per_sm = dev.blocks_per_sm(smem, MmaStepKernelKey(p.operand, p.tile, true));
  return per_sm >= 1 && p.blocks() <= per_sm * dev.sm_count;
}

bool MmaStepTileTakes(MmaOperand op, int tile) {
  const int k_steps = kMmaStepChunk / (op == MmaOperand::kTf32x3 ? 8 : 16);
  return k_steps % kMmaStepTileTable[tile].ksplit == 0;
}

// H100, T100 (tools/mma_step_bench.cu, docs/ops.md): warp groups pay at small batches, where a
// step has few blocks and each warp's chain of dependent loads and products is the step (L4 H512
// B64 3xTF32, ms: 32x64k2 3.79, 64x64k4 4.27, 64x64 4.63, 32x64 4.83; fp16: 64x64k2 1.88, 64x64
// 1.86, 64x128 2.37); wide tiles read h fewer times at large ones (L4 H512 B256 fp16: 64x128 3.71,
// 64x64 3.94, 128x128 4.06; 3xTF32: 64x64 11.05, 32x64k2 11.43, 128x128 11.79; L4 H256 B512
// 3xTF32: 64x64 6.67, 128x128 7.16).
int MmaStepTileFor(MmaOperand op, int B) {
  const bool tf32 = op == MmaOperand::kTf32x3;
  if (B <= 32) return 1;                // 32x64k2
  if (B <= 128) return tf32 ? 1 : 3;    // 32x64k2, 64x64k2
  return tf32 ? 2 : 4;                  // 64x64, 64x128
}

// Overlapped launches pay where a step's blocks are many and its tail long (H100, 16-bit, 64x128:
// L4 H512 B256 3.39 vs 3.67 ms, L4 H256 B512 2.43 vs 2.71) and cost where they are few (L4 H512
// B64: 2.11 vs 1.88); 3xTF32 measured only on 128x128 (B256 11.52 vs 11.84), a tile it no longer
// takes there.
bool MmaStepOverlapsLaunches(MmaOperand op, int B) { return op != MmaOperand::kTf32x3 && B >= 256; }

bool MmaStepFits(int64_t H, int64_t B) { return H >= kMmaStepChunk && H % kMmaStepChunk == 0 && B >= kMmaStepMinBatch; }

namespace {

// The tile and grid of one launch per interval (the weights streamed with the rows).
std::optional<MmaStepPlan> PlanStreamedRange(int layers, int D, int H, int B, MmaOperand op, bool copies_weights,
                                             const DeviceLimits& dev, int only_tile) {
  if (layers < 1 || layers > kMaxMmaStepLayers || (layers > 1 && D != 1) || !MmaStepFits(H, B) ||
      !MmaStepTakes(op) || dev.sm_count < 1)
    return std::nullopt;
  const int bytes = OperandBytes(op);
  // The widest K a block multiplies: 2H above the range's first layer.
  const double K = layers > 1 ? 2.0 * H : H;
  const double rate = op == MmaOperand::kTf32x3 ? kMacsPerCycle16 / 2 / 3 : kMacsPerCycle16;
  std::optional<MmaStepPlan> best;
  const int preferred = only_tile >= 0 ? only_tile : MmaStepTileFor(op, B);
  for (int tile = 0; tile < kMmaStepTiles; ++tile) {
    if (tile != preferred && (only_tile >= 0 || best)) continue;  // the preferred tile, else the cheapest
    const MmaStepTile& t = kMmaStepTileTable[tile];
    if ((4 * H) % t.bn != 0 || !MmaStepTileTakes(op, tile)) continue;
    MmaStepPlan p;
    p.operand = op;
    p.tile = tile;
    p.layers = layers;
    p.D = D;
    p.m_tiles = (B + t.bm - 1) / t.bm;
    p.n_tiles = 4 * H / t.bn;
    p.threads = MmaStepThreads(t);
    p.smem = MmaStepSmem(op, tile);
    p.copies_weights = copies_weights;
    p.pdl = MmaStepOverlapsLaunches(op, B);
    if (p.smem > dev.smem_per_block) continue;
    const int per_sm = dev.blocks_per_sm ? dev.blocks_per_sm(p.smem, MmaStepKernelKey(op, tile)) : 1;
    if (per_sm < 1) continue;
    const int waves = (p.blocks() + per_sm * dev.sm_count - 1) / (per_sm * dev.sm_count);
    // Blocks sharing an SM share its tensor cores and its L2 bandwidth: a wave of per_sm blocks
    // takes per_sm times one block's throughput-bound time, but hides one block's latency.
    const double macs = static_cast<double>(t.bm) * t.bn * K / rate;
    const double load = (static_cast<double>(t.bm) + t.bn) * K * bytes / kL2BytesPerCycle;
    const int resident = std::min(per_sm, (p.blocks() + dev.sm_count - 1) / dev.sm_count);
    const double per_wave = resident * std::max(macs, load) + kBlockCycles;
    p.cost = waves * per_wave + kLaunchCycles;
    if (tile == preferred) return p;
    if (!best || p.cost < best->cost) best = p;
  }
  return best;
}

// Resident blocks each keep their weight columns, so the grid's work spreads over as many SMs as it
// has blocks: the tile with the most blocks that still fit at once, of four warps where two tiles
// tie (H100/H200, T=100, resident, ms: L2 H512 B64 tf32 32x64k2 (128 blocks) 1.20 vs 64x64 (64)
// 1.48; L4 H256 B64 32x64k2 0.98 vs 64x64 1.16; L4 H512 B64 64x64 (128) 1.58 vs 64x64k2 (128,
// eight warps) 1.70; L4 H128 B256 fp16 64x64 (128) 0.96 vs 64x128 (64) 1.25).
bool BetterResidentTile(const MmaStepPlan& a, const MmaStepPlan& b) {
  if (a.blocks() != b.blocks()) return a.blocks() > b.blocks();
  return (a.threads == 128) > (b.threads == 128);
}

}  // namespace

std::optional<MmaStepPlan> PlanMmaStepRange(int layers, int D, int H, int B, MmaOperand op, bool copies_weights,
                                            const DeviceLimits& dev, int only_tile, std::optional<bool> resident) {
  if (resident.value_or(true)) {
    std::optional<MmaStepPlan> best;
    for (int tile = 0; tile < kMmaStepTiles; ++tile) {
      if (only_tile >= 0 && tile != only_tile) continue;
      std::optional<MmaStepPlan> p = PlanStreamedRange(layers, D, H, B, op, copies_weights, dev, tile);
      if (!p || !MmaStepResidentFits(*p, H, dev)) continue;
      p->resident = true;
      p->pdl = false;
      p->smem = MmaStepResidentSmem(op, tile, layers, H);
      if (!best || BetterResidentTile(*p, *best)) best = p;
    }
    if (best) return best;
  }
  return PlanStreamedRange(layers, D, H, B, op, copies_weights, dev, only_tile);
}

int64_t MmaStepWeightCopyBytes(int layers, int D, int64_t H) {
  return 2 * D * (H + static_cast<int64_t>(layers - 1) * 2 * H) * 4 * H;
}

std::vector<MmaStepRange> PlanMmaStepStack(int L, int D, int T, int I, int H, int B, MmaOperand op,
                                           bool copies_weights, const DeviceLimits& dev, int only_tile,
                                           int most_layers, std::optional<bool> resident) {
  const int widest = most_layers > 0 ? std::min(most_layers, kMaxMmaStepLayers) : kMaxMmaStepLayers;
  std::vector<MmaStepRange> ranges;
  for (int first = 0; first < L;) {
    const int n = D == 1 ? std::min(L - first, widest) : 1;
    const auto plan = PlanMmaStepRange(n, D, H, B, op, copies_weights, dev, only_tile, resident);
    if (!plan) return {};
    ranges.push_back(MmaStepRange{first, n, *plan});
    first += n;
  }
  return ranges;
}

}  // namespace lstm_ort
