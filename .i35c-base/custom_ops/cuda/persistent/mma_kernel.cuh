// Persistent recurrent kernel on tensor cores: kernel.cuh's schedule (one cooperative launch per
// range of layers, one job per block, weights on chip for the whole sequence, a grid barrier
// per interval, layers as a wavefront), with the per-step product [Bb x K] . [K x 4U] done by
// WMMA tiles (mma_plan.h) in the operand type O (mma_operands.cuh) instead of FP32 FMAs.
//
// The h buffer holds O's stored type, [parity][layer][direction][batch slice][H][Bb] as in
// kernel.cuh, so staging is a cp.async copy; c, the gate sums and the cell math stay fp32.
#pragma once

#include <cuda_pipeline_primitives.h>

#include "cuda/element_access.cuh"
#include "cuda/persistent/args.h"
#include "cuda/persistent/grid_barrier.cuh"
#include "cuda/persistent/kernel.cuh"
#include "cuda/persistent/mma_operands.cuh"
#include "cuda/persistent/plan.h"
#include "lstm_ort/cell.h"

namespace lstm_ort {

template <typename T, MmaOperand O>
__global__ void __launch_bounds__(kPersistentThreads, 1) PersistentMmaLstm(PersistentArgs<T> a) {
  using S = typename MmaTraits<O>::Stored;
  constexpr int kK = MmaKStep(O);
  constexpr int kPerCopy = 16 / sizeof(S);  // elements per 16-byte cp.async
  extern __shared__ __align__(128) unsigned char mma_smem[];
  const PersistentPlan& p = a.plan;
  const int H = a.H, B = a.B, Bb = p.Bb, U = p.U, tid = threadIdx.x;

  int job = blockIdx.x;
  const int bs = job % p.n_b;
  job /= p.n_b;
  const int us = job % p.n_u;
  job /= p.n_u;
  const int d = job % a.D, r = job / a.D;
  const int u0 = us * U, b0 = bs * Bb;
  const int Kx = a.in_rows[r], K = Kx + H;
  const int WS = p.ws, BBP = p.bbp, RS = 4 * U + 4;

  S* ws = reinterpret_cast<S*>(mma_smem);                              // [kw][WS]
  S* hs = ws + static_cast<long long>(p.kw) * WS;                      // [slots * KC][BBP]
  float* red = reinterpret_cast<float*>(hs + p.StagedRows() * BBP);    // [ksplit][Bb][RS]

  // This job's weight columns in the operand type, rows past K zero (the last k step reads them).
  {
    const T* w = a.w[r][d];
    const float4 zero = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int i = tid; i < p.kw * U; i += kPersistentThreads) {
      const int k = i >> a.log2_u, ul = i & (U - 1), u = u0 + ul;
      const float4 v = k < K && u < H ? Load4(w + static_cast<long long>(k) * 4 * H + 4LL * u) : zero;
      S* dst = ws + k * WS + 4 * ul;
      StoreOperand<O>(dst, v.x);
      StoreOperand<O>(dst + 1, v.y);
      StoreOperand<O>(dst + 2, v.z);
      StoreOperand<O>(dst + 3, v.w);
    }
    // Staged rows a chunk does not fill are read (times zero weights) by its last k step.
    for (int i = tid; i < p.StagedRows() * BBP; i += kPersistentThreads) StoreAs(hs + i, 0.f);
  }

  const long long plane = static_cast<long long>(H) * p.Bp;
  S* const hbuf = reinterpret_cast<S*>(a.hbuf);
  auto hslice = [&](int parity, int layer, int dir) {
    return hbuf + ((static_cast<long long>(parity) * a.layers + layer) * a.D + dir) * plane +
           static_cast<long long>(bs) * H * Bb;
  };

  const int n_cells = Bb * U;
  const long long state = (static_cast<long long>(r) * a.D + d) * B * H;
  float c[kCellsPerThread] = {}, h[kCellsPerThread] = {};
  float4 bias[kCellsPerThread], g[kCellsPerThread];
  float peep[kCellsPerThread][3] = {};
  int t_of[kCellsPerThread] = {}, len[kCellsPerThread] = {};
  bool active[kCellsPerThread] = {};
  auto cell_row = [&](int j) { return (tid + j * kPersistentThreads) >> a.log2_u; };
  auto cell_unit = [&](int j) { return u0 + ((tid + j * kPersistentThreads) & (U - 1)); };
  auto cell_valid = [&](int j) {
    const int ci = tid + j * kPersistentThreads;
    return ci < n_cells && b0 + (ci >> a.log2_u) < B && cell_unit(j) < H;
  };
  {
    S* h_init = hslice((r + 1) & 1, r, d);
#pragma unroll
    for (int j = 0; j < kCellsPerThread; ++j) {
      bias[j] = make_float4(0.f, 0.f, 0.f, 0.f);
      g[j] = bias[j];
      if (!cell_valid(j)) continue;
      const int b = b0 + cell_row(j), u = cell_unit(j);
      if (a.bias[r][d]) bias[j] = Load4(a.bias[r][d] + 4LL * u);
      if (a.peep[r][d]) {
        peep[j][0] = ToF(a.peep[r][d][u]);
        peep[j][1] = ToF(a.peep[r][d][H + u]);
        peep[j][2] = ToF(a.peep[r][d][2 * H + u]);
      }
      len[j] = a.lens[b];
      c[j] = a.c0[state + static_cast<long long>(b) * H + u];
      h[j] = a.h0[state + static_cast<long long>(b) * H + u];
      StoreOperand<O>(h_init + u * Bb + (b - b0), h[j]);
    }
  }
  auto load_inputs = [&](int step) {
#pragma unroll
    for (int j = 0; j < kCellsPerThread; ++j) {
      active[j] = false;
      if (!cell_valid(j)) continue;
      const int b = b0 + cell_row(j);
      active[j] = step < len[j];
      t_of[j] = active[j] ? (a.reverse[d] ? len[j] - 1 - step : step) : 0;
      if (r == 0)
        g[j] = *reinterpret_cast<const float4*>(a.gx[d] + (t_of[j] * a.gx_st + b * a.gx_sb) * 4LL * H +
                                                4LL * cell_unit(j));
    }
  };
  load_inputs(0);
  unsigned barriers = 1;
  GridBarrier(a.barrier, barriers * gridDim.x);

