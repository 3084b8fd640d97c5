// The TF32 halves of a node's constant W (gemm/split_tf32.cuh), split once on the device and
// kept for every later call. Split per call, the halves re-read W and wrote it twice: 36 us a
// layer at H1024 on an H100, up to 13% of a 10-step chunk in the layer pipeline. Only the rows
// that multiply a layer's input are kept, transposed to K-major for the tensor cores:
// [l][dir][4H][LayerInput(l)], half of W above the first layer. hi alone serves TF32 calls (W
// rounded once, read in the order the tensor cores take); 3xTF32 calls read hi and lo, and lo is
// made only once a call asks for it.
// fp16/bf16 projections on an fp32 model multiply bfloat16 copies of W (ProjectsWithBf16Copies):
// copied per call, each call read W (4 bytes a weight) and wrote the copy (2), 1.4 GB for an L4
// H2048 bidirectional stack. The copy is kept as W is stored, [l][dir][LayerInput(l)][4H], at the
// same offsets as the halves.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>

#include "cuda/heuristics.h"
#include "lstm_ort/contract.h"

namespace lstm_ort {

// Where (l, dir)'s input rows lie in a kept half; (L, 0) gives its element count.
inline int64_t KeptSplitOffset(const Dims& d, int64_t l, int64_t dir) {
  int64_t off = 0;
  for (int64_t k = 0; k < l; ++k) off += d.D * d.LayerInput(k) * kGates * d.H;
  return off + dir * d.LayerInput(l) * kGates * d.H;
}

// Device pointers to the kept forms, or null where the call does not read them.
struct KeptSplit {
  const float* hi = nullptr;  // K-major
  const float* lo = nullptr;  // null where the call reads hi only (TF32)
  const uint16_t* bf16 = nullptr;  // bfloat16 bits, as W is stored
  // Both halves: the call's 3xTF32 split needs no room for W's.
  bool Kept() const { return hi != nullptr && lo != nullptr; }
  // Whether the form a plan asked for (CallPlan::kept) came.
  bool Has(KeptHalves which) const {
    switch (which) {
      case KeptHalves::kNone: return true;
      case KeptHalves::kHi: return hi != nullptr;
      case KeptHalves::kBoth: return Kept();
      case KeptHalves::kBf16: return bf16 != nullptr;
    }
    return false;
  }
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

  // The form `which` names of w (a d-shaped W): hi, hi and lo, or the bfloat16 copy, ready for
  // the work `stream` runs from now on: each is made on the first call that asks for it (on that
  // call's stream) and waited for by every stream after. Empty for any other w than the first one
  // (a constant's address does not change; the caller then reads W itself) and where the memory
  // could not be had.
  KeptSplit For(const float* w, const Dims& d, cudaStream_t stream, KeptHalves which);

 private:
  enum class Form { kHi, kLo, kBf16 };
  struct Half {
    bool tried = false;
    void* data = nullptr;
    cudaEvent_t ready = nullptr;
  };
  // Makes `half` (of form `form`) from W on its first call; false where it has no memory.
  bool Ensure(Half& half, Form form, const float* w, const Dims& d, cudaStream_t stream);

  std::function<void*(size_t)> allocate_;
  std::function<void(void*)> release_;
  std::mutex mutex_;
  const float* source_ = nullptr;
  int64_t count_ = 0;
  Half hi_, lo_, bf16_;
};

}  // namespace lstm_ort
