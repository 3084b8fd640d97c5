// One cuBLAS (and cublasLt) handle per (device, host thread), created on first use and kept, and pointed at
// the caller's stream on each call. Handles are costly to create and not safe to share between
// threads; keying them by stream as well would leak one per session (each has its own stream).
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

namespace lstm_ort {

cublasHandle_t CublasHandleFor(cudaStream_t stream);

// Points `handle` (this thread's) at `stream`; throws if cuBLAS refuses.
void PointCublasAt(cublasHandle_t handle, cudaStream_t stream);

// The same for cublasLt, whose calls take the stream themselves.
cublasLtHandle_t CublasLtHandle();

}  // namespace lstm_ort
