// The per-direction fields that the arguments of every CUDA recurrence carry (v1 steps, the
// persistent and cluster kernels, the factored recurrence), filled in one place so the strategies
// cannot drift apart on where a direction's gates start or which way it runs.
#pragma once

#include "call_io.h"
#include "lstm_ort/cell.h"
#include "lstm_ort/contract.h"

namespace lstm_ort {

// gx: the layer's input projections, D blocks of rows x G; direction 1 runs backwards, and so
// does direction 0 of a reverse-only layer.
template <typename Args>
void SetDirectionFields(Args& a, const Attributes& attrs, const float* gx, long long rows, long long G, int D) {
  for (int dir = 0; dir < D; ++dir) {
    a.gx[dir] = gx + dir * rows * G;
    a.reverse[dir] = attrs.reverse_only || dir == 1;
    a.cell[dir] = MakeCellParams(attrs, dir);
  }
}

// Slice k = layer * D + direction of the optional bias [L*D][4H] and peepholes [L*D][3H]; null
// where the model has none.
template <typename T>
const T* BiasSlice(const CallIO& io, int k, long long H) {
  const T* b = static_cast<const T*>(io.in[kB]);
  return b ? b + k * kGates * H : nullptr;
}
template <typename T>
const T* PeepSlice(const CallIO& io, int k, long long H) {
  const T* p = static_cast<const T*>(io.in[kP]);
  return p ? p + k * 3LL * H : nullptr;
}

}  // namespace lstm_ort
