// The one layer/stack runner of the CPU kernel: a FusedLSTM call carried out as its plan
// (cpu/call_plan.h) says, over a pluggable weight format, as PyTorch's CellParams variants share one
// RNN loop. Per layer: the format's input projection of every step and direction into the gates,
// then the recurrence, scheduled by the plan over the session's threads (groups of batch rows,
// panels or rows split with a meeting after every phase, directions in turn), each step the format's own
// (a product and the cell: cpu/kernels.h), then the layer's final states; last, the outputs.
//
// A format (FloatFormat: fp32, whole or factored parts, cpu/float_weights.h; Int8Format,
// cpu/int8/int8_format.h; Bf16Format, cpu/bf16/bf16_format.h) gives:
//   int64_t Panels() const                         panels of 8 hidden units (np)
//   size_t ScratchBytes(const Dims&, int64_t steps, int64_t slots) const
//                                                  its own scratch for a call; `slots`: concurrent step tasks
//   void Project(const LayerRun&) const            the layer's gates (bias folded in) into r.gx
//   void Prepare(cpu::StepArgs&, const LayerRun&, int64_t k) const
//                                                  a group's step arguments for its weights (once per group;
//                                                  the input's too where LayerPlan::step_projects, fp32; bf16
//                                                  reads the input from the LayerRun in its Step)
//   int Phases(int64_t k) const                    phases of a step of (layer, direction) k: 1, or 2 where the
//                                                  recurrence is factored (h A, then (h A) B with the cell)
//   int64_t PhasePanels(int64_t k, int phase) const  panels a phase is split over
//   void Step(const cpu::StepArgs&, const LayerRun&, int64_t k, int phase, int64_t q0, int64_t q1,
//             int64_t slot) const                  one phase of one step for panels [q0, q1); `slot`: the
//                                                  task's own scratch slot (< slots). Where the plan splits
//                                                  a group's rows (row_chunks, int8 only), the args are one
//                                                  chunk's rows (row_chunk of row_chunks), every panel
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>

#include "call_io.h"
#include "cpu/call_plan.h"
#include "cpu/kernels.h"
#include "cpu/pool.h"
#include "lstm_ort/cell.h"

