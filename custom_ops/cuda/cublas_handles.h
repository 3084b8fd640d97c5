// One cuBLAS handle per (device, stream, host thread), created on first use and kept:
// handles are costly to create and are not safe to share between threads.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

namespace lstm_ort {

cublasHandle_t CublasHandleFor(cudaStream_t stream);

}  // namespace lstm_ort
