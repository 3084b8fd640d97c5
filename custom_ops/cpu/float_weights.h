// The fp32 weight format of the stack runner (cpu/stack_run.h): a node's float32 or float16 W, B,
// P (and factored parts) packed into fp32 panels (cpu/kernels.h), and how a layer projects and
// steps on them: one blocked product per layer (a factored direction's input through its rank, x A
// then (x A) B), and per step the packed recurrent panels with the cell in registers (a factored
// recurrence in two phases, h A then (h A) B with the cell).
#pragma once

#include <cstdint>
#include <vector>

#include "cpu/kernels.h"
#include "cpu/pool.h"
#include "cpu/stack_run.h"
#include "lstm_ort/contract.h"

namespace lstm_ort::cpu {

// One factored part of one (layer, direction) packed: the first factor A [rows, rank] as plain
// column panels (kPanel columns each, the rank padded to whole panels: a product through it is a
// projection), the second B [rank, 4H] as gate panels like W's.
struct FactorPart {
  int64_t rank = 0;    // 0: not factored
  int64_t panels = 0;  // panels of A: rank padded up to panels * kPanel columns
  size_t a_off = 0, b_off = 0;
  int64_t Padded() const { return panels * kPanel; }
};

struct FloatPacked : PackedShape {
  const void* f_src = nullptr;
  AlignedBuffer<float> wx, wh, bias, peep, fac;
  // Per (l, d); a factored part has no wx / wh panels. The directions' wx panels are consecutive,
  // so a layer with no factored input projects both directions in one pass.
  std::vector<int64_t> wx_off, wh_off, bias_off, peep_off;
  std::vector<FactorPart> fx, fh;  // input and recurrent factors, per (l, d)

  bool InputFactored(int64_t l) const;
};

// Packs contract-layout W, B, P and factors (element type S: float or Ort::Float16_t, by `fp16`)
// into panels; B, P and factors may be null.
void PackFloat(FloatPacked& pk, const Dims& d, const Ranks& ranks, const void* w, const void* b, const void* p,
               const void* f, bool fp16);

class FloatFormat {
 public:
  FloatFormat(const FloatPacked& pk, const Dims& d);

  int64_t Panels() const { return pk_.np; }
  size_t ScratchBytes(const Dims& d, int64_t steps, int64_t slots) const;
  void Project(const LayerRun& r) const;
  void Prepare(StepArgs& a, const LayerRun& r, int64_t k) const;
  int Phases(int64_t k) const { return pk_.fh[k].rank ? 2 : 1; }
  int64_t PhasePanels(int64_t k, int phase) const { return phase == 0 && pk_.fh[k].rank ? pk_.fh[k].panels : pk_.np; }
  void Step(const StepArgs& a, const LayerRun& r, int64_t k, int phase, int64_t q0, int64_t q1, int64_t slot) const;

 private:
  struct Layout;
  Layout LayoutOf(const Dims& d, int64_t steps, int64_t slots) const;
  StepArgs AtStepInput(const StepArgs& a, const LayerRun& r, int64_t slot) const;

  const FloatPacked& pk_;
  int64_t widest_x_ = 0, widest_h_ = 0;  // the widest factored input / recurrent rank, padded to panels
  int64_t widest_in_ = 0;                // the widest layer input
};

}  // namespace lstm_ort::cpu
