// Launching one recurrent step (v1) with either per-step kernel, shapes from heuristics.h. The
// orchestration (stack_run.cu) sees the launches, not the kernels.
#pragma once

#include <cuda_runtime_api.h>

namespace lstm_ort {

template <typename T>
struct StepArgs;

template <typename T>
void LaunchTiledStep(const StepArgs<T>& a, int D, int device, cudaStream_t stream);

template <typename T>
void LaunchSplitKStep(const StepArgs<T>& a, int D, int sm_count, cudaStream_t stream);

}  // namespace lstm_ort