namespace lstm_ort::cpu {

// What the runner hands a format for one layer of one call.
struct LayerRun {
  OrtKernelContext* ctx;
  const CpuCallPlan* plan;
  const LayerPlan* lp;
  const Dims* d;
  int64_t l;
  int64_t steps, M;      // steps that run; M = steps * B rows of the projection
  const float* in;       // the layer's input, time-major rows [T*B][I] (rows past a sequence's end: 0 above layer 0)
  int64_t I;
  float* gx;             // gates [steps*B][D * Gp]: the projection's, then each step adds its product
  int64_t gx_ld;         // D * Gp
  char* scratch;         // the format's scratch (ScratchBytes)
  int64_t slots;
  const int32_t* lens;
  bool h0;               // initial_h given: the first step's h is not zero
  const KernelTable* kernels;
};

// Runs fn(r0, r1, q0, q1) over the items of a product [M rows] x [Q panels] as `sp` cuts it, on the
// session's pool: items claimed in order, so a slow thread takes fewer.
template <typename Fn>
void RunProduct(OrtKernelContext* ctx, const ProjectSplit& sp, int64_t M, int64_t Q, Fn&& fn) {
  if (sp.workers <= 1) {
    fn(int64_t{0}, M, int64_t{0}, Q);
    return;
  }
  const int64_t items = sp.Items();
  std::atomic<int64_t> next{0};
  auto task = [&](int64_t) {
    for (int64_t i; (i = next.fetch_add(1, std::memory_order_relaxed)) < items;) {
      const int64_t r = i / sp.panel_blocks, q = i % sp.panel_blocks;
      fn(sp.RowStart(r, M), sp.RowStart(r + 1, M), Q * q / sp.panel_blocks, Q * (q + 1) / sp.panel_blocks);
    }
  };
  Parallel(ctx, sp.workers, task);
}

inline float ToFloat(float v) { return v; }
inline float ToFloat(Ort::Float16_t v) { return v.ToFloat(); }
template <typename T>
inline T FromFloat(float v) { return T(v); }

// n values from src to dst, converted between float and the element type (copied where they are
// the same type).
template <typename To, typename From>
inline void CopyRow(To* dst, const From* src, int64_t n) {
  if constexpr (std::is_same_v<To, From>) {
    std::memcpy(dst, src, sizeof(To) * n);
  } else if constexpr (std::is_same_v<To, float>) {
    for (int64_t i = 0; i < n; ++i) dst[i] = ToFloat(src[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) dst[i] = FromFloat<To>(src[i]);
  }
}

// The call on the fused kernel: X and the outputs of element type T (float or float16).
template <typename T, typename Format>
void RunStack(OrtKernelContext* ctx, const CpuCallPlan& plan, const CallIO& io, const Attributes& attrs,
              const Format& fmt, const KernelTable& K, AlignedBuffer<char>& buffer) {
  const Dims& d = io.dims;
  const int64_t T_ = d.T, B = d.B, H = d.H, D = d.D, L = d.L, LD = L * D;
  const int64_t steps = io.max_len;
  const int P = plan.threads;
  const int64_t np = fmt.Panels(), Hp = np * kUnits, Gp = np * kPanel;

  const bool fp32 = std::is_same_v<T, float>;
  const bool x_direct = fp32 && attrs.layout == 0;
  T* y_out = static_cast<T*>(io.out[kY]);
  // The last layer writes Y itself where Y is [T, 1, B, H] fp32, i.e. [T*B][H] time-major.
  const bool y_direct = fp32 && attrs.layout == 0 && D == 1 && y_out;
  int64_t slots = 1;
  for (const LayerPlan& lp : plan.layers)
    slots = std::max(slots, D * lp.recurrence.batch_chunks * lp.recurrence.unit_chunks * lp.recurrence.row_chunks);
  const int64_t rows = T_ * B;
  Carver carve;
  const size_t f = sizeof(float);
  const size_t x_at = x_direct ? 0 : carve(rows * d.I * f);
  const size_t gx_at = carve(steps * B * D * Gp * f);
  const size_t lay_at[2] = {carve(L > 1 || !y_direct ? rows * D * H * f : 0), carve(L > 1 ? rows * D * H * f : 0)};
  const size_t h_at = carve(D * 2 * B * Hp * f), c_at = carve(D * B * Hp * f);
  const size_t fmt_at = carve(fmt.ScratchBytes(d, steps, slots));
  char* base = buffer.Reserve(std::max<size_t>(carve.total, 64));
  auto at = [base](size_t offset) { return At<float>(base, offset); };
  float* gx = at(gx_at);
  float* hbuf = at(h_at);
  float* cbuf = at(c_at);

  // Layer 0's input, time-major fp32.
  const float* x0;
  if (x_direct) {
    x0 = static_cast<const float*>(io.in[kX]);
  } else {
    float* xc = at(x_at);
    const T* x = static_cast<const T*>(io.in[kX]);
    for (int64_t t = 0; t < T_; ++t)
      for (int64_t b = 0; b < B; ++b) {
        const T* src = x + (attrs.layout == 0 ? t * B + b : b * T_ + t) * d.I;
        float* dst = xc + (t * B + b) * d.I;
        CopyRow(dst, src, d.I);
      }
    x0 = xc;
  }
  const int32_t* lens = io.seq_lens;
  auto len_of = [&](int64_t b) -> int64_t { return lens ? lens[b] : T_; };
  const T* h0 = static_cast<const T*>(io.in[kInitialH]);
  const T* c0 = static_cast<const T*>(io.in[kInitialC]);
  auto state_row = [&](int64_t k, int64_t b) { return attrs.layout == 0 ? k * B + b : b * LD + k; };

  const float* layer_in = x0;
  float* layer_out = nullptr;
  for (int64_t l = 0; l < L; ++l) {
    const LayerPlan& lp = plan.layers[l];
    const bool last = l == L - 1;
    layer_out = last && y_direct ? reinterpret_cast<float*>(y_out) : at(lay_at[l % 2]);
    float* y_write = last && !y_out ? nullptr : layer_out;
    const LayerRun run{ctx, &plan, &lp, &d, l, steps, steps * B, layer_in, d.LayerInput(l), gx, D * Gp,
                       base + fmt_at, slots, lens, h0 != nullptr, &K};

    // 1. The input projection of every step and both directions (or, where the plan says so, the
    // one step's own product: the format's Prepare hands the step the input).
    if (steps > 0 && !lp.step_projects) fmt.Project(run);

    // 2. The recurrence. Its states start from initial_h / initial_c, else zeros. Rows without
    // padding (Hp == H) that the initial states fill are not cleared first, nor is the second h
    // buffer, whose every row each step writes (a row past its end copies its h): with the
    // final states' staging copy, about 1 us of a 130 us call (T=1 B16 H256, one thread).
    const bool whole_rows = Hp == H;
    for (int64_t dir = 0; dir < D; ++dir) {
      const int64_t k = l * D + dir;
      float* h = hbuf + dir * 2 * B * Hp;
      float* c = cbuf + dir * B * Hp;
      if (!whole_rows || !h0) std::memset(h, 0, f * B * Hp);
      if (!whole_rows) std::memset(h + B * Hp, 0, f * B * Hp);
      if (!whole_rows || !c0) std::memset(c, 0, f * B * Hp);
      for (int64_t b = 0; b < B; ++b) {
        const int64_t r = state_row(k, b) * H;
        if (h0) CopyRow(h + b * Hp, h0 + r, H);
        if (c0) CopyRow(c + b * Hp, c0 + r, H);
      }
    }
    const Recurrence& rec = lp.recurrence;
    // A group's step splits over `chunks` tasks: by panels (unit_chunks) or by rows (row_chunks).
    const int64_t groups = D * rec.batch_chunks, chunks = rec.unit_chunks * rec.row_chunks;
    const bool by_rows = rec.row_chunks > 1;
    auto step_args = [&](int64_t g) {
      const int64_t dir = g / rec.batch_chunks, bc = g % rec.batch_chunks;
      const int64_t n = rec.rows_per_group;
      const int64_t b0 = n ? std::min(B, bc * n) : B * bc / rec.batch_chunks;
      const int64_t b1 = n ? std::min(B, (bc + 1) * n) : B * (bc + 1) / rec.batch_chunks;
      const int64_t k = l * D + dir;
      StepArgs a{};
      a.H = H;
      a.Hp = Hp;
      a.h_in = hbuf + dir * 2 * B * Hp + b0 * Hp;
      a.h_out = hbuf + dir * 2 * B * Hp + B * Hp + b0 * Hp;
      a.c = cbuf + dir * B * Hp + b0 * Hp;
      a.rows = b1 - b0;
      a.gx = gx + dir * Gp;
      a.gx_ld = D * Gp;
      a.y = y_write ? y_write + dir * H : nullptr;
      a.y_ld = D * H;
      a.B = B;
      a.b0 = b0;
      a.T = T_;
      a.lens = lens;
      a.reverse = attrs.reverse_only || dir == 1;
      SetCell(a, MakeCellParams(attrs, static_cast<int>(dir)));
      a.K = H;
      fmt.Prepare(a, run, k);
      return a;
    };
    auto at_step = [&](StepArgs a, int64_t s) {  // h ping-pongs between the two buffers
      a.s = s;
      a.h_zero = s == 0 && !h0;
      if (s % 2) {
        float* in = a.h_out;
        a.h_out = const_cast<float*>(a.h_in);
        a.h_in = in;
      }
      return a;
    };
    auto kk = [&](int64_t g) { return l * D + g / rec.batch_chunks; };
    auto run_group = [&](int64_t g) {  // one thread, every step
      const StepArgs a = step_args(g);
      const int64_t k = kk(g);
      const int phases = fmt.Phases(k);
      for (int64_t s = 0; s < steps; ++s) {
        const StepArgs as = at_step(a, s);
        for (int ph = 0; ph < phases; ++ph) fmt.Step(as, run, k, ph, 0, fmt.PhasePanels(k, ph), g);
      }
    };
    if (chunks == 1) {
      if (!rec.parallel_groups) {
        for (int64_t g = 0; g < groups; ++g) run_group(g);
      } else {
        std::atomic<int64_t> next{0};
        auto fn = [&](int64_t) {
          for (int64_t g; (g = next.fetch_add(1, std::memory_order_relaxed)) < groups;) run_group(g);
        };
        Parallel(ctx, std::min<int64_t>(groups, P), fn);
      }
    } else {
      // Tasks of one group claim (step, phase, chunk) items in order; an item waits until the
      // previous phase is complete. Items are claimed in order, so whatever is waited for is
      // already being run by a live thread: no deadlock however many of the tasks the pool runs
      // at once.
      std::unique_ptr<GroupSync[]> sync(new GroupSync[groups]);
      auto run_items = [&](int64_t g) {
        const int64_t k = kk(g);
        const int64_t ph = fmt.Phases(k), total = steps * ph * chunks;
        GroupSync& gs = sync[g];
        const StepArgs a = step_args(g);
        for (int64_t i; (i = gs.next.fetch_add(1, std::memory_order_relaxed)) < total;) {
          const int64_t v = i / chunks, s = v / ph, ch = i % chunks;
          int spins = 0;
          while (gs.done.load(std::memory_order_acquire) < v * chunks) SpinPause(spins);
          const int phase = static_cast<int>(v % ph);
          const int64_t q = fmt.PhasePanels(k, phase);
          fmt.Step(at_step(a, s), run, k, phase, q * ch / chunks, q * (ch + 1) / chunks, g * chunks + ch);
          gs.done.fetch_add(1, std::memory_order_acq_rel);
        }
      };
      // Rows split (by_rows): chunk ch is every panel of a range of the group's rows, whose state
      // (h, c, the format's slot g * chunks + ch) only its items touch; the meeting carries what the
      // format shares between a step's chunks (the int8 format's range of h). A task keeps to its
      // own chunk, step after step (its rows stay in its core's caches), and runs another chunk's
      // item only where that item is unclaimed and the one its own waits for: whatever a task waits
      // for is then being run by a live thread, and no item waits on one that nobody will run,
      // however many of the tasks the pool runs at once.
      std::unique_ptr<ChunkClaims[]> claims(by_rows ? new ChunkClaims[groups * chunks] : nullptr);
      auto run_rows = [&](int64_t g, int64_t home) {
        const int64_t k = kk(g);
        const int64_t ph = fmt.Phases(k), total = steps * ph;  // (step, phase) items per chunk
        GroupSync& gs = sync[g];
        ChunkClaims* claimed = claims.get() + g * chunks;
        const StepArgs a = step_args(g);
        auto run_item = [&](int64_t v, int64_t ch) {
          StepArgs p = a;
          const int64_t r0 = a.rows * ch / chunks, r1 = a.rows * (ch + 1) / chunks;
          p.h_in += r0 * Hp;
          p.h_out += r0 * Hp;
          p.c += r0 * Hp;
          p.b0 += r0;
          p.rows = r1 - r0;
          p.row_chunk = ch;
          p.row_chunks = chunks;
          const int phase = static_cast<int>(v % ph);
          fmt.Step(at_step(p, v / ph), run, k, phase, 0, fmt.PhasePanels(k, phase), g * chunks + ch);
          gs.done.fetch_add(1, std::memory_order_acq_rel);
        };
        // Claims item v of chunk ch where ready (every item of v - 1 done) and not yet claimed.
        auto try_run = [&](int64_t ch, int64_t v) {
          if (gs.done.load(std::memory_order_acquire) < v * chunks) return false;
          if (!claimed[ch].next.compare_exchange_strong(v, v + 1, std::memory_order_acq_rel)) return false;
          run_item(v, ch);
          return true;
        };
        for (int spins = 0;;) {
          const int64_t v = claimed[home].next.load(std::memory_order_acquire);
          if (v < total && try_run(home, v)) {
            spins = 0;
            continue;
          }
          bool left = v < total, ran = false;
          for (int64_t ch = 0; ch < chunks && !ran; ++ch) {
            const int64_t w = claimed[ch].next.load(std::memory_order_acquire);
            if (w >= total) continue;
            left = true;
            if (ch != home && (w < v || v >= total)) ran = try_run(ch, w);
          }
          if (!left) break;
          if (ran)
            spins = 0;
          else
            SpinPause(spins);
        }
      };
      auto run_task = [&](int64_t g, int64_t ch) {
        if (by_rows)
          run_rows(g, ch);
        else
          run_items(g);
      };
      if (rec.groups_in_turn) {
        for (int64_t g = 0; g < groups; ++g) {
          auto fn = [&](int64_t task) { run_task(g, task); };
          Parallel(ctx, chunks, fn);
        }
      } else {
        auto fn = [&](int64_t task) { run_task(task / chunks, task % chunks); };
        Parallel(ctx, groups * chunks, fn);
      }
    }

    // A lower layer's output past a sequence's end is 0: the next layer's input there (the int8
    // format quantizes it with the rest).
    if (!last && lens)
      for (int64_t t = 0; t < steps; ++t)
        for (int64_t b = 0; b < B; ++b)
          if (t >= len_of(b)) std::memset(layer_out + (t * B + b) * D * H, 0, f * D * H);

    // Final states of this layer, into Y_h / Y_c (those asked for): a sequence of length 0 ends in
    // zeros. Its rows of the outputs are its own, and its initial states were read before its
    // steps: written now, they cannot meet another layer's reads.
    for (int which : {kYH, kYC}) {
      T* out = static_cast<T*>(io.out[which]);
      if (!out) continue;
      for (int64_t dir = 0; dir < D; ++dir) {
        const int64_t k = l * D + dir;
        const float* src = which == kYH ? hbuf + dir * 2 * B * Hp + (steps % 2) * B * Hp : cbuf + dir * B * Hp;
        for (int64_t b = 0; b < B; ++b) {
          T* dst = out + state_row(k, b) * H;
          if (len_of(b) == 0)
            std::fill_n(dst, H, FromFloat<T>(0.f));
          else
            CopyRow(dst, src + b * Hp, H);
        }
      }
    }
    layer_in = layer_out;
  }

  // Outputs. Positions past a sequence's end are 0.
  if (y_out) {
    if (y_direct) {
      for (int64_t t = 0; t < T_; ++t)
        for (int64_t b = 0; b < B; ++b)
          if (t >= len_of(b)) std::memset(static_cast<void*>(y_out + (t * B + b) * H), 0, f * H);
    } else {
      for (int64_t t = 0; t < T_; ++t)
        for (int64_t dir = 0; dir < D; ++dir)
          for (int64_t b = 0; b < B; ++b) {
            const int64_t row = attrs.layout == 0 ? (t * D + dir) * B + b : (b * T_ + t) * D + dir;
            T* dst = y_out + row * H;
            if (t >= len_of(b)) {
              std::fill_n(dst, H, FromFloat<T>(0.f));
              continue;
            }
            const float* src = layer_out + (t * B + b) * D * H + dir * H;
            CopyRow(dst, src, H);
          }
    }
  }
}

}  // namespace lstm_ort::cpu
