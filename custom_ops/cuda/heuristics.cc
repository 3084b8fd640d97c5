#include "cuda/heuristics.h"

#include <algorithm>

#include "cuda/mma_step/plan.h"
#include "cuda/v1/step_shapes.h"

namespace lstm_ort {

Strategy StrategyForCall(Strategy configured, const std::vector<TunedStrategy>& tuned, const std::string& gpu,
                         const Dims& d) {
  if (configured != Strategy::kAuto) return configured;
  for (const TunedStrategy& t : tuned)
    if (t.T == d.T && t.B == d.B && t.gpu == gpu) return t.strategy;
  return configured;
}

bool RunsOnCluster(Strategy strategy, const Dims& d) {
  if (strategy == Strategy::kCluster) return true;
  if (strategy != Strategy::kAuto || d.H > kMaxHiddenForCluster || d.B > kClusterMaxBatch) return false;
  const bool small_hidden = d.H <= kMaxHiddenForClusterAtAnyBatch;
  if (!small_hidden && d.B * d.H > kMaxCellsForCluster) return false;
  return d.D == 2 || d.L <= (small_hidden ? kMaxLayersForClusterAtSmallHidden : kMaxLayersForCluster);
}

Strategy OneStepStrategy(Strategy strategy, Arithmetic runs, ElementType type, const Dims& d, int64_t max_len) {
  if (strategy != Strategy::kAuto || max_len != 1 || d.D != 1 || type != ElementType::kFloat32 ||
      runs != Arithmetic::kFp32)
    return strategy;
  const int64_t cells = d.B * d.H;
  if (d.L == 2 && cells <= kMaxCellsForOneStepSplitKInAStack) return Strategy::kSplitK;
  if (d.L > 1) return Strategy::kWavefront;
  if (d.H > kMaxHiddenForOneStepV1) return strategy;
  if (cells <= kMaxCellsForOneStepSplitK ||
      (d.H <= kMaxHiddenForOneStepSplitKAtMoreCells && cells <= kMaxCellsForOneStepSplitKAtSmallHidden))
    return Strategy::kSplitK;
  return cells <= kMaxCellsForOneStepTiled ? Strategy::kTiled : strategy;
}

StepKernel ChooseStepKernel(Strategy strategy, ElementType type, const Dims& d) {
  if (strategy == Strategy::kSplitK && d.H <= kSplitKMaxHidden) return StepKernel::kSplitK;
  if (strategy == Strategy::kTiled || strategy == Strategy::kSplitK) return StepKernel::kTiled;
  const bool gemm = type == ElementType::kFloat32 && (d.H >= kMinHiddenForGemmStep || d.B >= kMinBatchForGemmStep);
  if (d.B <= kSplitKMaxBatch && d.H <= kSplitKMaxHidden && !gemm) return StepKernel::kSplitK;
  if (gemm) return StepKernel::kGemm;
  return StepKernel::kTiled;
}

bool StepProjectsInput(StepKernel step, ProjectionMath math, const Dims& d, int64_t max_len) {
  if (d.T != 1 || max_len != 1) return false;
  if (step == StepKernel::kGemm) {
    const bool one_gemm = math == ProjectionMath::kTf32 ||
                          (math == ProjectionMath::kFp32 && !ProjectsWithSplitTf32(ElementType::kFloat32, math, d.B,
                                                                                   d.I, /*weights_kept=*/true));
    return one_gemm && !StreamsStepWith(math, d) && d.I <= (kGates - 1) * d.H;
  }
  if (math != ProjectionMath::kFp32) return false;
  if (step == StepKernel::kSplitK) return true;
  const int64_t block_rows = TiledBlockRows(TiledRowGroups(static_cast<int>(d.B)));  // every one multiplied
  return step == StepKernel::kTiled && block_rows * (d.I + d.H) <= kMaxTiledBlockDepthWithInput;
}

bool UpperLayersStageRows(StepKernel step, ProjectionMath math, const Dims& d, int64_t max_len) {
  if (step != StepKernel::kGemm || d.D != 1 || d.L < 2) return false;
  Dims upper = d;
  upper.I = d.LayerInput(1);
  return StepProjectsInput(step, math, upper, max_len);
}

bool ProjectsWithSplitTf32(ElementType type, ProjectionMath math, int64_t rows, int64_t input, bool weights_kept) {
  if (type != ElementType::kFloat32 || math != ProjectionMath::kFp32) return false;
  return rows >= kMinRowsForSplit || (weights_kept && rows * input >= kMinRowsTimesInputForKeptSplit);
}

int64_t WidestLayerInput(const Dims& d) { return std::max(d.I, d.D * d.H); }

bool CallProjectsWithSplitTf32(ElementType type, ProjectionMath math, const Dims& d, bool weights_kept) {
  return ProjectsWithSplitTf32(type, math, d.T * d.B, WidestLayerInput(d), weights_kept);
}

bool ProjectsFromKeptTf32(ElementType type, ProjectionMath math, int64_t rows, int64_t input) {
  return type == ElementType::kFloat32 && math == ProjectionMath::kTf32 &&
         rows * input >= kMinRowsTimesInputForKeptTf32;
}

bool ProjectsWithBf16Copies(ElementType type, ProjectionMath math, int64_t rows, int64_t input, int64_t gates,
                            bool weights_kept) {
  return type == ElementType::kFloat32 && (math == ProjectionMath::kFp16 || math == ProjectionMath::kBf16) &&
         (weights_kept || rows * input * gates >= kMinMultiplyAddsForBf16Copies);
}

bool CallProjectsWithBf16Copies(ElementType type, ProjectionMath math, const Dims& d, bool weights_kept) {
  return ProjectsWithBf16Copies(type, math, d.T * d.B, WidestLayerInput(d), kGates * d.H, weights_kept);
}

KeptHalves CallReadsKeptHalves(ElementType type, ProjectionMath math, const Dims& d) {
  if (CallProjectsWithSplitTf32(type, math, d, true)) return KeptHalves::kBoth;
  if (ProjectsFromKeptTf32(type, math, d.T * d.B, WidestLayerInput(d)))
    return KeptHalves::kHi;
  if (CallProjectsWithBf16Copies(type, math, d, true)) return KeptHalves::kBf16;
  return KeptHalves::kNone;
}

std::optional<MmaOperand> MmaOperandFor(Arithmetic runs, ElementType type, const Dims& d) {
  const bool half_batch = d.B >= kMinBatchForHalfMma;
  if (type == ElementType::kFloat16) {
    if (runs == Arithmetic::kBf16) return half_batch ? std::optional<MmaOperand>(MmaOperand::kBf16) : std::nullopt;
    return half_batch ? std::optional<MmaOperand>(MmaOperand::kFp16) : std::nullopt;
  }
  switch (runs) {
    case Arithmetic::kFp16: return half_batch ? std::optional<MmaOperand>(MmaOperand::kFp16) : std::nullopt;
    case Arithmetic::kBf16: return half_batch ? std::optional<MmaOperand>(MmaOperand::kBf16) : std::nullopt;
    case Arithmetic::kTf32: return d.B >= kMinBatchForTf32Mma ? std::optional<MmaOperand>(MmaOperand::kTf32) : std::nullopt;
    case Arithmetic::kFp32: break;
  }
  return std::nullopt;
}

bool OneStepTakesGemmSteps(const Dims& d) {
  return d.T == 1 && d.L <= kMaxLayersForAutoTf32OneStep && d.D == 1 && d.H >= kMinHiddenForAutoTf32OneStep &&
         d.H <= kMaxHiddenForAutoTf32OneStep;
}

bool PrefersGemmSteps(Strategy strategy, Arithmetic runs, ElementType type, const Dims& d) {
  if (strategy != Strategy::kAuto || type != ElementType::kFloat32) return false;
  const bool half_weights = StepWeightsFor(ProjectionMathFor(runs), d) != StepWeights::kFp32;
  const int64_t cells = d.B * d.H;
  if (runs == Arithmetic::kFp16 || runs == Arithmetic::kBf16)
    return half_weights && d.H >= kMinHiddenForHalfGemmSteps && kGates * cells * d.H >= kMinStepMacsForHalfGemmSteps;
  if (runs != Arithmetic::kTf32) return false;
  const bool one_step = OneStepTakesGemmSteps(d) &&
                        (d.H >= kMinHiddenForAutoTf32OneStepAtAnyBatch || cells >= kMinCellsForOneStepTf32GemmStep ||
                         (d.L >= kMinLayersForAutoTf32OneStepAtFewerCells && cells >= kMinCellsForAutoTf32OneStepInDeepStacks));
  return one_step || (d.H >= kMinHiddenForTf32GemmSteps && cells >= kMinCellsForTf32GemmSteps) ||
         (half_weights && d.H >= kMinHiddenForTf32GemmStepsAtFewerCells &&
          cells >= kMinCellsForTf32GemmStepsAtLargeHidden);
}

std::optional<MmaOperand> MmaStepOperandFor(Arithmetic runs, ElementType type) {
  if (runs == Arithmetic::kBf16) return MmaOperand::kBf16;
  if (type == ElementType::kFloat16) return MmaOperand::kFp16;
  switch (runs) {
    case Arithmetic::kFp32: return MmaOperand::kTf32x3;
    case Arithmetic::kTf32:
    case Arithmetic::kFp16: return MmaOperand::kFp16;
    case Arithmetic::kBf16: break;
  }
  return std::nullopt;
}

bool PrefersMmaStep(Arithmetic runs, ElementType type, const Dims& d) {
  const std::optional<MmaOperand> op = MmaStepOperandFor(runs, type);
  return op && type == ElementType::kFloat32 && MmaStepTakesStack(d, *op == MmaOperand::kTf32x3);
}

bool PrefersResidentMmaStep(Arithmetic runs, ElementType type, const Dims& d) {
  // Measured in the fp16 operands that tf32 and fp16 take on fp32 models.
  const std::optional<MmaOperand> op = MmaStepOperandFor(runs, type);
  return type == ElementType::kFloat32 && op == MmaOperand::kFp16 &&
         ResidentMmaStepTakesStack(d, /*fp16_runs=*/runs == Arithmetic::kFp16);
}

StepWeights StepWeightsFor(ProjectionMath math, const Dims& d) {
  if (math == ProjectionMath::kFp32 || d.T < kMinStepsForHalfWeights) return StepWeights::kFp32;
  return math == ProjectionMath::kBf16 ? StepWeights::kBf16 : StepWeights::kFp16;
}

bool StepStreamsWeights(const Dims& d, StepWeights weights) {
  const int64_t max_hidden = static_cast<int64_t>(kStreamMaxSplits) * kStreamMaxRowsPerSplit;  // h fits a split
  const bool fp32 = weights == StepWeights::kFp32;
  const int64_t min_batch = fp32 ? kStreamMinBatch : 1, max_batch = fp32 ? kStreamMaxBatch : kStreamMaxBatchForHalf;
  return d.B >= min_batch && d.B <= max_batch && d.H <= max_hidden;
}

bool StreamsStepWith(ProjectionMath math, const Dims& d) {
  const StepWeights weights = StepWeightsFor(math, d);
  if (weights != StepWeights::kFp32) return StepStreamsWeights(d, weights);
  const bool math_streams = math == ProjectionMath::kFp32 ||
                            (math == ProjectionMath::kTf32 && d.B <= kStreamMaxBatchForTf32 && !OneStepTakesGemmSteps(d));
  return math_streams && StepStreamsWeights(d, weights);
}

int StreamColumnTiles(int64_t H) {
  return static_cast<int>((kGates * H + kStreamTileCols - 1) / kStreamTileCols);
}

int StreamSplitsAtMost(int64_t H) {
  return static_cast<int>(std::min<int64_t>(kStreamMaxSplits, std::max<int64_t>(1, H / 32)));
}

int StreamSplits(int H, int tiles, int D, int resident_blocks) {
  const int for_rows = (H + kStreamMaxRowsPerSplit - 1) / kStreamMaxRowsPerSplit;
  const int one_wave = std::max(1, resident_blocks / (tiles * D));
  return std::max(for_rows, std::min(one_wave, StreamSplitsAtMost(H)));
}

ProjectionMath ProjectionMathFor(Arithmetic runs) {
  switch (runs) {
    case Arithmetic::kTf32: return ProjectionMath::kTf32;
    case Arithmetic::kFp16: return ProjectionMath::kFp16;
    case Arithmetic::kBf16: return ProjectionMath::kBf16;
    case Arithmetic::kFp32: break;
  }
  return ProjectionMath::kFp32;
}

bool CallGraphPays(int64_t max_len, bool host_lengths) {
  return !host_lengths && max_len >= 1 && max_len <= kMaxStepsForCallGraph;
}

int TiledRowGroups(int B) { return B <= 32 ? 8 : 16; }

int TiledChunkRows(int H, int row_groups, ElementType type) {
  const int align = TiledKSplit(row_groups);
  int kc = (H + align - 1) / align * align;
  while (kc > align && TiledSmemBytes(kc, H, row_groups, ElementBytes(type)) > kTiledSmemBudget) kc -= align;
  return kc;
}

int SplitKValuesPerLane(int H) {
  if (H <= 32) return 1;
  if (H <= 64) return 2;
  if (H <= 128) return 4;
  if (H <= 256) return 8;
  if (H <= 512) return 16;
  return 32;
}

int SplitKUnitBlocks(int H) { return (H + kSplitKWarps - 1) / kSplitKWarps; }

int SplitKRowsPerBlock(int B, int H, int D, int sm_count) {
  const int blocks_x = SplitKUnitBlocks(H);
  const int split = std::max(1, std::min(B, (sm_count + blocks_x * D - 1) / (blocks_x * D)));
  return (B + split - 1) / split;
}

}  // namespace lstm_ort
