#include "cuda/gemm/cublas_handles.h"

#include <atomic>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>

#include "cuda/process_cache.h"

namespace lstm_ort {

namespace {

std::atomic<uint64_t> g_own_handles{0};

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
    ++g_own_handles;
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

CublasLease::CublasLease(cublasHandle_t lent, cudaStream_t stream) : stream_(stream), lent_(lent) {
  if (!lent_) return;
  if (cublasGetStream(lent_, &lent_on_) != CUBLAS_STATUS_SUCCESS ||
      cublasGetMathMode(lent_, &lent_math_) != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error("FusedLSTM: onnxruntime's cuBLAS handle could not be read");
  // FP32 stays FP32: TF32 only where a call asks for it (its GEMMs name their compute types).
  if (lent_math_ != CUBLAS_DEFAULT_MATH) cublasSetMathMode(lent_, CUBLAS_DEFAULT_MATH);
}

CublasLease::~CublasLease() {
  // No throw from here: a failure would show at the next cuBLAS call on the handle.
  if (lent_ && lent_math_ != CUBLAS_DEFAULT_MATH) cublasSetMathMode(lent_, lent_math_);
}

cublasHandle_t CublasLease::On(cudaStream_t on) {
  if (lent_ && on == lent_on_) return lent_;
  if (!own_ || on != own_on_) {
    own_ = CublasHandleFor(on);
    own_on_ = on;
  }
  return own_;
}

uint64_t OwnCublasHandlesMade() { return g_own_handles.load(); }

cublasLtHandle_t CublasLtHandle() {
  return PerDeviceAndThread([] {
    cublasLtHandle_t h = nullptr;
    if (cublasLtCreate(&h) != CUBLAS_STATUS_SUCCESS) throw std::runtime_error("FusedLSTM: cublasLtCreate failed");
    return h;
  });
}

}  // namespace lstm_ort
