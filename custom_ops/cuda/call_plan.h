// One CUDA call's plan: every decision the call runs on, made once by PlanCall before anything is
// enqueued, and read by the op (scratch size, kept halves, strict mode), the orchestration
// (stack_run.cu, low_rank/run.cu: which backend runs each range of layers, with which step kernel,
// projection math and operands), the scratch carve-up and DescribeCallPlan (what `lstm-ort check
// --seq-len --batch` prints). Nothing downstream decides again; launch-time refusals (a
// cooperative grid or a cluster the device will not take) are the only fallbacks left to run
// time, and they are recorded through the plan's FallbackLog like the planned ones.
//
// Plain C++, unit-tested on fake devices (custom_ops/tests/call_plan_test.cc and the snapshot of
// the decisions made before the plan existed, call_plan_snapshot_test.cc).
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "cuda/cluster/plan.h"
#include "cuda/device_limits.h"
#include "cuda/element_type.h"
#include "cuda/heuristics.h"
#include "cuda/low_rank/recurrence_plan.h"
#include "cuda/mma_step/plan.h"
#include "cuda/persistent/plan.h"
#include "cuda/scratch_layout.h"
#include "lstm_ort/contract.h"
#include "overrides.h"

namespace lstm_ort {

// How a range of layers runs (docs/architecture.md, "Backends"). Each has a launcher in
// stack_run.cu's backend table (low rank: low_rank/run.cu).
enum class Backend {
  kStepwise,    // v1: one launch per step (plan.step picks the kernel), one layer per range
  kPersistent,  // one cooperative launch for every step of one layer
  kWavefront,   // the same launch over several layers
  kCluster,     // one launch per layer, a thread-block cluster per direction
  kLowRank,     // factored weights: one layer per range, its own kernels
  kMmaStep,     // tensor cores, one launch per interval, the cell in the product's epilogue (mma_step/)
};
const char* BackendName(Backend backend);

// The strategy each backend serves when forced: the table a new strategy adds a row to.
Backend BackendForStrategy(Strategy strategy);

struct RangePlan {
  int first = 0, count = 1;
  Backend backend = Backend::kStepwise;
  // The backend's own plan: PersistentPlan (persistent, wavefront), ClusterPlan, or LowRankPlan
  // (low rank whose recurrence runs in one launch; none: its per-step path), MmaStepPlan.
  std::variant<std::monostate, PersistentPlan, ClusterPlan, LowRankPlan, MmaStepPlan> kernel;

  const PersistentPlan* persistent() const { return std::get_if<PersistentPlan>(&kernel); }
  const ClusterPlan* cluster() const { return std::get_if<ClusterPlan>(&kernel); }
  const LowRankPlan* low_rank() const { return std::get_if<LowRankPlan>(&kernel); }
  const MmaStepPlan* mma_step() const { return std::get_if<MmaStepPlan>(&kernel); }
};

// What PlanCall knows of the device, as values (tests fake them). The limits are asked for only
// by the backends that plan on them.
struct CallDevice {
  std::string name;                                      // as tuned entries record it; empty: none read
  int max_cluster_blocks = 0;                            // 0: no thread-block clusters
  std::function<const DeviceLimits&()> persistent;       // the persistent kernels' occupancy
  std::function<const DeviceLimits&()> low_rank;         // the factored recurrence's
  std::function<const DeviceLimits&()> mma_step;         // the tensor-core step's; unset: it does not plan
};

// What one call has besides its sizes.
struct CallInputs {
  Dims dims;
  int max_len = 0;          // the longest sequence (steps that run)
  ElementType type = ElementType::kFloat32;
  bool w_constant = false;  // W is a constant initializer (its TF32 halves or bfloat16 copy can be kept)
  // Y is bound, one direction, time-major: laid out as the buffer between layers, so it carries
  // their outputs (the scratch then holds none: 100 MiB at L4 T100 H1024 B256 in fp32).
  bool y_relays = false;
};

// Fallbacks: a path the call asked for (a forced strategy, a tensor-core operand, 16-bit step
// weights, kept halves) that it could not have, and why. Under strict mode (overrides.h) each is
// an error naming it.
class FallbackLog {
 public:
  explicit FallbackLog(bool strict = false) : strict_(strict) {}
  // Records `what`; throws std::runtime_error naming it in strict mode.
  void Add(const std::string& what);
  const std::vector<std::string>& Entries() const { return entries_; }
  bool Strict() const { return strict_; }

 private:
  bool strict_;
  std::vector<std::string> entries_;
};

struct CallPlan {
  CallInputs in;
  // Launches the device may refuse are taken as refused (Overrides::refuse_launches): the path a
  // busy or partitioned device takes, to test.
  bool refuse_launches = false;
  Strategy strategy = Strategy::kAuto;  // after the overrides and the tuned entries
  Precision precision = Precision::kFp32;  // the node's mode
  Arithmetic resolved = Arithmetic::kFp32; // what the call computes in (DecidePrecision, precision.h)
  ProjectionMath projection = ProjectionMath::kFp32;  // the input projection's GEMM (fp32 models)
  std::optional<MmaOperand> mma;  // the tensor-core operand of the persistent ranges; none: FP32 FMA
  StepKernel step = StepKernel::kTiled;  // v1's kernel, for every stepwise range
  bool step_projects = false;            // layer 0 on v1 multiplies its input in its step (StepProjectsInput)
  bool upper_step_projects = false;      // and the layers above it (UpperLayersStageRows)
  // v1's cuBLAS step (fp32 storage): its weights (16-bit copies in the reduced modes) and whether
  // small batches stream them.
  StepWeights step_weights = StepWeights::kFp32;
  bool step_streams = false;
  KeptHalves kept = KeptHalves::kNone;  // the constant W's kept form the projections read
  ScratchNeeds scratch;                  // what the scratch holds (scratch_layout.h)
  size_t scratch_bytes = 0;
  std::vector<RangePlan> ranges;
  FallbackLog fallbacks;

  bool low_rank() const { return !ranges.empty() && ranges[0].backend == Backend::kLowRank; }
  // Whether layer l, run on v1, multiplies its input in its step.
  bool StepProjectsLayer(int l) const { return l == 0 ? step_projects : upper_step_projects; }
  // The kept form asked for did not come (no memory): the call splits or copies W itself, in more
  // scratch.
  void KeptHalvesUnavailable();
};

// Whether Y, where bound, can carry the outputs between layers: laid out as their buffer
// ([T][B][D][H]: one direction, time-major). CallInputs::y_relays.
bool YRelaysLayers(const Dims& d, int64_t layout, bool y_bound);

// The plan of one call. Throws std::runtime_error in strict mode for a planned fallback.
CallPlan PlanCall(const CallInputs& in, const Attributes& attrs, const CallDevice& device, const Overrides& overrides);

// "layer 0: v1 tiled (one launch per step); layers 1-3: wavefront (...)": the ranges in words.
std::string DescribeRanges(const CallPlan& plan);

// The ranges, then "; auto runs tf32 at this size" for precision auto, then "; fallback: ..." for
// each fallback: what `lstm-ort check` and the reports print.
std::string DescribeCallPlan(const CallPlan& plan);

}  // namespace lstm_ort
