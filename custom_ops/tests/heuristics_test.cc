// The CUDA path's named heuristics (cuda/heuristics.cc) at their boundaries.
#include <cmath>
#include <cstring>
#include <limits>

#include "check.h"
#include "cuda/heuristics.h"
#include "cuda/v1/half_scale.h"
#include "cuda/v1/step_shapes.h"

using namespace lstm_ort;

namespace {

Dims Sizes(int64_t B, int64_t H) {
  Dims d;
  d.T = 10;
  d.B = B;
  d.H = H;
  d.I = 8;
  return d;
}

// What a mode runs on CUDA at these sizes: the one decision (precision.h) the rules take.
Arithmetic Runs(Precision p, const Dims& d) { return DecidePrecision(p, Device::kCuda, d).runs; }

}  // namespace

TEST(StepKernelAutoPicksSplitKForSmallBatchesAndUnits) {
  for (Strategy s : {Strategy::kAuto, Strategy::kPersistent, Strategy::kWavefront}) {
    CHECK(ChooseStepKernel(s, ElementType::kFloat16, Sizes(16, 1024)) == StepKernel::kSplitK);
    CHECK(ChooseStepKernel(s, ElementType::kFloat16, Sizes(17, 1024)) == StepKernel::kTiled);
    CHECK(ChooseStepKernel(s, ElementType::kFloat16, Sizes(16, 1025)) == StepKernel::kTiled);
    CHECK(ChooseStepKernel(s, ElementType::kFloat16, Sizes(1, 1)) == StepKernel::kSplitK);
  }
}

TEST(StepKernelAutoTakesTheCublasStepOverSplitKForFp32FromItsHidden) {
  for (Strategy s : {Strategy::kAuto, Strategy::kPersistent, Strategy::kWavefront}) {
    CHECK(ChooseStepKernel(s, ElementType::kFloat32, Sizes(4, kMinHiddenForGemmStep)) == StepKernel::kGemm);
    CHECK(ChooseStepKernel(s, ElementType::kFloat32, Sizes(1, kMinHiddenForGemmStep - 1)) == StepKernel::kSplitK);
    CHECK(ChooseStepKernel(s, ElementType::kFloat32, Sizes(16, 768)) == StepKernel::kSplitK);
  }
  CHECK(ChooseStepKernel(Strategy::kSplitK, ElementType::kFloat32, Sizes(4, 1024)) == StepKernel::kSplitK);  // forced
}

TEST(StepKernelForcedByStrategy) {
  CHECK(ChooseStepKernel(Strategy::kTiled, ElementType::kFloat16, Sizes(1, 64)) == StepKernel::kTiled);
  CHECK(ChooseStepKernel(Strategy::kSplitK, ElementType::kFloat16, Sizes(512, 64)) == StepKernel::kSplitK);
  CHECK(ChooseStepKernel(Strategy::kSplitK, ElementType::kFloat16, Sizes(1, 1024)) == StepKernel::kSplitK);
  CHECK(ChooseStepKernel(Strategy::kSplitK, ElementType::kFloat16, Sizes(1, 1025)) == StepKernel::kTiled);  // registers run out
}

TEST(ClusterKernelForSmallHiddenSizes) {
  CHECK(RunsOnCluster(Strategy::kCluster, Sizes(1, 1024)));  // forced: the planner decides whether it fits
  CHECK(RunsOnCluster(Strategy::kAuto, Sizes(1, kMaxHiddenForCluster)));
  CHECK(!RunsOnCluster(Strategy::kAuto, Sizes(1, kMaxHiddenForCluster + 1)));
  CHECK(RunsOnCluster(Strategy::kAuto, Sizes(kClusterMaxBatch, kMaxHiddenForClusterAtAnyBatch)));
  CHECK(!RunsOnCluster(Strategy::kAuto, Sizes(kClusterMaxBatch + 1, 64)));  // beyond what it plans
  CHECK(RunsOnCluster(Strategy::kAuto, Sizes(2, 256)));
  CHECK(!RunsOnCluster(Strategy::kAuto, Sizes(4, 256)));  // B*H past kMaxCellsForCluster
  for (int64_t H : {kMaxHiddenForClusterAtAnyBatch, kMaxHiddenForCluster}) {
    const int64_t layers = H <= kMaxHiddenForClusterAtAnyBatch ? kMaxLayersForClusterAtSmallHidden : kMaxLayersForCluster;
    Dims stack = Sizes(1, H);
    stack.L = layers;
    CHECK(RunsOnCluster(Strategy::kAuto, stack));
    stack.L = layers + 1;
    CHECK(!RunsOnCluster(Strategy::kAuto, stack));  // a deeper unidirectional stack: the wavefront
    stack.D = 2;
    CHECK(RunsOnCluster(Strategy::kAuto, stack));
  }
  for (Strategy s : {Strategy::kTiled, Strategy::kSplitK, Strategy::kPersistent, Strategy::kWavefront})
    CHECK(!RunsOnCluster(s, Sizes(1, 128)));
}

