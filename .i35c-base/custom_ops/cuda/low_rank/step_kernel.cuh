// One recurrent step of a factored layer, both directions in one launch (blockIdx.z): the gates
// of each (batch row, unit) are gx_t + lhs x W + bias, then the cell update, in one kernel. lhs
// is h times A ([B][K], K the rank; from cuBLAS just before) and W the second factor B [K][4H];
// a recurrence kept whole passes lhs = h and W = the recurrent rows of the packed W (K = H).
//
// Tiling: a block owns 32 units (128 gate columns) and 16 batch rows; a thread one unit and 4 rows,
// so each weight it loads from shared memory serves 4 rows. K is walked in chunks of 32, the
// chunk's weights and lhs staged in shared memory.
#pragma once

#include "cuda/element_access.cuh"
#include "lstm_ort/cell.h"

namespace lstm_ort {

constexpr int kLrUnits = 32;       // units per block: lane = unit
constexpr int kLrRows = 16;        // batch rows per block
constexpr int kLrRowsPerThread = 4;
constexpr int kLrThreads = kLrUnits * kLrRows / kLrRowsPerThread;  // 128: a warp per 4 rows
constexpr int kLrDepth = 32;       // K per shared-memory chunk

template <typename T, typename TY>
struct LowRankStepArgs {
  const float* lhs[2];  // [B][ld_lhs], K used
  long long ld_lhs[2];
  int K[2];
  const float* w[2];    // [K][4H], columns 4j + g
  const float* gx[2];   // the layer's input projection of this direction, [rows][4H]
  long long gx_st, gx_sb;  // row of (t, b) = t * gx_st + b * gx_sb
  const T* bias[2];     // [4H] or null
  const T* peep[2];     // [3H] or null
  const float* h_in[2];  // [B][H]
  float* h_out[2];
  float* c[2];
  TY* y;                // Y (TY = T) or the next layer's input (TY = float); may be null
  long long y_st, y_sd, y_sb;
  const int* lens;
  int B, H, step;
  bool reverse[2];
  CellParams cell[2];
};

template <typename T, typename TY>
__global__ void __launch_bounds__(kLrThreads) LowRankStep(LowRankStepArgs<T, TY> a) {
  const int dir = blockIdx.z;
  const int tid = threadIdx.x, u = tid % kLrUnits, group = tid / kLrUnits;
  const int j0 = blockIdx.x * kLrUnits, b0 = blockIdx.y * kLrRows, j = j0 + u;
  const int H = a.H, G = kGates * H, K = a.K[dir];
  const float* lhs = a.lhs[dir];
  const float* w = a.w[dir];
  const long long ld = a.ld_lhs[dir];

  __shared__ float4 ws[kLrDepth][kLrUnits];
  __shared__ float ps[kLrRows][kLrDepth + 1];
  float4 acc[kLrRowsPerThread];
  for (int r = 0; r < kLrRowsPerThread; ++r) acc[r] = make_float4(0.f, 0.f, 0.f, 0.f);

  for (int k0 = 0; k0 < K; k0 += kLrDepth) {
    // Weights: scalar loads (a factor's offset in `factors` need not be 16-byte aligned), coalesced
    // along the row.
    for (int i = tid; i < kLrDepth * kLrUnits; i += kLrThreads) {
      const int kk = i / kLrUnits, uu = i % kLrUnits, k = k0 + kk, jj = j0 + uu;
      float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
      if (k < K && jj < H) {
        const float* src = w + static_cast<long long>(k) * G + kGates * jj;
        v = make_float4(src[0], src[1], src[2], src[3]);
      }
      ws[kk][uu] = v;
    }
    for (int i = tid; i < kLrRows * kLrDepth; i += kLrThreads) {
      const int rr = i / kLrDepth, kk = i % kLrDepth, b = b0 + rr, k = k0 + kk;
      ps[rr][kk] = b < a.B && k < K ? lhs[b * ld + k] : 0.f;
    }
    __syncthreads();
#pragma unroll 8
    for (int kk = 0; kk < kLrDepth; ++kk) {
      const float4 wv = ws[kk][u];
#pragma unroll
      for (int r = 0; r < kLrRowsPerThread; ++r) {
        const float pv = ps[group * kLrRowsPerThread + r][kk];  // one address per warp: a broadcast
        acc[r].x = fmaf(pv, wv.x, acc[r].x);
        acc[r].y = fmaf(pv, wv.y, acc[r].y);
        acc[r].z = fmaf(pv, wv.z, acc[r].z);
        acc[r].w = fmaf(pv, wv.w, acc[r].w);
      }
    }
    __syncthreads();
  }
  if (j >= H) return;

  float4 bias = make_float4(0.f, 0.f, 0.f, 0.f);
  if (a.bias[dir]) bias = Load4(a.bias[dir] + kGates * j);  // 4j: as aligned as the input
  float pi = 0.f, po = 0.f, pf = 0.f;
  if (a.peep[dir]) {
    pi = ToF(a.peep[dir][j]);
    po = ToF(a.peep[dir][H + j]);
    pf = ToF(a.peep[dir][2 * H + j]);
  }
  const CellParams& cell = a.cell[dir];
  const bool fast = IsDefaultCell(cell);
  for (int r = 0; r < kLrRowsPerThread; ++r) {
    const int b = b0 + group * kLrRowsPerThread + r;
    if (b >= a.B) break;
    const long long at = static_cast<long long>(b) * H + j;
    const int len = a.lens[b];
    if (a.step >= len) {  // the sequence has ended: its state stays
      a.h_out[dir][at] = a.h_in[dir][at];
      continue;
    }
    const int t = a.reverse[dir] ? len - 1 - a.step : a.step;
    const float* g = a.gx[dir] + (t * a.gx_st + b * a.gx_sb) * G + kGates * j;
    const float gi = g[kGateI] + acc[r].x + bias.x, go = g[kGateO] + acc[r].y + bias.y;
    const float gf = g[kGateF] + acc[r].z + bias.z, gc = g[kGateC] + acc[r].w + bias.w;
    float c = a.c[dir][at];
    const float h = fast ? DefaultCellUpdate(gi, go, gf, gc, pi, po, pf, c)
                         : CellUpdate(cell, gi, go, gf, gc, pi, po, pf, c);
    a.c[dir][at] = c;
    a.h_out[dir][at] = h;
    if (a.y) a.y[t * a.y_st + dir * a.y_sd + b * a.y_sb + j] = FromF<TY>(h);
  }
}

}  // namespace lstm_ort
