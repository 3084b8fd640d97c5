// The bf16 weight format of the stack runner (cpu/stack_run.h; docs/ops.md, "bf16 on the CPU"):
// W rounded to bf16 once, in panels (cpu/bf16/bf16_kernels.h); per layer its input rounded to
// bf16 and multiplied for every step and both directions at once (fp32 sums, bias folded in); per
// step h rounded to bf16, multiplied into the step's gates, and the fp32 cell run from the gates
// (cpu/kernels.h). c, the cell and the sums stay fp32.
#pragma once

#include <cstdint>
#include <vector>

#include "cpu/bf16/bf16_kernels.h"
#include "cpu/pool.h"
#include "cpu/stack_run.h"
#include "lstm_ort/contract.h"

namespace lstm_ort::cpu {

struct Bf16Packed : PackedShape {
  AlignedBuffer<uint16_t> wx, wh;  // per (l, d) panels; a layer's directions are consecutive in wx
  std::vector<size_t> wx_off, wh_off;
  std::vector<float> bias, peep;   // per (l, d): np * kPanel packed columns; peepholes [3][Hp]
  int64_t Cols() const { return np * kPanel; }
};

// Packs contract-layout float32 or float16 (`fp16`) W, B and P (B, P may be null).
void PackBf16(Bf16Packed& pk, const bf16::Table& t, const Dims& d, const void* w, const void* b, const void* p,
              bool fp16);

class Bf16Format {
 public:
  Bf16Format(const Bf16Packed& pk, const bf16::Table& t) : pk_(pk), t_(t) {}

  int64_t Panels() const { return pk_.np; }
  size_t ScratchBytes(const Dims& d, int64_t steps, int64_t slots) const;
  void Project(const LayerRun& r) const;
  void Prepare(StepArgs& a, const LayerRun& r, int64_t k) const;
  int Phases(int64_t) const { return 1; }
  int64_t PhasePanels(int64_t, int) const { return pk_.np; }
  void Step(const StepArgs& a, const LayerRun& r, int64_t k, int phase, int64_t q0, int64_t q1, int64_t slot) const;

 private:
  struct Layout;
  Layout LayoutOf(const Dims& d, int64_t steps, int64_t slots) const;

  const Bf16Packed& pk_;
  const bf16::Table& t_;
};

}  // namespace lstm_ort::cpu
