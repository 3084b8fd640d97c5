// The int8 weight format of the stack runner (cpu/stack_run.h; docs/ops.md, "int8 weights"): W as
// int8 panels with a scale per column, and onnxruntime's DynamicQuantizeLSTM arithmetic around
// them. Per layer its input is quantized to uint8 levels and multiplied for every step and both
// directions at once (bias folded in); per step h is quantized, multiplied into the step's gates
// and the float kernel's cell runs from the gates alone. Activations are quantized with one scale
// per call and per step (Int8Scales::kCall, stock's one-thread result) or one per row (kRow).
#pragma once

#include <cstdint>
#include <vector>

#include "cpu/int8/int8_kernels.h"
#include "cpu/pool.h"
#include "cpu/stack_run.h"
#include "lstm_ort/contract.h"

namespace lstm_ort::cpu {

struct Int8Packed : PackedShape {
  const void* s_src = nullptr;
  AlignedBuffer<int8_t> wx, wh;  // per (l, d) panels; a layer's directions are consecutive in wx (one projection)
  std::vector<size_t> wx_off, wh_off;
  // Per (l, d), np * kPanel packed columns each: scales, column sums, bias; peepholes [3][Hp].
  std::vector<float> sx, sh, bias, peep;
  std::vector<int32_t> cx, ch;

  int64_t Cols() const { return np * kPanel; }
};

// Packs contract-layout int8 W with its scales, B and P (float32; B and P may be null).
void PackInt8(Int8Packed& pk, const int8::Table& t, const Dims& d, const int8_t* w, const float* s, const float* b,
              const float* p);

class Int8Format {
 public:
  Int8Format(const Int8Packed& pk, const int8::Table& t, Int8Scales scales) : pk_(pk), q_(t), scales_(scales) {}

  int64_t Panels() const { return pk_.np; }
  size_t ScratchBytes(const Dims& d, int64_t steps, int64_t slots) const;
  void Project(const LayerRun& r) const;
  void Prepare(StepArgs& a, const LayerRun& r, int64_t k) const;
  int Phases(int64_t) const { return 1; }
  int64_t PhasePanels(int64_t, int) const { return pk_.np; }
  void Step(const StepArgs& a, const LayerRun& r, int64_t k, int phase, int64_t q0, int64_t q1, int64_t slot) const;

 private:
  struct Layout;  // where each part of the format's scratch lies
  Layout LayoutOf(const Dims& d, int64_t steps, int64_t slots) const;

  const Int8Packed& pk_;
  const int8::Table& q_;
  Int8Scales scales_;
};

}  // namespace lstm_ort::cpu
