// Initial and final states of one layer: between the op's [L*D, B, H] (layout 0) or
// [B, L*D, H] (layout 1) tensors of the element type and the fp32 [D][B][H] the recurrence uses.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "cuda/cuda_check.h"
#include "cuda/element_access.cuh"
#include "cuda/grid_stride.h"

namespace lstm_ort {

// Row of state k = l*D + d for batch entry b.
__device__ __forceinline__ long long StateRow(int layout, int LD, int B, int k, int b) {
  return layout == 0 ? static_cast<long long>(k) * B + b : static_cast<long long>(b) * LD + k;
}

// Both fp32 state buffers can be read or written a float4 at a time from their start (scratch
// regions are aligned; a buffer that starts inside another is not, when what precedes it is odd).
inline bool Float4Aligned(const float* h, const float* c) {
  return ((reinterpret_cast<uintptr_t>(h) | reinterpret_cast<uintptr_t>(c)) & 15) == 0;
}

// What the first launch of a range does besides its states, so that a short call is fewer
// launches (H200, T=1: each launch ~2-3 us of the GPU's timeline against a few of work): zeroing
// `zero_n` floats of `zero` (the persistent kernels' staged h; a multiple of 4, 16-byte aligned)
// and `counter` (their grid barrier), and setting every one of `B` lengths to `T` where the call
// has no sequence_lens (`lens`). All null: nothing besides the states.
struct StatesPrelude {
  float* zero = nullptr;
  long long zero_n = 0;
  unsigned* counter = nullptr;
  int* lens = nullptr;
  int B = 0, T = 0;
  // A one-step call on v1's cuBLAS step (heuristics.h StepProjectsInput): the rows [x h0] of each
  // direction, [D][B][I + H] fp32, at `stage`, for its one GEMM with [W; R]. x (the op's element
  // type: its input, or the output of the layer below, UpperLayersStageRows) holds row b at b*I in
  // either layout, T being 1; h0's part is written only from initial_h.
  const void* stage_x = nullptr;
  float* stage = nullptr;
  int stage_I = 0;
};

// The fp32 states [D][B][H] of `layers` consecutive layers from `first` on, one block after the
// other in h and c, then the prelude. `zero4` (no initial_h nor initial_c, h and c Float4Aligned):
// zeros four at a time; the per-element row arithmetic made the kernel three times a memset's
// time at D2 B512 H2048.
template <typename T>
__global__ void InitStates(const T* h0, const T* c0, float* h, float* c, int first_layer, int layers, int D, int LD,
                           int B, int H, int layout, bool zero4, StatesPrelude prelude) {
  const long long per_layer = static_cast<long long>(D) * B * H, n = per_layer * layers;
  const long long first = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x;
  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
  for (long long i = first; i < prelude.zero_n / 4; i += stride) reinterpret_cast<float4*>(prelude.zero)[i] = float4{};
  if (prelude.counter && first == 0) *prelude.counter = 0;
  if (prelude.lens)
    for (long long i = first; i < prelude.B; i += stride) prelude.lens[i] = prelude.T;
  const long long stage_row = prelude.stage_I + H;
  if (prelude.stage) {
    const T* x = static_cast<const T*>(prelude.stage_x);
    const long long xb = static_cast<long long>(B) * prelude.stage_I;
    for (long long i = first; i < D * xb; i += stride) {
      const long long r = i % xb, b = r / prelude.stage_I, k = r - b * prelude.stage_I;
      prelude.stage[(i / xb * B + b) * stage_row + k] = ToF(x[r]);
    }
  }
  if (zero4) {
    for (long long i = first; i < n / 4; i += stride) {
      reinterpret_cast<float4*>(h)[i] = float4{};
      reinterpret_cast<float4*>(c)[i] = float4{};
    }
    for (long long i = n / 4 * 4 + first; i < n; i += stride) h[i] = c[i] = 0.f;
    return;
  }
  for (long long i = first; i < n; i += stride) {
    const long long k = i % per_layer;
    const int layer = first_layer + static_cast<int>(i / per_layer);
    const int j = k % H, b = (k / H) % B, d = k / (static_cast<long long>(H) * B);
    const long long src = StateRow(layout, LD, B, layer * D + d, b) * H + j;
    h[i] = h0 ? ToF(h0[src]) : 0.f;
    c[i] = c0 ? ToF(c0[src]) : 0.f;
    if (prelude.stage && h0 && layer == first_layer)
      prelude.stage[(static_cast<long long>(d) * B + b) * stage_row + prelude.stage_I + j] = h[i];
  }
}

// Every length T: no host copy, so a call without sequence_lens enqueues without waiting on the
// stream (a copy from pageable host memory may synchronise the host with it).
__global__ inline void FillLengths(int* lens, int B, int T) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < B; i += gridDim.x * blockDim.x) lens[i] = T;
}

