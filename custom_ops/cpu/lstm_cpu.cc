#include "cpu/lstm_cpu.h"

#include <Eigen/Core>
#include <algorithm>
#include <atomic>
#include <exception>
#include <memory>
#include <mutex>
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

// Threads that split the units of one batch chunk meet once per step.
class SpinBarrier {
 public:
  explicit SpinBarrier(int n) : n_(n) {}
  void Wait() {
    const int gen = gen_.load(std::memory_order_acquire);
    if (count_.fetch_add(1, std::memory_order_acq_rel) + 1 == n_) {
      count_.store(0, std::memory_order_relaxed);
      gen_.fetch_add(1, std::memory_order_acq_rel);
    } else {
      while (gen_.load(std::memory_order_acquire) == gen) std::this_thread::yield();
    }
  }

 private:
  const int n_;
  std::atomic<int> count_{0}, gen_{0};
};

// h of one batch chunk, double-buffered: step s reads one buffer whole and writes the other.
struct SharedH {
  RowMat buf[2];
};

// Batch entries [b0, b1) and hidden units [u0, u1) of one direction of one layer. Batch chunks
// never interact, so they run on separate threads with no synchronisation; threads that share a
// chunk split its units (columns 4*u0..4*u1 of the interleaved gates) and meet at `barrier`
// after each step, since every unit's next step reads all of h.
void RunPart(const DirectionJob& job, int64_t b0, int64_t b1, int64_t u0, int64_t u1, SharedH& hs,
             SpinBarrier* barrier) {
  const Dims& d = *job.d;
  const int64_t B = d.B, nb = b1 - b0, H = d.H, G = kGates * H, I = d.LayerInput(job.l);
  const int64_t nu = u1 - u0, Gp = kGates * nu;
  const int64_t k = job.l * d.D + job.dir;
  const bool reverse = job.attrs->reverse_only || job.dir == 1;
  const CellParams cell = MakeCellParams(*job.attrs, static_cast<int>(job.dir));
  const int64_t steps = job.max_len;

  // Input projection of every step of this part at once; reverse steps read rows below max_len too.
  RowMat gx(steps * nb, Gp);
  if (steps > 0) {
    const float* x = job.x;
    RowMat xc;
    if (nb != B) {  // gather this chunk's rows of every step
      xc.resize(steps * nb, I);
      for (int64_t t = 0; t < steps; ++t)
        xc.middleRows(t * nb, nb) = ConstMap(job.x + (t * B + b0) * I, nb, I, Eigen::OuterStride<>(I));
      x = xc.data();
    }
    gx.noalias() = ConstMap(x, steps * nb, I, Eigen::OuterStride<>(I)) *
                   ConstMap(job.w + kGates * u0, I, Gp, Eigen::OuterStride<>(G));
    if (job.bias) gx.rowwise() += Eigen::Map<const Eigen::RowVectorXf>(job.bias + kGates * u0, Gp);
  }

  RowMat c(nb, nu), gates(nb, Gp);
  for (int64_t b = 0; b < nb; ++b) {
    const int64_t r = StateRow(job.attrs->layout, d.L * d.D, B, k, b0 + b);
    for (int64_t j = u0; j < u1; ++j) {
      hs.buf[0](b, j) = job.h0 ? job.h0[r * H + j] : 0.f;
      c(b, j - u0) = job.c0 ? job.c0[r * H + j] : 0.f;
    }
  }
  const bool fast = IsDefaultCell(cell, job.peep != nullptr);
  RowScratch scratch(fast ? nu : 0);  // allocated before the barrier: nothing below allocates
  if (barrier) barrier->Wait();  // every part's initial h is in place
  const ConstMap wh(job.w + I * G + kGates * u0, H, Gp, Eigen::OuterStride<>(G));
  const float* pi = job.peep ? job.peep + u0 : nullptr;
  const float* po = job.peep ? job.peep + H + u0 : nullptr;
  const float* pf = job.peep ? job.peep + 2 * H + u0 : nullptr;
  const int32_t* lens = job.lens->data() + b0;

  int cur = 0;
  for (int64_t s = 0; s < steps; ++s) {
    const RowMat& h_in = hs.buf[cur];
    RowMat& h_out = hs.buf[cur ^ 1];
    gates.noalias() = h_in * wh;
    for (int64_t b = 0; b < nb; ++b) {
      const int32_t len = lens[b];
      float* hr = h_out.data() + b * H + u0;
      if (s >= len) {  // finished sequences keep their state
        std::copy_n(h_in.data() + b * H + u0, nu, hr);
        continue;
      }
      const int64_t t = reverse ? len - 1 - s : s;
      const float* gxr = gx.data() + (t * nb + b) * Gp;
      const float* gr = gates.data() + b * Gp;
      float* cr = c.data() + b * nu;
      float* yr = job.layer_out + ((t * B + b0 + b) * d.D + job.dir) * H + u0;
      if (fast) {
        UpdateRowDefault(cell, nu, gr, gxr, hr, cr, yr, scratch);
        continue;
      }
      for (int64_t j = 0; j < nu; ++j) {
        const float* g4 = gr + kGates * j;
        const float* x4 = gxr + kGates * j;
        hr[j] = CellUpdate(cell, g4[kGateI] + x4[kGateI], g4[kGateO] + x4[kGateO], g4[kGateF] + x4[kGateF],
                           g4[kGateC] + x4[kGateC], pi ? pi[j] : 0.f, po ? po[j] : 0.f, pf ? pf[j] : 0.f, cr[j]);
        yr[j] = hr[j];
      }
    }
    cur ^= 1;
    if (barrier) barrier->Wait();
  }
  // A sequence of length 0 ends in zero states, as stock onnxruntime gives.
  const RowMat& h = hs.buf[cur];
  for (int64_t b = 0; b < nb; ++b) {
    const bool empty = lens[b] == 0;
    for (int64_t j = u0; j < u1; ++j) {
      job.h_final[(b0 + b) * H + j] = empty ? 0.f : h(b, j);
      job.c_final[(b0 + b) * H + j] = empty ? 0.f : c(b, j - u0);
    }
  }
}

