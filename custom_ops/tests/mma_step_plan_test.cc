// The tensor-core step's planner (cuda/mma_step/plan.cc) and how the call plan takes it
// (cuda/call_plan.cc): every plan must be one kernel.cuh was built for, the operand types follow the
// precision, auto takes it only inside its measured rule, and what the mma_step override asks for
// and cannot have is a fallback.
#include <stdexcept>
#include <string>

#include "check.h"
#include "cuda/call_plan.h"
#include "cuda/mma_step/plan.h"
#include "cuda/scratch_layout.h"
#include "fake_devices.h"

using namespace lstm_ort;

namespace {

CallDevice Fake(const DeviceLimits& limits) {
  CallDevice device;
  device.name = "fake";
  device.max_cluster_blocks = 16;
  device.persistent = [&limits]() -> const DeviceLimits& { return limits; };
  device.low_rank = [&limits]() -> const DeviceLimits& { return limits; };
  device.mma_step = [&limits]() -> const DeviceLimits& { return limits; };
  return device;
}

Attributes Attrs(Precision p, ActKind h_act = ActKind::kTanh) {
  Attributes a;
  a.precision = p;
  for (auto& dir : a.act) {
    dir[0] = {ActKind::kSigmoid, 0.f, 0.f};
    dir[1] = {ActKind::kTanh, 0.f, 0.f};
    dir[2] = {h_act, 0.f, 0.f};
  }
  return a;
}

CallPlan Plan(const Dims& d, Precision p, const std::string& debug, const DeviceLimits& dev,
              ElementType type = ElementType::kFloat32, ActKind h_act = ActKind::kTanh) {
  return PlanCall(CallInputs{d, static_cast<int>(d.T), type, true}, Attrs(p, h_act), Fake(dev),
                  ParseDebugOptions(debug));
}

bool AllOnMmaStep(const CallPlan& plan) {
  for (const RangePlan& r : plan.ranges)
    if (r.backend != Backend::kMmaStep || !r.mma_step()) return false;
  return !plan.ranges.empty();
}

bool Has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST(MmaStepPlansAreKernelsTheTableBuilt) {
  for (const unit::NamedDevice& nd : unit::TestDevices())
    for (MmaOperand op : {MmaOperand::kFp16, MmaOperand::kBf16, MmaOperand::kTf32x3})
      for (int layers : {1, 3, 8})
        for (int H : {32, 96, 256, 512, 2048})
          for (int B : {16, 17, 64, 256, 1024}) {
            const auto p = PlanMmaStepRange(layers, 1, H, B, op, true, nd.dev);
            const std::string where = std::string(nd.name) + " L" + std::to_string(layers) + " H" +
                                      std::to_string(H) + " B" + std::to_string(B);
            if (!p) {
              CHECK(MmaStepSmem(op, 0) > nd.dev.smem_per_block);  // only where no tile fits at all
              continue;
            }
            const MmaStepTile& t = kMmaStepTileTable[p->tile];
            if (!MmaStepTileTakes(op, p->tile)) unit::RecordFailure(__FILE__, __LINE__, where + ": a built kernel");
            CHECK_EQ(p->m_tiles, (B + t.bm - 1) / t.bm);
            CHECK_EQ(p->n_tiles * t.bn, 4 * H);
            CHECK_EQ(p->threads, MmaStepThreads(t));
            CHECK_EQ(p->smem, p->resident ? MmaStepResidentSmem(op, p->tile, layers, H) : MmaStepSmem(op, p->tile));
            CHECK(p->smem <= nd.dev.smem_per_block);
            // Resident only where every block fits at once, and then never with overlapped launches.
            if (p->resident) {
              CHECK(p->blocks() <= nd.dev.sm_count * nd.dev.blocks_per_sm(p->smem, MmaStepKernelKey(op, p->tile, true)));
              CHECK(!p->pdl);
            }
            CHECK_EQ(p->resident, MmaStepResidentFits(*p, H, nd.dev));
            CHECK_EQ(p->blocks(), p->m_tiles * p->n_tiles * layers);
            CHECK_EQ(p->layers, layers);
          }
}

TEST(MmaStepWeightsStayResidentWhereTheGridFitsTheDevice) {
  const DeviceLimits dev = unit::H100();
  // The seed's stack (L4 H512 B64, 64x64): 128 blocks of 20 KiB of rows + 1024 x 72 fp16 weights.
  const auto seed = PlanMmaStepRange(4, 1, 512, 64, MmaOperand::kFp16, true, dev);
  CHECK(seed->resident);
  CHECK_EQ(std::string(kMmaStepTileTable[seed->tile].name), std::string("64x64"));
  CHECK_EQ(seed->blocks(), 128);
  CHECK_EQ(seed->smem, size_t{4 * 64 * 40 * 2 + 1024 * 72 * 2});
  // The tile with the most blocks that fit at once: two layers at B64 take 32-row tiles.
  const auto two = PlanMmaStepRange(2, 1, 512, 64, MmaOperand::kFp16, true, dev);
  CHECK(two->resident && two->blocks() == 128);
  CHECK_EQ(std::string(kMmaStepTileTable[two->tile].name), std::string("32x64k2"));
  // Not where the grid outgrows the SMs (L8: 256 blocks) or the weights a block (3xTF32: 4 bytes).
  CHECK(!PlanMmaStepRange(8, 1, 512, 64, MmaOperand::kFp16, true, dev)->resident);
  CHECK(!PlanMmaStepRange(4, 1, 512, 256, MmaOperand::kFp16, true, dev)->resident);
  CHECK(!PlanMmaStepRange(4, 1, 512, 64, MmaOperand::kTf32x3, false, dev)->resident);
  // The debug key turns it off; the streamed plan is then what it was.
  const auto off = PlanMmaStepRange(4, 1, 512, 64, MmaOperand::kFp16, true, dev, -1, false);
  CHECK(!off->resident);
  CHECK_EQ(off->smem, MmaStepSmem(MmaOperand::kFp16, off->tile));
  CHECK_EQ(std::string(kMmaStepTileTable[off->tile].name), std::string("64x64k2"));  // the streamed rule's
}

TEST(MmaStepShapesItDoesNotServe) {
  const DeviceLimits dev = unit::H100();
  CHECK(!PlanMmaStepRange(1, 1, 100, 64, MmaOperand::kFp16, true, dev));   // H not a multiple of 32
  CHECK(!PlanMmaStepRange(1, 1, 256, 8, MmaOperand::kFp16, true, dev));    // B under 16 rows
  CHECK(!PlanMmaStepRange(2, 2, 256, 64, MmaOperand::kFp16, true, dev));   // layers of a bidirectional stack
  CHECK(!PlanMmaStepRange(1, 1, 256, 64, MmaOperand::kTf32, true, dev));   // no single-tf32 kernel
  CHECK(!PlanMmaStepRange(1, 1, 256, 64, MmaOperand::kFp16, true, dev, 7));  // 64x64k4: 3xTF32 only
  CHECK(PlanMmaStepRange(1, 1, 256, 64, MmaOperand::kTf32x3, false, dev, 7).has_value());
}

TEST(MmaStepTilesAndOverlapFollowTheMeasurements) {
  const DeviceLimits dev = unit::H100();
  CHECK_EQ(std::string(kMmaStepTileTable[PlanMmaStepRange(4, 1, 512, 64, MmaOperand::kFp16, true, dev, -1, false)->tile].name),
           std::string("64x64k2"));
  CHECK_EQ(std::string(kMmaStepTileTable[PlanMmaStepRange(4, 1, 512, 256, MmaOperand::kFp16, true, dev, -1, false)->tile].name),
           std::string("64x128"));
  CHECK_EQ(std::string(kMmaStepTileTable[PlanMmaStepRange(4, 1, 512, 256, MmaOperand::kTf32x3, false, dev)->tile].name),
           std::string("64x64"));
  CHECK(PlanMmaStepRange(4, 1, 512, 256, MmaOperand::kFp16, true, dev)->pdl);
  CHECK(!PlanMmaStepRange(4, 1, 512, 64, MmaOperand::kFp16, true, dev, -1, false)->pdl);
  CHECK(!PlanMmaStepRange(4, 1, 512, 256, MmaOperand::kTf32x3, false, dev)->pdl);
}

TEST(MmaStepStacksAreOneWavefrontForward) {
  const DeviceLimits dev = unit::H100();
  auto forward = PlanMmaStepStack(10, 1, 100, 64, 512, 64, MmaOperand::kFp16, true, dev);
  CHECK_EQ(forward.size(), size_t{2});  // 8 layers, then 2
  CHECK_EQ(forward[0].count, kMaxMmaStepLayers);
  CHECK_EQ(forward[1].first, kMaxMmaStepLayers);
  auto capped = PlanMmaStepStack(4, 1, 100, 64, 512, 64, MmaOperand::kFp16, true, dev, -1, 1);
  CHECK_EQ(capped.size(), size_t{4});
  auto bidirectional = PlanMmaStepStack(3, 2, 100, 64, 512, 64, MmaOperand::kFp16, true, dev);
  CHECK_EQ(bidirectional.size(), size_t{3});
  for (const MmaStepRange& r : bidirectional) CHECK_EQ(r.count, 1);
  CHECK_EQ(MmaStepWeightCopyBytes(3, 1, 512), int64_t{2} * (512 + 2 * 2 * 512) * 4 * 512);
}

TEST(MmaStepOperandsFollowThePrecision) {
  CHECK(*MmaStepOperandFor(Arithmetic::kFp32, ElementType::kFloat32) == MmaOperand::kTf32x3);
  CHECK(*MmaStepOperandFor(Arithmetic::kTf32, ElementType::kFloat32) == MmaOperand::kFp16);
  CHECK(*MmaStepOperandFor(Arithmetic::kFp16, ElementType::kFloat32) == MmaOperand::kFp16);
  CHECK(*MmaStepOperandFor(Arithmetic::kBf16, ElementType::kFloat32) == MmaOperand::kBf16);
  CHECK(*MmaStepOperandFor(Arithmetic::kFp32, ElementType::kFloat16) == MmaOperand::kFp16);
  CHECK(*MmaStepOperandFor(Arithmetic::kBf16, ElementType::kFloat16) == MmaOperand::kBf16);
  CHECK(MmaStepCopiesWeights(MmaOperand::kFp16, false));
  CHECK(!MmaStepCopiesWeights(MmaOperand::kTf32x3, false));
  CHECK(!MmaStepCopiesWeights(MmaOperand::kFp16, true));
  CHECK(MmaStepCopiesWeights(MmaOperand::kBf16, true));
}

TEST(AutoTakesTheMmaStepInsideItsRuleOnly) {
  const DeviceLimits dev = unit::H100();
  // tf32 (and auto where it runs tf32): stacks of 3+ layers, H 256-512, B >= 64 with B*H >= 64K or H 512.
  CHECK(AllOnMmaStep(Plan(MakeDims(4, 1, 100, 64, 512, 512), Precision::kTf32, "", dev)));
  CHECK(AllOnMmaStep(Plan(MakeDims(4, 1, 100, 256, 512, 512), Precision::kAuto, "", dev)));
  CHECK(AllOnMmaStep(Plan(MakeDims(3, 1, 100, 512, 256, 256), Precision::kFp16, "", dev)));
  // Two layers at B256: only resident (below), which outgrows the H100 there.
  CHECK(!AllOnMmaStep(Plan(MakeDims(2, 1, 100, 256, 512, 512), Precision::kTf32, "", dev)));
  CHECK(!AllOnMmaStep(Plan(MakeDims(4, 1, 100, 63, 256, 256), Precision::kTf32, "", dev)));    // B*H under 16K
  CHECK(!AllOnMmaStep(Plan(MakeDims(4, 1, 100, 64, 1024, 1024), Precision::kTf32, "", dev)));  // H above 512
  CHECK(!AllOnMmaStep(Plan(MakeDims(4, 2, 100, 256, 512, 512), Precision::kTf32, "", dev)));   // bidirectional
  CHECK(!AllOnMmaStep(Plan(MakeDims(4, 1, 4, 256, 512, 512), Precision::kTf32, "", dev)));     // copies for 4 steps
  // fp32 (auto where it runs fp32): 3xTF32 from 4 layers and 256 rows.
  CHECK(AllOnMmaStep(Plan(MakeDims(4, 1, 100, 256, 512, 512), Precision::kFp32, "", dev)));
  CHECK(!AllOnMmaStep(Plan(MakeDims(4, 1, 100, 64, 512, 512), Precision::kFp32, "", dev)));
  // auto runs tf32 on the stacks the step takes in 16 bits (AutoRunsAsTf32), the seed's among them.
  CHECK(AllOnMmaStep(Plan(MakeDims(4, 1, 100, 64, 512, 512), Precision::kAuto, "", dev)));
  CHECK(Plan(MakeDims(4, 1, 100, 64, 512, 512), Precision::kAuto, "", dev).resolved == Arithmetic::kTf32);
  CHECK(Plan(MakeDims(2, 1, 100, 32, 512, 512), Precision::kAuto, "", dev).resolved == Arithmetic::kFp32);
  CHECK(!AllOnMmaStep(Plan(MakeDims(3, 1, 100, 256, 512, 512), Precision::kFp32, "", dev)));
  // Never for fp16 models, forced strategies, the persistent planner's overrides, or mma_step=0.
  CHECK(!AllOnMmaStep(Plan(MakeDims(4, 1, 100, 256, 512, 512), Precision::kTf32, "", dev, ElementType::kFloat16)));
  CHECK(!AllOnMmaStep(Plan(MakeDims(4, 1, 100, 256, 512, 512), Precision::kTf32, "strategy=wavefront", dev)));
  CHECK(!AllOnMmaStep(Plan(MakeDims(4, 1, 100, 256, 512, 512), Precision::kTf32, "mma=tf32", dev)));
  CHECK(!AllOnMmaStep(Plan(MakeDims(4, 1, 100, 256, 512, 512), Precision::kTf32, "persistent_tile=16,0", dev)));
  CHECK(!AllOnMmaStep(Plan(MakeDims(4, 1, 100, 256, 512, 512), Precision::kTf32, "mma_step=0", dev)));
  // Nor where h is not bounded by 1 (16-bit h copies).
  CHECK(!AllOnMmaStep(Plan(MakeDims(4, 1, 100, 256, 512, 512), Precision::kTf32, "", dev, ElementType::kFloat32,
                           ActKind::kRelu)));
}

namespace {

bool AllResident(const CallPlan& plan) {
  for (const RangePlan& r : plan.ranges)
    if (!r.mma_step() || !r.mma_step()->resident) return false;
  return !plan.ranges.empty();
}

}  // namespace

TEST(AutoTakesTheResidentOnlyRegionWhereEveryRangeRunsResident) {
  const DeviceLimits h100 = unit::H100();
  // Outside PrefersMmaStep, inside PrefersResidentMmaStep: tf32 (auto's) and fp16, resident on the H100.
  const Dims l2_h512_b64 = MakeDims(2, 1, 100, 64, 512, 512), l4_h256_b64 = MakeDims(4, 1, 100, 64, 256, 256),
             l4_h384_b64 = MakeDims(4, 1, 100, 64, 384, 384);
  for (const Dims& d : {l2_h512_b64, l4_h256_b64, l4_h384_b64}) {
    CHECK(!PrefersMmaStep(Arithmetic::kTf32, ElementType::kFloat32, d));
    CHECK(PrefersResidentMmaStep(Arithmetic::kTf32, ElementType::kFloat32, d));
    const CallPlan tf32 = Plan(d, Precision::kAuto, "", h100);
    CHECK(tf32.resolved == Arithmetic::kTf32);
    CHECK(AllOnMmaStep(tf32) && AllResident(tf32));
    CHECK(tf32.fallbacks.Entries().empty());
  }
  CHECK(AllResident(Plan(l4_h384_b64, Precision::kFp16, "", h100)));
  CHECK(AllResident(Plan(l2_h512_b64, Precision::kFp16, "", h100)));
  CHECK(!AllOnMmaStep(Plan(l4_h256_b64, Precision::kFp16, "", h100)));  // fp16 from H 384
  // Not for fp32 (3xTF32), bf16 or fp16 models.
  CHECK(!PrefersResidentMmaStep(Arithmetic::kFp32, ElementType::kFloat32, l4_h384_b64));
  CHECK(!PrefersResidentMmaStep(Arithmetic::kBf16, ElementType::kFloat32, l4_h384_b64));
  CHECK(!PrefersResidentMmaStep(Arithmetic::kFp16, ElementType::kFloat16, l4_h384_b64));
  // Where a range cannot run resident, the other backends run the call, in tf32 still, with no
  // fallback (nothing was forced): fewer SMs than the grid's blocks, less shared memory than a
  // block's weight columns, or the debug key turning resident off. The streamed step would plan.
  const DeviceLimits few_sms = unit::FakeDevice(16, 227 * 1024, 228 * 1024, 1024, 1);
  const DeviceLimits small_smem = unit::FakeDevice(132, 64 * 1024, 64 * 1024, 1024, 1);
  for (const Dims& d : {l2_h512_b64, l4_h256_b64, l4_h384_b64}) {
    for (const DeviceLimits* dev : {&few_sms, &small_smem}) {
      const CallPlan plan = Plan(d, Precision::kAuto, "", *dev);
      CHECK(plan.resolved == Arithmetic::kTf32);
      CHECK(!AllOnMmaStep(plan));
      CHECK(plan.fallbacks.Entries().empty());
      CHECK(AllOnMmaStep(Plan(d, Precision::kAuto, "mma_step=1", *dev)));  // streamed
    }
    const CallPlan off = Plan(d, Precision::kAuto, "mma_step_resident=0", h100);
    CHECK(!AllOnMmaStep(off) && off.fallbacks.Entries().empty());
  }
  // The step's first region keeps the streamed step where resident is off or does not fit.
  const Dims seed = MakeDims(4, 1, 100, 64, 512, 512);
  CHECK(AllOnMmaStep(Plan(seed, Precision::kAuto, "mma_step_resident=0", h100)));
  const CallPlan streamed = Plan(seed, Precision::kAuto, "", few_sms);
  CHECK(AllOnMmaStep(streamed) && !AllResident(streamed));
}

TEST(ForcedMmaStepRunsWhereItPlansAndSaysHow) {
  const DeviceLimits dev = unit::H100();
  const CallPlan plan = Plan(MakeDims(3, 1, 20, 40, 16, 128), Precision::kFp32, "mma_step=1;strict=1", dev);
  CHECK(AllOnMmaStep(plan));
  CHECK_EQ(plan.ranges.size(), size_t{1});
  CHECK(plan.fallbacks.Entries().empty());
  const MmaStepPlan& m = *plan.ranges[0].mma_step();
  CHECK(m.operand == MmaOperand::kTf32x3);
  CHECK(!m.copies_weights);
  CHECK(Has(DescribeCallPlan(plan), "layers 0-2: tensor-core step (3xtf32, 3 layers a launch, one cooperative launch "
                                    "for every interval, weights resident in shared memory"));
  CHECK(Has(DescribeCallPlan(Plan(MakeDims(3, 1, 20, 40, 16, 128), Precision::kFp32,
                                  "mma_step=1;mma_step_resident=0", dev)),
            "layers 0-2: tensor-core step (3xtf32, 3 layers a launch, one launch per interval of"));
  CHECK(plan.scratch.step_exps);
  CHECK_EQ(plan.scratch.step_weight_bytes, int64_t{0});
  CHECK_EQ(plan.scratch_bytes, ScratchBytes(plan.in.dims, plan.in.type, plan.scratch));
  // 16-bit operands copy the range's weights: the scratch holds them.
  const CallPlan half = Plan(MakeDims(3, 1, 20, 40, 16, 128), Precision::kTf32, "mma_step=1", dev);
  CHECK_EQ(half.scratch.step_weight_bytes, MmaStepWeightCopyBytes(3, 1, 128));
  const Scratch s = CarveScratch(half.in.dims, half.in.type, half.scratch, reinterpret_cast<void*>(4096), nullptr);
  CHECK(s.step_w != nullptr && s.step_exps != nullptr && s.barrier != nullptr);
  CHECK(Has(DescribeCallPlan(Plan(MakeDims(1, 2, 20, 40, 16, 128), Precision::kBf16, "mma_step=1", dev)),
            "layer 0: tensor-core step (bf16, one cooperative launch for every step"));
}

TEST(ForcedMmaStepThatCannotRunIsAFallback) {
  const DeviceLimits dev = unit::H100();
  const CallPlan plan = Plan(MakeDims(2, 1, 20, 40, 16, 100), Precision::kFp32, "mma_step=1", dev);
  CHECK(!AllOnMmaStep(plan));
  CHECK_EQ(plan.fallbacks.Entries().size(), size_t{1});
  CHECK(Has(plan.fallbacks.Entries()[0], "the tensor-core step (mma_step): it needs H a multiple of 32"));
  CHECK(Has(DescribeCallPlan(plan), "; fallback: the tensor-core step"));
  const CallPlan unbounded =
      Plan(MakeDims(2, 1, 20, 40, 16, 128), Precision::kTf32, "mma_step=1", dev, ElementType::kFloat32, ActKind::kRelu);
  CHECK(Has(unbounded.fallbacks.Entries().at(0), "16-bit h needs |h| <= 1"));
  bool threw = false;
  try {
    Plan(MakeDims(2, 1, 20, 8, 16, 128), Precision::kFp32, "mma_step=1;strict=1", dev);  // B under 16
  } catch (const std::runtime_error& e) {
    threw = Has(e.what(), "strict mode") && Has(e.what(), "B >= 16");
  }
  CHECK(threw);
}
