// Persistent factored recurrence: one cooperative launch runs every step of one layer, both
// directions (blocks [0, per_dir) the forward one). The per-step path (step_kernel.cuh) costs a
// cuBLAS call and a launch per step and reads both factors from memory each time; here each block
// keeps its tiles of A and B in shared memory for the whole sequence (recurrence_plan.h).
//
// A step is two phases, each ended by a grid barrier:
//   1. p = h A: a block's tile of CA rank columns x BA rows, h staged from ht (L2);
//   2. gates = gx_t + p B + bias and the cell: a tile of U units x Bb rows, p staged from L2.
// One buffer each for ht and p is enough: the barrier between a phase's reads and the next
// phase's writes orders them. Both live in L2 transposed and padded (ht [D][H][Bp], p
// [D][rank][Bp], Bp = B rounded up to 4; the padding zeroed before the launch), so a tile's rows
// are contiguous 16-byte runs that land in shared memory as [K][rows], one float4 per K for a
// thread's four rows.
#pragma once

#include "cuda/element_access.cuh"
#include "cuda/fma_tile.cuh"
#include "cuda/low_rank/recurrence_plan.h"
#include "cuda/persistent/grid_barrier.cuh"
#include "lstm_ort/cell.h"

namespace lstm_ort {

template <typename T, typename TY>
struct LowRankRecurrenceArgs {
  LowRankPlan plan;
  int B, H, max_len;
  int rank[2];
  const float* a[2];        // first factor [H][rank]
  const float* b[2];        // second factor [rank][4H], columns 4j + g
  const float* gx[2];       // the layer's input projection of each direction, rows of 4H
  long long gx_st, gx_sb;   // row of (t, b) = t * gx_st + b * gx_sb
  const T* bias[2];         // [4H] or null
  const T* peep[2];         // [3H] or null
  float* h;                 // [D][B][H]: initial h in, final h out
  float* c;                 // [D][B][H]: likewise
  float* ht;                // [D][H][B]: the latest h, transposed
  float* p;                 // [D][plan.rank][B]: h A of the current step
  const int* lens;          // [B]
  TY* y;                    // as LowRankStepArgs
  long long y_st, y_sd, y_sb;
  unsigned* barrier;        // zero at launch
  bool reverse[2];
  CellParams cell[2];
};

// acc += in^T w over the K rows ks, ks + S, ...: in is staged [K][ld_in] (4 rows at `row4`), w
// resident [K][ld_w] (4 columns at `col4`); both strides in float4s.
__device__ __forceinline__ void TileProduct(const float4* in, int ld_in, int row4, const float4* w, int ld_w, int col4,
                                            int K, int ks, int S, float acc[kLrpTileRows][4]) {
  ForSliceRows(ks, S, K, [&](int k) {
    const float4 wv = w[k * ld_w + col4];
    const float4 iv = in[k * ld_in + row4];
    const float rows[kLrpTileRows] = {iv.x, iv.y, iv.z, iv.w};
    FmaTileRow<kLrpTileRows>(acc, rows, wv);
  });
}

// Stages rows [b0, b0 + rows) of src ([K][Bp] in L2, Bp a multiple of 4) as [K][rows] in shared
// memory, zeros past Bp. cp.async.cg reads L2, never L1: other blocks wrote src since the last
// barrier. Every copy is in flight before the first is waited for.
__device__ __forceinline__ void StageRows(float* dst, const float* src, int K, int Bp, int b0, int rows) {
  const int quads = rows / 4, n = K * quads;
  for (int i = threadIdx.x; i < n; i += kLrpThreads) {
    const int k = i / quads, j = i % quads * 4;
    float* d = dst + k * rows + j;
    if (b0 + j < Bp) {
      const unsigned to = static_cast<unsigned>(__cvta_generic_to_shared(d));
      const float* from = src + static_cast<long long>(k) * Bp + b0 + j;
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(to), "l"(from) : "memory");
    } else {
      *reinterpret_cast<float4*>(d) = make_float4(0.f, 0.f, 0.f, 0.f);
    }
  }
  asm volatile("cp.async.wait_all;" ::: "memory");
}

// Leaves the sums of a tile's slices in shared memory, red[group][tile row][pair], and returns how
// many groups there are (LowRankPlan::Groups): slices in one warp meet by shuffles first.
__device__ __forceinline__ int PartialSumsToShared(float acc[kLrpTileRows][4], int pairs, float4* red) {
  const int tid = threadIdx.x, pair = tid % pairs;
  int group = tid / pairs;
  if (pairs < 32) {
    for (int off = pairs; off < 32; off <<= 1)
#pragma unroll
      for (int i = 0; i < kLrpTileRows; ++i)
#pragma unroll
        for (int q = 0; q < 4; ++q) acc[i][q] += __shfl_xor_sync(0xffffffffu, acc[i][q], off);
    group = tid / 32;
    if (tid % 32 >= pairs) return LowRankPlan::Groups(pairs);  // the other lanes hold copies
  }
#pragma unroll
  for (int i = 0; i < kLrpTileRows; ++i)
    red[(group * kLrpTileRows + i) * pairs + pair] = make_float4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]);
  return LowRankPlan::Groups(pairs);
}

