#include "cpu/bf16/bf16_format.h"

#include <algorithm>
#include <cstring>

#include "ort_api.h"

namespace lstm_ort::cpu {
namespace {

inline float Value(const void* src, int64_t i, bool fp16) {
  return fp16 ? static_cast<const Ort::Float16_t*>(src)[i].ToFloat() : static_cast<const float*>(src)[i];
}

}  // namespace

void PackBf16(Bf16Packed& pk, const bf16::Table& t, const Dims& d, const void* w, const void* b, const void* p,
              bool fp16) {
  pk.Set(d, kUnits);
  const int64_t H = d.H, LD = d.L * d.D, cols = pk.Cols();
  pk.depth_h = bf16::PaddedDepth(t, H);
  pk.depth_x.assign(d.L, 0);
  pk.w_off.assign(LD, 0);
  size_t n = 0;
  for (int64_t k = 0; k < LD; ++k) {
    pk.depth_x[k / d.D] = bf16::PaddedDepth(t, d.LayerInput(k / d.D));
    pk.w_off[k] = n;
    n += pk.np * (bf16::PanelElements(t, d.LayerInput(k / d.D)) + bf16::PanelElements(t, H));
  }
  uint16_t* packed = pk.w.Reserve(std::max<size_t>(n, 1));
  pk.bias.assign(LD * cols, 0.f);
  pk.has_peep = p != nullptr;
  pk.peep.assign(pk.has_peep ? LD * 3 * pk.Hp : 0, 0.f);
  const size_t elem = fp16 ? 2 : 4;
  std::vector<uint16_t> wx, wh;  // one direction's W and R as the table packs them, then strip by strip
  for (int64_t k = 0; k < LD; ++k) {
    const int64_t l = k / d.D, I = d.LayerInput(l), dx = pk.depth_x[l];
    const char* block = static_cast<const char*>(w) + elem * d.WeightOffset(l, k % d.D);  // input rows, then recurrent
    wx.resize(pk.np * bf16::PanelElements(t, I));
    wh.resize(pk.np * bf16::PanelElements(t, H));
    t.pack(block, I, H, fp16, wx.data());
    t.pack(block + elem * I * kGates * H, H, H, fp16, wh.data());
    uint16_t* dst = packed + pk.w_off[k];
    for (int64_t strip = 0; strip < 2 * pk.np; ++strip) {
      dst = std::copy_n(wx.data() + strip * dx * kStrip, dx * kStrip, dst);
      dst = std::copy_n(wh.data() + strip * pk.depth_h * kStrip, pk.depth_h * kStrip, dst);
    }
    for (int64_t col = 0; b && col < kGates * H; ++col)
      pk.bias[k * cols + PackedColumn(col)] = Value(b, k * kGates * H + col, fp16);
    for (int g = 0; p && g < 3; ++g)
      for (int64_t j = 0; j < H; ++j) pk.peep[(k * 3 + g) * pk.Hp + j] = Value(p, k * 3 * H + g * H + j, fp16);
  }
}

Bf16Format::Bf16Format(const Bf16Packed& pk, const bf16::Table& t, const CpuCallPlan& plan)
    : pk_(pk), t_(t), projects_apart_(std::any_of(plan.layers.begin(), plan.layers.end(), [](const LayerPlan& lp) {
        return !lp.step_projects;
      })) {}

// The format's scratch: the layer input in bf16 (where a projection multiplies it); per step task
// (slot), its rows' input and h in bf16 side by side, and the gate rows they feed.
struct Bf16Format::Layout {
  int64_t depth_x = 0, rows_x = 0, row_h = 0, rows_h = 0;  // rows: per buffer, padded (PaddedRows)
  size_t ax = 0, ah = 0, out_rows = 0, prod = 0, prod_rows = 0;
  size_t total = 0;
};

Bf16Format::Layout Bf16Format::LayoutOf(const Dims& d, int64_t steps, int64_t slots) const {
  Layout o;
  for (int64_t l = 0; l < d.L; ++l) o.depth_x = std::max(o.depth_x, pk_.depth_x[l]);
  o.row_h = o.depth_x + pk_.depth_h;
  o.rows_x = projects_apart_ ? bf16::PaddedRows(t_, steps * d.B) : 0;
  o.rows_h = bf16::PaddedRows(t_, d.B);
  Carver carve;
  o.ax = carve(sizeof(uint16_t) * o.rows_x * o.depth_x);
  o.ah = carve(sizeof(uint16_t) * slots * o.rows_h * o.row_h);
  o.out_rows = carve(sizeof(float*) * slots * d.B);
  o.prod = carve(sizeof(float) * slots * d.B * pk_.Cols());
  o.prod_rows = carve(sizeof(float*) * slots * d.B);
  o.total = carve.total;
  return o;
}

size_t Bf16Format::ScratchBytes(const Dims& d, int64_t steps, int64_t slots) const {
  return LayoutOf(d, steps, slots).total;
}

void Bf16Format::Project(const LayerRun& r) const {
  const Dims& d = *r.d;
  const Layout o = LayoutOf(d, r.steps, r.slots);
  const int64_t l = r.l, D = d.D, I = r.I, M = r.M, dx = pk_.depth_x[l];
  uint16_t* ax = At<uint16_t>(r.scratch, o.ax);
  for (int64_t i = 0; i < M; ++i) t_.convert(r.in + i * I, I, dx, ax + i * dx);
  const size_t cols = static_cast<size_t>(pk_.Cols());
  const bf16::GemmArgs pa{ax, dx, pk_.w.data() + pk_.w_off[l * D], dx, dx + pk_.depth_h, &pk_.bias[l * D * cols], false,
                          r.gx, r.gx_ld, nullptr, D * pk_.np};
  RunProduct(r.ctx, r.lp->projection[0], M, D * pk_.np,
             [&](int64_t r0, int64_t r1, int64_t q0, int64_t q1) { t_.gemm(pa, r0, r1, q0, q1); });
}

void Bf16Format::Prepare(StepArgs& a, const LayerRun&, int64_t k) const {
  a.peep = pk_.has_peep ? pk_.peep.data() + k * 3 * pk_.Hp : nullptr;
}

// Step s of a group for panels [q0, q1): the running rows' h in bf16 (after their input, where the
// step multiplies it: LayerPlan::step_projects), its product into their gates, then the cell.
void Bf16Format::Step(const StepArgs& a, const LayerRun& r, int64_t k, int, int64_t q0, int64_t q1,
                      int64_t slot) const {
  const Dims& d = *r.d;
  const int64_t B = d.B, s = a.s;
  const Layout o = LayoutOf(d, r.steps, r.slots);
  const bool projects = r.lp->step_projects;
  const int64_t dx = pk_.depth_x[r.l], x_part = projects ? dx : 0, lda = x_part + pk_.depth_h;
  // The step's product, per row of the group (its row of `prod`, or null where it adds nothing).
  float* prod = At<float>(r.scratch, o.prod) + slot * B * pk_.Cols();
  const float** products = At<const float*>(r.scratch, o.prod_rows) + slot * B;
  float** out_rows = At<float*>(r.scratch, o.out_rows) + slot * B;
  uint16_t* rows = At<uint16_t>(r.scratch, o.ah) + slot * o.rows_h * o.row_h;
  int64_t live = 0;
  for (int64_t i = 0; i < a.rows; ++i) {
    const int64_t b = a.b0 + i, len = LengthOf(a, b);
    products[i] = nullptr;
    if (s >= len || (a.h_zero && !projects)) continue;  // a zero h (first step, no initial_h) adds nothing
    uint16_t* row = rows + live * lda;
    if (projects) t_.convert(r.in + (TimeAt(a, len) * B + b) * r.I, r.I, dx, row);
    if (!a.h_zero) t_.convert(a.h_in + i * a.Hp, a.H, pk_.depth_h, row + x_part);
    products[i] = out_rows[live++] = prod + i * pk_.Cols();
  }
  if (live > 0) {
    // A zero h: the input's rows of the panels alone.
    const int64_t depth = a.h_zero ? x_part : lda;
    const uint16_t* w = pk_.w.data() + pk_.w_off[k] + (projects ? 0 : dx * kStrip);
    const bf16::GemmArgs ra{rows, lda, w, depth, dx + pk_.depth_h, projects ? &pk_.bias[k * pk_.Cols()] : nullptr,
                            false, nullptr, 0, out_rows, pk_.np};
    t_.gemm(ra, 0, live, q0, q1);
  }
  if (!projects) return CellFromGates(a, q0, q1, products);  // the projection's gates plus the product
  StepArgs from_products = a;
  from_products.gx = nullptr;  // the product is the gates
  CellFromGates(from_products, q0, q1, products);
}

}  // namespace lstm_ort::cpu