TEST(OneStepRunsOnV1WhereFewCellsAndAStackOnTheWavefront) {
  const ElementType f32 = ElementType::kFloat32;
  const Arithmetic fp32 = Arithmetic::kFp32;
  const auto step = [](int64_t B, int64_t H, int64_t L = 1) {
    Dims d = Sizes(B, H);
    d.T = 1;
    d.L = L;
    return d;
  };
  const auto one_step = [&](const Dims& d) { return OneStepStrategy(Strategy::kAuto, fp32, f32, d, 1); };
  CHECK(one_step(step(1, 64)) == Strategy::kSplitK);
  CHECK(one_step(step(8, 128)) == Strategy::kSplitK);  // where auto took the cluster
  CHECK(one_step(step(32, 128)) == Strategy::kSplitK);
  CHECK(one_step(step(33, 128)) == Strategy::kTiled);
  CHECK(one_step(step(64, 64)) == Strategy::kSplitK);
  CHECK(one_step(step(8, 256)) == Strategy::kSplitK);
  CHECK(one_step(step(9, 256)) == Strategy::kTiled);
  CHECK(one_step(step(4, 512)) == Strategy::kSplitK);
  CHECK(one_step(step(64, 512)) == Strategy::kTiled);
  CHECK(one_step(step(65, 512)) == Strategy::kAuto);  // the persistent kernel
  CHECK(one_step(step(1, 513)) == Strategy::kAuto);   // H1024 B4: split-K 49.5 vs persistent 33.9 us
  CHECK(one_step(step(4, 128, 2)) == Strategy::kSplitK);
  CHECK(one_step(step(5, 128, 2)) == Strategy::kWavefront);
  CHECK(one_step(step(1, 128, 3)) == Strategy::kWavefront);
  CHECK(one_step(step(512, 1024, 3)) == Strategy::kWavefront);
  CHECK(OneStepStrategy(Strategy::kAuto, fp32, f32, step(8, 128), 2) == Strategy::kAuto);  // a recurrence
  CHECK(OneStepStrategy(Strategy::kAuto, fp32, f32, step(8, 128), 0) == Strategy::kAuto);
  for (Strategy s : {Strategy::kCluster, Strategy::kPersistent, Strategy::kTiled})  // asked for, or tuned
    CHECK(OneStepStrategy(s, fp32, f32, step(8, 128), 1) == s);
  CHECK(OneStepStrategy(Strategy::kAuto, Arithmetic::kTf32, f32, step(8, 128), 1) == Strategy::kAuto);
  CHECK(OneStepStrategy(Strategy::kAuto, fp32, ElementType::kFloat16, step(8, 128), 1) == Strategy::kAuto);
  Dims both = step(8, 128, 2);
  both.D = 2;  // not measured
  CHECK(one_step(both) == Strategy::kAuto);
}

TEST(OnlyAOneStepFmaStepInFp32MultipliesItsInput) {
  Dims d = Sizes(8, 128);
  d.T = 1;
  CHECK(StepProjectsInput(StepKernel::kSplitK, ProjectionMath::kFp32, d, 1));
  CHECK(!StepProjectsInput(StepKernel::kSplitK, ProjectionMath::kFp32, d, 0));
  CHECK(StepProjectsInput(StepKernel::kTiled, ProjectionMath::kFp32, d, 1));
  // The tiled step while a block's rows (32 up to B = 32, else 64) times I + H stay within 32768.
  const auto tiled = [](int64_t B, int64_t I, int64_t H) {
    Dims t = Sizes(B, H);
    t.T = 1;
    t.I = I;
    return StepProjectsInput(StepKernel::kTiled, ProjectionMath::kFp32, t, 1);
  };
  CHECK(tiled(8, 512, 512));     // 32 x 1024
  CHECK(tiled(32, 512, 512));
  CHECK(!tiled(64, 512, 512));   // 64 x 1024
  CHECK(tiled(128, 256, 256));   // 64 x 512
  CHECK(!tiled(8, 1024, 1024));  // 32 x 2048
  CHECK(!StepProjectsInput(StepKernel::kGemm, ProjectionMath::kFp32, d, 1));  // B 8 streams its weights
  for (ProjectionMath m : {ProjectionMath::kTf32, ProjectionMath::kFp16, ProjectionMath::kBf16})
    CHECK(!StepProjectsInput(StepKernel::kSplitK, m, d, 1));
  d.T = 2;  // sequence_lens of 1 in a longer X: x's rows are T apart
  CHECK(!StepProjectsInput(StepKernel::kSplitK, ProjectionMath::kFp32, d, 1));
  CHECK(!StepProjectsInput(StepKernel::kGemm, ProjectionMath::kTf32, d, 1));
}

