// Which CPU kernel runs a call: FusedLSTM's own (fused) or onnxruntime's LSTM kernel on the same
// weights (stock, stock_split, stock_threads; cpu/stock_stack.h). Chosen per shape class by timing
// the candidates on the class's first calls, in blocks of consecutive calls, and keeping the one
// with the lowest median; a class measured before (the `tuned` attribute, from `lstm-ort tune
// --cpu`) starts decided. Plain C++, no onnxruntime, so the rules are unit-tested
// (custom_ops/tests/kernel_tuner_test.cc).
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

// The candidates take turns in short blocks of consecutive calls, the first `warmup` of a block
// untimed: a kernel's pool threads spin for a while after its run, and taking turns call by call
// made each candidate pay for the one before it (H640 B5 T50 bi, 2 threads: fused measured 21 ms
// while it runs in 11 alone, and auto chose a kernel 1.6x slower). Short blocks, in rounds, keep
// what interleaving gave: a passing load on the machine falls on all candidates alike.
struct TunerConfig {
  int warmup = 1;   // untimed runs at the start of each block (the switch from another kernel's threads;
                    // at the first, first-touch of buffers and the stock session's arena)
  int samples = 3;  // timed runs of each candidate, at least, before a class is decided
  // Calls with no new class after which a settled tuner lets the caller drop the kernel no class
  // uses (its weights): a model called at a few fixed shapes keeps one copy of its weights.
  int64_t settle_calls = 64;
  // Medians this close (the best within `margin` of the next) are measured again, up to
  // `max_samples` runs each: on a loaded machine three runs did not tell kernels 5% apart.
  double margin = 0.05;
  int max_samples = 9;
  int block = 2;  // timed runs in a block
};

// What the tuner knows of one class, for reports.
struct ClassReport {
  ShapeClass shape;
  CpuKernel chosen = CpuKernel::kAuto;  // kAuto: still measuring
  bool preset = false;                  // from the `tuned` attribute, not measured here
  std::map<CpuKernel, double> median_ms;
};

// Thread-safe: concurrent Run calls of one session share it.
class KernelTuner {
 public:
  explicit KernelTuner(TunerConfig config = {}) : config_(config) {}

  void Preset(ShapeClass shape, CpuKernel kernel);

  struct Pick {
    CpuKernel kernel;
    bool measuring;  // the class is undecided: time the call and Record it
  };
  // The kernel the next call of `shape` runs, among `candidates` (non-empty, fixed per class).
  // Undecided classes run the candidates in turn, a block of calls each.
  Pick Choose(ShapeClass shape, const std::vector<CpuKernel>& candidates);

  // A run of `kernel` on `shape` took `ms`.
  void Record(ShapeClass shape, CpuKernel kernel, double ms);

  // Every class still measuring runs `kernel` from now on (the others' kernel cannot run).
  void DecideOpen(CpuKernel kernel);

  // Every class seen is decided and `settle_calls` calls have come since the last new class.
  bool Settled() const;
  // Some class runs `kernel`: decided for it, or still measuring it.
  bool Uses(CpuKernel kernel) const;

  std::vector<ClassReport> Report() const;

 private:
  struct ClassState {
    std::vector<CpuKernel> candidates;
    int64_t blocks = 0;     // blocks begun
    int block_left = 0;     // calls of the current block (candidates[(blocks - 1) % size]) to hand out
    std::map<CpuKernel, std::vector<double>> times;
    std::map<CpuKernel, int> untimed;  // runs of each candidate still to leave untimed (their blocks' first)
    CpuKernel chosen = CpuKernel::kAuto;
    bool preset = false;
  };
  void DecideIfMeasured(ClassState& s) const;

  TunerConfig config_;
  mutable std::mutex mutex_;
  std::map<ShapeClass, ClassState> classes_;
  int64_t calls_since_new_ = 0;
};

}  // namespace lstm_ort
