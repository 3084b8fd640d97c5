#include "cuda/gemm/input_projection.h"

#include <cuda_bf16.h>
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

// W's input rows for each direction as a GEMM reads them: as stored, [I][G] per direction
// (`stride` elements apart), or K-major [G][I] (the kept halves).
struct WeightOperand {
  const void* w;
  long long stride;
  bool k_major;
};

// Rows [r0, r0 + n) of gx (+)= x @ w for every direction (column-major view:
// gx^T [G, rows] = w^T [G, I] * x^T [I, rows]); x holds those rows.
template <typename T>
void Gemm(const ProjectionArgs<T>& a, cublasHandle_t cublas, const WeightOperand& w, const void* x, long long r0,
          long long n, cudaDataType_t type, cublasComputeType_t compute, float beta) {
  const float one = 1.f;
  float* gx = a.gx + r0 * a.G;
  if (!w.k_major) {
    CheckCublas(cublasGemmStridedBatchedEx(cublas, CUBLAS_OP_N, CUBLAS_OP_N, a.G, static_cast<int>(n), a.I, &one,
                                           w.w, type, a.G, w.stride, x, type, a.I, 0, &beta, gx, CUDA_R_32F, a.G,
                                           a.rows * a.G, a.D, compute, CUBLAS_GEMM_DEFAULT),
                "input projection GEMM");
    return;
  }
  // One GEMM per direction: cuBLAS's strided batch of transposed operands chose slower kernels
  // than two single GEMMs (H100, 512 x 2048 x 8192 x 2: 186 against 2 x 52 us).
  for (int d = 0; d < a.D; ++d)
    CheckCublas(cublasGemmEx(cublas, CUBLAS_OP_T, CUBLAS_OP_N, a.G, static_cast<int>(n), a.I, &one,
                             static_cast<const float*>(w.w) + d * w.stride, type, a.I, x, type, a.I, &beta,
                             gx + d * a.rows * a.G, CUDA_R_32F, a.G, compute, CUBLAS_GEMM_DEFAULT),
                "input projection GEMM");
}

__global__ void ToBf16(const float* __restrict__ in, __nv_bfloat16* __restrict__ out, long long n) {
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<long long>(gridDim.x) * blockDim.x)
    out[i] = __float2bfloat16_rn(in[i]);
}

}  // namespace

void ToBf16Async(const float* in, void* out, long long n, cudaStream_t stream) {
  ClearPending();
  ToBf16<<<GridStrideBlocks(n), kGridStrideThreads, 0, stream>>>(in, static_cast<__nv_bfloat16*>(out), n);
  Check(cudaGetLastError(), "bfloat16 copy for the input projection");
}

void SplitTf32Async(const float* x, float* hi, float* lo, long long n, cudaStream_t stream) {
  ClearPending();
  SplitTf32<<<GridStrideBlocks(n), kGridStrideThreads, 0, stream>>>(x, hi, lo, n);
  Check(cudaGetLastError(), "split for TF32");
}

void SplitTf32TransposedAsync(const float* w, float* hi, float* lo, int64_t rows, int64_t cols, cudaStream_t stream) {
  ClearPending();
  const dim3 grid(static_cast<unsigned>((cols + kTransposeTile - 1) / kTransposeTile),
                  static_cast<unsigned>((rows + kTransposeTile - 1) / kTransposeTile));
  SplitTf32Transposed<<<grid, dim3(kTransposeTile, kTransposeRowsPerPass), 0, stream>>>(
      w, hi, lo, static_cast<int>(rows), static_cast<int>(cols));
  Check(cudaGetLastError(), "transposed split for TF32");
}

