// The CUDA path's shape heuristics as named functions of sizes. Plain C++, so they can be
// unit-tested without a GPU; thresholds measured on an H100 unless noted.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <optional>

#include "cuda/cluster/plan.h"
#include "cuda/element_type.h"
#include "cuda/persistent/mma_operand.h"
#include "lstm_ort/contract.h"
#include "mma_step_region.h"
#include "precision.h"

namespace lstm_ort {

// A tuned winner for this GPU model and (T, B) when the node's strategy is auto, else the
// node's strategy.
Strategy StrategyForCall(Strategy configured, const std::vector<TunedStrategy>& tuned, const std::string& gpu,
                         const Dims& d);

// Whether a call's layers run on the cluster kernel (cluster/kernel.cuh) where it plans (H <= 256,
// B <= 8): always when forced; under auto up to kMaxHiddenForCluster, at every batch it plans up to
// kMaxHiddenForClusterAtAnyBatch and above that up to kMaxCellsForCluster = B*H, where the
// persistent kernel's step is bound by its grid barrier and h's trip through L2; unidirectional
// stacks only up to kMaxLayersForCluster layers (kMaxLayersForClusterAtSmallHidden up to H = 128),
// beyond which the wavefront, which overlaps layers, wins. H100, T=100, cluster vs the best other
// strategy (ms): H128 B8 0.24 vs 0.34, H64 B8 0.18 vs 0.35, H256 B2 0.25 vs 0.35, L4 H64 B1 0.30
// vs wavefront 0.45, L4 H128 B1 0.33 vs 0.38, L2 H128 B1 bi 0.19 vs 0.68; but H256 B4 0.37 vs
// 0.36, L4 H256 B1 0.64 vs wavefront 0.45.
constexpr int64_t kMaxHiddenForCluster = 256;
constexpr int64_t kMaxHiddenForClusterAtAnyBatch = 128;
constexpr int64_t kMaxCellsForCluster = 512;
constexpr int64_t kMaxLayersForCluster = 2;
constexpr int64_t kMaxLayersForClusterAtSmallHidden = 4;
bool RunsOnCluster(Strategy strategy, const Dims& d);

// One step (T = 1) under strategy auto, fp32, one direction: no recurrence to keep the weights on
// chip for, so the cluster kernel's setup (weights into registers, cluster syncs) and the
// persistent kernel's are pure cost, and v1's launches are few: split-K (and tiled, within a
// bound) multiplies the input in its step (StepProjectsInput) and v1's steps write the final
// states. H200, T=1, us under onnxruntime's CUDA graph replay (a stream's lone step; bound calls
// rank the same), v1 vs the plan before (cluster up to B = 8, else persistent or the wavefront),
// in one process, before the tiled step took the input:
// - one layer, few cells: split-K (kSplitK): H64 B8 13.0 vs 24.8, H128 B8 13.6 vs 25.8, H128 B32
//   19.7 vs 23.6, H256 B8 18.0 vs 22.8, H512 B4 23.6 vs 30.6; but H128 B64 26.9 vs 24.2, H256 B16
//   23.0 vs 23.3, H512 B8 33.1 vs 30.8, H1024 B4 49.5 vs 33.9;
// - one layer, more cells: v1 tiled (kTiled): H128 B64 23.4 vs 24.2, B128 23.3 vs 25.3, H256 B16
//   21.5 vs 23.3, B64 28.4 vs 30.3, H512 B32 32.0 vs 33.9; but H512 B128 55.6 vs 47.8;
// - two layers of few cells: split-K per layer: L2 H128 B1 21.3 vs 23.8 (wavefront), B4 26.4 vs
//   28.2; but B16 32.7 vs 30.8, H256 B4 26.6 vs 25.9;
// - a deeper or wider stack: the wavefront (kWavefront: auto without the cluster): L2 H128 B8 28.7
//   vs 43.6 (cluster), L3 H128 B8 31.1 vs 60.4.
// At T = 2 the cluster already pays at B = 1 (H128 22.7 vs split-K 24.3, before the input product).
constexpr int64_t kMaxHiddenForOneStepV1 = 512;
constexpr int64_t kMaxCellsForOneStepSplitK = 2048;               // B*H
constexpr int64_t kMaxCellsForOneStepSplitKAtSmallHidden = 4096;  // up to H = 128
constexpr int64_t kMaxHiddenForOneStepSplitKAtMoreCells = 128;
constexpr int64_t kMaxCellsForOneStepTiled = 32768;
constexpr int64_t kMaxCellsForOneStepSplitKInAStack = 512;  // two layers
Strategy OneStepStrategy(Strategy strategy, Arithmetic runs, ElementType type, const Dims& d, int64_t max_len);

// The per-step kernels v1 can use.
enum class StepKernel { kTiled, kSplitK, kGemm };

// Split-K keeps a unit's weights in registers: H = 1024 is as far as registers go.
constexpr int64_t kSplitKMaxHidden = 1024;
// v1's own choice (auto and the persistent strategies): split-K up to this batch, tiled above.
constexpr int64_t kSplitKMaxBatch = 16;

// v1's cuBLAS step (v1/gemm_step.cu) for fp32 storage, unless v1 is forced: from this H (the
// tiled kernel streams [H, 4H] weights per step through one block per 32 units) or this batch.
// Measured on an H100 (docs/ops.md).
constexpr int64_t kMinHiddenForGemmStep = 1024;
constexpr int64_t kMinBatchForGemmStep = 256;

// In tf32 (and `auto` where it runs as tf32), large fp32 calls run every layer on v1's cuBLAS
// step rather than the persistent kernels under strategy auto (fp16 and bf16 too, below): cuBLAS's TF32 GEMM beats the
// tf32 WMMA kernel from H = 256 and B*H = 64K on (H100: L4 H512 B256 9.6 -> 6.5 ms, H1024 B64
// 2.65 -> 2.0 ms), and loses below (H128 B512 0.84 -> 1.5 ms). With the 16-bit weight copies
// (StepWeightsFor) it also wins from H = 768 and B*H = 32K, where the persistent kernel holds
// the weights poorly (T=100 ms, persistent vs cuBLAS steps: L2 T200 H1024 B32 5.49 vs 4.50,
// H1024 B32 1.42 vs 1.19, H1024 B48 2.57 vs 1.26, L2 H768 B64 3.67 vs 2.24), but not below
// (H1024 B16 0.81 vs 1.16, H512 B64 0.77 vs 1.25, H256 B128 0.58 vs 1.46).
constexpr int64_t kMinHiddenForTf32GemmSteps = 256;
constexpr int64_t kMinCellsForTf32GemmSteps = 64 * 1024;
constexpr int64_t kMinHiddenForTf32GemmStepsAtFewerCells = 768;
constexpr int64_t kMinCellsForTf32GemmStepsAtLargeHidden = 32 * 1024;
// fp16 and bf16 (on their 16-bit copies) from H = 512 and 4*B*H^2 = 256M multiply-adds per step
// (T=100 ms, fp16 persistent vs cuBLAS steps: H512 B256 1.47 vs 1.28, H1024 B64 1.65 vs 1.46, L4
// H1024 B64 6.47 vs 4.95; bf16 L4 H512 B256 7.20 vs 5.39), not below, where the tensor-core
// persistent kernel holds the weights (H512 B128 1.05 vs 1.51, H256 B256 0.77 vs 1.28, L2 T200
// H1024 B32 3.95 vs 5.41).
constexpr int64_t kMinHiddenForHalfGemmSteps = 512;
constexpr int64_t kMinStepMacsForHalfGemmSteps = 256LL * 1024 * 1024;
// One step (T = 1) of one direction and up to kMaxLayersForAutoTf32OneStep layers in tf32 at H
// kMinHiddenForAutoTf32OneStep to kMaxHiddenForAutoTf32OneStep (precision.h), from
// kMinCellsForOneStepTf32GemmStep cells, at any batch from kMinHiddenForAutoTf32OneStepAtAnyBatch
// units: cuBLAS's TF32 GEMMs (the first layer's one GEMM of [x h] with [W; R]) and the cell, which
// writes the final states then (H200, T=1 under onnxruntime's CUDA graph,
// one process, us, the cuBLAS step vs the plan before: H1024 B16 38.0 vs 41.0 (persistent), B32
// 37.4 vs 47.4; H512 B32 30.5 vs 33.2, B64 30.7 vs 33.1, B128 28.3 vs 28.8; with the one GEMM, s69
// runs 5 and 15: H512 B16 24.4 vs 31.7 (tiled), H768 B2 26.6 vs 30.3, B4 26.7 vs 33.2, B8 26.8 vs
// 35.0, B16 27.3 vs 35.0, H1024 B4 31.8 vs 33.1, B8 31.8 vs 34.3, B12 32.4 vs 40.0 (persistent)).
// Below kMinCellsForOneStepTf32GemmStep at H 512-767 the tiled step's fp32 is ahead (precision.h);
// three layers take the cuBLAS step from kMinCellsForAutoTf32OneStepInDeepStacks, as auto's tf32.
constexpr int64_t kMinCellsForOneStepTf32GemmStep = 6 * 1024;
// The one-step calls those rules were measured on: one direction, up to
// kMaxLayersForAutoTf32OneStep layers (the first layer's step multiplies [x h], the others' their
// input and h apart), H kMinHiddenForAutoTf32OneStep to kMaxHiddenForAutoTf32OneStep. There tf32
// never streams its weights (StreamsStepWith): the GEMMs are faster (H768 B8 26.8 us against
// 30.3-32.5).
bool OneStepTakesGemmSteps(const Dims& d);
bool PrefersGemmSteps(Strategy strategy, Arithmetic runs, ElementType type, const Dims& d);

// Which per-step kernel v1 runs (also for layers the persistent strategies leave to v1). Unforced,
// an fp32 model takes the cuBLAS step rather than split-K from kMinHiddenForGemmStep (split-K at
// its register limit, H = 1024, loses to it and to stock's FP32 LSTM: H200, T=100, bidirectional,
// split-K vs cuBLAS step vs stock FP32, ms: B1 1.839 vs 1.423 vs 2.399, B4 3.374 vs 1.240 vs 2.351,
// B8 5.330 vs 1.635 vs 2.799, B16 10.117 vs 1.042 vs 4.482, L2 B4 6.778 vs 2.501 vs 5.116), while
// below it split-K wins (H512 B1 bi 0.385 vs 0.750, H768 B4 bi 0.617 vs 1.029).
StepKernel ChooseStepKernel(Strategy strategy, ElementType type, const Dims& d);

// The input projection's cuBLAS compute type for an fp32 model: FP32 (with the 3xTF32 split of
// ProjectsWithSplitTf32), or the call's fast TF32 / fp16 / bf16 conversions.
enum class ProjectionMath { kFp32, kTf32, kFp16, kBf16 };
ProjectionMath ProjectionMathFor(Arithmetic runs);

// Inside v1's cuBLAS step, small batches take the weight-streaming step (v1/step_stream.cuh)
// instead of cuBLAS (StreamsStepWith, below, says for which math): each weight is used by at most
// 16 rows, so a step is bound by reading the [H, 4H] weights once, and cuBLAS's FP32 kernels for
// 2-16 columns read them at well below the memory's rate (H100, T=100 H2048: B8 bi 10.1 -> 7.2 ms,
// B8 5.7 -> 4.3 ms, B16 -> 6.1). cuBLAS's GEMV for one row stays (H2048 B1 3.08 vs 3.28 ms).
// StepStreamsWeights is the shape test (it also sizes the scratch). The product is split along K
// over blocks (kStreamMaxSplits at most, kStreamMaxRowsPerSplit rows each) so that every SM
// streams; the last block of each column tile adds the splits' partial sums and runs the cell.
constexpr int64_t kStreamMinBatch = 2;
constexpr int64_t kStreamMaxBatch = 16;
constexpr int kStreamMaxSplits = 16;
constexpr int kStreamMaxRowsPerSplit = 512;
constexpr int kStreamTileCols = 128;  // columns of 4H per block: a warp's float4 per lane

// In the reduced modes (tf32, fp16, bf16) v1's cuBLAS step reads a 16-bit copy of a layer's
// recurrent weights, made once per layer and call (v1/half_weights.cuh): steps there are bound
// by reading R (H100, T=100, tf32: H2048 B8 3.65 -> 2.42 ms, B32 4.35 -> 1.98; docs/ops.md). tf32
// takes fp16 with a power-of-two scale per direction, which keeps TF32's 10-bit significand and
// puts the largest weight just under 2^15; bf16 takes bf16. Not for sequences shorter than
// kMinStepsForHalfWeights (mma_step_region.h), where the copy would not pay for itself.
enum class StepWeights { kFp32, kFp16, kBf16 };
StepWeights StepWeightsFor(ProjectionMath math, const Dims& d);

// With 16-bit weights the streaming step serves one row too (H2048 B1 tf32 1.44 ms, against
// 3.08 for fp32 on cuBLAS's GEMV) and up to kStreamMaxBatchForHalf rows; above, cuBLAS's 16-bit
// GEMM and the cell kernel are faster, its GEMM reading R at about twice the streaming kernel's
// rate (H200, T=100, streamed vs cuBLAS, ms: auto H2048 B8 2.12 vs 1.26, B8 bi 4.19 vs 2.68, B4
// 1.34 vs 1.27, H1536 B8 1.53 vs 1.09; fp16 H2048 B8 2.02 vs 1.26, H1024 B8 bi 1.40 vs 0.93;
// B2 1.19 vs 1.20).
constexpr int64_t kStreamMaxBatchForHalf = 2;
bool StepStreamsWeights(const Dims& d, StepWeights weights);
int StreamColumnTiles(int64_t H);  // blocks along 4H per direction and split
// K splits for H rows, `tiles` column tiles and D directions when the GPU holds `resident_blocks`
// of the kernel at once: as many as one wave of blocks takes (a second, partial wave cost ~25% at
// H2048: 576 blocks on 396 slots), each split at most kStreamMaxRowsPerSplit rows. Never more
// than StreamSplitsAtMost(H), which sizes the partial sums' scratch.
int StreamSplits(int H, int tiles, int D, int resident_blocks);
int StreamSplitsAtMost(int64_t H);

// fp32 input projections run as 3xTF32 (gemm/split_tf32.cuh) from this many rows (T*B) on, in
// chunks of at most kSplitChunkRows rows so the split copies stay small. B=1 (100 rows) lost 3%
// with the split, B=64 (6400 rows) gained 10-15%. Where the node's W is a constant, its halves
// are split once and kept (gemm/kept_split.h); a call then splits only x, and the split also pays
// for fewer rows once rows x layer input reaches kMinRowsTimesInputForKeptSplit (H100, 4 x H1024
// whole op, kept split against SGEMM: B64 T10 0.91x, B256 T2 0.77x, B16 T32 0.92x, 1 x H2048 B64
// T4 0.86x; below it, B64 T5 at H1024 1.19x, H512 B8 T64 1.20x, H256 B64 T4 1.22x).
constexpr int64_t kMinRowsForSplit = 1024;
constexpr int64_t kMinRowsTimesInputForKeptSplit = 512 * 1024;
constexpr int64_t kSplitChunkRows = 16384;

// The widest layer input a call can have, for the rules below that answer for a whole call.
int64_t WidestLayerInput(const Dims& d);

// `input`: the layer's input width; `weights_kept`: W's halves are kept across calls. Monotone
// in `input`, so the widest layer input answers for a call's scratch.
bool ProjectsWithSplitTf32(ElementType type, ProjectionMath math, int64_t rows, int64_t input, bool weights_kept);

// Whether v1's step of a one-step call (T = 1) multiplies layer 0's input itself
// (CallPlan::step_projects): the projection's GEMM and the split-K reduction cuBLAS adds at few
// rows (two launches, ~5 us of an H200's timeline at L1 H128 B8 against the step's 3) go, for
// weights read once either way. FP32 math only: the FMA product is the GEMM's arithmetic. The
// split-K step always; the tiled step while a block's rows times the depth (I + H) stay within
// kMaxTiledBlockDepthWithInput: its blocks run the input's product in turn with h's, where the
// GEMM spread it over the device. H200, us under onnxruntime's CUDA graph, input in the step vs
// apart, two runs each (x stock's TF32 default): H256 B32 20.3-22.7 vs 25.9-29.0 (1.24-1.28x vs
// 0.97), B64 25.1-27.3 vs 28.2-31.4 (1.04 vs 0.92), B128 28.1-28.4 vs 29.3-32.5 (0.98-1.04 vs
// 0.90), H512 B8 25.9-26.2 vs 27.2-30.8 (1.16 vs 0.97), B16 26.2-27.3 vs 28.0-31.4, B32 28.3-28.5
// vs 29.4-33.0 (1.02 vs 0.91); but H512 B64 42.2 vs 36.0-38.6 (before the x rows came through
// cp.async; 64 x 1024 is past the bound).
constexpr int64_t kMaxTiledBlockDepthWithInput = 32768;
// v1's cuBLAS step multiplies [x h] with the layer's stacked [W; R] rows in one GEMM (K = I + H),
// as stock's cuDNN call concatenates them: one GEMM and its split-K reduction fewer than the
// projection beside the step. The rows [x h] are staged with the initial states
// (state_kernels.cuh, StatesPrelude::stage), in the room the projection's output would have taken
// (4H floats a row: I <= 3H). In tf32, and in fp32 where the projection would not have split into
// 3xTF32; not where the step streams its weights (its product reads h alone).
bool StepProjectsInput(StepKernel step, ProjectionMath math, const Dims& d, int64_t max_len);
// The layers above the first of such a call stage their rows the same way, x being the h the layer
// below has just written: the projection's GEMM (and its split-K reduction) fewer per layer. One
// direction only (x's row b then lies at b*H, as the staging reads it), and the cuBLAS step only:
// its staging copies x before the layer writes its own output, which may be the same buffer (one
// buffer between layers, or Y relaying), where an FMA step reading x in place would race.
bool UpperLayersStageRows(StepKernel step, ProjectionMath math, const Dims& d, int64_t max_len);

// Whether any layer of a call splits: asked with the widest layer input. Sizes the scratch, and
// decides whether the call takes kept halves.
bool CallProjectsWithSplitTf32(ElementType type, ProjectionMath math, const Dims& d, bool weights_kept);

// TF32 projections (precision tf32, or auto resolved to it) read W's kept hi half, K-major
// (gemm/kept_split.h), once rows x layer input reaches kMinRowsTimesInputForKeptTf32 (H100,
// cuBLAS TF32, W K-major against W as stored: 512 x 2048 rows x input 1.17x, 640 x 1024 1.08x,
// 6400 x 512 1.15x, 51200 x 2048 1.15x; below it, 64 x 1024 0.77x, 512 x 128 0.81x).
constexpr int64_t kMinRowsTimesInputForKeptTf32 = 512 * 1024;
bool ProjectsFromKeptTf32(ElementType type, ProjectionMath math, int64_t rows, int64_t input);

// fp16 and bf16 projections of fp32 models multiply bfloat16 copies of x (a chunk of rows at a
// time, kSplitChunkRows) and of W's input rows, fp32 accumulation. cuBLAS's fast-16F/16BF compute
// on fp32 operands ran TF32 kernels (H100, fp16 mode, T100 H2048 B512: the projection 4.87 ms
// against 2.22 for stock's float16 GEMM on the fp16 model). bfloat16, not float16, for x: it keeps
// fp32's range (an input is not bounded as h is). Its rounding costs accuracy (fp16 mode, max-abs
// against stock FP32: 2-5e-3 against 1e-7-6e-4 before, within the mode's 2e-2).
// Where W's copy is kept across calls (a constant W, gemm/kept_split.h), a call copies only x and
// the copies pay at every size measured (H200, fp16 mode, whole call, 23 shapes of 65K to 43G
// multiply-adds, best of 2 processes: 1.00-1.21x, and L4 T1 H2048 B512 bi 0.955 -> 0.539 ms; a
// single process read 0.94-0.97x on three of the smallest, where the other read 1.12-1.21x), so
// they are taken always. Where W is fed at run time, each call copies W too, and the
// copies are taken from kMinMultiplyAddsForBf16Copies per direction (rows x layer input x 4H) on
// (whole call, fp16 mode, ms before -> after: L1 T100 H2048 B512 (430G) 10.66 -> 8.05, H1024 B512
// (215G) 3.34 -> 2.87, H2048 B64 (107G) 2.38 -> 2.00, L1 T10 H1024 B1024 (43G) 0.68 -> 0.61; but
// L1 T100 H512 B512 (54G) 1.50 -> 1.47 and L4 H512 B64 (6.7G) 1.62 -> 1.59).
constexpr int64_t kMinMultiplyAddsForBf16Copies = int64_t{1} << 35;  // 34G
bool ProjectsWithBf16Copies(ElementType type, ProjectionMath math, int64_t rows, int64_t input, int64_t gates,
                            bool weights_kept);
// Whether any layer of a call does: asked with the widest layer input; sizes the scratch.
bool CallProjectsWithBf16Copies(ElementType type, ProjectionMath math, const Dims& d, bool weights_kept);

// Which kept form of a constant W a call reads (gemm/kept_split.h): both TF32 halves where a layer
// splits for 3xTF32 with them, hi where a layer's TF32 projection reads it, the bfloat16 copy where
// an fp16/bf16 projection multiplies bfloat16 copies (ProjectsWithBf16Copies), else none. Asked
// with the widest layer input (every rule is monotone in it).
enum class KeptHalves { kNone, kHi, kBoth, kBf16 };
KeptHalves CallReadsKeptHalves(ElementType type, ProjectionMath math, const Dims& d);

// The tensor-core product the persistent ranges use for what the call `runs`, or none for the FP32 FMA
// kernel. Measured on an H100 (tools/mma_probe.py, T=100, H 256-1024, docs/ops.md): fp16 and
// bf16 operands win from one 16-row tile of batch on (1.1-1.7x over FMA); tf32 only from 256
// rows; 3xTF32 never (1.3-2x slower than FMA at every batch), so fp32 stays on FMA. fp16 models
// (storage T = float16) take fp16 tensor cores in their default mode, as stock fp16 LSTMs do.
constexpr int64_t kMinBatchForHalfMma = 16;
constexpr int64_t kMinBatchForTf32Mma = 256;
std::optional<MmaOperand> MmaOperandFor(Arithmetic runs, ElementType type, const Dims& d);

// What `auto` runs at a call's size is the one precision decision's (custom_ops/precision.h,
// DecidePrecision and AutoRunsAsTf32): the rules here take its answer, an Arithmetic.

// The tensor-core step (mma_step/plan.h) takes the recurrence under strategy auto where
// PrefersMmaStep says so, in the operand type MmaStepOperandFor gives for what the call `runs`
// (its Arithmetic, from DecidePrecision): 3xTF32 for fp32 (FP32-accurate), fp16 for tf32 (the
// power-of-two scaled copy v1's cuBLAS step reads: TF32's significand) and fp16, bf16 for bf16;
// fp16 models take fp16 (bf16 in bf16). Under auto only for fp32 models, on the stacks
// MmaStepTakesStack (mma_step_region.h, with its measurements) names for that operand.
std::optional<MmaOperand> MmaStepOperandFor(Arithmetic runs, ElementType type);
bool PrefersMmaStep(Arithmetic runs, ElementType type, const Dims& d);
// Where PrefersMmaStep says no, auto still takes the step on the stacks ResidentMmaStepTakesStack
// (mma_step_region.h) names for fp32 models running tf32 or fp16, but only where every range of the
// stack plans resident on the device (the call plan checks that): streamed, it loses there.
bool PrefersResidentMmaStep(Arithmetic runs, ElementType type, const Dims& d);

// Whether v1's cuBLAS step streams the weights for this step's math: FP32 at StepStreamsWeights'
// shapes; tf32 too up to kStreamMaxBatchForTf32 rows (not in OneStepTakesGemmSteps's calls), in fp32
// (within tf32's bound), where it beats cuBLAS's TF32 kernels (H100, H2048 T=100: B8 3.78 vs
// 3.80-4.24 ms, B8 bi 6.21 vs 6.40-6.55) and not above (B16 5.72 vs 3.94). With the cell fused in (one launch per step): fp32 B8 4.29 vs
// 4.46-4.71 ms unfused.
// With 16-bit weights (StepWeightsFor), up to kStreamMaxBatchForHalf rows in any reduced mode.
constexpr int64_t kStreamMaxBatchForTf32 = 8;
bool StreamsStepWith(ProjectionMath math, const Dims& d);

// A whole call is replayed as one CUDA graph (launch_graphs.h) up to this many steps: below it
// the host's ~5 us per launch (about 10 launches for a 2-layer stack) is most of the call. Calls
// with lengths on the host are launched directly: their copy reads host memory the graph would
// not see change.
constexpr int64_t kMaxStepsForCallGraph = 64;
bool CallGraphPays(int64_t max_len, bool host_lengths);

// Dynamic shared memory the tiled step kernel may use; its limit is raised to this once per device.
constexpr size_t kTiledSmemBudget = 200 * 1024;

// Row groups of the tiled kernel's register tile (its RG template argument: 8 or 16).
int TiledRowGroups(int B);

// The tiled kernel's K chunk: the largest multiple of its K split that fits kTiledSmemBudget,
// so one chunk whenever H allows.
int TiledChunkRows(int H, int row_groups, ElementType type);

// K values per lane of the split-K kernel (its KPL template argument): H <= 32 * KPL.
int SplitKValuesPerLane(int H);

// Blocks along the units of the split-K kernel (one warp per unit).
int SplitKUnitBlocks(int H);

// Batch rows per split-K block: rows spread over more blocks when one block per unit group
// would leave SMs idle.
int SplitKRowsPerBlock(int B, int H, int D, int sm_count);

}  // namespace lstm_ort
