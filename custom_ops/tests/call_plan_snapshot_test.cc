// PlanCall decides as the code before the call plan did: for every call of the snapshot grid
// (plan_snapshot_grid.h), the group hashes of its decisions equal those in data/plan_snapshot.tsv,
// which a replica of the planning code before the call plan wrote (plan_snapshot_legacy.cc,
// commit 328d3f9 "Plan snapshot"). A mismatch prints the group's decision lines as PlanCall makes
// them now and writes the whole table as it is now to plan_snapshot.now.tsv in the working
// directory: a change of decisions that is meant (a new strategy, a new threshold) replaces
// data/plan_snapshot.tsv with it.
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "check.h"
#include "cuda/call_plan.h"
#include "plan_snapshot_grid.h"

using namespace lstm_ort;
using namespace snapshot;

namespace {

Attributes AttributesOf(const Case& c) {
  Attributes a;
  a.strategy = c.strategy;
  a.precision = c.precision;
  a.tuned = c.tuned;
  a.num_layers = c.dims.L;
  a.num_directions = static_cast<int>(c.dims.D);
  for (auto& dir : a.act) {
    dir[0] = {ActKind::kSigmoid, 0.f, 0.f};
    dir[1] = {ActKind::kTanh, 0.f, 0.f};
    dir[2] = {c.bounded_cell ? ActKind::kTanh : ActKind::kRelu, 0.f, 0.f};
  }
  return a;
}

Decisions DecisionsOf(const Case& c) {
  CallDevice device;
  device.name = c.device.name;
  device.max_cluster_blocks = c.device.max_cluster_blocks;
  const DeviceLimits& limits = c.device.limits;
  device.persistent = [&]() -> const DeviceLimits& { return limits; };
  device.mma_step = [&]() -> const DeviceLimits& { return limits; };  // one block per SM, as measured
  const CallInputs in{c.dims, static_cast<int>(c.dims.T), c.type, c.w_constant};
  const CallPlan plan = PlanCall(in, AttributesOf(c), device, ParseDebugOptions(c.knobs.debug));
  Decisions out;
  out.precision = PrecisionText(plan.resolved);
  out.projection = ProjectionText(plan.projection);
  for (const RangePlan& r : plan.ranges)
    out.ranges += RangeText(r.first, r.count, r.cluster(), r.persistent(), r.mma_step());
  out.describe = DescribeRanges(plan);
  out.step = StepText(plan.step);
  out.step_weights = c.type == ElementType::kFloat32 && plan.step == StepKernel::kGemm
                         ? std::string(plan.step_streams ? "stream " : "gemm ") + StepWeightsText(plan.step_weights)
                         : "-";
  out.kept = KeptText(plan.kept);
  out.scratch = plan.scratch_bytes;
  return out;
}

}  // namespace

TEST(CallPlanMatchesTheDecisionsBeforeIt) {
  Table table;
  for (const Case& c : Grid()) table.Add(c, DecisionsOf(c));
  CheckAgainst(table, LSTM_ORT_TEST_DATA "/plan_snapshot.tsv", "plan_snapshot.now.tsv");
}
