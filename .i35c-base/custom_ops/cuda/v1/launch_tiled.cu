#include <cuda_fp16.h>

#include <atomic>
#include <cstdint>

#include "cuda/cuda_check.h"
#include "cuda/element_traits.h"
#include "cuda/heuristics.h"
#include "cuda/v1/launch_step.h"
#include "cuda/v1/step_tiled.cuh"

namespace lstm_ort {
namespace {

// The limit belongs to (kernel, device): raised once per device.
template <auto kernel>
void RaiseSmemLimit(int bytes, int device) {
  static std::atomic<uint64_t> raised{0};
  const uint64_t bit = uint64_t{1} << (device & 63);
  if (raised.load() & bit) return;
  Check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes),
        "raise the shared memory limit");
  raised.fetch_or(bit);
}

template <typename T, int RG>
void LaunchTiledRG(const StepArgs<T>& a, int D, int device, cudaStream_t stream) {
  using S = TiledShape<RG>;
  const int kc = TiledChunkRows(a.H, RG, kElementTypeOf<T>);
  RaiseSmemLimit<StepTiled<T, RG>>(static_cast<int>(kTiledSmemBudget), device);
  dim3 grid((a.H + kTiledUnits - 1) / kTiledUnits, (a.B + S::RB - 1) / S::RB, D);
  StepTiled<T, RG><<<grid, kTiledThreads, TiledSmemBytes(kc, a.H, RG, sizeof(T)), stream>>>(a, kc);
}

}  // namespace

template <typename T>
void LaunchTiledStep(const StepArgs<T>& a, int D, int device, cudaStream_t stream) {
  if (TiledRowGroups(a.B) == 8) LaunchTiledRG<T, 8>(a, D, device, stream);
  else LaunchTiledRG<T, 16>(a, D, device, stream);
}

template void LaunchTiledStep<float>(const StepArgs<float>& a, int D, int device, cudaStream_t stream);
template void LaunchTiledStep<__half>(const StepArgs<__half>& a, int D, int device, cudaStream_t stream);

}  // namespace lstm_ort
