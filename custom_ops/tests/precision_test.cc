// The one precision decision (precision.cc): what each mode runs on each device.
#include "check.h"
#include "enum_names.h"
#include "precision.h"

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

Arithmetic OnCuda(Precision p, int64_t B, int64_t H) { return DecidePrecision(p, Device::kCuda, Sizes(B, H)).runs; }

const Precision kModes[] = {Precision::kFp32, Precision::kTf32, Precision::kFp16, Precision::kBf16, Precision::kAuto};

}  // namespace

TEST(AutoRunsOneStepAsTf32WhereItsProductIsLarge) {
  const auto one_step = [](int64_t B, int64_t H) {
    Dims d = Sizes(B, H);
    d.T = 1;
    return d;
  };
  CHECK(OneStepRunsAsTf32(one_step(24, 512)) && !OneStepRunsAsTf32(one_step(23, 512)));  // 12K cells
  CHECK(OneStepRunsAsTf32(one_step(1, 768)) && OneStepRunsAsTf32(one_step(1, 1024)));  // any batch from H = 768
  CHECK(!OneStepRunsAsTf32(one_step(1, 767)));
  CHECK(!OneStepRunsAsTf32(one_step(512, 256)));   // below kMinHiddenForAutoTf32OneStep
  CHECK(!OneStepRunsAsTf32(one_step(8, 2048)));    // beyond: the weights stream either way
  CHECK(!OneStepRunsAsTf32(Sizes(64, 512)));       // ten steps
  Dims stack = one_step(64, 512), deep = one_step(64, 512), both = one_step(64, 512);
  stack.L = kMaxLayersForAutoTf32OneStep;
  deep.L = kMaxLayersForAutoTf32OneStep + 1;
  both.D = 2;
  CHECK(OneStepRunsAsTf32(stack));  // measured on stacks of up to three layers, one direction
  CHECK(!OneStepRunsAsTf32(deep) && !OneStepRunsAsTf32(both));
  Dims three = one_step(9, 512), two = one_step(9, 512);
  three.L = kMinLayersForAutoTf32OneStepAtFewerCells;
  two.L = kMinLayersForAutoTf32OneStepAtFewerCells - 1;
  CHECK(OneStepRunsAsTf32(three) && !OneStepRunsAsTf32(two));  // 4.5K cells: three layers' one GEMMs pay
  three.B = 8;
  CHECK(!OneStepRunsAsTf32(three));
  CHECK(DecidePrecision(Precision::kAuto, Device::kCuda, one_step(64, 512)).runs == Arithmetic::kTf32);
  CHECK(DecidePrecision(Precision::kAuto, Device::kCuda, one_step(16, 512)).runs == Arithmetic::kFp32);
  CHECK(DecidePrecision(Precision::kFp32, Device::kCuda, one_step(64, 512)).runs == Arithmetic::kFp32);
}

TEST(AutoRunsAsTf32OnCudaWhereFp32LosesToStocksDefault) {
  CHECK(OnCuda(Precision::kAuto, 256, 128) == Arithmetic::kTf32);  // large batch
  CHECK(OnCuda(Precision::kAuto, 255, 128) == Arithmetic::kFp32);
  CHECK(OnCuda(Precision::kAuto, 128, 512) == Arithmetic::kFp32);  // fp32 still wins
  CHECK(OnCuda(Precision::kAuto, 16, 1024) == Arithmetic::kTf32);  // weights stream: B*H = 16K
  CHECK(OnCuda(Precision::kAuto, 8, 1024) == Arithmetic::kFp32);
  CHECK(OnCuda(Precision::kAuto, 15, 1024) == Arithmetic::kFp32);
  CHECK(OnCuda(Precision::kAuto, 8, 2048) == Arithmetic::kTf32);
  CHECK(AutoRunsAsTf32(Sizes(256, 1)) && !AutoRunsAsTf32(Sizes(255, 1023)));
  CHECK(AutoRunsAsTf32(Sizes(16, 1024)) && !AutoRunsAsTf32(Sizes(15, 1024)));
  // Every other mode runs as asked, at any size.
  for (Precision p : {Precision::kFp32, Precision::kTf32, Precision::kFp16, Precision::kBf16})
    for (int64_t B : {1, 512}) CHECK(static_cast<int>(OnCuda(p, B, 2048)) == static_cast<int>(p));
  CHECK(DecidePrecision(Precision::kAuto, Device::kCuda, Sizes(256, 128)).words.rfind("tf32: auto", 0) == 0);
}

