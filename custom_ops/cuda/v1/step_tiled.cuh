// Recurrent step for larger batches. A block owns 4 units x RB batch rows; each thread holds a
// register tile of 4 rows x 2 units (32 gate sums) over a K slice, so every shared-memory load
// feeds 8 to 16 FMAs (the step is FMA-bound, not shared-memory-bound). KS threads split K per
// tile; their partial sums meet in shared memory, and each of them then finishes one (row, unit).
// h rows and the block's weight slice arrive through cp.async in as few K chunks as fit. A call's
// one step (CallPlan::step_projects) runs the input's product first, the same way over x's rows
// (16-bit ones converted into the tile) and Wx's slice: the projection's launch goes.
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

  // The product of the left rows [b0, b0 + RB) of depth K (their chunk [k0, k0 + kc) put into h_s
  // by load_rows) with the block's slice of w (row k at 4H * k).
  auto product = [&](const T* w, int K, auto load_rows) {
    for (int k0 = 0; k0 < K; k0 += kc) {
      load_rows(k0);
      for (int i = tid; i < kc * kTiledUnits; i += kTiledThreads) {
        const int kk = i / kTiledUnits, j = i % kTiledUnits, k = k0 + kk, u = u0 + j;
        const bool ok = k < K && u < H;
        __pipeline_memcpy_async(w_s + 4 * i, ok ? w + static_cast<long long>(k) * 4 * H + 4LL * u : w,
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
  };
  // Chunk [k0, k0 + kc) of float rows (row b at src + b * ld, K wide) into h_s through cp.async,
  // walking the tile with (row, column) stepped incrementally: no integer division per copy.
  auto copy_rows = [&](const float* src, int ld, int K, int k0) {
    // Floats per copy: 4 where h_s rows and the source's rows are 16-byte aligned (X may be bound
    // at any offset into a buffer of the caller's).
    const bool aligned = (reinterpret_cast<unsigned long long>(src) & 15) == 0;
    const int vec = (H & 3) == 0 && (ld & 3) == 0 && aligned ? 4 : 1;
    const int per_row = kc / vec;
    int r = tid / per_row, c = tid % per_row;
    for (; r < S::RB; ) {
      const int row = b0 + r, k = k0 + c * vec;
      const bool ok = row < B && k < K;
      const float* from = ok ? src + static_cast<long long>(row) * ld + k : src;
      if (vec == 4) __pipeline_memcpy_async(h_s + r * stride + c * 4, from, 16, ok ? 0 : 16);
      else __pipeline_memcpy_async(h_s + r * stride + c, from, 4, ok ? 0 : 4);
      c += kTiledThreads;
      while (c >= per_row) {
        c -= per_row;
        ++r;
      }
    }
  };
  if (a.x) {
    product(a.wx[d], a.I, [&](int k0) {
      if constexpr (sizeof(T) == sizeof(float)) {
        copy_rows(reinterpret_cast<const float*>(a.x), a.I, a.I, k0);
      } else {  // 16-bit input: converted into the tile
        for (int i = tid; i < S::RB * kc; i += kTiledThreads) {
          const int r = i / kc, c = i % kc, row = b0 + r, k = k0 + c;
          h_s[r * stride + c] = row < B && k < a.I ? ToF(a.x[static_cast<long long>(row) * a.I + k]) : 0.f;
        }
      }
    });
  }
  product(wh, H, [&](int k0) { copy_rows(h_in, H, H, k0); });

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
