// The tensor-core step (plan.h): one launch runs one interval of a range of layers (or, resident,
// one cooperative launch runs them all, the grid meeting at a barrier between them); a block
// multiplies [BM rows of x | h] . [its BN gate columns of W] on mma.sync tensor cores (fp32
// accumulation), then runs the cell on the product in registers: each thread holds two gates of a
// unit for two rows, and trades two values with its neighbour lane to hold the four gates of one.
// h leaves as the operand type for the next launch (through L2), c stays fp32 in device memory.
//
// Operands (S): __half (the fp16 copies; for fp32 storage scaled by a power of two per layer and
// direction, which the epilogue removes exactly), __nv_bfloat16, or float: 3xTF32, each operand
// split into a tf32 high and low part and three products (hi.hi + hi.lo + lo.hi), FP32-accurate.
//
// The pipeline: kMmaStepChunk rows of K per stage, cp.async'd (rows past B zero-filled) a few
// stages ahead; 16-bit fragments through ldmatrix (the weights' with .trans), tf32 ones as words.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "cuda/element_access.cuh"
#include "cuda/mma_step/args.h"
#include "cuda/persistent/grid_barrier.cuh"
#include "cuda/v1/half_scale.h"
#include "lstm_ort/cell.h"

namespace lstm_ort {
namespace mma_step {

__device__ __forceinline__ unsigned SharedAddress(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// 16 bytes from global to shared memory; zeros where `full` is false (the source is not read).
__device__ __forceinline__ void CpAsync16(void* smem, const void* gmem, bool full) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(SharedAddress(smem)), "l"(gmem),
               "r"(full ? 16 : 0));
}
__device__ __forceinline__ void CpAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void LdMatrixX4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(SharedAddress(p)));
}
__device__ __forceinline__ void LdMatrixX4Trans(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(SharedAddress(p)));
}

// c += a . b for one 16 x 8 tile over 16 k (16-bit operands).
template <typename S>
__device__ __forceinline__ void Mma16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (std::is_same_v<S, __half>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// c += a . b for one 16 x 8 tile over 8 k (tf32 operands).
__device__ __forceinline__ void MmaTf32(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// x = hi + lo, each a tf32 (round to nearest): hi + lo carries 21 of fp32's 24 significand bits.
__device__ __forceinline__ void SplitTf32(float x, uint32_t& hi, uint32_t& lo) {
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(hi) : "f"(x));
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(lo) : "f"(x - __uint_as_float(hi)));
}

// v * 2^e as two exact multiplies (each factor a normal float for |e| <= 252), where ldexpf's
// range checks would cost more on the step's path.
struct PowerOfTwo {
  float f1 = 1.f, f2 = 1.f;
  __device__ __forceinline__ explicit PowerOfTwo(int e) : f1(ldexpf(1.f, e / 2)), f2(ldexpf(1.f, e - e / 2)) {}
  __device__ __forceinline__ float operator()(float v) const { return v * f1 * f2; }
};

template <typename S>
__device__ __forceinline__ S ToOperand(float v) {
  if constexpr (std::is_same_v<S, __half>) return __float2half_rn(v);
  else if constexpr (std::is_same_v<S, __nv_bfloat16>) return __float2bfloat16_rn(v);
  else return v;
}

// Cells other than the default one (the default one stays inline): out of line, so
// the epilogue's unrolled cells do not each carry every activation.
// Returns (h, c).
__device__ __noinline__ inline float2 OtherCellUpdate(CellParams p, float gi, float go, float gf, float gc, float pi,
                                                      float po, float pf, float c) {
  const float h = CellUpdate(p, gi, go, gf, gc, pi, po, pf, c);
  return make_float2(h, c);
}

// Programmatic dependent launch (PTX griddepcontrol; no-ops where the launch did not ask for it):
// the next launch may start once every block of this one has started, and waits at
// WaitForPrevious() for this one to finish and its writes to be visible.
// Before sm_90 there is no such launch (EnqueueMmaStep asks for it only from 9.0): nothing to do.
__device__ __forceinline__ void LetNextStart() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void WaitForPrevious() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

