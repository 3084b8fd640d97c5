// One layer's inputs and outputs as every backend indexes them (whole weights in stack_run.cu,
// factored in low_rank/run.cu): where its input projection's rows lie, where it writes its
// sequence output, and its initial and final states. One place, so the backends cannot drift
// apart on a stride or a layout.
#pragma once

#include <cuda_runtime.h>

#include "call_io.h"
#include "cuda/cuda_check.h"
#include "cuda/state_kernels.cuh"
#include "lstm_ort/contract.h"

namespace lstm_ort {

struct LayerIO {
  // gx row of (t, b) = t * gx_st + b * gx_sb: layer 0 in layout 1 is batch-major, its projection
  // rows in (b, t) order.
  long long gx_st = 0, gx_sb = 0;
  // Sequence output element (t, d, b, j) at t * y_st + d * y_sd + b * y_sb + j: Y for the last
  // layer (in the op's layout), else the next layer's input rows [T][B][D][H].
  bool last = false;
  long long y_st = 0, y_sd = 0, y_sb = 0;
};

inline LayerIO LayerIOFor(const Dims& d, int64_t layout, int l) {
  LayerIO io;
  const bool batch_major = l == 0 && layout == 1;
  io.gx_st = batch_major ? 1 : d.B;
  io.gx_sb = batch_major ? d.T : 1;
  io.last = l == d.L - 1;
  if (io.last) {
    const bool l0 = layout == 0;
    io.y_st = l0 ? d.D * d.B * d.H : d.D * d.H;
    io.y_sd = l0 ? d.B * d.H : d.H;
    io.y_sb = l0 ? d.H : d.T * d.D * d.H;
  } else {
    io.y_st = d.B * d.D * d.H;
    io.y_sd = d.H;
    io.y_sb = d.D * d.H;
  }
  return io;
}

// A range's strides into the arguments of any backend: where its first layer's projection rows
// lie (`in`) and where its last layer writes (`out`, to `y`).
template <typename TY, typename Args>
void ApplyLayerIO(const LayerIO& in, const LayerIO& out, TY* y, Args& a) {
  a.gx_st = in.gx_st;
  a.gx_sb = in.gx_sb;
  a.y = y;
  a.y_st = out.y_st;
  a.y_sd = out.y_sd;
  a.y_sb = out.y_sb;
}

// Positions past a sequence's end stay zero: the whole output is cleared first where some
// sequence is shorter than T.
template <typename TY>
void ZeroPastEnds(TY* y, const CallIO& io, cudaStream_t stream) {
  const Dims& d = io.dims;
  if (y && (io.seq_lens || io.max_len < d.T))
    Check(cudaMemsetAsync(y, 0, sizeof(TY) * d.T * d.B * d.D * d.H, stream), "zero Y");
}

// The fp32 states [D][B][H] of layers l.. l+count-1 (one block after the other) from initial_h /
// initial_c (zeros where absent), and `prelude`, in one launch.
template <typename T>
void InitLayerStates(const CallIO& io, int64_t layout, int l, float* h, float* c, cudaStream_t stream, int count = 1,
                     const StatesPrelude& prelude = {}) {
  const Dims& d = io.dims;
  LaunchInitStates<T>(static_cast<const T*>(io.in[kInitialH]), static_cast<const T*>(io.in[kInitialC]), h, c, l,
                      count, static_cast<int>(d.D), static_cast<int>(d.L * d.D), static_cast<int>(d.B),
                      static_cast<int>(d.H), static_cast<int>(layout), prelude, stream);
}

// Y_h / Y_c of layers l.. l+count-1 from their final fp32 states (one block after the other).
template <typename T>
void WriteFinalStates(const CallIO& io, int64_t layout, int l, const float* h, const float* c, const int* lens,
                      cudaStream_t stream, int count = 1) {
  const Dims& d = io.dims;
  LaunchFinalStates<T>(h, c, lens, static_cast<T*>(io.out[kYH]), static_cast<T*>(io.out[kYC]), l, count,
                       static_cast<int>(d.D), static_cast<int>(d.L * d.D), static_cast<int>(d.B),
                       static_cast<int>(d.H), static_cast<int>(layout), stream);
}

}  // namespace lstm_ort
