// Block shapes of the per-step kernels and the tiled kernel's shared-memory footprint. Plain
// C++ (host and device): the launchers, the heuristics and their unit tests share one formula.
#pragma once

#include <cstddef>

#include "cuda/host_device.h"

namespace lstm_ort {

// Tiled: a block owns kTiledUnits units x RB batch rows; RG row groups of kTiledRows rows each.
constexpr int kTiledThreads = 256;
constexpr int kTiledUnits = 4;  // units per block: 2 unit pairs
constexpr int kTiledRows = 4;   // rows per thread tile, strided by RG so shared-memory banks differ

LSTM_ORT_HOST_DEVICE constexpr int TiledBlockRows(int RG) { return RG * kTiledRows; }
// Threads splitting K for one tile; K chunks are multiples of it.
LSTM_ORT_HOST_DEVICE constexpr int TiledKSplit(int RG) { return kTiledThreads / (RG * 2); }

template <int RG>
struct TiledShape {
  static constexpr int RB = TiledBlockRows(RG);  // rows per block
  static constexpr int KS = TiledKSplit(RG);     // threads splitting K for one tile
  static constexpr int kAlign = KS;              // chunk sizes are multiples of this
  static_assert(KS >= 2 * kTiledRows, "the first 8 K-split threads each finish one (row, unit) of the tile");
};

// Row stride of the h tile: kc + 4 keeps rows 16-byte aligned for 16-byte cp.async (H % 4 == 0);
// otherwise kc + 1, odd, so the rows a warp reads at one k fall in distinct banks.
LSTM_ORT_HOST_DEVICE constexpr int TiledStride(int kc, int H) { return (H & 3) == 0 ? kc + 4 : kc + 1; }

// Dynamic shared memory: h [RB][stride] floats, then w [kc][4 units][4 gates] of the element
// type; afterwards the same memory holds the partial sums.
constexpr size_t TiledSmemBytes(int kc, int H, int RG, size_t element_bytes) {
  const size_t h = sizeof(float) * TiledBlockRows(RG) * TiledStride(kc, H);
  const size_t h_aligned = (h + 15) / 16 * 16;
  const size_t tiles = h_aligned + element_bytes * 4 * kTiledUnits * kc;
  const size_t partial = sizeof(float) * kTiledThreads * 2 * kTiledRows * 4;
  return tiles > partial ? tiles : partial;
}

// Split-K: one warp per hidden unit.
constexpr int kSplitKWarps = 8;

}  // namespace lstm_ort
