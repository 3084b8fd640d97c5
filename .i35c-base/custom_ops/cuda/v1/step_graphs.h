// v1's cuBLAS steps replayed as a CUDA graph. A step there is a cublasLt GEMM and a cell kernel,
// and each costs the host ~8 us to enqueue however small it is: at T=100 H256 B256 (tf32) the GPU
// sat idle 57% of the call (H100, 714 of 1649 us busy). A layer's step loop captured once is
// replayed with one launch when a later call has the same key: every pointer, size and
// parameter the loop's launches capture by value (onnxruntime's arena hands a repeated call the
// same buffers). A key is captured on its second sighting, so calls whose buffers never repeat
// pay no capture. Inputs are read when the graph runs, so new values in the same buffers are
// seen.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <list>
#include <map>
#include <mutex>
#include <set>
#include <vector>

namespace lstm_ort {

// Shorter loops launch directly: a graph launch costs more than one step's launches (H100, L4 T1
// H2048 B512 bidirectional: 0.90-0.92 ms direct, 0.95 replayed).
constexpr int kMinStepsForStepGraph = 4;

// Everything a step loop's launches capture, as words.
class StepLoopKey {
 public:
  StepLoopKey& Add(const void* p) { return Add(reinterpret_cast<uintptr_t>(p)); }
  StepLoopKey& Add(uint64_t v) {
    words_.push_back(v);
    return *this;
  }
  StepLoopKey& Add(long long v) { return Add(static_cast<uint64_t>(v)); }
  StepLoopKey& Add(int v) { return Add(static_cast<uint64_t>(static_cast<uint32_t>(v))); }
  StepLoopKey& Add(bool v) { return Add(static_cast<uint64_t>(v)); }
  StepLoopKey& Add(float v) {
    uint32_t bits;
    std::memcpy(&bits, &v, sizeof(bits));
    return Add(static_cast<uint64_t>(bits));
  }
  bool operator<(const StepLoopKey& o) const { return words_ < o.words_; }

 private:
  std::vector<uint64_t> words_;
};

// The graphs of one kernel instance (a node of a session), at most kMaxStepGraphs of them. A
// node whose calls cycle through more keys than that (each eviction then costs a capture) stops
// capturing after kMaxStepGraphs evictions and launches new keys directly; the layer pipeline's
// stages see a few keys per layer (two buffer slots, and the last stage's per-item outputs).
class StepGraphs {
 public:
  static constexpr size_t kMaxStepGraphs = 64;
  StepGraphs() = default;
  ~StepGraphs();
  StepGraphs(const StepGraphs&) = delete;
  StepGraphs& operator=(const StepGraphs&) = delete;

  // Enqueues the loop on `stream`: replays the graph of `key`, or captures `enqueue` into one on
  // the key's second sighting, or calls `enqueue` directly (first sighting, a stream already
  // being captured, or a capture the driver refuses).
  void Run(const StepLoopKey& key, cudaStream_t stream, const std::function<void()>& enqueue);

 private:
  // The graph of `key` made from `enqueue` and launched; false (nothing enqueued) if refused.
  bool CaptureAndLaunch(const StepLoopKey& key, cudaStream_t stream, const std::function<void()>& enqueue);

  std::mutex mutex_;
  std::map<StepLoopKey, cudaGraphExec_t> graphs_;
  std::list<StepLoopKey> order_;  // oldest first, for eviction
  std::set<StepLoopKey> seen_;    // keys met once, not captured yet
  size_t evictions_ = 0;
};

}  // namespace lstm_ort
