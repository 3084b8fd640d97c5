#include "cpu/call_plan.h"

#include <algorithm>
#include <cmath>

#include "cpu/kernel_tuner.h"
#include "cpu/kernels.h"
#include "enum_names.h"

namespace lstm_ort::cpu {

const char* WeightFormatName(WeightFormat f) {
  switch (f) {
    case WeightFormat::kFp32: return "fp32";
    case WeightFormat::kBf16: return "bf16";
    case WeightFormat::kInt8: return "int8";
  }
  return "?";
}

CpuPlanKnobs CpuPlanKnobs::From(const CpuOverrides& o) {
  CpuPlanKnobs k;
  k.split_min = o.split_min;
  k.parallel_min = o.parallel_min;
  k.split = o.split;
  k.int8_split_min = o.int8_split_min;
  k.int8_step_split_min = o.int8_step_split_min;
  return k;
}

int64_t ProjectSplit::RowStart(int64_t r, int64_t M) const {
  return std::min(M, 6 * (tiles * r / row_blocks));
}

// Threads for one layer's recurrence (P threads available); step_flops and weight_bytes are one
// direction's (less than 2B*H*4H and 4H*H*4 when its recurrence is factored). `rows_coupled`:
// the format quantizes a step's rows together (int8, one scale per step), so they cannot split.
Recurrence PlanRecurrence(const Dims& d, int64_t np, int64_t steps, int P, double step_flops, double weight_bytes,
                          const CpuPlanKnobs& kn, bool rows_coupled) {
  Recurrence plan;
  if (P <= 1 || steps == 0) return plan;
  const int64_t per_dir = std::max<int64_t>(1, P / d.D);
  if (kn.split == 1) return plan;
  if (kn.split == 2 && !rows_coupled) {
    plan.batch_chunks = std::min<int64_t>(per_dir, d.B);
    return plan;
  }
  if (kn.split == 3) {  // with fewer threads than directions: the directions in turn
    plan.groups_in_turn = per_dir == 1 && d.D > 1;
    plan.unit_chunks = std::min<int64_t>(plan.groups_in_turn ? P : per_dir, np);
    return plan;
  }
  if (per_dir <= 1) {
    // One thread per direction, unless the directions' weights together do not stay in cache:
    // then each step streams them from memory, and the directions are faster in turn, each
    // streamed by every thread, as stock runs them (H1024 B1 T100 bi, 2 threads: 68-98 -> 50-67
    // ms). H512's 2 x 4 MiB is faster on a thread each (10-12 ms against 12-13 in turn).
    if (d.D > 1 && d.D * weight_bytes > kSharedCacheBytes && step_flops >= kn.split_min) {
      plan.unit_chunks = std::min<int64_t>(P, np);
      plan.groups_in_turn = true;
    }
    return plan;
  }
  if (step_flops * steps < std::max<double>(kn.parallel_min, kMinCallFlopsToSplitSteps)) {
    // A short call: one thread, unless its steps stream large weights; then the panels split
    // (measured on two cores only: other machines keep one thread).
    if (ShortCallStreamsWeights(P, weight_bytes) && step_flops >= kn.split_min)
      plan.unit_chunks = std::min<int64_t>(per_dir, np);
    return plan;
  }
  // Batch rows split with no synchronisation while each thread still gets whole row tiles and
  // the weights stay in cache; else the panels split, which costs a meeting per step.
  const bool weights_cached = weight_bytes <= (1 << 20);
  if (!rows_coupled && d.B >= 3 * per_dir && weights_cached) {
    plan.batch_chunks = per_dir;
    return plan;
  }
  if (step_flops >= kn.split_min) {
    plan.unit_chunks = std::min<int64_t>(per_dir, np);
    return plan;
  }
  // Fewer groups than threads, each of three rows or more (many cores, a small step).
  if (!rows_coupled && d.B / 3 >= 2) {
    plan.batch_chunks = std::min<int64_t>(per_dir, d.B / 3);
    return plan;
  }
  // Two threads and too few rows for groups of three or more: the panels split from half the
  // threshold, else the step keeps one thread while stock's LSTM splits its rows (H100 B3 T24, 240k
  // flops a step: 0.93-0.95 of the original on one thread, 1.02 split). Rows are not split into
  // groups of two: such a group's tiles sum in another order than a larger group's, so a pool of
  // one thread cannot run the groups as one (MergeGroupsForPool) and runs them in turn, each a call
  // of its own (one thread, us, no split / rows / panels: H72 B5 T24 86.8 / 119.3 / 90.1, H100 B4 T24
  // 130 / 192 / 133, H200 B5 T24 386 / 575 / 388; two threads: 88.3 / 81.9 / 86.2, 131 / 115 / 113,
  // 386 / 332 / 271). Measured on two cores only: other machines keep the threshold.
  if (P == 2 && 2 * step_flops >= kn.split_min) plan.unit_chunks = std::min<int64_t>(per_dir, np);
  return plan;
}

Recurrence MergeGroupsForPool(Recurrence r, const Dims& d, int pool_threads) {
  if (pool_threads <= 0 || r.unit_chunks != 1 || r.rows_per_group != 0 || r.batch_chunks <= 1) return r;
  const int64_t at_once = std::max<int64_t>(1, pool_threads / d.D);  // groups per direction the pool runs together
  if (at_once >= r.batch_chunks || d.B / r.batch_chunks < 3) return r;
  r.batch_chunks = at_once;
  return r;
}

// About four items per thread (claimed in order, so a slow thread takes fewer). Each row block reads
// all the weights of its panels and each panel block all the input rows of its row block, so the
// split minimises row_blocks * weight bytes + panel_blocks * input bytes (pb = sqrt(want * W / A)).
// The items are of one size and their count a multiple of the threads where the shape allows:
// 9 items on 2 threads (3 panel blocks of 21 and 22 panels, 3 row blocks) left one thread a ninth
// of the projection alone at the end.
ProjectSplit SplitProjection(int64_t M, int64_t K, int64_t Q, int64_t workers) {
  ProjectSplit sp;
  sp.workers = workers;
  sp.tiles = (M + 5) / 6;
  if (workers <= 1) return sp;
  const int64_t want = 4 * workers;
  const double weight_bytes = double(Q) * K * kPanel, input_bytes = double(M) * K;
  const double best_pb = std::sqrt(want * weight_bytes / std::max(1.0, input_bytes));
  const int64_t lo = std::min(std::min(Q, want), std::max<int64_t>(1, want / sp.tiles)), hi = std::min(Q, want);
  sp.panel_blocks = std::clamp<int64_t>(std::llround(best_pb), lo, hi);
  double best_miss = 1e30;  // a divisor of Q in [lo, hi] nearest best_pb (by ratio): panel blocks of one width
  for (int64_t pb = lo; pb <= hi; ++pb) {
    const double miss = std::abs(std::log(pb / best_pb));
    if (Q % pb == 0 && miss < best_miss) best_miss = miss, sp.panel_blocks = pb;
  }
  sp.row_blocks = (want + sp.panel_blocks - 1) / sp.panel_blocks;
  while ((sp.row_blocks * sp.panel_blocks) % workers) ++sp.row_blocks;
  sp.row_blocks = std::min(sp.row_blocks, sp.tiles);
  return sp;
}

int64_t StockSliceRows(int64_t B, int64_t H, int P) {
  const bool batch_parallel = P > 1 && (B > 4 || (B >= 2 && H <= 256));
  return batch_parallel ? (B + P - 1) / P : B;
}

bool GroupsInParallel(const Recurrence& r, int64_t D, int P, double call_flops, const CpuPlanKnobs& kn) {
  return r.unit_chunks == 1 && std::min<int64_t>(D * r.batch_chunks, P) > 1 && call_flops >= kn.parallel_min;
}

int64_t FewestGroupRows(const Recurrence& r, int64_t B) {
  if (r.rows_per_group) return std::min(r.rows_per_group, B - (r.batch_chunks - 1) * r.rows_per_group);
  return B / r.batch_chunks;
}

bool StepMultipliesInput(WeightFormat format, int64_t max_len, bool input_factored, const ProjectSplit& projection,
                         const Recurrence& r, int64_t D, int64_t B, int P) {
  if (format != WeightFormat::kFp32 || input_factored) return false;
  if (max_len > 1 && FewestGroupRows(r, B) < kMinRowsToMultiplyInputInSteps) return false;
  const int64_t groups = D * r.batch_chunks;
  const int64_t step_threads = r.unit_chunks > 1 ? (r.groups_in_turn ? 1 : groups) * r.unit_chunks
                               : r.parallel_groups ? std::min<int64_t>(groups, P)
                                                   : 1;
  return projection.workers <= std::min<int64_t>(step_threads, P);
}

bool Bf16StepMultipliesInput(const Dims& d) { return d.B >= kMinRowsToMultiplyInputInSteps; }

namespace {

// A float (fp32 or bf16) product [M] x [Q panels] of depth K on up to P threads: a thread per
// parallel_min flops; on two threads both where its weights are as large as a short call's step
// that splits (kMinWeightBytesToSplitAnyCall: a row or two stream them, two cores twice as fast).
ProjectSplit FloatProduct(int64_t M, int64_t K, int64_t Q, int P, const CpuPlanKnobs& kn, double weight_size) {
  const double flops = 2.0 * M * K * Q * kPanel;
  int64_t workers = std::min<int64_t>(P, std::max<int64_t>(1, static_cast<int64_t>(flops / kn.parallel_min)));
  if (ShortCallStreamsWeights(P, weight_size * K * Q * kPanel) && flops >= kn.split_min) workers = 2;
  return SplitProjection(M, K, Q, workers);
}

// The int8 product: a thread per int8_split_min multiply-adds; whole panel blocks over all rows
// where the panels feed every thread (each thread streams only its weights), else row blocks too.
ProjectSplit Int8Product(int64_t M, int64_t K, int64_t Q, int P, const CpuPlanKnobs& kn) {
  ProjectSplit sp;
  sp.tiles = (M + 5) / 6;
  sp.workers = std::min<int64_t>(P, std::max<int64_t>(1, M * K * Q * kPanel / kn.int8_split_min));
  if (sp.workers <= 1) return sp;
  sp.panel_blocks = std::min<int64_t>(Q, 4 * sp.workers);
  sp.row_blocks = std::min<int64_t>(sp.tiles, std::max<int64_t>(1, 4 * sp.workers / sp.panel_blocks));
  return sp;
}

// A step's multiply-adds from which the int8 format splits its panels over threads that meet after
// every step (LSTM_ORT_CPU_INT8_STEP_SPLIT_MIN, else by the int8 unit): AMX tiles make a step ~8x
// shorter than VNNI's vectors, and the meeting's cost stays (I131 H203 L2 B8 T50, two threads:
// 1.18 ms split, 1.02 whole on AMX; H512 B8: 1.19 split, 1.44 whole).
int64_t Int8StepSplitMin(const CpuMachine& m, const CpuPlanKnobs& kn) {
  if (kn.int8_step_split_min) return kn.int8_step_split_min;
  return m.int8_isa == "amx" ? int64_t{4} << 20 : int64_t{1} << 19;
}

}  // namespace

// Threads the rows of an int8 step with one scale (rows coupled) split over, each quantizing,
// multiplying and running the cell of its own rows, meeting once per step only to combine their
// ranges of h into the scale: where the recurrent weights stay in a core's cache (each thread reads
// them all) and each thread gets enough of the step. On AMX tiles, whose product costs the same for
// any row count up to 16, at least 512 values of h (B*H: the quantization and the cell halve, the
// product only from 32 rows on); on vectors, at least 64K multiply-adds. Two threads on two cores,
// one direction, T50, ms (whole / rows / panels): AMX H128 B8 (1024 values) 0.27-0.30 / 0.28 / -,
// H144 B8 0.31 / 0.28 / -, I131 H203 L2 B8 0.98 / 0.88 / 1.15, B32 3.39 / 2.59 / 3.56, H512 B8 1.30 /
// 1.06 / 1.13, H1024 B8 (4 MiB of weights, T20) 3.86 / 3.01 / 1.51; vnni512 H48 B8 (74K multiply-adds)
// 0.128 / 0.128 / 0.177, H64 B8 0.179 / 0.155 / 0.207, H1024 B8 4.28 / 3.43 / 2.37.
int64_t Int8RowChunks(const Dims& d, int64_t per_dir, bool amx) {
  const int64_t step_macs = d.B * d.H * kGates * d.H;
  if (per_dir <= 1 || d.B < 2 || double(kGates) * d.H * d.H >= (1 << 20)) return 1;
  const int64_t most = amx ? d.B * d.H / 512 : step_macs / (int64_t{1} << 16);
  const int64_t chunks = std::min({per_dir, d.B, most});
  return chunks >= 2 && (!amx || d.B * d.H > 1024) ? chunks : 1;
}

namespace {

// The int8 recurrence with one scale per step (rows coupled): a step's rows split over threads
// (Int8RowChunks), else a large step's panels (more threads meeting after every step, exchanging h),
// else each direction on a thread of its own where there is work for two. LSTM_ORT_CPU_SPLIT forces
// one: 1 no split, 2 rows, 3 panels.
Recurrence Int8CallScalesRecurrence(const Dims& d, int64_t np, int64_t steps, int P, const CpuPlanKnobs& kn,
                                    int64_t step_split_min, bool amx) {
  Recurrence r;
  const int64_t step_macs = d.B * d.H * kGates * d.H;
  const int64_t per_dir = std::max<int64_t>(1, P / d.D);
  if (kn.split == 2 && per_dir > 1 && d.B > 1)
    r.row_chunks = std::min<int64_t>(per_dir, d.B);
  else if (kn.split == 0)
    r.row_chunks = Int8RowChunks(d, per_dir, amx);
  if (r.row_chunks == 1 && per_dir > 1 && (kn.split == 3 || (kn.split == 0 && step_macs >= step_split_min)))
    r.unit_chunks = std::min<int64_t>(per_dir, np);
  const bool whole = r.unit_chunks == 1 && r.row_chunks == 1;
  r.parallel_groups = whole && P >= 2 && d.D == 2 && step_macs * steps >= kn.int8_split_min;
  return r;
}

// The int8 recurrence with h quantized per slice of the batch as stock's LSTM cuts it on P
// threads: a group per slice and direction, the groups on separate threads where there is work
// for more than one; one slice: as one scale per call.
Recurrence Int8SlicesRecurrence(const Dims& d, int64_t np, int64_t steps, int P, int split_threads,
                                const CpuPlanKnobs& kn, int64_t step_split_min, bool amx) {
  const int64_t rows = StockSliceRows(d.B, d.H, P), slices = (d.B + rows - 1) / rows;
  if (slices <= 1) return Int8CallScalesRecurrence(d, np, steps, split_threads, kn, step_split_min, amx);
  Recurrence r;
  r.batch_chunks = slices;
  r.rows_per_group = rows;
  r.parallel_groups = d.B * d.H * kGates * d.H * steps * d.D >= kn.int8_split_min;
  return r;
}

const char* KernelLabel(CpuKernel k) { return EnumName(k); }

void PlanKernel(CpuCallPlan& p, const CpuCallInputs& in, const Attributes& attrs, const CpuMachine& m,
                CpuKernel env_kernel) {
  const CpuKernel forced = attrs.cpu_kernel_set ? attrs.cpu_kernel : env_kernel;
  const bool from_env = !attrs.cpu_kernel_set && env_kernel != CpuKernel::kAuto;
  const int64_t B = in.dims.B;
  p.stock_pieces = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(B, m.threads)));
  if (forced == CpuKernel::kFused) {
    p.kernel = CpuKernel::kFused;
    p.kernel_why = from_env ? "LSTM_ORT_CPU_KERNEL=fused" : "forced by the node's cpu_kernel";
    return;
  }
  if (in.why_no_stock) {
    if (forced != CpuKernel::kAuto) {
      p.refused = std::string("cpu_kernel=") + KernelLabel(forced) + " cannot run this call: " + in.why_no_stock;
      p.kernel = forced;
      return;
    }
    p.kernel = CpuKernel::kFused;
    p.kernel_why = std::string("stock's LSTM cannot: ") + in.why_no_stock;
    return;
  }
  if (forced != CpuKernel::kAuto) {
    p.kernel = forced;
    p.kernel_why = from_env ? std::string("LSTM_ORT_CPU_KERNEL=") + KernelLabel(forced) : "forced by the node's cpu_kernel";
    return;
  }
  std::vector<CpuKernel> candidates = {CpuKernel::kFused, CpuKernel::kStock};
  if (!in.int8_weights) {  // int8: pieces and stock's own threads quantize per slice (Int8WhyNoStock)
    // Pieces run side by side on the pool's threads; on a pool of one they would run in turn,
    // stock's own kernel on smaller GEMMs, never faster than stock on the whole batch (1 thread:
    // 0.82-1.02 of the original in the calls the tuner gave stock_split, stop 59's runs).
    if (p.stock_pieces > 1 && m.pool_threads != 1) candidates.push_back(CpuKernel::kStockSplit);
    if (m.pool_threads > 1) candidates.push_back(CpuKernel::kStockThreads);
  }
  const CpuKernel tuned = TunedCpuKernel(attrs, m.name, in.dims.T, B);
  if (tuned != CpuKernel::kAuto) {
    auto can = [&](CpuKernel k) { return std::find(candidates.begin(), candidates.end(), k) != candidates.end(); };
    // A tuned kernel this call cannot run gives way: stock_threads (a pool counted as one thread)
    // to stock, stock_split (one piece) to stock.
    p.kernel = can(tuned) ? tuned : tuned == CpuKernel::kStockThreads || tuned == CpuKernel::kStockSplit
                                        ? CpuKernel::kStock
                                        : CpuKernel::kFused;
    p.kernel_why = std::string("tuned (lstm-ort tune --cpu): ") + KernelLabel(tuned);
    return;
  }
  p.kernel = CpuKernel::kAuto;
  p.candidates = candidates;
  p.kernel_why = "measured per shape class";
}

}  // namespace

