// FP32 products on TF32 tensor cores ("3xTF32"): x = hi + lo with hi = x rounded to TF32 and
// lo = x - hi, then x*w ~ hi_x*hi_w + hi_x*lo_w + lo_x*hi_w. The dropped lo*lo term and lo's own
// TF32 rounding are ~2^-21 of the product, below FP32 accumulation error; plain TF32 (stock's
// default) is ~2^-11 off.
#pragma once

#include <cstdint>

namespace lstm_ort {

__global__ void SplitTf32(const float* __restrict__ x, float* __restrict__ hi, float* __restrict__ lo, long long n) {
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    const float v = x[i];
    uint32_t bits;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(bits) : "f"(v));
    const float h = __uint_as_float(bits);
    hi[i] = h;
    lo[i] = v - h;
  }
}

}  // namespace lstm_ort
