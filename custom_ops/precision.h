// The one precision decision: what a call computes in (an Arithmetic) for the mode its node asks
// for (the `precision` attribute, a Precision), on one device, at one call's sizes. Both kernels
// ask it once per call plan (cpu/call_plan.h, cuda/call_plan.h) and read only its answer; Python
// asks the same function through the C entry point LstmOrtDecidePrecision
// (lstm_ort.runtime.native.decide_precision). Plain C++: the CPU's units come in as values.
#pragma once

#include <cstdint>
#include <string>

#include "lstm_ort/contract.h"
#include "mma_step_region.h"

namespace lstm_ort {

enum class Device : int32_t { kCpu = 0, kCuda };

// The reduced-precision units of a CPU that this process may use (cpu/cpu_features.h finds them
// at run time; tests fake them).
struct CpuMath {
  bool avx512_bf16 = false;  // vdpbf16ps: pairs of bf16 products summed into fp32
  bool amx_bf16 = false;     // AMX tiles with BF16 products, granted to this process by the OS
  bool amx_int8 = false;     // AMX tiles with int8 products, likewise
  // vdpbf16ps sums bf16 products at half the rate the FMAs sum fp32 ones (Intel's AVX512-BF16:
  // 0.48 a cycle on 12 chains against 2 FMAs a cycle, Xeon without AMX; a zmm of each sums 32
  // and 16 products). Without AMX such a CPU's bf16 is faster only where a step streams its
  // weights (Bf16PaysAtHalfRate).
  bool bf16_half_rate = false;
  bool Bf16() const { return avx512_bf16 || amx_bf16; }
};

// Where bf16 products at half fp32's rate still pay: a step of a few rows, whose weights stream
// from beyond L2 each step in fp32 (4H x H x 4 bytes a direction), half as many bytes in bf16.
// One thread, T=50, I=H/2, fused bf16 vs fp32 (ms; Xeon with AVX512-BF16, no AMX; stop 60, after
// the fp32 kernel's few-row products over panel pairs): bf16 wins at B1 for every H (H64 0.053 vs
// 0.058, H256 0.52 vs 0.58, H384 1.15 vs 3.04, H512 2.93 vs 8.01), at B2 from H384 on (H384 2.22
// vs 3.45, H1024 20.3 vs 32.5; H320 1.56 vs 1.53, H256 1.01 vs 0.85, H200 T24 0.31 vs 0.24), at
// B3-4 from H512 (H512 B3 6.10 vs 8.86, B4 7.99 vs 9.15, H1024 B4 T20 12.7 vs 14.7; H384 B4 4.47
// vs 4.02, H256 B3 1.55 vs 1.00), and loses at more rows (H512 B6 12.2 vs 11.8, H1024 B8 51.9 vs
// 40.1). Two threads alike (stop 57: H512 B4 4.76 vs 5.93, H1024 B1 8.3 vs 15.7).
constexpr int64_t kHalfRateBf16Rows = 1;            // bf16 at every H
constexpr int64_t kHalfRateBf16PairRows = 2;        // bf16 from kHalfRateBf16PairHidden on
constexpr int64_t kHalfRateBf16PairHidden = 384;
constexpr int64_t kHalfRateBf16StreamRows = 4;      // bf16 from kHalfRateBf16StreamHidden on
constexpr int64_t kHalfRateBf16StreamHidden = 512;
bool Bf16PaysAtHalfRate(const Dims& d);

// `auto` on CUDA runs a call as TF32 (stock's own default class) where FP32 costs time:
// - where FP32 measurably loses to stock's TF32 default: from kMinBatchForAutoTf32 rows on, and for
//   H >= kMinHiddenForAutoTf32 from kMinCellsForAutoTf32 = B*H on, where the FP32 weights stream
//   from memory every step (H100, T=100, fp32 vs best stock TF32 ms: H512 B256 3.05 vs 2.50, H1024
//   B32 1.70 vs 1.69, H1024 B64 3.09 vs 2.05, H2048 B8 4.46 vs 3.97, H2048 B32 7.37 vs 4.17; fp32
//   still wins at H2048 B4 3.74 vs 3.90, H1024 B8, H512 B128 1.64 vs 1.74, H256 B512);
// - on the stacks the tensor-core step takes in its 16-bit operands (MmaStepTakesStack,
//   mma_step_region.h), where our tf32 ran 1.5-2.2x our fastest fp32 (H100, T=100: L4 H512 B64
//   1.93 vs 3.75 ms, L8 H512 B64 2.65 vs 5.86, L3 H512 B128 2.35 vs 4.85);
// - on the stacks it takes where it runs resident (ResidentMmaStepTakesStack in tf32), where it
//   ran 1.3-2.1x our fp32 (H100, T=100: L2 H512 B64 1.24 vs 1.79 ms, L4 H256 B64 0.99 vs 1.28, L4
//   H384 B64 1.40 vs 2.93). By the sizes alone, not the device: where resident does not fit, the
//   backends before the step run tf32 no slower than fp32 (1.54 vs 1.79, 1.24 vs 1.28, 2.49 vs 2.93).
// - from kMinHiddenForAutoTf32Weights units and kMinStepsForHalfWeights steps at any batch: there
//   tf32's step reads R's 16-bit copy (cuda/heuristics.h, StepWeightsFor: TF32's significand), half
//   the bytes a step streams, where fp32's R no longer stays in L2 (H200, T=100, auto's fp32 vs
//   tf32, ms: H1536 B1 1.556 vs 0.998 (stock's best 1.40), B4 1.316 vs 1.135, B8 1.758 vs 1.627;
//   H2048 B1 2.245 vs 1.257, B2 2.453 vs 1.195, B4 2.473 vs 1.343, B7 2.976 vs 2.051; bidirectional
//   H2048 B1 3.743 vs 2.450, B4 4.216 vs 2.640; L2 H2048 B2 4.880 vs 2.357; T1000 H2048 B1 21.59 vs
//   10.39; max-abs against stock FP32 4-5e-4, stock's TF32 default's alike; at H1024, whose fp32 R
//   stays in L2, 1.03-1.17x only, and at T=10 H2048 B1 1.14x).
// - at one step (T = 1) of one direction and up to kMaxLayersForAutoTf32OneStep layers, from
//   kMinHiddenForAutoTf32OneStep units and kMinCellsForAutoTf32OneStep cells, and at any batch from
//   kMinHiddenForAutoTf32OneStepAtAnyBatch units: each layer is one product of its weights with B
//   rows, read once, which cuBLAS's TF32 GEMMs (the first layer's one GEMM of [x h]:
//   cuda/heuristics.h, PrefersGemmSteps) make faster than any of our fp32 paths, whose persistent
//   kernel loses to stock's TF32 there (H200, T=1 under onnxruntime's CUDA graph,
//   one process, us, auto's fp32 vs tf32's GEMM vs stock's TF32, s69 runs 5, 10 and 15: H512 B24
//   24.7 vs 21.4 vs 25.8, B32 25.3 vs 21.5 vs 26.0, B48 34.2 vs 22.4 vs 26.5, and fp32 ahead below:
//   B8 22.7 vs 27.3 vs 27.5, B16 23.3 vs 24.4 vs 26.2; H768 B1 28.4 vs 21.4 vs 25.4-27.6, B2
//   29.2 vs 26.6 vs 27.7-28.3, B4 37.1 vs 26.7 vs 27.8-31.4, B6 39.5 vs 27.2 vs 28.3-31.0, B8 36.8
//   vs 26.8 vs 27.7-28.6, B16 33.3 vs 26.6 vs 28.0, B24 39.3 vs 24.3 vs 28.4; H896 B6 42.6 vs 31.0
//   vs 36.1-36.2, B12 35.1 vs 28.2 vs 34.0; H1024 B1 30.4 vs 27.0 vs 29.4-32.6, B4 32.9 vs 31.8 vs
//   34.5-38.5, B12 45.5 vs 32.4 vs 38.8-39.7; stacks, s69 runs 32 and 37, auto's fp32 vs tf32 vs
//   stock's TF32: L2 H512 B32 47.7-50.4 vs 38.9 vs 42.4-45.0, B128 82.9-84.9 vs 45.4 vs 53.0-55.6;
//   L2 H768 B4 61.1-64.4 vs 49.9 vs 45.5-47.5, B16 74.2-77.6 vs 55.3 vs 51.2-52.3, B64 102 vs 51.0 vs
//   51.4-52.2; L2 H1024 B1 48.2-51.5 vs 40.9 vs 60.8, B8 90.7-90.9 vs 62.2 vs 68.4-69.3, B32 101.6 vs
//   60.3 vs 69.6-71.4; L3 H512 B64 90.5-90.8 vs 65.8 vs 63.6-66.3). Three layers take it from
//   kMinCellsForAutoTf32OneStepInDeepStacks cells, every layer's [x h] being one GEMM (s70 runs 11,
//   18 and 33, H512: B9 60.0 vs 46.8 vs 64.0, B10 60.7 vs 47.3 vs 59.8, B11 62.5-62.8 vs 49.9 vs
//   60.3-60.9, B12 61.0-62.2 vs 48.2-49.1 vs 59.8-60.8, B16 59.1-62.5 vs 47.4-55.7 vs 60.2-64.3;
//   fp32 well ahead at B8, 54.1-58.0 vs 47.0-55.2 vs 64.6-68.2, and B9 taken for the margin; two
//   layers keep the one-layer bound: B16 38.2-38.7 vs 34.7-39.2 vs 42.6-42.7). At one row cuBLAS's
//   GEMV runs fp32
//   whatever the mode. Measured up to kMaxLayersForAutoTf32OneStep layers and
//   kMaxHiddenForAutoTf32OneStep units: beyond, a step streams its fp32 weights from memory in either
//   arithmetic (OneStepRunsAsTf32).
// All within auto's stated bound, which is tf32's (docs/ops.md).
constexpr int64_t kMinBatchForAutoTf32 = 256;
constexpr int64_t kMinHiddenForAutoTf32 = 1024;
constexpr int64_t kMinCellsForAutoTf32 = 16 * 1024;
constexpr int64_t kMinHiddenForAutoTf32Weights = 1536;
constexpr int64_t kMinHiddenForAutoTf32OneStep = 512;
constexpr int64_t kMaxHiddenForAutoTf32OneStep = 1024;
constexpr int64_t kMinCellsForAutoTf32OneStep = 12 * 1024;
constexpr int64_t kMinCellsForAutoTf32OneStepInDeepStacks = 9 * 512;
constexpr int64_t kMinLayersForAutoTf32OneStepAtFewerCells = 3;
constexpr int64_t kMinHiddenForAutoTf32OneStepAtAnyBatch = 768;
constexpr int64_t kMaxLayersForAutoTf32OneStep = 3;
bool OneStepRunsAsTf32(const Dims& d);
bool AutoRunsAsTf32(const Dims& d);

struct PrecisionDecision {
  Precision requested = Precision::kFp32;
  Arithmetic runs = Arithmetic::kFp32;
  // Non-empty: this device cannot run the mode, and why (a kernel refuses the node with it).
  std::string refused;
  // What runs, in words, for reports ("fp32: the CPU has no TF32 arithmetic ...").
  std::string words;
};

// What a call of sizes `d` (H and B; on CUDA also L, D and T) computes in on `device` for the `requested` mode;
// `cpu` is read for the CPU's bf16.
//   CUDA: auto -> tf32 where AutoRunsAsTf32, else fp32; every other mode as asked.
//   CPU: fp32 -> fp32; auto, tf32 and fp16 -> fp32 (the CPU has no TF32 arithmetic, fp16 products
//        would not be faster than the fp32 ones here, and fp32 is within each mode's bound;
//        auto never takes bf16, whose bound is beyond auto's); bf16 -> bf16 where the CPU has
//        AMX-BF16, or AVX512-BF16 at full rate, or at half rate where Bf16PaysAtHalfRate (else fp32,
//        within bf16's bound); refused with the reason where it has neither.
PrecisionDecision DecidePrecision(Precision requested, Device device, const Dims& d, const CpuMath& cpu = {});

}  // namespace lstm_ort
