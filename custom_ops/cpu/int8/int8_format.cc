#include "cpu/int8/int8_format.h"

#include <algorithm>
#include <cstring>

namespace lstm_ort::cpu {
namespace {

namespace q8 = cpu::int8;

void PackPart(const q8::Table& t, const int8_t* src, int64_t K, int64_t H, const float* scale, int8_t* dst,
              float* scales, int32_t* sums) {
  t.pack(src, K, H, dst);
  for (int64_t col = 0; col < kGates * H; ++col) {
    int32_t s = 0;
    for (int64_t k = 0; k < K; ++k) s += src[k * kGates * H + col];
    sums[PackedColumn(col)] = s;
    scales[PackedColumn(col)] = scale[col];
  }
}

// Rows of floats quantized into activation rows of `depth` elements (the padding zero).
struct ActRows {
  void* data;
  int64_t depth;
  int64_t bytes;  // per element
  uint8_t* Row(int64_t r) const { return static_cast<uint8_t*>(data) + r * depth * bytes; }
};

void QuantizeRow(const q8::Table& t, const float* row, int64_t K, q8::QuantParams p, const ActRows& out, int64_t r) {
  uint8_t* dst = out.Row(r);
  t.quantize(row, K, p, dst);
  std::memset(dst + K * out.bytes, 0, (out.depth - K) * out.bytes);
}

// Widens [lo, hi] to hold the finite values among the first K of a row.
void WidenRow(const q8::Table& t, const float* row, int64_t K, float* lo, float* hi) {
  float l, h;
  t.min_max(row, K, &l, &h);
  *lo = std::min(*lo, l);
  *hi = std::max(*hi, h);
}

// The same over each of n rows.
void Widen(const q8::Table& t, const float* const* rows, int64_t n, int64_t K, float* lo, float* hi) {
  for (int64_t r = 0; r < n; ++r) WidenRow(t, rows[r], K, lo, hi);
}

// Floats per slot in the row chunks' ranges: one 64-byte line.
constexpr int64_t kRangeLine = 16;

// Rows quantized each with its own scale and zero point, written to scale[r] and zero_point[r].
void QuantizeEachRow(const q8::Table& t, const float* const* rows, int64_t n, int64_t K, const ActRows& out,
                     float* scale, int32_t* zero_point) {
  for (int64_t r = 0; r < n; ++r) {
    float lo, hi;
    t.min_max(rows[r], K, &lo, &hi);
    const q8::QuantParams p = q8::QuantParamsFor(lo, hi);
    scale[r] = p.scale;
    zero_point[r] = p.zero_point;
    QuantizeRow(t, rows[r], K, p, out, r);
  }
}

}  // namespace

void PackInt8(Int8Packed& pk, const q8::Table& t, const Dims& d, const int8_t* w, const float* s, const float* b,
              const float* p) {
  pk.Set(d, kUnits);
  const int64_t H = d.H, LD = d.L * d.D, cols = pk.Cols();
  pk.wx_off.assign(LD, 0);
  pk.wh_off.assign(LD, 0);
  size_t nx = 0, nh = 0;
  for (int64_t k = 0; k < LD; ++k) {
    pk.wx_off[k] = nx;
    pk.wh_off[k] = nh;
    nx += pk.np * t.panel_bytes(d.LayerInput(k / d.D));
    nh += pk.np * t.panel_bytes(H);
  }
  int8_t* wx = pk.wx.Reserve(nx);
  int8_t* wh = pk.wh.Reserve(nh);
  for (auto* v : {&pk.sx, &pk.sh, &pk.bias}) v->assign(LD * cols, 0.f);
  for (auto* v : {&pk.cx, &pk.ch}) v->assign(LD * cols, 0);
  pk.has_peep = p != nullptr;
  pk.peep.assign(pk.has_peep ? LD * 3 * pk.Hp : 0, 0.f);
  for (int64_t k = 0; k < LD; ++k) {
    const int64_t l = k / d.D, I = d.LayerInput(l);
    const int8_t* block = w + d.WeightOffset(l, k % d.D);  // [I + H][4H]: input rows, then recurrent rows
    const float* scale = s + k * 2 * kGates * H;            // input rows' [4H], then recurrent rows'
    PackPart(t, block, I, H, scale, wx + pk.wx_off[k], &pk.sx[k * cols], &pk.cx[k * cols]);
    PackPart(t, block + I * kGates * H, H, H, scale + kGates * H, wh + pk.wh_off[k], &pk.sh[k * cols], &pk.ch[k * cols]);
    for (int64_t col = 0; col < kGates * H; ++col)
      if (b) pk.bias[k * cols + PackedColumn(col)] = b[k * kGates * H + col];
    for (int g = 0; p && g < 3; ++g)
      for (int64_t j = 0; j < H; ++j) pk.peep[(k * 3 + g) * pk.Hp + j] = p[k * 3 * H + g * H + j];
  }
  pk.w_src = w;
  pk.s_src = s;
  pk.b_src = b;
  pk.p_src = p;
}

// The format's scratch: the layer input's levels (and per-row parameters) and rows; per step task
// (slot), h's levels, its rows, the products' rows (and pointers to them, per row of the group)
// and per-row parameters.
struct Int8Format::Layout {
  int64_t depth_x = 0, depth_h = 0, abytes = 1, rows_h = 0;  // rows_h: a slot's h rows, padded
  size_t ax = 0, x_scale = 0, x_zp = 0, x_rows = 0;
  size_t ah = 0, h_rows = 0, out_rows = 0, h_scale = 0, h_zp = 0, prod = 0, prod_rows = 0;  // slot 0's: each slot is B rows on
  // Per slot, a line of its rows' range of h for the next step, by the step's parity: lo, hi (row chunks).
  size_t ranges = 0;
  size_t total = 0;
};

Int8Format::Layout Int8Format::LayoutOf(const Dims& d, int64_t steps, int64_t slots) const {
  Layout o;
  o.abytes = q8::ActivationBytes(q_);
  o.depth_h = q8::PaddedDepth(q_, d.H);
  for (int64_t l = 0; l < d.L; ++l) o.depth_x = std::max(o.depth_x, q8::PaddedDepth(q_, d.LayerInput(l)));
  const size_t M = static_cast<size_t>(steps * d.B), S = static_cast<size_t>(slots * d.B);
  Carver carve;
  o.rows_h = q8::PaddedRows(q_, d.B);
  o.ax = carve(q8::PaddedRows(q_, M) * o.depth_x * o.abytes);
  o.x_scale = carve(M * sizeof(float));
  o.x_zp = carve(M * sizeof(int32_t));
  o.x_rows = carve(M * sizeof(float*));
  o.ah = carve(slots * o.rows_h * o.depth_h * o.abytes);
  o.h_rows = carve(S * sizeof(float*));
  o.out_rows = carve(S * sizeof(float*));
  o.h_scale = carve(S * sizeof(float));
  o.h_zp = carve(S * sizeof(int32_t));
  o.prod = carve(S * pk_.Cols() * sizeof(float));
  o.prod_rows = carve(S * sizeof(float*));
  o.ranges = carve(slots * 64);
  o.total = carve.total;
  return o;
}

size_t Int8Format::ScratchBytes(const Dims& d, int64_t steps, int64_t slots) const {
  return LayoutOf(d, steps, slots).total;
}

// The layer's input for the steps run, quantized (X as given, padding past a sequence's end
// included, as onnxruntime quantizes it; a lower layer's output, zero there), then its product
// with the input weights, every step and both directions: [M] x [D * np panels].
void Int8Format::Project(const LayerRun& r) const {
  const Dims& d = *r.d;
  const Layout o = LayoutOf(d, r.steps, r.slots);
  const int64_t l = r.l, D = d.D, I = r.I, M = r.M, dx = q8::PaddedDepth(q_, I);
  const ActRows ax{r.scratch + o.ax, dx, o.abytes};
  const float** rows = At<const float*>(r.scratch, o.x_rows);
  for (int64_t i = 0; i < M; ++i) rows[i] = r.in + i * I;
  q8::QuantParams xp{1.f, 0};
  const float* row_scale = nullptr;
  const int32_t* row_zp = nullptr;
  if (scales_ == Int8Scales::kRow) {
    float* scale = At<float>(r.scratch, o.x_scale);
    int32_t* zp = At<int32_t>(r.scratch, o.x_zp);
    QuantizeEachRow(q_, rows, M, I, ax, scale, zp);
    row_scale = scale;
    row_zp = zp;
  } else {
    float lo, hi;
    q_.min_max(r.in, M * I, &lo, &hi);
    xp = q8::QuantParamsFor(lo, hi);
    for (int64_t i = 0; i < M; ++i) QuantizeRow(q_, rows[i], I, xp, ax, i);
  }
  const size_t cols = static_cast<size_t>(pk_.Cols());
  q8::GemmArgs pa{ax.data, dx, pk_.wx.data() + pk_.wx_off[l * D], dx, &pk_.cx[l * D * cols], xp.zero_point, xp.scale,
                  &pk_.sx[l * D * cols], &pk_.bias[l * D * cols], false, r.gx, r.gx_ld, nullptr, D * pk_.np};
  pa.row_scale = row_scale;
  pa.row_zero_point = row_zp;
  const int64_t Q = D * pk_.np;
  RunProduct(r.ctx, r.lp->projection[0], M, Q,
             [&](int64_t r0, int64_t r1, int64_t q0, int64_t q1) { q_.gemm(pa, r0, r1, q0, q1); });
}

void Int8Format::Prepare(StepArgs& a, const LayerRun&, int64_t k) const {
  a.peep = pk_.has_peep ? pk_.peep.data() + k * 3 * pk_.Hp : nullptr;
}

// Step s of a group for panels [q0, q1): h quantized (with one scale over the rows that ran step
// s - 1: every row at s = 0; as onnxruntime, whose h of a row that ended is its last h for one
// step, then zero; or each row with its own), its product for the rows still running, then the
// cell from the projection's gates and the product. Where the group's rows split over threads
// (a.row_chunks > 1: a is one chunk's rows, every panel), the one scale's range is the chunks'
// ranges of their rows, each left by its chunk's step s - 1 in its slot's line (the runner's
// meeting between steps publishes them); at s = 0 each chunk reads every row of the batch.
void Int8Format::Step(const StepArgs& a, const LayerRun& r, int64_t k, int, int64_t q0, int64_t q1,
                      int64_t slot) const {
  const Dims& d = *r.d;
  const Layout o = LayoutOf(d, r.steps, r.slots);
  const int64_t B = d.B, H = d.H, Hp = a.Hp, s = a.s;
  float** out_rows = At<float*>(r.scratch, o.out_rows) + slot * B;
  const float** h_rows = At<const float*>(r.scratch, o.h_rows) + slot * B;
  // The step's product, per row of the group (its row of `prod`, or null where it adds nothing).
  float* prod = At<float>(r.scratch, o.prod) + slot * B * pk_.Cols();
  const float** products = At<const float*>(r.scratch, o.prod_rows) + slot * B;
  int64_t live = 0, ranged = 0;
  for (int64_t i = 0; i < a.rows; ++i) {
    const int64_t b = a.b0 + i, len = LengthOf(a, b);
    products[i] = nullptr;
    if (s > len) continue;
    const float* row = a.h_in + i * Hp;
    if (s == len) {  // ended with the last step: in the range only, after the running rows
      h_rows[a.rows - 1 - ranged++] = row;
      continue;
    }
    h_rows[live] = row;
    if (!a.h_zero) products[i] = out_rows[live] = prod + i * pk_.Cols();
    ++live;
  }
  // The next step's gates were written by the projection, long out of cache: fetched toward L2
  // now, the product and the cell of this step hide the wait (where that pays: Table).
  for (int64_t i = 0; i < a.rows && s + 1 < r.steps && q_.prefetch_next_gates; ++i) {
    const int64_t b = a.b0 + i, len = LengthOf(a, b);
    if (s + 1 >= len) continue;
    const int64_t t = a.reverse ? len - 2 - s : s + 1;
    const char* row = reinterpret_cast<const char*>(a.gx + (t * B + b) * a.gx_ld + q0 * kPanel);
    for (int64_t at = 0; at < (q1 - q0) * kPanel * int64_t(sizeof(float)); at += 64) __builtin_prefetch(row + at, 1, 2);
  }
  if (live > 0 && !a.h_zero) {  // a zero h (first step, no initial_h) adds nothing
    const ActRows ah{r.scratch + o.ah + slot * o.rows_h * o.depth_h * o.abytes, o.depth_h, o.abytes};
    const size_t cols = static_cast<size_t>(pk_.Cols());
    q8::GemmArgs ra{ah.data, o.depth_h, pk_.wh.data() + pk_.wh_off[k], o.depth_h, &pk_.ch[k * cols], 0, 1.f,
                    &pk_.sh[k * cols], nullptr, false, nullptr, 0, out_rows, pk_.np};
    if (scales_ == Int8Scales::kRow) {
      float* scale = At<float>(r.scratch, o.h_scale) + slot * B;
      int32_t* zp = At<int32_t>(r.scratch, o.h_zp) + slot * B;
      QuantizeEachRow(q_, h_rows, live, H, ah, scale, zp);
      ra.row_scale = scale;
      ra.row_zero_point = zp;
    } else {
      float lo = 0.f, hi = 0.f;
      if (a.row_chunks == 1) {
        Widen(q_, h_rows, live, H, &lo, &hi);
        Widen(q_, h_rows + a.rows - ranged, ranged, H, &lo, &hi);
      } else if (s > 0) {  // the chunks' ranges of their rows, left by their step s - 1
        const float* ranges = At<float>(r.scratch, o.ranges) + (slot - a.row_chunk) * kRangeLine + s % 2 * 2;
        for (int64_t c = 0; c < a.row_chunks; ++c, ranges += kRangeLine) {
          lo = std::min(lo, ranges[0]);
          hi = std::max(hi, ranges[1]);
        }
      } else {  // the first step: every row of the batch (the group), each chunk alone
        const float* batch = a.h_in - a.b0 * Hp;
        for (int64_t b = 0; b < B; ++b) WidenRow(q_, batch + b * Hp, H, &lo, &hi);
      }
      const q8::QuantParams hp = q8::QuantParamsFor(lo, hi);
      for (int64_t i = 0; i < live; ++i) QuantizeRow(q_, h_rows[i], H, hp, ah, i);
      ra.zero_point = hp.zero_point;
      ra.a_scale = hp.scale;
    }
    q_.gemm(ra, 0, live, q0, q1);
  }
  CellFromGates(a, q0, q1, products);  // the projection's gates plus the product
  // Row chunks: the range of this chunk's rows that run the next step (len >= s + 1), its new h
  // still in cache, for every chunk's next step (the runner's meeting publishes it). lo and hi
  // start at 0 and a min and a max are exact, so the chunks' ranges combine to the one-thread
  // range in any order.
  if (a.row_chunks > 1 && scales_ != Int8Scales::kRow && s + 1 < r.steps) {
    float lo = 0.f, hi = 0.f;
    for (int64_t i = 0; i < a.rows; ++i) {
      const int64_t len = LengthOf(a, a.b0 + i);
      if (s + 1 <= len) WidenRow(q_, a.h_out + i * Hp, H, &lo, &hi);
    }
    float* range = At<float>(r.scratch, o.ranges) + slot * kRangeLine + (s + 1) % 2 * 2;
    range[0] = lo;
    range[1] = hi;
  }
}

}  // namespace lstm_ort::cpu
