// The CPU kernel tuner (cpu/kernel_tuner.cc): shape classes, candidates in blocks of calls, the median
// winner, presets, settling and which kernels stay in use; the cpu_kernel names and their `tuned`
// entries (attribute_parsing.cc).
#include <string>
#include <vector>

#include "attribute_parsing.h"
#include "check.h"
#include "cpu/kernel_tuner.h"
#include "cpu_kernel_names.h"

using namespace lstm_ort;

namespace {

const std::vector<CpuKernel> kThree = {CpuKernel::kFused, CpuKernel::kStock, CpuKernel::kStockSplit};

// Runs calls of `shape` until the tuner decides, each kernel taking `ms(kernel, call)`.
template <typename Ms>
int RunUntilDecided(KernelTuner& t, ShapeClass shape, const std::vector<CpuKernel>& candidates, Ms ms) {
  for (int call = 0; call < 1000; ++call) {
    const CpuKernel k = t.Choose(shape, candidates).kernel;
    t.Record(shape, k, ms(k, call));
    if (t.Report().front().chosen != CpuKernel::kAuto) return call + 1;
  }
  return -1;
}

}  // namespace

TEST(CpuKernelNamesInEnumOrder) {
  CHECK_EQ(CpuKernelNames(","), std::string("auto,fused,stock,stock_split,stock_threads"));
  CHECK_EQ(CpuKernelChoices(), std::string("auto, fused, stock, stock_split or stock_threads"));
  CHECK(ResolveCpuKernel("stock") == CpuKernel::kStock);
  bool threw = false;
  try {
    ResolveCpuKernel("mlas");
  } catch (const AttributeError& e) {
    threw = std::string(e.what()).find("auto, fused, stock, stock_split or stock_threads") != std::string::npos;
  }
  CHECK(threw);
}

TEST(TunedCpuEntriesNameCpuKernels) {
  const auto entries = ParseTuned("cpu:AMD EPYC 7B13|32|8|stock_split;NVIDIA H100|100|64|persistent");
  CHECK_EQ(entries.size(), size_t(2));
  CHECK(entries[0].cpu_kernel == CpuKernel::kStockSplit);
  CHECK(entries[1].strategy == Strategy::kPersistent);
  CHECK_EQ(FormatTuned(entries), std::string("cpu:AMD EPYC 7B13|32|8|stock_split;NVIDIA H100|100|64|persistent"));
  bool threw = false;
  try {
    ParseTuned("cpu:x|32|8|persistent");  // a CUDA strategy is no CPU kernel
  } catch (const AttributeError&) {
    threw = true;
  }
  CHECK(threw);
}

TEST(ShapeClassesBucketStepsByPowersOfTwo) {
  CHECK(ClassOf(1, 5) == (ShapeClass{1, 5}));
  CHECK(ClassOf(2, 5) == (ShapeClass{2, 5}));
  CHECK(ClassOf(3, 5) == (ShapeClass{4, 5}));
  CHECK(ClassOf(17, 5) == ClassOf(32, 5));
  CHECK(!(ClassOf(32, 5) == ClassOf(33, 5)));
  CHECK(!(ClassOf(32, 5) == ClassOf(32, 6)));
}

TEST(TunerRunsCandidatesInBlocksAndKeepsTheLowestMedian) {
  KernelTuner t(TunerConfig{1, 3, 64});
  const ShapeClass shape{32, 8};
  std::vector<CpuKernel> order;
  CHECK(t.Choose({2, 2}, kThree).measuring);
  for (int i = 0; i < 12; ++i) order.push_back(t.Choose(shape, kThree).kernel);
  const CpuKernel F = CpuKernel::kFused, S = CpuKernel::kStock, P = CpuKernel::kStockSplit;
  CHECK(order == std::vector<CpuKernel>({F, F, F, S, S, S, P, P, P, F, F, F}));  // 1 untimed + 2 each
  // A block's first run is not counted: a slow first stock run does not decide.
  KernelTuner u(TunerConfig{1, 3, 64});
  const int calls = RunUntilDecided(u, shape, kThree, [](CpuKernel k, int call) {
    if (call == 3) return 100.0;  // stock's first
    return k == CpuKernel::kFused ? 2.0 : k == CpuKernel::kStock ? 1.5 : 1.8;
  });
  // Blocks of 1 untimed + 2 timed in rounds, until each has 3: split's third comes one call before
  // the end of the second round.
  CHECK_EQ(calls, 2 * 3 * 3 - 1);
  CHECK(u.Report().front().chosen == CpuKernel::kStock);
  CHECK(u.Choose(shape, kThree).kernel == CpuKernel::kStock);
  CHECK(!u.Choose(shape, kThree).measuring);
  // One outlier among three samples does not move the median.
  KernelTuner v(TunerConfig{1, 3, 64});
  RunUntilDecided(v, shape, kThree, [](CpuKernel k, int call) {
    if (k == CpuKernel::kFused && call == 2) return 50.0;
    return k == CpuKernel::kFused ? 1.0 : 1.2;
  });
  CHECK(v.Report().front().chosen == CpuKernel::kFused);
}

