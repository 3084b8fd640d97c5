// 16-bit operands of v1's cuBLAS step in the reduced modes (heuristics.h, StepWeightsFor): once
// per layer and call, the largest |weight| of each direction and the weights as fp16 scaled by
// 2^HalfScaleExponent (or as bf16, unscaled); every step then reads half the bytes. The cell
// removes the scale from the product exactly (a power of two) and writes h's 16-bit copy for the
// next step's GEMM (v1/gemm_step.cu).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "cuda/v1/half_scale.h"

namespace lstm_ort {

template <typename W>
__device__ __forceinline__ W ToStepWeight(float v);
template <>
__device__ __forceinline__ float ToStepWeight<float>(float v) { return v; }
template <>
__device__ __forceinline__ __half ToStepWeight<__half>(float v) { return __float2half_rn(v); }
template <>
__device__ __forceinline__ __nv_bfloat16 ToStepWeight<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

// Four adjacent weights (one unit's gates), read once per step: through the read-only path.
__device__ __forceinline__ float4 LoadStepWeights4(const float* p) { return __ldg(reinterpret_cast<const float4*>(p)); }
__device__ __forceinline__ float4 LoadStepWeights4(const __half* p) {
  const uint2 raw = __ldg(reinterpret_cast<const uint2*>(p));
  const float2 a = __half22float2(*reinterpret_cast<const __half2*>(&raw.x));
  const float2 b = __half22float2(*reinterpret_cast<const __half2*>(&raw.y));
  return make_float4(a.x, a.y, b.x, b.y);
}
__device__ __forceinline__ float4 LoadStepWeights4(const __nv_bfloat16* p) {
  const uint2 raw = __ldg(reinterpret_cast<const uint2*>(p));
  const float2 a = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.x));
  const float2 b = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.y));
  return make_float4(a.x, a.y, b.x, b.y);
}

// The exponent the copy of direction d was scaled by: only fp16 is scaled.
template <typename W>
__device__ __forceinline__ int StepWeightScale(const unsigned* amax, int d) {
  if constexpr (std::is_same_v<W, __half>) return HalfScaleExponent(amax[d]);
  return 0;
}

// amax[d] = bits of max |w| over direction d's n weights (amax zeroed before; blockIdx.y = d).
// Non-negative floats order as their bits do, so an integer max is a float max.
__global__ inline void RecurrentAbsMax(const float* w0, const float* w1, long long n, unsigned* amax) {
  const int d = blockIdx.y;
  const float* w = d == 0 ? w0 : w1;
  unsigned m = 0;
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<long long>(gridDim.x) * blockDim.x)
    m = max(m, __float_as_uint(fabsf(w[i])));
  for (int off = 16; off > 0; off /= 2) m = max(m, __shfl_xor_sync(0xffffffffu, m, off));
  if (threadIdx.x % 32 == 0 && m) atomicMax(amax + d, m);
}

// out[d] = w[d] * 2^s[d] in W, for the n weights of each direction (blockIdx.y = d).
template <typename W>
__global__ void ToStepWeights(const float* w0, const float* w1, long long n, const unsigned* amax, W* out) {
  const int d = blockIdx.y;
  const float* w = d == 0 ? w0 : w1;
  const int s = StepWeightScale<W>(amax, d);
  W* o = out + d * n;
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<long long>(gridDim.x) * blockDim.x)
    o[i] = ToStepWeight<W>(ldexpf(w[i], s));
}

}  // namespace lstm_ort
