// The tensor-core product of the persistent kernel per operand type (mma_operand.h): what
// shared memory stores, and one k step of a warp's one or two 16 x 16 output tiles.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>

#include "cuda/persistent/mma_operand.h"

namespace lstm_ort {

namespace wmma = nvcuda::wmma;

template <MmaOperand O>
struct MmaTraits;

template <>
struct MmaTraits<MmaOperand::kTf32x3> {
  using Stored = float;
  using Frag = wmma::precision::tf32;
};
template <>
struct MmaTraits<MmaOperand::kTf32> {
  using Stored = float;
  using Frag = wmma::precision::tf32;
};
template <>
struct MmaTraits<MmaOperand::kFp16> {
  using Stored = __half;
  using Frag = __half;
};
template <>
struct MmaTraits<MmaOperand::kBf16> {
  using Stored = __nv_bfloat16;
  using Frag = __nv_bfloat16;
};

__device__ __forceinline__ void StoreAs(float* p, float v) { *p = v; }
__device__ __forceinline__ void StoreAs(__half* p, float v) { *p = __float2half_rn(v); }
__device__ __forceinline__ void StoreAs(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }

// What shared memory and the h buffer hold for value v: tf32 operands are rounded once when
// stored, so the product reads them as they are.
template <MmaOperand O>
__device__ __forceinline__ void StoreOperand(typename MmaTraits<O>::Stored* p, float v) {
  if constexpr (O == MmaOperand::kTf32) v = wmma::__float_to_tf32(v);
  StoreAs(p, v);
}

template <MmaOperand O>
using MmaAcc = wmma::fragment<wmma::accumulator, 16, 16, MmaKStep(O), float>;

// acc[i] += A_i . W over one k step: A_i = 16 batch rows (column-major in shared memory, rows
// contiguous, lda apart per k), W = k x 16 gate columns (row-major, ldw apart per k).
template <MmaOperand O>
__device__ __forceinline__ void MmaKStepTiles(MmaAcc<O> (&acc)[2], int tiles, const typename MmaTraits<O>::Stored* a,
                                              int lda, const typename MmaTraits<O>::Stored* w, int ldw) {
  using Frag = typename MmaTraits<O>::Frag;
  constexpr int kK = MmaKStep(O);
  wmma::fragment<wmma::matrix_b, 16, 16, kK, Frag, wmma::row_major> w_hi;
  wmma::load_matrix_sync(w_hi, w, ldw);
  if constexpr (O == MmaOperand::kTf32x3) {
    // hi + lo carries 21 of fp32's 24 mantissa bits; lo . lo (below fp32 rounding) is dropped.
    wmma::fragment<wmma::matrix_b, 16, 16, kK, Frag, wmma::row_major> w_lo;
#pragma unroll
    for (int e = 0; e < w_hi.num_elements; ++e) {
      const float x = w_hi.x[e], hi = wmma::__float_to_tf32(x);
      w_hi.x[e] = hi;
      w_lo.x[e] = wmma::__float_to_tf32(x - hi);
    }
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      if (i >= tiles) break;
      wmma::fragment<wmma::matrix_a, 16, 16, kK, Frag, wmma::col_major> a_hi, a_lo;
      wmma::load_matrix_sync(a_hi, a + i * 16, lda);
#pragma unroll
      for (int e = 0; e < a_hi.num_elements; ++e) {
        const float x = a_hi.x[e], hi = wmma::__float_to_tf32(x);
        a_hi.x[e] = hi;
        a_lo.x[e] = wmma::__float_to_tf32(x - hi);
      }
      // Small terms first.
      wmma::mma_sync(acc[i], a_lo, w_hi, acc[i]);
      wmma::mma_sync(acc[i], a_hi, w_lo, acc[i]);
      wmma::mma_sync(acc[i], a_hi, w_hi, acc[i]);
    }
  } else {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      if (i >= tiles) break;
      wmma::fragment<wmma::matrix_a, 16, 16, kK, Frag, wmma::col_major> a_frag;
      wmma::load_matrix_sync(a_frag, a + i * 16, lda);
      wmma::mma_sync(acc[i], a_frag, w_hi, acc[i]);
    }
  }
}

}  // namespace lstm_ort
