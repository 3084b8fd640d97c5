#include "cpu/lstm_cpu.h"

#include <Eigen/Core>
#include <algorithm>
#include <thread>
#include <vector>

#include "lstm_ort/cell.h"

namespace lstm_ort {
namespace {

using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using ConstMap = Eigen::Map<const RowMat, 0, Eigen::OuterStride<>>;
using Map = Eigen::Map<RowMat, 0, Eigen::OuterStride<>>;

inline float ToFloat(float v) { return v; }
inline float ToFloat(Ort::Float16_t v) { return v.ToFloat(); }
template <typename T>
inline T FromFloat(float v) { return T(v); }

// Inputs as fp32: the same pointer for float storage, a converted copy for float16.
template <typename T>
const float* AsFloat(const void* p, int64_t n, std::vector<float>& scratch) {
  if (!p) return nullptr;
  if constexpr (std::is_same_v<T, float>) {
    return static_cast<const float*>(p);
  } else {
    const T* src = static_cast<const T*>(p);
    scratch.resize(n);
    for (int64_t i = 0; i < n; ++i) scratch[i] = ToFloat(src[i]);
    return scratch.data();
  }
}

// Index of element (t, b) of a [T, B, *] (layout 0) or [B, T, *] (layout 1) tensor, in rows.
inline int64_t Row(int64_t layout, int64_t T, int64_t B, int64_t t, int64_t b) {
  return layout == 0 ? t * B + b : b * T + t;
}
// Index of state (k = l*D + d, b) in [L*D, B, H] (layout 0) or [B, L*D, H] (layout 1), in rows.
inline int64_t StateRow(int64_t layout, int64_t LD, int64_t B, int64_t k, int64_t b) {
  return layout == 0 ? k * B + b : b * LD + k;
}

bool IsDefaultCell(const CellParams& p, bool peepholes) {
  return !peepholes && !p.input_forget && p.act[0].kind == ActKind::kSigmoid && p.act[1].kind == ActKind::kTanh &&
         p.act[2].kind == ActKind::kTanh;
}

// The common cell (Sigmoid/Tanh/Tanh, no peepholes, no input_forget) over a whole row, with
// Eigen's vectorised logistic and tanh: the scalar per-unit path spends most of its time in
// transcendentals.
struct RowScratch {
  explicit RowScratch(int64_t H) : pre(4 * H), sig(4 * H), g(H), tc(H) {}
  Eigen::ArrayXf pre, sig, g, tc;
};

void UpdateRowDefault(const CellParams& p, int64_t H, const float* gates, const float* gx, float* h, float* c,
                      float* y, RowScratch& s) {
  using CArr = Eigen::Map<const Eigen::ArrayXf>;
  s.pre = CArr(gates, 4 * H) + CArr(gx, 4 * H);
  if (p.has_clip) s.pre = s.pre.max(-p.clip).min(p.clip);
  s.sig = s.pre.logistic();
  for (int64_t j = 0; j < H; ++j) s.g[j] = s.pre[kGates * j + kGateC];
  s.g = s.g.tanh();
  for (int64_t j = 0; j < H; ++j)
    c[j] = s.sig[kGates * j + kGateF] * c[j] + s.sig[kGates * j + kGateI] * s.g[j];
  s.tc = CArr(c, H).tanh();
  for (int64_t j = 0; j < H; ++j) y[j] = h[j] = s.sig[kGates * j + kGateO] * s.tc[j];
}

struct DirectionJob {
  const Dims* d;
  const Attributes* attrs;
  int64_t l, dir;
  const float* x;       // layer input, [T, B, I_l] time-major
  const float* w;       // packed [K_l, 4H]
  const float* bias;    // [4H] or null
  const float* peep;    // [3H] or null
  const float* h0;      // initial_h as fp32 (whole tensor) or null
  const float* c0;
  const std::vector<int32_t>* lens;
  int32_t max_len;
  float* layer_out;     // [T, B, D, H], pre-zeroed
  float* h_final;       // [B, H]
  float* c_final;
};

// Batch entries [b0, b1) of one direction of one layer. Batch entries never interact, so
// chunks of the batch run on separate threads with no synchronisation.
void RunChunk(const DirectionJob& job, int64_t b0, int64_t b1) {
  const Dims& d = *job.d;
  const int64_t B = d.B, nb = b1 - b0, H = d.H, G = kGates * H, I = d.LayerInput(job.l);
  const int64_t k = job.l * d.D + job.dir;
  const bool reverse = job.attrs->reverse_only || job.dir == 1;
  const CellParams cell = MakeCellParams(*job.attrs, static_cast<int>(job.dir));
  const int64_t steps = job.max_len;

  // Input projection of every step of this chunk at once; reverse steps read rows below max_len too.
  RowMat gx(steps * nb, G);
  if (steps > 0) {
    const float* x = job.x;
    RowMat xc;
    if (nb != B) {  // gather this chunk's rows of every step
      xc.resize(steps * nb, I);
      for (int64_t t = 0; t < steps; ++t)
        xc.middleRows(t * nb, nb) = ConstMap(job.x + (t * B + b0) * I, nb, I, Eigen::OuterStride<>(I));
      x = xc.data();
    }
    gx.noalias() = ConstMap(x, steps * nb, I, Eigen::OuterStride<>(I)) * ConstMap(job.w, I, G, Eigen::OuterStride<>(G));
    if (job.bias) gx.rowwise() += Eigen::Map<const Eigen::RowVectorXf>(job.bias, G);
  }

  RowMat h(nb, H), c(nb, H), gates(nb, G);
  for (int64_t b = 0; b < nb; ++b) {
    const int64_t r = StateRow(job.attrs->layout, d.L * d.D, B, k, b0 + b);
    for (int64_t j = 0; j < H; ++j) {
      h(b, j) = job.h0 ? job.h0[r * H + j] : 0.f;
      c(b, j) = job.c0 ? job.c0[r * H + j] : 0.f;
    }
  }
  const ConstMap wh(job.w + I * G, H, G, Eigen::OuterStride<>(G));
  const float* pi = job.peep;
  const float* po = job.peep ? job.peep + H : nullptr;
  const float* pf = job.peep ? job.peep + 2 * H : nullptr;
  const int32_t* lens = job.lens->data() + b0;

  const bool fast = IsDefaultCell(cell, pi != nullptr);
  RowScratch scratch(fast ? H : 0);
  for (int64_t s = 0; s < steps; ++s) {
    gates.noalias() = h * wh;
    for (int64_t b = 0; b < nb; ++b) {
      const int32_t len = lens[b];
      if (s >= len) continue;
      const int64_t t = reverse ? len - 1 - s : s;
      const float* gxr = gx.data() + (t * nb + b) * G;
      const float* gr = gates.data() + b * G;
      float* hr = h.data() + b * H;
      float* cr = c.data() + b * H;
      float* yr = job.layer_out + ((t * B + b0 + b) * d.D + job.dir) * H;
      if (fast) {
        UpdateRowDefault(cell, H, gr, gxr, hr, cr, yr, scratch);
        continue;
      }
      for (int64_t j = 0; j < H; ++j) {
        const float* g4 = gr + kGates * j;
        const float* x4 = gxr + kGates * j;
        hr[j] = CellUpdate(cell, g4[kGateI] + x4[kGateI], g4[kGateO] + x4[kGateO], g4[kGateF] + x4[kGateF],
                           g4[kGateC] + x4[kGateC], pi ? pi[j] : 0.f, po ? po[j] : 0.f, pf ? pf[j] : 0.f, cr[j]);
        yr[j] = hr[j];
      }
    }
  }
  // A sequence of length 0 ends in zero states, as stock onnxruntime gives.
  for (int64_t b = 0; b < nb; ++b) {
    const bool empty = lens[b] == 0;
    for (int64_t j = 0; j < H; ++j) {
      job.h_final[(b0 + b) * H + j] = empty ? 0.f : h(b, j);
      job.c_final[(b0 + b) * H + j] = empty ? 0.f : c(b, j);
    }
  }
}

// Runs fn(0..n-1), task 0 on the calling thread.
template <typename Fn>
void ParallelFor(int n, Fn fn) {
  std::vector<std::thread> threads;
  for (int i = 1; i < n; ++i) threads.emplace_back(fn, i);
  fn(0);
  for (auto& t : threads) t.join();
}

// Batch chunks per direction: one per core the directions leave, when the work pays for a thread.
int ChunksFor(const Dims& d, int32_t max_len) {
  const int cores = std::max(1u, std::thread::hardware_concurrency()) / static_cast<int>(d.D);
  const double flops = 8.0 * max_len * d.B * d.H * (d.H + d.LayerInput(0));
  if (cores <= 1 || flops < 2e7) return 1;
  return static_cast<int>(std::min<int64_t>(cores, d.B));
}

void RunDirection(const DirectionJob& job, int chunks) {
  const int64_t B = job.d->B;
  ParallelFor(chunks, [&](int i) { RunChunk(job, B * i / chunks, B * (i + 1) / chunks); });
}

}  // namespace

template <typename T>
void RunLstmCpu(const Attributes& attrs, const CallIO& io) {
  const Dims& d = io.dims;
  const int64_t T_ = d.T, B = d.B, H = d.H, D = d.D, L = d.L, LD = L * D;
  std::vector<float> w_s, b_s, p_s, h0_s, c0_s, x_in;
  const float* w = AsFloat<T>(io.in[kW], d.WeightCount(), w_s);
  const float* bias = AsFloat<T>(io.in[kB], d.BiasCount(), b_s);
  const float* peep = AsFloat<T>(io.in[kP], d.PeepholeCount(), p_s);
  const float* h0 = AsFloat<T>(io.in[kInitialH], LD * B * H, h0_s);
  const float* c0 = AsFloat<T>(io.in[kInitialC], LD * B * H, c0_s);

  std::vector<int32_t> lens(B, static_cast<int32_t>(T_));
  if (io.seq_lens) lens.assign(io.seq_lens, io.seq_lens + B);

  // Time-major fp32 copy of X.
  const T* x = static_cast<const T*>(io.in[kX]);
  x_in.resize(T_ * B * d.I);
  for (int64_t t = 0; t < T_; ++t)
    for (int64_t b = 0; b < B; ++b) {
      const T* src = x + Row(attrs.layout, T_, B, t, b) * d.I;
      float* dst = x_in.data() + (t * B + b) * d.I;
      for (int64_t i = 0; i < d.I; ++i) dst[i] = ToFloat(src[i]);
    }

  std::vector<float> layer_in = std::move(x_in), layer_out;
  std::vector<float> h_final(LD * B * H), c_final(LD * B * H);
  for (int64_t l = 0; l < L; ++l) {
    layer_out.assign(T_ * B * D * H, 0.f);
    DirectionJob jobs[2];
    for (int64_t dir = 0; dir < D; ++dir) {
      const int64_t k = l * D + dir;
      jobs[dir] = DirectionJob{&d, &attrs, l, dir, layer_in.data(), w + d.WeightOffset(l, dir),
                               bias ? bias + k * kGates * H : nullptr, peep ? peep + k * 3 * H : nullptr,
                               h0, c0, &lens, io.max_len, layer_out.data(),
                               h_final.data() + k * B * H, c_final.data() + k * B * H};
    }
    // Directions are independent too: each gets its own threads.
    const int chunks = ChunksFor(d, io.max_len);
    ParallelFor(static_cast<int>(D), [&](int dir) { RunDirection(jobs[dir], chunks); });
    std::swap(layer_in, layer_out);
  }

  // layer_in now holds the last layer's output, [T, B, D, H].
  if (T* y = static_cast<T*>(io.out[kY])) {
    for (int64_t t = 0; t < T_; ++t)
      for (int64_t dir = 0; dir < D; ++dir)
        for (int64_t b = 0; b < B; ++b) {
          const float* src = layer_in.data() + ((t * B + b) * D + dir) * H;
          const int64_t row = attrs.layout == 0 ? (t * D + dir) * B + b : (b * T_ + t) * D + dir;
          for (int64_t j = 0; j < H; ++j) y[row * H + j] = FromFloat<T>(src[j]);
        }
  }
  for (int which : {kYH, kYC}) {
    T* out = static_cast<T*>(io.out[which]);
    if (!out) continue;
    const std::vector<float>& src = which == kYH ? h_final : c_final;
    for (int64_t k = 0; k < LD; ++k)
      for (int64_t b = 0; b < B; ++b)
        for (int64_t j = 0; j < H; ++j)
          out[StateRow(attrs.layout, LD, B, k, b) * H + j] = FromFloat<T>(src[(k * B + b) * H + j]);
  }
}

template void RunLstmCpu<float>(const Attributes&, const CallIO&);
template void RunLstmCpu<Ort::Float16_t>(const Attributes&, const CallIO&);

}  // namespace lstm_ort
