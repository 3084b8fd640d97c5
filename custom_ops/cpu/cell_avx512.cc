// The cell from a step's complete gates on 16 lanes (AVX-512), for the formats whose product
// writes the gates first (int8, bf16: cpu/stack_run.h) and then run the cell alone (the gates: the
// projection's plus the step's product, or the product alone where StepArgs::gx is null): two panels' units
// at a time, the same arithmetic as the 8-lane cell of kernels_impl.inc for the default activations
// (Sigmoid, Tanh, Tanh; peepholes, clip and input_forget included). Compiled with AVX-512 flags, chosen
// at run time (CellFromGates, kernels_dispatch.cc); other activations run the 8-lane kernel's cell.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "cpu/kernels.h"

namespace lstm_ort::cpu::avx512 {
namespace {

typedef float v16 __attribute__((vector_size(64)));
typedef float v16u __attribute__((vector_size(64), aligned(4)));

inline v16 Splat(float x) { return v16{x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x}; }
inline v16 Min(v16 a, v16 b) { return b < a ? b : a; }
inline v16 Max(v16 a, v16 b) { return b > a ? b : a; }
// 1 / d: the 14-bit estimate and one Newton step.
inline v16 Recip(v16 d) {
  const v16 r = (v16)_mm512_rcp14_ps((__m512)d);
  return r * (2.f - d * r);
}

#define LSTM_ORT_ACT_VEC v16
#include "cpu/activation_math.inc"
#undef LSTM_ORT_ACT_VEC

// 16 lanes from the 8 at p and the 8 at p + kPanel (one gate of two panels), or the first 8 alone;
// plus the same of `add` where given.
inline v16 Gate2(const float* p, const float* add, bool two) {
  __m256 lo = _mm256_loadu_ps(p);
  __m256 hi = two ? _mm256_loadu_ps(p + kPanel) : _mm256_setzero_ps();
  if (add) {
    lo = _mm256_add_ps(lo, _mm256_loadu_ps(add));
    if (two) hi = _mm256_add_ps(hi, _mm256_loadu_ps(add + kPanel));
  }
  return (v16)_mm512_insertf32x8(_mm512_castps256_ps512(lo), hi, 1);
}
inline v16 Load(const float* p, __mmask16 m) { return (v16)_mm512_maskz_loadu_ps(m, p); }
inline void Store(float* p, v16 v, __mmask16 m) { _mm512_mask_storeu_ps(p, m, (__m512)v); }

// Units [u0, u0 + 16) (`m` masks those that exist in the row's storage) of one active row.
inline void Cell16(const StepArgs& a, const float* gx, const float* product, float* c, float* h, float* y,
                   int64_t u0, int64_t p, bool two, __mmask16 m, __mmask16 y_mask) {
  const CellParams& cp = a.cell;
  const float* g = gx ? gx + p * kPanel : product + p * kPanel;  // no gx: the product is the gates
  const float* x = gx && product ? product + p * kPanel : nullptr;
  auto gate = [g, x, two](int which) { return Gate2(g + which * kUnits, x ? x + which * kUnits : nullptr, two); };
  v16 gi = gate(kGateI), go = gate(kGateO), gf = gate(kGateF), gc = gate(kGateC);
  const v16 c_prev = Load(c + u0, m);
  if (a.peep) {
    gi += Load(a.peep + u0, m) * c_prev;
    gf += Load(a.peep + 2 * a.Hp + u0, m) * c_prev;
  }
  if (cp.has_clip) {
    const v16 lo = Splat(-cp.clip), hi = Splat(cp.clip);
    gi = Min(Max(gi, lo), hi);
    gf = Min(Max(gf, lo), hi);
    gc = Min(Max(gc, lo), hi);
  }
  const v16 ig = Sigmoid(gi);
  const v16 fg = cp.input_forget ? 1.f - ig : Sigmoid(gf);
  const v16 cn = fg * c_prev + ig * Tanh(gc);
  if (a.peep) go += Load(a.peep + a.Hp + u0, m) * cn;
  if (cp.has_clip) go = Min(Max(go, Splat(-cp.clip)), Splat(cp.clip));
  const v16 hn = Sigmoid(go) * Tanh(cn);
  Store(c + u0, cn, m);
  Store(h + u0, hn, m);
  if (y) Store(y + u0, hn, y_mask);
}

}  // namespace

void CellFromGates(const StepArgs& a, int64_t p0, int64_t p1, const float* const* products) {
  for (int64_t r = 0; r < a.rows; ++r) {
    const int64_t b = a.b0 + r;
    const int64_t len = LengthOf(a, b);
    const float* h_in = a.h_in + r * a.Hp;
    float* h_out = a.h_out + r * a.Hp;
    if (a.s >= len) {  // the sequence ended: keep the state
      std::memcpy(h_out + p0 * kUnits, h_in + p0 * kUnits, sizeof(float) * (p1 - p0) * kUnits);
      continue;
    }
    const int64_t t = TimeAt(a, len);
    const float* gx = a.gx ? a.gx + (t * a.B + b) * a.gx_ld : nullptr;
    float* y = a.y ? a.y + (t * a.B + b) * a.y_ld : nullptr;
    float* c = a.c + r * a.Hp;
    for (int64_t p = p0; p < p1; p += 2) {
      const bool two = p + 1 < p1;
      const int64_t u0 = p * kUnits, units = two ? 2 * kUnits : kUnits;
      const __mmask16 m = static_cast<__mmask16>((1u << units) - 1);
      const int64_t real = std::max<int64_t>(0, std::min<int64_t>(units, a.H - u0));  // y holds H units
      Cell16(a, gx, products ? products[r] : nullptr, c, h_out, y, u0, p, two, m,
             static_cast<__mmask16>((1u << real) - 1));
    }
  }
}

}  // namespace lstm_ort::cpu::avx512
