// Launching the tensor-core step (kernel.cuh) for the orchestration (stack_run.cu), which sees
// neither the kernels nor their templates, and its occupancy for the planner (plan.h).
#pragma once

#include <cuda_runtime_api.h>

#include "cuda/device_limits.h"
#include "cuda/mma_step/plan.h"

namespace lstm_ort {

template <typename T>
struct MmaStepArgs;

// What a range reads besides the call's buffers, made before its first launch by PrepareMmaStep.
struct MmaStepInputs {
  const void* w[kMaxMmaStepLayers][2];  // each (layer, direction)'s weights as stored (T): [in_rows + H][4H]
  void* copies = nullptr;               // room for their operand-type copies (plan.copies_weights)
  const float* h0 = nullptr;            // fp32 initial h [layers][D][B][H]; null: zero (a.skip_h0)
  int* exps = nullptr;                  // kMmaStepExps ints, then kMmaStepExps unsigned (scaled fp16 only)
  unsigned* barrier = nullptr;          // the resident kernel's grid barrier (plan.resident)
};

// Sets a.w (the copies, or the weights as stored), a.exps and the first step's h: the copies and
// initial h as the operand type (fp16 of fp32 storage scaled by powers of two into a.exps), in up
// to four launches on `stream`. a.hop, a.B, a.H, a.layers, a.D and a.in_rows are set before.
template <typename T>
void PrepareMmaStep(MmaStepArgs<T>& a, const MmaStepPlan& plan, const MmaStepInputs& in, cudaStream_t stream);

// The range's launches: one per interval (max_len + layers - 1 of them), or where the plan is
// resident one cooperative launch for them all.
template <typename T>
void EnqueueMmaStep(const MmaStepArgs<T>& a, const MmaStepPlan& plan, cudaStream_t stream);

// The mma step's limits on `device` for element type T: DeviceLimits::blocks_per_sm(smem, key)
// answers for the kernel of MmaStepKernelKey `key`.
template <typename T>
const DeviceLimits& MmaStepLimits(int device);

}  // namespace lstm_ort
