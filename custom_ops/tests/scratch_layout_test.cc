// The scratch carve-up (cuda/scratch_layout.cc): aligned, disjoint regions with room for what
// each holds.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "check.h"
#include "cuda/heuristics.h"
#include "cuda/scratch_layout.h"

using namespace lstm_ort;

namespace {

Dims Sizes(int64_t L, int64_t D, int64_t T, int64_t B, int64_t I, int64_t H) { return MakeDims(L, D, T, B, I, H); }

// The bytes of a call's scratch as PlanCall sizes it: the needs of the mode, then the carve-up.
ProjectionMath MathOf(Precision precision, const Dims& d) {
  return ProjectionMathFor(DecidePrecision(precision, Device::kCuda, d).runs);
}

size_t Bytes(const Dims& d, ElementType type, Precision precision, bool kept) {
  return ScratchBytes(d, type, ScratchNeedsFor(d, type, MathOf(precision, d), kept));
}

int64_t WidestInput(const Dims& d) { return std::max(d.I, d.D * d.H); }

struct Region {
  const char* name;
  const void* start;
  size_t need;  // bytes the region must hold
};

void CheckLayout(const Dims& d, ElementType type, Precision precision, bool kept, bool y_relays) {
  size_t total = 0;
  ScratchNeeds needs = ScratchNeedsFor(d, type, MathOf(precision, d), kept);
  needs.y_relays = y_relays;
  CarveScratch(d, type, needs, nullptr, &total);
  const size_t layer = ElementBytes(type) * d.T * d.B * d.D * d.H;
  const bool between = d.L > 1 && !y_relays;  // one buffer between layers, none where Y relays
  const size_t relayed = between || d.L == 1 ? 0 : (layer + kScratchAlign - 1) / kScratchAlign * kScratchAlign;
  CHECK_EQ(total + relayed, Bytes(d, type, precision, kept));
  // Only addresses are compared: memory that is never touched costs no page faults.
  const std::unique_ptr<char[]> memory(new char[total + 1]);
  char* base = memory.get();
  const Scratch s = CarveScratch(d, type, needs, base, nullptr);

  const size_t f = sizeof(float), state = f * d.D * d.B * d.H, states = state * d.L;
  std::vector<Region> regions = {
      {"gx", s.gx, f * d.D * d.T * d.B * 4 * d.H},
      {"h0", s.h[0], state},
      {"h1", s.h[1], state},
      {"c", s.c, state},
      {"lens", s.lens, sizeof(int) * d.B},
  };
  CHECK_EQ(s.layer != nullptr, between);
  if (between) regions.push_back({"layer", s.layer, layer});
  regions.insert(regions.end(), {
      {"h0 per layer", s.h0, states},
      {"c0 per layer", s.c0, states},
      {"h_fin", s.h_fin, states},
      {"c_fin", s.c_fin, states},
      {"hbuf", s.hbuf, HBufBytes(d)},
      {"barrier", s.barrier, sizeof(unsigned)},
  });
  // v1's cuBLAS step; where it may stream the weights, a copy of the gates per K split and the
  // split counters (null otherwise).
  // In the reduced modes, its 16-bit copies of the weights and of h, and the largest weights.
  const bool fp32 = type == ElementType::kFloat32;
  const StepWeights weights = fp32 ? StepWeightsFor(MathOf(precision, d), d) : StepWeights::kFp32;
  const bool streams = fp32 && StepStreamsWeights(d, weights), half = weights != StepWeights::kFp32;
  const size_t copies = streams ? StreamSplitsAtMost(d.H) : 1;
  regions.push_back({"gates", s.gates, fp32 ? copies * f * d.D * d.B * 4 * d.H : 0});
  CHECK_EQ(s.stream_done != nullptr, streams);
  if (streams) regions.push_back({"stream_done", s.stream_done, sizeof(unsigned) * d.D * StreamColumnTiles(d.H)});
  CHECK_EQ(s.wh_half != nullptr, half);
  if (half) {
    regions.push_back({"wh_half", s.wh_half, 2 * d.D * d.H * 4 * d.H});
    regions.push_back({"h_half", s.h_half, 2 * d.D * d.B * d.H});
    regions.push_back({"wh_amax", s.wh_amax, sizeof(unsigned) * 2});
  }
  const bool split = ProjectsWithSplitTf32(type, MathOf(precision, d), d.T * d.B, WidestInput(d), kept);
  CHECK_EQ(s.x_hi != nullptr, split);
  CHECK_EQ(s.w_hi != nullptr, split && !kept);  // kept halves live outside the scratch
  if (split) {
    const size_t x = f * std::min<int64_t>(d.T * d.B, kSplitChunkRows) * WidestInput(d);
    regions.push_back({"x_hi", s.x_hi, x});
    regions.push_back({"x_lo", s.x_lo, x});
  }
  if (split && !kept) {
    const size_t w = f * d.D * WidestInput(d) * 4 * d.H;  // any layer's D blocks of input rows x 4H
    regions.push_back({"w_hi", s.w_hi, w});
    regions.push_back({"w_lo", s.w_lo, w});
  }
  // fp16/bf16 projections of fp32 models: bfloat16 copies of a chunk of x's rows and of W's input
  // rows, where W's copy is not kept.
  const bool bf16 = ProjectsWithBf16Copies(type, MathOf(precision, d), d.T * d.B, WidestInput(d), 4 * d.H, kept);
  CHECK_EQ(s.x_bf16 != nullptr, bf16);
  CHECK_EQ(s.w_bf16 != nullptr, bf16 && !kept);  // a kept copy lives outside the scratch
  if (bf16) regions.push_back({"x_bf16", s.x_bf16, 2 * std::min<int64_t>(d.T * d.B, kSplitChunkRows) * WidestInput(d)});
  if (bf16 && !kept) regions.push_back({"w_bf16", s.w_bf16, 2 * d.D * WidestInput(d) * 4 * d.H});
  // In order, aligned, each ending before the next starts, the last within the total.
  for (size_t i = 0; i < regions.size(); ++i) {
    const size_t off = static_cast<size_t>(static_cast<const char*>(regions[i].start) - base);
    const size_t end = off + regions[i].need;
    const std::string what = std::string(regions[i].name) + " placed";
    if (off % kScratchAlign != 0) unit::RecordFailure(__FILE__, __LINE__, what + " unaligned");
    const size_t next = i + 1 < regions.size()
                            ? static_cast<size_t>(static_cast<const char*>(regions[i + 1].start) - base)
                            : total;
    if (end > next) unit::RecordFailure(__FILE__, __LINE__, what + " overlaps what follows");
  }
}

}  // namespace