TEST(AOneStepCublasStepMultipliesXAndHInOneGemm) {
  const auto gemm = [](ProjectionMath m, int64_t B, int64_t I, int64_t H) {
    Dims t = Sizes(B, H);
    t.T = 1;
    t.I = I;
    return StepProjectsInput(StepKernel::kGemm, m, t, 1);
  };
  const ProjectionMath tf32 = ProjectionMath::kTf32, fp32 = ProjectionMath::kFp32;
  CHECK(gemm(tf32, 64, 512, 512) && gemm(tf32, 32, 1024, 1024) && gemm(fp32, 64, 512, 512));
  CHECK(gemm(tf32, 1, 512, 512) && gemm(tf32, 16, 1024, 1024));  // cuBLAS's GEMV
  CHECK(gemm(tf32, 8, 1024, 1024));  // tf32 streams its weights on sequences only (StreamsStepWith)
  CHECK(!gemm(fp32, 16, 1024, 1024));  // the fp32 step streams: it reads h alone
  CHECK(gemm(tf32, 64, 3 * 512, 512) && !gemm(tf32, 64, 3 * 512 + 1, 512));  // [x h] in the projection's room
  CHECK(!gemm(fp32, 1024, 512, 512) && gemm(tf32, 1024, 512, 512));  // fp32 projects in 3xTF32 there
  CHECK(!gemm(ProjectionMath::kFp16, 64, 512, 512) && !gemm(ProjectionMath::kBf16, 64, 512, 512));
}

TEST(SplitTf32ProjectionOnlyForLargeFloat32Inputs) {
  const ProjectionMath fp32 = ProjectionMath::kFp32;
  const ElementType f32 = ElementType::kFloat32;
  for (bool kept : {false, true}) {
    CHECK(!ProjectsWithSplitTf32(f32, fp32, kMinRowsForSplit - 1, 8, kept));
    CHECK(ProjectsWithSplitTf32(f32, fp32, kMinRowsForSplit, 8, kept));
  }
  // Kept halves: fewer rows of a wide input split too; split per call they do not.
  CHECK(ProjectsWithSplitTf32(f32, fp32, 512, 1024, true));
  CHECK(!ProjectsWithSplitTf32(f32, fp32, 512, 1023, true));
  CHECK(!ProjectsWithSplitTf32(f32, fp32, 512, 1024, false));
  CHECK(!ProjectsWithSplitTf32(ElementType::kFloat16, fp32, 1 << 20, 1024, true));
  // The reduced modes round as they are, never split.
  for (ProjectionMath m : {ProjectionMath::kTf32, ProjectionMath::kFp16, ProjectionMath::kBf16})
    CHECK(!ProjectsWithSplitTf32(f32, m, 1 << 20, 1024, true));
  CHECK(kSplitChunkRows >= kMinRowsForSplit);
}

TEST(KeptTf32HalfForLargeTf32ProjectionsOnly) {
  const ElementType f32 = ElementType::kFloat32;
  const ProjectionMath tf32 = ProjectionMath::kTf32;
  CHECK(ProjectsFromKeptTf32(f32, tf32, 512, 1024));
  CHECK(!ProjectsFromKeptTf32(f32, tf32, 512, 1023));
  CHECK(ProjectsFromKeptTf32(f32, tf32, 1, kMinRowsTimesInputForKeptTf32));
  CHECK(!ProjectsFromKeptTf32(ElementType::kFloat16, tf32, 1 << 20, 1024));
  for (ProjectionMath m : {ProjectionMath::kFp32, ProjectionMath::kFp16, ProjectionMath::kBf16})
    CHECK(!ProjectsFromKeptTf32(f32, m, 1 << 20, 1024));
}

