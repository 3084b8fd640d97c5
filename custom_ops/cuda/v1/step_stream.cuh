// v1's recurrent product for small batches (heuristics.h, StepStreamsWeights): gates = h . R with
// B <= 16 rows, so the step is bound by reading R ([H, 4H]) once from memory. Each block takes
// kStreamTileCols columns of one direction and one K split: its warps read interleaved rows of
// R as one float4 per lane (a coalesced 512-byte row segment), multiply by the block's rows of h
// (staged in shared memory, read as broadcasts), reduce across warps, and write their split's
// partial sums. The cell kernel adds the splits (gemm_step.cu); no atomics, so the sum is the same
// on every run.
#pragma once

#include <cuda_runtime.h>

#include "cuda/heuristics.h"

namespace lstm_ort {

constexpr int kStreamWarps = 8;
constexpr int kStreamThreads = 32 * kStreamWarps;
static_assert(kStreamTileCols == 4 * 32, "a warp covers a tile with one float4 per lane");

struct StreamArgs {
  int B, H, G, D;          // G = 4H columns
  int rows_per_split;      // K rows per blockIdx.z
  const float* w[2];       // per direction: [H][G], row stride G
  const float* h[2];       // per direction: [B][H]
  float* partial;          // [splits][D][B][G]
};

// kB: batch rows the block computes (a power of two >= B; rows past B are zero).
template <int kB>
__global__ void __launch_bounds__(kStreamThreads) StreamRecurrentProduct(StreamArgs a) {
  // h of the split, [rows][kB]; afterwards the warps' partial sums, 8 batch rows at a time.
  constexpr int kRedRows = kB < 8 ? kB : 8;
  constexpr int kHFloats = kStreamMaxRowsPerSplit * kB;
  constexpr int kRedFloats = kStreamWarps * kRedRows * kStreamTileCols;
  __shared__ __align__(16) float smem[kHFloats > kRedFloats ? kHFloats : kRedFloats];

  const int d = blockIdx.y, split = blockIdx.z;
  const int k0 = split * a.rows_per_split;
  const int rows = min(a.H, k0 + a.rows_per_split) - k0;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int tile0 = blockIdx.x * kStreamTileCols;
  const int col = tile0 + 4 * lane;

  const float* h = d == 0 ? a.h[0] : a.h[1];  // not a.h[d]: a dynamic index puts the array on the stack
  for (int i = threadIdx.x; i < rows * kB; i += kStreamThreads) {  // coalesced along h's rows
    const int b = i / rows, k = i - b * rows;
    smem[k * kB + b] = b < a.B ? h[static_cast<long long>(b) * a.H + k0 + k] : 0.f;
  }
  __syncthreads();

  float acc[kB][4] = {};
  if (col < a.G) {  // G % 4 == 0: a lane's float4 is all in or all out
    const float* w = (d == 0 ? a.w[0] : a.w[1]) + static_cast<long long>(k0) * a.G + col;
#pragma unroll 4  // 4 measured 3% faster than 8 (H2048 B2-16)
    for (int k = warp; k < rows; k += kStreamWarps) {
      const float4 wv = __ldg(reinterpret_cast<const float4*>(w + static_cast<long long>(k) * a.G));
      const float* hk = smem + k * kB;
#pragma unroll
      for (int b = 0; b < kB; ++b) {
        const float hv = hk[b];
        acc[b][0] = fmaf(hv, wv.x, acc[b][0]);
        acc[b][1] = fmaf(hv, wv.y, acc[b][1]);
        acc[b][2] = fmaf(hv, wv.z, acc[b][2]);
        acc[b][3] = fmaf(hv, wv.w, acc[b][3]);
      }
    }
  }

  float* out = a.partial + (static_cast<long long>(split) * a.D + d) * a.B * a.G;
#pragma unroll
  for (int b0 = 0; b0 < kB; b0 += kRedRows) {
    __syncthreads();  // h (first round) or the previous round's sums are no longer read
#pragma unroll
    for (int b = 0; b < kRedRows; ++b)
      *reinterpret_cast<float4*>(smem + (warp * kRedRows + b) * kStreamTileCols + 4 * lane) =
          make_float4(acc[b0 + b][0], acc[b0 + b][1], acc[b0 + b][2], acc[b0 + b][3]);
    __syncthreads();
    for (int i = threadIdx.x; i < kRedRows * kStreamTileCols; i += kStreamThreads) {
      const int b = b0 + i / kStreamTileCols, c = tile0 + i % kStreamTileCols;
      if (b >= a.B || c >= a.G) continue;
      float sum = 0.f;
#pragma unroll
      for (int w = 0; w < kStreamWarps; ++w) sum += smem[w * kRedRows * kStreamTileCols + i];
      out[static_cast<long long>(b) * a.G + c] = sum;
    }
  }
}

}  // namespace lstm_ort
