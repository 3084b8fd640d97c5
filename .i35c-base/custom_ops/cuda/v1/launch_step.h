// Launching one recurrent step (v1) with any per-step kernel, shapes from heuristics.h. The
// orchestration (stack_run.cu) sees the launches, not the kernels.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <memory>

#include "cuda/gemm/step_gemm.h"
#include "cuda/heuristics.h"

namespace lstm_ort {

template <typename T>
struct StepArgs;

template <typename T>
void LaunchTiledStep(const StepArgs<T>& a, int D, int device, cudaStream_t stream);

template <typename T>
void LaunchSplitKStep(const StepArgs<T>& a, int D, int sm_count, cudaStream_t stream);

// Scratch of v1's cuBLAS step (scratch_layout.h): gates, [D][B][4H] floats (StreamSplitsAtMost(H)
// times that where StepStreamsWeights); stream_done, D * StreamColumnTiles(H) counters; in the
// reduced modes the 16-bit copies of R and h and the weights' maxima.
struct GemmStepScratch {
  float* gates;
  unsigned* stream_done;
  void* wh_half;
  void* h_half;
  unsigned* wh_amax;
};

// How a layer's steps run on v1's cuBLAS step (fp32 storage only).
struct GemmStepPlan {
  ProjectionMath math = ProjectionMath::kFp32;
  // The weights the steps read for `math` (StepWeightsFor), except that cuBLAS's 16-bit GEMM reads
  // h as fp16 too, which holds only for activations that keep |h| <= 1.
  StepWeights weights = StepWeights::kFp32;
  bool streams = false;            // the weight-streaming step (StreamsStepWith)
  std::unique_ptr<StepGemm> gemm;  // else the product through cublasLt, if it has an algorithm
};

// Before a layer's first step: zeroes the split counters and makes the 16-bit copy of its
// weights that the plan's weights ask for (the first step's cell writes h's). `half_weights`:
// false keeps the fp32 weights (the developer knob LSTM_ORT_HALF_STEP_WEIGHTS=0).
GemmStepPlan PrepareGemmSteps(const StepArgs<float>& a, const Dims& d, ProjectionMath math, bool half_weights,
                              const GemmStepScratch& scratch, cudaStream_t stream);

// h_is_zero: h_in is all zeros (the first step without initial_h), so the product is skipped.
void LaunchGemmStep(const StepArgs<float>& a, const Dims& d, const GemmStepScratch& scratch, const GemmStepPlan& plan,
                    bool h_is_zero, int sm_count, cublasHandle_t cublas, cudaStream_t stream);

}  // namespace lstm_ort
