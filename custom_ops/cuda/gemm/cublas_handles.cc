#include "cuda/gemm/cublas_handles.h"

#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>

namespace lstm_ort {

cublasHandle_t CublasHandleFor(cudaStream_t stream) {
  static std::mutex mutex;
  static std::map<std::pair<int, std::thread::id>, cublasHandle_t> handles;
  int device = 0;
  cudaGetDevice(&device);
  const auto key = std::make_pair(device, std::this_thread::get_id());
  cublasHandle_t handle = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = handles.find(key);
    if (it != handles.end()) {
      handle = it->second;
    } else {
      if (cublasCreate(&handle) != CUBLAS_STATUS_SUCCESS) throw std::runtime_error("FusedLSTM: cublasCreate failed");
      // FP32 stays FP32: TF32 only where a call asks for it (the 3xTF32 split of split_tf32.cuh).
      cublasSetMathMode(handle, CUBLAS_DEFAULT_MATH);
      handles.emplace(key, handle);
    }
  }
  // Only this thread uses this handle, so pointing it at the caller's stream here is safe.
  if (cublasSetStream(handle, stream) != CUBLAS_STATUS_SUCCESS) throw std::runtime_error("FusedLSTM: cublasSetStream failed");
  return handle;
}

}  // namespace lstm_ort
