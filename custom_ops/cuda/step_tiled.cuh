// Recurrent step for larger batches: a block owns U units x (256/U) batch rows. h and the
// block's slice of the recurrent weights are staged in shared memory in as few K chunks as
// fit (one for H <= 512), so each thread has all its loads in flight at once.
#pragma once

#include "cuda/step_args.cuh"

namespace lstm_ort {

constexpr int kTiledThreads = 256;

// Shared memory of one block for a K chunk of kc (a multiple of 4).
template <int U>
constexpr size_t TiledSmemBytes(int kc) {
  return sizeof(float) * (kTiledThreads / U) * (kc + 4) + sizeof(float4) * kc * U;
}

template <typename T, int U>
__global__ void __launch_bounds__(kTiledThreads) StepTiled(StepArgs<T> a, int kc) {
  constexpr int RB = kTiledThreads / U;  // batch rows per block
  extern __shared__ float4 smem[];
  const int stride = kc + 4;  // padded: keeps float4 alignment and spreads rows over banks
  float* h_s = reinterpret_cast<float*>(smem);
  float4* w_s = smem + RB * stride / 4;
  const int d = blockIdx.z, H = a.H, B = a.B;
  const int u0 = blockIdx.x * U, b0 = blockIdx.y * RB;
  const int tid = threadIdx.x, ul = tid % U, rl = tid / U;
  const int b = b0 + rl, u = u0 + ul;
  const bool mine = b < B && u < H;
  const float* h_in = a.h_in[d];
  const T* wh = a.wh[d];

  UnitInputs in{};
  if (mine) in = LoadUnit(a, d, b, u);
  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
  for (int k0 = 0; k0 < H; k0 += kc) {
    if ((H & 3) == 0) {
      const int q_per_row = kc / 4;
      for (int i = tid; i < RB * q_per_row; i += kTiledThreads) {
        const int r = i / q_per_row, k = k0 + 4 * (i % q_per_row), row = b0 + r;
        const float4 v = (row < B && k < H) ? *reinterpret_cast<const float4*>(h_in + static_cast<long long>(row) * H + k)
                                            : make_float4(0.f, 0.f, 0.f, 0.f);
        *reinterpret_cast<float4*>(h_s + r * stride + (k - k0)) = v;
      }
    } else {
      for (int i = tid; i < RB * kc; i += kTiledThreads) {
        const int r = i / kc, kk = i % kc, row = b0 + r, k = k0 + kk;
        h_s[r * stride + kk] = (row < B && k < H) ? h_in[static_cast<long long>(row) * H + k] : 0.f;
      }
    }
    for (int i = tid; i < kc * U; i += kTiledThreads) {
      const int kk = i / U, j = i % U, k = k0 + kk, uu = u0 + j;
      w_s[i] = (k < H && uu < H) ? Load4(wh + static_cast<long long>(k) * 4 * H + 4LL * uu)
                                 : make_float4(0.f, 0.f, 0.f, 0.f);
    }
    __syncthreads();
    const float* h_row = h_s + rl * stride;
#pragma unroll 4
    for (int kk = 0; kk < kc; kk += 4) {
      const float4 hv = *reinterpret_cast<const float4*>(h_row + kk);
      const float hk[4] = {hv.x, hv.y, hv.z, hv.w};
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const float4 w = w_s[(kk + q) * U + ul];
        acc.x = fmaf(hk[q], w.x, acc.x);
        acc.y = fmaf(hk[q], w.y, acc.y);
        acc.z = fmaf(hk[q], w.z, acc.z);
        acc.w = fmaf(hk[q], w.w, acc.w);
      }
    }
    __syncthreads();
  }
  if (mine) FinishUnit(a, d, b, u, acc, in);
}

}  // namespace lstm_ort
