#include "cuda/gemm/kept_split.h"

#include "cuda/cuda_check.h"
#include "cuda/gemm/input_projection.h"

namespace lstm_ort {

KeptSplitWeights::~KeptSplitWeights() {
  // Calls that read the halves ended with their runs; a split itself may be the last work.
  for (Half* half : {&hi_, &lo_}) {
    if (half->ready) {
      cudaEventSynchronize(half->ready);
      cudaEventDestroy(half->ready);
    }
    if (half->data) release_(half->data);
  }
}

bool KeptSplitWeights::Ensure(Half& half, bool is_hi, const float* w, const Dims& d, cudaStream_t stream) {
  if (half.tried) {
    if (half.data) Check(cudaStreamWaitEvent(stream, half.ready, 0), "wait for the kept split");
    return half.data != nullptr;
  }
  half.tried = true;
  half.data = static_cast<float*>(allocate_(sizeof(float) * count_));
  if (!half.data) return false;
  for (int64_t l = 0; l < d.L; ++l)
    for (int64_t dir = 0; dir < d.D; ++dir) {
      float* out = half.data + KeptSplitOffset(d, l, dir);
      SplitTf32TransposedAsync(w + d.WeightOffset(l, dir), is_hi ? out : nullptr, is_hi ? nullptr : out,
                               d.LayerInput(l), kGates * d.H, stream);
    }
  Check(cudaEventCreateWithFlags(&half.ready, cudaEventDisableTiming), "create the kept split's event");
  Check(cudaEventRecord(half.ready, stream), "record the kept split");
  return true;
}

KeptSplit KeptSplitWeights::For(const float* w, const Dims& d, cudaStream_t stream, bool with_lo) {
  std::lock_guard<std::mutex> lock(mutex_);
  const int64_t count = KeptSplitOffset(d, d.L, 0);
  if (!source_) {
    source_ = w;
    count_ = count;
  } else if (w != source_ || count != count_) {
    return {};
  }
  if (!Ensure(hi_, true, w, d, stream)) return {};
  if (!with_lo) return {hi_.data, nullptr};
  if (!Ensure(lo_, false, w, d, stream)) return {};
  return {hi_.data, lo_.data};
}

}  // namespace lstm_ort
