// A group's calls of one stream replayed as a CUDA graph. onnxruntime's CUDA provider captures a
// session's kernels once (its enable_cuda_graph) and then replays them in one launch, where a plain
// call launches each from the host (silero-vad 16k's model of one stream: 86 nodes). A captured graph
// reads and writes the addresses it was captured with, so the call's inputs and outputs live in
// buffers bound once: pinned host memory, which the kernels read and write in place through CUDA's
// unified addressing, so a call copies nothing between host and device that its kernels do not
// touch. On the H200, one call from Python with its copies: silero-vad 210 us (plain 290), an L2 H128
// LSTM step 46 us (plain 72; 99 with device buffers and explicit copies). Kernels read such memory
// over PCIe, so calls whose buffers are large (the same LSTM at 256 streams: 267 us against 191)
// run the plain way: see kMaxGraphedBytes.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "../ort_api.h"
#include "call_runner.h"

namespace lstm_ort::streams {

struct BoundTensor {
  std::string name;
  std::vector<int64_t> shape;
  int32_t type = 0;
  size_t bytes = 0;
};

// The most bytes a graphed call's inputs and outputs may hold together (the L2 H128 step at 16
// streams, 80 KB: 42 us against 78 plain; at 256 streams, 1.2 MB: slower than plain).
constexpr size_t kMaxGraphedBytes = 128 << 10;
constexpr size_t kMaxGraphThreads = 8;

class GraphedCall {
 public:
  // `session`: GraphedSession's, on CUDA device `device_id`.
  GraphedCall(Ort::Session session, int device_id);
  ~GraphedCall();
  GraphedCall(const GraphedCall&) = delete;
  GraphedCall& operator=(const GraphedCall&) = delete;

  // The buffers, for one call at a time: false where another call holds them.
  bool TryTake();
  void Give();

  // Under TryTake: whether buffers are bound, and whether a call of these inputs runs on them (the
  // bound names, shapes and types).
  bool bound() const { return !inputs_.empty(); }
  bool Fits(const std::vector<BoundTensor>& inputs) const;
  // Under TryTake, once: binds buffers for these inputs and outputs (the outputs as a plain call of
  // the model made them). Returns why not where it does not ("" where it did); a refused
  // GraphedCall stays unbound.
  std::string Bind(const std::vector<BoundTensor>& inputs, const std::vector<BoundTensor>& outputs);

  // Whether this thread runs calls here: onnxruntime keeps a graph per thread (its memory, and a
  // capture that holds back every other call of the process), so only the first kMaxGraphThreads
  // threads to ask do (a server's worker threads; a thread per request would capture without end).
  bool ThisThreadMayRun();
  // Whether this thread's next Run may capture the graph: onnxruntime captures during a thread's
  // first Run (it runs twice plainly first within it, min_num_runs_before_cuda_graph_capture_);
  // this counts three Runs, to be safe.
  bool MayCapture();
  // Under TryTake: copies `data` (one pointer per bound input) into the buffers and runs.
  void Run(const std::vector<const void*>& data);
  // The last Run's outputs, valid until the buffers are given back.
  std::vector<CallOutput> Outputs() const;
  // Calls run on the buffers.
  int64_t calls() const { return calls_.load(std::memory_order_relaxed); }

 private:
  Ort::Session session_;
  Ort::MemoryInfo device_{nullptr};
  Ort::Allocator pinned_{nullptr};
  std::vector<BoundTensor> inputs_, outputs_;
  std::vector<void*> input_buffers_, output_buffers_;
  std::unique_ptr<Ort::IoBinding> binding_;
  std::atomic<bool> taken_{false};
  std::atomic<int64_t> calls_{0};
  struct ThreadRuns {
    std::thread::id thread;
    int runs = 0;
  };
  std::mutex threads_mu_;
  std::vector<ThreadRuns> threads_;  // those that ran here, at most kMaxGraphThreads
  ThreadRuns* ThisThread();          // null where it has no room
};

// The session of a group's graphed calls: `spec`'s, with the CUDA provider's enable_cuda_graph.
// Throws (onnxruntime's reason) where onnxruntime refuses to capture this model: control flow, a
// node off the GPU, copies between devices.
struct SessionSpec;
Ort::Session GraphedSession(const SessionSpec& spec, const std::string& model);

}  // namespace lstm_ort::streams