// One block's tile of one interval, for both kernels below. kResident: the block's weight columns
// (every K row) stay in shared memory at `w_res` for the whole call, loaded once by
// MmaStepResidentKernel; else they stream from L2 through the pipeline's stages with the rows.
template <typename T, typename S, int BM, int BN, int WARPS_M, int WARPS_N, int KSPLIT, bool kResident>
__device__ __forceinline__ void StepTile(const MmaStepArgs<T>& a, const int interval, unsigned char* mma_step_smem,
                                         const S* w_res) {
  constexpr int kWarpsMN = WARPS_M * WARPS_N;
  constexpr int kThreads = kWarpsMN * KSPLIT * 32;
  constexpr int WM = BM / WARPS_M, WN = BN / WARPS_N;
  constexpr int MT = WM / 16, NT = WN / 8;  // 16 x 8 product tiles per warp
  static_assert(WM % 16 == 0 && WN % 16 == 0, "warp tiles of whole 16 x 16 blocks");
  constexpr bool kTf32 = std::is_same_v<S, float>;
  constexpr int kBytes = sizeof(S);
  constexpr int kChunk = kMmaStepChunk;
  constexpr int kKStep = kTf32 ? 8 : 16;
  static_assert(kChunk % (kKStep * KSPLIT) == 0, "every warp group takes whole k steps of each chunk");
  constexpr int kStages = MmaStepStages(kBytes);
  constexpr int kAS = MmaStepAStride(kBytes), kWS = MmaStepWStride(BN);
  constexpr int kVec = 16 / kBytes;  // elements per 16-byte copy
  constexpr int kRowCopies = kChunk / kVec, kColCopies = BN / kVec;
  // 16-byte pieces per thread and stage; with more threads than pieces, the first threads copy.
  constexpr int kACopies = (BM * kRowCopies + kThreads - 1) / kThreads;
  constexpr int kWCopies = (kChunk * kColCopies + kThreads - 1) / kThreads;
  static_assert((BM * kRowCopies) % kThreads == 0 || kACopies == 1, "whole rounds of pieces, or one");
  static_assert((kChunk * kColCopies) % kThreads == 0 || kWCopies == 1, "whole rounds of pieces, or one");
  constexpr bool kEveryACopies = (BM * kRowCopies) % kThreads == 0;
  constexpr bool kEveryWCopies = (kChunk * kColCopies) % kThreads == 0;

  S* const a_s = reinterpret_cast<S*>(mma_step_smem);  // [stages][BM][kAS]
  S* const w_s = a_s + kStages * BM * kAS;               // [stages][kChunk][kWS]; not kResident

  const int H = a.H, B = a.B, G = 4 * H;
  const int r = blockIdx.y / a.D, d = blockIdx.y - r * a.D;
  const int step = interval - r;
  if (step < 0 || step >= a.max_len) return;  // this layer is not in this interval
  if constexpr (!kResident) LetNextStart();
  const int n_tiles = G / BN;
  const int m0 = (blockIdx.x / n_tiles) * BM, n0 = (blockIdx.x % n_tiles) * BN;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int q = warp / kWarpsMN, wmn = warp - q * kWarpsMN;  // warp group, warp within it
  const int wm = wmn / WARPS_N, wn = wmn - wm * WARPS_N;
  const int g = lane >> 2, tq = lane & 3;

  const long long plane = static_cast<long long>(B) * H;
  const long long parity_plane = static_cast<long long>(a.layers) * a.D * plane;
  const S* const hop_in = static_cast<const S*>(a.hop) + ((interval + 1) & 1) * parity_plane;
  S* const hop_out = static_cast<S*>(a.hop) + (interval & 1) * parity_plane + (r * a.D + d) * plane;
  const S* const h_src = hop_in + (r * a.D + d) * plane;
  const S* const x_src = r > 0 ? hop_in + (r - 1) * plane : h_src;  // above the first layer D == 1
  const S* const w = static_cast<const S*>(a.w[r][d]) + n0;
  const int kx = a.in_rows[r];
  const bool first_step = step == 0;
  const int K = first_step && a.skip_h0 ? kx : kx + H;
  const int n_chunks = K / kChunk;
  // Exponents of the scaled fp16 copies: the weights', and initial h's at the first step.
  const int w_exp = a.exps ? a.exps[r * a.D + d] : 0;
  const int h0_exp = a.exps && first_step && !a.skip_h0 ? a.exps[kMmaStepH0Exps + r * a.D + d] : 0;

  // This thread's 16-byte pieces of each stage: where they land, and their rows' offsets.
  int a_smem[kACopies], a_row[kACopies], w_smem[kWCopies], w_row[kWCopies];
  bool a_full[kACopies];
#pragma unroll
  for (int j = 0; j < kACopies; ++j) {
    const int i = tid + j * kThreads, row = i / kRowCopies, v = i - row * kRowCopies, b = m0 + row;
    a_smem[j] = row * kAS + v * kVec;
    a_full[j] = b < B;
    a_row[j] = (b < B ? b : 0) * H + v * kVec;  // rows past B read nothing (zero-filled)
  }
#pragma unroll
  for (int j = 0; j < kWCopies; ++j) {
    const int i = tid + j * kThreads, row = i / kColCopies, v = i - row * kColCopies;
    w_smem[j] = row * kWS + v * kVec;
    w_row[j] = row * G + v * kVec;
  }
  // Chunk kc (kChunk rows of K) into pipeline stage `stage`: its weight rows for the block's
  // columns (constant: copied before the previous launch has finished), and its x or h rows for
  // the block's batch rows.
  const bool copies_a = kEveryACopies || tid < BM * kRowCopies;
  const bool copies_w = kEveryWCopies || tid < kChunk * kColCopies;
  auto load_weights = [&](int kc, int stage) {
    if constexpr (kResident) return;
    const S* src = w + static_cast<long long>(kc) * kChunk * G;
    S* ws = w_s + stage * kChunk * kWS;
#pragma unroll
    for (int j = 0; j < kWCopies; ++j)
      if (copies_w) CpAsync16(ws + w_smem[j], src + w_row[j], true);
  };
  auto load_rows = [&](int kc, int stage) {
    const int k0 = kc * kChunk;
    const S* src = k0 < kx ? x_src + k0 : h_src + (k0 - kx);  // row b at src + b * H
    S* as = a_s + stage * BM * kAS;
#pragma unroll
    for (int j = 0; j < kACopies; ++j)
      if (copies_a) CpAsync16(as + a_smem[j], src + a_row[j], a_full[j]);
  };

  // The cells' inputs, loaded now so that they arrive during the product: thread (g, tq) of warp
  // group 0 finishes row g + 8 (tq & 1) of each 16-row tile and unit tq >> 1 of each 8-column tile.
  const long long state = (r * a.D + d) * plane;
  const int row0 = wm * WM + g + (tq & 1) * 8;
  const int unit0 = (n0 + wn * WN) / 4 + (tq >> 1);
  int len[MT];
  float4 gin[MT][NT];
  float cin[MT][NT];
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s)
    if (s < n_chunks) load_weights(s, s);
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    const int b = m0 + row0 + mt * 16;
    len[mt] = b < B && q == 0 ? a.lens[b] : 0;
    const int t = a.reverse[d] ? len[mt] - 1 - step : step;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      gin[mt][nt] = make_float4(0.f, 0.f, 0.f, 0.f);
      if (r == 0 && step < len[mt])
        gin[mt][nt] = *reinterpret_cast<const float4*>(a.gx[d] + (t * a.gx_st + b * a.gx_sb) * static_cast<long long>(G) +
                                                       4LL * (unit0 + nt * 2));
    }
  }
  if constexpr (!kResident) WaitForPrevious();  // h and c of the previous interval (resident: the grid barrier)
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    const int b = m0 + row0 + mt * 16;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
      cin[mt][nt] = step < len[mt] ? a.c[state + static_cast<long long>(b) * H + unit0 + nt * 2] : 0.f;
  }

  float acc[MT][NT][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mt][nt][e] = 0.f;

  // Stage s's group holds its rows (and, for the first, every prologue stage's weights).
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < n_chunks) load_rows(s, s);
    CpAsyncCommit();
  }
  for (int kc = 0; kc < n_chunks; ++kc) {
    CpAsyncWait<kStages - 2>();
    __syncthreads();  // chunk kc has landed for every thread; chunk kc - 1's stage is free
    {
      const int next = kc + kStages - 1;
      if (next < n_chunks) {
        load_weights(next, next % kStages);
        load_rows(next, next % kStages);
      }
      CpAsyncCommit();
    }
    if (h0_exp && kc * kChunk == kx) {
      // Initial h's copy is scaled by 2^h0_exp: the input rows' sum so far takes the same scale,
      // removed with the weights' after the last chunk (powers of two: exact).
      const PowerOfTwo scale(h0_exp);
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) acc[mt][nt][e] = scale(acc[mt][nt][e]);
    }
    const S* as = a_s + (kc % kStages) * BM * kAS + (wm * WM) * kAS;
    const S* ws = (kResident ? w_res + kc * kChunk * kWS : w_s + (kc % kStages) * kChunk * kWS) + wn * WN;
    if constexpr (kTf32) {
#pragma unroll
      for (int i = 0; i < kChunk / (kKStep * KSPLIT); ++i) {
        const int kk = (i * KSPLIT + q) * kKStep;
        uint32_t a_hi[MT][4], a_lo[MT][4], b_hi[NT][2], b_lo[NT][2];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          const S* p = as + (mt * 16 + g) * kAS + kk + tq;
          SplitTf32(p[0], a_hi[mt][0], a_lo[mt][0]);
          SplitTf32(p[8 * kAS], a_hi[mt][1], a_lo[mt][1]);
          SplitTf32(p[4], a_hi[mt][2], a_lo[mt][2]);
          SplitTf32(p[8 * kAS + 4], a_hi[mt][3], a_lo[mt][3]);
        }
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          const S* p = ws + (kk + tq) * kWS + nt * 8 + g;
          SplitTf32(p[0], b_hi[nt][0], b_lo[nt][0]);
          SplitTf32(p[4 * kWS], b_hi[nt][1], b_lo[nt][1]);
        }
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int nt = 0; nt < NT; ++nt) {  // small terms first
            MmaTf32(acc[mt][nt], a_lo[mt], b_hi[nt][0], b_hi[nt][1]);
            MmaTf32(acc[mt][nt], a_hi[mt], b_lo[nt][0], b_lo[nt][1]);
            MmaTf32(acc[mt][nt], a_hi[mt], b_hi[nt][0], b_hi[nt][1]);
          }
      }
    } else {
#pragma unroll
      for (int i = 0; i < kChunk / (kKStep * KSPLIT); ++i) {
        const int kk = (i * KSPLIT + q) * kKStep;
        uint32_t af[MT][4], bf[NT][2];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) LdMatrixX4(af[mt], as + (mt * 16 + (lane & 15)) * kAS + kk + (lane >> 4) * 8);
#pragma unroll
        for (int np = 0; np < NT / 2; ++np) {
          uint32_t m[4];
          LdMatrixX4Trans(m, ws + (kk + (lane & 7) + ((lane >> 3) & 1) * 8) * kWS + np * 16 + (lane >> 4) * 8);
          bf[2 * np][0] = m[0];
          bf[2 * np][1] = m[1];
          bf[2 * np + 1][0] = m[2];
          bf[2 * np + 1][1] = m[3];
        }
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int nt = 0; nt < NT; ++nt) Mma16<S>(acc[mt][nt], af[mt], bf[nt][0], bf[nt][1]);
      }
    }
  }
  CpAsyncWait<0>();
  if constexpr (KSPLIT > 1) {
    // The other warp groups' sums to group 0, through the pipeline's shared memory.
    float4* red = reinterpret_cast<float4*>(mma_step_smem);
    __syncthreads();  // every group is done with the stages
    if (q > 0) {
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
          red[(((q - 1) * kWarpsMN + wmn) * MT * NT + mt * NT + nt) * 32 + lane] =
              make_float4(acc[mt][nt][0], acc[mt][nt][1], acc[mt][nt][2], acc[mt][nt][3]);
    }
    __syncthreads();
    if (q > 0) return;
#pragma unroll
    for (int o = 1; o < KSPLIT; ++o)
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          const float4 v = red[(((o - 1) * kWarpsMN + wmn) * MT * NT + mt * NT + nt) * 32 + lane];
          acc[mt][nt][0] += v.x;
          acc[mt][nt][1] += v.y;
          acc[mt][nt][2] += v.z;
          acc[mt][nt][3] += v.w;
        }
  }

  // The cells. Lane pairs (tq, tq ^ 1) hold the same unit: even lanes its gates i, o (columns
  // 4u, 4u + 1) for rows g and g + 8, odd lanes f and c; the even lane finishes row g, the odd row
  // g + 8.
  const int unscale = -(w_exp + h0_exp);
  const PowerOfTwo unscaled(unscale);
  const T* const bias = a.bias[r][d];
  const T* const peep = a.peep[r][d];
  const CellParams& cell = a.cell[d];
  const bool default_cell = IsDefaultCell(cell);
  const bool writes_y = a.y && r == a.layers - 1;
  const bool odd = tq & 1;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    const int b = m0 + row0 + mt * 16;
    const bool active = step < len[mt];
    const int t = a.reverse[d] ? len[mt] - 1 - step : step;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      float v[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) v[e] = unscale ? unscaled(acc[mt][nt][e]) : acc[mt][nt][e];
      const float s0 = __shfl_xor_sync(0xffffffffu, odd ? v[0] : v[2], 1);
      const float s1 = __shfl_xor_sync(0xffffffffu, odd ? v[1] : v[3], 1);
      if (b >= B) continue;
      const int u = unit0 + nt * 2;
      const long long at = static_cast<long long>(b) * H + u;
      if (!active) {  // a finished sequence keeps its state; its h rows are not read again
        hop_out[at] = ToOperand<S>(0.f);
        continue;
      }
      float4 gate = gin[mt][nt];
      gate.x += odd ? s0 : v[0];
      gate.y += odd ? s1 : v[1];
      gate.z += odd ? v[2] : s0;
      gate.w += odd ? v[3] : s1;
      if (bias) {
        const float4 bv = Load4(bias + 4LL * u);
        gate.x += bv.x;
        gate.y += bv.y;
        gate.z += bv.z;
        gate.w += bv.w;
      }
      float pi = 0.f, po = 0.f, pf = 0.f;
      if (peep) {
        pi = ToF(peep[u]);
        po = ToF(peep[H + u]);
        pf = ToF(peep[2 * H + u]);
      }
      float c = cin[mt][nt];
      float h;
      if (default_cell) {
        h = DefaultCellUpdate(gate.x, gate.y, gate.z, gate.w, pi, po, pf, c);
      } else {
        const float2 hc = OtherCellUpdate(cell, gate.x, gate.y, gate.z, gate.w, pi, po, pf, c);
        h = hc.x;
        c = hc.y;
      }
      a.c[state + at] = c;
      hop_out[at] = ToOperand<S>(h);
      if (writes_y) a.y[t * a.y_st + d * a.y_sd + b * a.y_sb + u] = FromF<T>(h);
      if (step == len[mt] - 1) a.h_fin[state + at] = h;
    }
  }
}