TEST(CallReadsKeptHalvesAsItsWidestLayerDoes) {
  const ElementType f32 = ElementType::kFloat32;
  Dims d = Sizes(512, 1024);  // T 10: 5120 rows
  d.L = 2;
  // fp32 splits from kMinRowsForSplit rows on: both halves.
  CHECK(CallReadsKeptHalves(f32, ProjectionMathFor(Runs(Precision::kFp32, d)), d) == KeptHalves::kBoth);
  // tf32 reads hi, from rows x widest layer input (D*H past the first layer) on.
  CHECK(CallReadsKeptHalves(f32, ProjectionMathFor(Runs(Precision::kTf32, d)), d) == KeptHalves::kHi);
  // fp16 and bf16 multiply a kept bfloat16 copy of a constant W at every size, below the threshold
  // a copy per call would need (rows x 1024 x 4096 < 34G) as above it (10240 rows: 43G); an fp16
  // model's projection reads its own W.
  CHECK(!CallProjectsWithBf16Copies(f32, ProjectionMath::kFp16, d, false));
  CHECK(CallProjectsWithBf16Copies(f32, ProjectionMath::kFp16, d, true));
  CHECK(CallReadsKeptHalves(ElementType::kFloat16, ProjectionMathFor(Runs(Precision::kFp32, d)), d) == KeptHalves::kNone);
  Dims big = Sizes(1024, 1024);
  big.L = 2;
  CHECK(CallProjectsWithBf16Copies(f32, ProjectionMath::kFp16, big, false));
  for (const Dims& at : {d, big, Sizes(1, 1)}) {
    CHECK(CallReadsKeptHalves(f32, ProjectionMathFor(Runs(Precision::kFp16, at)), at) == KeptHalves::kBf16);
    CHECK(CallReadsKeptHalves(f32, ProjectionMathFor(Runs(Precision::kBf16, at)), at) == KeptHalves::kBf16);
    CHECK(CallReadsKeptHalves(ElementType::kFloat16, ProjectionMathFor(Runs(Precision::kFp16, at)), at) ==
          KeptHalves::kNone);
  }
  d.T = 1;
  d.B = kMinRowsTimesInputForKeptTf32 / 1024;
  CHECK(CallReadsKeptHalves(f32, ProjectionMathFor(Runs(Precision::kTf32, d)), d) == KeptHalves::kHi);
  d.H = 1023;  // the first layer's input is 8 wide; a deeper layer's 1023
  CHECK(CallReadsKeptHalves(f32, ProjectionMathFor(Runs(Precision::kTf32, d)), d) == KeptHalves::kNone);
  d.D = 2;  // ... and 2046 both ways
  CHECK(CallReadsKeptHalves(f32, ProjectionMathFor(Runs(Precision::kTf32, d)), d) == KeptHalves::kHi);
  // auto is tf32 at this batch (AutoRunsAsTf32).
  CHECK(AutoRunsAsTf32(d));
  CHECK(CallReadsKeptHalves(f32, ProjectionMathFor(Runs(Precision::kAuto, d)), d) == KeptHalves::kHi);
}

TEST(TiledRowGroupsByBatch) {
  CHECK_EQ(TiledRowGroups(1), 8);
  CHECK_EQ(TiledRowGroups(32), 8);
  CHECK_EQ(TiledRowGroups(33), 16);
  CHECK_EQ(TiledRowGroups(4096), 16);
}

TEST(TiledChunkIsTheLargestThatFits) {
  for (ElementType type : {ElementType::kFloat32, ElementType::kFloat16})
    for (int RG : {8, 16})
      for (int H : {1, 3, 4, 15, 64, 100, 255, 256, 1000, 1024, 2048, 4096, 8192}) {
        const int align = TiledKSplit(RG);
        const int kc = TiledChunkRows(H, RG, type);
        const size_t bytes = ElementBytes(type);
        CHECK(kc % align == 0 && kc >= align);
        CHECK(kc < H + align);  // no more than H rounded up
        CHECK(kc == align || TiledSmemBytes(kc, H, RG, bytes) <= kTiledSmemBudget);
        // Next size up either passes H rounded up or does not fit.
        CHECK(kc + align >= H + align || TiledSmemBytes(kc + align, H, RG, bytes) > kTiledSmemBudget);
      }
  // Small H: one chunk.
  CHECK_EQ(TiledChunkRows(256, 8, ElementType::kFloat32), 256);
  CHECK_EQ(TiledChunkRows(100, 16, ElementType::kFloat32), 104);
}

TEST(TiledSmemCoversTilesAndPartialSums) {
  // The partial sums (256 threads x 32 floats) bound it from below.
  CHECK_EQ(TiledSmemBytes(8, 8, 8, 4), size_t{sizeof(float) * kTiledThreads * 2 * kTiledRows * 4});
  // h tile rows: stride kc + 4 when H % 4 == 0, kc + 1 otherwise.
  CHECK_EQ(TiledStride(64, 64), 68);
  CHECK_EQ(TiledStride(64, 63), 65);
  CHECK_EQ(TiledSmemBytes(1024, 1024, 16, 4), size_t{(4 * 64 * 1028 + 15) / 16 * 16 + 4 * 16 * 1024});
}

