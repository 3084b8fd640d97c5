// Arguments of one cluster launch: one layer, both directions (one cluster each), every step.
#pragma once

#include "cuda/cluster/plan.h"
#include "lstm_ort/cell.h"

namespace lstm_ort {

template <typename T>
struct ClusterArgs {
  ClusterPlan plan;
  int B, H, max_len, D;
  const int* lens;                 // [B]
  const float* gx[2];              // the layer's input projections, rows of 4H
  long long gx_st, gx_sb;          // row of (t, b) = t*gx_st + b*gx_sb
  const T* w[2];                   // the recurrent rows of packed W, [H][4H]
  const T* bias[2];                // [4H] or null
  const T* peep[2];                // [3H] or null
  const float* h0;                 // [D][B][H]
  const float* c0;
  float* h_fin;                    // [D][B][H]
  float* c_fin;
  T* y;                            // element (t, d, b, j) at t*y_st + d*y_sd + b*y_sb + j
  long long y_st, y_sd, y_sb;
  bool reverse[2];
  CellParams cell[2];
};

}  // namespace lstm_ort