TEST(CloseMediansAreMeasuredAgain) {
  // Fused 2% faster: three runs each do not decide, nine do (blocks of two: 4 rounds and 3 calls).
  KernelTuner t(TunerConfig{0, 3, 64, 0.05, 9});
  const int calls = RunUntilDecided(t, {32, 8}, {CpuKernel::kFused, CpuKernel::kStock},
                                    [](CpuKernel k, int) { return k == CpuKernel::kFused ? 1.0 : 1.02; });
  CHECK_EQ(calls, 4 * 4 + 3);
  CHECK(t.Report().front().chosen == CpuKernel::kFused);
  // 10% apart: decided once each has three (fused four, from its two blocks).
  KernelTuner u(TunerConfig{0, 3, 64, 0.05, 9});
  CHECK_EQ(RunUntilDecided(u, {32, 8}, {CpuKernel::kFused, CpuKernel::kStock},
                           [](CpuKernel k, int) { return k == CpuKernel::kStock ? 1.0 : 1.1; }), 7);
  CHECK(u.Report().front().chosen == CpuKernel::kStock);
}

TEST(EveryBlocksFirstRunIsUntimed) {
  // Fused 2% faster, and each block's first run slow (the threads of the kernel before still
  // spinning): blocks of 1 + 2 until nine timed runs each, none of them a first.
  KernelTuner t(TunerConfig{1, 3, 64, 0.05, 9, 2});
  const std::vector<CpuKernel> two = {CpuKernel::kFused, CpuKernel::kStock};
  CpuKernel last = CpuKernel::kAuto;
  int calls = 0;
  for (; calls < 1000 && (t.Report().empty() || t.Report().front().chosen == CpuKernel::kAuto); ++calls) {
    const CpuKernel k = t.Choose({32, 8}, two).kernel;
    const double base = k == CpuKernel::kFused ? 1.0 : 1.02;
    t.Record({32, 8}, k, k != last ? 100.0 : base);
    last = k;
  }
  CHECK_EQ(calls, 4 * 6 + 3 + 2);
  const ClassReport r = t.Report().front();
  CHECK(r.chosen == CpuKernel::kFused);
  CHECK(r.median_ms.at(CpuKernel::kFused) == 1.0 && r.median_ms.at(CpuKernel::kStock) == 1.02);
}

TEST(TunerTiesGoToTheFirstCandidate) {
  KernelTuner t(TunerConfig{0, 1, 64, 0.05, 1});
  RunUntilDecided(t, {4, 1}, kThree, [](CpuKernel, int) { return 1.0; });
  CHECK(t.Report().front().chosen == CpuKernel::kFused);
}

TEST(OneCandidateIsDecidedAtOnce) {
  KernelTuner t;
  CHECK(t.Choose({8, 1}, {CpuKernel::kFused}).kernel == CpuKernel::kFused);
  CHECK(t.Report().front().chosen == CpuKernel::kFused);
}

TEST(PresetClassesAreNotMeasured) {
  KernelTuner t;
  t.Preset({32, 8}, CpuKernel::kStockSplit);
  CHECK(t.Choose({32, 8}, kThree).kernel == CpuKernel::kStockSplit);
  CHECK(!t.Choose({32, 8}, kThree).measuring);
  t.Record({32, 8}, CpuKernel::kFused, 0.001);
  CHECK(t.Report().front().chosen == CpuKernel::kStockSplit);
  CHECK(t.Report().front().preset);
  // A preset the call cannot run gives way to the first candidate.
  CHECK(t.Choose({32, 8}, {CpuKernel::kFused}).kernel == CpuKernel::kFused);
  // stock_threads, where the pool was counted as one thread, to stock.
  t.Preset({16, 8}, CpuKernel::kStockThreads);
  CHECK(t.Choose({16, 8}, kThree).kernel == CpuKernel::kStock);
  CHECK(t.Choose({16, 8}, {CpuKernel::kFused}).kernel == CpuKernel::kFused);
}

TEST(ClassesStillMeasuringCanBeDecidedForOneKernel) {
  // Stock's kernel refused mid-measurement: the open classes run fused, the decided ones keep theirs.
  KernelTuner t(TunerConfig{0, 1, 2});
  RunUntilDecided(t, {8, 4}, kThree, [](CpuKernel k, int) { return k == CpuKernel::kStock ? 1.0 : 2.0; });
  CHECK(t.Choose({16, 4}, kThree).measuring);
  t.DecideOpen(CpuKernel::kFused);
  const KernelTuner::Pick open = t.Choose({16, 4}, kThree);
  CHECK(open.kernel == CpuKernel::kFused && !open.measuring);
  CHECK(t.Choose({8, 4}, kThree).kernel == CpuKernel::kStock);
  t.Choose({16, 4}, kThree);
  CHECK(t.Settled());
}

TEST(TunerSettlesAfterQuietCallsAndSaysWhichKernelsAreUsed) {
  KernelTuner t(TunerConfig{0, 1, 8});  // decided in 5 calls (F F S S P): settled 8 after the first
  const ShapeClass a{32, 8}, b{64, 8};
  RunUntilDecided(t, a, kThree, [](CpuKernel k, int) { return k == CpuKernel::kStock ? 1.0 : 2.0; });
  CHECK(!t.Settled());
  for (int i = 0; i < 4; ++i) t.Choose(a, kThree);
  CHECK(t.Settled());
  CHECK(t.Uses(CpuKernel::kStock));
  CHECK(!t.Uses(CpuKernel::kFused));
  CHECK(!t.Uses(CpuKernel::kStockSplit));
  // A new class unsettles it, and while it is measured every candidate is in use.
  t.Choose(b, kThree);
  CHECK(!t.Settled());
  CHECK(t.Uses(CpuKernel::kFused));
}
