#include "cuda/scratch_layout.h"

#include <algorithm>
#include <cstdint>

#include "cuda/heuristics.h"
#include "cuda/mma_step/plan.h"

namespace lstm_ort {
namespace {

size_t Aligned(size_t n) { return (n + kScratchAlign - 1) / kScratchAlign * kScratchAlign; }

}  // namespace

size_t HBufBytes(const Dims& d) { return sizeof(float) * 2 * d.L * d.D * d.H * ((d.B + 127) / 128 * 128); }

ScratchNeeds ScratchNeedsFor(const Dims& d, ElementType type, ProjectionMath math, bool weights_kept) {
  ScratchNeeds n;
  if (type == ElementType::kFloat32) {
    const StepWeights weights = StepWeightsFor(math, d);
    const bool streams = StepStreamsWeights(d, weights);
    n.gates = true;
    n.gate_copies = streams ? StreamSplitsAtMost(d.H) : 1;  // partial sums per K split
    n.stream_done = streams;
    n.half_weights = weights != StepWeights::kFp32;
  }
  n.split_x = CallProjectsWithSplitTf32(type, math, d, weights_kept);
  n.split_w = n.split_x && !weights_kept;  // kept halves need no room here
  n.bf16_copies = CallProjectsWithBf16Copies(type, math, d, weights_kept);
  n.bf16_w = n.bf16_copies && !weights_kept;  // a kept copy needs no room here
  return n;
}

Scratch CarveScratch(const Dims& d, ElementType type, const ScratchNeeds& needs, void* base, size_t* total) {
  Scratch s{};
  char* p = static_cast<char*>(base);
  size_t off = 0;
  auto take = [&](size_t bytes) {
    char* q = p ? p + off : nullptr;
    off += Aligned(bytes);
    return q;
  };
  const size_t state = sizeof(float) * d.D * d.B * d.H;
  s.gx = reinterpret_cast<float*>(take(sizeof(float) * d.D * d.T * d.B * kGates * d.H));
  s.h[0] = reinterpret_cast<float*>(take(state));
  s.h[1] = reinterpret_cast<float*>(take(state));
  s.c = reinterpret_cast<float*>(take(state));
  s.lens = reinterpret_cast<int*>(take(sizeof(int) * d.B));
  const bool layer = d.L > 1 && !needs.y_relays;
  void* between = take(layer ? ElementBytes(type) * d.T * d.B * d.D * d.H : 0);
  s.layer = layer ? between : nullptr;  // take(0) would point at the next region
  const size_t states = sizeof(float) * d.L * d.D * d.B * d.H;
  s.h0 = reinterpret_cast<float*>(take(states));
  s.c0 = reinterpret_cast<float*>(take(states));
  s.h_fin = reinterpret_cast<float*>(take(states));
  s.c_fin = reinterpret_cast<float*>(take(states));
  s.hbuf = reinterpret_cast<float*>(take(HBufBytes(d)));
  s.barrier = reinterpret_cast<unsigned*>(take(sizeof(unsigned)));
  s.gates = reinterpret_cast<float*>(
      take(needs.gates ? sizeof(float) * needs.gate_copies * d.D * d.B * kGates * d.H : 0));
  unsigned* done =
      reinterpret_cast<unsigned*>(take(needs.stream_done ? sizeof(unsigned) * d.D * StreamColumnTiles(d.H) : 0));
  s.stream_done = needs.stream_done ? done : nullptr;  // take(0) would point at the next region
  if (needs.half_weights) {
    s.wh_half = take(sizeof(uint16_t) * d.D * d.H * kGates * d.H);
    s.h_half = take(sizeof(uint16_t) * d.D * d.B * d.H);
    s.wh_amax = reinterpret_cast<unsigned*>(take(sizeof(unsigned) * 2));
  }
  if (needs.split_x) {
    const int64_t widest = WidestLayerInput(d);
    const size_t x = sizeof(float) * std::min<int64_t>(d.T * d.B, kSplitChunkRows) * widest;
    s.x_hi = reinterpret_cast<float*>(take(x));
    s.x_lo = reinterpret_cast<float*>(take(x));
    if (needs.split_w) {
      const size_t w = sizeof(float) * d.D * widest * kGates * d.H;
      s.w_hi = reinterpret_cast<float*>(take(w));
      s.w_lo = reinterpret_cast<float*>(take(w));
    }
  }
  if (needs.bf16_copies) {
    const int64_t widest = WidestLayerInput(d);
    s.x_bf16 = take(sizeof(uint16_t) * std::min<int64_t>(d.T * d.B, kSplitChunkRows) * widest);
    if (needs.bf16_w) s.w_bf16 = take(sizeof(uint16_t) * d.D * widest * kGates * d.H);
  }
  if (needs.step_exps) {
    s.step_exps = reinterpret_cast<int*>(take(sizeof(int) * 2 * kMmaStepExps));
    s.step_w = needs.step_weight_bytes ? take(static_cast<size_t>(needs.step_weight_bytes)) : nullptr;
  }
  if (total) *total = off;
  return s;
}

size_t ScratchBytes(const Dims& d, ElementType type, const ScratchNeeds& needs) {
  size_t total = 0;
  CarveScratch(d, type, needs, nullptr, &total);
  return total;
}

}  // namespace lstm_ort
