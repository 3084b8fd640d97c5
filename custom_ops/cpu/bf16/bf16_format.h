// The bf16 weight format of the stack runner (cpu/stack_run.h; docs/ops.md, "bf16 on the CPU"):
// W and R rounded to bf16 once, in panels (cpu/bf16/bf16_kernels.h). Per step, each running row's
// input and h rounded to bf16 side by side and multiplied in one product of depth I + H (bias folded
// in) into the step's gates, and the fp32 cell run from them (cpu/kernels.h): the gates never go
// through memory (LayerPlan::step_projects). Where the plan says otherwise, the layer's input is
// multiplied for every step and both directions at once into its gates first, and a step adds h's
// product. c, the cell and the sums stay fp32.
#pragma once

#include <cstdint>
#include <vector>

#include "cpu/bf16/bf16_kernels.h"
#include "cpu/call_plan.h"
#include "cpu/pool.h"
#include "cpu/stack_run.h"
#include "lstm_ort/contract.h"

namespace lstm_ort::cpu {

// Per (l, d) its panels, each strip W's rows (padded to the table's group) then R's: the projection
// reads the first, a step R's alone, or both where the step multiplies its input itself
// (LayerPlan::step_projects). A layer's directions are consecutive.
struct Bf16Packed : PackedShape {
  AlignedBuffer<uint16_t> w;
  std::vector<size_t> w_off;
  std::vector<int64_t> depth_x;    // per layer: its input's rows in a strip
  int64_t depth_h = 0;             // R's rows in a strip
  std::vector<float> bias, peep;   // per (l, d): np * kPanel packed columns; peepholes [3][Hp]
  int64_t Cols() const { return np * kPanel; }
};

// Packs contract-layout float32 or float16 (`fp16`) W, B and P (B, P may be null).
void PackBf16(Bf16Packed& pk, const bf16::Table& t, const Dims& d, const void* w, const void* b, const void* p,
              bool fp16);

class Bf16Format {
 public:
  // `plan`: whether any layer multiplies its input apart (a projection), whose rows the scratch holds.
  Bf16Format(const Bf16Packed& pk, const bf16::Table& t, const CpuCallPlan& plan);

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
  bool projects_apart_;
};

}  // namespace lstm_ort::cpu