TEST(SplitKValuesPerLaneCoverH) {
  const int cases[][2] = {{1, 1},    {32, 1},   {33, 2},   {64, 2},    {65, 4},   {128, 4},  {129, 8},
                          {256, 8},  {257, 16}, {512, 16}, {513, 32},  {1024, 32}};
  for (const auto& c : cases) CHECK_EQ(SplitKValuesPerLane(c[0]), c[1]);
  for (int H = 1; H <= 1024; ++H) CHECK(H <= 32 * SplitKValuesPerLane(H));
}

TEST(SplitKRowsSpreadOverIdleSMs) {
  CHECK_EQ(SplitKUnitBlocks(8), 1);
  CHECK_EQ(SplitKUnitBlocks(9), 2);
  // 1 unit block x 1 direction on 132 SMs: every row its own block.
  CHECK_EQ(SplitKRowsPerBlock(16, 8, 1, 132), 1);
  // Enough unit blocks to fill the GPU: no split.
  CHECK_EQ(SplitKRowsPerBlock(16, 1024, 2, 132), 16);
  for (int B : {1, 2, 7, 16, 100})
    for (int H : {1, 64, 512, 1024})
      for (int D : {1, 2}) {
        const int rows = SplitKRowsPerBlock(B, H, D, 132);
        CHECK(rows >= 1 && rows <= B);
        const int row_blocks = (B + rows - 1) / rows;
        CHECK(row_blocks * rows >= B && (row_blocks - 1) * rows < B);
      }
}

TEST(TunedWinnerOnlyForAutoAndAnExactMatch) {
  const std::vector<TunedStrategy> tuned = {{"NVIDIA H100", 100, 16, Strategy::kWavefront},
                                            {"NVIDIA H100", 100, 1, Strategy::kSplitK}};
  Dims d = Sizes(16, 256);
  d.T = 100;
  CHECK(StrategyForCall(Strategy::kAuto, tuned, "NVIDIA H100", d) == Strategy::kWavefront);
  CHECK(StrategyForCall(Strategy::kTiled, tuned, "NVIDIA H100", d) == Strategy::kTiled);
  CHECK(StrategyForCall(Strategy::kAuto, tuned, "NVIDIA A100", d) == Strategy::kAuto);
  d.T = 99;
  CHECK(StrategyForCall(Strategy::kAuto, tuned, "NVIDIA H100", d) == Strategy::kAuto);
  d.T = 100;
  d.B = 1;
  CHECK(StrategyForCall(Strategy::kAuto, tuned, "NVIDIA H100", d) == Strategy::kSplitK);
}

TEST(LargeFp32StepsRunOnCublas) {
  const auto f32 = ElementType::kFloat32, f16 = ElementType::kFloat16;
  CHECK(ChooseStepKernel(Strategy::kAuto, f32, Sizes(17, 1024)) == StepKernel::kGemm);
  CHECK(ChooseStepKernel(Strategy::kAuto, f32, Sizes(256, 64)) == StepKernel::kGemm);
  CHECK(ChooseStepKernel(Strategy::kAuto, f32, Sizes(1, 2048)) == StepKernel::kGemm);
  CHECK(ChooseStepKernel(Strategy::kWavefront, f32, Sizes(8, 1024)) == StepKernel::kGemm);  // split-K's registers spill
  CHECK(ChooseStepKernel(Strategy::kWavefront, f32, Sizes(8, 1023)) == StepKernel::kSplitK);  // registers hold it
  CHECK(ChooseStepKernel(Strategy::kAuto, f32, Sizes(64, 512)) == StepKernel::kTiled);
  CHECK(ChooseStepKernel(Strategy::kAuto, f16, Sizes(17, 1024)) == StepKernel::kTiled);  // fp16 h would need a copy
  CHECK(ChooseStepKernel(Strategy::kTiled, f32, Sizes(256, 2048)) == StepKernel::kTiled);  // forced v1 stays
}

