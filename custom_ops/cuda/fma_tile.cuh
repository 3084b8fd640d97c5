// The FP32 FMA register tile of the persistent kernel (persistent/kernel.cuh) and the factored
// recurrence (low_rank/recurrence_kernel.cuh): a thread's R rows of staged input times one float4
// of gate columns, over the K rows of its slice.
#pragma once

namespace lstm_ort {

// acc[i][0..3] += x[i] * (w.x, w.y, w.z, w.w) for each of the tile's R rows.
template <int R>
__device__ __forceinline__ void FmaTileRow(float (*acc)[4], const float* x, float4 w) {
#pragma unroll
  for (int i = 0; i < R; ++i) {
    acc[i][0] = fmaf(x[i], w.x, acc[i][0]);
    acc[i][1] = fmaf(x[i], w.y, acc[i][1]);
    acc[i][2] = fmaf(x[i], w.z, acc[i][2]);
    acc[i][3] = fmaf(x[i], w.w, acc[i][3]);
  }
}

// row(k) for the K rows k = first, first + stride, ... below n of one slice, four rows' loads in
// flight before their FMAs.
template <typename Row>
__device__ __forceinline__ void ForSliceRows(int first, int stride, int n, Row&& row) {
  int k = first;
  for (; k + 3 * stride < n; k += 4 * stride) {
    row(k);
    row(k + stride);
    row(k + 2 * stride);
    row(k + 3 * stride);
  }
  for (; k < n; k += stride) row(k);
}

}  // namespace lstm_ort
