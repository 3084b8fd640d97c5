// Initial and final states of one layer: between the op's [L*D, B, H] (layout 0) or
// [B, L*D, H] (layout 1) tensors of the element type and the fp32 [D][B][H] the recurrence uses.
#pragma once

#include "cuda/element_access.cuh"

namespace lstm_ort {

// Row of state k = l*D + d for batch entry b.
__device__ __forceinline__ long long StateRow(int layout, int LD, int B, int k, int b) {
  return layout == 0 ? static_cast<long long>(k) * B + b : static_cast<long long>(b) * LD + k;
}

template <typename T>
__global__ void InitStates(const T* h0, const T* c0, float* h, float* c, int layer, int D, int LD, int B, int H,
                           int layout) {
  const long long n = static_cast<long long>(D) * B * H;
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    const int j = i % H, b = (i / H) % B, d = i / (static_cast<long long>(H) * B);
    const long long src = StateRow(layout, LD, B, layer * D + d, b) * H + j;
    h[i] = h0 ? ToF(h0[src]) : 0.f;
    c[i] = c0 ? ToF(c0[src]) : 0.f;
  }
}

// Every length T: no host copy, so a call without sequence_lens enqueues without waiting on the
// stream (a copy from pageable host memory may synchronise the host with it).
__global__ inline void FillLengths(int* lens, int B, int T) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < B; i += gridDim.x * blockDim.x) lens[i] = T;
}

// A sequence of length 0 ends in zeros, as stock onnxruntime gives.
template <typename T>
__global__ void FinalStates(const float* h, const float* c, const int* lens, T* y_h, T* y_c, int layer, int D,
                            int LD, int B, int H, int layout) {
  const long long n = static_cast<long long>(D) * B * H;
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    const int j = i % H, b = (i / H) % B, d = i / (static_cast<long long>(H) * B);
    const long long dst = StateRow(layout, LD, B, layer * D + d, b) * H + j;
    const bool empty = lens[b] == 0;
    if (y_h) y_h[dst] = FromF<T>(empty ? 0.f : h[i]);
    if (y_c) y_c[dst] = FromF<T>(empty ? 0.f : c[i]);
  }
}

}  // namespace lstm_ort
