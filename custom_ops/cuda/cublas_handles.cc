#include "cuda/cublas_handles.h"

#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>

namespace lstm_ort {

cublasHandle_t CublasHandleFor(cudaStream_t stream) {
  static std::mutex mutex;
  static std::map<std::tuple<int, cudaStream_t, std::thread::id>, cublasHandle_t> handles;
  int device = 0;
  cudaGetDevice(&device);
  const auto key = std::make_tuple(device, stream, std::this_thread::get_id());
  std::lock_guard<std::mutex> lock(mutex);
  auto it = handles.find(key);
  if (it != handles.end()) return it->second;
  cublasHandle_t handle = nullptr;
  if (cublasCreate(&handle) != CUBLAS_STATUS_SUCCESS) throw std::runtime_error("FusedLSTM: cublasCreate failed");
  cublasSetStream(handle, stream);
  // FP32 stays FP32: no TF32 tensor-op math unless a later, opt-in mode asks for it.
  cublasSetMathMode(handle, CUBLAS_DEFAULT_MATH);
  handles.emplace(key, handle);
  return handle;
}

}  // namespace lstm_ort