// One launch per interval: the weights stream from L2 with the rows.
template <typename T, typename S, int BM, int BN, int WARPS_M, int WARPS_N, int KSPLIT>
__global__ void __launch_bounds__(WARPS_M* WARPS_N* KSPLIT * 32) MmaStepKernel(MmaStepArgs<T> a) {
  extern __shared__ __align__(16) unsigned char mma_step_smem[];
  StepTile<T, S, BM, BN, WARPS_M, WARPS_N, KSPLIT, false>(a, a.interval, mma_step_smem, nullptr);
}

// One cooperative launch for every interval (MmaStepPlan::resident): each block loads its weight
// columns into shared memory once, then runs its tile of each interval, the grid meeting at a
// barrier between intervals instead of at a launch boundary. Its reads of h then are the rows
// alone: half what a block of the seed's stack (L4 H512 B64) reads per interval.
template <typename T, typename S, int BM, int BN, int WARPS_M, int WARPS_N, int KSPLIT>
__global__ void __launch_bounds__(WARPS_M* WARPS_N* KSPLIT * 32) MmaStepResidentKernel(MmaStepArgs<T> a) {
  extern __shared__ __align__(16) unsigned char mma_step_smem[];
  constexpr int kThreads = WARPS_M * WARPS_N * KSPLIT * 32;
  constexpr int kBytes = sizeof(S);
  constexpr int kVec = 16 / kBytes, kColCopies = BN / kVec, kWS = MmaStepWStride(BN);
  S* const w_res = reinterpret_cast<S*>(mma_step_smem + MmaStepResidentRowBytes(kBytes, BM, BN, KSPLIT));
  const int G = 4 * a.H, r = blockIdx.y / a.D, d = blockIdx.y - r * a.D;
  const int n0 = (blockIdx.x % (G / BN)) * BN;
  const S* const w = static_cast<const S*>(a.w[r][d]) + n0;
  const int pieces = (a.in_rows[r] + a.H) * kColCopies;
  for (int i = threadIdx.x; i < pieces; i += kThreads) {
    const int row = i / kColCopies, v = i - row * kColCopies;
    CpAsync16(w_res + row * kWS + v * kVec, w + static_cast<long long>(row) * G + v * kVec, true);
  }
  CpAsyncCommit();
  CpAsyncWait<0>();
  __syncthreads();
  const unsigned blocks = gridDim.x * gridDim.y;
  const int intervals = a.max_len + a.layers - 1;
  for (int s = 0; s < intervals; ++s) {
    StepTile<T, S, BM, BN, WARPS_M, WARPS_N, KSPLIT, true>(a, s, mma_step_smem, w_res);
    if (s + 1 < intervals) GridBarrier(a.barrier, blocks * (s + 1));
  }
}

