// Developer instrumentation of the persistent kernel (build with -DLSTM_ORT_PHASE_CLOCKS, e.g.
// tools/kernel_bench.cu): nanoseconds spent per phase of an interval by thread 0 of the first and
// the last block, printed after each launch. Without the flag PHASE(k) compiles to nothing.
// Include from one translation unit only: g_phase_ns is defined here.
#pragma once

#include <cuda_runtime.h>

#include <cstdio>

namespace lstm_ort {

#ifdef LSTM_ORT_PHASE_CLOCKS
__device__ unsigned long long g_phase_ns[2][6];
__device__ __forceinline__ unsigned long long NowNs() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
  return t;
}
#define PHASE(k)                                                                              \
  do {                                                                                        \
    if (threadIdx.x == 0 && (blockIdx.x == 0 || blockIdx.x == gridDim.x - 1)) {               \
      const unsigned long long now = NowNs();                                                 \
      atomicAdd(&g_phase_ns[blockIdx.x == 0 ? 0 : 1][k], now - phase_t);                      \
      phase_t = now;                                                                          \
    }                                                                                         \
  } while (0)

// Waits for the launch on `stream`, prints the phases per interval and zeroes the clocks.
inline void PrintPhaseClocks(cudaStream_t stream, int intervals) {
  unsigned long long ns[2][6];
  cudaMemcpyFromSymbolAsync(ns, g_phase_ns, sizeof(ns), 0, cudaMemcpyDeviceToHost, stream);
  cudaStreamSynchronize(stream);
  const unsigned long long zero[2][6] = {};
  cudaMemcpyToSymbolAsync(g_phase_ns, zero, sizeof(zero), 0, cudaMemcpyHostToDevice, stream);
  const double n = intervals;
  for (int b = 0; b < 2; ++b)
    std::fprintf(stderr, "phase ns/interval block %s: prefetch %.0f kloop %.0f reduce %.0f cell %.0f next %.0f barrier %.0f\n",
                 b ? "last" : "first", ns[b][0] / n, ns[b][1] / n, ns[b][2] / n, ns[b][3] / n,
                 ns[b][4] / n, ns[b][5] / n);
}
#else
#define PHASE(k) \
  do {           \
  } while (0)

inline void PrintPhaseClocks(cudaStream_t, int) {}
#endif

}  // namespace lstm_ort