// 3xTF32 is about twice as fast as SGEMM here and ~2e-6 from it end to end; small GEMMs stay
// SGEMM, where the splits would cost more than they save.
template <typename T>
void ProjectInput(const ProjectionArgs<T>& a, cublasHandle_t cublas, cudaStream_t stream) {
  if (a.rows == 0) return;
  const WeightOperand stored{a.w, a.w_stride, false};
  const long long w_rows = static_cast<long long>(a.I) * a.G;  // a kept or split half's stride
  if constexpr (kElementTypeOf<T> == ElementType::kFloat16) {
    Gemm(a, cublas, stored, a.x, 0, a.rows, CUDA_R_16F, CUBLAS_COMPUTE_32F, 0.f);
  } else if (a.math == ProjectionMath::kTf32 && a.kept.hi &&
             ProjectsFromKeptTf32(kElementTypeOf<T>, a.math, a.rows, a.I)) {
    Gemm(a, cublas, {a.kept.hi, w_rows, true}, a.x, 0, a.rows, CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_TF32, 0.f);
  } else if (a.x_bf16 && ProjectsWithBf16Copies(kElementTypeOf<T>, a.math, a.rows, a.I, a.G, a.kept.bf16 != nullptr)) {
    const WeightOperand copied{a.kept.bf16 ? static_cast<const void*>(a.kept.bf16) : a.w_bf16, w_rows, false};
    if (!a.kept.bf16)
      for (int d = 0; d < a.D; ++d)
        ToBf16Async(a.w + d * a.w_stride, static_cast<__nv_bfloat16*>(a.w_bf16) + d * w_rows, w_rows, stream);
    for (long long r0 = 0; r0 < a.rows; r0 += kSplitChunkRows) {
      const long long n = std::min<long long>(kSplitChunkRows, a.rows - r0);
      ToBf16Async(a.x + r0 * a.I, a.x_bf16, n * a.I, stream);
      Gemm(a, cublas, copied, a.x_bf16, r0, n, CUDA_R_16BF, CUBLAS_COMPUTE_32F, 0.f);
    }
  } else if (a.math != ProjectionMath::kFp32) {
    // The mode's own rounding: cuBLAS converts the fp32 operands on the fly.
    const cublasComputeType_t compute = a.math == ProjectionMath::kTf32   ? CUBLAS_COMPUTE_32F_FAST_TF32
                                        : a.math == ProjectionMath::kFp16 ? CUBLAS_COMPUTE_32F_FAST_16F
                                                                          : CUBLAS_COMPUTE_32F_FAST_16BF;
    Gemm(a, cublas, stored, a.x, 0, a.rows, CUDA_R_32F, compute, 0.f);
  } else if (!ProjectsWithSplitTf32(kElementTypeOf<T>, a.math, a.rows, a.I, a.kept.Kept())) {
    Gemm(a, cublas, stored, a.x, 0, a.rows, CUDA_R_32F, CUBLAS_COMPUTE_32F, 0.f);
  } else {
    WeightOperand hi{a.kept.hi, w_rows, true}, lo{a.kept.lo, w_rows, true};
    if (!a.kept.Kept()) {
      for (int d = 0; d < a.D; ++d)
        SplitTf32Async(a.w + d * a.w_stride, a.w_hi + d * w_rows, a.w_lo + d * w_rows, w_rows, stream);
      hi = {a.w_hi, w_rows, false};
      lo = {a.w_lo, w_rows, false};
    }
    const auto tf32 = CUBLAS_COMPUTE_32F_FAST_TF32;
    for (long long r0 = 0; r0 < a.rows; r0 += kSplitChunkRows) {
      const long long n = std::min<long long>(kSplitChunkRows, a.rows - r0);
      SplitTf32Async(a.x + r0 * a.I, a.x_hi, a.x_lo, n * a.I, stream);
      Gemm(a, cublas, hi, a.x_hi, r0, n, CUDA_R_32F, tf32, 0.f);
      Gemm(a, cublas, lo, a.x_hi, r0, n, CUDA_R_32F, tf32, 1.f);
      Gemm(a, cublas, hi, a.x_lo, r0, n, CUDA_R_32F, tf32, 1.f);
    }
  }
}

template void ProjectInput<float>(const ProjectionArgs<float>& a, cublasHandle_t cublas, cudaStream_t stream);
template void ProjectInput<__half>(const ProjectionArgs<__half>& a, cublasHandle_t cublas, cudaStream_t stream);

}  // namespace lstm_ort