TEST(AutoRunsAsTf32OnCudaWhereTheStepsHalfWeightsHalveWhatTheyRead) {
  // From H = 1536 and the steps a 16-bit copy of R pays for, at any batch (T = 10 in Sizes).
  for (int64_t B : {1, 4, 9, 10})
    for (int64_t H : {kMinHiddenForAutoTf32Weights, int64_t{2048}, int64_t{8192}}) CHECK(OnCuda(Precision::kAuto, B, H) == Arithmetic::kTf32);
  CHECK(OnCuda(Precision::kAuto, 1, kMinHiddenForAutoTf32Weights - 1) == Arithmetic::kFp32);
  Dims short_call = Sizes(1, 2048);
  short_call.T = kMinStepsForHalfWeights - 1;  // no copy of R at these lengths: fp32 reads the same bytes
  CHECK(!AutoRunsAsTf32(short_call));
  short_call.D = 2;
  CHECK(!AutoRunsAsTf32(short_call));
  CHECK(DecidePrecision(Precision::kAuto, Device::kCuda, Sizes(1, 2048)).words ==
        "tf32: auto at this size, where a step's 16-bit weight copy halves what it reads");
  CHECK(DecidePrecision(Precision::kAuto, Device::kCuda, Sizes(8, 2048)).words.find("lose to stock") != std::string::npos);
}

TEST(AutoRunsAsTf32OnCudaOnTheStacksTheTensorCoreStepTakes) {
  Dims seed = Sizes(64, 512);  // L4 T100 H512 B64: tf32 1.93 ms against fp32's 3.75 (H100)
  seed.L = 4;
  seed.T = 100;
  CHECK(OnCuda(Precision::kAuto, 64, 512) == Arithmetic::kFp32);  // one layer: fp32 still costs nothing
  CHECK(DecidePrecision(Precision::kAuto, Device::kCuda, seed).runs == Arithmetic::kTf32);
  CHECK(DecidePrecision(Precision::kAuto, Device::kCuda, seed).words.find("tensor-core step") != std::string::npos);
  CHECK(MmaStepTakesStack(seed, false) && !MmaStepTakesStack(seed, /*tf32x3=*/true));
  // The edges of the step's 16-bit region, one size at a time (auto runs tf32 on some stacks past
  // them too: the resident region, below).
  auto changed = [&seed](auto edit) {
    Dims d = seed;
    edit(d);
    return d;
  };
  CHECK(!MmaStepTakesStack(changed([](Dims& d) { d.L = kMinLayersForMmaStep - 1; }), false));
  CHECK(MmaStepTakesStack(changed([](Dims& d) { d.L = kMinLayersForMmaStep; }), false));
  CHECK(!MmaStepTakesStack(changed([](Dims& d) { d.D = 2; }), false));
  CHECK(!MmaStepTakesStack(changed([](Dims& d) { d.T = kMinStepsForHalfWeights - 1; }), false));
  CHECK(!MmaStepTakesStack(changed([](Dims& d) { d.B = kMinBatchForMmaStep - 1; }), false));
  CHECK(!MmaStepTakesStack(changed([](Dims& d) { d.H = kMaxHiddenForMmaStep + 32; }), false));
  CHECK(!MmaStepTakesStack(changed([](Dims& d) { d.H = 256; }), false));  // B*H 16K < kMinCellsForMmaStep
  CHECK(MmaStepTakesStack(changed([](Dims& d) { d.H = 256, d.B = 256; }), false));
  CHECK(!MmaStepTakesStack(changed([](Dims& d) { d.H = 256, d.B = 255; }), false));
  CHECK(!MmaStepTakesStack(changed([](Dims& d) { d.H = kMinHiddenForMmaStep - 32, d.B = 255; }), false));
  // Outside both regions auto keeps fp32.
  CHECK(!AutoRunsAsTf32(changed([](Dims& d) { d.L = 1; })));
  CHECK(!AutoRunsAsTf32(changed([](Dims& d) { d.D = 2; })));
  CHECK(!AutoRunsAsTf32(changed([](Dims& d) { d.T = kMinStepsForHalfWeights - 1; })));
  CHECK(!AutoRunsAsTf32(changed([](Dims& d) { d.H = kMaxHiddenForMmaStep + 32; })));
  CHECK(!AutoRunsAsTf32(changed([](Dims& d) { d.H = kMinHiddenForMmaStep - 32, d.B = 255; })));
  // The CPU never takes it.
  CHECK(DecidePrecision(Precision::kAuto, Device::kCpu, seed).runs == Arithmetic::kFp32);
}

namespace {

Dims Stack(int64_t L, int64_t H, int64_t B) {
  Dims d = Sizes(B, H);
  d.L = L;
  d.T = 100;
  return d;
}

}  // namespace

