// The recurrent product of every step of one layer on v1's cuBLAS step, gates[d] = h[d] . R[d]
// for the directions as one strided batch, through cublasLt with descriptors made once per layer
// and the algorithm chosen once per shape and process. A step is one cublasLtMatmul: cuBLAS's
// legacy cublasGemmStridedBatchedEx spent ~10 us of host time per call choosing again, so steps
// whose GPU work is shorter than that waited on the host (H100, tf32 on 16-bit weights, H1024 B64:
// 7.4 us of kernels per step, ~18 us per step in all; 2.05 -> 1.27 ms at T=100 through cublasLt;
// L4 H1024 B64 8.5 -> 5.0, L4 H512 B256 6.6 -> 5.1).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

namespace lstm_ort {

// Column-major view: C [G, B] = A [G, K] . B [K, B] per batch entry, with these strides between
// the entries (elements).
struct StepGemmShape {
  int G, B, K, batch;
  cudaDataType_t operand;  // A's and B's type; C is fp32
  cublasComputeType_t compute;
  long long a_stride, b_stride, c_stride;
};

class StepGemm {
 public:
  explicit StepGemm(const StepGemmShape& shape);
  ~StepGemm();
  StepGemm(const StepGemm&) = delete;
  StepGemm& operator=(const StepGemm&) = delete;

  // Whether cublasLt has an algorithm for the shape without workspace; if not, the caller uses
  // cuBLAS's legacy API.
  bool Ready() const { return ready_; }
  void Run(const void* a, const void* b, float* c, cudaStream_t stream) const;  // throws if cublasLt fails

 private:
  cublasLtHandle_t handle_ = nullptr;
  cublasLtMatmulDesc_t op_ = nullptr;
  cublasLtMatrixLayout_t a_ = nullptr, b_ = nullptr, c_ = nullptr;
  cublasLtMatmulAlgo_t algo_{};
  bool ready_ = false;
};

}  // namespace lstm_ort
