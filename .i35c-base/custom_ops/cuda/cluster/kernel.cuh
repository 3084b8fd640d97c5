// The cluster kernel: one launch runs every step of one layer, a thread-block cluster per
// direction (plan.h says why and how it is sized).
//
// Thread tid = (4 ul + gate) S + slice works on gate column `gate` of local unit ul; its KPT
// weights of that column stay in registers for the whole sequence. Slice s holds rows
// k = 4 (j S + s) + e (j < KPT/4, e < 4): at one j, a warp's float4 reads of h fall on
// consecutive 16-byte words, so shared memory serves them without bank conflicts. A unit's
// 4 gates x S slices are 4S consecutive lanes of one warp: slices meet by shuffles, then lane b
// of the group gathers the four gate sums of batch row b and runs that cell, keeping c and h
// in registers. The group's lanes then push the new h into every block's next h buffer at once
// (st.async into distributed shared memory), each push completing its bytes on that buffer's
// mbarrier in the receiving block; a step starts when its buffer's mbarrier says all B x H values
// have landed. No cluster barrier is on the step's path (a cluster of one block stores h directly
// and meets at __syncthreads instead). Two buffers alternate, and no block can push into buffer
// (t+1)%2 of another before that block has finished reading it in step t-1: the pusher needed the
// reader's own h of step t-1 first, which the reader computes only after it read.
#pragma once

#include <cooperative_groups.h>

#include "cuda/cluster/args.h"
#include "cuda/cluster/dsmem.cuh"
#include "cuda/element_access.cuh"
#include "lstm_ort/cell.h"

