// CUDA runtime errors as exceptions (onnxruntime turns them into an error status).
#pragma once

#include <cuda_runtime_api.h>

#include <stdexcept>
#include <string>

namespace lstm_ort {

inline void Check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string("FusedLSTM CUDA: ") + what + ": " + cudaGetErrorString(e));
}

// Launch errors are read right after each launch; an error some other library left pending on
// this thread (cuBLAS, or ORT's own kernels) is cleared first, so it is not reported as ours.
inline void ClearPending() { (void)cudaGetLastError(); }

}  // namespace lstm_ort
