#include "cuda/gemm/cublas_handles.h"

#include <stdexcept>
#include <string>
#include <thread>
#include <utility>

#include "cuda/process_cache.h"

namespace lstm_ort {

namespace {

// The handle of `create` for this (device, host thread): made on first use and kept.
template <typename Create>
auto PerDeviceAndThread(Create create) {
  int device = 0;
  cudaGetDevice(&device);
  return ProcessCached(std::make_pair(device, std::this_thread::get_id()), create);
}

}  // namespace

cublasHandle_t CublasHandleFor(cudaStream_t stream) {
  cublasHandle_t handle = PerDeviceAndThread([] {
    cublasHandle_t h = nullptr;
    if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) throw std::runtime_error("FusedLSTM: cublasCreate failed");
    // FP32 stays FP32: TF32 only where a call asks for it (the 3xTF32 split of split_tf32.cuh).
    cublasSetMathMode(h, CUBLAS_DEFAULT_MATH);
    return h;
  });
  // Only this thread uses this handle, so pointing it at the caller's stream here is safe.
  PointCublasAt(handle, stream);
  return handle;
}

void PointCublasAt(cublasHandle_t handle, cudaStream_t stream) {
  if (cublasSetStream(handle, stream) != CUBLAS_STATUS_SUCCESS) throw std::runtime_error("FusedLSTM: cublasSetStream failed");
}

cublasLtHandle_t CublasLtHandle() {
  return PerDeviceAndThread([] {
    cublasLtHandle_t h = nullptr;
    if (cublasLtCreate(&h) != CUBLAS_STATUS_SUCCESS) throw std::runtime_error("FusedLSTM: cublasLtCreate failed");
    return h;
  });
}

}  // namespace lstm_ort
