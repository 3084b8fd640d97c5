#include "cuda/call_plan.h"

#include <algorithm>
#include <stdexcept>

#include "cuda/low_rank/scratch.h"
#include "cuda/stack_plan.h"
#include "enum_names.h"
#include "lstm_ort/cell.h"

namespace lstm_ort {
namespace {

std::string LayersText(int first, int count) {
  return count == 1 ? "layer " + std::to_string(first)
                    : "layers " + std::to_string(first) + "-" + std::to_string(first + count - 1);
}

std::string SizesText(const Dims& d) { return "H=" + std::to_string(d.H) + " B=" + std::to_string(d.B); }

const char* StepName(StepKernel step) {
  return step == StepKernel::kSplitK ? "splitk" : step == StepKernel::kGemm ? "cuBLAS" : "tiled";
}

// Whether the call asked for the persistent ranges' operand itself (a reduced precision mode or
// the mma override) rather than leaving it to `auto`.
bool OperandAskedFor(const Attributes& attrs, const Overrides& o) {
  return o.mma_forced || (attrs.precision != Precision::kAuto && attrs.precision != Precision::kFp32);
}

// Every direction's cell keeps |h| <= 1 (sigmoid gates, tanh output): cuBLAS's 16-bit GEMM may
// read h as fp16.
bool HiddenWithinOne(const Attributes& attrs, int64_t D) {
  for (int dir = 0; dir < D; ++dir) {
    const CellParams cell = MakeCellParams(attrs, dir);
    if (cell.act[0].kind != ActKind::kSigmoid || cell.act[2].kind != ActKind::kTanh) return false;
  }
  return true;
}

std::vector<RangePlan> StepwiseRanges(int L) {
  std::vector<RangePlan> ranges;
  for (int l = 0; l < L; ++l) ranges.push_back(RangePlan{l, 1, Backend::kStepwise, {}});
  return ranges;
}

// The persistent planner's ranges as the plan's; the FMA plans of a call that asked for tensor
// cores are fallbacks.
std::vector<RangePlan> FromStackPlan(const std::vector<LayerRange>& stack, Strategy strategy, bool forced,
                                     bool operand_asked, const CallPlan& p, FallbackLog& log) {
  std::vector<RangePlan> ranges;
  for (const LayerRange& r : stack) {
    if (!r.plan) {
      for (int l = r.first; l < r.first + r.count; ++l) ranges.push_back(RangePlan{l, 1, Backend::kStepwise, {}});
      if (forced && UsesPersistentPlanner(strategy))
        log.Add(LayersText(r.first, r.count) + ": " + EnumName(strategy) + " does not fit this device at " +
                SizesText(p.in.dims) + ": v1 " + StepName(p.step));
      continue;
    }
    if (p.mma && !r.plan->mma && operand_asked)
      log.Add(LayersText(r.first, r.count) + ": tensor cores (" + EnumName(*p.mma) + ") do not plan at " +
              SizesText(p.in.dims) + ": the FP32 FMA kernel");
    ranges.push_back(RangePlan{r.first, r.count, r.count > 1 ? Backend::kWavefront : Backend::kPersistent, *r.plan});
  }
  return ranges;
}

// The tensor-core step's ranges (mma_step/plan.h), where the mma_step override asks for them or,
// under strategy auto, PrefersMmaStep does, or PrefersResidentMmaStep does and every range plans
// resident; true when it planned the call. What the override asks for and cannot have is a
// fallback.
bool PlanMmaStepRanges(CallPlan& p, const Attributes& attrs, const CallDevice& device, const Overrides& o) {
  const Dims& d = p.in.dims;
  const bool forced = o.mma_step.value_or(false);
  if (!o.mma_step.value_or(true)) return false;
  // Under auto only, and not where an override asks for the persistent kernels' plans.
  const bool persistent_asked = o.mma_forced || o.tile_u || o.tile_bb || o.resident_chunks != 1;
  const bool preferred = PrefersMmaStep(p.resolved, p.in.type, d);
  // Only resident (not where mma_step_resident=0 turns it off): streamed, the step loses there.
  const bool only_resident = !forced && !preferred && o.mma_step_resident.value_or(true) &&
                             PrefersResidentMmaStep(p.resolved, p.in.type, d);
  if (!forced && (p.strategy != Strategy::kAuto || persistent_asked || !(preferred || only_resident))) return false;
  const std::optional<MmaOperand> op = MmaStepOperandFor(p.resolved, p.in.type);
  std::string why;
  std::vector<MmaStepRange> stack;
  if (!op) {
    why = "no operand type for this precision";
  } else if (!MmaStepFits(d.H, d.B)) {
    why = "it needs H a multiple of " + std::to_string(kMmaStepChunk) + " and B >= " +
          std::to_string(kMmaStepMinBatch) + ", not " + SizesText(d);
  } else if (*op != MmaOperand::kTf32x3 && !HiddenWithinOne(attrs, d.D)) {
    why = "16-bit h needs |h| <= 1 (sigmoid and tanh)";
  } else if (!device.mma_step) {
    why = "no device limits";
  } else {
    const bool copies = MmaStepCopiesWeights(*op, p.in.type == ElementType::kFloat16);
    stack = PlanMmaStepStack(static_cast<int>(d.L), static_cast<int>(d.D), p.in.max_len, static_cast<int>(d.I),
                             static_cast<int>(d.H), static_cast<int>(d.B), *op, copies, device.mma_step(),
                             o.mma_step_tile, o.mma_step_layers, o.mma_step_resident);
    if (stack.empty()) why = "no tile fits this device at " + SizesText(d);
  }
  if (!why.empty()) {
    if (forced) p.fallbacks.Add("the tensor-core step (mma_step): " + why + ": the other backends");
    return false;
  }
  // Nothing was forced, so a range this device cannot hold resident is no fallback: the other
  // backends run the call.
  if (only_resident &&
      !std::all_of(stack.begin(), stack.end(), [](const MmaStepRange& r) { return r.plan.resident; }))
    return false;
  int64_t copy_bytes = 0;
  for (MmaStepRange& r : stack) {
    r.plan.pdl = o.mma_step_pdl.value_or(r.plan.pdl);
    p.ranges.push_back(RangePlan{r.first, r.count, Backend::kMmaStep, r.plan});
    if (r.plan.copies_weights)
      copy_bytes = std::max(copy_bytes, MmaStepWeightCopyBytes(r.count, static_cast<int>(d.D), d.H));
  }
  p.scratch.step_exps = true;
  p.scratch.step_weight_bytes = copy_bytes;
  p.scratch_bytes = ScratchBytes(d, p.in.type, p.scratch);
  return true;
}

// The ranges and v1's step kernel of a call with whole weights.
void PlanRangesOf(CallPlan& p, const Attributes& attrs, const CallDevice& device, const Overrides& o) {
  const Dims& d = p.in.dims;
  const ElementType type = p.in.type;
  const int L = static_cast<int>(d.L);
  Strategy strategy = p.strategy;
  // Asked for by the call (attribute or override), not a tuned winner: only then is not having it
  // a fallback.
  const bool forced = o.strategy.value_or(attrs.strategy) != Strategy::kAuto;
  if (!o.gemm_step && PlanMmaStepRanges(p, attrs, device, o)) {
    p.step = StepKernel::kTiled;  // no range runs on v1 (and none plans its cuBLAS step's weights)
    return;
  }
  if (o.gemm_step && type != ElementType::kFloat32)
    p.fallbacks.Add("gemm_step: float16 calls have no cuBLAS step");
  if (type == ElementType::kFloat32 && (PrefersGemmSteps(strategy, p.resolved, type, d) || o.gemm_step)) {
    p.step = StepKernel::kGemm;
    p.ranges = StepwiseRanges(L);
    return;
  }
  strategy = OneStepStrategy(strategy, p.resolved, type, d, p.in.max_len);
  if (RunsOnCluster(strategy, d)) {
    const auto cluster = PlanCluster(static_cast<int>(d.H), static_cast<int>(d.B), device.max_cluster_blocks,
                                     o.cluster_size, o.cluster_slices);
    if (cluster) {
      p.step = ChooseStepKernel(Strategy::kAuto, type, d);  // for a layer whose cluster the device refuses
      for (int l = 0; l < L; ++l) p.ranges.push_back(RangePlan{l, 1, Backend::kCluster, *cluster});
      return;
    }
  }
  if (strategy == Strategy::kCluster) {
    if (forced)
      p.fallbacks.Add("cluster does not plan at " + SizesText(d) + " with clusters of at most " +
                      std::to_string(device.max_cluster_blocks) + " blocks: runs as auto");
    strategy = Strategy::kAuto;
  }
  p.step = ChooseStepKernel(strategy, type, d);
  if (forced && strategy == Strategy::kSplitK && p.step != StepKernel::kSplitK)
    p.fallbacks.Add("splitk holds a unit's weights in registers up to H=" + std::to_string(kSplitKMaxHidden) +
                    ", not " + std::to_string(d.H) + ": v1 tiled");
  p.mma = o.mma_forced ? o.mma : MmaOperandFor(p.resolved, type, d);
  // The persistent planner's limits with the tile overrides, copied only when there are some.
  DeviceLimits with_overrides;
  const auto limits = [&]() -> const DeviceLimits& {
    const DeviceLimits& dev = device.persistent();
    if (!o.tile_u && !o.tile_bb && o.resident_chunks == 1) return dev;
    with_overrides = dev;
    with_overrides.only_u = o.tile_u;
    with_overrides.only_bb = o.tile_bb;
    with_overrides.resident_chunks = o.resident_chunks;
    return with_overrides;
  };
  p.ranges = FromStackPlan(PlanRanges(strategy, d, limits, p.mma), strategy, forced, OperandAskedFor(attrs, o), p,
                           p.fallbacks);
}

// v1's cuBLAS step: the weights it reads and whether it streams them.
void PlanStepWeights(CallPlan& p, const Attributes& attrs, const Overrides& o) {
  if (p.in.type != ElementType::kFloat32 || p.step != StepKernel::kGemm) return;
  const Dims& d = p.in.dims;
  p.step_streams = StreamsStepWith(p.projection, d);
  if (!o.half_step_weights) return;
  p.step_weights = StepWeightsFor(p.projection, d);
  if (p.step_weights == StepWeights::kFp32 || p.step_streams) return;  // streaming reads h in fp32
  if (!HiddenWithinOne(attrs, d.D)) {
    p.step_weights = StepWeights::kFp32;
    p.fallbacks.Add("16-bit step weights need |h| <= 1 (sigmoid and tanh): v1's cuBLAS step reads fp32 weights");
  }
}

// Factored weights: every layer on the low-rank backend; its recurrence in one launch where every
// direction's is factored and the factors' tiles fit, else per step.
void PlanLowRank(CallPlan& p, const Attributes& attrs, const CallDevice& device, const Overrides& o) {
  const Dims& d = p.in.dims;
  const Strategy forced = o.strategy.value_or(attrs.strategy);  // a tuned winner is no request
  if (forced != Strategy::kAuto)
    p.fallbacks.Add(std::string("strategy ") + EnumName(forced) + " does not apply to factored weights: low rank");
  const WeightLayout layout(d, attrs.ranks);
  for (int l = 0; l < d.L; ++l) {
    RangePlan r{l, 1, Backend::kLowRank, {}};
    long long widest = 0;
    bool every_direction = p.in.max_len >= 1 && !o.low_rank_stepwise;
    for (int dir = 0; dir < d.D && every_direction; ++dir) {
      const long long rank = layout.RecurrentRank(l, dir);
      every_direction = rank > 0;
      widest = std::max(widest, rank);
    }
    if (every_direction) {
      const auto plan = PlanLowRankRecurrence(static_cast<int>(d.D), static_cast<int>(d.H), static_cast<int>(d.B),
                                              static_cast<int>(widest), device.low_rank());
      if (plan) r.kernel = *plan;
    }
    p.ranges.push_back(r);
  }
  p.scratch_bytes = LowRankScratchBytes(d, attrs.ranks, p.in.type);
}

}  // namespace

const char* BackendName(Backend backend) {
  switch (backend) {
    case Backend::kStepwise: return "v1";
    case Backend::kPersistent: return "persistent";
    case Backend::kWavefront: return "wavefront";
    case Backend::kCluster: return "cluster";
    case Backend::kLowRank: return "low rank";
    case Backend::kMmaStep: return "tensor-core step";
  }
  return "?";
}

Backend BackendForStrategy(Strategy strategy) {
  switch (strategy) {
    case Strategy::kTiled:
    case Strategy::kSplitK: return Backend::kStepwise;
    case Strategy::kPersistent: return Backend::kPersistent;
    case Strategy::kWavefront: return Backend::kWavefront;
    case Strategy::kCluster: return Backend::kCluster;
    case Strategy::kAuto: break;
  }
  return Backend::kPersistent;  // auto plans like the wavefront, range by range
}

void FallbackLog::Add(const std::string& what) {
  if (strict_) throw std::runtime_error("FusedLSTM: strict mode (lstm_ort.debug.strict) refuses a fallback: " + what);
  entries_.push_back(what);
}

void CallPlan::KeptHalvesUnavailable() {
  if (kept == KeptHalves::kNone) return;
  fallbacks.Add(kept == KeptHalves::kBf16
                    ? std::string("the kept bfloat16 copy of W could not be allocated: the call copies W itself where that pays, "
                                  "else cuBLAS converts the fp32 operands")
                    : std::string("the kept TF32 halves of W could not be allocated: ") +
                          (kept == KeptHalves::kBoth ? "the call splits W itself" : "the projection reads W as stored"));
  kept = KeptHalves::kNone;
  const ScratchNeeds planned = scratch;
  scratch = ScratchNeedsFor(in.dims, in.type, projection, false);
  scratch.step_exps = planned.step_exps;
  scratch.step_weight_bytes = planned.step_weight_bytes;
  scratch.y_relays = planned.y_relays;
  scratch_bytes = ScratchBytes(in.dims, in.type, scratch);
}

bool YRelaysLayers(const Dims& d, int64_t layout, bool y_bound) { return y_bound && d.D == 1 && layout == 0; }

CallPlan PlanCall(const CallInputs& in, const Attributes& attrs, const CallDevice& device, const Overrides& o) {
  CallPlan p;
  p.in = in;
  p.fallbacks = FallbackLog(o.strict);
  p.refuse_launches = o.refuse_launches;
  const Dims& d = in.dims;
  p.strategy = StrategyForCall(o.strategy.value_or(attrs.strategy), attrs.tuned, device.name, d);
  p.precision = attrs.precision;
  p.resolved = DecidePrecision(attrs.precision, Device::kCuda, d).runs;
  p.projection = ProjectionMathFor(p.resolved);
  if (attrs.ranks.Any()) {
    PlanLowRank(p, attrs, device, o);
    return p;
  }
  if (in.type == ElementType::kFloat32 && in.w_constant) p.kept = CallReadsKeptHalves(in.type, p.projection, d);
  p.scratch = ScratchNeedsFor(d, in.type, p.projection, p.kept == KeptHalves::kBoth || p.kept == KeptHalves::kBf16);
  p.scratch.y_relays = in.y_relays;
  p.scratch_bytes = ScratchBytes(d, in.type, p.scratch);
  if (in.max_len == 0) {  // no steps: every layer is its projection, zeros and its states
    p.ranges = StepwiseRanges(static_cast<int>(d.L));
    return p;
  }
  PlanRangesOf(p, attrs, device, o);
  PlanStepWeights(p, attrs, o);
  p.step_projects = !p.ranges.empty() && p.ranges[0].backend == Backend::kStepwise &&
                    StepProjectsInput(p.step, p.projection, d, in.max_len);
  p.upper_step_projects = UpperLayersStageRows(p.step, p.projection, d, in.max_len) &&
                          std::any_of(p.ranges.begin(), p.ranges.end(), [](const RangePlan& r) {
                            return r.backend == Backend::kStepwise && r.first + r.count > 1;
                          });
  return p;
}

std::string DescribeRanges(const CallPlan& plan) {
  std::string out;
  for (const RangePlan& r : plan.ranges) {
    if (!out.empty()) out += "; ";
    out += LayersText(r.first, r.count) + ": ";
    if (const ClusterPlan* c = r.cluster()) {
      out += "cluster (" + std::to_string(c->C) + " blocks of " + std::to_string(c->threads) +
             " threads per direction, weights in registers)";
    } else if (const PersistentPlan* p = r.persistent()) {
      out += std::string(BackendName(r.backend)) + " (" +
             (p->mma ? std::string("tensor cores, ") + EnumName(p->operand) + ", " : std::string()) +
             std::to_string(p->blocks) + " blocks of " + std::to_string(p->U) + " units x " + std::to_string(p->Bb) +
             " rows, " + std::to_string(p->smem / 1024) + " KiB shared memory)";
    } else if (const MmaStepPlan* m = r.mma_step()) {
      const MmaStepTile& t = kMmaStepTileTable[m->tile];
      const std::string each = r.count > 1 ? "interval" : "step";
      out += std::string("tensor-core step (") + EnumName(m->operand) + ", " +
             (r.count > 1 ? std::to_string(r.count) + " layers a launch, " : std::string()) +
             (m->resident ? "one cooperative launch for every " + each + ", weights resident in shared memory, "
                          : "one launch per " + each + " of ") +
             std::to_string(m->blocks()) + " blocks of " + std::to_string(t.bm) + "x" + std::to_string(t.bn) +
             ", the cell in its epilogue)";
    } else if (const LowRankPlan* lr = r.low_rank()) {
      out += "low rank (every step in one launch of " + std::to_string(lr->blocks) + " blocks)";
    } else if (r.backend == Backend::kLowRank) {
      out += "low rank (h A on cuBLAS, then one launch per step)";
    } else {
      const bool projects = plan.StepProjectsLayer(r.first);
      out += std::string("v1 ") + StepName(plan.step) +
             (!projects                            ? " (one launch per step)"
              : plan.step == StepKernel::kGemm     ? " (one GEMM of [x h] with [W; R], then the cell)"
                                                   : " (one launch, the input product in the step)");
    }
  }
  return out;
}

std::string DescribeCallPlan(const CallPlan& plan) {
  std::string text = DescribeRanges(plan);
  if (plan.precision == Precision::kAuto)
    text += std::string("; auto runs ") + EnumName(plan.resolved) + " at this size";
  for (const std::string& f : plan.fallbacks.Entries()) text += "; fallback: " + f;
  return text;
}

}  // namespace lstm_ort