// Tile row i, pair `pair`: the sum of every group's partial, added to `sum` in group order.
__device__ __forceinline__ float4 SumGroups(const float4* red, int groups, int pairs, int i, int pair, float4 sum) {
  for (int s = 0; s < groups; ++s) {
    const float4 v = red[(s * kLrpTileRows + i) * pairs + pair];
    sum.x += v.x;
    sum.y += v.y;
    sum.z += v.z;
    sum.w += v.w;
  }
  return sum;
}

template <typename T, typename TY>
__global__ void __launch_bounds__(kLrpThreads, 1) LowRankRecurrence(LowRankRecurrenceArgs<T, TY> a) {
  extern __shared__ float4 smem4[];
  const LowRankPlan& p = a.plan;
  const int tid = threadIdx.x, dir = blockIdx.x / p.per_dir, q = blockIdx.x % p.per_dir;
  const int H = a.H, B = a.B, Bp = static_cast<int>(PaddedBatch(B)), G = kGates * H, rank = a.rank[dir];
  float* as = reinterpret_cast<float*>(smem4);  // [H][CA]
  float* bs = as + p.a_floats;                  // [rank][4U]
  float* st = bs + p.b_floats;                  // staged input
  float4* red = reinterpret_cast<float4*>(st + p.stage_floats);  // [group][tile row][pair]

  // Phase 1's tile: rank columns [c0, c0 + CA) x rows [ba0, ba0 + BA); none past the tiles.
  const bool has1 = q < p.n_ca * p.n_ba;
  const int c0 = (q % p.n_ca) * p.CA, ba0 = (q / p.n_ca) * p.BA;
  // Phase 2's: units [u0, u0 + U) x rows [b0, b0 + Bb).
  const bool has2 = q < p.n_u * p.n_b;
  const int u0 = (q % p.n_u) * p.U, b0 = (q / p.n_u) * p.Bb;

  // The factors' tiles, once. Scalar loads: a factor need not start 16-byte aligned.
  if (has1) {
    const float* src = a.a[dir];
    for (int i = tid; i < H * p.CA; i += kLrpThreads) {
      const int k = i / p.CA, col = c0 + i % p.CA;
      as[i] = col < rank ? src[static_cast<long long>(k) * rank + col] : 0.f;
    }
  }
  if (has2) {
    const float* src = a.b[dir];
    const int cols = 4 * p.U;
    for (int i = tid; i < rank * cols; i += kLrpThreads) {
      const int k = i / cols, col = i % cols;
      bs[i] = u0 + col / 4 < H ? src[static_cast<long long>(k) * G + 4LL * u0 + col] : 0.f;
    }
  }

  // Register tiles: tile `pair` of phase 1 is (quad of rank columns, row group); of phase 2,
  // (unit, row group). Slice ks of a tile walks K rows ks, ks + S, ...
  const int pairs1 = p.Pairs1(), pairs2 = p.Pairs2(), S1 = p.Slices1(), S2 = p.Slices2();
  const int quads1 = p.CA / 4;

  // Cell j of this thread: phase 2's output (row i, tile pair) with i * pairs2 + pair = tid + 256 j.
  const long long state = static_cast<long long>(dir) * B * H;
  float c[kLrpCellsPerThread] = {}, h[kLrpCellsPerThread] = {};
  float4 bias[kLrpCellsPerThread], g[kLrpCellsPerThread];
  float peep[kLrpCellsPerThread][3] = {};
  int len[kLrpCellsPerThread] = {}, t_of[kLrpCellsPerThread] = {};
  auto cell_b = [&](int j) {
    const int ci = tid + j * kLrpThreads, pair = ci % pairs2;
    return b0 + (pair / p.U) * kLrpTileRows + ci / pairs2;
  };
  auto cell_u = [&](int j) { return u0 + (tid + j * kLrpThreads) % pairs2 % p.U; };
  auto cell_valid = [&](int j) {
    return has2 && tid + j * kLrpThreads < p.Bb * p.U && cell_b(j) < B && cell_u(j) < H;
  };
  float* ht = a.ht + static_cast<long long>(dir) * H * Bp;
#pragma unroll
  for (int j = 0; j < kLrpCellsPerThread; ++j) {
    bias[j] = make_float4(0.f, 0.f, 0.f, 0.f);
    g[j] = bias[j];
    if (!cell_valid(j)) continue;
    const int b = cell_b(j), u = cell_u(j);
    if (a.bias[dir]) bias[j] = Load4(a.bias[dir] + 4LL * u);
    if (a.peep[dir]) {
      peep[j][0] = ToF(a.peep[dir][u]);
      peep[j][1] = ToF(a.peep[dir][H + u]);
      peep[j][2] = ToF(a.peep[dir][2 * H + u]);
    }
    len[j] = a.lens[b];
    c[j] = a.c[state + static_cast<long long>(b) * H + u];
    h[j] = a.h[state + static_cast<long long>(b) * H + u];
    ht[static_cast<long long>(u) * Bp + b] = h[j];
  }
  unsigned barriers = 1;
  GridBarrier(a.barrier, barriers * gridDim.x);

  float* pd = a.p + static_cast<long long>(dir) * p.rank * Bp;
  const bool default_cell = IsDefaultCell(a.cell[dir]);
  for (int step = 0; step < a.max_len; ++step) {
    if (has1) {  // p = h A
      StageRows(st, ht, H, Bp, ba0, p.BA);
      __syncthreads();
      const int pair = tid % pairs1;
      float acc[kLrpTileRows][4] = {};
      TileProduct(reinterpret_cast<const float4*>(st), p.BA / 4, pair / quads1, reinterpret_cast<const float4*>(as),
                  quads1, pair % quads1, H, tid / pairs1, S1, acc);
      const int groups = PartialSumsToShared(acc, pairs1, red);
      __syncthreads();
      if (tid < kLrpTileRows * pairs1) {
        const int i = tid / pairs1, pr = tid % pairs1;
        const float4 sum = SumGroups(red, groups, pairs1, i, pr, make_float4(0.f, 0.f, 0.f, 0.f));
        const int b = ba0 + (pr / quads1) * kLrpTileRows + i, col = c0 + 4 * (pr % quads1);
        const float v[4] = {sum.x, sum.y, sum.z, sum.w};
        if (b < B)
#pragma unroll
          for (int e = 0; e < 4; ++e)
            if (col + e < rank) pd[static_cast<long long>(col + e) * Bp + b] = v[e];
      }
    }
    GridBarrier(a.barrier, ++barriers * gridDim.x);

    if (has2) {  // gates = gx_t + p B + bias, then the cell
#pragma unroll
      for (int j = 0; j < kLrpCellsPerThread; ++j) {  // issued first: the product hides their latency
        if (!cell_valid(j) || step >= len[j]) continue;
        t_of[j] = a.reverse[dir] ? len[j] - 1 - step : step;
        g[j] = *reinterpret_cast<const float4*>(a.gx[dir] + (t_of[j] * a.gx_st + cell_b(j) * a.gx_sb) * G +
                                                4LL * cell_u(j));
      }
      StageRows(st, pd, rank, Bp, b0, p.Bb);
      __syncthreads();
      const int pair = tid % pairs2;
      float acc[kLrpTileRows][4] = {};
      TileProduct(reinterpret_cast<const float4*>(st), p.Bb / 4, pair / p.U, reinterpret_cast<const float4*>(bs), p.U,
                  pair % p.U, rank, tid / pairs2, S2, acc);
      const int groups = PartialSumsToShared(acc, pairs2, red);
      __syncthreads();
#pragma unroll
      for (int j = 0; j < kLrpCellsPerThread; ++j) {
        if (!cell_valid(j)) continue;
        const int b = cell_b(j), u = cell_u(j);
        if (step < len[j]) {  // finished sequences keep their state
          const int ci = tid + j * kLrpThreads;
          const float4 sum = SumGroups(red, groups, pairs2, ci / pairs2, ci % pairs2, g[j]);
          const float gi = sum.x + bias[j].x, go = sum.y + bias[j].y;
          const float gf = sum.z + bias[j].z, gc = sum.w + bias[j].w;
          h[j] = default_cell ? DefaultCellUpdate(gi, go, gf, gc, peep[j][0], peep[j][1], peep[j][2], c[j])
                              : CellUpdate(a.cell[dir], gi, go, gf, gc, peep[j][0], peep[j][1], peep[j][2], c[j]);
          if (a.y) a.y[t_of[j] * a.y_st + dir * a.y_sd + b * a.y_sb + u] = FromF<TY>(h[j]);
          ht[static_cast<long long>(u) * Bp + b] = h[j];
        }
      }
    }
    if (step + 1 < a.max_len) GridBarrier(a.barrier, ++barriers * gridDim.x);
  }

#pragma unroll
  for (int j = 0; j < kLrpCellsPerThread; ++j) {
    if (!cell_valid(j)) continue;
    const long long at = state + static_cast<long long>(cell_b(j)) * H + cell_u(j);
    a.h[at] = h[j];
    a.c[at] = c[j];
  }
}

}  // namespace lstm_ort