namespace lstm_ort {

// Steps ahead that a cell's projected gates are loaded: they come from L2 or memory, and a short
// step does not cover that latency (H100, T1000 B1, one step ahead -> two: H32 0.80 -> 0.71 ms,
// H64 0.87 -> 0.82). Steps of four rows and more are long enough, and their registers are not.
__host__ __device__ constexpr int ClusterGxAhead(int nb) { return nb >= 4 ? 1 : 2; }

template <typename T, int KPT, int NB>
__global__ void __launch_bounds__(kClusterMaxThreads, 1) ClusterLstm(ClusterArgs<T> a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900  // clusters need sm_90; the planner never launches it below
  namespace cg = cooperative_groups;
  extern __shared__ float4 smem4[];
  const ClusterPlan& p = a.plan;
  const int H = a.H, B = a.B, S = p.S, C = p.C, KS = p.Rows(), max_len = a.max_len, tid = threadIdx.x;
  cg::cluster_group cluster = cg::this_cluster();
  const int q = static_cast<int>(cluster.block_rank()), d = blockIdx.x / C;
  const int slice = tid % S, col = tid / S, ul = col >> 2, gate = col & 3;
  const int u = q * p.U + ul;
  const bool unit_ok = u < H;
  float* hs = reinterpret_cast<float*>(smem4);                  // [2][NB][KS]
  uint64_t* arrived = reinterpret_cast<uint64_t*>(hs + 2 * NB * KS);  // [2]: the buffers' mbarriers
  const uint32_t step_bytes = static_cast<uint32_t>(sizeof(float) * B * H);  // what each buffer receives per step

  float w[KPT];
  {
    const T* src = a.w[d] + 4LL * u + gate;
#pragma unroll
    for (int j = 0; j < KPT / 4; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int k = 4 * (j * S + slice) + e;
        w[4 * j + e] = unit_ok && k < H ? ToF(src[static_cast<long long>(k) * 4 * H]) : 0.f;
      }
  }
  // Both buffers zeroed (padding rows k >= H and batch rows >= B stay zero); the first holds h0.
  for (int i = tid; i < 2 * NB * KS; i += blockDim.x) {
    const int buf = i / (NB * KS), b = i / KS % NB, k = i % KS;
    hs[i] = buf == 0 && b < B && k < H ? a.h0[(static_cast<long long>(d) * B + b) * H + k] : 0.f;
  }

  // Lane g4 of a unit's group owns the cell of batch row g4.
  const int g4 = tid % (4 * S), lane = tid & 31, group0 = lane - g4;
  const bool owner = unit_ok && g4 < B;
  const long long state = (static_cast<long long>(d) * B + g4) * H + u;
  const float4 zero = make_float4(0.f, 0.f, 0.f, 0.f);
  float c = 0.f, h = 0.f, peep[3] = {};
  constexpr int kAhead = ClusterGxAhead(NB);
  float4 bias = zero, gx_ring[kAhead];  // projected gates of the next steps, loads in flight
  int len = 0;
  if (owner) {
    c = a.c0[state];
    h = a.h0[state];
    if (a.bias[d]) bias = Load4(a.bias[d] + 4LL * u);
    if (a.peep[d]) {
      peep[0] = ToF(a.peep[d][u]);
      peep[1] = ToF(a.peep[d][H + u]);
      peep[2] = ToF(a.peep[d][2 * H + u]);
    }
    len = a.lens[g4];
  }
  // Row pointers of step 0, moved by one step's stride each step: the address arithmetic stays
  // off the step's critical path. Only steps < len are read or written.
  const bool reverse = a.reverse[d];
  const long long t0 = reverse ? len - 1 : 0, dir = reverse ? -1 : 1;
  const float* gx_row = a.gx[d] + (t0 * a.gx_st + g4 * a.gx_sb) * 4LL * H + 4LL * u;
  const long long gx_stride = dir * a.gx_st * 4LL * H;
  const bool write_y = a.y != nullptr;
  long long y_at = t0 * a.y_st + d * a.y_sd + g4 * a.y_sb + u;  // an offset: y may be absent
  const long long y_stride = dir * a.y_st;
#pragma unroll
  for (int i = 0; i < kAhead; ++i)
    gx_ring[i] = owner && i < len ? *reinterpret_cast<const float4*>(gx_row + i * gx_stride) : zero;
  gx_row += kAhead * gx_stride;  // the row the next load reads
  const bool default_cell = IsDefaultCell(a.cell[d]);
  if (tid == 0) {
    InitBarrier(&arrived[0], 1);
    InitBarrier(&arrived[1], 1);
    FenceBarrierInit();
    ExpectBytes(&arrived[1], step_bytes);  // step 1's h
    ExpectBytes(&arrived[0], step_bytes);  // step 2's
  }
  cluster.sync();  // every block has started, zeroed its buffers and armed its mbarriers before any push
  const uint32_t hs_shared = SharedAddress(hs), arrived_shared = SharedAddress(arrived);

  // A warp whose units all lie past H (in the last block) has nothing to compute or push, and
  // nothing waits for it: it skips the steps rather than read buffers it no longer gates.
  // (A single block has none: its U rounds H up by less than a warp's units, so all reach __syncthreads.)
  const bool warp_has_units = C == 1 || q * p.U + (tid & ~31) / (4 * S) < H;
  // One step; `gx` holds this step's projected gates on entry and step + kAhead's on exit.
  auto run_step = [&](int step, float4& gx) {
    const int cur = step & 1, next = cur ^ 1;
    if (step > 0 && C > 1) {  // step 0 reads h0, filled above; a single block meets at __syncthreads
      WaitPhase(&arrived[cur], ((step - 1) >> 1) & 1);
      if (tid == 0) ExpectBytes(&arrived[cur], step_bytes);  // its next use, step + 2
    }
    const float* hc = hs + cur * NB * KS;
    // Independent partial sums per row, so that few rows do not wait on one FMA chain of KPT.
    constexpr int kChains = NB >= 4 ? 1 : 4 / NB;
    float part[NB][kChains];
#pragma unroll
    for (int b = 0; b < NB; ++b)
#pragma unroll
      for (int ch = 0; ch < kChains; ++ch) part[b][ch] = 0.f;
#pragma unroll
    for (int j = 0; j < KPT / 4; ++j) {
      const int k = 4 * (j * S + slice);
#pragma unroll
      for (int b = 0; b < NB; ++b) {
        const float4 hv = *reinterpret_cast<const float4*>(hc + b * KS + k);
        float& sum = part[b][j % kChains];
        sum = fmaf(hv.x, w[4 * j], sum);
        sum = fmaf(hv.y, w[4 * j + 1], sum);
        sum = fmaf(hv.z, w[4 * j + 2], sum);
        sum = fmaf(hv.w, w[4 * j + 3], sum);
      }
    }
    float acc[NB];
#pragma unroll
    for (int b = 0; b < NB; ++b) {
      acc[b] = part[b][0];
#pragma unroll
      for (int ch = 1; ch < kChains; ++ch) acc[b] += part[b][ch];
    }
#pragma unroll
    for (int off = 1; off < 8; off <<= 1)
      if (off < S)
#pragma unroll
        for (int b = 0; b < NB; ++b) acc[b] += __shfl_xor_sync(0xffffffffu, acc[b], off);
    float4 mine = zero;  // gate sums (i, o, f, c) of row g4
#pragma unroll
    for (int b = 0; b < NB; ++b) {
      const float gi = __shfl_sync(0xffffffffu, acc[b], group0);
      const float go = __shfl_sync(0xffffffffu, acc[b], group0 + S);
      const float gf = __shfl_sync(0xffffffffu, acc[b], group0 + 2 * S);
      const float gc = __shfl_sync(0xffffffffu, acc[b], group0 + 3 * S);
      if (g4 == b) mine = make_float4(gi, go, gf, gc);
    }
    const bool live = owner && step < len;  // finished sequences keep their state
    if (live) {
      const float si = mine.x + gx.x + bias.x, so = mine.y + gx.y + bias.y;
      const float sf = mine.z + gx.z + bias.z, sc = mine.w + gx.w + bias.w;
      h = default_cell ? PeepholeCell<ShortChainActivations>(si, so, sf, sc, peep[0], peep[1], peep[2], c)
                       : CellUpdate(a.cell[d], si, so, sf, sc, peep[0], peep[1], peep[2], c);
    }
    // h goes out first: the other blocks wait for it; the output and the next loads do not.
    if (step + 1 < max_len && C == 1) {  // one block: plain stores and a block barrier are faster
      if (owner) hs[(next * NB + g4) * KS + u] = h;
      __syncthreads();
    } else if (step + 1 < max_len) {
      // Row b's h, from its owner, to every block: lane g4 of the group pushes to blocks g4, g4 + 4S, ...
#pragma unroll
      for (int b = 0; b < NB; ++b) {
        const float hb = __shfl_sync(0xffffffffu, h, group0 + b);
        if (b < B && unit_ok) {
          const uint32_t at = hs_shared + sizeof(float) * ((next * NB + b) * KS + u);
          for (int r = g4; r < C; r += 4 * S)
            PushFloat(InBlock(at, r), hb, InBlock(arrived_shared + sizeof(uint64_t) * next, r));
        }
      }
    }
    if (live && write_y) a.y[y_at] = FromF<T>(h);
    if (owner && step + kAhead < len) gx = *reinterpret_cast<const float4*>(gx_row);  // in flight for several steps
    y_at += y_stride;
    gx_row += gx_stride;
  };
  // Steps in rounds of kAhead, so each step's slot of `gx_ring` is a fixed register: a
  // rotating copy would wait for the load it moves.
  if (warp_has_units)
    for (int round = 0; round < max_len; round += kAhead)
#pragma unroll
      for (int i = 0; i < kAhead; ++i)
        if (round + i < max_len) run_step(round + i, gx_ring[i]);
  if (owner) {
    a.h_fin[state] = h;
    a.c_fin[state] = c;
  }
  cluster.sync();  // no block leaves while a push to it could still be in flight
#endif
}

}  // namespace lstm_ort
