#include "cuda/gemm/kept_split.h"

#include "cuda/cuda_check.h"
#include "cuda/gemm/input_projection.h"

namespace lstm_ort {

KeptSplitWeights::~KeptSplitWeights() {
  // Calls that read the halves ended with their runs; the split itself may be the last work.
  if (ready_) {
    cudaEventSynchronize(ready_);
    cudaEventDestroy(ready_);
  }
  if (halves_) release_(halves_);
}

KeptSplit KeptSplitWeights::For(const float* w, const Dims& d, cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  const int64_t count = KeptSplitOffset(d, d.L, 0);
  if (!tried_) {
    tried_ = true;
    halves_ = static_cast<float*>(allocate_(2 * sizeof(float) * count));
    if (!halves_) return {};
    for (int64_t l = 0; l < d.L; ++l)
      for (int64_t dir = 0; dir < d.D; ++dir) {
        const int64_t n = d.LayerInput(l) * kGates * d.H, off = KeptSplitOffset(d, l, dir);
        SplitTf32Async(w + d.WeightOffset(l, dir), halves_ + off, halves_ + count + off, n, stream);
      }
    Check(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming), "create the kept split's event");
    Check(cudaEventRecord(ready_, stream), "record the kept split");
    source_ = w;
    count_ = count;
  } else if (!halves_ || w != source_ || count != count_) {
    return {};
  } else {
    Check(cudaStreamWaitEvent(stream, ready_, 0), "wait for the kept split");
  }
  return {halves_, halves_ + count};
}

}  // namespace lstm_ort
