// The grid of calls whose planning decisions data/plan_snapshot.tsv holds (issue 35: the call plan
// must decide as the code before it did), and the text the decisions are compared as. Rows are
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

#include "cuda/heuristics.h"
#include "cuda/persistent/plan.h"
#include "fake_devices.h"
#include "lstm_ort/contract.h"

namespace snapshot {

using namespace lstm_ort;

struct Device {
  const char* name;
  DeviceLimits limits;
  int max_cluster_blocks;
};

// The overrides a developer could set (environment variables before the call plan).
struct Knobs {
  const char* name = "none";
  std::optional<Strategy> strategy;
  bool gemm_step = false;
  std::optional<std::optional<MmaOperand>> mma;  // set: forced; inner empty: the FMA kernel
  int cluster_size = 0, cluster_slices = 0;
  int only_u = 0, only_bb = 0, resident_chunks = 1;
  bool half_step_weights = true;
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
  const char* names[] = {"none", "hi", "both"};
  return names[static_cast<int>(k)];
}
inline const char* OperandText(MmaOperand op) {
  const char* names[] = {"3xtf32", "tf32", "fp16", "bf16"};
  return names[static_cast<int>(op)];
}

// Every field of every range's plan that a kernel reads.
inline std::string RangesText(const std::vector<LayerRange>& ranges) {
  std::string out;
  for (const LayerRange& r : ranges) {
    out += std::to_string(r.first) + "+" + std::to_string(r.count);
    if (r.cluster) {
      const ClusterPlan& c = *r.cluster;
      out += ":c" + std::to_string(c.C) + "," + std::to_string(c.U) + "," + std::to_string(c.S) + "," +
             std::to_string(c.KPT) + "," + std::to_string(c.NB) + "," + std::to_string(c.threads) + "," +
             std::to_string(c.smem);
    } else if (r.plan) {
      const PersistentPlan& p = *r.plan;
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
    out += ";";
  }
  return out;
}

inline std::vector<Device> Devices() {
  return {{"h100", unit::H100(), 16},
          {"small", unit::SmallGpu(), 0},
          {"a100", unit::FakeDevice(108, 163 * 1024, 164 * 1024, 1024, 1), 0}};
}

inline std::vector<Knobs> KnobVariants() {
  std::vector<Knobs> v;
  Knobs k;
  k.name = "gemm_step";
  k.gemm_step = true;
  v.push_back(k);
  for (std::optional<MmaOperand> op : {std::optional<MmaOperand>(), std::optional<MmaOperand>(MmaOperand::kTf32x3),
                                       std::optional<MmaOperand>(MmaOperand::kTf32),
                                       std::optional<MmaOperand>(MmaOperand::kFp16),
                                       std::optional<MmaOperand>(MmaOperand::kBf16)}) {
    k = Knobs{};
    k.name = op ? (op == MmaOperand::kTf32x3 ? "mma=3xtf32" : op == MmaOperand::kTf32 ? "mma=tf32"
                   : op == MmaOperand::kFp16 ? "mma=fp16" : "mma=bf16")
                : "mma=fma";
    k.mma = op;
    v.push_back(k);
  }
  k = Knobs{};
  k.name = "cluster=2x4";
  k.cluster_size = 2;
  k.cluster_slices = 4;
  v.push_back(k);
  k = Knobs{};
  k.name = "cluster_slices=8";
  k.cluster_slices = 8;
  v.push_back(k);
  k = Knobs{};
  k.name = "tile=8,16";
  k.only_u = 8;
  k.only_bb = 16;
  v.push_back(k);
  k = Knobs{};
  k.name = "chunks=3";
  k.resident_chunks = 3;
  v.push_back(k);
  k = Knobs{};
  k.name = "half_step_weights=0";
  k.half_step_weights = false;
  v.push_back(k);
  k = Knobs{};
  k.name = "strategy=persistent";
  k.strategy = Strategy::kPersistent;
  v.push_back(k);
  return v;
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
      Case c{h100, type, Strategy::kAuto, p, Knobs{}, false, true, {}, Dims{}};
      c.knobs.name = "tuned";
      c.tuned = {{"h100", 100, 8, Strategy::kWavefront}, {"h100", 100, 64, Strategy::kCluster},
                 {"h100", 5, 1, Strategy::kSplitK}, {"other", 100, 17, Strategy::kTiled},
                 {"cpu:x", 100, 2, Strategy::kAuto, CpuKernel::kStock}};
      AddShapes(out, c, {1, 3}, {5, 100}, {16});
      c.knobs.name = "unbounded";
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

inline uint64_t Fnv1a(uint64_t h, const std::string& s) {
  for (unsigned char ch : s) {
    h ^= ch;
    h *= 1099511628211ULL;
  }
  return h;
}

// Groups in the grid's order, each with its lines' hash.
struct Table {
  std::vector<std::string> order;
  std::map<std::string, std::vector<std::string>> lines;

  void Add(const Case& c, const Decisions& d) {
    const std::string key = GroupKey(c);
    auto it = lines.find(key);
    if (it == lines.end()) {
      order.push_back(key);
      it = lines.emplace(key, std::vector<std::string>{}).first;
    }
    it->second.push_back(CaseLine(c, d));
  }
  uint64_t Hash(const std::string& key) const {
    uint64_t h = 1469598103934665603ULL;
    for (const std::string& line : lines.at(key)) h = Fnv1a(Fnv1a(h, line), "\n");
    return h;
  }
  void Write(std::FILE* out) const {
    for (const std::string& key : order)
      std::fprintf(out, "%s\t%zu\t%016llx\n", key.c_str(), lines.at(key).size(),
                   static_cast<unsigned long long>(Hash(key)));
  }
};

}  // namespace snapshot
