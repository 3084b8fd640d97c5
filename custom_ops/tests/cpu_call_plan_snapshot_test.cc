// PlanCpuCall decides as the code before the CPU call plan did: for every call of the snapshot grid
// (cpu_plan_snapshot_grid.h), the group hashes of its decisions equal those in
// data/cpu_plan_snapshot.tsv (fp32, factored and int8 rows: a replica of the code before the plan;
// the formats it did not have: PlanCpuCall when they were added). A mismatch prints the group's
// decision lines as PlanCpuCall makes them now and writes the whole table as it is now to
// cpu_plan_snapshot.now.tsv in the working directory: a change of decisions that is meant replaces
// data/cpu_plan_snapshot.tsv with it.
#include <algorithm>
#include <string>

#include "check.h"
#include "cpu/call_plan.h"
#include "cpu_plan_snapshot_grid.h"
#include "enum_names.h"

using namespace lstm_ort;
using namespace cpu_snapshot;

namespace {

Attributes AttributesOf(const Case& c) {
  Attributes a;
  a.hidden_size = c.H;
  a.num_layers = c.L;
  a.num_directions = static_cast<int>(c.D);
  CpuKernel k;
  ParseEnum(c.kernel.cpu_kernel, &k);
  a.cpu_kernel = k;
  a.cpu_kernel_set = k != CpuKernel::kAuto;
  a.precision = c.format == Format::kBf16 ? Precision::kBf16 : Precision::kAuto;
  a.int8_scales = c.format == Format::kInt8Row      ? Int8Scales::kRow
                  : c.format == Format::kInt8Slices ? Int8Scales::kSlices
                                                    : Int8Scales::kCall;
  if (c.format == Format::kFactored) {
    for (int64_t l = 0; l < c.L; ++l)
      for (int64_t dir = 0; dir < c.D; ++dir) {
        const int64_t input = l == 0 ? c.I : c.D * c.H;
        a.ranks.input.push_back(std::max<int64_t>(1, std::min(input, kGates * c.H) / 4));
        a.ranks.recurrent.push_back(std::max<int64_t>(1, c.H / 4));
      }
  }
  return a;
}

Decisions DecisionsOf(const Case& c) {
  cpu::CpuMachine m;
  m.threads = c.threads;
  m.pool_threads = c.kernel.pool;
  m.math = CpuMath{true, true, true};
  cpu::CpuPlanKnobs kn;
  kn.split = c.split;
  const bool int8 = c.format == Format::kInt8 || c.format == Format::kInt8Row || c.format == Format::kInt8Slices;
  const bool no_stock = !c.kernel.stock_can || int8 || c.format == Format::kFactored;
  const cpu::CpuCallInputs in{MakeDims(c.L, c.D, c.T, c.B, c.I, c.H), c.T, false, int8, no_stock ? "no" : nullptr};
  const cpu::CpuCallPlan plan = cpu::PlanCpuCall(in, AttributesOf(c), m, kn);
  Decisions out;
  out.pieces = plan.stock_pieces;
  out.kernel = EnumName(plan.kernel);
  if (plan.kernel == CpuKernel::kAuto) {
    out.kernel += "[";
    for (size_t i = 0; i < plan.candidates.size(); ++i) out.kernel += (i ? "," : "") + std::string(EnumName(plan.candidates[i]));
    out.kernel += "]";
  }
  for (const cpu::LayerPlan& lp : plan.layers) {
    Layer l;
    for (const cpu::ProjectSplit& sp : lp.projection)
      l.products.push_back({sp.workers, sp.workers > 1 ? sp.row_blocks : 1, sp.workers > 1 ? sp.panel_blocks : 1});
    l.step_projects = lp.step_projects;
    l.batch_chunks = lp.recurrence.batch_chunks;
    l.unit_chunks = lp.recurrence.unit_chunks;
    l.row_chunks = lp.recurrence.row_chunks;
    l.rows_per_group = lp.recurrence.rows_per_group;
    l.in_turn = lp.recurrence.groups_in_turn;
    l.parallel = lp.recurrence.parallel_groups;
    out.layers.push_back(l);
  }
  return out;
}

}  // namespace

TEST(CpuCallPlanMatchesTheDecisionsBeforeIt) {
  Table table;
  for (const Case& c : Grid()) table.Add(c, DecisionsOf(c));
  snapshot::CheckAgainst(table, LSTM_ORT_TEST_DATA "/cpu_plan_snapshot.tsv", "cpu_plan_snapshot.now.tsv");
}
