// FusedLSTM on CUDA, as the op (cuda_ops.cc), the entry points and tools/kernel_bench.cu call it:
// free of ORT types. T is the storage type, float or __half (instantiated in stack_run.cu); the
// math is fp32 for both.
#pragma once

#include <cstddef>
#include <string>

#include "cuda/gemm/kept_split.h"
#include "cuda/v1/step_graphs.h"
#include "lstm_ort/contract.h"

namespace lstm_ort {

struct CallIO;

// `precision`: the node's mode, which decides whether v1's steps need 16-bit copies;
// `weights_kept`: the call gets W's 3xTF32 halves (KeptSplit) and needs no room to split them.
template <typename T>
size_t CudaScratchBytes(const Dims& d, Precision precision, bool weights_kept);

// What RunLstmCuda<T> does for these sizes on the current device, in words (for reports).
template <typename T>
std::string DescribeStrategy(const Dims& d, Strategy strategy, Precision precision);

// Enqueues the whole stack on `stream` (a cudaStream_t); `scratch` holds CudaScratchBytes<T>(...,
// kept.Kept()) bytes of device memory; `graphs`: the node's cached step graphs (v1/step_graphs.h),
// or null to launch every step.
template <typename T>
void RunLstmCuda(const Attributes& attrs, const CallIO& io, void* stream, void* scratch, Strategy strategy,
                 KeptSplit kept, StepGraphs* graphs = nullptr);

}  // namespace lstm_ort
