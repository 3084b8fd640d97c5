// Recurrent step for small batches: one warp per hidden unit keeps that unit's recurrent
// weights in registers and splits K across its lanes; rows are reduced with shuffles.
#pragma once

#include "cuda/v1/step_args.cuh"
#include "cuda/v1/step_shapes.h"

namespace lstm_ort {

template <typename T, int KPL>  // K values per lane: H <= 32 * KPL
__global__ void __launch_bounds__(kSplitKWarps * 32) StepSplitK(StepArgs<T> a, int rows_per_block) {
  const int lane = threadIdx.x & 31;
  const int u = blockIdx.x * kSplitKWarps + (threadIdx.x >> 5);
  const int d = blockIdx.z, H = a.H;
  if (u >= H) return;
  const T* wh = a.wh[d];
  float4 w[KPL];
#pragma unroll
  for (int j = 0; j < KPL; ++j) {
    const int k = lane + 32 * j;
    w[j] = k < H ? Load4(wh + static_cast<long long>(k) * 4 * H + 4LL * u) : make_float4(0.f, 0.f, 0.f, 0.f);
  }
  const int b_end = min(a.B, (blockIdx.y + 1) * rows_per_block);
  for (int b = blockIdx.y * rows_per_block; b < b_end; ++b) {
    const float* h = a.h_in[d] + static_cast<long long>(b) * H;
    UnitInputs in{};
    if (lane == 0) in = LoadUnit(a, d, b, u);
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    if (a.x) {  // the call's one step: its input product too, read once, so from global memory
      const T* x = a.x + static_cast<long long>(b) * a.I;
      for (int k = lane; k < a.I; k += 32) {
        const float xv = ToF(x[k]);
        const float4 wv = Load4(a.wx[d] + static_cast<long long>(k) * 4 * H + 4LL * u);
        acc.x = fmaf(xv, wv.x, acc.x);
        acc.y = fmaf(xv, wv.y, acc.y);
        acc.z = fmaf(xv, wv.z, acc.z);
        acc.w = fmaf(xv, wv.w, acc.w);
      }
    }
#pragma unroll
    for (int j = 0; j < KPL; ++j) {
      const int k = lane + 32 * j;
      const float hv = k < H ? h[k] : 0.f;
      acc.x = fmaf(hv, w[j].x, acc.x);
      acc.y = fmaf(hv, w[j].y, acc.y);
      acc.z = fmaf(hv, w[j].z, acc.z);
      acc.w = fmaf(hv, w[j].w, acc.w);
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
      acc.x += __shfl_xor_sync(0xffffffffu, acc.x, off);
      acc.y += __shfl_xor_sync(0xffffffffu, acc.y, off);
      acc.z += __shfl_xor_sync(0xffffffffu, acc.z, off);
      acc.w += __shfl_xor_sync(0xffffffffu, acc.w, off);
    }
    if (lane == 0) FinishUnit(a, d, b, u, acc, in);
  }
}

}  // namespace lstm_ort