TEST(Tf32LargeCallsPreferCublasSteps) {
  const auto f32 = ElementType::kFloat32;
  CHECK(PrefersGemmSteps(Strategy::kAuto, Runs(Precision::kTf32, Sizes(256, 512)), f32, Sizes(256, 512)));
  CHECK(PrefersGemmSteps(Strategy::kAuto, Runs(Precision::kTf32, Sizes(64, 1024)), f32, Sizes(64, 1024)));
  CHECK(PrefersGemmSteps(Strategy::kAuto, Runs(Precision::kAuto, Sizes(256, 512)), f32, Sizes(256, 512)));
  CHECK(PrefersGemmSteps(Strategy::kAuto, Runs(Precision::kAuto, Sizes(64, 1024)), f32, Sizes(64, 1024)));
  CHECK(!PrefersGemmSteps(Strategy::kAuto, Runs(Precision::kAuto, Sizes(128, 512)), f32, Sizes(128, 512)));  // auto is fp32 here
  CHECK(!PrefersGemmSteps(Strategy::kAuto, Runs(Precision::kTf32, Sizes(512, 128)), f32, Sizes(512, 128)));   // narrow: WMMA wins
  CHECK(!PrefersGemmSteps(Strategy::kAuto, Runs(Precision::kTf32, Sizes(16, 1024)), f32, Sizes(16, 1024)));   // small: persistent wins
  // One step of up to three layers, one direction: cuBLAS from 6K cells at H 512-767
  // (kMinCellsForOneStepTf32GemmStep; 4.5K on three layers), at any batch from H 768 to 1024.
  struct OneStep {
    int64_t B, H;
    bool gemm, gemm_on_three;
  };
  for (const OneStep& c : {OneStep{12, 512, true, true}, {11, 512, false, true}, {9, 512, false, true},
                           {8, 512, false, false}, {1, 768, true, true}, {8, 768, true, true}, {1, 1024, true, true},
                           {8, 1024, true, true}, {8, 2048, false, false}}) {
    const bool gemm = c.gemm;
    Dims one = Sizes(c.B, c.H);
    one.T = 1;
    CHECK_EQ(PrefersGemmSteps(Strategy::kAuto, Arithmetic::kTf32, f32, one), gemm);
    one.L = 2;  // two layers alike
    CHECK_EQ(PrefersGemmSteps(Strategy::kAuto, Arithmetic::kTf32, f32, one), gemm);
    one.L = 3;
    CHECK_EQ(PrefersGemmSteps(Strategy::kAuto, Arithmetic::kTf32, f32, one), c.gemm_on_three);
    one.L = 4;
    CHECK(!PrefersGemmSteps(Strategy::kAuto, Arithmetic::kTf32, f32, one) || !c.gemm_on_three);
    one.L = 1;
    one.D = 2;
    CHECK(!PrefersGemmSteps(Strategy::kAuto, Arithmetic::kTf32, f32, one) || !gemm);
  }
  // 16-bit weight copies: from H = 768 and B*H = 32K, not for H = 512 or short sequences.
  CHECK(PrefersGemmSteps(Strategy::kAuto, Runs(Precision::kTf32, Sizes(32, 1024)), f32, Sizes(32, 1024)));
  CHECK(PrefersGemmSteps(Strategy::kAuto, Runs(Precision::kAuto, Sizes(32, 1024)), f32, Sizes(32, 1024)));
  CHECK(PrefersGemmSteps(Strategy::kAuto, Runs(Precision::kTf32, Sizes(64, 768)), f32, Sizes(64, 768)));
  CHECK(!PrefersGemmSteps(Strategy::kAuto, Runs(Precision::kTf32, Sizes(64, 512)), f32, Sizes(64, 512)));
  Dims short_seq = Sizes(32, 1024);
  short_seq.T = kMinStepsForHalfWeights - 1;
  CHECK(!PrefersGemmSteps(Strategy::kAuto, Runs(Precision::kTf32, short_seq), f32, short_seq));
  CHECK(!PrefersGemmSteps(Strategy::kAuto, Runs(Precision::kFp32, Sizes(256, 512)), f32, Sizes(256, 512)));
  // fp16 and bf16 on their 16-bit copies from H = 512 and 4*B*H^2 = 256M, not below.
  CHECK(PrefersGemmSteps(Strategy::kAuto, Runs(Precision::kFp16, Sizes(256, 512)), f32, Sizes(256, 512)));
  CHECK(PrefersGemmSteps(Strategy::kAuto, Runs(Precision::kBf16, Sizes(64, 1024)), f32, Sizes(64, 1024)));
  CHECK(!PrefersGemmSteps(Strategy::kAuto, Runs(Precision::kFp16, Sizes(128, 512)), f32, Sizes(128, 512)));
  CHECK(!PrefersGemmSteps(Strategy::kAuto, Runs(Precision::kFp16, Sizes(32, 1024)), f32, Sizes(32, 1024)));
  CHECK(!PrefersGemmSteps(Strategy::kAuto, Runs(Precision::kFp16, Sizes(1024, 256)), f32, Sizes(1024, 256)));  // H < 512
  CHECK(!PrefersGemmSteps(Strategy::kAuto, Runs(Precision::kFp16, Sizes(256, 512)), ElementType::kFloat16, Sizes(256, 512)));
  CHECK(!PrefersGemmSteps(Strategy::kWavefront, Runs(Precision::kTf32, Sizes(256, 512)), f32, Sizes(256, 512)));  // forced stays
  CHECK(!PrefersGemmSteps(Strategy::kAuto, Runs(Precision::kTf32, Sizes(256, 512)), ElementType::kFloat16, Sizes(256, 512)));
}

