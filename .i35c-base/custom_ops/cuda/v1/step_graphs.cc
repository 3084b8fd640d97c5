#include "cuda/v1/step_graphs.h"

#include "cuda/cuda_check.h"

namespace lstm_ort {

StepGraphs::~StepGraphs() {
  // A graph still running is freed by the driver when it completes.
  for (auto& entry : graphs_) cudaGraphExecDestroy(entry.second);
}

void StepGraphs::Run(const StepLoopKey& key, cudaStream_t stream, const std::function<void()>& enqueue) {
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &capturing) != cudaSuccess || capturing != cudaStreamCaptureStatusNone) {
    ClearPending();
    return enqueue();  // the caller's own capture (e.g. onnxruntime's CUDA graph mode) takes the launches
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto found = graphs_.find(key);
    if (found != graphs_.end()) {
      Check(cudaGraphLaunch(found->second, stream), "replay the step graph");
      return;
    }
    if (evictions_ >= kMaxStepGraphs) return enqueue();  // the keys cycle: captures would not pay
    if (seen_.insert(key).second) {
      if (seen_.size() > 4 * kMaxStepGraphs) seen_.clear();  // keys that never repeat do not pile up
      return enqueue();
    }
  }
  if (!CaptureAndLaunch(key, stream, enqueue)) enqueue();
}

bool StepGraphs::CaptureAndLaunch(const StepLoopKey& key, cudaStream_t stream, const std::function<void()>& enqueue) {
  if (cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
    ClearPending();
    return false;
  }
  cudaGraph_t graph = nullptr;
  bool enqueued = true;
  try {
    enqueue();
  } catch (...) {  // e.g. a call the capture does not take; the direct launches raise a real error again
    enqueued = false;
  }
  if (cudaStreamEndCapture(stream, &graph) != cudaSuccess || !graph || !enqueued) {
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
  const cudaError_t launched = cudaGraphLaunch(exec, stream);
  if (launched != cudaSuccess) cudaGraphExecDestroy(exec);
  Check(launched, "launch the step graph");
  std::lock_guard<std::mutex> lock(mutex_);
  seen_.erase(key);
  if (!graphs_.emplace(key, exec).second) {  // another thread captured the same key meanwhile
    cudaGraphExecDestroy(exec);
    return true;
  }
  order_.push_back(key);
  if (graphs_.size() > kMaxStepGraphs) {
    ++evictions_;
    cudaGraphExecDestroy(graphs_.at(order_.front()));
    graphs_.erase(order_.front());
    order_.pop_front();
  }
  return true;
}

}  // namespace lstm_ort
