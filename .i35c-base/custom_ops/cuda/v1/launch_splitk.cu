#include <cuda_fp16.h>

#include "cuda/heuristics.h"
#include "cuda/v1/launch_step.h"
#include "cuda/v1/step_splitk.cuh"

namespace lstm_ort {

template <typename T>
void LaunchSplitKStep(const StepArgs<T>& a, int D, int sm_count, cudaStream_t stream) {
  const int rows = SplitKRowsPerBlock(a.B, a.H, D, sm_count);
  dim3 grid(SplitKUnitBlocks(a.H), (a.B + rows - 1) / rows, D);
  const int threads = kSplitKWarps * 32;
  switch (SplitKValuesPerLane(a.H)) {
    case 1: StepSplitK<T, 1><<<grid, threads, 0, stream>>>(a, rows); break;
    case 2: StepSplitK<T, 2><<<grid, threads, 0, stream>>>(a, rows); break;
    case 4: StepSplitK<T, 4><<<grid, threads, 0, stream>>>(a, rows); break;
    case 8: StepSplitK<T, 8><<<grid, threads, 0, stream>>>(a, rows); break;
    case 16: StepSplitK<T, 16><<<grid, threads, 0, stream>>>(a, rows); break;
    default: StepSplitK<T, 32><<<grid, threads, 0, stream>>>(a, rows); break;
  }
}

template void LaunchSplitKStep<float>(const StepArgs<float>& a, int D, int sm_count, cudaStream_t stream);
template void LaunchSplitKStep<__half>(const StepArgs<__half>& a, int D, int sm_count, cudaStream_t stream);

}  // namespace lstm_ort