  // This warp's tiles: rows m0 (and m0 + 16 when tpw == 2) of the batch slice, gate columns
  // n0..n0+15, and every ksplit-th k step from q on.
  const int warp = tid >> 5, q = warp % p.ksplit, tg = warp / p.ksplit;
  const int tiles_m = Bb / 16, per_col = tiles_m / p.tpw;
  const int m0 = (tg % per_col) * p.tpw * 16, n0 = (tg / per_col) * 16;
  const int n_chunks = (K + p.KC - 1) / p.KC;
  const int copies_per_row = Bb / kPerCopy;
  const int n_intervals = a.max_len + a.layers - 1;
  const bool default_cell = IsDefaultCell(a.cell[d]);

  for (int s = 0; s < n_intervals; ++s) {
    const int step = s - r;
    if (step >= 0 && step < a.max_len) {
      const S* x_src = r > 0 ? hslice((s + 1) & 1, r - 1, 0) : nullptr;  // wavefront ranges have D = 1
      const S* h_src = hslice((s + 1) & 1, r, d);
      auto stage = [&](int chunk, int slot) {
        const int k0 = chunk * p.KC, n = min(p.KC, K - k0);
        S* dst = hs + slot * p.KC * BBP;
        for (int i = tid; i < n * copies_per_row; i += kPersistentThreads) {
          const int kl = i / copies_per_row, j = (i - kl * copies_per_row) * kPerCopy, k = k0 + kl;
          const S* src = k < Kx ? x_src + k * Bb : h_src + (k - Kx) * Bb;
          __pipeline_memcpy_async(dst + kl * BBP + j, src + j, 16);
        }
        __pipeline_commit();
      };

      MmaAcc<O> acc[2];
      wmma::fill_fragment(acc[0], 0.f);
      wmma::fill_fragment(acc[1], 0.f);
      if (p.resident) {
        for (int chunk = 0; chunk < n_chunks; ++chunk) stage(chunk, chunk);
      } else {
        stage(0, 0);
      }
      for (int chunk = 0; chunk < n_chunks; ++chunk) {
        const int slot = p.resident ? chunk : chunk & 1;
        if (p.resident) {
          WaitPrior(n_chunks - 1 - chunk);
        } else if (chunk + 1 < n_chunks) {
          stage(chunk + 1, (chunk + 1) & 1);
          __pipeline_wait_prior(1);
        } else {
          __pipeline_wait_prior(0);
        }
        __syncthreads();
        const int k0 = chunk * p.KC, n = min(p.KC, K - k0);
        const S* hc = hs + slot * p.KC * BBP + m0;
        const S* wc = ws + static_cast<long long>(k0) * WS + n0;
        for (int kk = q * kK; kk < n; kk += p.ksplit * kK)
          MmaKStepTiles<O>(acc, p.tpw, hc + kk * BBP, BBP, wc + kk * WS, WS);
        if (!p.resident) __syncthreads();  // before the next stage() overwrites this slot
      }
      float* out = red + (q * Bb + m0) * RS + n0;
      wmma::store_matrix_sync(out, acc[0], RS, wmma::mem_row_major);
      if (p.tpw == 2) wmma::store_matrix_sync(out + 16 * RS, acc[1], RS, wmma::mem_row_major);
      __syncthreads();

      {
        S* h_dst = hslice(s & 1, r, d);
#pragma unroll
        for (int j = 0; j < kCellsPerThread; ++j) {
          if (!cell_valid(j)) continue;
          const int row = cell_row(j), u = cell_unit(j), b = b0 + row;
          if (active[j]) {  // finished sequences keep their state
            const float* at = red + row * RS + 4 * (u - u0);
            float4 sum = g[j];
            for (int k = 0; k < p.ksplit; ++k) {
              const float4 v = *reinterpret_cast<const float4*>(at + k * Bb * RS);
              sum.x += v.x;
              sum.y += v.y;
              sum.z += v.z;
              sum.w += v.w;
            }
            sum.x += bias[j].x;
            sum.y += bias[j].y;
            sum.z += bias[j].z;
            sum.w += bias[j].w;
            h[j] = default_cell ? DefaultCellUpdate(sum.x, sum.y, sum.z, sum.w, peep[j][0], peep[j][1], peep[j][2], c[j])
                                : CellUpdate(a.cell[d], sum.x, sum.y, sum.z, sum.w, peep[j][0], peep[j][1], peep[j][2], c[j]);
            if (a.y) a.y[t_of[j] * a.y_st + d * a.y_sd + b * a.y_sb + u] = FromF<T>(h[j]);
          }
          StoreOperand<O>(h_dst + u * Bb + row, h[j]);
        }
      }
      if (step + 1 < a.max_len) load_inputs(step + 1);
    }
    if (s + 1 < n_intervals) GridBarrier(a.barrier, ++barriers * gridDim.x);
  }

#pragma unroll
  for (int j = 0; j < kCellsPerThread; ++j) {
    if (!cell_valid(j)) continue;
    const long long at = state + static_cast<long long>(b0 + cell_row(j)) * H + cell_unit(j);
    a.h_fin[at] = h[j];
    a.c_fin[at] = c[j];
  }
}

}  // namespace lstm_ort
