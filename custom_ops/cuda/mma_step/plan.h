// The tensor-core step (mma_step/kernel.cuh): how a range of layers runs, one launch per interval.
// Plain C++ like persistent/plan.h: the CUDA side supplies the device limits.
//
// A launch is one interval of a wavefront over the range's layers: layer r runs step s - r, so L
// layers take T + L - 1 launches, and layers above the first multiply the layer below's h
// (K = 2H) where the range's first layer reads its input projection (K = H). A block computes a
// tile of BM batch rows x BN gate columns of one (layer, direction) on mma.sync tensor cores, every
// unit's four gates in one tile, and runs the cell in its epilogue: h goes to the next launch
// through L2, with no separate cell kernel and no grid barrier. Where a tile's blocks all fit on the
// device at once and its weight columns fit each block's shared memory, the range runs resident
// instead (MmaStepPlan::resident): one cooperative launch, the weights loaded once, a grid barrier
// between intervals.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "cuda/device_limits.h"
#include "cuda/host_device.h"
#include "cuda/persistent/mma_operand.h"

namespace lstm_ort {

// The block tiles the kernel is built for: batch rows x gate columns, warps along each (every warp
// holds a 32 x 32 tile of the product), and warp groups that split each chunk's k steps between
// them (their sums meet in shared memory before the cell): more warps per SM where a step has few
// blocks.
struct MmaStepTile {
  int bm, bn, warps_m, warps_n, ksplit;
  const char* name;  // the debug key mma_step_tile's
};
// k4 takes four k steps per chunk: 3xTF32 only (a chunk holds two 16-bit k steps).
constexpr int kMmaStepTiles = 8;
constexpr MmaStepTile kMmaStepTileTable[kMmaStepTiles] = {
    {32, 64, 1, 2, 1, "32x64"},     {32, 64, 1, 2, 2, "32x64k2"},  {64, 64, 2, 2, 1, "64x64"},
    {64, 64, 2, 2, 2, "64x64k2"},   {64, 128, 2, 4, 1, "64x128"},  {128, 128, 4, 4, 1, "128x128"},
    {64, 128, 2, 4, 2, "64x128k2"}, {64, 64, 2, 2, 4, "64x64k4"}};
LSTM_ORT_HOST_DEVICE constexpr int MmaStepThreads(const MmaStepTile& t) { return 32 * t.warps_m * t.warps_n * t.ksplit; }
// K rows per pipeline stage; a layer's x and h rows are whole chunks, so H must be a multiple.
constexpr int kMmaStepChunk = 32;
// Fewer rows leave most of a 32-row tile empty: v1's split-K and streaming steps serve them.
constexpr int kMmaStepMinBatch = 16;
constexpr int kMaxMmaStepLayers = 8;  // layers in one range (kMaxRangeLayers)
// The exponents of a range's scaled fp16 copies (fp32 storage): per (layer r, direction d), at
// r * D + d the power of two the weights were scaled by, at kMmaStepH0Exps + r * D + d initial
// h's (so that any initial_h fits fp16).
constexpr int kMmaStepH0Exps = 2 * kMaxMmaStepLayers;
constexpr int kMmaStepExps = 2 * kMmaStepH0Exps;

// The pipeline's shape per operand size, shared by the kernel and the planner: stages of one
// chunk of h rows (BM x chunk) and of weight rows (chunk x BN), each row padded by 16 bytes (A)
// or 8 elements (weights), which keeps ldmatrix and the tf32 fragment loads free of bank conflicts.
LSTM_ORT_HOST_DEVICE constexpr int MmaStepStages(int bytes) { return bytes == 4 ? 3 : 4; }
LSTM_ORT_HOST_DEVICE constexpr int MmaStepAStride(int bytes) { return kMmaStepChunk + 16 / bytes; }
LSTM_ORT_HOST_DEVICE constexpr int MmaStepWStride(int bn) { return bn + 8; }
// The pipeline's stages of `stage_bytes` each, or the warp groups' partial sums where they are
// larger (the same memory, used after the last stage).
LSTM_ORT_HOST_DEVICE constexpr int MmaStepStagesOrSums(int stage_bytes, int bytes, int bm, int bn, int ksplit) {
  return MmaStepStages(bytes) * stage_bytes > (ksplit - 1) * bm * bn * 4 ? MmaStepStages(bytes) * stage_bytes
                                                                          : (ksplit - 1) * bm * bn * 4;
}
// Per interval: each stage holds a chunk of rows and a chunk of weight rows.
LSTM_ORT_HOST_DEVICE constexpr int MmaStepSmemBytes(int bytes, int bm, int bn, int ksplit) {
  return MmaStepStagesOrSums((bm * MmaStepAStride(bytes) + kMmaStepChunk * MmaStepWStride(bn)) * bytes, bytes, bm, bn,
                             ksplit);
}
// Resident (MmaStepPlan::resident): stages of rows alone, then the block's weight columns for every
// K row of its layer.
LSTM_ORT_HOST_DEVICE constexpr int MmaStepResidentRowBytes(int bytes, int bm, int bn, int ksplit) {
  return MmaStepStagesOrSums(bm * MmaStepAStride(bytes) * bytes, bytes, bm, bn, ksplit);
}
LSTM_ORT_HOST_DEVICE constexpr int MmaStepResidentSmemBytes(int bytes, int bm, int bn, int ksplit, int k_rows) {
  return MmaStepResidentRowBytes(bytes, bm, bn, ksplit) + k_rows * MmaStepWStride(bn) * bytes;
}

// The operand types the kernel takes: 16-bit (fp16 scaled by a power of two for fp32 storage, as
// v1's 16-bit weights; bf16) and 3xTF32 (fp32 h and weights, FP32-accurate).
bool MmaStepTakes(MmaOperand op);

struct MmaStepPlan {
  MmaOperand operand = MmaOperand::kFp16;
  int tile = 0;                    // index into kMmaStepTileTable
  int layers = 1, D = 1;
  int m_tiles = 0, n_tiles = 0;    // blocks per launch: m_tiles x n_tiles x layers x D
  int threads = 0;
  size_t smem = 0;                 // dynamic shared memory per block
  bool copies_weights = false;     // the range's weights copied to the 16-bit operand type per call
  bool pdl = false;                // launches after the first overlap the one before (programmatic
                                   // dependent launch): MmaStepOverlapsLaunches, or the debug key
  bool resident = false;           // one cooperative launch for every interval, each block's weight
                                   // columns in its shared memory (MmaStepResidentFits)
  double cost = 0;                 // estimated cycles per interval
  int blocks() const { return m_tiles * n_tiles * layers * D; }
};

// Whether tile `tile` is built for operand `op` (its warp groups take whole k steps of a chunk).
bool MmaStepTileTakes(MmaOperand op, int tile);

// Shared memory of one block of tile `tile` for operand `op` (its pipeline stages).
size_t MmaStepSmem(MmaOperand op, int tile);
// DeviceLimits::blocks_per_sm's second argument for the mma-step limits: which kernel (the
// resident kernel's occupancy is asked at the most shared memory a block may have).
int MmaStepKernelKey(MmaOperand op, int tile, bool resident = false);
constexpr int kMmaStepKernelKeys = 2 * 4 * kMmaStepTiles;  // resident or not x MmaOperand x tile

// Whether plan `p` (a range of its layers at H) can run resident: its layers' widest weight columns
// fit a block's shared memory beside the rows' stages, and every block of its grid fits on the
// device at once (a cooperative launch). Where a tile fits, the range runs resident (the debug key
// mma_step_resident=0 turns it off): faster than streaming the weights at every shape measured
// (docs/ops.md, "The tensor-core step"; H200, T=100, ms: L4 H512 B64 tf32 1.58 vs 1.90, L4 H384
// B64 1.40 vs 1.65, L4 H256 B128 1.16 vs 1.38, L2 H512 B64 1.20 vs 1.75).
bool MmaStepResidentFits(const MmaStepPlan& p, int H, const DeviceLimits& dev);
size_t MmaStepResidentSmem(MmaOperand op, int tile, int layers, int H);

// Whether a range copies its weights to the operand type per call: all but fp32 weights on 3xTF32
// and fp16 weights on fp16 (which the kernel reads as stored). `fp16_storage`: the model's type.
inline bool MmaStepCopiesWeights(MmaOperand op, bool fp16_storage) {
  return fp16_storage ? op != MmaOperand::kFp16 : op != MmaOperand::kTf32x3;
}

// The shapes the kernel serves: H a multiple of kMmaStepChunk, at least kMmaStepMinBatch rows.
bool MmaStepFits(int64_t H, int64_t B);

// The tile for a range of `layers` layers (D == 1 above one layer), or none where the shape does
// not fit; `only_tile` >= 0 plans with that tile only (the debug key mma_step_tile). The tile is
// the one measured fastest for the batch (MmaStepTileFor), falling back to any that fits.
int MmaStepTileFor(MmaOperand op, int B);
bool MmaStepOverlapsLaunches(MmaOperand op, int B);
// `resident`: the debug key mma_step_resident's (false: never; empty: where a tile fits, the tile
// BetterResidentTile prefers, within `only_tile` where it is given).
std::optional<MmaStepPlan> PlanMmaStepRange(int layers, int D, int H, int B, MmaOperand op, bool copies_weights,
                                            const DeviceLimits& dev, int only_tile = -1,
                                            std::optional<bool> resident = std::nullopt);

// Bytes of a range's 16-bit weight copies: the first layer's recurrent rows, then each layer's
// input and recurrent rows, per direction.
int64_t MmaStepWeightCopyBytes(int layers, int D, int64_t H);

struct MmaStepRange {
  int first = 0, count = 1;
  MmaStepPlan plan;
};

// Cuts L layers into ranges: one wavefront of up to kMaxMmaStepLayers layers where D == 1 (measured
// faster than one layer per range at every shape tried: H100, L4 T100, ms, 4 layers a launch vs
// one: H512 B64 fp16 1.83 vs 4.84, H512 B256 3.9 vs 8.2, H256 B512 2.6 vs 6.4; but L4 H1024 B512
// 23.9 vs 22.0, where the step loses to v1 anyway), one layer per range where D == 2. Empty where
// the shape does not plan.
// `most_layers` > 0 caps a range's layers (the debug key mma_step_layers).
std::vector<MmaStepRange> PlanMmaStepStack(int L, int D, int T, int I, int H, int B, MmaOperand op,
                                           bool copies_weights, const DeviceLimits& dev, int only_tile = -1,
                                           int most_layers = 0, std::optional<bool> resident = std::nullopt);

}  // namespace lstm_ort