const char* Int8WhyNoStock(Int8Scales scales) {
  return scales == Int8Scales::kCall ? nullptr
                                     : "int8_scales=row and slices quantize h as no one-thread stock kernel does";
}

WeightFormat FormatFor(const Attributes& attrs, bool int8_weights, const CpuMath& math, const Dims& d) {
  if (int8_weights) return WeightFormat::kInt8;
  const bool bf16 = DecidePrecision(attrs.precision, Device::kCpu, d, math).runs == Arithmetic::kBf16;
  return bf16 && !attrs.ranks.Any() ? WeightFormat::kBf16 : WeightFormat::kFp32;
}

CpuKernel TunedCpuKernel(const Attributes& attrs, const std::string& cpu_name, int64_t T, int64_t B) {
  const ShapeClass want = ClassOf(T, B);
  for (const TunedStrategy& t : attrs.tuned)
    if (t.gpu == std::string(kTunedCpuPrefix) + cpu_name && ClassOf(t.T, t.B) == want) return t.cpu_kernel;
  return CpuKernel::kAuto;
}

CpuCallPlan PlanCpuCall(const CpuCallInputs& in, const Attributes& attrs, const CpuMachine& m,
                        const CpuPlanKnobs& kn, CpuKernel env_kernel) {
  CpuCallPlan p;
  p.in = in;
  const Dims& d = in.dims;
  p.threads = std::max(1, m.threads);
  p.factored = attrs.ranks.Any();
  p.int8_scales = attrs.int8_scales;
  if (in.int8_weights) {
    p.format = WeightFormat::kInt8;
    p.precision.requested = attrs.precision;
    p.precision.words = "DynamicQuantizeLSTM's arithmetic";
  } else {
    p.precision = DecidePrecision(attrs.precision, Device::kCpu, d, m.math);
    if (!p.precision.refused.empty()) {
      p.refused = p.precision.refused;
      return p;
    }
    p.format = FormatFor(attrs, false, m.math, d);
    if (p.precision.runs == Arithmetic::kBf16 && p.factored) {
      p.precision.runs = Arithmetic::kFp32;  // factored weights keep their fp32 path (docs/ops.md)
      p.precision.words = "fp32: factored weights run fp32 (bf16 takes whole weights)";
    }
  }
  PlanKernel(p, in, attrs, m, env_kernel);
  if (!p.refused.empty()) return p;

  const int P = p.threads;
  const int64_t np = (d.H + kUnits - 1) / kUnits, M = in.max_len * d.B;
  const bool int8 = p.format == WeightFormat::kInt8;
  const bool rows_coupled = int8 && p.int8_scales == Int8Scales::kCall;
  const double weight_size = p.format == WeightFormat::kFp32 ? 4.0 : p.format == WeightFormat::kBf16 ? 2.0 : 1.0;
  for (int64_t l = 0; l < d.L; ++l) {
    LayerPlan lp;
    const int64_t I = d.LayerInput(l);
    bool input_factored = false;
    for (int64_t dir = 0; dir < d.D; ++dir) input_factored = input_factored || attrs.ranks.Input(l * d.D + dir) > 0;
    if (in.max_len > 0 && !input_factored) {
      lp.projection.push_back(int8 ? Int8Product(M, I, d.D * np, P, kn)
                                   : FloatProduct(M, I, d.D * np, P, kn, weight_size));
    } else if (in.max_len > 0) {
      for (int64_t dir = 0; dir < d.D; ++dir) {
        const int64_t r = attrs.ranks.Input(l * d.D + dir);
        if (!r) {
          lp.projection.push_back(FloatProduct(M, I, np, P, kn, weight_size));
          continue;
        }
        const int64_t a_panels = (r + kPanel - 1) / kPanel;
        lp.projection.push_back(FloatProduct(M, I, a_panels, P, kn, weight_size));
        lp.projection.push_back(FloatProduct(M, r, np, P, kn, weight_size));
      }
    }
    // A factored direction's step is two products, h x A then (h A) x B with the cell:
    // 2B * rank * (H + 4H) flops where the whole R takes 2B * H * 4H.
    for (int64_t dir = 0; dir < d.D; ++dir) {
      const int64_t r = attrs.ranks.Recurrent(l * d.D + dir), depth = r ? r * (d.H + kGates * d.H) : kGates * d.H * d.H;
      lp.step_flops = std::max(lp.step_flops, 2.0 * d.B * depth);
      lp.weight_bytes = std::max(lp.weight_bytes, weight_size * depth);
    }
    const bool slices = int8 && p.int8_scales == Int8Scales::kSlices;
    // With one scale per step, how the threads share a step never changes its results: its split
    // follows the pool as counted (a pool of one thread runs the tasks in turn, and a step split
    // over them is slower than whole: I131 H203 L2 B8 T50 on one intra-op thread, rows split 1.16-
    // 1.18 ms, whole 0.89-0.92), unless LSTM_ORT_CPU_SPLIT forces one.
    const bool amx = m.int8_isa == "amx";
    const int split_threads = m.pool_threads > 0 && !kn.split ? std::min(P, m.pool_threads) : P;
    const int64_t split_min = Int8StepSplitMin(m, kn);
    lp.recurrence = rows_coupled ? Int8CallScalesRecurrence(d, np, in.max_len, split_threads, kn, split_min, amx)
                    : slices     ? Int8SlicesRecurrence(d, np, in.max_len, P, split_threads, kn, split_min, amx)
                                 : PlanRecurrence(d, np, in.max_len, P, lp.step_flops, lp.weight_bytes, kn, false);
    const bool own_groups = !rows_coupled && !slices;  // groups whose threads the plan decides here
    const double call_flops = lp.step_flops * in.max_len;
    // Decided on the plan for the cores, before the pool's merge, so that it never depends on the pool.
    Recurrence for_cores = lp.recurrence;
    if (own_groups) for_cores.parallel_groups = GroupsInParallel(for_cores, d.D, P, call_flops, kn);
    if (!lp.projection.empty() &&
        (p.format == WeightFormat::kBf16
             ? Bf16StepMultipliesInput(d)
             : StepMultipliesInput(p.format, in.max_len, input_factored, lp.projection[0], for_cores, d.D, d.B, P))) {
      lp.step_projects = true;
      lp.projection.clear();
    }
    if (p.format == WeightFormat::kFp32) lp.recurrence = MergeGroupsForPool(lp.recurrence, d, m.pool_threads);
    if (own_groups) lp.recurrence.parallel_groups = GroupsInParallel(lp.recurrence, d.D, P, call_flops, kn);
    p.layers.push_back(std::move(lp));
  }
  return p;
}