// What a range's launches read besides the call's buffers, made before the first: the weights as
// the operand type and initial h as it (each a list of segments, blockIdx.y = segment).
struct OperandSegments {
  const void* src[2 * kMaxMmaStepLayers];
  void* dst[2 * kMaxMmaStepLayers];
  long long n[2 * kMaxMmaStepLayers];
  int slot[2 * kMaxMmaStepLayers];  // exponent slot (args.h) of segment i, for scaled copies
};

template <typename Tin>
__global__ void SegmentAbsMax(OperandSegments s, unsigned* amax) {
  const int i = blockIdx.y;
  const Tin* src = static_cast<const Tin*>(s.src[i]);
  unsigned m = 0;
  for (long long k = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; k < s.n[i];
       k += static_cast<long long>(gridDim.x) * blockDim.x)
    m = max(m, __float_as_uint(fabsf(ToF(src[k]))));
  for (int off = 16; off > 0; off /= 2) m = max(m, __shfl_xor_sync(0xffffffffu, m, off));
  if (threadIdx.x % 32 == 0 && m) atomicMax(amax + s.slot[i], m);
}

// dst = src * 2^e as S, e from amax (scaled copies; exps gets it) or 0.
template <typename Tin, typename S>
__global__ void SegmentToOperand(OperandSegments s, const unsigned* amax, int* exps) {
  const int i = blockIdx.y;
  const int e = amax ? HalfScaleExponent(amax[s.slot[i]]) : 0;
  if (exps && blockIdx.x == 0 && threadIdx.x == 0) exps[s.slot[i]] = e;
  const Tin* src = static_cast<const Tin*>(s.src[i]);
  S* dst = static_cast<S*>(s.dst[i]);
  for (long long k = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; k < s.n[i];
       k += static_cast<long long>(gridDim.x) * blockDim.x)
    dst[k] = ToOperand<S>(e ? ldexpf(ToF(src[k]), e) : ToF(src[k]));
}

}  // namespace mma_step
}  // namespace lstm_ort
