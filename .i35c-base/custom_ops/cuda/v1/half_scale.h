// The power of two that v1's fp16 copy of the recurrent weights is scaled by (half_weights.cuh).
// Plain C++ so the unit tests check it; the kernels call it with the largest |weight|'s bits.
#pragma once

#include "cuda/host_device.h"

namespace lstm_ort {

// 2^s puts the largest |weight| in [2^14, 2^15): far from fp16's overflow (65504), and weights
// down to 2^-24 of the largest keep a normal fp16 value, so the rounding is TF32's relative 2^-11
// on every weight that matters. 0 when nothing needs scaling or must not be: all-zero weights,
// and inf or NaN ones, which then reach the product as they are (as in fp32).
LSTM_ORT_HOST_DEVICE inline int HalfScaleExponent(unsigned amax_bits) {
  const unsigned biased = (amax_bits >> 23) & 0xffu;
  if (amax_bits == 0 || biased == 0xffu) return 0;
  // amax < 2^e with e = biased - 126 (subnormals count as 2^-126: their s still fits a float)
  const int e = static_cast<int>(biased == 0 ? 1 : biased) - 126;
  return 15 - e;
}

}  // namespace lstm_ort
