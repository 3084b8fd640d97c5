// The 3xTF32 halves of a node's constant W (gemm/split_tf32.cuh), split once on the device and
// kept for every later call, so a call splits only its input x. Split per call, the halves
// re-read W and wrote it twice: 36 us a layer at H1024 on an H100, up to 13% of a 10-step chunk
// in the layer pipeline. Only the rows that multiply a layer's input are kept:
// [l][dir][LayerInput(l)][4H], half of W above the first layer.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>

#include "lstm_ort/contract.h"

namespace lstm_ort {

// Where (l, dir)'s input rows lie in the kept halves; (L, 0) gives their element count.
inline int64_t KeptSplitOffset(const Dims& d, int64_t l, int64_t dir) {
  int64_t off = 0;
  for (int64_t k = 0; k < l; ++k) off += d.D * d.LayerInput(k) * kGates * d.H;
  return off + dir * d.LayerInput(l) * kGates * d.H;
}

// Device pointers to the halves, or both null where the call splits W itself.
struct KeptSplit {
  const float* hi = nullptr;
  const float* lo = nullptr;
  bool Kept() const { return hi != nullptr; }
};

class KeptSplitWeights {
 public:
  // Device memory of the kernel's own device, from onnxruntime's allocator; `allocate` may
  // return null (nothing is kept then).
  KeptSplitWeights(std::function<void*(size_t)> allocate, std::function<void(void*)> release)
      : allocate_(std::move(allocate)), release_(std::move(release)) {}
  ~KeptSplitWeights();
  KeptSplitWeights(const KeptSplitWeights&) = delete;
  KeptSplitWeights& operator=(const KeptSplitWeights&) = delete;

  // The halves of w (a d-shaped W), ready for the work `stream` runs from now on: split on the
  // first call (on `stream`), and waited for by every stream after. Empty for any other w than
  // the first one (a constant's address does not change; the caller then splits it itself).
  KeptSplit For(const float* w, const Dims& d, cudaStream_t stream);

 private:
  std::function<void*(size_t)> allocate_;
  std::function<void(void*)> release_;
  std::mutex mutex_;
  bool tried_ = false;
  const float* source_ = nullptr;
  int64_t count_ = 0;
  float* halves_ = nullptr;  // hi, then lo
  cudaEvent_t ready_ = nullptr;
};

}  // namespace lstm_ort
