// Persistent recurrent kernel: one cooperative launch runs every step of a range of layers.
//
// Each block owns one job, (layer r of the range, direction d, U units, Bb batch rows), and
// keeps that job's weight columns in shared memory for the whole sequence. Steps are separated
// by a grid barrier. Layers of a range form a wavefront: in interval s, layer r runs step s - r,
// reading its own h from interval s - 1 and, as its input, layer r - 1's h of the same step,
// which that layer wrote in interval s - 1. So L layers take T + L - 1 intervals, and only the
// range's first layer needs its input projection precomputed (one cuBLAS GEMM).
//
// h lives in global memory (L2) as [parity][layer][direction][batch slice][H][Bb], so the rows
// a block stages are one contiguous run; it streams through shared memory in K chunks,
// all at once when it fits. c and the latest h of each (row, unit) stay in the registers of
// the thread that finishes it.
#pragma once

#include <cuda_pipeline_primitives.h>

#include "cuda/element_access.cuh"
#include "cuda/persistent/args.h"
#include "cuda/persistent/grid_barrier.cuh"
#include "cuda/persistent/phase_clocks.cuh"
#include "cuda/persistent/plan.h"
#include "lstm_ort/cell.h"

namespace lstm_ort {

constexpr int kCellsPerThread = 4;   // Bb * U <= 4 * kPersistentThreads

// cp.async.wait_group takes an immediate.
__device__ __forceinline__ void WaitPrior(int pending) {
  switch (pending) {
    case 0: __pipeline_wait_prior(0); break;
    case 1: __pipeline_wait_prior(1); break;
    case 2: __pipeline_wait_prior(2); break;
    default: __pipeline_wait_prior(3); break;
  }
}

// R: rows of a thread's register tile (4 or 8: one or two float4 of staged h), times 4 gates of
// one unit.
template <typename T, int R>
__global__ void __launch_bounds__(kPersistentThreads, 1) PersistentLstm(PersistentArgs<T> a) {
  extern __shared__ float4 smem4[];
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
  const int WS = 4 * U + 4;  // padded row: consecutive k rows start in different banks

  float* ws = reinterpret_cast<float*>(smem4);        // [K][WS]
  float* red = ws + p.w_floats;                       // [groups][R][P] float4 partial gate sums
  float* hs = red + p.groups() * p.P * R * 4;         // staged h rows, [rows][Bb]

  // This job's weight columns, converted to fp32 once.
  {
    const T* w = a.w[r][d];
    const float4 zero = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int i = tid; i < K * U; i += kPersistentThreads) {
      const int k = i >> a.log2_u, ul = i & (U - 1), u = u0 + ul;
      const float4 v = u < H ? Load4(w + static_cast<long long>(k) * 4 * H + 4LL * u) : zero;
      *reinterpret_cast<float4*>(ws + k * WS + 4 * ul) = v;
    }
  }

  const long long plane = static_cast<long long>(H) * p.Bp;  // one (layer, direction) of hbuf
  // This block's batch slice of one (parity, layer, direction): [H][Bb].
  auto hslice = [&](int parity, int layer, int dir) {
    return a.hbuf + ((static_cast<long long>(parity) * a.layers + layer) * a.D + dir) * plane +
           static_cast<long long>(bs) * H * Bb;
  };

  // Cells: thread tid finishes cells tid, tid + 256, ... of the block's Bb x U, and keeps their
  // c and h in registers for the whole sequence.
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
    float* h_init = hslice((r + 1) & 1, r, d);  // what interval r, this layer's first, reads
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
      h_init[u * Bb + (b - b0)] = h[j];
    }
  }
  // Which cells a step updates, and the first layer's input projection for them. Loaded an
  // interval ahead, so the latency hides behind the grid barrier.
  auto load_inputs = [&](int step) {
#pragma unroll
    for (int j = 0; j < kCellsPerThread; ++j) {
      active[j] = false;
      if (!cell_valid(j)) continue;
      const int b = b0 + cell_row(j);
      active[j] = step < len[j];
      t_of[j] = active[j] ? (a.reverse[d] ? len[j] - 1 - step : step) : 0;
      // Unconditional, so nothing waits on it until the gates need it.
      if (r == 0)
        g[j] = *reinterpret_cast<const float4*>(a.gx[d] + (t_of[j] * a.gx_st + b * a.gx_sb) * 4LL * H +
                                                4LL * cell_unit(j));
    }
  };
  load_inputs(0);
  unsigned barriers = 1;
  GridBarrier(a.barrier, barriers * gridDim.x);

  // Register tiles: `pair` = (row group, unit), `ks` = its K slice.
  const int P = p.P, S = p.S;
  const int pair = tid & (P - 1), ks = tid >> a.log2_p;
  const int rg = pair >> a.log2_u, ul = pair & (U - 1);
  const bool warp_split = P < 32;  // K slices within a warp meet by shuffles first
  const int lane = tid & 31, warp = tid >> 5;
  const int group = warp_split ? warp : ks;
  const bool holder = warp_split ? lane < P : true;
  const int n_chunks = (K + p.KC - 1) / p.KC;
  const int bb4 = Bb >> 2;
  const int n_intervals = a.max_len + a.layers - 1;
  const bool default_cell = IsDefaultCell(a.cell[d]);
