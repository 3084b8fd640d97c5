#include "cuda/gemm/input_projection.h"

#include <cuda_fp16.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "cuda/cuda_check.h"
#include "cuda/element_traits.h"
#include "cuda/gemm/split_tf32.cuh"
#include "cuda/grid_stride.h"
#include "cuda/heuristics.h"

namespace lstm_ort {
namespace {

void CheckCublas(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(std::string("FusedLSTM cuBLAS: ") + what + " failed with status " + std::to_string(s));
}

// Rows [r0, r0 + n) of gx (+)= x @ w, batched over the directions (column-major view:
// gx^T [G, rows] = w^T [G, I] * x^T [I, rows]); x holds those rows, w's directions lie
// w_stride elements apart.
template <typename T>
void Gemm(const ProjectionArgs<T>& a, cublasHandle_t cublas, const void* w, long long w_stride, const void* x,
          long long r0, long long n, cudaDataType_t type, cublasComputeType_t compute, float beta) {
  const float one = 1.f;
  CheckCublas(cublasGemmStridedBatchedEx(cublas, CUBLAS_OP_N, CUBLAS_OP_N, a.G, static_cast<int>(n), a.I, &one, w, type,
                                   a.G, w_stride, x, type, a.I, 0, &beta, a.gx + r0 * a.G, CUDA_R_32F, a.G,
                                   a.rows * a.G, a.D, compute, CUBLAS_GEMM_DEFAULT),
        "input projection GEMM");
}

}  // namespace

void SplitTf32Async(const float* x, float* hi, float* lo, long long n, cudaStream_t stream) {
  ClearPending();
  SplitTf32<<<GridStrideBlocks(n), kGridStrideThreads, 0, stream>>>(x, hi, lo, n);
  Check(cudaGetLastError(), "split for TF32");
}

// 3xTF32 is about twice as fast as SGEMM here and ~2e-6 from it end to end; small GEMMs stay
// SGEMM, where the splits would cost more than they save.
template <typename T>
void ProjectInput(const ProjectionArgs<T>& a, cublasHandle_t cublas, cudaStream_t stream) {
  if (a.rows == 0) return;
  if constexpr (kElementTypeOf<T> == ElementType::kFloat16) {
    Gemm(a, cublas, a.w, a.w_stride, a.x, 0, a.rows, CUDA_R_16F, CUBLAS_COMPUTE_32F, 0.f);
  } else if (a.math != ProjectionMath::kFp32) {
    // The mode's own rounding: cuBLAS converts the fp32 operands on the fly.
    const cublasComputeType_t compute = a.math == ProjectionMath::kTf32   ? CUBLAS_COMPUTE_32F_FAST_TF32
                                        : a.math == ProjectionMath::kFp16 ? CUBLAS_COMPUTE_32F_FAST_16F
                                                                          : CUBLAS_COMPUTE_32F_FAST_16BF;
    Gemm(a, cublas, a.w, a.w_stride, a.x, 0, a.rows, CUDA_R_32F, compute, 0.f);
  } else if (!ProjectsWithSplitTf32(kElementTypeOf<T>, a.math, a.rows, a.I, a.kept.Kept())) {
    Gemm(a, cublas, a.w, a.w_stride, a.x, 0, a.rows, CUDA_R_32F, CUBLAS_COMPUTE_32F, 0.f);
  } else {
    const long long w_rows = static_cast<long long>(a.I) * a.G;  // the halves' stride: input rows only
    const float *w_hi = a.kept.hi, *w_lo = a.kept.lo;
    if (!a.kept.Kept()) {
      for (int d = 0; d < a.D; ++d)
        SplitTf32Async(a.w + d * a.w_stride, a.w_hi + d * w_rows, a.w_lo + d * w_rows, w_rows, stream);
      w_hi = a.w_hi;
      w_lo = a.w_lo;
    }
    const auto tf32 = CUBLAS_COMPUTE_32F_FAST_TF32;
    for (long long r0 = 0; r0 < a.rows; r0 += kSplitChunkRows) {
      const long long n = std::min<long long>(kSplitChunkRows, a.rows - r0);
      SplitTf32Async(a.x + r0 * a.I, a.x_hi, a.x_lo, n * a.I, stream);
      Gemm(a, cublas, w_hi, w_rows, a.x_hi, r0, n, CUDA_R_32F, tf32, 0.f);
      Gemm(a, cublas, w_lo, w_rows, a.x_hi, r0, n, CUDA_R_32F, tf32, 1.f);
      Gemm(a, cublas, w_hi, w_rows, a.x_lo, r0, n, CUDA_R_32F, tf32, 1.f);
    }
  }
}

template void ProjectInput<float>(const ProjectionArgs<float>& a, cublasHandle_t cublas, cudaStream_t stream);
template void ProjectInput<__half>(const ProjectionArgs<__half>& a, cublasHandle_t cublas, cudaStream_t stream);

}  // namespace lstm_ort
