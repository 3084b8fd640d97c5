// FusedLSTM with int8 weights on the CPU. Per layer: the layer's input quantized to uint8 levels
// over the whole call, its product with the int8 input weights for every step and both directions
// (bias folded in); then per step and direction h quantized over the rows still running, its
// product with the recurrent weights added to the step's gates, and the float kernel's cell
// (cpu/kernels.h, run as a step from the gates alone). Threads come from the session's pool: the
// projection is cut into row and panel blocks; each direction's recurrence runs on its own thread
// and, where a step is large, its panels are split over more threads meeting after every step.
#include "cpu/int8/lstm_int8.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>


#include "cpu/constant_input.h"
#include "cpu/int8/int8_kernels.h"
#include "cpu/kernels.h"
#include "cpu/pool.h"
#include "overrides.h"
#include "lstm_ort/cell.h"

namespace lstm_ort {
namespace {

using cpu::kPanel;
using cpu::kUnits;
namespace q8 = cpu::int8;

// The work worth another thread, in multiply-adds (LSTM_ORT_CPU_INT8_SPLIT_MIN, for measuring).
int64_t SplitMin() {
  static const int64_t split_min = CpuOverridesFromEnvironment().int8_split_min;
  return split_min;
}

// One step's multiply-adds from which its panels are split over threads that meet after every step
// (LSTM_ORT_CPU_INT8_STEP_SPLIT_MIN, for measuring).
int64_t StepSplitMin() {
  static const int64_t split_min = CpuOverridesFromEnvironment().int8_step_split_min;
  return split_min;
}

// ---- packed weights ----

struct Packed : PackedShape {
  const void* s_src = nullptr;
  AlignedBuffer<int8_t> wx, wh;  // per (l, d) panels; a layer's directions are consecutive in wx (one projection)
  std::vector<size_t> wx_off, wh_off;
  // Per (l, d), np * kPanel packed columns each: scales, column sums, bias; peepholes [3][Hp].
  std::vector<float> sx, sh, bias, peep;
  std::vector<int32_t> cx, ch;