TEST(PrecisionPicksTheTensorCoreOperand) {
  Dims small, b16, b256;
  small.B = 8;
  b16.B = 16;
  b256.B = 256;
  const auto f32 = ElementType::kFloat32, f16 = ElementType::kFloat16;
  // fp32 stays on the FMA kernel at every batch (3xTF32 measured slower).
  CHECK(!MmaOperandFor(Runs(Precision::kFp32, b256), f32, b256).has_value());
  // Half operands from one 16-row tile on; below it the FMA kernel (more accurate, faster).
  CHECK(!MmaOperandFor(Runs(Precision::kFp16, small), f32, small).has_value());
  CHECK(MmaOperandFor(Runs(Precision::kFp16, b16), f32, b16) == MmaOperand::kFp16);
  CHECK(MmaOperandFor(Runs(Precision::kBf16, b16), f32, b16) == MmaOperand::kBf16);
  // tf32 and auto only where tf32 tiles beat FMA.
  CHECK(!MmaOperandFor(Runs(Precision::kTf32, b16), f32, b16).has_value());
  CHECK(MmaOperandFor(Runs(Precision::kTf32, b256), f32, b256) == MmaOperand::kTf32);
  CHECK(MmaOperandFor(Runs(Precision::kAuto, b256), f32, b256) == MmaOperand::kTf32);
  CHECK(!MmaOperandFor(Runs(Precision::kAuto, b16), f32, b16).has_value());
  // fp16 models: fp16 tensor cores by default, bf16 when asked.
  CHECK(MmaOperandFor(Runs(Precision::kFp32, b16), f16, b16) == MmaOperand::kFp16);
  CHECK(MmaOperandFor(Runs(Precision::kBf16, b16), f16, b16) == MmaOperand::kBf16);
  CHECK(!MmaOperandFor(Runs(Precision::kFp32, small), f16, small).has_value());
}

TEST(PrecisionPicksTheProjectionMath) {
  Dims b64, b256;
  b64.B = 64;
  b256.B = 256;
  CHECK(ProjectionMathFor(Runs(Precision::kFp32, b256)) == ProjectionMath::kFp32);
  CHECK(ProjectionMathFor(Runs(Precision::kTf32, b64)) == ProjectionMath::kTf32);
  CHECK(ProjectionMathFor(Runs(Precision::kFp16, b64)) == ProjectionMath::kFp16);
  CHECK(ProjectionMathFor(Runs(Precision::kBf16, b64)) == ProjectionMath::kBf16);
  // auto: FP32-accurate where that costs nothing, all tf32 where tf32 is faster.
  CHECK(ProjectionMathFor(Runs(Precision::kAuto, b64)) == ProjectionMath::kFp32);
  CHECK(ProjectionMathFor(Runs(Precision::kAuto, b256)) == ProjectionMath::kTf32);
}

