// Arguments of one launch of the tensor-core step (kernel.cuh): a range of layers at one interval.
#pragma once

#include "cuda/mma_step/plan.h"
#include "lstm_ort/cell.h"

namespace lstm_ort {

template <typename T>
struct MmaStepArgs {
  int B, H, max_len, layers, D;
  int interval;                          // this launch's: layer r runs step interval - r
  const int* lens;                       // [B]
  const float* gx[2];                    // the range's first layer's input projections, rows of 4H
  long long gx_st, gx_sb;                // row of (t, b) = t*gx_st + b*gx_sb
  const void* w[kMaxMmaStepLayers][2];   // operand weights [in_rows + H][4H]: input rows, then recurrent rows
  int in_rows[kMaxMmaStepLayers];        // rows multiplied by the layer below's h (0 for the first layer)
  const int* exps;                       // kMmaStepExps ints (plan.h), or null: none scaled
  const T* bias[kMaxMmaStepLayers][2];   // [4H] or null
  const T* peep[kMaxMmaStepLayers][2];   // [3H] or null
  void* hop;                             // h as the operand type: [2][layers][D][B][H], parity = interval & 1
  float* c;                              // [layers][D][B][H], updated in place
  float* h_fin;                          // [layers][D][B][H]: h at each sequence's last step
  T* y;                                  // the range's last layer; element (t,d,b,j) as in StepArgs
  long long y_st, y_sd, y_sb;
  unsigned* barrier;                     // the resident kernel's grid barrier (zeroed before it), else null
  bool skip_h0;                          // initial h is zero: step 0 multiplies no recurrent rows
  bool reverse[2];
  CellParams cell[2];
};

}  // namespace lstm_ort
