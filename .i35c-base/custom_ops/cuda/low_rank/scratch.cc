#include "cuda/low_rank/scratch.h"

#include <algorithm>

#include "cuda/low_rank/recurrence_plan.h"
#include "cuda/scratch_layout.h"

namespace lstm_ort {

int64_t WidestRank(const Ranks& ranks, bool recurrent) {
  const std::vector<int64_t>& v = recurrent ? ranks.recurrent : ranks.input;
  return v.empty() ? 0 : *std::max_element(v.begin(), v.end());
}

LowRankScratch CarveLowRankScratch(const Dims& d, const Ranks& ranks, ElementType type, void* base, size_t* total) {
  LowRankScratch s{};
  char* p = static_cast<char*>(base);
  size_t off = 0;
  auto take = [&](size_t floats) {
    float* q = p ? reinterpret_cast<float*>(p + off) : nullptr;
    off += (floats * sizeof(float) + kScratchAlign - 1) / kScratchAlign * kScratchAlign;
    return q;
  };
  const bool half = type == ElementType::kFloat16;
  const WeightLayout layout(d, ranks);
  const size_t rows = static_cast<size_t>(d.T * d.B), state = static_cast<size_t>(d.D * d.B * d.H);
  s.x = half ? take(rows * d.I) : nullptr;
  s.w = half ? take(layout.WeightCount()) : nullptr;
  s.factors = half ? take(layout.FactorCount()) : nullptr;
  s.gx = take(d.D * rows * kGates * d.H);
  s.px = take(rows * WidestRank(ranks, false));
  const size_t padded_state = static_cast<size_t>(d.D * PaddedBatch(d.B) * d.H);  // h transposed
  s.h[0] = take(state);
  s.h[1] = take(padded_state);
  s.c = take(state);
  s.p = take(d.D * PaddedBatch(d.B) * WidestRank(ranks, true));
  s.lens = reinterpret_cast<int*>(take(d.B));
  s.barrier = reinterpret_cast<unsigned*>(take(1));
  s.layer[0] = take(d.L > 1 ? rows * d.D * d.H : 0);
  s.layer[1] = take(d.L > 2 ? rows * d.D * d.H : 0);
  if (total) *total = off;
  return s;
}

size_t LowRankScratchBytes(const Dims& d, const Ranks& ranks, ElementType type) {
  size_t total = 0;
  CarveLowRankScratch(d, ranks, type, nullptr, &total);
  return total;
}

}  // namespace lstm_ort
