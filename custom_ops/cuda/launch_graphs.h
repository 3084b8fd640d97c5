// Launches replayed as CUDA graphs, at two levels with one mechanism:
// - a whole short call (cuda_ops.cc, CallGraphPays): a T=1 call is ~10 launches whose GPU work
//   is a few microseconds, and the host spent ~50 us enqueuing them (H200, L2 H128 B1 through a
//   reused IOBinding: 68 us per call, 62 of them inside the node's Compute);
// - v1's cuBLAS step loop of a layer (stack_run.cu): a step is a cublasLt GEMM and a cell kernel,
//   and each costs the host ~8 us to enqueue however small it is: at T=100 H256 B256 (tf32) the
//   GPU sat idle 57% of the call (H100, 714 of 1649 us busy).
// What is captured once is replayed with one launch when a later call has the same key: every
// pointer, size and parameter the launches capture by value (onnxruntime's arena hands a
// repeated call the same buffers). A key is captured on its second sighting, so calls whose
// buffers never repeat pay no capture. Inputs are read when the graph runs, so new values in the
// same buffers are seen. Captures are made on a stream of the capturing thread's own, never the
// caller's: a caller's stream may be shared by concurrent calls (a user compute stream serves
// every run of a session), and a capture there would take the other threads' launches into its
// graph.
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

// Shorter step loops launch directly: a graph launch costs more than one step's launches (H100,
// L4 T1 H2048 B512 bidirectional: 0.90-0.92 ms direct, 0.95 replayed).
constexpr int kMinStepsForStepGraph = 4;

// Everything a run of launches captures, as words.
class LaunchKey {
 public:
  LaunchKey& Add(const void* p) { return Add(reinterpret_cast<uintptr_t>(p)); }
  LaunchKey& Add(uint64_t v) {
    words_.push_back(v);
    return *this;
  }
  LaunchKey& Add(long long v) { return Add(static_cast<uint64_t>(v)); }
  LaunchKey& Add(long v) { return Add(static_cast<uint64_t>(v)); }
  LaunchKey& Add(int v) { return Add(static_cast<uint64_t>(static_cast<uint32_t>(v))); }
  LaunchKey& Add(bool v) { return Add(static_cast<uint64_t>(v)); }
  LaunchKey& Add(float v) {
    uint32_t bits;
    std::memcpy(&bits, &v, sizeof(bits));
    return Add(static_cast<uint64_t>(bits));
  }
  bool operator<(const LaunchKey& o) const { return words_ < o.words_; }

 private:
  std::vector<uint64_t> words_;
};

// The graphs of one kernel instance (a node of a session) at one level, at most kMaxGraphs of
// them. A node whose calls cycle through more keys than that (each eviction then costs a capture)
// stops capturing after kMaxGraphs evictions and launches new keys directly; the layer pipeline's
// stages see a few keys per layer (two buffer slots, and the last stage's per-item outputs), a
// stream carried from call to call two (onnxruntime's arena alternates its outputs).
class LaunchGraphs {
 public:
  static constexpr size_t kMaxGraphs = 64;
  LaunchGraphs() = default;
  ~LaunchGraphs();
  LaunchGraphs(const LaunchGraphs&) = delete;
  LaunchGraphs& operator=(const LaunchGraphs&) = delete;

  // What enqueues the launches on the stream it is given.
  using Enqueue = std::function<void(cudaStream_t)>;

  // Whether the launches include cuBLAS calls: a capture then takes them through the thread's own
  // handle (gemm/cublas_handles.h), made before the capture begins (cuBLAS allocates as it makes a
  // handle, which a capture refuses), and only then: a handle holds 64 MiB.
  enum class Cublas : bool { kNone, kCalls };

  // Enqueues the launches on `stream`: replays the graph of `key`, or captures `enqueue` into one
  // on the key's second sighting, or calls `enqueue(stream)` directly (first sighting, a stream
  // already being captured, a key whose capture the driver refused, or keys that cycle).
  void Run(const LaunchKey& key, cudaStream_t stream, const Enqueue& enqueue, Cublas cublas);

 private:
  // The graph of `key` made from `enqueue` and launched; false (nothing enqueued) if refused.
  bool CaptureAndLaunch(const LaunchKey& key, cudaStream_t stream, const Enqueue& enqueue, Cublas cublas);

  std::mutex mutex_;
  std::map<LaunchKey, cudaGraphExec_t> graphs_;
  std::list<LaunchKey> order_;  // oldest first, for eviction
  std::set<LaunchKey> seen_;    // keys met once, not captured yet
  std::set<LaunchKey> refused_;  // keys whose capture or instantiation failed: always direct
  size_t evictions_ = 0;
};

// The graphs every LaunchGraphs of the process captured and replayed so far (for tests).
struct LaunchGraphCounts {
  uint64_t captures = 0, replays = 0;
};
LaunchGraphCounts ProcessLaunchGraphCounts();

}  // namespace lstm_ort
