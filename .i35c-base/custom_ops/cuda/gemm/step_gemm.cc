#include "cuda/gemm/step_gemm.h"

#include <cstdint>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>

#include "cuda/gemm/cublas_handles.h"
#include "cuda/process_cache.h"

namespace lstm_ort {
namespace {

cublasLtMatrixLayout_t Layout(cudaDataType_t type, int rows, int cols, int batch, long long stride) {
  cublasLtMatrixLayout_t layout = nullptr;
  if (cublasLtMatrixLayoutCreate(&layout, type, rows, cols, rows) != CUBLAS_STATUS_SUCCESS) return nullptr;
  cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof(batch));
  const int64_t s = stride;
  cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &s, sizeof(s));
  return layout;
}

// The heuristic's first algorithm per device and shape, or none; chosen once per process.
using ShapeKey = std::tuple<int, int, int, int, int, int, int, long long, long long, long long>;

}  // namespace

StepGemm::StepGemm(const StepGemmShape& s) {
  handle_ = CublasLtHandle();
  if (cublasLtMatmulDescCreate(&op_, s.compute, CUDA_R_32F) != CUBLAS_STATUS_SUCCESS) return;
  a_ = Layout(s.operand, s.G, s.K, s.batch, s.a_stride);
  b_ = Layout(s.operand, s.K, s.B, s.batch, s.b_stride);
  c_ = Layout(CUDA_R_32F, s.G, s.B, s.batch, s.c_stride);
  if (!a_ || !b_ || !c_) return;

  int device = 0;
  cudaGetDevice(&device);
  const ShapeKey key{device, s.G, s.B, s.K, s.batch, static_cast<int>(s.operand), static_cast<int>(s.compute),
                     s.a_stride, s.b_stride, s.c_stride};
  const auto& chosen = ProcessCached(key, [this] {
    cublasLtMatmulPreference_t pref = nullptr;
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    if (cublasLtMatmulPreferenceCreate(&pref) == CUBLAS_STATUS_SUCCESS) {
      const size_t no_workspace = 0;
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &no_workspace,
                                           sizeof(no_workspace));
      if (cublasLtMatmulAlgoGetHeuristic(handle_, op_, a_, b_, c_, c_, pref, 1, &result, &found) !=
          CUBLAS_STATUS_SUCCESS)
        found = 0;
      cublasLtMatmulPreferenceDestroy(pref);
    }
    return std::make_pair(found > 0, result.algo);
  });
  ready_ = chosen.first;
  algo_ = chosen.second;
}

StepGemm::~StepGemm() {
  if (c_) cublasLtMatrixLayoutDestroy(c_);
  if (b_) cublasLtMatrixLayoutDestroy(b_);
  if (a_) cublasLtMatrixLayoutDestroy(a_);
  if (op_) cublasLtMatmulDescDestroy(op_);
}

void StepGemm::Run(const void* a, const void* b, float* c, cudaStream_t stream) const {
  const float one = 1.f, zero = 0.f;
  const cublasStatus_t st =
      cublasLtMatmul(handle_, op_, &one, a, a_, b, b_, &zero, c, c_, c, c_, &algo_, nullptr, 0, stream);
  if (st != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error("FusedLSTM cublasLt: recurrent step GEMM failed with status " + std::to_string(st));
}

}  // namespace lstm_ort