// Runs fn(0..n-1), task 0 on the calling thread. An exception in any task (an allocation
// failure, say) is rethrown here after every thread joined, rather than ending the process.
template <typename Fn>
void ParallelFor(int n, Fn fn) {
  std::exception_ptr error;
  std::mutex error_mutex;
  auto guarded = [&](int i) {
    try {
      fn(i);
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mutex);
      if (!error) error = std::current_exception();
    }
  };
  std::vector<std::thread> threads;
  for (int i = 1; i < n; ++i) threads.emplace_back(guarded, i);
  guarded(0);
  for (auto& t : threads) t.join();
  if (error) std::rethrow_exception(error);
}

// Threads per direction: one per core the directions leave, when the work pays for a thread.
int ThreadsFor(const Dims& d, int32_t max_len) {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()) / d.D);
  const double flops = 8.0 * max_len * d.B * d.H * (d.H + d.LayerInput(0));
  return cores <= 1 || flops < 2e7 ? 1 : cores;
}

// Batch chunks first (no synchronisation); the threads left over split each chunk's units.
void RunDirection(const DirectionJob& job, int threads) {
  const int64_t B = job.d->B, H = job.d->H;
  if (B == 0) return;
  const int chunks = static_cast<int>(std::min<int64_t>(threads, B));
  const int per_chunk = static_cast<int>(std::min<int64_t>(std::max(1, threads / chunks), H));
  std::vector<SharedH> hs(chunks);
  std::vector<std::unique_ptr<SpinBarrier>> barriers(chunks);
  for (int i = 0; i < chunks; ++i) {
    const int64_t nb = B * (i + 1) / chunks - B * i / chunks;
    hs[i].buf[0].resize(nb, H);
    hs[i].buf[1].resize(nb, H);
    if (per_chunk > 1) barriers[i] = std::make_unique<SpinBarrier>(per_chunk);
  }
  ParallelFor(chunks * per_chunk, [&](int task) {
    const int i = task / per_chunk, p = task % per_chunk;
    RunPart(job, B * i / chunks, B * (i + 1) / chunks, H * p / per_chunk, H * (p + 1) / per_chunk, hs[i],
            barriers[i].get());
  });
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
    const int threads = ThreadsFor(d, io.max_len);
    ParallelFor(static_cast<int>(D), [&](int dir) { RunDirection(jobs[dir], threads); });
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
