#include "cuda/launch_graphs.h"

#include <atomic>
#include <thread>
#include <utility>

#include "cuda/cuda_check.h"
#include "cuda/gemm/cublas_handles.h"
#include "cuda/process_cache.h"

namespace lstm_ort {

LaunchGraphs::~LaunchGraphs() {
  // A graph still running is freed by the driver when it completes.
  for (auto& entry : graphs_) cudaGraphExecDestroy(entry.second);
}

namespace {

std::atomic<uint64_t> g_captures{0}, g_replays{0};

// The stream this thread captures on, for the current device: made on first use and kept, as the
// cuBLAS handles are; no other work ever runs on it.
cudaStream_t CaptureStream() {
  int device = 0;
  Check(cudaGetDevice(&device), "current device");
  return ProcessCached(std::make_pair(device, std::this_thread::get_id()), [] {
    cudaStream_t s = nullptr;
    Check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "create the capture stream");
    return s;
  });
}

}  // namespace

LaunchGraphCounts ProcessLaunchGraphCounts() { return {g_captures.load(), g_replays.load()}; }

void LaunchGraphs::Run(const LaunchKey& key, cudaStream_t stream, const Enqueue& enqueue, Cublas cublas) {
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &capturing) != cudaSuccess || capturing != cudaStreamCaptureStatusNone) {
    ClearPending();
    return enqueue(stream);  // the caller's own capture (e.g. onnxruntime's CUDA graph mode) takes the launches
  }
  bool direct = false;  // decided under the lock, enqueued outside it: other threads' calls go on
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto found = graphs_.find(key);
    if (found != graphs_.end()) {
      Check(cudaGraphLaunch(found->second, stream), "replay the launch graph");
      ++g_replays;
      return;
    }
    if (evictions_ >= kMaxGraphs || refused_.count(key)) {
      direct = true;  // captures would not pay
    } else if (seen_.insert(key).second) {
      if (seen_.size() > 4 * kMaxGraphs) seen_.clear();  // keys that never repeat do not pile up
      direct = true;
    }
  }
  if (direct) return enqueue(stream);
  if (CaptureAndLaunch(key, stream, enqueue, cublas)) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    seen_.erase(key);
    if (refused_.size() < 4 * kMaxGraphs) refused_.insert(key);
  }
  enqueue(stream);  // the direct launches raise a real error where there is one
}

bool LaunchGraphs::CaptureAndLaunch(const LaunchKey& key, cudaStream_t stream, const Enqueue& enqueue,
                                    Cublas cublas) {
  const cudaStream_t capture = CaptureStream();
  if (cublas == Cublas::kCalls) CublasHandleFor(capture);  // this thread's, made outside the capture
  if (cudaStreamBeginCapture(capture, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
    ClearPending();
    return false;
  }
  cudaGraph_t graph = nullptr;
  bool enqueued = true;
  try {
    enqueue(capture);
  } catch (...) {  // e.g. a call the capture does not take
    enqueued = false;
  }
  if (cudaStreamEndCapture(capture, &graph) != cudaSuccess || !graph || !enqueued) {
    if (graph) cudaGraphDestroy(graph);
    ClearPending();
    return false;
  }
  cudaGraphExec_t exec = nullptr;
  const cudaError_t made = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  if (made != cudaSuccess) {
    ClearPending();
    return false;
  }
  if (cudaGraphLaunch(exec, stream) != cudaSuccess) {  // e.g. a cooperative grid the graph may not take
    cudaGraphExecDestroy(exec);
    ClearPending();
    return false;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  ++g_captures;
  seen_.erase(key);
  if (!graphs_.emplace(key, exec).second) {  // another thread captured the same key meanwhile
    cudaGraphExecDestroy(exec);
    return true;
  }
  order_.push_back(key);
  if (graphs_.size() > kMaxGraphs) {
    ++evictions_;
    cudaGraphExecDestroy(graphs_.at(order_.front()));
    graphs_.erase(order_.front());
    order_.pop_front();
  }
  return true;
}

}  // namespace lstm_ort
