// FP32 products on TF32 tensor cores ("3xTF32"): x = hi + lo with hi = x rounded to TF32 and
// lo = x - hi, then x*w ~ hi_x*hi_w + hi_x*lo_w + lo_x*hi_w. The dropped lo*lo term and lo's own
// TF32 rounding are ~2^-21 of the product, below FP32 accumulation error; plain TF32 (stock's
// default) is ~2^-11 off.
#pragma once

#include <cstdint>

namespace lstm_ort {

__device__ __forceinline__ float RoundToTf32(float v) {
  uint32_t bits;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(bits) : "f"(v));
  return __uint_as_float(bits);
}

__global__ void SplitTf32(const float* __restrict__ x, float* __restrict__ hi, float* __restrict__ lo, long long n) {
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    const float v = x[i];
    const float h = RoundToTf32(v);
    hi[i] = h;
    lo[i] = v - h;
  }
}

// The split of a [rows][cols] block written transposed, [cols][rows]: W's input rows [I][4H]
// become K-major [4H][I], the only operand order Hopper's TF32 tensor cores read from shared
// memory (cuBLAS ran W as stored 10-17% slower on an H100). Either output may be null.
// Launch: blocks of kTransposeTile x kTransposeRowsPerPass threads on a grid of
// (cols / kTransposeTile, rows / kTransposeTile) tiles, rounded up.
constexpr int kTransposeTile = 32;
constexpr int kTransposeRowsPerPass = 8;

__global__ void SplitTf32Transposed(const float* __restrict__ w, float* __restrict__ hi, float* __restrict__ lo,
                                    int rows, int cols) {
  __shared__ float tile[kTransposeTile][kTransposeTile + 1];  // +1: columns fall in distinct banks
  const int r0 = blockIdx.y * kTransposeTile, c0 = blockIdx.x * kTransposeTile;
  for (int r = threadIdx.y; r < kTransposeTile; r += blockDim.y) {
    const int row = r0 + r, col = c0 + threadIdx.x;
    if (row < rows && col < cols) tile[r][threadIdx.x] = w[static_cast<long long>(row) * cols + col];
  }
  __syncthreads();
  for (int c = threadIdx.y; c < kTransposeTile; c += blockDim.y) {
    const int col = c0 + c, row = r0 + threadIdx.x;
    if (row >= rows || col >= cols) continue;
    const float v = tile[threadIdx.x][c];
    const float h = RoundToTf32(v);
    const long long at = static_cast<long long>(col) * rows + row;
    if (hi) hi[at] = h;
    if (lo) lo[at] = v - h;
  }
}

}  // namespace lstm_ort
