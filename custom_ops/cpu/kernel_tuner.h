// Which CPU kernel runs a call: FusedLSTM's own (fused) or onnxruntime's LSTM kernel on the same
// weights (stock, stock_split, stock_threads; cpu/stock_stack.h). Chosen per shape class on the
// class's first calls, in paired rounds, with a confidence test, and the stock floor kept where in
// doubt; a class measured before (the `tuned` attribute, from `lstm-ort tune --cpu`) starts decided.
// Plain C++, no onnxruntime, so the rules are unit-tested (custom_ops/tests/kernel_tuner_test.cc).
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "lstm_ort/contract.h"

namespace lstm_ort {

// Calls whose times scale alike share a class: the batch exactly, the steps by the power of two
// at or above T (T=1 and T=2 apart, T 17..32 together).
struct ShapeClass {
  int64_t T = 0, B = 0;
  bool operator<(const ShapeClass& o) const { return T != o.T ? T < o.T : B < o.B; }
  bool operator==(const ShapeClass& o) const { return T == o.T && B == o.B; }
};
ShapeClass ClassOf(int64_t T, int64_t B);

// A class's floor before it is measured (what a recheck pairs with until the decision names one):
// stock_threads where it is a candidate, else stock; the first candidate where stock is none of
// them. At the decision the floor is the fastest of stock's kernels as measured.
CpuKernel FloorOf(const std::vector<CpuKernel>& candidates);

// How a class is measured (docs/cpu.md, "The floor"). A round is one block of calls of every
// candidate, back to back, in an order that rotates from round to round; a block's first `warmup`
// calls are untimed (the switch from the kernel before: its pool threads still spinning), its
// sample the fastest of the next `block`. Candidates are compared on the rounds they share: the
// per-round ratio of two candidates' samples (the same stretch of time: a passing load falls on
// both alike) is the evidence, not each one's median over different stretches.
struct TunerConfig {
  int warmup = 1;
  int block = 2;
  // A class's first rounds are run and not counted: a kernel's first calls on a class pay for what
  // it sets up once and for a few calls after (weights packed, stock's session built, scratch pages
  // first touched: H40 B32 T24, one thread, fused 1.5 / 0.31 / 0.24 ms where it then runs at 0.20,
  // stock 1.3 / 0.43 / 0.31 against 0.24), which decided classes for whichever paid less.
  int cold_rounds = 1;
  int min_rounds = 3;  // counted rounds before any decision
  int max_rounds = 8;  // counted rounds at most: then, in doubt, the floor
  // The floor is the fastest of stock's kernels; the fused kernel displaces it only where it is
  // faster by at least `min_gain` (the mean of the paired log ratios) and the paired ratios' t
  // statistic is at least `confidence` (one-sided; samples all alike: any gain above min_gain).
  // Before max_rounds the floor is taken only where it is surely faster than fused (any gain): a
  // lower mean over three rounds favours the floor by chance as often as fused.
  double min_gain = 0.03;
  double confidence = 2.0;
  // Calls with no new class after which a settled tuner lets the caller drop the kernel no class
  // uses (its weights): a model called at a few fixed shapes keeps one copy of its weights.
  int64_t settle_calls = 64;
  // A class decided for a kernel other than the floor is measured again, one paired round of the
  // choice and the floor, after this many of its calls (each); the floor takes the class back where
  // the rounds so far, all of them paired, say the floor is surely faster. No other evidence moves
  // a decided class (a watch of the chosen kernel's times alone re-measured whenever the machine was
  // loaded, and chose on that: docs/cpu.md).
  std::vector<int64_t> recheck_after = {256, 2048};
};

// What the tuner knows of one class, for reports.
struct ClassReport {
  ShapeClass shape;
  CpuKernel chosen = CpuKernel::kAuto;  // kAuto: still measuring
  bool preset = false;                  // from the `tuned` attribute, not measured here
  std::map<CpuKernel, double> median_ms;
  int rounds = 0;                       // paired rounds measured (rechecks included)
};

// Thread-safe: concurrent Run calls of one session share it.
class KernelTuner {
 public:
  explicit KernelTuner(TunerConfig config = {}) : config_(config) {}

  // For the report: a class a `tuned` entry decides (the call plan reads the entry itself).
  void Preset(ShapeClass shape, CpuKernel kernel);

  struct Pick {
    CpuKernel kernel;
    bool measuring;  // the call is part of a round: time it and Record it
  };
  // The kernel the next call of `shape` runs, among `candidates` (non-empty, fixed per class).
  Pick Choose(ShapeClass shape, const std::vector<CpuKernel>& candidates);

  // A run of `kernel` on `shape` took `ms`.
  void Record(ShapeClass shape, CpuKernel kernel, double ms);

  // Every class still measuring runs `kernel` from now on (the others' kernel cannot run).
  void DecideOpen(CpuKernel kernel);

  // Every class seen is decided, none has a recheck to come, and `settle_calls` calls have come
  // since the last new class.
  bool Settled() const;
  // Some class runs `kernel`: decided for it, still measuring it, or to recheck the choice with it.
  bool Uses(CpuKernel kernel) const;

  std::vector<ClassReport> Report() const;

 private:
  struct ClassState {
    std::vector<CpuKernel> candidates;
    CpuKernel floor = CpuKernel::kAuto;
    CpuKernel chosen = CpuKernel::kAuto;
    bool preset = false;
    // The round under way: the candidates measured in it, in order, and the block being handed out.
    std::vector<CpuKernel> round;
    size_t position = 0;     // index into `round` of the block being handed out
    int block_left = 0;      // calls of that block still to hand out
    int untimed = 0;         // of its calls still to come back untimed
    std::vector<double> block_times;
    std::map<CpuKernel, double> round_samples;
    // Per kernel, its sample in each round (NaN where it had no block in it), rounds in order.
    std::map<CpuKernel, std::vector<double>> samples;
    int rounds = 0;              // counted rounds
    int cold = 0;                // rounds run and not counted (TunerConfig::cold_rounds)
    int64_t calls_decided = 0;  // calls since the decision (for the rechecks)
    size_t rechecks_done = 0;
  };
  bool Measuring(const ClassState& s) const { return !s.round.empty(); }
  void StartRound(ClassState& s, const std::vector<CpuKernel>& kernels) const;
  void EndRound(ClassState& s) const;
  void Decide(ClassState& s) const;
  bool RecheckDue(const ClassState& s) const;

  TunerConfig config_;
  mutable std::mutex mutex_;
  std::map<ShapeClass, ClassState> classes_;
  int64_t calls_since_new_ = 0;
};

}  // namespace lstm_ort
