// Where the CUDA tensor-core step (cuda/mma_step/) takes a stack under `auto`, as plain values that
// two deciders read: the CUDA planner (cuda/heuristics.h, PrefersMmaStep and PrefersResidentMmaStep)
// and the one precision decision (precision.h, AutoRunsAsTf32: `auto` runs tf32 on the stacks the
// step takes in its 16-bit operands, where that ran 1.3-2.2x faster than any fp32 path of ours).
// Header-only, so the CPU library, which has no CUDA planner, decides the same.
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

// The stacks the step takes besides, only where it runs resident (MmaStepPlan::resident: each
// block keeps its weight columns in shared memory, one cooperative launch). Whether it does depends
// on the device (its SMs and shared memory), so the planner takes these only where every range of
// the stack plans resident; streamed, the step loses here. 16-bit operands on an fp32 model (what
// tf32 and fp16 run), unidirectional, from kMinStepsForHalfWeights steps, kMinHiddenForMmaStep <= H
// <= kMaxHiddenForMmaStep, from kMinLayersForResidentMmaStep layers and kMinBatchForResidentMmaStep
// rows (the smallest batch measured). H100, T=100, tools/mma_step_bench.cu time-one, ms, the
// backends before the step in the same precision vs the step planned resident:
// - tf32: from kMinLayersForMmaStep layers where B*H >= kMinCellsForResidentMmaStep (L4 H256 B64
//   1.24 vs 0.99, L3 H256 B64 1.10 vs 0.94, L4 H512 B32 2.09 vs 1.24, L3 H384 B64 1.86 vs 1.36;
//   but L4 H256 B32 0.70 vs 0.97); in two layers from kMinBatchForResidentMmaStepOfTwoLayers rows
//   where B*H >= kMinCellsForResidentMmaStepOfTwoLayers (L2 H512 B64 1.54 vs 1.24, L2 H384 B64
//   1.30 vs 1.12, L2 H256 B128 1.08 vs 0.96; but L2 H256 B64 0.69 vs 0.96, L2 H512 B32 1.08 vs
//   1.17; one layer: L1 H512 B64 0.77 vs 1.02). Through onnxruntime auto ran these in fp32 before
//   (tools/bench.py: L2 H512 B64 1.79, L4 H256 B64 1.28, L4 H384 B64 2.93).
// - fp16 (whose backends before are faster than tf32's): from kMinLayersForMmaStep layers where H
//   >= kMinHiddenForResidentMmaStepFp16 (L3 H384 B64 1.94 vs 1.38, L4 H384 B64 1.93 vs 1.40, L4
//   H512 B32 1.44 vs 1.24; but L3 H256 B64 0.82 vs 0.95, L4 H256 B64 0.84 vs 0.97, L4 H256 B128
//   1.07 vs 1.17); in two layers at H kMaxHiddenForMmaStep from kMinBatchForResidentMmaStepOfTwoLayers
//   rows (L2 H512 B64 1.47 vs 1.21, L2 H512 B128 1.97 vs 1.57; but L2 H512 B32 0.91 vs 1.18, L2
//   H384 B64 1.08 vs 1.07).
constexpr int64_t kMinLayersForResidentMmaStep = 2;
constexpr int64_t kMinBatchForResidentMmaStep = 32;
constexpr int64_t kMinCellsForResidentMmaStep = 16 * 1024;
constexpr int64_t kMinBatchForResidentMmaStepOfTwoLayers = 64;
constexpr int64_t kMinCellsForResidentMmaStepOfTwoLayers = 24 * 1024;
constexpr int64_t kMinHiddenForResidentMmaStepFp16 = 384;

// Whether the step, resident, takes a stack of sizes `d` in its 16-bit operands for what the call
// runs: fp16 (`fp16_runs`) or tf32, by the sizes alone; the planner adds the model's element type,
// what the call runs and whether the device holds it resident (PrefersResidentMmaStep).
constexpr bool ResidentMmaStepTakesStack(const Dims& d, bool fp16_runs) {
  if (d.D != 1 || d.L < kMinLayersForResidentMmaStep || d.T < kMinStepsForHalfWeights ||
      d.H < kMinHiddenForMmaStep || d.H > kMaxHiddenForMmaStep || d.B < kMinBatchForResidentMmaStep)
    return false;
  const bool two_layers = d.L < kMinLayersForMmaStep;
  if (fp16_runs)
    return two_layers ? d.H == kMaxHiddenForMmaStep && d.B >= kMinBatchForResidentMmaStepOfTwoLayers
                      : d.H >= kMinHiddenForResidentMmaStepFp16;
  if (two_layers)
    return d.B >= kMinBatchForResidentMmaStepOfTwoLayers && d.B * d.H >= kMinCellsForResidentMmaStepOfTwoLayers;
  return d.B * d.H >= kMinCellsForResidentMmaStep;
}

}  // namespace lstm_ort