  int64_t Cols() const { return np * kPanel; }
};

// Where contract column 4j + g lies among the packed columns.
inline int64_t PackedColumn(int64_t col) {
  const int64_t j = col / kGates, g = col % kGates;
  return (j / kUnits) * kPanel + g * kUnits + j % kUnits;
}

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

void Pack(Packed& pk, const q8::Table& t, const Dims& d, const int8_t* w, const float* s, const float* b,
          const float* p) {
  pk.I = d.I;
  pk.H = d.H;
  pk.L = d.L;
  pk.D = d.D;
  pk.np = (d.H + kUnits - 1) / kUnits;
  pk.Hp = pk.np * kUnits;
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
    const int64_t l = k / d.D, dir = k % d.D, I = d.LayerInput(l);
    const int8_t* block = w + d.WeightOffset(l, dir);  // [I + H][4H]: input rows, then recurrent rows
    const float* scale = s + k * 2 * kGates * H;       // input rows' [4H], then recurrent rows'
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

// A constant initializer's data when it has `count` elements of `type`, else null.
const void* ConstantInput(const OrtKernelInfo* info, size_t index, ONNXTensorElementDataType type, int64_t count) {
  const OrtValue* value = ConstantValue(info, index);
  if (!value) return nullptr;
  Ort::ConstValue v(value);
  const auto shape = v.GetTensorTypeAndShapeInfo();
  if (shape.GetElementType() != type || static_cast<int64_t>(shape.GetElementCount()) != count) return nullptr;
  return v.GetTensorRawData();
}

// ---- activations ----

// Rows of floats quantized with one scale and zero point into activation rows of `depth` elements
// (the padding zero).
struct ActRows {
  void* data;
  int64_t depth;
  int64_t bytes;  // per element
  uint8_t* Row(int64_t r) const { return static_cast<uint8_t*>(data) + r * depth * bytes; }
};

void QuantizeRows(const q8::Table& t, const float* const* rows, int64_t n, int64_t K, q8::QuantParams p,
                  const ActRows& out) {
  for (int64_t r = 0; r < n; ++r) {
    uint8_t* dst = out.Row(r);
    t.quantize(rows[r], K, p, dst);
    std::memset(dst + K * out.bytes, 0, (out.depth - K) * out.bytes);
  }
}

// Widens [lo, hi] to hold the first K values of each row.
void Widen(const q8::Table& t, const float* const* rows, int64_t n, int64_t K, float* lo, float* hi) {
  for (int64_t r = 0; r < n; ++r) {
    float l, h;
    t.min_max(rows[r], K, &l, &h);
    *lo = std::min(*lo, l);
    *hi = std::max(*hi, h);
  }
}

}  // namespace

struct CpuLstmInt8::State {
  Attributes attrs;
  const q8::Table* int8 = &q8::Int8Kernels();
  const cpu::KernelTable* cells = &cpu::Kernels();
  Packed prepacked;  // from constant initializers, at kernel creation (I = -1 if none)
  std::mutex scratch_mutex;
  AlignedBuffer<char> scratch;
};

CpuLstmInt8::CpuLstmInt8(const OrtKernelInfo* info, const Attributes& attrs) : state_(std::make_unique<State>()) {
  State& st = *state_;
  st.attrs = attrs;
  if (attrs.ranks.Any()) Fail("int8 weights cannot be factored (attributes rank_input/rank_recurrent)");
  Dims d;
  d.H = attrs.hidden_size;
  d.L = attrs.num_layers;
  d.D = attrs.num_directions;
  const OrtValue* w_value = ConstantValue(info, kW);
  if (!w_value) return;  // packed on every call
  const size_t nw = Ort::ConstValue(w_value).GetTensorTypeAndShapeInfo().GetElementCount();
  d.I = InputSizeFromCounts(d, attrs.ranks, static_cast<int64_t>(nw), 0);
  if (d.I <= 0) return;  // the call reports the size
  const auto* w = static_cast<const int8_t*>(ConstantInput(info, kW, ONNX_TENSOR_ELEMENT_DATA_TYPE_INT8, nw));
  const auto* s = static_cast<const float*>(
      ConstantInput(info, kWScale, ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT, d.WeightScaleCount()));
  if (!w || !s) return;
  const auto* b = static_cast<const float*>(ConstantInput(info, kB, ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT, d.BiasCount()));
  const auto* p =
      static_cast<const float*>(ConstantInput(info, kP, ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT, d.PeepholeCount()));
  Pack(st.prepacked, *st.int8, d, w, s, b, p);
  if (CpuOverridesFromEnvironment().verbose)
    std::fprintf(stderr, "lstm_ort cpu int8: packed constant weights at kernel creation (I=%lld, H=%lld, L=%lld, D=%lld, %s)\n",
                 static_cast<long long>(d.I), static_cast<long long>(d.H), static_cast<long long>(d.L),
                 static_cast<long long>(d.D), st.int8->isa);
}

CpuLstmInt8::~CpuLstmInt8() = default;

void CpuLstmInt8::Compute(OrtKernelContext* ctx, const CallIO& io) {
  State& st = *state_;
  const Attributes& attrs = st.attrs;
  const q8::Table& Q = *st.int8;
  const cpu::KernelTable& K = *st.cells;
  const Dims& d = io.dims;
  const int64_t T_ = d.T, B = d.B, H = d.H, D = d.D, L = d.L, LD = L * D;
  const int64_t steps = io.max_len;
  const int P = PlanThreads();
  for (int64_t l = 0; l < L; ++l)
    if (d.LayerInput(l) > q8::kMaxDepth || H > q8::kMaxDepth)
      Fail("int8 weights: a layer's input size and H must be at most " + std::to_string(q8::kMaxDepth));

  const Packed* pk = &st.prepacked;
  Packed local;
  const float* b_in = static_cast<const float*>(io.in[kB]);
  const float* p_in = static_cast<const float*>(io.in[kP]);
  if (!(pk->I == d.I && pk->w_src == io.in[kW] && pk->s_src == io.in[kWScale] && pk->b_src == b_in &&
        pk->p_src == p_in)) {
    Pack(local, Q, d, static_cast<const int8_t*>(io.in[kW]), static_cast<const float*>(io.in[kWScale]), b_in, p_in);
    pk = &local;
  }
  const int64_t np = pk->np, Hp = pk->Hp, Gp = pk->Cols();
  const int64_t depth_h = q8::PaddedDepth(Q, H), abytes = q8::ActivationBytes(Q);
  int64_t depth_x = 0;
  for (int64_t l = 0; l < L; ++l) depth_x = std::max(depth_x, q8::PaddedDepth(Q, d.LayerInput(l)));

  // Threads per direction's recurrence: its panels split where a step is worth it.
  const int64_t step_macs = B * H * kGates * H;
  const int64_t per_dir = std::max<int64_t>(1, P / D);
  const int64_t chunks = per_dir > 1 && step_macs >= StepSplitMin() ? std::min<int64_t>(per_dir, np) : 1;

  std::unique_lock<std::mutex> lock(st.scratch_mutex, std::try_to_lock);
  AlignedBuffer<char> private_scratch;
  AlignedBuffer<char>& scratch = lock.owns_lock() ? st.scratch : private_scratch;
  const int64_t rows = T_ * B;
  size_t n = 0;
  auto carve = [&n](size_t bytes) {
    const size_t at = n;
    n += (bytes + 63) & ~size_t(63);
    return at;
  };
  const bool x_direct = attrs.layout == 0;
  const size_t x_at = carve(x_direct ? 0 : rows * d.I * sizeof(float));
  const size_t ax_at = carve(steps * B * depth_x * abytes);
  const size_t gx_at = carve(steps * B * D * Gp * sizeof(float));
  const size_t lay_at[2] = {carve(rows * D * H * sizeof(float)), carve(L > 1 ? rows * D * H * sizeof(float) : 0)};
  const size_t h_at = carve(D * 2 * B * Hp * sizeof(float)), c_at = carve(D * B * Hp * sizeof(float));
  const size_t ah_at = carve(D * chunks * B * depth_h * abytes);
  const size_t out_rows_at = carve(D * chunks * B * sizeof(float*));
  const size_t in_rows_at = carve(std::max(D * chunks * B, rows) * sizeof(float*));
  const size_t fin_at = carve(2 * LD * B * H * sizeof(float));
  char* base = scratch.Reserve(std::max<size_t>(n, 64));
  auto at = [base](size_t offset) { return reinterpret_cast<float*>(base + offset); };
  float* gx = at(gx_at);
  float* h_final = at(fin_at);
  float* c_final = h_final + LD * B * H;
  const float** in_rows = reinterpret_cast<const float**>(base + in_rows_at);
  const int32_t* lens = io.seq_lens;
  auto len_of = [&](int64_t b) -> int64_t { return lens ? lens[b] : T_; };

  // Layer 0's input, time-major.
  const float* x0 = static_cast<const float*>(io.in[kX]);
  if (!x_direct) {
    float* xc = at(x_at);
    for (int64_t t = 0; t < T_; ++t)
      for (int64_t b = 0; b < B; ++b) std::memcpy(xc + (t * B + b) * d.I, x0 + (b * T_ + t) * d.I, d.I * sizeof(float));
    x0 = xc;
  }
  const float* h0 = static_cast<const float*>(io.in[kInitialH]);
  const float* c0 = static_cast<const float*>(io.in[kInitialC]);
  auto state_row = [&](int64_t k, int64_t b) { return attrs.layout == 0 ? k * B + b : b * LD + k; };

  const float* layer_in = x0;
  float* layer_out = nullptr;
  for (int64_t l = 0; l < L; ++l) {
    const int64_t I = d.LayerInput(l), dx = q8::PaddedDepth(Q, I);
    layer_out = at(lay_at[l % 2]);
    const int64_t M = steps * B;

    // 1. The layer's input for the steps run, quantized with one scale: X as given (padding past a
    // sequence's end included, as onnxruntime quantizes it), a lower layer's output zero there.
    if (l > 0 && lens)
      for (int64_t t = 0; t < steps; ++t)
        for (int64_t b = 0; b < B; ++b)
          if (t >= len_of(b)) std::memset(const_cast<float*>(layer_in) + (t * B + b) * I, 0, I * sizeof(float));
    for (int64_t r = 0; r < M; ++r) in_rows[r] = layer_in + r * I;
    const ActRows ax{base + ax_at, dx, abytes};
    q8::QuantParams xp{1.f, 0};
    if (M > 0) {
      float lo, hi;
      Q.min_max(layer_in, M * I, &lo, &hi);
      xp = q8::QuantParamsFor(lo, hi);
      QuantizeRows(Q, in_rows, M, I, xp, ax);
    }

    // 2. Its product with the input weights, every step and both directions: [M] x [D * np panels].
    const size_t cols = static_cast<size_t>(Gp);
    const q8::GemmArgs pa{ax.data, dx, pk->wx.data() + pk->wx_off[l * D], dx, &pk->cx[l * D * cols],
                          xp.zero_point, xp.scale, &pk->sx[l * D * cols], &pk->bias[l * D * cols], false, gx, D * Gp,
                          nullptr, D * np};
    const int64_t Qn = D * np;
    const int64_t workers = std::min<int64_t>(P, std::max<int64_t>(1, M * I * Qn * kPanel / SplitMin()));
    if (M > 0 && workers <= 1) {
      Q.gemm(pa, 0, M, 0, Qn);
    } else if (M > 0) {
      // Items of whole panel blocks over all rows where the panels feed every thread (each thread
      // streams only its weights), else row blocks too; claimed in order.
      const int64_t pblocks = std::min<int64_t>(Qn, 4 * workers);
      const int64_t rblocks = std::min<int64_t>((M + 5) / 6, std::max<int64_t>(1, 4 * workers / pblocks));
      const int64_t items = pblocks * rblocks;
      std::atomic<int64_t> next{0};
      auto fn = [&](int64_t) {
        for (int64_t i; (i = next.fetch_add(1, std::memory_order_relaxed)) < items;) {
          const int64_t rb = i / pblocks, qb = i % pblocks;
          Q.gemm(pa, M * rb / rblocks, M * (rb + 1) / rblocks, Qn * qb / pblocks, Qn * (qb + 1) / pblocks);
        }
      };
      Parallel(ctx, workers, fn);
    }

    // 3. The recurrence.
    for (int64_t dir = 0; dir < D; ++dir) {
      const int64_t k = l * D + dir;
      float* h = at(h_at) + dir * 2 * B * Hp;
      float* c = at(c_at) + dir * B * Hp;
      std::memset(h, 0, sizeof(float) * 2 * B * Hp);
      std::memset(c, 0, sizeof(float) * B * Hp);
      for (int64_t b = 0; b < B; ++b) {
        const int64_t r = state_row(k, b) * H;
        for (int64_t j = 0; j < H; ++j) {
          if (h0) h[b * Hp + j] = h0[r + j];
          if (c0) c[b * Hp + j] = c0[r + j];
        }
      }
    }
    auto step_args = [&](int64_t dir, int64_t s) {
      const CellParams cell = MakeCellParams(attrs, static_cast<int>(dir));
      cpu::StepArgs a{};
      float* h = at(h_at) + dir * 2 * B * Hp;
      a.H = H;
      a.Hp = Hp;
      a.h_in = h + (s % 2) * B * Hp;
      a.h_out = h + ((s + 1) % 2) * B * Hp;
      a.h_zero = true;  // the gates are complete: the cell runs from them alone
      a.c = at(c_at) + dir * B * Hp;
      a.rows = B;
      a.gx = gx + dir * Gp;
      a.gx_ld = D * Gp;
      a.y = layer_out + dir * H;
      a.y_ld = D * H;
      a.B = B;
      a.T = T_;
      a.s = s;
      a.lens = lens;
      a.reverse = attrs.reverse_only || dir == 1;
      cpu::SetCell(a, cell);
      a.peep = pk->has_peep ? pk->peep.data() + (l * D + dir) * 3 * Hp : nullptr;
      return a;
    };
    // Step s of direction dir for panels [p0, p1): h quantized with one scale over the rows that
    // ran step s - 1 (every row at s = 0; as onnxruntime, whose h of a row that ended is its last h
    // for one step, then zero), its product added to the gates of the rows still running, then the cell.
    auto step = [&](int64_t dir, int64_t s, int64_t ch, int64_t p0, int64_t p1) {
      const cpu::StepArgs a = step_args(dir, s);
      const int64_t slot = dir * chunks + ch;
      float** out_rows = reinterpret_cast<float**>(base + out_rows_at) + slot * B;
      const float** h_rows = in_rows + slot * B;
      int64_t live = 0, ranged = 0;
      for (int64_t b = 0; b < B; ++b) {
        const int64_t len = len_of(b);
        if (s > len) continue;
        const float* row = a.h_in + b * Hp;
        if (s == len) {  // ended with the last step: in the range only, after the running rows
          h_rows[B - 1 - ranged++] = row;
          continue;
        }
        const int64_t t = a.reverse ? len - 1 - s : s;
        h_rows[live] = row;
        out_rows[live++] = gx + (t * B + b) * D * Gp + dir * Gp;
      }
      // The next step's gates were written by the projection, long out of cache: fetched toward L2
      // now, the product and the cell of this step hide the wait.
      for (int64_t b = 0; b < B && s + 1 < steps; ++b) {
        const int64_t len = len_of(b);
        if (s + 1 >= len) continue;
        const int64_t t = a.reverse ? len - 2 - s : s + 1;
        const char* row = reinterpret_cast<const char*>(gx + (t * B + b) * D * Gp + dir * Gp + p0 * kPanel);
        for (int64_t at = 0; at < (p1 - p0) * kPanel * int64_t(sizeof(float)); at += 64) __builtin_prefetch(row + at, 1, 2);
      }
      if (live > 0 && !(s == 0 && !h0)) {  // a zero h (first step, no initial_h) adds nothing
        const ActRows ah{base + ah_at + slot * B * depth_h * abytes, depth_h, abytes};
        float lo = 0.f, hi = 0.f;
        Widen(Q, h_rows, live, H, &lo, &hi);
        Widen(Q, h_rows + B - ranged, ranged, H, &lo, &hi);
        const q8::QuantParams hp = q8::QuantParamsFor(lo, hi);
        QuantizeRows(Q, h_rows, live, H, hp, ah);
        const int64_t kk = l * D + dir;
        const q8::GemmArgs ra{ah.data, depth_h, pk->wh.data() + pk->wh_off[kk], depth_h, &pk->ch[kk * cols],
                              hp.zero_point, hp.scale, &pk->sh[kk * cols], nullptr, true, nullptr, 0, out_rows, np};
        Q.gemm(ra, 0, live, p0, p1);
      }
      K.step(a, p0, p1);
    };
    if (chunks == 1) {
      auto run_dir = [&](int64_t dir) {
        for (int64_t s = 0; s < steps; ++s) step(dir, s, 0, 0, np);
      };
      if (P >= 2 && D == 2 && step_macs * steps >= SplitMin()) {
        Parallel(ctx, D, run_dir);
      } else {
        for (int64_t dir = 0; dir < D; ++dir) run_dir(dir);
      }
    } else {
      // Tasks of one direction claim (step, chunk) items in order; an item waits until the previous
      // step is done. Whatever is waited for was claimed earlier, so it is being run by a live
      // thread: no deadlock however many of the tasks the pool runs at once.
      std::unique_ptr<GroupSync[]> sync(new GroupSync[D]);
      auto run_items = [&](int64_t dir) {
        GroupSync& gs = sync[dir];
        for (int64_t i; (i = gs.next.fetch_add(1, std::memory_order_relaxed)) < steps * chunks;) {
          const int64_t s = i / chunks, ch = i % chunks;
          int spins = 0;
          while (gs.done.load(std::memory_order_acquire) < s * chunks) SpinPause(spins);
          step(dir, s, ch, np * ch / chunks, np * (ch + 1) / chunks);
          gs.done.fetch_add(1, std::memory_order_acq_rel);
        }
      };
      auto fn = [&](int64_t task) { run_items(task / chunks); };
      Parallel(ctx, D * chunks, fn);
    }

    // Final states of this layer.
    for (int64_t dir = 0; dir < D; ++dir) {
      const int64_t k = l * D + dir;
      const float* h = at(h_at) + dir * 2 * B * Hp + (steps % 2) * B * Hp;
      const float* c = at(c_at) + dir * B * Hp;
      for (int64_t b = 0; b < B; ++b) {
        const bool empty = len_of(b) == 0;
        for (int64_t j = 0; j < H; ++j) {
          h_final[(k * B + b) * H + j] = empty ? 0.f : h[b * Hp + j];
          c_final[(k * B + b) * H + j] = empty ? 0.f : c[b * Hp + j];
        }
      }
    }
    layer_in = layer_out;
  }

  // Outputs. Positions past a sequence's end are 0.
  if (float* y = static_cast<float*>(io.out[kY])) {
    for (int64_t t = 0; t < T_; ++t)
      for (int64_t dir = 0; dir < D; ++dir)
        for (int64_t b = 0; b < B; ++b) {
          const int64_t row = attrs.layout == 0 ? (t * D + dir) * B + b : (b * T_ + t) * D + dir;
          if (t >= len_of(b) || t >= steps)
            std::memset(y + row * H, 0, H * sizeof(float));
          else
            std::memcpy(y + row * H, layer_out + (t * B + b) * D * H + dir * H, H * sizeof(float));
        }
  }
  for (int which : {kYH, kYC}) {
    float* out = static_cast<float*>(io.out[which]);
    if (!out) continue;
    const float* src = which == kYH ? h_final : c_final;
    for (int64_t k = 0; k < LD; ++k)
      for (int64_t b = 0; b < B; ++b) std::memcpy(out + state_row(k, b) * H, src + (k * B + b) * H, H * sizeof(float));
  }
}

}  // namespace lstm_ort