namespace {

std::string ProjectionText(const LayerPlan& lp) {
  const std::vector<ProjectSplit>& products = lp.projection;
  if (lp.step_projects) return "input multiplied in the step";
  if (products.empty()) return "no steps";
  std::string out;
  for (const ProjectSplit& sp : products) {
    if (!out.empty()) out += " then ";
    out += sp.workers <= 1 ? std::string("1 thread")
                           : std::to_string(sp.workers) + " threads (" + std::to_string(sp.Items()) + " items)";
  }
  return "projection " + out;
}

std::string RecurrenceText(const Recurrence& r, int64_t D) {
  if (r.unit_chunks > 1)
    return std::string("panels split over ") + std::to_string(r.unit_chunks) + " threads meeting every step" +
           (r.groups_in_turn ? ", directions in turn" : D > 1 ? ", a group per direction" : "");
  if (r.row_chunks > 1)
    return std::string("batch rows split over ") + std::to_string(r.row_chunks) +
           " threads meeting every step for the one scale of h" + (D > 1 ? ", a group per direction" : "");
  if (r.batch_chunks > 1)
    return "batch rows in " + std::to_string(r.batch_chunks) + " groups per direction" +
           (r.rows_per_group ? " (stock's slices of " + std::to_string(r.rows_per_group) + ")" : "") +
           (r.parallel_groups ? ", on separate threads" : ", in turn");
  if (D > 1) return r.parallel_groups ? "directions on a thread each" : "directions in turn on one thread";
  return "one thread";
}

}  // namespace