TEST(TheResidentStepsRegionHasTheMeasuredEdges) {
  const bool tf32 = false, fp16 = true;  // ResidentMmaStepTakesStack's fp16_runs
  // tf32, 3+ layers: B*H >= 16K (L4 H256 B64 1.24 -> 0.99 ms; L4 H256 B32 0.70 -> 0.97).
  CHECK(ResidentMmaStepTakesStack(Stack(3, 256, 64), tf32) && !ResidentMmaStepTakesStack(Stack(3, 256, 63), tf32));
  CHECK(ResidentMmaStepTakesStack(Stack(4, 384, 43), tf32) && !ResidentMmaStepTakesStack(Stack(4, 384, 42), tf32));
  CHECK(ResidentMmaStepTakesStack(Stack(4, 512, 32), tf32) && !ResidentMmaStepTakesStack(Stack(4, 512, 31), tf32));
  CHECK(!ResidentMmaStepTakesStack(Stack(4, 256, 32), tf32));
  // tf32, two layers: B >= 64 and B*H >= 24K (L2 H384 B64 and L2 H256 B128 win; L2 H256 B64 and
  // L2 H512 B32 lose); one layer never (L1 H512 B64 0.77 -> 1.02).
  CHECK(ResidentMmaStepTakesStack(Stack(2, 384, 64), tf32) && !ResidentMmaStepTakesStack(Stack(2, 352, 64), tf32));
  CHECK(ResidentMmaStepTakesStack(Stack(2, 256, 96), tf32) && !ResidentMmaStepTakesStack(Stack(2, 256, 95), tf32));
  CHECK(ResidentMmaStepTakesStack(Stack(2, 512, 64), tf32) && !ResidentMmaStepTakesStack(Stack(2, 512, 63), tf32));
  CHECK(ResidentMmaStepTakesStack(Stack(2, 256, 128), tf32) && !ResidentMmaStepTakesStack(Stack(2, 256, 64), tf32));
  CHECK(!ResidentMmaStepTakesStack(Stack(2, 512, 32), tf32) && !ResidentMmaStepTakesStack(Stack(1, 512, 64), tf32));
  // fp16, 3+ layers: H >= 384 from 32 rows (L3 H384 B64 1.94 -> 1.38; L3 H256 B64 0.82 -> 0.95).
  CHECK(ResidentMmaStepTakesStack(Stack(3, 384, 32), fp16) && !ResidentMmaStepTakesStack(Stack(3, 352, 64), fp16));
  CHECK(ResidentMmaStepTakesStack(Stack(4, 512, 32), fp16) && !ResidentMmaStepTakesStack(Stack(4, 512, 31), fp16));
  CHECK(!ResidentMmaStepTakesStack(Stack(4, 256, 128), fp16));
  // fp16, two layers: H 512 from 64 rows (L2 H512 B64 1.47 -> 1.21; L2 H512 B32 and L2 H384 B64 lose).
  CHECK(ResidentMmaStepTakesStack(Stack(2, 512, 64), fp16) && !ResidentMmaStepTakesStack(Stack(2, 512, 63), fp16));
  CHECK(!ResidentMmaStepTakesStack(Stack(2, 480, 64), fp16) && !ResidentMmaStepTakesStack(Stack(2, 384, 64), fp16));
  CHECK(!ResidentMmaStepTakesStack(Stack(1, 512, 64), fp16));
  // Both: unidirectional, 256 <= H <= 512, from 8 steps.
  for (bool runs : {tf32, fp16}) {
    Dims d = Stack(4, 512, 64);
    CHECK(ResidentMmaStepTakesStack(d, runs));
    d.D = 2;
    CHECK(!ResidentMmaStepTakesStack(d, runs));
    d = Stack(4, 512, 64);
    d.T = kMinStepsForHalfWeights - 1;
    CHECK(!ResidentMmaStepTakesStack(d, runs));
    d.T = kMinStepsForHalfWeights;
    CHECK(ResidentMmaStepTakesStack(d, runs));
    CHECK(!ResidentMmaStepTakesStack(Stack(4, kMaxHiddenForMmaStep + 32, 64), runs));
    CHECK(!ResidentMmaStepTakesStack(Stack(4, kMinHiddenForMmaStep - 32, 255), runs));
  }
}

TEST(AutoRunsAsTf32OnTheResidentStepsTf32Region) {
  // Outside the step's first region, inside the resident one: the H100's fp32 through onnxruntime
  // 1.79, 1.28 and 2.93 ms against the resident step's tf32 1.24, 0.99 and 1.40.
  for (const Dims& d : {Stack(2, 512, 64), Stack(4, 256, 64), Stack(4, 384, 64)}) {
    CHECK(!MmaStepTakesStack(d, false) && ResidentMmaStepTakesStack(d, false));
    const PrecisionDecision decision = DecidePrecision(Precision::kAuto, Device::kCuda, d);
    CHECK(decision.runs == Arithmetic::kTf32);
    CHECK(decision.words.find("where its weights fit on chip") != std::string::npos);
  }
  // Its edges are auto's: tf32 where the tf32 region takes the stack, not the fp16 region's.
  CHECK(!AutoRunsAsTf32(Stack(2, 256, 64)) && !AutoRunsAsTf32(Stack(2, 512, 32)));
  CHECK(!AutoRunsAsTf32(Stack(4, 256, 63)) && AutoRunsAsTf32(Stack(2, 256, 96)));
  CHECK(ResidentMmaStepTakesStack(Stack(3, 384, 32), /*fp16_runs=*/true) && !AutoRunsAsTf32(Stack(3, 384, 32)));
}

