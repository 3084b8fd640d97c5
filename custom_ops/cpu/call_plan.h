// One CPU call's plan: every decision a FusedLSTM call on the CPU runs on, made once by one pure
// function before anything runs, as the CUDA path's PlanCall (cuda/call_plan.h) does: which kernel
// answers the call (FusedLSTM's own, or onnxruntime's LSTM kernel: the floor, docs/cpu.md), what it
// computes in (the one precision decision, precision.h) and so the weight format, and per layer how
// the projection and the recurrence use the threads. The kernel (cpu/lstm_cpu.cc) and the stack
// runner (cpu/stack_run.h) read it and decide nothing again; DescribeCpuCall words it for
// `lstm-ort check --seq-len --batch` (C entry point LstmOrtDescribeCpuCall).
//
// Plain C++ (no onnxruntime): unit-tested, and held to a snapshot of its decisions
// (custom_ops/tests/cpu_call_plan_snapshot_test.cc, tests/data/cpu_plan_snapshot.tsv).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lstm_ort/contract.h"
#include "overrides.h"
#include "precision.h"

namespace lstm_ort::cpu {

// How a node's weights are packed and multiplied (a format of the stack runner, cpu/stack_run.h):
// fp32 panels (factored parts too: Packed::fx/fh), bf16 pairs, int8 quads.
enum class WeightFormat { kFp32, kBf16, kInt8 };
const char* WeightFormatName(WeightFormat f);

// What PlanCpuCall knows of the machine, as values (the kernel fills them once; tests fake them).
struct CpuMachine {
  int threads = 1;            // threads to plan for (PlanThreads: the cores, or LSTM_ORT_CPU_THREADS)
  int pool_threads = 0;       // the session pool's threads as counted (PoolThreads); 0: not counted
  std::string name;           // the CPU's name, as `tuned` entries key it ("cpu:" + name)
  CpuMath math;               // its reduced-precision units (precision.h)
  std::string fp32_isa = "v3", int8_isa = "vnni512", bf16_isa = "amx";  // the builds picked (descriptions)
};

// What one call has besides its sizes.
struct CpuCallInputs {
  Dims dims;
  int64_t max_len = 0;             // steps that run (the longest sequence)
  bool float16 = false;            // X and the outputs are float16 (the math is fp32 or bf16)
  bool int8_weights = false;       // W is int8 (with W_scale)
  const char* why_no_stock = nullptr;  // why stock's LSTM cannot run this call; null: it can
};

// How one layer's recurrence uses the threads.
struct Recurrence {
  int64_t batch_chunks = 1;     // groups of batch rows per direction, never synchronised
  int64_t rows_per_group = 0;   // > 0: groups of this many rows, the last fewer (stock's slices); 0: even
  int64_t unit_chunks = 1;      // threads splitting one group's panels, meeting after every step (phase)
  // int8 with one scale per step (rows coupled): threads splitting one group's rows (the direction's
  // batch), each quantizing and multiplying its own rows, meeting once per step only to combine
  // their rows' ranges of h into the one scale (the one-thread arithmetic: a range is a min and a max)
  int64_t row_chunks = 1;
  bool groups_in_turn = false;  // the groups run one after another, each on all the threads
  bool parallel_groups = false; // with unit_chunks 1: the groups run on separate threads
};

// How a product of the layer's input projection ([M rows] x [Q panels], depth K) is cut into items.
struct ProjectSplit {
  int64_t workers = 1;  // threads it runs on (1: the calling thread, in order)
  int64_t row_blocks = 1, panel_blocks = 1, tiles = 1;
  // Row blocks are whole 6-row tiles, their counts as even as the tiles allow.
  int64_t RowStart(int64_t r, int64_t M) const;
  int64_t Items() const { return row_blocks * panel_blocks; }
};

struct LayerPlan {
  // One or two products: the layer's whole projection (every direction), or per factored
  // direction x A then (x A) B (a direction kept whole: its own product). None where the step
  // multiplies the input itself.
  std::vector<ProjectSplit> projection;
  // The steps multiply their rows' input and h in the same tiles, so the gates never go through
  // memory and a projection of short depth (its own pass over the panels) is not made apart
  // (StepMultipliesInput: fp32, StepArgs::wx; Bf16StepMultipliesInput).
  bool step_projects = false;
  double step_flops = 0, weight_bytes = 0;  // one direction's step: what the recurrence is planned on
  Recurrence recurrence;
};

struct CpuCallPlan {
  CpuCallInputs in;
  // The kernel that answers the call: kFused, a stock kernel, or kAuto (the tuner measures this
  // call's shape class; `candidates` are what it measures).
  CpuKernel kernel = CpuKernel::kFused;
  std::string kernel_why;              // "forced by the node", "tuned (lstm-ort tune --cpu)", ...
  std::vector<CpuKernel> candidates;   // under kAuto
  int stock_pieces = 1;                // stock_split: batch pieces, one per thread
  PrecisionDecision precision;         // what the fused kernel computes in
  WeightFormat format = WeightFormat::kFp32;
  bool factored = false;
  Int8Scales int8_scales = Int8Scales::kCall;
  int threads = 1;                     // the fused kernel's threads
  std::vector<LayerPlan> layers;
  std::string refused;                 // non-empty: the node cannot run on this CPU (why)
};

// The cost model's thresholds (the CPU knobs, docs/cpu.md).
struct CpuPlanKnobs {
  int64_t split_min = 400000;          // fp32/bf16: step flops from which a direction's panels split
  int64_t parallel_min = 400000;       // fp32/bf16: flops worth another thread
  int64_t split = 0;                   // LSTM_ORT_CPU_SPLIT: 0 planned, 1 one thread, 2 rows, 3 panels
  int64_t int8_split_min = 1 << 19;    // int8: multiply-adds worth another thread
  int64_t int8_step_split_min = 0;     // int8: a step's multiply-adds from which its panels split (0: by unit)
  static CpuPlanKnobs From(const CpuOverrides& o);
};

// The plan of one call. The kernel: the node's `cpu_kernel` (or, where the node names none,
// LSTM_ORT_CPU_KERNEL's, `env_kernel`), else a `tuned` entry of this CPU for the call's shape class
// and thread count, else kAuto: the tuner measures the candidates.
CpuCallPlan PlanCpuCall(const CpuCallInputs& in, const Attributes& attrs, const CpuMachine& machine,
                        const CpuPlanKnobs& knobs, CpuKernel env_kernel = CpuKernel::kAuto);

// The weight format the fused kernel runs a call of sizes `d` in: int8 for int8 weights, bf16 where
// the precision decision for this CPU at these sizes says bf16 and the weights are whole (factored
// weights keep fp32), else fp32.
WeightFormat FormatFor(const Attributes& attrs, bool int8_weights, const CpuMath& math, const Dims& d);

// Why stock's kernel cannot answer an int8 node's calls with the node's arithmetic, or null where
// it can: with one scale per step (int8_scales=call) the fused kernel computes what onnxruntime's
// DynamicQuantizeLSTM computes on one thread, so stock's kernel on a session of one thread (kStock)
// is a floor with the same results. Its sessions of more threads, and batch pieces side by side,
// quantize h per slice of the batch (other results), and the row and slices modes have no stock
// equivalent on one thread.
const char* Int8WhyNoStock(Int8Scales scales);

// The kernel a preset `tuned` entry names for this call's class on this CPU, or kAuto.
CpuKernel TunedCpuKernel(const Attributes& attrs, const std::string& cpu_name, int64_t T, int64_t B);

// "fused (fp32 weights, AVX2 build); layer 0: projection on 2 threads (8 items); recurrence: ..."
std::string DescribeCpuCall(const CpuCallPlan& plan);

// The least flops of a direction's whole recurrence (a step's times the steps) that its steps split
// over threads for: below, a call is over before another thread pays for its start and the meetings
// (two threads, us, one thread vs split: H72 B5 T7 31.2 vs 35.7 (rows) and 35.2 (panels), 1.45M flops;
// T12 47.3 vs 53.3 and 50.8, 2.5M; from ~5M the split wins: T24 88.3 vs 81.9, H100 B3 T24 112 vs 96).
constexpr double kMinCallFlopsToSplitSteps = 4e6;
// ... unless a step's weights are this large or larger (and the step >= split_min), on two threads:
// then its panels split, since a step of few rows streams its weights from L2 or beyond, and two
// cores stream twice as fast from the first step on (two threads, one step B1 T1 with initial
// states, us, one thread vs panels split, back to back / after a 200 us pause:
// H256 23.3 vs 21.5 / 40.2 vs 31.2, H512 197 vs 123 / 212 vs 137, where stock's LSTM on two
// threads took 24.8 / 36.1 and 104 / 128; H128's 256 KiB stays faster on one, 13.7 vs 16.7).
constexpr double kMinWeightBytesToSplitAnyCall = 1 << 20;
inline bool ShortCallStreamsWeights(int P, double weight_bytes) {
  return P == 2 && weight_bytes >= kMinWeightBytesToSplitAnyCall;
}

// Rules the plan is made of, for their unit tests.
// Whether a recurrence's groups (with unit_chunks 1) run on separate threads: more than one, and a
// call's recurrence (call_flops) worth another thread.
bool GroupsInParallel(const Recurrence& r, int64_t D, int P, double call_flops, const CpuPlanKnobs& kn);
// Whether a layer's steps multiply their input too, in the same tiles as h (one product of depth
// I + H per step; LayerPlan::step_projects): the gates then never go through memory, and a
// projection of short depth (its own pass over the panels, then every step's gates written out and
// read back) is not made apart. A call of more than one step needs kMinRowsToMultiplyInputInSteps
// rows in every group of its recurrence: a step of fewer streams its weights, and multiplying the
// input there streams W every step too, where the projection multiplies it at the product's full
// rate (one thread, T100 I=H, ms, projection apart vs in the step: fp32 H256 B1 1.64 vs 2.48, B2
// 2.30 vs 2.76, B3 3.11 vs 3.14, B4 4.27 vs 4.06, H512 B1 6.7 vs 9.4, B4 16.2 vs 15.7, H1024 B2
// T50 23.3 vs 52-55; bf16 H256 B1 0.82 vs 1.24, B2 1.41 vs 1.39, B4 2.91 vs 2.50, H512 B1 4.85 vs
// 5.27, B4 9.47 vs 8.31). From there it paid at every size measured (fp32: H200 B64 T24 I28 5.88
// vs 5.49, bidirectional 12.7 vs 11.3; H128 B64 T100 I64 16.0 vs 13.1; H256 B32 T50 16.9 vs 15.6;
// H512 B16 T50 33.3 vs 30.9; H640 B16 I13 26.9 vs 25.2; L2 H320 B32 45 vs 41; bf16: tools/
// bench_apart.py --rows bf16, 24 rows: median 1.73 -> 1.99 x stock fp32 on one thread).
constexpr int64_t kMinRowsToMultiplyInputInSteps = 4;
// The fewest rows of a recurrence's groups of a batch of B.
int64_t FewestGroupRows(const Recurrence& r, int64_t B);
// fp32: an input not factored, a call of one step or of groups of kMinRowsToMultiplyInputInSteps
// rows, and a projection that would not have used more threads than the steps do (the steps' split
// then carries the input's product too).
bool StepMultipliesInput(WeightFormat format, int64_t max_len, bool input_factored, const ProjectSplit& projection,
                         const Recurrence& recurrence, int64_t D, int64_t B, int P);
// bf16: from kMinRowsToMultiplyInputInSteps rows of the call's batch, at any steps: by the batch,
// never the threads, so that results do not depend on the threads (AMX).
bool Bf16StepMultipliesInput(const Dims& d);
Recurrence PlanRecurrence(const Dims& d, int64_t np, int64_t steps, int P, double step_flops, double weight_bytes,
                          const CpuPlanKnobs& knobs, bool rows_coupled);
ProjectSplit SplitProjection(int64_t M, int64_t K, int64_t Q, int64_t workers);
// Row groups the pool would run one after another anyway (it has fewer threads than the plan's
// groups; pool_threads 0: not counted, nothing merged) run as one group: a step then reads the
// weights once, not once per group (the g2p-id decoder, B8 H256 T1 at one thread of two cores:
// 107-114 -> 97-98 us a call, stock 98-104). The plan is made for the cores so that results never
// depend on the pool, and merging keeps that: a group of three rows or more runs the same
// arithmetic per row whatever its size (the fp32 tile products of kernels_impl.inc), so only such
// groups are merged, and only in the fp32 format.
Recurrence MergeGroupsForPool(Recurrence r, const Dims& d, int pool_threads);
// Threads an int8 step with one scale per step splits its rows over (Recurrence::row_chunks; 1: no
// split), with per_dir threads for a direction, on AMX tiles or on vectors.
int64_t Int8RowChunks(const Dims& d, int64_t per_dir, bool amx);
// The rows of each slice of the batch that onnxruntime's LSTM runs on a thread of its own (each
// slice's h quantized alone by DynamicQuantizeLSTM) on P threads: ceil(B / P) where B > 4, or
// B >= 2 and H <= 256 (UniDirectionalLstm::SetNumThreads), else B (one slice).
int64_t StockSliceRows(int64_t B, int64_t H, int P);

// Recurrent weights that two directions may stream at once, each on its own thread, without
// evicting each other from the last-level cache.
constexpr double kSharedCacheBytes = 16 << 20;

}  // namespace lstm_ort::cpu
