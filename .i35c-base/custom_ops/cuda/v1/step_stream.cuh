// v1's recurrent step for small batches (heuristics.h, StreamsStepWith): gates = h . R with
// B <= 16 rows, so the step is bound by reading R ([H, 4H], fp32 or a 16-bit copy) once from memory. Each block takes
// kStreamTileCols columns of one direction and one K split: its warps read interleaved rows of
// R as one float4 per lane (a coalesced 512-byte row segment), multiply by the block's rows of h
// (staged in shared memory, read as broadcasts), reduce across warps, and write their split's
// partial sums. The last block of a column tile to finish adds the splits in split order (so the
// sum is the same on every run) and runs the cell of the tile's 32 units: one launch per step.
#pragma once

#include <cuda_runtime.h>

#include "cuda/heuristics.h"
#include "cuda/v1/half_weights.cuh"
#include "cuda/v1/step_args.cuh"

namespace lstm_ort {

constexpr int kStreamWarps = 8;
constexpr int kStreamThreads = 32 * kStreamWarps;
static_assert(kStreamTileCols == 4 * 32, "a warp covers a tile with one float4 per lane");

struct StreamArgs {
  int splits, rows_per_split;  // K splits (blockIdx.z) and rows per split
  float* partial;              // [splits][D][B][4H]
  unsigned* done;              // [D][column tiles]: splits finished this step; zero between steps
  const void* w[2];            // R per direction, [H][4H] of the kernel's W (a.wh for fp32)
  const unsigned* amax;        // the 16-bit copies' largest |weight| bits (half_weights.cuh)
};

// kB: batch rows the block computes (a power of two >= B; rows past B are zero). W: the
// weights' type, float or a 16-bit copy; the product is fp32 either way.
// Four blocks per SM up to 8 rows (registers capped at 64), two at 16 (its 64 accumulators).
constexpr int StreamMinBlocks(int rows) { return rows <= 8 ? 4 : 2; }

template <int kB, typename W>
__global__ void __launch_bounds__(kStreamThreads, StreamMinBlocks(kB)) StreamRecurrentStep(StepArgs<float> a,
                                                                                           StreamArgs s) {
  // h of the split, [rows][kB]; afterwards the warps' partial sums, 8 batch rows at a time.
  constexpr int kRedRows = kB < 8 ? kB : 8;
  constexpr int kHFloats = kStreamMaxRowsPerSplit * kB;
  constexpr int kRedFloats = kStreamWarps * kRedRows * kStreamTileCols;
  __shared__ __align__(16) float smem[kHFloats > kRedFloats ? kHFloats : kRedFloats];

  const int d = blockIdx.y, split = blockIdx.z, D = gridDim.y, G = kGates * a.H;
  const int k0 = split * s.rows_per_split;
  const int rows = min(a.H, k0 + s.rows_per_split) - k0;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int tile0 = blockIdx.x * kStreamTileCols;
  const int col = tile0 + 4 * lane;

  // Selected, not a.h_in[d]: a dynamic index would copy the parameter array to the stack.
  const float* h = d == 0 ? a.h_in[0] : a.h_in[1];
  for (int i = threadIdx.x; i < rows * kB; i += kStreamThreads) {  // coalesced along h's rows
    const int b = i / rows, k = i - b * rows;
    smem[k * kB + b] = b < a.B ? h[static_cast<long long>(b) * a.H + k0 + k] : 0.f;
  }
  __syncthreads();

  float acc[kB][4] = {};
  if (col < G) {  // G % 4 == 0: a lane's float4 is all in or all out
    const W* w = static_cast<const W*>(d == 0 ? s.w[0] : s.w[1]) + static_cast<long long>(k0) * G + col;
    // fp32: 4 rows in flight per warp measured 3% faster than 8 (H2048 B2-16); 16-bit weights
    // need 8 for as many bytes in flight.
#pragma unroll(sizeof(W) == 4 ? 4 : 8)
    for (int k = warp; k < rows; k += kStreamWarps) {
      const float4 wv = LoadStepWeights4(w + static_cast<long long>(k) * G);
      const float* hk = smem + k * kB;
#pragma unroll
      for (int b = 0; b < kB; ++b) {
        const float hv = hk[b];
        acc[b][0] = fmaf(hv, wv.x, acc[b][0]);
        acc[b][1] = fmaf(hv, wv.y, acc[b][1]);
        acc[b][2] = fmaf(hv, wv.z, acc[b][2]);
        acc[b][3] = fmaf(hv, wv.w, acc[b][3]);
      }
    }
  }

  const long long split_sd = static_cast<long long>(D) * a.B * G;
  float* out = s.partial + split * split_sd + static_cast<long long>(d) * a.B * G;
#pragma unroll
  for (int b0 = 0; b0 < kB; b0 += kRedRows) {
    __syncthreads();  // h (first round) or the previous round's sums are no longer read
#pragma unroll
    for (int b = 0; b < kRedRows; ++b)
      *reinterpret_cast<float4*>(smem + (warp * kRedRows + b) * kStreamTileCols + 4 * lane) =
          make_float4(acc[b0 + b][0], acc[b0 + b][1], acc[b0 + b][2], acc[b0 + b][3]);
    __syncthreads();
    for (int i = threadIdx.x; i < kRedRows * kStreamTileCols; i += kStreamThreads) {
      const int b = b0 + i / kStreamTileCols, c = tile0 + i % kStreamTileCols;
      if (b >= a.B || c >= G) continue;
      float sum = 0.f;
#pragma unroll
      for (int w = 0; w < kStreamWarps; ++w) sum += smem[w * kRedRows * kStreamTileCols + i];
      out[static_cast<long long>(b) * G + c] = sum;
    }
  }

  // Count this split in; the last one of the tile runs the cell (threadFenceReduction's pattern).
  __shared__ bool last;
  __threadfence();  // every thread's partial sums are visible device-wide before the count
  __syncthreads();
  unsigned* done = s.done + d * gridDim.x + blockIdx.x;
  if (threadIdx.x == 0) last = atomicAdd(done, 1u) == static_cast<unsigned>(s.splits - 1);
  __syncthreads();
  if (!last) return;
  __threadfence();
  const int u0 = tile0 / kGates, units = min(kStreamTileCols / kGates, a.H - u0);
  const int unscale = -StepWeightScale<W>(s.amax, d);
  for (int i = threadIdx.x; i < a.B * units; i += kStreamThreads) {
    const int b = i / units, u = u0 + i - b * units;
    const UnitInputs in = LoadUnit(a, d, b, u);
    float4 sum{};
    if (in.active) {
      const float* g = s.partial + (static_cast<long long>(d) * a.B + b) * G + kGates * u;
      for (int k = 0; k < s.splits; ++k, g += split_sd) {  // L2 reads: other SMs wrote these
        const float4 p = __ldcg(reinterpret_cast<const float4*>(g));
        sum.x += p.x;
        sum.y += p.y;
        sum.z += p.z;
        sum.w += p.w;
      }
      if (unscale) sum = make_float4(ldexpf(sum.x, unscale), ldexpf(sum.y, unscale), ldexpf(sum.z, unscale),
                                     ldexpf(sum.w, unscale));
    }
    FinishUnit(a, d, b, u, sum, in);
  }
  if (threadIdx.x == 0) *done = 0;  // the next step's launch starts after this one ends
}

}  // namespace lstm_ort
