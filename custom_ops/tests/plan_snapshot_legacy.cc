// Writes custom_ops/tests/data/plan_snapshot.tsv from the planning code as it stood before the
// call plan (issue 35): a replica of cuda_ops.cc's strategy resolution (knob, tuned entry),
// stack_run.cu's PlanCall (gemm-step preference and knob, cluster, step kernel, ranges, MMA knob),
// v1/gemm_step.cu's step weights, scratch_layout.cc's bytes and the kept halves, for a grid of
// calls on fake devices. Kept in history only: built once against that tree
//   g++ -std=c++17 -O1 -I custom_ops -I custom_ops/include custom_ops/tests/plan_snapshot_legacy.cc \
//       custom_ops/cuda/{heuristics,stack_plan,scratch_layout}.cc custom_ops/cuda/persistent/{plan,mma_plan}.cc \
//       custom_ops/cuda/cluster/plan.cc -o /tmp/legacy && /tmp/legacy > custom_ops/tests/data/plan_snapshot.tsv
// call_plan_snapshot_test.cc reads the table and checks PlanCall against it.
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "cuda/heuristics.h"
#include "cuda/scratch_layout.h"
#include "cuda/stack_plan.h"
#include "plan_snapshot_grid.h"

using namespace lstm_ort;
using namespace snapshot;

namespace {

// cuda_ops.cc: the knob overrides the attribute; tuned entries apply when the result is auto.
Strategy LegacyStrategy(const Case& c) {
  Strategy s = c.knobs.strategy ? *c.knobs.strategy : c.strategy;
  return StrategyForCall(s, c.tuned, c.device.name, c.dims);
}

// stack_run.cu's PlanCall<T>.
std::vector<LayerRange> LegacyPlanCall(const Case& c, Strategy strategy, Precision precision, StepKernel* step) {
  const Dims& d = c.dims;
  const ElementType type = c.type;
  if (type == ElementType::kFloat32 && (PrefersGemmSteps(strategy, precision, type, d) || c.knobs.gemm_step)) {
    *step = StepKernel::kGemm;
    return OneLayerPerRange(static_cast<int>(d.L));
  }
  if (RunsOnCluster(strategy, d)) {
    const auto plan = PlanCluster(static_cast<int>(d.H), static_cast<int>(d.B), c.device.max_cluster_blocks,
                                  c.knobs.cluster_size, c.knobs.cluster_slices);
    if (plan) {
      *step = ChooseStepKernel(Strategy::kAuto, type, d);
      return ClusterRanges(static_cast<int>(d.L), *plan);
    }
  }
  if (strategy == Strategy::kCluster) strategy = Strategy::kAuto;
  *step = ChooseStepKernel(strategy, type, d);
  std::optional<MmaOperand> mma = c.knobs.mma ? *c.knobs.mma : MmaOperandFor(precision, type, d);
  DeviceLimits dev = c.device.limits;
  dev.only_u = c.knobs.only_u;
  dev.only_bb = c.knobs.only_bb;
  dev.resident_chunks = c.knobs.resident_chunks;
  return PlanRanges(strategy, d, [&]() -> const DeviceLimits& { return dev; }, mma);
}

// v1/gemm_step.cu's PrepareGemmSteps: the weights and streaming of a cuBLAS-step layer.
std::string LegacyStepWeights(const Case& c, Precision resolved) {
  const ProjectionMath math = ProjectionMathFor(resolved, c.dims);
  const bool streams = StreamsStepWith(math, c.dims);
  StepWeights w = StepWeights::kFp32;
  if (c.knobs.half_step_weights) {
    w = StepWeightsFor(math, c.dims);
    if (w != StepWeights::kFp32 && !streams && !c.bounded_cell) w = StepWeights::kFp32;
  }
  return std::string(streams ? "stream " : "gemm ") + StepWeightsText(w);
}

}  // namespace

int main(int argc, char** argv) {
  const bool full = argc > 1 && std::string(argv[1]) == "--full";
  Table table;
  for (const Case& c : Grid()) {
    const Strategy strategy = LegacyStrategy(c);
    const Precision resolved = ResolvedPrecision(c.precision, c.dims);
    StepKernel step = StepKernel::kTiled;
    const std::vector<LayerRange> ranges = LegacyPlanCall(c, strategy, resolved, &step);
    const KeptHalves kept = c.type == ElementType::kFloat32 && c.w_constant
                                ? CallReadsKeptHalves(c.type, c.precision, c.dims) : KeptHalves::kNone;
    Decisions out;
    out.precision = PrecisionText(resolved);
    out.projection = ProjectionText(ProjectionMathFor(resolved, c.dims));
    out.ranges = RangesText(ranges);
    out.describe = DescribeRanges(ranges, step);
    out.step = StepText(step);
    out.step_weights = c.type == ElementType::kFloat32 && step == StepKernel::kGemm ? LegacyStepWeights(c, resolved) : "-";
    out.kept = KeptText(kept);
    out.scratch = ScratchBytes(c.dims, c.type, c.precision, kept == KeptHalves::kBoth);
    table.Add(c, out);
  }
  if (!full) {
    table.Write(stdout);
    return 0;
  }
  for (const std::string& key : table.order)
    for (const std::string& line : table.lines.at(key)) std::printf("%s %s\n", key.c_str(), line.c_str());
  return 0;
}
