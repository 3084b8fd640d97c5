#include "cuda/gemm/kept_split.h"

#include "cuda/cuda_check.h"
#include "cuda/gemm/input_projection.h"

namespace lstm_ort {

KeptSplitWeights::~KeptSplitWeights() {
  // Calls that read the halves ended with their runs; a split itself may be the last work.
  for (Half* half : {&hi_, &lo_, &bf16_}) {
    if (half->ready) {
      cudaEventSynchronize(half->ready);
      cudaEventDestroy(half->ready);
    }
    if (half->data) release_(half->data);
  }
}

bool KeptSplitWeights::Ensure(Half& half, Form form, const float* w, const Dims& d, cudaStream_t stream) {
  if (half.tried) {
    if (half.data) Check(cudaStreamWaitEvent(stream, half.ready, 0), "wait for the kept split");
    return half.data != nullptr;
  }
  half.tried = true;
  half.data = allocate_((form == Form::kBf16 ? sizeof(uint16_t) : sizeof(float)) * count_);
  if (!half.data) return false;
  for (int64_t l = 0; l < d.L; ++l)
    for (int64_t dir = 0; dir < d.D; ++dir) {
      const float* in = w + d.WeightOffset(l, dir);
      const int64_t at = KeptSplitOffset(d, l, dir), rows = d.LayerInput(l);
      if (form == Form::kBf16) {
        ToBf16Async(in, static_cast<uint16_t*>(half.data) + at, rows * kGates * d.H, stream);
        continue;
      }
      float* out = static_cast<float*>(half.data) + at;
      SplitTf32TransposedAsync(in, form == Form::kHi ? out : nullptr, form == Form::kLo ? out : nullptr, rows,
                               kGates * d.H, stream);
    }
  Check(cudaEventCreateWithFlags(&half.ready, cudaEventDisableTiming), "create the kept split's event");
  Check(cudaEventRecord(half.ready, stream), "record the kept split");
  return true;
}

KeptSplit KeptSplitWeights::For(const float* w, const Dims& d, cudaStream_t stream, KeptHalves which) {
  std::lock_guard<std::mutex> lock(mutex_);
  const int64_t count = KeptSplitOffset(d, d.L, 0);
  if (!source_) {
    source_ = w;
    count_ = count;
  } else if (w != source_ || count != count_) {
    return {};
  }
  KeptSplit kept;
  if (which == KeptHalves::kNone) return kept;
  if (which == KeptHalves::kBf16) {
    if (Ensure(bf16_, Form::kBf16, w, d, stream)) kept.bf16 = static_cast<const uint16_t*>(bf16_.data);
    return kept;
  }
  if (!Ensure(hi_, Form::kHi, w, d, stream)) return kept;
  kept.hi = static_cast<const float*>(hi_.data);
  if (which != KeptHalves::kBoth) return kept;
  if (!Ensure(lo_, Form::kLo, w, d, stream)) return {};
  kept.lo = static_cast<const float*>(lo_.data);
  return kept;
}

}  // namespace lstm_ort