TEST(CpuRunsFp32ForEveryModeButBf16) {
  for (const CpuMath cpu : {CpuMath{}, CpuMath{true, false, false}, CpuMath{true, true, true}})
    for (Precision p : kModes) {
      if (p == Precision::kBf16) continue;
      for (int64_t B : {1, 512}) {  // auto on the CPU never takes tf32, whatever the size
        const PrecisionDecision d = DecidePrecision(p, Device::kCpu, Sizes(B, 2048), cpu);
        CHECK(d.runs == Arithmetic::kFp32);
        CHECK(d.refused.empty());
        CHECK(d.words.rfind("fp32", 0) == 0);
      }
    }
}

TEST(CpuBf16NeedsBf16UnitsElseIsRefusedWithTheReason) {
  for (const CpuMath cpu : {CpuMath{true, false, false}, CpuMath{false, true, false}, CpuMath{true, true, true}}) {
    const PrecisionDecision d = DecidePrecision(Precision::kBf16, Device::kCpu, Sizes(8, 64), cpu);
    CHECK(d.runs == Arithmetic::kBf16);
    CHECK(d.refused.empty());
    CHECK(d.words.find(cpu.amx_bf16 ? "AMX-BF16" : "AVX512-BF16") != std::string::npos);
  }
  const PrecisionDecision none = DecidePrecision(Precision::kBf16, Device::kCpu, Sizes(8, 64), CpuMath{});
  CHECK(none.refused.find("needs AVX512-BF16 or AMX-BF16, which this CPU lacks") != std::string::npos);
  // AMX-INT8 alone is no bf16 unit.
  CHECK(!DecidePrecision(Precision::kBf16, Device::kCpu, Sizes(8, 64), CpuMath{false, false, true}).refused.empty());
}

TEST(CpuBf16AtHalfRateRunsWhereAStepStreamsItsWeightsElseFp32) {
  const CpuMath half{true, false, false, /*bf16_half_rate=*/true};
  auto runs = [&](const CpuMath& cpu, int64_t B, int64_t H) {
    return DecidePrecision(Precision::kBf16, Device::kCpu, Sizes(B, H), cpu).runs;
  };
  for (int64_t H : {8, 64, 511, 512, 4096}) {
    CHECK(runs(half, 1, H) == Arithmetic::kBf16);
    CHECK(runs(half, kHalfRateBf16Rows, H) == Arithmetic::kBf16);
    CHECK(runs(half, 8, H) == Arithmetic::kFp32);
  }
  CHECK(runs(half, 2, 383) == Arithmetic::kFp32 && runs(half, 2, 384) == Arithmetic::kBf16);
  CHECK(runs(half, 2, 200) == Arithmetic::kFp32);  // fp32's pair products win while its weights fit in L2
  CHECK(runs(half, 3, 511) == Arithmetic::kFp32 && runs(half, 3, 512) == Arithmetic::kBf16);
  CHECK(runs(half, kHalfRateBf16StreamRows, 512) == Arithmetic::kBf16);
  CHECK(runs(half, kHalfRateBf16StreamRows + 1, 4096) == Arithmetic::kFp32);
  const PrecisionDecision fp32 = DecidePrecision(Precision::kBf16, Device::kCpu, Sizes(8, 64), half);
  CHECK(fp32.refused.empty());
  CHECK(fp32.words.rfind("fp32: this CPU's bf16 products (AVX512-BF16, no AMX) run at half fp32's rate", 0) == 0);
  // AMX, or vectors at full rate, run bf16 at every size.
  for (const CpuMath cpu : {CpuMath{true, true, false, true}, CpuMath{true, false, false, false}})
    for (int64_t B : {1, 8, 512}) CHECK(runs(cpu, B, 64) == Arithmetic::kBf16);
}

TEST(ArithmeticNamesFollowPrecisionNames) {
  for (Arithmetic a : {Arithmetic::kFp32, Arithmetic::kTf32, Arithmetic::kFp16, Arithmetic::kBf16})
    CHECK_EQ(std::string(EnumName(a)), std::string(EnumName(static_cast<Precision>(a))));
}