TEST(ScratchRegionsAreAlignedAndDisjoint) {
  for (ElementType type : {ElementType::kFloat32, ElementType::kFloat16})
    for (int64_t L : {1, 2, 3, 5})
      for (int64_t D : {1, 2})
        for (int64_t T : {0, 1, 7, 100, 2000})
          for (int64_t B : {1, 3, 16, 65})
            for (int64_t H : {1, 5, 64, 301})
              for (Precision p : {Precision::kFp32, Precision::kTf32, Precision::kFp16, Precision::kBf16, Precision::kAuto})
                for (bool kept : {false, true})
                  for (bool y_relays : {false, true}) CheckLayout(Sizes(L, D, T, B, 7, H), type, p, kept, y_relays);
}

TEST(ScratchWithoutBaseIsAllNull) {
  const Scratch s =
      CarveScratch(Sizes(3, 2, 2000, 4, 8, 8), ElementType::kFloat32,
                   ScratchNeedsFor(Sizes(3, 2, 2000, 4, 8, 8), ElementType::kFloat32, ProjectionMath::kFp32, false), nullptr,
                   nullptr);
  CHECK(!s.gx && !s.h[0] && !s.layer && !s.hbuf && !s.barrier && !s.x_hi && !s.w_lo && !s.wh_half);
}

TEST(SplitBuffersFollowTheProjectionHeuristic) {
  const Dims below = Sizes(1, 1, kMinRowsForSplit - 1, 1, 8, 8);
  const Dims at = Sizes(1, 1, kMinRowsForSplit, 1, 8, 8);
  CHECK(Bytes(at, ElementType::kFloat32, Precision::kFp32, false) > Bytes(below, ElementType::kFloat32, Precision::kFp32, false) + 4 * 8 * 8 * 4);
  // float16 projects on tensor cores as it is: no split copies, only the smaller layer buffers.
  CHECK(Bytes(Sizes(3, 1, 5000, 4, 8, 8), ElementType::kFloat16, Precision::kFp32, false) <
        Bytes(Sizes(3, 1, 5000, 4, 8, 8), ElementType::kFloat32, Precision::kFp32, false));
}