#ifdef LSTM_ORT_PHASE_CLOCKS
  unsigned long long phase_t = NowNs();
#endif

  for (int s = 0; s < n_intervals; ++s) {
    const int step = s - r;
    if (step >= 0 && step < a.max_len) {
      const float* x_src = r > 0 ? hslice((s + 1) & 1, r - 1, 0) : nullptr;  // wavefront ranges have D = 1
      const float* h_src = hslice((s + 1) & 1, r, d);
      auto stage = [&](int chunk, int slot) {
        const int k0 = chunk * p.KC, n = min(p.KC, K - k0);
        float* dst = hs + slot * p.KC * Bb;
        for (int i = tid; i < n * bb4; i += kPersistentThreads) {
          const int kl = i >> a.log2_bb4, j = (i & (bb4 - 1)) * 4, k = k0 + kl;
          const float* src = k < Kx ? x_src + k * Bb : h_src + (k - Kx) * Bb;
          __pipeline_memcpy_async(dst + kl * Bb + j, src + j, 16);
        }
        __pipeline_commit();
      };
      PHASE(0);

      float acc[R][4] = {};
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
        const float* hc = hs + slot * p.KC * Bb + rg * R;
        const float* wc = ws + k0 * WS + 4 * ul;
        auto fma_row = [&](int kl) {
          const float4 wv = *reinterpret_cast<const float4*>(wc + kl * WS);
          float hr[R];
#pragma unroll
          for (int i = 0; i < R; i += 4) {
            const float4 hv = *reinterpret_cast<const float4*>(hc + kl * Bb + i);
            hr[i] = hv.x;
            hr[i + 1] = hv.y;
            hr[i + 2] = hv.z;
            hr[i + 3] = hv.w;
          }
#pragma unroll
          for (int i = 0; i < R; ++i) {
            acc[i][0] = fmaf(hr[i], wv.x, acc[i][0]);
            acc[i][1] = fmaf(hr[i], wv.y, acc[i][1]);
            acc[i][2] = fmaf(hr[i], wv.z, acc[i][2]);
            acc[i][3] = fmaf(hr[i], wv.w, acc[i][3]);
          }
        };
        int kl = ks;
        for (; kl + 3 * S < n; kl += 4 * S) {  // four rows' loads in flight before their FMAs
          fma_row(kl);
          fma_row(kl + S);
          fma_row(kl + 2 * S);
          fma_row(kl + 3 * S);
        }
        for (; kl < n; kl += S) fma_row(kl);
        if (!p.resident) __syncthreads();  // before the next stage() overwrites this slot
      }
      PHASE(1);

      // K slices meet: lanes of a warp by shuffles, then every group's sums in shared memory.
      if (warp_split) {
        for (int off = P; off < 32; off <<= 1)
#pragma unroll
          for (int i = 0; i < R; ++i)
#pragma unroll
            for (int q = 0; q < 4; ++q) acc[i][q] += __shfl_xor_sync(0xffffffffu, acc[i][q], off);
      }
      if (holder) {
        // [group][row of tile][pair] float4s: a warp's consecutive pairs write consecutive float4s.
        float4* dst = reinterpret_cast<float4*>(red) + group * R * P + pair;
#pragma unroll
        for (int i = 0; i < R; ++i) dst[i * P] = make_float4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]);
      }
      __syncthreads();
      PHASE(2);

      {
        float* h_dst = hslice(s & 1, r, d);
        const int groups = p.groups();
#pragma unroll
        for (int j = 0; j < kCellsPerThread; ++j) {
          if (!cell_valid(j)) continue;
          const int row = cell_row(j), u = cell_unit(j), b = b0 + row;
          if (active[j]) {  // finished sequences keep their state
            const float4* at = reinterpret_cast<const float4*>(red) + (row % R) * P + ((row / R) << a.log2_u) + (u - u0);
            float4 sum = g[j];
            for (int q = 0; q < groups; ++q) {
              const float4 v = at[q * R * P];
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
          h_dst[u * Bb + row] = h[j];
        }
      }
      PHASE(3);
      if (step + 1 < a.max_len) load_inputs(step + 1);
    }
    PHASE(4);
    if (s + 1 < n_intervals) GridBarrier(a.barrier, ++barriers * gridDim.x);
    PHASE(5);
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
