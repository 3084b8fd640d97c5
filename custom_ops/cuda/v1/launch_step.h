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
  // A one-step call's rows [x h0] ([D][B][I + H]; StatesPrelude::stage), or null: the step
  // multiplies them with [W; R] in one GEMM (StepArgs::x, wx and I say where W starts).
  const float* staged = nullptr;
};

// How a layer's steps run on v1's cuBLAS step (fp32 storage only).
struct GemmStepPlan {
  ProjectionMath math = ProjectionMath::kFp32;
  StepWeights weights = StepWeights::kFp32;  // the call plan's step_weights
  bool streams = false;                      // the weight-streaming step: the plan's step_streams
  std::unique_ptr<StepGemm> gemm;  // else the product through cublasLt, if it has an algorithm
};

// Before a layer's first step: zeroes the split counters and makes the 16-bit copy of its
// weights that `weights` asks for (the first step's cell writes h's); math, weights and streams
// are the call plan's (call_plan.h).
GemmStepPlan PrepareGemmSteps(const StepArgs<float>& a, const Dims& d, ProjectionMath math, StepWeights weights,
                              bool streams, const GemmStepScratch& scratch, cudaStream_t stream);

// h_is_zero: h_in is all zeros (the first step without initial_h), so the product is skipped.
void LaunchGemmStep(const StepArgs<float>& a, const Dims& d, const GemmStepScratch& scratch, const GemmStepPlan& plan,
                    bool h_is_zero, int sm_count, cublasHandle_t cublas, cudaStream_t stream);

}  // namespace lstm_ort