std::string DescribeCpuCall(const CpuCallPlan& p) {
  if (!p.refused.empty()) return "refused: " + p.refused;
  std::string text = std::string(EnumName(p.kernel)) + " (" + p.kernel_why;
  if (p.kernel == CpuKernel::kAuto) {
    text += ": ";
    for (size_t i = 0; i < p.candidates.size(); ++i) text += (i ? ", " : "") + std::string(EnumName(p.candidates[i]));
  }
  text += ")";
  if (p.kernel == CpuKernel::kStockSplit) text += "; stock in " + std::to_string(p.stock_pieces) + " batch pieces";
  if (p.kernel != CpuKernel::kFused && p.kernel != CpuKernel::kAuto) return text;
  text += std::string("; fused: ") + WeightFormatName(p.format) + (p.factored ? " factored" : "") + " weights";
  if (p.format == WeightFormat::kInt8)
    text += std::string(", activation scales per ") +
            (p.int8_scales == Int8Scales::kRow      ? "row"
             : p.int8_scales == Int8Scales::kSlices ? "call and step, h's per slice of the batch as stock's on " +
                                                          std::to_string(p.threads) + " threads"
                                                    : "call and step");
  text += ", " + p.precision.words + ", " + std::to_string(p.threads) + (p.threads == 1 ? " thread" : " threads");
  for (size_t l = 0; l < p.layers.size(); ++l)
    text += "; layer " + std::to_string(l) + ": " + ProjectionText(p.layers[l]) + ", recurrence " +
            RecurrenceText(p.layers[l].recurrence, p.in.dims.D);
  return text;
}

}  // namespace lstm_ort::cpu
