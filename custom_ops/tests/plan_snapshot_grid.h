// The grid of calls whose planning decisions data/plan_snapshot.tsv holds (issue 35: the call plan
// must decide as the code before it did; the table was written from that code, commit 328d3f9; its
// T=5 multi-layer rows were rewritten when short calls began to count a range's own launches,
// persistent/plan.cc), and the text the decisions are compared as. Rows are
// groups of calls (device, element type, strategy, precision, knobs, L, D, T, I) over a grid of
// H x B, each with an FNV-1a hash of its calls' decision lines; a mismatch prints the group's
// lines as they are now (call_plan_snapshot_test.cc).
#pragma once

#include <cstdint>
#include <cstdio>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "cuda/cluster/plan.h"
#include "cuda/heuristics.h"
#include "cuda/mma_step/plan.h"
#include "cuda/persistent/plan.h"
#include "fake_devices.h"
#include "lstm_ort/contract.h"
#include "snapshot_table.h"

namespace snapshot {

using namespace lstm_ort;

struct Device {
  const char* name;
  DeviceLimits limits;
  int max_cluster_blocks;
};

// The overrides a developer could set (environment variables before the call plan): a name for
// the table and the same overrides as `debug` attribute text (overrides.h).
struct Knobs {
  const char* name = "none";
  const char* debug = "";
};

struct Case {
  Device device;
  ElementType type;
  Strategy strategy;
  Precision precision;
  Knobs knobs;
  bool w_constant = false;  // fp32 W a constant initializer: the kernel may keep its TF32 halves
  bool bounded_cell = true;  // default activations (|h| <= 1)
  std::vector<TunedStrategy> tuned;
  Dims dims;
};

struct Decisions {
  std::string precision, projection, ranges, describe, step, step_weights, kept;
  size_t scratch = 0;
};

inline const char* StrategyText(Strategy s) {
  const char* names[] = {"auto", "tiled", "splitk", "persistent", "wavefront", "cluster"};
  return names[static_cast<int>(s)];
}
inline const char* PrecisionText(Precision p) {
  const char* names[] = {"fp32", "tf32", "fp16", "bf16", "auto"};
  return names[static_cast<int>(p)];
}
inline const char* PrecisionText(Arithmetic a) { return PrecisionText(static_cast<Precision>(a)); }
inline const char* ProjectionText(ProjectionMath m) {
  const char* names[] = {"fp32", "tf32", "fp16", "bf16"};
  return names[static_cast<int>(m)];
}
inline const char* StepText(StepKernel k) {
  const char* names[] = {"tiled", "splitk", "gemm"};
  return names[static_cast<int>(k)];
}
inline const char* StepWeightsText(StepWeights w) {
  const char* names[] = {"fp32", "fp16", "bf16"};
  return names[static_cast<int>(w)];
}
inline const char* KeptText(KeptHalves k) {
  const char* names[] = {"none", "hi", "both", "bf16"};
  return names[static_cast<int>(k)];
}
inline const char* OperandText(MmaOperand op) {
  const char* names[] = {"3xtf32", "tf32", "fp16", "bf16"};
  return names[static_cast<int>(op)];
}

// Every field of one range's plan that a kernel reads (cluster, persistent or tensor-core step
// plan; none: v1).
inline std::string RangeText(int first, int count, const ClusterPlan* cluster, const PersistentPlan* plan,
                             const MmaStepPlan* step = nullptr) {
  std::string out = std::to_string(first) + "+" + std::to_string(count);
  if (step) {
    const MmaStepPlan& m = *step;
    out += ":s" + std::string(OperandText(m.operand)) + "," + std::to_string(m.tile) + "," +
           std::to_string(m.layers) + "," + std::to_string(m.D) + "," + std::to_string(m.m_tiles) + "," +
           std::to_string(m.n_tiles) + "," + std::to_string(m.threads) + "," + std::to_string(m.smem) + "," +
           std::to_string(m.copies_weights) + "," + std::to_string(m.pdl) + "," + std::to_string(m.resident);
  } else if (cluster) {
    const ClusterPlan& c = *cluster;
    out += ":c" + std::to_string(c.C) + "," + std::to_string(c.U) + "," + std::to_string(c.S) + "," +
           std::to_string(c.KPT) + "," + std::to_string(c.NB) + "," + std::to_string(c.threads) + "," +
           std::to_string(c.smem);
  } else if (plan) {
    const PersistentPlan& p = *plan;
    out += ":p" + std::to_string(p.U) + "," + std::to_string(p.Bb) + "," + std::to_string(p.R) + "," +
           std::to_string(p.KC) + "," + std::to_string(p.resident) + "," + std::to_string(p.slots) + "," +
           std::to_string(p.P) + "," + std::to_string(p.S) + "," + std::to_string(p.n_u) + "," +
           std::to_string(p.n_b) + "," + std::to_string(p.Bp) + "," + std::to_string(p.blocks) + "," +
           std::to_string(p.w_floats) + "," + std::to_string(p.smem);
    if (p.mma)
      out += ",mma=" + std::string(OperandText(p.operand)) + "," + std::to_string(p.ksplit) + "," +
             std::to_string(p.tpw) + "," + std::to_string(p.kw) + "," + std::to_string(p.ws) + "," +
             std::to_string(p.bbp);
  } else {
    out += ":v1";
  }
  return out + ";";
}

inline std::vector<Device> Devices() {
  return {{"h100", unit::H100(), 16},
          {"small", unit::SmallGpu(), 0},
          {"a100", unit::FakeDevice(108, 163 * 1024, 164 * 1024, 1024, 1), 0}};
}

inline std::vector<Knobs> KnobVariants() {
  return {{"gemm_step", "gemm_step=1"},
          {"mma=fma", "mma=fma"},
          {"mma=3xtf32", "mma=3xtf32"},
          {"mma=tf32", "mma=tf32"},
          {"mma=fp16", "mma=fp16"},
          {"mma=bf16", "mma=bf16"},
          {"cluster=2x4", "cluster_size=2;cluster_slices=4"},
          {"cluster_slices=8", "cluster_slices=8"},
          {"tile=8,16", "persistent_tile=8,16"},
          {"chunks=3", "persistent_chunks=3"},
          {"half_step_weights=0", "half_step_weights=0"},
          {"strategy=persistent", "strategy=persistent"},
          {"mma_step=1", "mma_step=1"},
          {"mma_step=0", "mma_step=0"},
          {"mma_step=1,64x64k2,pdl", "mma_step=1;mma_step_tile=64x64k2;mma_step_pdl=1;mma_step_layers=2"}};
}

inline void AddShapes(std::vector<Case>& out, Case c, const std::vector<int64_t>& Ls, const std::vector<int64_t>& Ts,
                      const std::vector<int64_t>& Is) {
  for (int64_t L : Ls)
    for (int64_t D : {1, 2})
      for (int64_t T : Ts)
        for (int64_t I : Is)
          for (int64_t H : {16, 64, 128, 200, 256, 301, 512, 768, 1024, 2048})
            for (int64_t B : {1, 2, 8, 16, 17, 64, 256, 512}) {
              c.dims.L = L;
              c.dims.D = D;
              c.dims.T = T;
              c.dims.I = I;
              c.dims.H = H;
              c.dims.B = B;
              out.push_back(c);
            }
}

inline std::vector<Case> Grid() {
  std::vector<Case> out;
  const Strategy strategies[] = {Strategy::kAuto, Strategy::kTiled, Strategy::kSplitK,
                                 Strategy::kPersistent, Strategy::kWavefront, Strategy::kCluster};
  const Precision precisions[] = {Precision::kFp32, Precision::kTf32, Precision::kFp16, Precision::kBf16,
                                  Precision::kAuto};
  const ElementType types[] = {ElementType::kFloat32, ElementType::kFloat16};
  for (const Device& dev : Devices())
    for (ElementType type : types)
      for (Strategy s : strategies)
        for (Precision p : precisions)
          for (bool w_constant : {false, true}) {
            if (w_constant && type != ElementType::kFloat32) continue;
            Case c{dev, type, s, p, Knobs{}, w_constant, true, {}, Dims{}};
            AddShapes(out, c, {1, 3}, {5, 100}, {16, 512});
          }
  // One step: a streamed call's T = 1, planned apart from the recurrences above (OneStepRunsOnSplitK).
  for (const Device& dev : Devices())
    for (ElementType type : types)
      for (Strategy s : strategies)
        for (Precision p : precisions) {
          Case c{dev, type, s, p, Knobs{}, false, true, {}, Dims{}};
          AddShapes(out, c, {1, 3}, {1}, {16});
        }
  // The overrides, the tuned entries and a cell with unbounded h, on the H100 at fewer shapes.
  const Device h100 = Devices()[0];
  for (const Knobs& k : KnobVariants())
    for (ElementType type : types)
      for (Strategy s : strategies)
        for (Precision p : precisions) {
          Case c{h100, type, s, p, k, type == ElementType::kFloat32, true, {}, Dims{}};
          AddShapes(out, c, {1, 3}, {100}, {16});
        }
  for (ElementType type : types)
    for (Precision p : precisions) {
      Case c{h100, type, Strategy::kAuto, p, Knobs{"tuned", ""}, false, true, {}, Dims{}};
      c.tuned = {{"h100", 100, 8, Strategy::kWavefront}, {"h100", 100, 64, Strategy::kCluster},
                 {"h100", 5, 1, Strategy::kSplitK}, {"other", 100, 17, Strategy::kTiled},
                 {"cpu:x", 100, 2, Strategy::kAuto, CpuKernel::kStock}};
      AddShapes(out, c, {1, 3}, {5, 100}, {16});
      c.knobs = Knobs{"unbounded", ""};
      c.tuned.clear();
      c.bounded_cell = false;
      AddShapes(out, c, {1, 3}, {5, 100}, {16});
    }
  return out;
}

inline std::string GroupKey(const Case& c) {
  return std::string(c.device.name) + " " + (c.type == ElementType::kFloat32 ? "f32" : "f16") + " " +
         StrategyText(c.strategy) + " " + PrecisionText(c.precision) + " " + c.knobs.name + " w" +
         std::to_string(c.w_constant) + " L" + std::to_string(c.dims.L) + " D" + std::to_string(c.dims.D) + " T" +
         std::to_string(c.dims.T) + " I" + std::to_string(c.dims.I);
}

inline std::string CaseLine(const Case& c, const Decisions& d) {
  return "H" + std::to_string(c.dims.H) + " B" + std::to_string(c.dims.B) + " | " + d.precision + " " +
         d.projection + " step=" + d.step + " weights=" + d.step_weights + " kept=" + d.kept +
         " scratch=" + std::to_string(d.scratch) + " | " + d.ranges + " | " + d.describe;
}

// Groups in the grid's order, each with its lines' hash.
struct Table : GroupTable {
  void Add(const Case& c, const Decisions& d) { GroupTable::Add(GroupKey(c), CaseLine(c, d)); }
};

}  // namespace snapshot