TEST(Bf16CopiesOnlyForReducedProjectionsOfFp32Models_FedWFromTheirThreshold_KeptWAlways) {
  const ElementType f32 = ElementType::kFloat32;
  // rows x layer input x 4H at the threshold and one row below it (I = 512, 4H = 1024, T*B rows).
  const int64_t rows = kMinMultiplyAddsForBf16Copies / (512 * 1024);
  for (ProjectionMath math : {ProjectionMath::kFp16, ProjectionMath::kBf16}) {
    CHECK(ProjectsWithBf16Copies(f32, math, rows, 512, 1024, false));
    CHECK(!ProjectsWithBf16Copies(f32, math, rows - 1, 512, 1024, false));
    // W's copy kept: at any size, down to one row of a 1-wide input.
    CHECK(ProjectsWithBf16Copies(f32, math, rows - 1, 512, 1024, true));
    CHECK(ProjectsWithBf16Copies(f32, math, 1, 1, 4, true));
    for (bool kept : {false, true})  // fp16 models multiply x as it is
      CHECK(!ProjectsWithBf16Copies(ElementType::kFloat16, math, rows, 512, 1024, kept));
  }
  for (ProjectionMath math : {ProjectionMath::kFp32, ProjectionMath::kTf32})
    for (bool kept : {false, true}) CHECK(!ProjectsWithBf16Copies(f32, math, rows, 512, 1024, kept));
  // A call answers for its widest layer input: L2 bidirectional H256 (second layer input 512,
  // 4H = 1024) at I = 16, T*B = rows.
  const Dims d = Sizes(2, 2, rows, 1, 16, 256);
  CHECK(CallProjectsWithBf16Copies(f32, ProjectionMath::kFp16, d, false));
  CHECK(!CallProjectsWithBf16Copies(f32, ProjectionMath::kFp16, Sizes(2, 2, rows - 1, 1, 16, 256), false));
  CHECK(ScratchNeedsFor(Sizes(2, 2, rows - 1, 1, 16, 256), f32, ProjectionMath::kFp16, true).bf16_copies);
  CHECK(ScratchNeedsFor(d, f32, ProjectionMath::kFp16, false).bf16_copies);
  CHECK(!ScratchNeedsFor(d, f32, ProjectionMath::kTf32, false).bf16_copies);
  // W's copy kept across calls (a constant W): room for x's rows only.
  CHECK(ScratchNeedsFor(d, f32, ProjectionMath::kFp16, false).bf16_w);
  CHECK(ScratchNeedsFor(d, f32, ProjectionMath::kFp16, true).bf16_copies);
  CHECK(!ScratchNeedsFor(d, f32, ProjectionMath::kFp16, true).bf16_w);
  CHECK(Bytes(d, f32, Precision::kFp16, true) < Bytes(d, f32, Precision::kFp16, false));
}

TEST(KeptWeightsSplitFromFewerRowsAndLeaveTheScratch) {
  const ElementType f32 = ElementType::kFloat32;
  // 512 rows of a 1024-wide layer input (L2 bidirectional H512): split with kept halves (room for
  // x's halves only), not split per call.
  const Dims d = Sizes(2, 2, 512, 1, 8, 512);
  CHECK(Bytes(d, f32, Precision::kFp32, false) < Bytes(d, f32, Precision::kFp32, true));
  const Dims big = Sizes(2, 2, kMinRowsForSplit, 1, 8, 8);
  const size_t w = 4 * 2 * 16 * 4 * 8;  // D blocks of the widest input (D*H = 16 rows) x 4H, each half
  CHECK(Bytes(big, f32, Precision::kFp32, false) >= Bytes(big, f32, Precision::kFp32, true) + 2 * w);
  // Modes that do not split keep nothing either.
  CHECK_EQ(Bytes(big, f32, Precision::kTf32, true), Bytes(big, f32, Precision::kTf32, false));
}

TEST(SplitInputIsCutInChunks) {
  // Past kSplitChunkRows rows, the x split stays one chunk: only gx and the layer buffers grow.
  const Dims a = Sizes(1, 1, kSplitChunkRows, 1, 512, 8), b = Sizes(1, 1, 4 * kSplitChunkRows, 1, 512, 8);
  const size_t gx_growth = 4 * 3 * kSplitChunkRows * 4 * 8;
  CHECK(Bytes(b, ElementType::kFloat32, Precision::kFp32, false) - Bytes(a, ElementType::kFloat32, Precision::kFp32, false) <= gx_growth + 4 * kScratchAlign);
}

TEST(HBufHoldsTheBatchRoundedUpTo128) {
  // The tensor-core plans take batch slices of up to 128 rows.
  CHECK_EQ(HBufBytes(Sizes(2, 1, 10, 1, 4, 8)), size_t{4 * 2 * 2 * 1 * 8 * 128});
  CHECK_EQ(HBufBytes(Sizes(1, 2, 10, 128, 4, 8)), size_t{4 * 2 * 1 * 2 * 8 * 128});
  CHECK_EQ(HBufBytes(Sizes(1, 1, 10, 129, 4, 8)), size_t{4 * 2 * 1 * 1 * 8 * 256});
}

TEST(HalfStepCopiesOnlyWhereTheReducedModesTakeThem) {
  const ElementType f32 = ElementType::kFloat32, f16 = ElementType::kFloat16;
  const Dims d = Sizes(2, 2, kMinStepsForHalfWeights, 2, 8, 64);  // two rows: the streaming step's
  const size_t copies = 2 * 2 * 64 * 4 * 64;  // a layer's recurrent weights, both directions, 16-bit
  CHECK(Bytes(d, f32, Precision::kTf32, false) >= Bytes(d, f32, Precision::kFp32, false) + copies);
  CHECK(Bytes(d, f32, Precision::kBf16, false) >= Bytes(d, f32, Precision::kFp32, false) + copies);
  // auto runs fp32 at this size; fp16 storage has 16-bit weights already; short sequences skip it.
  CHECK_EQ(Bytes(d, f32, Precision::kAuto, false), Bytes(d, f32, Precision::kFp32, false));
  CHECK_EQ(Bytes(d, f16, Precision::kTf32, false), Bytes(d, f16, Precision::kFp32, false));
  const Dims short_seq = Sizes(2, 2, kMinStepsForHalfWeights - 1, 8, 8, 64);
  CHECK_EQ(Bytes(short_seq, f32, Precision::kTf32, false), Bytes(short_seq, f32, Precision::kFp32, false));
}
