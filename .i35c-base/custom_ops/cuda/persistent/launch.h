// Launching the persistent kernel (kernel.cuh), for the orchestration (stack_run.cu) and the
// occupancy queries (device_limits.cc), which see neither the kernel nor its template.
#pragma once

#include <cuda_runtime_api.h>

#include "cuda/persistent/mma_operand.h"

namespace lstm_ort {

template <typename T>
struct PersistentArgs;

// The kernel variant with register tiles of R rows (4 or 8), as the runtime API takes it.
template <typename T>
const void* PersistentKernelFor(int R);

// One cooperative launch of a.plan's grid; the launch's own error, unchecked, so the caller can
// fall back where the device refuses a cooperative grid.
template <typename T>
cudaError_t LaunchPersistent(const PersistentArgs<T>& a, cudaStream_t stream);

// The tensor-core kernel (mma_kernel.cuh) for operand type `op`.
template <typename T>
const void* PersistentMmaKernelFor(MmaOperand op);

// As LaunchPersistent, for a plan with `mma` set.
template <typename T>
cudaError_t LaunchPersistentMma(const PersistentArgs<T>& a, MmaOperand op, cudaStream_t stream);

// After a launch that succeeded: with -DLSTM_ORT_PHASE_CLOCKS, waits for it and prints where its
// `intervals` intervals spent their time; otherwise nothing.
void ReportPhaseClocks(cudaStream_t stream, int intervals);

}  // namespace lstm_ort
