// A layer's input projection for every step and both directions at once, on cuBLAS: the part of
// the gates that does not depend on h, computed before the recurrence.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "cuda/gemm/kept_split.h"
#include "cuda/heuristics.h"

namespace lstm_ort {

template <typename T>
struct ProjectionArgs {
  const T* x;           // the layer input, [rows][I]
  const T* w;           // direction 0's packed-W block; its first I rows multiply x
  long long w_stride;   // elements between the directions' blocks
  int I, D, G;          // input width, directions, 4H
  long long rows;       // T*B
  float* gx;            // out: [D][rows][G]
  // For the 3xTF32 path: room for a chunk of x rows split (scratch_layout.h), and W's input rows
  // split into w_hi, w_lo as [D][I][G] where the call splits them itself.
  float *x_hi, *x_lo, *w_hi, *w_lo;
  // For fp16/bf16 projections (ProjectsWithBf16Copies): room for a chunk of x rows and W's input
  // rows [D][I][G] in bfloat16 (w_bf16 only where the copy is not kept).
  void *x_bf16, *w_bf16;
  KeptSplit kept;  // this layer's kept halves [D][G][I] or bfloat16 copy [D][I][G] (gemm/kept_split.h), or none
  ProjectionMath math = ProjectionMath::kFp32;  // fp32 models only: the precision mode's GEMM
};

// hi, lo = x split for 3xTF32 (gemm/split_tf32.cuh), n elements, enqueued on `stream`.
void SplitTf32Async(const float* x, float* hi, float* lo, long long n, cudaStream_t stream);
// The same for a [rows][cols] block, written transposed ([cols][rows]); hi or lo may be null.
void SplitTf32TransposedAsync(const float* w, float* hi, float* lo, int64_t rows, int64_t cols, cudaStream_t stream);
// out = x rounded to bfloat16 (to nearest even), n elements, enqueued on `stream`.
void ToBf16Async(const float* x, void* out, long long n, cudaStream_t stream);

// gx[d] = x @ Wx[d]. float16 runs on tensor cores with fp32 accumulation as it is; float32 as
// plain SGEMM or, where heuristics.h says so, as three TF32 GEMMs on split halves; TF32 calls
// read the kept hi half where heuristics.h says so.
template <typename T>
void ProjectInput(const ProjectionArgs<T>& a, cublasHandle_t cublas, cudaStream_t stream);

}  // namespace lstm_ort