// The call's lengths into `lens` on the device: sequence_lens (on the host) copied, else every
// length T filled in by a kernel, which a whole-call CUDA graph can replay (launch_graphs.h; it
// takes no call with lengths on the host).
inline void LengthsOnDevice(int* lens, const int32_t* host_lens, int B, int T, cudaStream_t stream) {
  if (host_lens) {
    Check(cudaMemcpyAsync(lens, host_lens, sizeof(int) * B, cudaMemcpyHostToDevice, stream), "copy lengths");
    return;
  }
  ClearPending();
  FillLengths<<<GridStrideBlocks(B), kGridStrideThreads, 0, stream>>>(lens, B, T);
  Check(cudaGetLastError(), "fill lengths");
}

// A sequence of length 0 ends in zeros, as stock onnxruntime gives. kUnits consecutive units per
// thread (H a multiple of kUnits, h and c aligned to them): one wide load of h and c each.
// `layers` consecutive layers from `first_layer` on, their states one block after the other in h
// and c.
template <typename T, int kUnits>
__global__ void FinalStates(const float* h, const float* c, const int* lens, T* y_h, T* y_c, int first_layer,
                            int layers, int D, int LD, int B, int H, int layout) {
  static_assert(kUnits == 1 || kUnits == 4, "a float or a float4 per thread");
  using Vec = std::conditional_t<kUnits == 4, float4, float>;
  const long long per_layer = static_cast<long long>(D) * B * H, n = per_layer * layers / kUnits;
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    const long long e = i * kUnits, k = e % per_layer;
    const int layer = first_layer + static_cast<int>(e / per_layer);
    const int j = k % H, b = (k / H) % B, d = k / (static_cast<long long>(H) * B);
    const long long dst = StateRow(layout, LD, B, layer * D + d, b) * H + j;
    const bool empty = lens[b] == 0;
    for (int k = 0; k < 2; ++k) {
      T* out = k == 0 ? y_h : y_c;
      if (!out) continue;
      const Vec v = reinterpret_cast<const Vec*>(k == 0 ? h : c)[i];
      const float* f = reinterpret_cast<const float*>(&v);
#pragma unroll
      for (int u = 0; u < kUnits; ++u) out[dst + u] = FromF<T>(empty ? 0.f : f[u]);
    }
  }
}

// The fp32 states of `layers` layers from `first` on, from initial_h / initial_c (either may be
// null: zeros), and the prelude, enqueued on `stream` as one launch.
template <typename T>
void LaunchInitStates(const T* h0, const T* c0, float* h, float* c, int first, int layers, int D, int LD, int B,
                      int H, int layout, const StatesPrelude& prelude, cudaStream_t stream) {
  const long long n = static_cast<long long>(D) * B * H * layers;
  const bool zero4 = !h0 && !c0 && Float4Aligned(h, c);
  const long long staged = prelude.stage ? static_cast<long long>(D) * B * prelude.stage_I : 0;
  const long long work =
      std::max({zero4 ? n / 4 + 1 : n, prelude.zero_n / 4, static_cast<long long>(prelude.B), staged});
  ClearPending();
  InitStates<T><<<GridStrideBlocks(work), kGridStrideThreads, 0, stream>>>(h0, c0, h, c, first, layers, D, LD, B, H,
                                                                           layout, zero4, prelude);
  Check(cudaGetLastError(), "init states");
}

// Y_h / Y_c of `layers` layers from `first` on (either may be null: not asked for), enqueued on
// `stream`.
template <typename T>
void LaunchFinalStates(const float* h, const float* c, const int* lens, T* y_h, T* y_c, int first, int layers, int D,
                       int LD, int B, int H, int layout, cudaStream_t stream) {
  if (!y_h && !y_c) return;
  const long long n = static_cast<long long>(D) * B * H * layers;
  ClearPending();
  if (H % 4 == 0 && Float4Aligned(h, c))
    FinalStates<T, 4><<<GridStrideBlocks(n / 4), kGridStrideThreads, 0, stream>>>(h, c, lens, y_h, y_c, first, layers,
                                                                                  D, LD, B, H, layout);
  else
    FinalStates<T, 1><<<GridStrideBlocks(n), kGridStrideThreads, 0, stream>>>(h, c, lens, y_h, y_c, first, layers, D,
                                                                              LD, B, H, layout);
  Check(cudaGetLastError(), "final states");
}

}  // namespace lstm_ort
