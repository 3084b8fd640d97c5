#include "cuda/low_rank/gemm.h"

#include <limits>
#include <stdexcept>
#include <string>

namespace lstm_ort {

void RowMajorGemm(cublasHandle_t cublas, long long M, long long N, long long K, const float* A, long long lda,
                  const float* B, long long ldb, float* C, long long ldc, float beta) {
  if (M == 0 || N == 0 || K == 0) return;
  for (long long v : {M, N, K, lda, ldb, ldc})
    if (v > std::numeric_limits<int>::max())
      throw std::runtime_error("FusedLSTM cuBLAS: factored GEMM dimension " + std::to_string(v) + " exceeds int");
  const float one = 1.f;
  // Row-major C = A B is column-major C^T = B^T A^T: B is the first operand, as stored.
  const cublasStatus_t s = cublasSgemm(cublas, CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(N), static_cast<int>(M),
                                       static_cast<int>(K), &one, B, static_cast<int>(ldb), A, static_cast<int>(lda),
                                       &beta, C, static_cast<int>(ldc));
  if (s != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error("FusedLSTM cuBLAS: factored GEMM failed with status " + std::to_string(s));
}

}  // namespace lstm_ort
