// Launching one recurrent step (v1) with any per-step kernel, shapes from heuristics.h. The
// orchestration (stack_run.cu) sees the launches, not the kernels.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "cuda/heuristics.h"

namespace lstm_ort {

template <typename T>
struct StepArgs;

template <typename T>
void LaunchTiledStep(const StepArgs<T>& a, int D, int device, cudaStream_t stream);

template <typename T>
void LaunchSplitKStep(const StepArgs<T>& a, int D, int sm_count, cudaStream_t stream);

// Scratch of v1's cuBLAS step: gates, [D][B][4H] floats (StreamSplitsAtMost(H) times that where
// StepStreamsWeights); stream_done, D * StreamColumnTiles(H) counters, zero before a layer's steps.
struct GemmStepScratch {
  float* gates;
  unsigned* stream_done;
};

// h_is_zero: h_in is all zeros (the first step without initial_h), so the product is skipped.
// fp32 storage only (the GEMM reads h as fp32).
void LaunchGemmStep(const StepArgs<float>& a, int D, const GemmStepScratch& scratch, ProjectionMath math,
                    bool h_is_zero, int sm_count, cublasHandle_t cublas, cudaStream_t stream);

}  // namespace lstm_ort
