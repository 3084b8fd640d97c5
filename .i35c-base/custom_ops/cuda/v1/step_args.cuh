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
};

// What one (direction, row, unit) needs besides its recurrent product. Loaded before the
// product so these loads overlap it instead of following it.
struct UnitInputs {
  bool active;
  int t;
  float4 g;  // input projection + bias
  float pi, po, pf, c;
};

template <typename T>
__device__ __forceinline__ UnitInputs LoadUnit(const StepArgs<T>& a, int d, int b, int u) {
  UnitInputs in{};
  const int len = a.lens[b];
  in.active = a.step < len;
  if (!in.active) return in;
  const int H = a.H;
  in.t = a.reverse[d] ? len - 1 - a.step : a.step;
  in.g = Load4(a.gx[d] + (in.t * a.gx_st + b * a.gx_sb) * 4LL * H + 4LL * u);
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

// The cell update of (d, b, u) from its recurrent product, sequence masking, and the writes;
// returns the h written.
template <typename T>
__device__ __forceinline__ float FinishUnit(const StepArgs<T>& a, int d, int b, int u, float4 acc,
                                            const UnitInputs& in) {
  const long long bu = static_cast<long long>(b) * a.H + u;
  if (!in.active) {  // finished sequences keep their state
    const float h = a.h_in[d][bu];
    a.h_out[d][bu] = h;
    return h;
  }
  float c = in.c;
  const float gi = acc.x + in.g.x, go = acc.y + in.g.y, gf = acc.z + in.g.z, gc = acc.w + in.g.w;
  const float h = IsDefaultCell(a.cell[d]) ? DefaultCellUpdate(gi, go, gf, gc, in.pi, in.po, in.pf, c)
                                           : CellUpdate(a.cell[d], gi, go, gf, gc, in.pi, in.po, in.pf, c);
  a.c[d][bu] = c;
  a.h_out[d][bu] = h;
  if (a.y) a.y[in.t * a.y_st + d * a.y_sd + b * a.y_sb + u] = FromF<T>(h);
  return h;
}

}  // namespace lstm_ort
