// Recurrent step for larger batches. A block owns 4 units x RB batch rows; each thread holds a
// register tile of 4 rows x 2 units (32 gate sums) over a K slice, so every shared-memory load
// feeds 8 to 16 FMAs (the step is FMA-bound, not shared-memory-bound). KS threads split K per
// tile; their partial sums meet in shared memory, and each of them then finishes one (row, unit).
// h rows and the block's weight slice arrive through cp.async in as few K chunks as fit.
#pragma once

#include <cuda_pipeline_primitives.h>

#include "cuda/v1/step_args.cuh"
#include "cuda/v1/step_shapes.h"

namespace lstm_ort {

__device__ __forceinline__ float4 Gates4(const float* w) { return *reinterpret_cast<const float4*>(w); }
__device__ __forceinline__ float4 Gates4(const __half* w) { return Load4(w); }

template <typename T, int RG>
__global__ void __launch_bounds__(kTiledThreads) StepTiled(StepArgs<T> a, int kc) {
  using S = TiledShape<RG>;
  extern __shared__ float4 smem[];
  const int stride = TiledStride(kc, a.H);
  float* h_s = reinterpret_cast<float*>(smem);
  T* w_s = reinterpret_cast<T*>(reinterpret_cast<char*>(smem) + (sizeof(float) * S::RB * stride + 15) / 16 * 16);
  float* partial = reinterpret_cast<float*>(smem);

  const int d = blockIdx.z, H = a.H, B = a.B, tid = threadIdx.x;
  const int u0 = blockIdx.x * kTiledUnits, b0 = blockIdx.y * S::RB;
  const int rg = tid % RG, up = (tid / RG) % 2, ks = tid / (2 * RG);
  const float* h_in = a.h_in[d];
  const T* wh = a.wh[d];
  const int kpt = kc / S::KS;

  // The (row, unit) this thread finishes, pair pr = 2*i + j of its tile: row rg + RG*i, unit 2*up + j.
  const int pr = ks % (2 * kTiledRows);
  const int fb = b0 + rg + RG * (pr / 2), fu = u0 + 2 * up + (pr % 2);
  const bool mine = ks < 2 * kTiledRows && fb < B && fu < H;
  UnitInputs in{};
  if (mine) in = LoadUnit(a, d, fb, fu);

  float4 acc[kTiledRows][2];
#pragma unroll
  for (int i = 0; i < kTiledRows; ++i) acc[i][0] = acc[i][1] = make_float4(0.f, 0.f, 0.f, 0.f);

  for (int k0 = 0; k0 < H; k0 += kc) {
    // Walk the tile with (row, column) stepped incrementally: no integer division per copy.
    const int vec = (H & 3) == 0 ? 4 : 1;  // floats per copy
    const int per_row = kc / vec;
    int r = tid / per_row, c = tid % per_row;
    for (; r < S::RB; ) {
      const int row = b0 + r, k = k0 + c * vec;
      const bool ok = row < B && k < H;
      const float* src = ok ? h_in + static_cast<long long>(row) * H + k : h_in;
      if (vec == 4) __pipeline_memcpy_async(h_s + r * stride + c * 4, src, 16, ok ? 0 : 16);
      else __pipeline_memcpy_async(h_s + r * stride + c, src, 4, ok ? 0 : 4);
      c += kTiledThreads;
      while (c >= per_row) {
        c -= per_row;
        ++r;
      }
    }
    for (int i = tid; i < kc * kTiledUnits; i += kTiledThreads) {
      const int kk = i / kTiledUnits, j = i % kTiledUnits, k = k0 + kk, u = u0 + j;
      const bool ok = k < H && u < H;
      __pipeline_memcpy_async(w_s + 4 * i, ok ? wh + static_cast<long long>(k) * 4 * H + 4LL * u : wh,
                              4 * sizeof(T), ok ? 0 : 4 * sizeof(T));
    }
    __pipeline_commit();
    __pipeline_wait_prior(0);
    __syncthreads();
    const int kb = ks * kpt;
#pragma unroll 4
    for (int kk = kb; kk < kb + kpt; ++kk) {
      const float4 w0 = Gates4(w_s + 4 * (kk * kTiledUnits + 2 * up));
      const float4 w1 = Gates4(w_s + 4 * (kk * kTiledUnits + 2 * up + 1));
#pragma unroll
      for (int i = 0; i < kTiledRows; ++i) {
        const float hv = h_s[(rg + RG * i) * stride + kk];
        acc[i][0].x = fmaf(hv, w0.x, acc[i][0].x);
        acc[i][0].y = fmaf(hv, w0.y, acc[i][0].y);
        acc[i][0].z = fmaf(hv, w0.z, acc[i][0].z);
        acc[i][0].w = fmaf(hv, w0.w, acc[i][0].w);
        acc[i][1].x = fmaf(hv, w1.x, acc[i][1].x);
        acc[i][1].y = fmaf(hv, w1.y, acc[i][1].y);
        acc[i][1].z = fmaf(hv, w1.z, acc[i][1].z);
        acc[i][1].w = fmaf(hv, w1.w, acc[i][1].w);
      }
    }
    __syncthreads();  // the tiles are refilled (or reused for partial sums) next
  }

  // partial[ks][tile][pair] as float4, tile = (rg, up), pair = 2*i + j.
  float4* p4 = reinterpret_cast<float4*>(partial);
  const int tile = rg + RG * up, tiles = 2 * RG;
#pragma unroll
  for (int i = 0; i < kTiledRows; ++i) {
    p4[(ks * tiles + tile) * 2 * kTiledRows + 2 * i] = acc[i][0];
    p4[(ks * tiles + tile) * 2 * kTiledRows + 2 * i + 1] = acc[i][1];
  }
  __syncthreads();
  if (!mine) return;
  float4 sum = make_float4(0.f, 0.f, 0.f, 0.f);
  for (int j = 0; j < S::KS; ++j) {
    const float4 p = p4[(j * tiles + tile) * 2 * kTiledRows + pr];
    sum.x += p.x;
    sum.y += p.y;
    sum.z += p.z;
    sum.w += p.w;
  }
  FinishUnit(a, d, fb, fu, sum, in);
}

}  // namespace lstm_ort
