// What the two persistent kernels (kernel.cuh: FP32 FMA, mma_kernel.cuh: tensor cores) share of
// their cell phase: thread tid finishes cells tid, tid + 256, ... of its block's Bb x U and keeps
// their c and latest h in registers for the whole sequence; here are those registers, each step's
// inputs and the final states. The kernels keep where a cell lies (their row / unit / valid
// functions of a cell's slot). Everything is inlined: each kernel's SASS is byte for byte what it
// was when the kernels wrote these loops out themselves. (The initial states and the cell update
// stay in each kernel: written here, they moved instructions of every tensor-core variant and of
// the FMA kernel's staging loop; docs/architecture.md, "Backends".)
#pragma once

#include "cuda/element_access.cuh"
#include "cuda/persistent/args.h"
#include "lstm_ort/cell.h"

namespace lstm_ort {

constexpr int kCellsPerThread = 4;   // Bb * U <= 4 * kPersistentThreads

// The kernel's registers of its cells: each array one kernel local (a struct of arrays would
// change how the compiler allocates them, and the kernels' SASS with it).
struct CellSlots {
  float (&c)[kCellsPerThread];
  float (&h)[kCellsPerThread];
  float4 (&bias)[kCellsPerThread];  // bias
  float4 (&g)[kCellsPerThread];     // the gates' input projection
  float (&peep)[kCellsPerThread][3];
  int (&t_of)[kCellsPerThread];     // the step's time
  int (&len)[kCellsPerThread];      // the sequence's length
  bool (&active)[kCellsPerThread];  // the step updates the cell
};

// Which cells a step updates, and the first layer's input projection for them. Loaded an
// interval ahead, so the latency hides behind the grid barrier.
template <typename T, typename Row, typename Unit, typename Valid>
__device__ __forceinline__ void LoadCellInputs(const PersistentArgs<T>& a, int r, int d, int b0, int H, int step,
                                               Row&& cell_row, Unit&& cell_unit, Valid&& cell_valid, CellSlots s) {
#pragma unroll
  for (int j = 0; j < kCellsPerThread; ++j) {
    s.active[j] = false;
    if (!cell_valid(j)) continue;
    const int b = b0 + cell_row(j);
    s.active[j] = step < s.len[j];
    s.t_of[j] = s.active[j] ? (a.reverse[d] ? s.len[j] - 1 - step : step) : 0;
    // Unconditional, so nothing waits on it until the gates need it.
    if (r == 0)
      s.g[j] = *reinterpret_cast<const float4*>(a.gx[d] + (s.t_of[j] * a.gx_st + b * a.gx_sb) * 4LL * H +
                                                4LL * cell_unit(j));
  }
}

template <typename T, typename Row, typename Unit, typename Valid>
__device__ __forceinline__ void WriteFinalCells(const PersistentArgs<T>& a, long long state, int b0, int H,
                                                 Row&& cell_row, Unit&& cell_unit, Valid&& cell_valid,
                                                 const CellSlots s) {
#pragma unroll
  for (int j = 0; j < kCellsPerThread; ++j) {
    if (!cell_valid(j)) continue;
    const long long at = state + static_cast<long long>(b0 + cell_row(j)) * H + cell_unit(j);
    a.h_fin[at] = s.h[j];
    a.c_fin[at] = s.c[j];
  }
}

}  // namespace lstm_ort