TEST(SmallBatchStepsStreamTheWeights) {
  const StepWeights f32 = StepWeights::kFp32;
  CHECK(!StepStreamsWeights(Sizes(1, 2048), f32));  // cuBLAS's GEMV for one row is faster
  CHECK(StepStreamsWeights(Sizes(2, 2048), f32));
  CHECK(StepStreamsWeights(Sizes(16, 1024), f32));
  CHECK(!StepStreamsWeights(Sizes(17, 1024), f32));  // cuBLAS: weights reused by enough rows
  CHECK(StepStreamsWeights(Sizes(2, kStreamMaxSplits * kStreamMaxRowsPerSplit), f32));
  CHECK(!StepStreamsWeights(Sizes(2, kStreamMaxSplits * kStreamMaxRowsPerSplit + 1), f32));  // a split would not fit
  CHECK(StepStreamsWeights(Sizes(1, 2048), StepWeights::kFp16));  // 16-bit weights stream from one row
  CHECK(StepStreamsWeights(Sizes(2, 2048), StepWeights::kBf16));
  CHECK(StepStreamsWeights(Sizes(2, 2048), StepWeights::kFp16));
  CHECK(!StepStreamsWeights(Sizes(3, 2048), StepWeights::kFp16));  // to 2: no partial sums reserved above
  for (int H : {1, 31, 32, 100, 513, 1024, 2048, 3000, 8192}) {
    for (int D : {1, 2}) {
      const int s = StreamSplits(H, StreamColumnTiles(H), D, 4 * 132);
      CHECK(s >= 1);
      CHECK(s <= StreamSplitsAtMost(H));                         // the scratch holds every split
      CHECK((H + s - 1) / s <= kStreamMaxRowsPerSplit);          // a split's h fits shared memory
    }
  }
  // FP32 streams at every such shape; the reduced modes with their 16-bit weights from 1 to 2 rows
  // (cuBLAS's 16-bit GEMM above), and tf32 on short sequences (fp32 weights) from 2 to 8 rows.
  CHECK(StreamsStepWith(ProjectionMath::kFp32, Sizes(16, 2048)));
  CHECK(!StreamsStepWith(ProjectionMath::kFp32, Sizes(1, 2048)));
  for (ProjectionMath m : {ProjectionMath::kTf32, ProjectionMath::kFp16, ProjectionMath::kBf16}) {
    CHECK(StreamsStepWith(m, Sizes(1, 2048)));
    CHECK(StreamsStepWith(m, Sizes(2, 2048)));
    CHECK(!StreamsStepWith(m, Sizes(3, 2048)));
    CHECK(!StreamsStepWith(m, Sizes(8, 2048)));
  }
  Dims short_seq = Sizes(8, 2048);
  short_seq.T = kMinStepsForHalfWeights - 1;
  CHECK(StreamsStepWith(ProjectionMath::kTf32, short_seq));
  CHECK(!StreamsStepWith(ProjectionMath::kFp16, short_seq));  // cuBLAS converts fp32 operands itself
  short_seq.B = 1;
  CHECK(!StreamsStepWith(ProjectionMath::kTf32, short_seq));
  Dims one_step = Sizes(8, 768);
  one_step.T = 1;
  CHECK(!StreamsStepWith(ProjectionMath::kTf32, one_step));  // the one GEMM of [x h] instead
  CHECK(StreamsStepWith(ProjectionMath::kFp32, one_step));
  CHECK(StreamColumnTiles(2048) == 64 && StreamColumnTiles(301) == 10);
  // H2048 on 132 SMs holding 4 blocks each: one wave of 512 blocks, uni (64 column tiles x 8
  // splits) and bi (128 x 4); 8192 rows need 16 splits of 512 whatever the wave.
  CHECK(StreamSplits(2048, 64, 1, 4 * 132) == 8);
  CHECK(StreamSplits(2048, 64, 2, 4 * 132) == 4);
  CHECK(StreamSplits(8192, 256, 2, 4 * 132) == 16);
}

TEST(ReducedModesStepOnHalfWeightsOverLongEnoughSequences) {
  const Dims d = Sizes(32, 2048);
  CHECK(StepWeightsFor(ProjectionMath::kFp32, d) == StepWeights::kFp32);
  CHECK(StepWeightsFor(ProjectionMath::kTf32, d) == StepWeights::kFp16);  // TF32's significand, scaled
  CHECK(StepWeightsFor(ProjectionMath::kFp16, d) == StepWeights::kFp16);
  CHECK(StepWeightsFor(ProjectionMath::kBf16, d) == StepWeights::kBf16);
  Dims short_seq = d;
  short_seq.T = kMinStepsForHalfWeights - 1;
  CHECK(StepWeightsFor(ProjectionMath::kTf32, short_seq) == StepWeights::kFp32);
}

namespace {
unsigned Bits(float v) {
  unsigned b;
  std::memcpy(&b, &v, sizeof b);
  return b;
}
}  // namespace

TEST(HalfScalePutsTheLargestWeightJustUnder2To15) {
  for (float amax : {1e-30f, 3e-5f, 0.02f, 0.5f, 1.f, 1.5f, 1000.f, 65504.f, 1e6f, 3e38f}) {
    const float scaled = std::ldexp(amax, HalfScaleExponent(Bits(amax)));
    CHECK(scaled >= 16384.f && scaled < 32768.f);  // normal fp16, far from its 65504 limit
  }
  CHECK_EQ(HalfScaleExponent(Bits(1.f)), 14);
  CHECK_EQ(HalfScaleExponent(Bits(0.f)), 0);  // all-zero weights: nothing to scale
  CHECK_EQ(HalfScaleExponent(Bits(std::numeric_limits<float>::infinity())), 0);
  CHECK_EQ(HalfScaleExponent(Bits(std::numeric_limits<float>::quiet_NaN())), 0);
  const float tiny = std::numeric_limits<float>::denorm_min();  // still a finite scale
  CHECK(std::ldexp(tiny, HalfScaleExponent(Bits(tiny))) < 32768.f);
}

TEST(CallGraphOnlyForShortCallsWithDeviceLengths) {
  CHECK(CallGraphPays(1, false));
  CHECK(CallGraphPays(kMaxStepsForCallGraph, false));
  CHECK(!CallGraphPays(kMaxStepsForCallGraph + 1, false));
  CHECK(!CallGraphPays(0, false));  // no steps: nothing worth a graph
  CHECK(!CallGraphPays(1, true));   // lengths copied from the host
}
