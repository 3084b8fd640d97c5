// Row-major fp32 GEMMs on cuBLAS for the factored path: the two products of an input projection
// through its rank, and h times A at every step.
#pragma once

#include <cublas_v2.h>

namespace lstm_ort {

// C [M][N] = A [M][K] x B [K][N] (+ beta C), every matrix row-major with the given leading
// dimensions; FP32 math (the handle's default, no TF32). Nothing is done when M, N or K is 0
// (callers skip those: an input with no rows, a call of no step).
void RowMajorGemm(cublasHandle_t cublas, long long M, long long N, long long K, const float* A, long long lda,
                  const float* B, long long ldb, float* C, long long ldc, float beta = 0.f);

}  // namespace lstm_ort
