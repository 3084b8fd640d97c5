// Arguments of one persistent launch: a range of layers, every step.
#pragma once

#include "cuda/persistent/plan.h"
#include "lstm_ort/cell.h"

namespace lstm_ort {

template <typename T>
struct PersistentArgs {
  PersistentPlan plan;
  int B, H, max_len, layers, D;
  int log2_u, log2_bb4, log2_p;
  const int* lens;                     // [B]
  const float* gx[2];                  // the first layer's input projections, rows of 4H
  long long gx_st, gx_sb;              // row of (t, b) = t*gx_st + b*gx_sb
  const T* w[kMaxRangeLayers][2];      // first packed-W row this job multiplies, rows of 4H
  int in_rows[kMaxRangeLayers];        // rows multiplied by the layer below's h (0 for the first layer)
  const T* bias[kMaxRangeLayers][2];   // [4H] or null
  const T* peep[kMaxRangeLayers][2];   // [3H] or null
  float* hbuf;                         // [2][layers][D][n_b][H][Bb], rows >= B zero
  const float* h0;                     // [layers][D][B][H]
  const float* c0;
  float* h_fin;                        // [layers][D][B][H]
  float* c_fin;
  T* y;                                // the range's last layer; element (t,d,b,j) as in StepArgs
  long long y_st, y_sd, y_sb;
  unsigned* barrier;                   // zero at launch
  bool reverse[2];
  CellParams cell[2];
};

}  // namespace lstm_ort
