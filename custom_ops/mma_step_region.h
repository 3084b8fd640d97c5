// Where the CUDA tensor-core step (cuda/mma_step/) takes a stack under `auto`, as plain values that
// two deciders read: the CUDA planner (cuda/heuristics.h, PrefersMmaStep) and the one precision
// decision (precision.h, AutoRunsAsTf32: `auto` runs tf32 on the stacks the step takes in its
// 16-bit operands, where that ran 1.5-2.2x faster than any fp32 path of ours). Header-only, so the
// CPU library, which has no CUDA planner, decides the same.
#pragma once

#include <cstdint>

#include "lstm_ort/contract.h"

namespace lstm_ort {

// A 16-bit copy of the weights (6 bytes per weight, made per call: v1's cuBLAS step and the
// tensor-core step) pays for itself from this many steps.
constexpr int64_t kMinStepsForHalfWeights = 8;

// The stacks the step takes, measured on the H100 (T=100, ms, tensor-core step vs the paths before
// it; docs/ops.md, "The tensor-core step"): unidirectional stacks (one wavefront: the layers above
// the first multiply their input in the step) with kMinHiddenForMmaStep <= H <= kMaxHiddenForMmaStep,
// B >= kMinBatchForMmaStep and B*H >= kMinCellsForMmaStep (or H at kMaxHiddenForMmaStep); in the
// 16-bit operand types from kMinLayersForMmaStep layers (tf32: L4 H512 B64 1.88 vs 2.93, L8 H512
// B64 2.59 vs 5.92, L3 H512 B128 2.35 vs 2.69, L4 H512 B256 3.39 vs 4.23, L4 H256 B512 2.43 vs 3.78;
// fp16 L4 H512 B64 1.93 vs 2.00; but L2 H512 B256 2.64 vs 2.17, L4 H256 B64 1.32 vs 1.18), and from
// kMinStepsForHalfWeights steps (their weight copies); in 3xTF32 from kMinLayersForMmaStepTf32x3
// layers and kMinBatchForMmaStepTf32x3 rows (L4 H512 B256 11.05 vs 12.16, L4 H256 B512 6.67 vs
// 8.46; but L4 H512 B64 3.79 vs 3.75, L3 H512 B128 6.63 vs 4.85, L2 H512 B256 11.5 vs 6.1). A step
// of one layer reads its weights and h from L2 at a rate cuBLAS's GEMM beats (L1 H512 B256 tf32
// 1.92 vs 1.09) and the persistent kernels keep on chip.
constexpr int64_t kMinLayersForMmaStep = 3;
constexpr int64_t kMinLayersForMmaStepTf32x3 = 4;
constexpr int64_t kMinBatchForMmaStep = 64;
constexpr int64_t kMinBatchForMmaStepTf32x3 = 256;
constexpr int64_t kMinHiddenForMmaStep = 256;
constexpr int64_t kMaxHiddenForMmaStep = 512;
constexpr int64_t kMinCellsForMmaStep = 64 * 1024;

// Whether the step takes a stack of sizes `d` (L, D, T, B, H) in 3xTF32 (`tf32x3`, no weight
// copies) or in a 16-bit operand type (copied weights), by the sizes alone; the planner adds the
// model's element type and the operand (PrefersMmaStep).
constexpr bool MmaStepTakesStack(const Dims& d, bool tf32x3) {
  return d.D == 1 && d.L >= (tf32x3 ? kMinLayersForMmaStepTf32x3 : kMinLayersForMmaStep) &&
         (tf32x3 || d.T >= kMinStepsForHalfWeights) && d.H >= kMinHiddenForMmaStep && d.H <= kMaxHiddenForMmaStep &&
         (d.B * d.H >= kMinCellsForMmaStep || d.H == kMaxHiddenForMmaStep) &&
         d.B >= (tf32x3 ? kMinBatchForMmaStepTf32x3 : kMinBatchForMmaStep);
}

}  // namespace lstm_ort
