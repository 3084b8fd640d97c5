// The CPU call plan (cpu/call_plan.cc): the kernel (forced, tuned, measured, refused), the weight
// format from the precision decision, the int8 scales' constraint on the threads, the description.
#include <string>
#include <vector>

#include "check.h"
#include "cpu/call_plan.h"

using namespace lstm_ort;
using namespace lstm_ort::cpu;

namespace {

Attributes Attrs(int64_t H = 64, int64_t L = 1, int D = 1) {
  Attributes a;
  a.hidden_size = H;
  a.num_layers = L;
  a.num_directions = D;
  return a;
}

CpuMachine Machine(int threads = 2, int pool = 2, CpuMath math = CpuMath{true, true, true}) {
  CpuMachine m;
  m.threads = threads;
  m.pool_threads = pool;
  m.name = "Test CPU";
  m.math = math;
  return m;
}

CpuCallInputs Call(int64_t T, int64_t B, int64_t H = 64, int64_t L = 1, int64_t D = 1, const char* no_stock = nullptr) {
  return CpuCallInputs{MakeDims(L, D, T, B, 16, H), T, false, false, no_stock};
}

bool Has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST(CpuPlanMeasuresUnderAutoAmongTheKernelsThatCanRun) {
  const CpuCallPlan p = PlanCpuCall(Call(10, 4), Attrs(), Machine(), {});
  CHECK(p.kernel == CpuKernel::kAuto);
  CHECK_EQ(p.candidates.size(), size_t(4));  // fused, stock, stock_split, stock_threads
  CHECK(PlanCpuCall(Call(10, 1), Attrs(), Machine(2, 1), {}).candidates.size() == 2);  // one row, one pool thread
  // Rows to split but a pool of one thread: the pieces would run in turn, so stock_split is not offered.
  CHECK(PlanCpuCall(Call(10, 4), Attrs(), Machine(2, 1), {}).candidates ==
        (std::vector<CpuKernel>{CpuKernel::kFused, CpuKernel::kStock}));
  const CpuCallPlan no = PlanCpuCall(Call(10, 4, 64, 1, 1, "factored"), Attrs(), Machine(), {});
  CHECK(no.kernel == CpuKernel::kFused);
  CHECK(Has(no.kernel_why, "stock's LSTM cannot: factored"));
}

TEST(CpuPlanWeighsStocksOneThreadInt8KernelOnlyWithOneScalePerStep) {
  // int8 weights, one scale per call and step: the fused kernel and stock's DynamicQuantizeLSTM on
  // one thread compute the same; stock's own threads and batch pieces quantize per slice.
  CpuCallInputs in = Call(10, 8);
  in.int8_weights = true;
  in.why_no_stock = Int8WhyNoStock(Int8Scales::kCall);
  CHECK(in.why_no_stock == nullptr);
  const CpuCallPlan p = PlanCpuCall(in, Attrs(), Machine(2, 2), {});
  CHECK(p.kernel == CpuKernel::kAuto);
  CHECK(p.candidates == (std::vector<CpuKernel>{CpuKernel::kFused, CpuKernel::kStock}));
  for (Int8Scales other : {Int8Scales::kRow, Int8Scales::kSlices}) {
    Attributes a = Attrs();
    a.int8_scales = other;
    in.why_no_stock = Int8WhyNoStock(other);
    CHECK(in.why_no_stock != nullptr);
    CHECK(PlanCpuCall(in, a, Machine(2, 2), {}).kernel == CpuKernel::kFused);
    a.cpu_kernel = CpuKernel::kStock;
    a.cpu_kernel_set = true;
    CHECK(Has(PlanCpuCall(in, a, Machine(2, 2), {}).refused, "no one-thread stock kernel"));
  }
}

TEST(CpuPlanForcedKernelsAndTheirRefusals) {
  Attributes a = Attrs();
  a.cpu_kernel = CpuKernel::kStockSplit;
  a.cpu_kernel_set = true;
  CHECK(PlanCpuCall(Call(10, 4), a, Machine(), {}).kernel == CpuKernel::kStockSplit);
  CHECK_EQ(PlanCpuCall(Call(10, 4), a, Machine(), {}).stock_pieces, 2);
  const CpuCallPlan refused = PlanCpuCall(Call(10, 4, 64, 1, 1, "an empty call"), a, Machine(), {});
  CHECK_EQ(refused.refused, std::string("cpu_kernel=stock_split cannot run this call: an empty call"));
  // LSTM_ORT_CPU_KERNEL applies to nodes that name none.
  CHECK(PlanCpuCall(Call(10, 4), Attrs(), Machine(), {}, CpuKernel::kFused).kernel == CpuKernel::kFused);
  CHECK(PlanCpuCall(Call(10, 4), a, Machine(), {}, CpuKernel::kFused).kernel == CpuKernel::kStockSplit);
}

TEST(CpuPlanTakesTunedEntriesOfThisCpuForTheClass) {
  Attributes a = Attrs();
  a.tuned = {{"cpu:Test CPU", 32, 8, Strategy::kAuto, CpuKernel::kStockThreads},
             {"cpu:Other CPU", 16, 8, Strategy::kAuto, CpuKernel::kStock}};
  const CpuCallPlan p = PlanCpuCall(Call(20, 8), a, Machine(), {});  // T 20: the class of 32
  CHECK(p.kernel == CpuKernel::kStockThreads);
  CHECK(Has(p.kernel_why, "tuned"));
  // stock_threads where the pool counts one thread gives way to stock; another CPU's entry is not read.
  CHECK(PlanCpuCall(Call(20, 8), a, Machine(2, 1), {}).kernel == CpuKernel::kStock);
  CHECK(PlanCpuCall(Call(16, 8), a, Machine(), {}).kernel == CpuKernel::kAuto);
  // A tuned stock kernel on a call stock cannot run: fused.
  CHECK(PlanCpuCall(Call(20, 8, 64, 1, 1, "no"), a, Machine(), {}).kernel == CpuKernel::kFused);
}

TEST(CpuPlanWeightFormatFollowsThePrecisionDecision) {
  Attributes a = Attrs();
  for (Precision p : {Precision::kFp32, Precision::kTf32, Precision::kFp16, Precision::kAuto}) {
    a.precision = p;
    CHECK(PlanCpuCall(Call(10, 8), a, Machine(), {}).format == WeightFormat::kFp32);
  }
  a.precision = Precision::kBf16;
  const CpuCallPlan bf16 = PlanCpuCall(Call(10, 8), a, Machine(), {});
  CHECK(bf16.format == WeightFormat::kBf16);
  CHECK(bf16.precision.runs == Arithmetic::kBf16);
  const CpuCallPlan none = PlanCpuCall(Call(10, 8), a, Machine(2, 2, CpuMath{}), {});
  CHECK(Has(none.refused, "needs AVX512-BF16 or AMX-BF16"));
  CHECK(Has(DescribeCpuCall(none), "refused: precision bf16"));
  a.ranks.recurrent = {8};  // factored weights keep their fp32 path
  const CpuCallPlan factored = PlanCpuCall(Call(10, 8), a, Machine(), {});
  CHECK(factored.format == WeightFormat::kFp32 && factored.factored);
  CHECK(factored.precision.runs == Arithmetic::kFp32);
  // bf16 at half fp32's rate (AVX512-BF16 on Intel, no AMX): bf16 weights where a step streams
  // them, fp32 weights (the faster) elsewhere, each call by its own sizes.
  const CpuMachine half = Machine(2, 2, CpuMath{true, false, false, /*bf16_half_rate=*/true});
  a.ranks.recurrent.clear();
  CHECK(PlanCpuCall(Call(10, 1, 64), a, half, {}).format == WeightFormat::kBf16);
  CHECK(PlanCpuCall(Call(10, 4, 1024), a, half, {}).format == WeightFormat::kBf16);
  const CpuCallPlan wide = PlanCpuCall(Call(10, 8, 1024), a, half, {});
  CHECK(wide.format == WeightFormat::kFp32 && wide.precision.runs == Arithmetic::kFp32);
  CHECK(Has(DescribeCpuCall(wide), "fused: fp32 weights, fp32: this CPU's bf16 products"));
}

TEST(CpuPlanInt8CallScalesNeverSplitTheBatch) {
  CpuCallInputs in = Call(50, 64, 64, 1, 1, "int8");
  in.int8_weights = true;
  Attributes a = Attrs();
  const CpuCallPlan call = PlanCpuCall(in, a, Machine(4, 4), {});
  CHECK(call.format == WeightFormat::kInt8);
  CHECK_EQ(call.layers[0].recurrence.batch_chunks, int64_t(1));  // no groups quantized apart
  CHECK_EQ(call.layers[0].recurrence.row_chunks, int64_t(4));    // rows split, one scale per step
  a.int8_scales = Int8Scales::kRow;  // each row its own scale: rows are independent
  const CpuCallPlan row = PlanCpuCall(in, a, Machine(4, 4), {});
  CHECK(row.layers[0].recurrence.batch_chunks > 1);
  CHECK(Has(DescribeCpuCall(row), "activation scales per row"));
}

TEST(CpuPlanInt8CallScalesSplitTheRowsOfASmallStep) {
  // One scale per step: the rows split over threads meeting once per step for the scale where the
  // weights stay in cache and each thread gets enough (AMX: more than 1024 values of h in all, 512
  // a thread; vectors: 64K multiply-adds a thread); larger weights split the panels.
  auto rows = [](int64_t B, int64_t H, int64_t per_dir, bool amx) { return Int8RowChunks(MakeDims(1, 1, 50, B, 16, H), per_dir, amx); };
  CHECK_EQ(rows(32, 203, 2, true), int64_t(2));   // the torch fixture's B32
  CHECK_EQ(rows(8, 203, 2, true), int64_t(2));
  CHECK_EQ(rows(8, 128, 2, true), int64_t(1));    // 1024 values: no faster split
  CHECK_EQ(rows(9, 128, 2, true), int64_t(2));
  CHECK_EQ(rows(64, 64, 16, true), int64_t(8));   // 512 values a thread
  CHECK_EQ(rows(8, 64, 2, false), int64_t(2));    // 131K multiply-adds
  CHECK_EQ(rows(8, 48, 2, false), int64_t(1));
  CHECK_EQ(rows(8, 512, 2, true), int64_t(1));    // 1 MiB of weights: the panels split instead
  CHECK_EQ(rows(1, 203, 2, true), int64_t(1));
  CHECK_EQ(rows(32, 203, 1, true), int64_t(1));
  CpuCallInputs in = Call(50, 32, 203, 2, 1, "int8");
  in.int8_weights = true;
  CpuMachine amx = Machine(2, 2);
  amx.int8_isa = "amx";
  const CpuCallPlan p = PlanCpuCall(in, Attrs(203, 2), amx, {});
  CHECK_EQ(p.layers[1].recurrence.row_chunks, int64_t(2));
  CHECK_EQ(p.layers[1].recurrence.unit_chunks, int64_t(1));
  CHECK_EQ(p.layers[1].recurrence.batch_chunks, int64_t(1));
  CHECK(Has(DescribeCpuCall(p), "batch rows split over 2 threads meeting every step for the one scale of h"));
  // A pool of one thread would run the split's tasks in turn: the step stays whole (same results).
  amx.pool_threads = 1;
  CHECK_EQ(PlanCpuCall(in, Attrs(203, 2), amx, {}).layers[1].recurrence.row_chunks, int64_t(1));
  CpuPlanKnobs forced;  // LSTM_ORT_CPU_SPLIT forces a split whatever the pool
  forced.split = 2;
  CHECK_EQ(PlanCpuCall(in, Attrs(203, 2), amx, forced).layers[1].recurrence.row_chunks, int64_t(2));
  forced.split = 3;
  const Recurrence panels = PlanCpuCall(in, Attrs(203, 2), amx, forced).layers[1].recurrence;
  CHECK(panels.unit_chunks == 2 && panels.row_chunks == 1);
  // Large weights: the panels split (each thread streams half of them).
  CpuCallInputs big = Call(50, 8, 1024, 1, 1, "int8");
  big.int8_weights = true;
  amx.pool_threads = 2;
  const Recurrence r = PlanCpuCall(big, Attrs(1024), amx, {}).layers[0].recurrence;
  CHECK(r.unit_chunks == 2 && r.row_chunks == 1);
}

TEST(CpuPlanInt8SlicesAreStocks) {
  // Stock's LSTM on P threads runs slices of ceil(B / P) rows where B > 4, or B >= 2 and H <= 256.
  CHECK_EQ(StockSliceRows(8, 512, 2), int64_t(4));
  CHECK_EQ(StockSliceRows(5, 512, 2), int64_t(3));
  CHECK_EQ(StockSliceRows(4, 512, 2), int64_t(4));  // B <= 4 with H > 256: one slice
  CHECK_EQ(StockSliceRows(4, 256, 2), int64_t(2));
  CHECK_EQ(StockSliceRows(7, 64, 4), int64_t(2));
  CHECK_EQ(StockSliceRows(32, 64, 1), int64_t(32));
  CpuCallInputs in = Call(50, 5, 64, 1, 1, "int8");
  in.int8_weights = true;
  Attributes a = Attrs();
  a.int8_scales = Int8Scales::kSlices;
  const CpuCallPlan p = PlanCpuCall(in, a, Machine(2, 2), {});
  CHECK_EQ(p.layers[0].recurrence.batch_chunks, int64_t(2));  // rows 0-2 and 3-4, as stock's
  CHECK_EQ(p.layers[0].recurrence.rows_per_group, int64_t(3));
  CHECK(Has(DescribeCpuCall(p), "stock's slices of 3"));
  const CpuCallPlan one = PlanCpuCall(in, a, Machine(1, 1), {});  // one thread: one slice, as call
  CHECK_EQ(one.layers[0].recurrence.batch_chunks, int64_t(1));
}

TEST(CpuPlanDescribesItself) {
  const CpuCallPlan p = PlanCpuCall(Call(100, 64, 256, 2, 2), Attrs(256, 2, 2), Machine(2, 2), {});
  const std::string text = DescribeCpuCall(p);
  CHECK(Has(text, "auto (measured per shape class: fused, stock, stock_split, stock_threads)"));
  CHECK(Has(text, "fused: fp32 weights"));
  CHECK(Has(text, "layer 0: input multiplied in the step"));
  CHECK(Has(text, "layer 1:"));
  CHECK(Has(text, "recurrence directions on a thread each"));
  // Two rows: the projection apart, on both threads (its weights stream; a step of two rows would
  // stream them again every step).
  const CpuCallPlan two = PlanCpuCall(Call(100, 2, 256, 2, 2), Attrs(256, 2, 2), Machine(2, 2), {});
  CHECK(Has(DescribeCpuCall(two), "layer 0: projection 2 threads"));
}

TEST(CpuPlanWithoutStepsPlansNoProjection) {
  const CpuCallPlan p = PlanCpuCall(CpuCallInputs{MakeDims(1, 1, 5, 3, 16, 64), 0, false, false, nullptr}, Attrs(),
                                    Machine(), {});
  CHECK(p.layers.size() == 1 && p.layers[0].projection.empty());
}

TEST(RowGroupsThePoolWouldRunInTurnRunAsOne) {
  // The g2p-id decoder's call, B8 H256 T1, planned for two cores: two groups of four rows.
  const auto chunks = [](int pool, int64_t B, int64_t D = 1, int threads = 2, int64_t H = 256, int64_t T = 1) {
    return PlanCpuCall(Call(T, B, H, 1, D), Attrs(H, 1, static_cast<int>(D)), Machine(threads, pool), {})
        .layers[0]
        .recurrence.batch_chunks;
  };
  CHECK_EQ(chunks(2, 8), 2);  // a pool thread per group
  CHECK_EQ(chunks(0, 8), 2);  // the pool not counted: as planned
  CHECK_EQ(chunks(1, 8), 1);  // one thread: one group, the weights read once per step
  CHECK_EQ(chunks(2, 4, 1, 2, 256, 20), 1);  // never groups of two rows (below): B4 stays whole
  // Groups of two rows run other arithmetic than one of four: forced (LSTM_ORT_CPU_SPLIT=2), kept apart.
  CpuPlanKnobs rows;
  rows.split = 2;
  CHECK_EQ(PlanCpuCall(Call(20, 4, 32), Attrs(32), Machine(2, 1), rows).layers[0].recurrence.batch_chunks, 2);
  CHECK_EQ(chunks(2, 12, 2, 4), 1);  // two directions on two of four cores' threads: a group each
  // The rule alone: merged only where every group keeps three rows or more.
  Recurrence r;
  r.batch_chunks = 4;
  CHECK_EQ(MergeGroupsForPool(r, MakeDims(1, 1, 1, 12, 16, 64), 2).batch_chunks, 2);
  CHECK_EQ(MergeGroupsForPool(r, MakeDims(1, 1, 1, 11, 16, 64), 2).batch_chunks, 4);
  r.unit_chunks = 2;
  CHECK_EQ(MergeGroupsForPool(r, MakeDims(1, 1, 1, 12, 16, 64), 1).batch_chunks, 4);
}

TEST(AShortCallSplitsWhereItsStepsStreamLargeWeightsOnTwoCores) {
  const auto plan = [](int threads, int64_t T, int64_t B, int64_t H, int64_t I = 16) {
    return PlanCpuCall(CpuCallInputs{MakeDims(1, 1, T, B, I, H), T, false, false, nullptr}, Attrs(H),
                       Machine(threads, threads), {}).layers[0];
  };
  // One step of one row at H256 (1 MiB of recurrent weights, 524k flops): the panels split, each
  // core streaming half; at H128 (256 KiB, 131k flops) one thread.
  CHECK_EQ(plan(2, 1, 1, 256).recurrence.unit_chunks, 2);
  CHECK_EQ(plan(2, 1, 1, 128).recurrence.unit_chunks, 1);
  CHECK_EQ(plan(2, 1, 1, 200).recurrence.unit_chunks, 1);  // 640 KiB
  CHECK_EQ(plan(4, 1, 1, 256).recurrence.unit_chunks, 1);   // measured on two cores only
  // The lone row's projection likewise: I128 x 4H2048 is 1 MiB (two steps: one step multiplies its
  // input in the step, StepMultipliesInput).
  const auto workers = [&](int threads, int64_t I) { return plan(threads, 2, 1, 512, I).projection.at(0).workers; };
  CHECK_EQ(workers(2, 128), int64_t(2));
  CHECK_EQ(workers(2, 32), int64_t(1));
  CHECK(ShortCallStreamsWeights(2, 1 << 20));
  CHECK(!ShortCallStreamsWeights(4, 1 << 20));  // measured on two cores only
}

TEST(TooFewRowsToSplitSplitThePanelsFromHalfTheThresholdOnTwoCores) {
  const auto rec = [](int threads, int64_t B, int64_t H, int64_t T = 24) {
    return PlanCpuCall(Call(T, B, H), Attrs(H), Machine(threads, threads), {}).layers[0].recurrence;
  };
  // H100 B3: 240k flops a step, under split_min (400k), at least half of it: the panels split.
  CHECK_EQ(rec(2, 3, 100).unit_chunks, 2);
  CHECK_EQ(rec(2, 3, 100).batch_chunks, 1);
  // Under half the threshold (H72 B3: 124k): one thread.
  CHECK_EQ(rec(2, 3, 72).unit_chunks, 1);
  // Rows are never split into groups of two (H72 B5, 207k: 3 + 2 rows): the panels split instead.
  CHECK_EQ(rec(2, 5, 72).batch_chunks, 1);
  CHECK_EQ(rec(2, 5, 72).unit_chunks, 2);
  CHECK_EQ(rec(2, 6, 72).batch_chunks, 2);  // 3 + 3
  // A whole recurrence under kMinCallFlopsToSplitSteps keeps one thread (H72 B5 T7: 1.45M flops).
  CHECK_EQ(rec(2, 5, 72, 7).unit_chunks, 1);
  CHECK_EQ(rec(2, 5, 72, 7).batch_chunks, 1);
  // Other machines keep the threshold (measured on two cores only).
  CHECK_EQ(rec(4, 3, 100).unit_chunks, 1);
  // Too little work for a second thread at all (T1: 240k flops in the call): one thread.
  CHECK_EQ(rec(2, 3, 100, 1).unit_chunks, 1);
}

TEST(ACallOfOneStepMultipliesItsInputInTheStepWhereThatLosesNoThreads) {
  const auto layer = [](int threads, int pool, int64_t T, int64_t B, int64_t H, int64_t I, int64_t max_len = -1) {
    return PlanCpuCall(CpuCallInputs{MakeDims(1, 1, T, B, I, H), max_len < 0 ? T : max_len, false, false, nullptr},
                       Attrs(H), Machine(threads, pool), {}).layers[0];
  };
  // The g2p-id decoder's step (I32 H256): no projection apart, whatever the pool.
  for (int pool : {1, 2}) {
    const LayerPlan lp = layer(2, pool, 1, 16, 256, 32);
    CHECK(lp.step_projects);
    CHECK(lp.projection.empty());
  }
  CHECK(layer(1, 1, 1, 1, 64, 16).step_projects);
  CHECK(layer(2, 2, 5, 8, 64, 16, 1).step_projects);  // one step runs (the longest sequence is 1)
  // A large input of one row on two cores: the projection streams W on both, the small step runs on
  // one, so the projection stays apart.
  CHECK(!layer(2, 2, 1, 1, 64, 4096).step_projects);
  // The rule itself: other formats, a factored input, more threads than the step's.
  ProjectSplit two;
  two.workers = 2;
  Recurrence one, panels;
  panels.unit_chunks = 2;
  CHECK(StepMultipliesInput(WeightFormat::kFp32, 1, false, ProjectSplit{}, one, 1, 1, 2));
  CHECK(!StepMultipliesInput(WeightFormat::kBf16, 1, false, ProjectSplit{}, one, 1, 8, 2));  // its own rule
  CHECK(!StepMultipliesInput(WeightFormat::kInt8, 1, false, ProjectSplit{}, one, 1, 8, 2));
  CHECK(!StepMultipliesInput(WeightFormat::kFp32, 1, true, ProjectSplit{}, one, 1, 8, 2));
  CHECK(!StepMultipliesInput(WeightFormat::kFp32, 1, false, two, one, 1, 8, 2));
  CHECK(StepMultipliesInput(WeightFormat::kFp32, 1, false, two, panels, 1, 8, 2));
  Recurrence directions;  // two directions on a thread each
  directions.parallel_groups = true;
  CHECK(StepMultipliesInput(WeightFormat::kFp32, 1, false, two, directions, 2, 8, 2));
  CHECK(!StepMultipliesInput(WeightFormat::kFp32, 1, false, two, directions, 1, 8, 2));  // one group
  // More steps: every group of at least kMinRowsToMultiplyInputInSteps rows.
  const int64_t least = kMinRowsToMultiplyInputInSteps;
  CHECK(StepMultipliesInput(WeightFormat::kFp32, 24, false, ProjectSplit{}, one, 1, least, 2));
  CHECK(!StepMultipliesInput(WeightFormat::kFp32, 24, false, ProjectSplit{}, one, 1, least - 1, 2));
  Recurrence halves;  // 2 * least - 1 rows in two groups: the smaller has least - 1
  halves.batch_chunks = 2;
  CHECK(!StepMultipliesInput(WeightFormat::kFp32, 24, false, ProjectSplit{}, halves, 1, 2 * least - 1, 2));
  CHECK(StepMultipliesInput(WeightFormat::kFp32, 24, false, ProjectSplit{}, halves, 1, 2 * least, 2));
  Recurrence slices;  // stock's slices of 5 rows: 5 + 5 + 3
  slices.batch_chunks = 3;
  slices.rows_per_group = 5;
  CHECK_EQ(FewestGroupRows(slices, 13), int64_t(3));
  CHECK_EQ(FewestGroupRows(slices, 15), int64_t(5));
  CHECK_EQ(FewestGroupRows(halves, 9), int64_t(4));
  // In the plan: two steps of 8 rows on one thread multiply the input in the step; of 2 rows not.
  CHECK(layer(1, 1, 2, 8, 64, 16).step_projects && layer(1, 1, 2, 8, 64, 16).projection.empty());
  CHECK(!layer(1, 1, 2, 2, 64, 16).step_projects && !layer(1, 1, 2, 2, 64, 16).projection.empty());
  // Int8 never: its format projects apart (bf16 has its own rule, below).
  CpuCallInputs int8 = CpuCallInputs{MakeDims(1, 1, 1, 8, 16, 64), 1, false, true, nullptr};
  CHECK(!PlanCpuCall(int8, Attrs(64), Machine(2, 2), {}).layers[0].step_projects);
}

TEST(Bf16LayersMultiplyTheirInputInTheStepFromAFewRowsAtAnyStepsAndThreads) {
  Attributes a = Attrs(200, 2, 2);
  a.precision = Precision::kBf16;
  for (int threads : {1, 2})
    for (int64_t T : {1, 24}) {
      const CpuCallPlan many = PlanCpuCall(Call(T, kMinRowsToMultiplyInputInSteps, 200, 2, 2), a,
                                           Machine(threads, threads), {});
      CHECK(many.format == WeightFormat::kBf16);
      for (const LayerPlan& lp : many.layers) CHECK(lp.step_projects && lp.projection.empty());
      CHECK(Has(DescribeCpuCall(many), "layer 1: input multiplied in the step"));
      // Fewer rows: the projection apart, on the same threads or more.
      const CpuCallPlan few = PlanCpuCall(Call(T, kMinRowsToMultiplyInputInSteps - 1, 200, 2, 2), a,
                                          Machine(threads, threads), {});
      for (const LayerPlan& lp : few.layers) CHECK(!lp.step_projects && lp.projection.size() == 1);
    }
  CHECK(Bf16StepMultipliesInput(MakeDims(1, 1, 100, 4, 28, 200)));
  CHECK(!Bf16StepMultipliesInput(MakeDims(1, 1, 100, 3, 28, 200)));
  // fp32 at the same sizes keeps its own rule, by the rows of its groups.
  a.precision = Precision::kFp32;
  CHECK(PlanCpuCall(Call(24, 64, 200, 2, 2), a, Machine(1, 1), {}).layers[0].step_projects);
  CHECK(!PlanCpuCall(Call(24, 3, 200, 2, 2), a, Machine(1, 1), {}).layers[0].step_projects);
}
