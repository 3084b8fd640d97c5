// FusedLSTM on CUDA, as the op (cuda_ops.cc), the entry points and tools/kernel_bench.cu call it:
// free of ORT types. T is the storage type, float or __half (instantiated in stack_run.cu); the
// math is fp32 for both.
#pragma once

#include <string>

#include "cuda/call_plan.h"
#include "cuda/gemm/kept_split.h"
#include "cuda/launch_graphs.h"
#include "lstm_ort/contract.h"

namespace lstm_ort {

struct CallIO;

// What PlanCall knows of `device` for storage type T: its limits (measured once per process and
// device, when a backend first asks) and `name` (the device's, for tuned entries; may be empty).
template <typename T>
CallDevice CallDeviceOf(int device, std::string name);

// What RunLstmCuda<T> does for these sizes on the current device, in words (for reports): the
// call plan's description, with the environment's overrides.
template <typename T>
std::string DescribeStrategy(const Dims& d, Strategy strategy, Precision precision);

// Enqueues the whole stack on `stream` (a cudaStream_t) as `plan` (PlanCall's for this call) says;
// its cuBLAS calls go through `lent_cublas` (onnxruntime's handle of the stream; null: the
// thread's own, gemm/cublas_handles.h); `scratch` holds plan.scratch_bytes of device memory;
// `kept`: the halves plan.kept asked for, as they came; `graphs`: the node's cached step graphs
// (launch_graphs.h), or null to launch every step. Launch-time fallbacks are recorded in
// plan.fallbacks (an error in strict mode).
template <typename T>
void RunLstmCuda(const Attributes& attrs, const CallIO& io, void* stream, void* lent_cublas, void* scratch,
                 CallPlan& plan, KeptSplit kept = {}, LaunchGraphs* graphs = nullptr);

// What a whole call's launches capture beyond the node's attributes and what its plan makes of
// these: the key its CUDA graph is kept under (launch_graphs.h). The stream and the host thread
// are part of it: the graph replays on the stream, and its captured cuBLAS calls ran through the
// thread's own handle and workspace (CublasLease). So are the kept forms of W it reads.
LaunchKey CallLaunchKey(const CallIO& io, int device, void* stream, const void* scratch, const KeptSplit& kept);

}  // namespace lstm_ort
