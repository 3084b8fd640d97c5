#include "cpu/float_weights.h"

#include <cstring>
#include <tuple>

#include "ort_api.h"

namespace lstm_ort::cpu {
namespace {

inline float Value(float v) { return v; }
inline float Value(Ort::Float16_t v) { return v.ToFloat(); }

// Rows [0, rows) of a row-major [rows][cols] source (column c) as plain column panels.
template <typename S>
void PackColumns(float* dst, const S* src, int64_t rows, int64_t cols) {
  for (int64_t c = 0; c < cols; ++c) {
    float* panel = dst + (c / kPanel) * rows * kPanel;
    for (int64_t r = 0; r < rows; ++r) panel[PanelIndex(rows, r, c % kPanel)] = Value(src[r * cols + c]);
  }
}

// Rows [0, rows) of a row-major [rows][4H] source in the contract's column order (4j + g) as gate panels.
template <typename S>
void PackGates(float* dst, const S* src, int64_t rows, int64_t H) {
  for (int64_t j = 0; j < H; ++j) {
    float* panel = dst + (j / kUnits) * rows * kPanel;
    for (int g = 0; g < kGates; ++g) {
      const int64_t col = kGates * j + g, pc = g * kUnits + j % kUnits;
      for (int64_t r = 0; r < rows; ++r) panel[PanelIndex(rows, r, pc)] = Value(src[r * kGates * H + col]);
    }
  }
}

template <typename S>
void Pack(FloatPacked& pk, const Dims& d, const Ranks& ranks, const S* w, const S* b, const S* p, const S* f) {
  pk.Set(d, kUnits);
  const int64_t H = d.H, np = pk.np, D = d.D, L = d.L;
  const WeightLayout layout(d, ranks);
  size_t nx = 0, nh = 0, nf = 0;
  pk.wx_off.assign(L * D, 0);
  pk.wh_off.assign(L * D, 0);
  pk.bias_off.assign(L, 0);
  pk.peep_off.assign(L * D, 0);
  pk.fx.assign(L * D, FactorPart{});
  pk.fh.assign(L * D, FactorPart{});
  auto place = [&](FactorPart& part, int64_t rank, int64_t rows) {
    part.rank = rank;
    if (!rank) return;
    part.panels = (rank + kPanel - 1) / kPanel;
    part.a_off = nf;
    nf += part.panels * rows * kPanel;
    part.b_off = nf;
    nf += np * rank * kPanel;
  };
  for (int64_t l = 0; l < L; ++l) {
    pk.bias_off[l] = l * D * np * kPanel;
    for (int64_t dir = 0; dir < D; ++dir) {
      const int64_t k = l * D + dir;
      pk.wx_off[k] = nx;
      pk.wh_off[k] = nh;
      if (!ranks.Input(k)) nx += np * d.LayerInput(l) * kPanel;
      if (!ranks.Recurrent(k)) nh += np * H * kPanel;
      place(pk.fx[k], ranks.Input(k), d.LayerInput(l));
      place(pk.fh[k], ranks.Recurrent(k), H);
      pk.peep_off[k] = k * 3 * pk.Hp;
    }
  }
  float* wx = pk.wx.Reserve(nx);
  float* wh = pk.wh.Reserve(nh);
  float* fac = pk.fac.Reserve(nf);
  float* bias = pk.bias.Reserve(L * D * np * kPanel);
  std::memset(wx, 0, nx * sizeof(float));
  std::memset(wh, 0, nh * sizeof(float));
  std::memset(fac, 0, nf * sizeof(float));
  std::memset(bias, 0, L * D * np * kPanel * sizeof(float));
  pk.has_peep = p != nullptr;
  float* peep = pk.has_peep ? pk.peep.Reserve(L * D * 3 * pk.Hp) : nullptr;
  if (peep) std::memset(peep, 0, L * D * 3 * pk.Hp * sizeof(float));
  for (int64_t l = 0; l < L; ++l) {
    const int64_t I = d.LayerInput(l);
    for (int64_t dir = 0; dir < D; ++dir) {
      const int64_t k = l * D + dir;
      const S* src = w + layout.WeightOffset(l, dir);  // [rows][4H], column 4j + g: input rows, then recurrent rows
      if (!ranks.Input(k)) PackGates(wx + pk.wx_off[k], src, I, H);
      if (!ranks.Recurrent(k)) PackGates(wh + pk.wh_off[k], src + layout.InputRows(l, dir) * kGates * H, H, H);
      for (const auto& [part, rows, at] : {std::make_tuple(&pk.fx[k], I, layout.InputFactorOffset(l, dir)),
                                           std::make_tuple(&pk.fh[k], H, layout.RecurrentFactorOffset(l, dir))}) {
        if (!part->rank) continue;
        PackColumns(fac + part->a_off, f + at, rows, part->rank);                  // A [rows][rank]
        PackGates(fac + part->b_off, f + at + rows * part->rank, part->rank, H);  // B [rank][4H]
      }
      for (int64_t j = 0; j < H; ++j) {
        const int64_t panel = j / kUnits, u = j % kUnits;
        for (int g = 0; g < kGates; ++g)
          if (b) bias[pk.bias_off[l] + (dir * np + panel) * kPanel + g * kUnits + u] = Value(b[k * kGates * H + kGates * j + g]);
        if (peep)
          for (int g = 0; g < 3; ++g) peep[pk.peep_off[k] + g * pk.Hp + j] = Value(p[k * 3 * H + g * H + j]);
      }
    }
  }
}

}  // namespace

bool FloatPacked::InputFactored(int64_t l) const {
  for (int64_t dir = 0; dir < D; ++dir)
    if (fx[l * D + dir].rank) return true;
  return false;
}

void PackFloat(FloatPacked& pk, const Dims& d, const Ranks& ranks, const void* w, const void* b, const void* p,
               const void* f, bool fp16) {
  if (fp16) {
    using H = Ort::Float16_t;
    Pack(pk, d, ranks, static_cast<const H*>(w), static_cast<const H*>(b), static_cast<const H*>(p),
         static_cast<const H*>(f));
  } else {
    Pack(pk, d, ranks, static_cast<const float*>(w), static_cast<const float*>(b), static_cast<const float*>(p),
         static_cast<const float*>(f));
  }
}

FloatFormat::FloatFormat(const FloatPacked& pk, const Dims& d) : pk_(pk) {
  for (int64_t k = 0; k < d.L * d.D; ++k) {
    widest_x_ = std::max(widest_x_, pk.fx[k].Padded());
    widest_h_ = std::max(widest_h_, pk.fh[k].Padded());
    widest_in_ = std::max(widest_in_, d.LayerInput(k / d.D));
  }
}

// The format's scratch: factored parts' products, the input's with A ([steps*B][rank],
// one direction at a time) and each direction's h times A ([B][rank]), their ranks padded to whole
// panels; then per step task (slot) the batch's input rows of a step that multiplies its input and
// gathers them (AtStepInput).
struct FloatFormat::Layout {
  size_t px = 0, ph = 0, rows = 0, total = 0;
};

FloatFormat::Layout FloatFormat::LayoutOf(const Dims& d, int64_t steps, int64_t slots) const {
  Carver carve;
  Layout o;
  o.px = carve(sizeof(float) * steps * d.B * widest_x_);
  o.ph = carve(sizeof(float) * d.D * d.B * widest_h_);
  o.rows = carve(sizeof(float) * slots * d.B * widest_in_);
  o.total = carve.total;
  return o;
}

size_t FloatFormat::ScratchBytes(const Dims& d, int64_t steps, int64_t slots) const {
  return LayoutOf(d, steps, slots).total;
}

void FloatFormat::Project(const LayerRun& r) const {
  const FloatPacked& pk = pk_;
  const Dims& d = *r.d;
  const int64_t l = r.l, D = d.D, np = pk.np, Gp = np * kPanel, I = r.I, M = r.M;
  const KernelTable& K = *r.kernels;
  const float* layer_bias = pk.bias.data() + pk.bias_off[l];
  const std::vector<ProjectSplit>& products = r.lp->projection;
  auto product = [&](const ProjectSplit& sp, const ProjectArgs& pa, int64_t Q) {
    RunProduct(r.ctx, sp, M, Q, [&](int64_t r0, int64_t r1, int64_t q0, int64_t q1) { K.project(pa, r0, r1, q0, q1); });
  };
  if (!pk.InputFactored(l)) {
    product(products[0], {r.in, I, pk.wx.data() + pk.wx_off[l * D], I, layer_bias, r.gx, r.gx_ld, D * np}, D * np);
    return;
  }
  size_t next = 0;
  float* px = At<float>(r.scratch, LayoutOf(d, r.steps, r.slots).px);
  for (int64_t dir = 0; dir < D; ++dir) {
    const FactorPart& f = pk.fx[l * D + dir];
    const float* bias = layer_bias + dir * np * kPanel;
    if (!f.rank) {
      product(products[next++], {r.in, I, pk.wx.data() + pk.wx_off[l * D + dir], I, bias, r.gx + dir * Gp, r.gx_ld, np},
              np);
      continue;
    }
    product(products[next++], {r.in, I, pk.fac.data() + f.a_off, I, nullptr, px, f.Padded(), f.panels}, f.panels);
    product(products[next++], {px, f.Padded(), pk.fac.data() + f.b_off, f.rank, bias, r.gx + dir * Gp, r.gx_ld, np}, np);
  }
}

void FloatFormat::Prepare(StepArgs& a, const LayerRun& r, int64_t k) const {
  const FloatPacked& pk = pk_;
  a.w = pk.wh.data() + pk.wh_off[k];
  a.peep = pk.has_peep ? pk.peep.data() + pk.peep_off[k] : nullptr;
  if (r.lp->step_projects) {  // the steps multiply the (whole, never factored) input themselves: AtStepInput
    a.x = r.in;
    a.x_ld = r.I;
    a.wx = pk.wx.data() + pk.wx_off[k];
    a.Kx = r.I;
    a.x_bias = pk.bias.data() + pk.bias_off[r.l] + (k % r.d->D) * pk.np * kPanel;
  }
  const FactorPart& f = pk.fh[k];
  if (!f.rank) return;
  const Dims& d = *r.d;
  float* ph = At<float>(r.scratch, LayoutOf(d, r.steps, r.slots).ph);
  a.w = pk.fac.data() + f.b_off;
  a.lhs = ph + (k % d.D) * d.B * widest_h_ + a.b0 * f.Padded();  // each direction its own [B][widest]
  a.lhs_ld = f.Padded();
  a.K = f.rank;
}

// A step that multiplies its rows' input (LayerPlan::step_projects) reads row r of its group at
// x + (b0 + r) * x_ld: the layer's time-major input rows at the step's time t where every row is
// at one t (forward, or reversed sequences all T long), else (reversed sequences of their own
// lengths) each row at its own t, gathered into the slot's rows of the batch.
StepArgs FloatFormat::AtStepInput(const StepArgs& a, const LayerRun& r, int64_t slot) const {
  StepArgs at = a;
  const int64_t B = r.d->B, I = r.I;
  at.x_ld = I;
  if (!a.reverse || !a.lens) {
    at.x = r.in + TimeAt(a, a.T) * B * I;
    return at;
  }
  float* rows = At<float>(r.scratch, LayoutOf(*r.d, r.steps, r.slots).rows) + slot * B * widest_in_;
  for (int64_t b = a.b0; b < a.b0 + a.rows; ++b) {
    const int64_t len = a.lens[b];
    if (a.s < len)
      std::memcpy(rows + b * I, r.in + (TimeAt(a, len) * B + b) * I, sizeof(float) * I);
    else
      std::memset(rows + b * I, 0, sizeof(float) * I);  // ended: the step keeps its state, its product unused
  }
  at.x = rows;
  return at;
}

void FloatFormat::Step(const StepArgs& a, const LayerRun& r, int64_t k, int phase, int64_t q0, int64_t q1,
                       int64_t slot) const {
  if (phase == 1 || !pk_.fh[k].rank) {
    r.kernels->step(a.wx ? AtStepInput(a, r, slot) : a, q0, q1);
    return;
  }
  // Phase 0 of a factored step: lhs = h x A for the group's rows, panels [q0, q1) of A.
  if (a.h_zero) return;  // h is zero, and so is h A: the step skips the product
  const FactorPart& f = pk_.fh[k];
  const ProjectArgs pa{a.h_in, a.Hp, pk_.fac.data() + f.a_off, a.H, nullptr, const_cast<float*>(a.lhs), a.lhs_ld,
                       f.panels};
  r.kernels->project(pa, 0, a.rows, q0, q1);
}

}  // namespace lstm_ort::cpu
