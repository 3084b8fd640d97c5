// Arguments of one recurrent step of one layer (v1), both directions at once (blockIdx.z =
// direction), and what every per-step kernel does around its recurrent product.
#pragma once

#include <cuda_fp16.h>

#include "cuda/element_access.cuh"
#include "lstm_ort/cell.h"

namespace lstm_ort {

template <typename T>
struct StepArgs {
  int B, H, step;
  const int* lens;           // [B], on the device
  const float* gx[2];        // input projections, rows of 4H; row of (t, b) = t*gx_st + b*gx_sb
  long long gx_st, gx_sb;
  const T* wh[2];            // recurrent rows of the packed W: [H, 4H], gate-interleaved
  const T* bias[2];          // [4H] gate-interleaved, or null
  const T* peep[2];          // [3H] (i, o, f blocks), or null
  const float* h_in[2];      // [B, H]
  float* h_out[2];           // [B, H]
  float* c[2];               // [B, H], updated in place
  T* y;                      // element (t, d, b, j) at t*y_st + d*y_sd + b*y_sb + j; null = not written
  long long y_st, y_sd, y_sb;
  bool reverse[2];
  CellParams cell[2];
  // The call's one step multiplies its input itself (CallPlan::step_projects): gx is null, and
  // x's row b (at b*I) meets Wx[d]'s rows (row k at 4H*k) in the step's product.
  const T* x;
  const T* wx[2];
  int I;
  // The last step writes Y_h / Y_c (null: not asked for): element (b, j) of direction d at
  // y_h[d] + b*state_sb + j, the layer's rows of the op's states in its layout.
  bool final_step;
  T* y_h[2];
  T* y_c[2];
  long long state_sb;
};

// What one (direction, row, unit) needs besides its recurrent product. Loaded before the
// product so these loads overlap it instead of following it.
struct UnitInputs {
  bool active, empty;  // empty: a sequence of length 0
  int t;
  float4 g;  // input projection + bias
  float pi, po, pf, c;
};

template <typename T>
__device__ __forceinline__ UnitInputs LoadUnit(const StepArgs<T>& a, int d, int b, int u) {
  UnitInputs in{};
  const int len = a.lens[b];
  in.active = a.step < len;
  in.empty = len == 0;
  if (!in.active) return in;
  const int H = a.H;
  in.t = a.reverse[d] ? len - 1 - a.step : a.step;
  in.g = a.gx[d] ? Load4(a.gx[d] + (in.t * a.gx_st + b * a.gx_sb) * 4LL * H + 4LL * u)
                 : make_float4(0.f, 0.f, 0.f, 0.f);
  if (a.bias[d]) {
    const float4 bias = Load4(a.bias[d] + 4LL * u);
    in.g.x += bias.x;
    in.g.y += bias.y;
    in.g.z += bias.z;
    in.g.w += bias.w;
  }
  if (a.peep[d]) {
    in.pi = ToF(a.peep[d][u]);
    in.po = ToF(a.peep[d][H + u]);
    in.pf = ToF(a.peep[d][2 * H + u]);
  }
  in.c = a.c[d][static_cast<long long>(b) * H + u];
  return in;
}

// Y_h / Y_c of (d, b, u) at the last step: a sequence of length 0 ends in zeros, as stock
// onnxruntime gives (FinalStates, state_kernels.cuh, for the other backends).
template <typename T>
__device__ __forceinline__ void WriteFinalUnit(const StepArgs<T>& a, int d, int b, int u, bool empty, float h,
                                               float c) {
  const long long at = b * a.state_sb + u;
  if (a.y_h[d]) a.y_h[d][at] = FromF<T>(empty ? 0.f : h);
  if (a.y_c[d]) a.y_c[d][at] = FromF<T>(empty ? 0.f : c);
}

// The cell update of (d, b, u) from its recurrent product, sequence masking, and the writes;
// returns the h written.
template <typename T>
__device__ __forceinline__ float FinishUnit(const StepArgs<T>& a, int d, int b, int u, float4 acc,
                                            const UnitInputs& in) {
  const long long bu = static_cast<long long>(b) * a.H + u;
  if (!in.active) {  // finished sequences keep their state
    const float h = a.h_in[d][bu];
    a.h_out[d][bu] = h;
    if (a.final_step) WriteFinalUnit(a, d, b, u, in.empty, h, a.c[d][bu]);
    return h;
  }
  float c = in.c;
  const float gi = acc.x + in.g.x, go = acc.y + in.g.y, gf = acc.z + in.g.z, gc = acc.w + in.g.w;
  const float h = IsDefaultCell(a.cell[d]) ? DefaultCellUpdate(gi, go, gf, gc, in.pi, in.po, in.pf, c)
                                           : CellUpdate(a.cell[d], gi, go, gf, gc, in.pi, in.po, in.pf, c);
  a.c[d][bu] = c;
  a.h_out[d][bu] = h;
  if (a.y) a.y[in.t * a.y_st + d * a.y_sd + b * a.y_sb + u] = FromF<T>(h);
  if (a.final_step) WriteFinalUnit(a, d, b, u, false, h, c);
  return h;
}

}  // namespace lstm_ort
