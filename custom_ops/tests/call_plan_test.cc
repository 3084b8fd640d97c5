// One call's plan (cuda/call_plan.cc) on fake devices: overrides and tuned entries reach it,
// fallbacks are recorded with their reason and refused in strict mode, factored weights plan on
// the low-rank backend, and the description reads the plan.
#include <stdexcept>
#include <string>

#include "check.h"
#include "cuda/call_plan.h"
#include "cuda/low_rank/scratch.h"
#include "fake_devices.h"

using namespace lstm_ort;

namespace {

CallDevice Fake(const DeviceLimits& limits, int max_cluster = 16) {
  CallDevice device;
  device.name = "fake";
  device.max_cluster_blocks = max_cluster;
  device.persistent = [&limits]() -> const DeviceLimits& { return limits; };
  device.low_rank = [&limits]() -> const DeviceLimits& { return limits; };
  return device;
}

Attributes Attrs(Strategy s, Precision p = Precision::kFp32) {
  Attributes a;
  a.strategy = s;
  a.precision = p;
  for (auto& dir : a.act) {
    dir[0] = {ActKind::kSigmoid, 0.f, 0.f};
    dir[1] = {ActKind::kTanh, 0.f, 0.f};
    dir[2] = {ActKind::kTanh, 0.f, 0.f};
  }
  return a;
}

CallInputs Call(const Dims& d, ElementType type = ElementType::kFloat32) {
  return CallInputs{d, static_cast<int>(d.T), type, true};
}

bool Has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST(ForcedPersistentThatDoesNotFitIsAFallback) {
  const DeviceLimits small = unit::SmallGpu();
  const Dims d = MakeDims(2, 1, 50, 64, 16, 2048);
  const CallPlan plan = PlanCall(Call(d), Attrs(Strategy::kPersistent), Fake(small), Overrides{});
  CHECK_EQ(plan.ranges.size(), size_t{2});
  for (const RangePlan& r : plan.ranges) CHECK(r.backend == Backend::kStepwise);
  CHECK_EQ(plan.fallbacks.Entries().size(), size_t{2});
  CHECK(Has(plan.fallbacks.Entries()[0], "layer 0: persistent does not fit this device at H=2048 B=64: v1"));
  CHECK(Has(DescribeCallPlan(plan), "; fallback: layer 1: persistent does not fit"));
  Overrides strict;
  strict.strict = true;
  bool threw = false;
  try {
    PlanCall(Call(d), Attrs(Strategy::kPersistent), Fake(small), strict);
  } catch (const std::runtime_error& e) {
    threw = Has(e.what(), "strict mode") && Has(e.what(), "layer 0: persistent does not fit");
  }
  CHECK(threw);
  // auto leaves such layers to v1 by design: no fallback, strict or not.
  CHECK(PlanCall(Call(d), Attrs(Strategy::kAuto), Fake(small), strict).fallbacks.Entries().empty());
}

TEST(ForcedPathsThatHoldAreNoFallback) {
  const DeviceLimits h100 = unit::H100();
  Overrides strict;
  strict.strict = true;
  const Dims d = MakeDims(3, 1, 50, 8, 64, 128);
  for (Strategy s : {Strategy::kTiled, Strategy::kSplitK, Strategy::kPersistent, Strategy::kWavefront,
                     Strategy::kCluster}) {
    const CallPlan plan = PlanCall(Call(d), Attrs(s), Fake(h100), strict);
    CHECK(plan.fallbacks.Entries().empty());
    CHECK(plan.ranges[0].backend == BackendForStrategy(s));
  }
}

TEST(ForcedClusterAndSplitKBeyondTheirShapesAreFallbacks) {
  const DeviceLimits h100 = unit::H100();
  CallPlan plan = PlanCall(Call(MakeDims(1, 1, 50, 64, 16, 512)), Attrs(Strategy::kCluster), Fake(h100), {});
  CHECK(plan.ranges[0].backend != Backend::kCluster);
  CHECK(Has(plan.fallbacks.Entries().at(0), "cluster does not plan at H=512 B=64"));
  plan = PlanCall(Call(MakeDims(1, 1, 50, 8, 16, 128)), Attrs(Strategy::kCluster), Fake(h100, 0), {});
  CHECK(Has(plan.fallbacks.Entries().at(0), "with clusters of at most 0 blocks: runs as auto"));
  plan = PlanCall(Call(MakeDims(1, 1, 50, 8, 16, 2048)), Attrs(Strategy::kSplitK), Fake(h100), {});
  CHECK(plan.step == StepKernel::kTiled);
  CHECK(Has(plan.fallbacks.Entries().at(0), "splitk holds a unit's weights in registers up to H=1024, not 2048"));
}

TEST(OverridesReachThePlan) {
  const DeviceLimits h100 = unit::H100();
  const Dims d = MakeDims(2, 1, 50, 16, 64, 256);
  Overrides o;
  o.tile_u = 8;
  o.tile_bb = 16;
  CallPlan plan = PlanCall(Call(d), Attrs(Strategy::kPersistent), Fake(h100), o);
  for (const RangePlan& r : plan.ranges) {
    CHECK(r.persistent() != nullptr);
    if (r.persistent()) CHECK(r.persistent()->U == 8 && r.persistent()->Bb == 16);
  }
  o = Overrides{};
  o.gemm_step = true;
  plan = PlanCall(Call(d), Attrs(Strategy::kPersistent), Fake(h100), o);
  CHECK(plan.step == StepKernel::kGemm && plan.ranges[0].backend == Backend::kStepwise);
  o = Overrides{};
  o.strategy = Strategy::kTiled;  // over the node's strategy
  plan = PlanCall(Call(d), Attrs(Strategy::kPersistent), Fake(h100), o);
  CHECK(plan.strategy == Strategy::kTiled && plan.step == StepKernel::kTiled);
  o = Overrides{};
  o.mma_forced = true;
  o.mma = MmaOperand::kBf16;
  plan = PlanCall(Call(d), Attrs(Strategy::kPersistent), Fake(h100), o);
  CHECK(plan.mma == MmaOperand::kBf16);
  CHECK(Has(DescribeRanges(plan), "tensor cores, bf16"));
}

TEST(TunedEntryPicksTheStrategyUnderAutoOnly) {
  const DeviceLimits h100 = unit::H100();
  const Dims d = MakeDims(1, 1, 50, 8, 64, 128);
  Attributes a = Attrs(Strategy::kAuto);
  a.tuned = {{"other", 50, 8, Strategy::kTiled}, {"fake", 50, 8, Strategy::kSplitK}};
  CHECK(PlanCall(Call(d), a, Fake(h100), {}).strategy == Strategy::kSplitK);
  a.strategy = Strategy::kWavefront;
  CHECK(PlanCall(Call(d), a, Fake(h100), {}).strategy == Strategy::kWavefront);
}

TEST(NoStepsPlanEveryLayerStepwise) {
  const DeviceLimits h100 = unit::H100();
  CallInputs in = Call(MakeDims(3, 1, 50, 8, 64, 128));
  in.max_len = 0;
  const CallPlan plan = PlanCall(in, Attrs(Strategy::kWavefront), Fake(h100), {});
  CHECK_EQ(plan.ranges.size(), size_t{3});
  for (const RangePlan& r : plan.ranges) CHECK(r.backend == Backend::kStepwise);
}

TEST(FactoredWeightsPlanTheLowRankBackend) {
  const DeviceLimits h100 = unit::H100();
  const Dims d = MakeDims(2, 2, 50, 8, 64, 128);
  Attributes a = Attrs(Strategy::kAuto);
  a.ranks.recurrent = {16, 16, 0, 16};  // layer 1's forward recurrence is whole
  CallPlan plan = PlanCall(Call(d), a, Fake(h100), {});
  CHECK(plan.low_rank());
  CHECK_EQ(plan.ranges.size(), size_t{2});
  CHECK(plan.ranges[0].low_rank() != nullptr);  // every direction factored: one launch
  CHECK(plan.ranges[1].low_rank() == nullptr);  // per step
  CHECK_EQ(plan.scratch_bytes, LowRankScratchBytes(d, a.ranks, ElementType::kFloat32));
  CHECK(Has(DescribeRanges(plan), "layer 1: low rank (h A on cuBLAS, then one launch per step)"));
  Overrides o;
  o.low_rank_stepwise = true;
  CHECK(PlanCall(Call(d), a, Fake(h100), o).ranges[0].low_rank() == nullptr);
  a.strategy = Strategy::kPersistent;
  CHECK(Has(PlanCall(Call(d), a, Fake(h100), o).fallbacks.Entries().at(0), "does not apply to factored weights"));
}

TEST(KeptHalvesThatDoNotComeGrowTheScratch) {
  const DeviceLimits h100 = unit::H100();
  const Dims d = MakeDims(2, 1, 64, 64, 1024, 256);  // 4096 rows: 3xTF32 with both halves kept
  CallPlan plan = PlanCall(Call(d), Attrs(Strategy::kAuto), Fake(h100), {});
  CHECK(plan.kept == KeptHalves::kBoth);
  const size_t kept = plan.scratch_bytes;
  plan.KeptHalvesUnavailable();
  CHECK(plan.kept == KeptHalves::kNone && plan.scratch.split_w);
  CHECK(plan.scratch_bytes > kept);
  CHECK(Has(plan.fallbacks.Entries().at(0), "could not be allocated"));
  CallInputs not_constant = Call(d);
  not_constant.w_constant = false;
  CHECK_EQ(PlanCall(not_constant, Attrs(Strategy::kAuto), Fake(h100), {}).scratch_bytes, plan.scratch_bytes);
}

TEST(YRelaysLayersWhereLaidOutAsTheirBuffer) {
  const Dims one = MakeDims(4, 1, 100, 256, 1024, 1024), two = MakeDims(4, 2, 100, 256, 1024, 1024);
  CHECK(YRelaysLayers(one, 0, true));
  CHECK(!YRelaysLayers(one, 0, false));  // no Y to carry them
  CHECK(!YRelaysLayers(one, 1, true));   // batch-major Y
  CHECK(!YRelaysLayers(two, 0, true));   // [T][D][B][H]: the directions apart
  // Relayed, the scratch holds no buffer between layers: one layer's output less (100 MiB here),
  // and the kept halves falling through keep it so.
  const DeviceLimits h100 = unit::H100();
  CallInputs in = Call(one);
  const size_t buffered = PlanCall(in, Attrs(Strategy::kAuto), Fake(h100), {}).scratch_bytes;
  in.y_relays = true;
  CallPlan relayed = PlanCall(in, Attrs(Strategy::kAuto), Fake(h100), {});
  CHECK_EQ(buffered - relayed.scratch_bytes, size_t{4} * 100 * 256 * 1024);
  relayed.KeptHalvesUnavailable();
  CHECK(relayed.scratch.y_relays);
}

TEST(DescriptionNamesEachRange) {
  CallPlan plan;
  PersistentPlan p;
  p.blocks = 96;
  p.U = 8;
  p.Bb = 16;
  p.smem = 100 * 1024 + 17;
  plan.step = StepKernel::kSplitK;
  plan.ranges = {{0, 1, Backend::kStepwise, {}}, {1, 3, Backend::kWavefront, p}, {4, 1, Backend::kPersistent, p}};
  CHECK_EQ(DescribeRanges(plan),
           std::string("layer 0: v1 splitk (one launch per step); "
                       "layers 1-3: wavefront (96 blocks of 8 units x 16 rows, 100 KiB shared memory); "
                       "layer 4: persistent (96 blocks of 8 units x 16 rows, 100 KiB shared memory)"));
  plan.precision = Precision::kAuto;
  plan.resolved = Arithmetic::kTf32;
  CHECK(Has(DescribeCallPlan(plan), "; auto runs tf32 at this size"));
}

TEST(ClusterPlansRunEveryLayerAndSayHow) {
  const DeviceLimits h100 = unit::H100();
  const CallPlan plan = PlanCall(Call(MakeDims(3, 1, 50, 1, 16, 128)), Attrs(Strategy::kCluster), Fake(h100), {});
  CHECK_EQ(plan.ranges.size(), size_t{3});
  for (const RangePlan& r : plan.ranges) CHECK(r.cluster() != nullptr && r.backend == Backend::kCluster);
  const std::string text = DescribeRanges(plan);
  CHECK(Has(text, "layer 0: cluster (") && Has(text, "layer 2: cluster"));
}

TEST(OneStepMultipliesLayerZerosInputInItsFmaStep) {
  const DeviceLimits h100 = unit::H100();
  const CallPlan one = PlanCall(Call(MakeDims(1, 1, 1, 8, 64, 128)), Attrs(Strategy::kAuto), Fake(h100), {});
  CHECK(one.step == StepKernel::kSplitK && one.step_projects);
  CHECK_EQ(DescribeRanges(one), std::string("layer 0: v1 splitk (one launch, the input product in the step)"));
  const CallPlan forced = PlanCall(Call(MakeDims(3, 2, 1, 8, 64, 128)), Attrs(Strategy::kSplitK), Fake(h100), {});
  CHECK(forced.step_projects);  // layer 0 only: the layers above read their input from the one below
  CHECK(Has(DescribeRanges(forced), "layer 0: v1 splitk (one launch, the input product in the step); "
                                    "layer 1: v1 splitk (one launch per step)"));
  const CallPlan stack = PlanCall(Call(MakeDims(2, 1, 1, 8, 64, 128)), Attrs(Strategy::kAuto), Fake(h100), {});
  CHECK(!stack.step_projects && stack.ranges[0].backend == Backend::kWavefront);
  CHECK(!PlanCall(Call(MakeDims(1, 1, 2, 8, 64, 128)), Attrs(Strategy::kSplitK), Fake(h100), {}).step_projects);
  const CallPlan tiled = PlanCall(Call(MakeDims(1, 1, 1, 8, 64, 128)), Attrs(Strategy::kTiled), Fake(h100), {});
  CHECK(tiled.step == StepKernel::kTiled && tiled.step_projects);
  CHECK_EQ(DescribeRanges(tiled), std::string("layer 0: v1 tiled (one launch, the input product in the step)"));
  CHECK(!PlanCall(Call(MakeDims(1, 1, 1, 8, 64, 128)), Attrs(Strategy::kSplitK, Precision::kTf32), Fake(h100), {})
             .step_projects);  // the projection's math is not the FMA product's
  CallInputs shorter = Call(MakeDims(1, 1, 1, 8, 64, 128));
  shorter.max_len = 0;
  CHECK(!PlanCall(shorter, Attrs(Strategy::kSplitK), Fake(h100), {}).step_projects);
}

TEST(OneStepStacksOnTheCublasStepStageEveryLayersRows) {
  const DeviceLimits h100 = unit::H100();
  const Attributes automatic = Attrs(Strategy::kAuto, Precision::kAuto);
  const CallPlan stack = PlanCall(Call(MakeDims(2, 1, 1, 4, 768, 768)), automatic, Fake(h100), {});
  CHECK(stack.step == StepKernel::kGemm && stack.step_projects && stack.upper_step_projects);
  CHECK(stack.StepProjectsLayer(1));
  CHECK_EQ(DescribeRanges(stack), std::string("layer 0: v1 cuBLAS (one GEMM of [x h] with [W; R], then the cell); "
                                              "layer 1: v1 cuBLAS (one GEMM of [x h] with [W; R], then the cell)"));
  // Two directions interleave the layer below's rows.
  CHECK(!PlanCall(Call(MakeDims(2, 2, 1, 4, 768, 768)), automatic, Fake(h100), {}).upper_step_projects);
  // An FMA step would read x in the buffer it writes.
  const CallPlan split = PlanCall(Call(MakeDims(2, 1, 1, 8, 64, 128)), Attrs(Strategy::kSplitK), Fake(h100), {});
  CHECK(split.step_projects && !split.upper_step_projects && !split.StepProjectsLayer(1));
  CallInputs longer = Call(MakeDims(2, 1, 2, 4, 768, 768));
  CHECK(!PlanCall(longer, automatic, Fake(h100), {}).upper_step_projects);
}

TEST(EmptyCallsPlan) {
  // B = 0 (nothing runs) and T = 0 (no steps): every strategy and precision plans without dividing by zero.
  const DeviceLimits h100 = unit::H100();
  for (Strategy s : {Strategy::kAuto, Strategy::kTiled, Strategy::kSplitK, Strategy::kPersistent,
                     Strategy::kWavefront, Strategy::kCluster})
    for (Precision p : {Precision::kFp32, Precision::kTf32, Precision::kFp16, Precision::kBf16, Precision::kAuto})
      for (const Dims& d : {MakeDims(2, 2, 10, 0, 16, 64), MakeDims(2, 1, 0, 8, 16, 64)}) {
        const CallPlan plan = PlanCall(Call(d), Attrs(s, p), Fake(h100), {});
        CHECK_EQ(plan.ranges.size(), size_t{2});
      }
}

TEST(TunedWinnersAreNoRequest) {
  // A tuned cluster winner where the cluster kernel does not plan runs as auto without a fallback:
  // only what the call asked for (attribute or override) can fall back.
  const DeviceLimits h100 = unit::H100();
  const Dims d = MakeDims(1, 1, 50, 64, 16, 512);
  Attributes a = Attrs(Strategy::kAuto);
  a.tuned = {{"fake", 50, 64, Strategy::kCluster}};
  Overrides strict;
  strict.strict = true;
  const CallPlan plan = PlanCall(Call(d), a, Fake(h100), strict);
  CHECK(plan.strategy == Strategy::kCluster && plan.fallbacks.Entries().empty());
  CHECK(plan.ranges[0].backend != Backend::kCluster);
}
