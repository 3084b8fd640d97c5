// FusedLSTM on the CPU. Per layer: the input projection of every step and both directions as one
// blocked product (bias folded in), then the recurrence, each step one pass of the packed
// recurrent panels with the cell update in registers (cpu/kernels_impl.inc). Threads come from
// the session's intra-op pool (KernelContext_ParallelFor); how a layer is split over them is
// chosen from the shape (PlanRecurrence).
#include "cpu/lstm_cpu.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <tuple>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif
#include <sched.h>

#include "cpu/kernel_report.h"
#include "cpu/kernel_tuner.h"
#include "cpu/kernels.h"
#include "attribute_parsing.h"
#include "cpu/constant_input.h"
#include "cpu/pool.h"
#include "cpu/stock_stack.h"
#include "cpu_kernel_names.h"
#include "lstm_ort/cell.h"
#include "overrides.h"

namespace lstm_ort {
namespace {

using cpu::kPanel;
using cpu::kUnits;
using Buffer = AlignedBuffer<float>;

inline float ToFloat(float v) { return v; }
inline float ToFloat(Ort::Float16_t v) { return v.ToFloat(); }
template <typename T>
inline T FromFloat(float v) { return T(v); }

// Developer knobs (LSTM_ORT_CPU_*; docs/cpu.md), read once per process by the one override
// parser (overrides.h): a bad value fails the kernels with its message.
struct Knobs {
  const CpuOverrides& env = CpuOverridesFromEnvironment();
  int64_t split_min = env.split_min;        // step flops to split units over threads
  int64_t parallel_min = env.parallel_min;  // flops worth another thread
  bool verbose = env.verbose;
  // How one direction's recurrence uses its threads: 0 as planned, 1 one thread, 2 batch rows
  // split, 3 hidden-unit panels split (for measuring the plan's choices).
  int64_t split = env.split;
  // The kernel of nodes that name none (cpu_kernel attribute absent), or null.
  const char* cpu_kernel = env.cpu_kernel.empty() ? nullptr : env.cpu_kernel.c_str();
};
const Knobs& GetKnobs() {
  static const Knobs k;
  return k;
}

// ---- packed weights ----

// One factored part of one (layer, direction) packed: the first factor A [rows, rank] as plain
// column panels (kPanel columns each, the rank padded to whole panels: a product through it is a
// projection), the second B [rank, 4H] as gate panels like W's.
struct FactorPart {
  int64_t rank = 0;   // 0: not factored
  int64_t panels = 0;  // panels of A: rank padded up to panels * kPanel columns
  size_t a_off = 0, b_off = 0;
  int64_t Padded() const { return panels * kPanel; }
};

struct Packed : PackedShape {
  const void* f_src = nullptr;
  Buffer wx, wh, bias, peep, fac;
  // Per (l, d); a factored part has no wx / wh panels. The directions' wx panels are consecutive,
  // so a layer with no factored input projects both directions in one pass.
  std::vector<int64_t> wx_off, wh_off, bias_off, peep_off;
  std::vector<FactorPart> fx, fh;  // input and recurrent factors, per (l, d)

  bool InputFactored(int64_t l) const {
    for (int64_t dir = 0; dir < D; ++dir)
      if (fx[l * D + dir].rank) return true;
    return false;
  }
};

// Rows [0, rows) of a row-major [rows][cols] source (column c) as plain column panels.
template <typename S>
void PackColumns(float* dst, const S* src, int64_t rows, int64_t cols) {
  for (int64_t c = 0; c < cols; ++c) {
    float* panel = dst + (c / kPanel) * rows * kPanel;
    for (int64_t r = 0; r < rows; ++r) panel[cpu::PanelIndex(rows, r, c % kPanel)] = ToFloat(src[r * cols + c]);
  }
}

// Rows [0, rows) of a row-major [rows][4H] source in the contract's column order (4j + g) as gate panels.
template <typename S>
void PackGates(float* dst, const S* src, int64_t rows, int64_t H) {
  for (int64_t j = 0; j < H; ++j) {
    float* panel = dst + (j / kUnits) * rows * kPanel;
    for (int g = 0; g < kGates; ++g) {
      const int64_t col = kGates * j + g, pc = g * kUnits + j % kUnits;
      for (int64_t r = 0; r < rows; ++r) panel[cpu::PanelIndex(rows, r, pc)] = ToFloat(src[r * kGates * H + col]);
    }
  }
}

// Packs contract-layout W, B, P and factors (element type S) into panels (see cpu/kernels.h).
template <typename S>
void Pack(Packed& pk, const Dims& d, const Ranks& ranks, const S* w, const S* b, const S* p, const S* f) {
  pk.I = d.I;
  pk.H = d.H;
  pk.L = d.L;
  pk.D = d.D;
  pk.np = (d.H + kUnits - 1) / kUnits;
  pk.Hp = pk.np * kUnits;
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
          if (b) bias[pk.bias_off[l] + (dir * np + panel) * kPanel + g * kUnits + u] = ToFloat(b[k * kGates * H + kGates * j + g]);
        if (peep)
          for (int g = 0; g < 3; ++g) peep[pk.peep_off[k] + g * pk.Hp + j] = ToFloat(p[k * 3 * H + g * H + j]);
      }
    }
  }
}

// A constant initializer's data, or null (absent, or a graph input).
// `found` (if given) tells a constant with no elements, whose data may be null, from no constant.
const void* ConstantInput(const OrtKernelInfo* info, size_t index, size_t* count, bool* fp16, bool* found = nullptr) {
  if (found) *found = false;
  const OrtValue* value = ConstantValue(info, index);
  if (!value) return nullptr;
  Ort::ConstValue v(value);
  auto info_shape = v.GetTensorTypeAndShapeInfo();
  *count = info_shape.GetElementCount();
  *fp16 = info_shape.GetElementType() == ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16;
  if (found) *found = true;
  return v.GetTensorRawData();
}

// ---- the recurrence plan ----

struct Plan {
  int64_t batch_chunks = 1;  // groups of batch rows per direction, never synchronised
  int64_t unit_chunks = 1;   // threads splitting one group's panels, meeting after every step
  bool groups_in_turn = false;  // the groups run one after another, each on all the threads
};

// Recurrent weights that two directions may stream at once, each on its own thread, without
// evicting each other from the last-level cache.
constexpr double kSharedCacheBytes = 16 << 20;

// Threads for one layer's recurrence (P threads available); step_flops and weight_bytes are one
// direction's (less than 2B*H*4H and 4H*H*4 when its recurrence is factored).
Plan PlanRecurrence(const Dims& d, int64_t np, int64_t steps, int P, double step_flops, double weight_bytes) {
  Plan plan;
  const Knobs& kn = GetKnobs();
  if (P <= 1 || steps == 0) return plan;
  const int64_t per_dir = std::max<int64_t>(1, P / d.D);
  if (kn.split == 1) return plan;
  if (kn.split == 2) {
    plan.batch_chunks = std::min<int64_t>(per_dir, d.B);
    return plan;
  }
  if (kn.split == 3) {  // with fewer threads than directions: the directions in turn
    plan.groups_in_turn = per_dir == 1 && d.D > 1;
    plan.unit_chunks = std::min<int64_t>(plan.groups_in_turn ? P : per_dir, np);
    return plan;
  }
  if (per_dir <= 1) {
    // One thread per direction, unless the directions' weights together do not stay in cache:
    // then each step streams them from memory, and the directions are faster in turn, each
    // streamed by every thread, as stock runs them (H1024 B1 T100 bi, 2 threads: 68-98 -> 50-67
    // ms). H512's 2 x 4 MiB is faster on a thread each (10-12 ms against 12-13 in turn).
    if (d.D > 1 && d.D * weight_bytes > kSharedCacheBytes && step_flops >= kn.split_min) {
      plan.unit_chunks = std::min<int64_t>(P, np);
      plan.groups_in_turn = true;
    }
    return plan;
  }
  if (step_flops * steps < kn.parallel_min) return plan;
  // Batch rows split with no synchronisation while each thread still gets whole row tiles and
  // the weights stay in cache; else the panels split, which costs a meeting per step.
  const bool weights_cached = weight_bytes <= (1 << 20);
  if (d.B >= 3 * per_dir && weights_cached) {
    plan.batch_chunks = per_dir;
    return plan;
  }
  if (step_flops >= kn.split_min) {
    plan.unit_chunks = std::min<int64_t>(per_dir, np);
    return plan;
  }
  if (d.B >= 2 * per_dir) plan.batch_chunks = std::min<int64_t>(per_dir, d.B);
  return plan;
}

// How the input projection [M rows] x [Q panels] is cut into items for `workers` threads.
struct ProjectSplit {
  int64_t row_blocks = 1, panel_blocks = 1, tiles = 1;
  // Row blocks are whole 6-row tiles, their counts as even as the tiles allow.
  int64_t RowStart(int64_t r, int64_t M) const { return std::min(M, 6 * (tiles * r / row_blocks)); }
};

// About four items per thread (claimed in order, so a slow thread takes fewer). Each row block reads
// all the weights of its panels and each panel block all the input rows of its row block, so the
// split minimises row_blocks * weight bytes + panel_blocks * input bytes (pb = sqrt(want * W / A)).
// The items are of one size and their count a multiple of the threads where the shape allows:
// 9 items on 2 threads (3 panel blocks of 21 and 22 panels, 3 row blocks) left one thread a ninth
// of the projection alone at the end.
ProjectSplit SplitProjection(int64_t M, int64_t I, int64_t Q, int64_t workers) {
  ProjectSplit sp;
  const int64_t want = 4 * workers;
  sp.tiles = (M + 5) / 6;
  const double weight_bytes = double(Q) * I * kPanel, input_bytes = double(M) * I;
  const double best_pb = std::sqrt(want * weight_bytes / std::max(1.0, input_bytes));
  const int64_t lo = std::min(std::min(Q, want), std::max<int64_t>(1, want / sp.tiles)), hi = std::min(Q, want);
  sp.panel_blocks = std::clamp<int64_t>(std::llround(best_pb), lo, hi);
  double best_miss = 1e30;  // a divisor of Q in [lo, hi] nearest best_pb (by ratio): panel blocks of one width
  for (int64_t pb = lo; pb <= hi; ++pb) {
    const double miss = std::abs(std::log(pb / best_pb));
    if (Q % pb == 0 && miss < best_miss) best_miss = miss, sp.panel_blocks = pb;
  }
  sp.row_blocks = (want + sp.panel_blocks - 1) / sp.panel_blocks;
  while ((sp.row_blocks * sp.panel_blocks) % workers) ++sp.row_blocks;
  sp.row_blocks = std::min(sp.row_blocks, sp.tiles);
  return sp;
}

// A projection [M rows] x [Q panels] on up to P threads of the session's pool.
void ProjectParallel(OrtKernelContext* ctx, const cpu::KernelTable& K, const cpu::ProjectArgs& pa, int64_t M,
                     int64_t Q, int P) {
  const double flops = 2.0 * M * pa.K * Q * kPanel;
  const int64_t workers =
      std::min<int64_t>(P, std::max<int64_t>(1, static_cast<int64_t>(flops / GetKnobs().parallel_min)));
  if (workers <= 1) {
    K.project(pa, 0, M, 0, Q);
    return;
  }
  // Items: row blocks x panel blocks, claimed in order. Every row block streams its panels'
  // weights once, so rows are split only as far as the panels cannot feed the threads.
  const ProjectSplit sp = SplitProjection(M, pa.K, Q, workers);
  const int64_t items = sp.row_blocks * sp.panel_blocks;
  std::atomic<int64_t> next{0};
  auto fn = [&](int64_t) {
    for (int64_t i; (i = next.fetch_add(1, std::memory_order_relaxed)) < items;) {
      const int64_t r = i / sp.panel_blocks, q = i % sp.panel_blocks;
      K.project(pa, sp.RowStart(r, M), sp.RowStart(r + 1, M), Q * q / sp.panel_blocks, Q * (q + 1) / sp.panel_blocks);
    }
  };
  Parallel(ctx, workers, fn);
}

}  // namespace

// ---- the kernel ----

// The node's constant weights as the session holds them (KernelInfoGetConstantInput_tensor: they
// live as long as the session), to pack them again, or build stock's session, after either was
// dropped.
struct ConstantWeights {
  Dims dims;  // I, H, L, D; I = -1: W is not a constant (packed on every call)
  const void *w = nullptr, *b = nullptr, *p = nullptr, *f = nullptr;
};

template <typename T>
struct CpuLstm<T>::State {
  Attributes attrs;
  ConstantWeights constants;
  std::mutex scratch_mutex;
  Buffer scratch;
  const cpu::KernelTable* kernels = &cpu::Kernels();
  std::string node_name;

  // Each kernel's weights, made when first needed and dropped once the tuner has settled on
  // others for every shape class seen (KernelTuner::Settled); a call holds its own reference.
  // stock: stock's session of one thread (stock, stock_split); stock_threads: of the pool's size.
  std::mutex weights_mutex;
  std::shared_ptr<const Packed> packed;
  std::shared_ptr<const StockStack> stock, stock_threads;
  // Threads of the session's pool (PoolThreads), counted at the first call that can run stock's
  // kernel; 0 before.
  std::once_flag pool_counted;
  int pool_threads = 0;
  // Why onnxruntime could not make stock's session: the fused kernel runs every call from then on.
  // Written once, before the flag is set.
  std::string stock_refused;
  std::atomic<bool> stock_failed{false};
  KernelTuner tuner;

  std::shared_ptr<const Packed> PackedWeights() {
    std::lock_guard<std::mutex> lock(weights_mutex);
    if (!packed) {
      auto pk = std::make_shared<Packed>();
      const ConstantWeights& c = constants;
      Pack(*pk, c.dims, attrs.ranks, static_cast<const T*>(c.w), static_cast<const T*>(c.b),
           static_cast<const T*>(c.p), static_cast<const T*>(c.f));
      pk->w_src = c.w, pk->b_src = c.b, pk->p_src = c.p, pk->f_src = c.f;
      packed = std::move(pk);
    }
    return packed;
  }

  // Stock's session of `threads` intra-op threads for calls of this signature, or null (and
  // stock_refused says why).
  std::shared_ptr<const StockStack> StockWeights(const StockSignature& sig, int threads) {
    std::lock_guard<std::mutex> lock(weights_mutex);
    std::shared_ptr<const StockStack>& held = threads > 1 ? stock_threads : stock;
    if (held && held->signature() == sig && held->threads() == threads) return held;
    if (stock_failed.load(std::memory_order_acquire)) return nullptr;
    try {
      const ConstantWeights& c = constants;
      held = std::make_shared<StockStack>(attrs, c.dims, sig, static_cast<const float*>(c.w),
                                          static_cast<const float*>(c.b), static_cast<const float*>(c.p), threads);
    } catch (const std::exception& e) {
      RefuseLocked(std::string("onnxruntime could not make stock's LSTM session: ") + e.what());
      return nullptr;
    }
    return held;
  }

  // Stock's kernel is off for this node: every call runs the fused kernel from now on, and the
  // classes still measuring are decided for it (their report says so; the node can settle).
  void RefuseStock(const std::string& why) {
    std::lock_guard<std::mutex> lock(weights_mutex);
    RefuseLocked(why);
  }
  void RefuseLocked(const std::string& why) {
    if (stock_failed.load(std::memory_order_acquire)) return;  // the first reason stands
    stock_refused = why;
    stock_failed.store(true, std::memory_order_release);
    stock.reset();
    stock_threads.reset();
    tuner.DecideOpen(CpuKernel::kFused);  // its own lock, never taken before weights_mutex
  }

  // Drops the weights of a kernel no shape class runs any more.
  void DropUnused() {
    {
      std::lock_guard<std::mutex> lock(weights_mutex);
      if (!!packed + !!stock + !!stock_threads < 2) return;  // one kernel's weights held: nothing to drop
    }
    if (!tuner.Settled()) return;
    const bool fused = tuner.Uses(CpuKernel::kFused);
    const bool one_thread = tuner.Uses(CpuKernel::kStock) || tuner.Uses(CpuKernel::kStockSplit);
    const bool pool = tuner.Uses(CpuKernel::kStockThreads);
    std::lock_guard<std::mutex> lock(weights_mutex);
    if (!fused) packed.reset();
    if (!one_thread) stock.reset();
    if (!pool) stock_threads.reset();
  }

  // The session pool's thread count, counted once (PoolThreads: at most PlanThreads()).
  int PoolSize(OrtKernelContext* ctx) {
    std::call_once(pool_counted, [&] { pool_threads = PoolThreads(ctx); });
    return pool_threads;
  }
};

template <typename T>
CpuLstm<T>::CpuLstm(const OrtKernelInfo* info, const Attributes& attrs) : state_(std::make_unique<State>()) {
  State& st = *state_;
  st.attrs = attrs;
  if (!attrs.cpu_kernel_set && GetKnobs().cpu_kernel && *GetKnobs().cpu_kernel)
    st.attrs.cpu_kernel = ResolveCpuKernel(GetKnobs().cpu_kernel);
  st.node_name = NodeName(info);
  size_t nw = 0, nb = 0, np = 0, nf = 0;
  bool w16 = false, b16 = false, p16 = false, f16 = false, w_found = false;
  // W is empty when every part is factored: still a constant.
  const void* w = ConstantInput(info, kW, &nw, &w16, &w_found);
  const void* b = ConstantInput(info, kB, &nb, &b16);
  const void* p = ConstantInput(info, kP, &np, &p16);
  const void* f = ConstantInput(info, kFactors, &nf, &f16);
  const bool fp16 = !std::is_same_v<T, float>;
  const bool factored = attrs.ranks.Any();
  Dims d;
  d.H = attrs.hidden_size;
  d.L = attrs.num_layers;
  d.D = attrs.num_directions;
  d.I = w_found && (f || !factored)
            ? InputSizeFromCounts(d, attrs.ranks, static_cast<int64_t>(nw), f ? static_cast<int64_t>(nf) : 0)
            : -1;
  st.constants.dims = d;
  st.constants.dims.I = -1;
  for (const TunedStrategy& t : attrs.tuned)
    if (t.gpu == std::string(kTunedCpuPrefix) + CpuName()) st.tuner.Preset(ClassOf(t.T, t.B), t.cpu_kernel);
  RegisterKernel(this, st.node_name, &st.tuner, [&st] {
    std::lock_guard<std::mutex> lock(st.weights_mutex);
    std::string held;
    const std::pair<const char*, bool> kernels[] = {
        {"fused", st.packed != nullptr}, {"stock", st.stock != nullptr}, {"stock_threads", st.stock_threads != nullptr}};
    for (const auto& [name, on] : kernels)
      if (on) held += (held.empty() ? "" : ",") + std::string(name);
    return held;
  });
  if (!w_found || d.I <= 0 || (nw && w16 != fp16) || (factored && f16 != fp16)) return;  // packed on every call
  for (int64_t k = 0; k < d.L * d.D; ++k)  // ranks the call would refuse: leave them to its message
    if (attrs.ranks.Input(k) > std::min(d.LayerInput(k / d.D), kGates * d.H) || attrs.ranks.Recurrent(k) > d.H) return;
  if (b && (b16 != fp16 || static_cast<int64_t>(nb) != d.BiasCount())) b = nullptr;
  if (p && (p16 != fp16 || static_cast<int64_t>(np) != d.PeepholeCount())) p = nullptr;
  st.constants = {d, w, b, p, f};
  st.PackedWeights();
  if (GetKnobs().verbose)
    std::fprintf(stderr, "lstm_ort cpu: packed constant weights at kernel creation (I=%lld, H=%lld, L=%lld, D=%lld, %s)\n",
                 static_cast<long long>(d.I), static_cast<long long>(d.H), static_cast<long long>(d.L),
                 static_cast<long long>(d.D), st.kernels->isa);
}

template <typename T>
CpuLstm<T>::~CpuLstm() { UnregisterKernel(this); }

// Why stock's kernel cannot run this call of the node, or null when it can.
template <typename T>
const char* CpuLstm<T>::WhyNotStock(const CallIO& io) const {
  const State& st = *state_;
  const ConstantWeights& c = st.constants;
  if (!std::is_same_v<T, float>) return "onnxruntime's CPU LSTM has no float16 kernel";
  if (st.attrs.ranks.Any()) return "the node has factored weights, which stock's LSTM does not take";
  if (c.dims.I != io.dims.I || c.w != io.in[kW] || c.b != io.in[kB] || c.p != io.in[kP])
    return "the weights are not constant initializers";
  if (io.dims.T < 1 || io.dims.B < 1) return "an empty call";
  if (st.stock_failed.load(std::memory_order_acquire)) return st.stock_refused.c_str();
  return nullptr;
}

template <typename T>
void CpuLstm<T>::Compute(OrtKernelContext* ctx, const CallIO& io) {
  State& st = *state_;
  const CpuKernel forced = st.attrs.cpu_kernel;
  const char* why_not = WhyNotStock(io);
  if (forced == CpuKernel::kFused || (forced == CpuKernel::kAuto && why_not)) {
    RunFused(ctx, io);
    return;
  }
  if (why_not) Fail(std::string("cpu_kernel=") + CpuKernelName(forced) + " cannot run this call: " + why_not);
  const ShapeClass shape = ClassOf(io.dims.T, io.dims.B);
  const int pieces = static_cast<int>(std::min<int64_t>(io.dims.B, PlanThreads()));
  KernelTuner::Pick pick{forced, false};
  if (forced == CpuKernel::kAuto) {
    std::vector<CpuKernel> candidates = {CpuKernel::kFused, CpuKernel::kStock};
    if (pieces > 1) candidates.push_back(CpuKernel::kStockSplit);
    if (st.PoolSize(ctx) > 1) candidates.push_back(CpuKernel::kStockThreads);
    pick = st.tuner.Choose(shape, candidates);
  }
  CpuKernel kernel = pick.kernel;
  const auto start = std::chrono::steady_clock::now();
  bool stock_ran = false;
  if (kernel != CpuKernel::kFused) {
    try {
      if (kernel == CpuKernel::kStockThreads)
        stock_ran = RunStock(ctx, io, 1, st.PoolSize(ctx));
      else
        stock_ran = RunStock(ctx, io, kernel == CpuKernel::kStockSplit ? pieces : 1, 1);
    } catch (const std::exception& e) {
      if (forced != CpuKernel::kAuto) throw;
      // auto never fails a call its own kernel can answer: stock's kernel is off for this node from
      // now on, with the reason in the report's words.
      st.RefuseStock(std::string("onnxruntime's LSTM failed a call: ") + e.what());
    }
    if (!stock_ran && forced != CpuKernel::kAuto) Fail(st.stock_refused);
  }
  if (!stock_ran) {
    kernel = CpuKernel::kFused;
    RunFused(ctx, io);
  }
  if (pick.measuring)
    st.tuner.Record(shape, kernel, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  else if (forced == CpuKernel::kAuto)
    st.DropUnused();
}

// Stock's kernel on this call in `pieces` batch pieces on the session's threads, each piece on
// stock's session of `threads` threads; false when onnxruntime could not make its session
// (stock_refused says why).
template <typename T>
bool CpuLstm<T>::RunStock(OrtKernelContext* ctx, const CallIO& io, int pieces, int threads) {
  State& st = *state_;
  const StockSignature sig{io.seq_lens != nullptr, io.in[kInitialH] != nullptr, io.in[kInitialC] != nullptr};
  const std::shared_ptr<const StockStack> stock = st.StockWeights(sig, threads);
  if (!stock) return false;
  const int64_t B = io.dims.B;
  std::vector<size_t> at(pieces + 1, 0);
  for (int k = 0; k < pieces; ++k) at[k + 1] = at[k] + stock->ScratchFloats(io, B * (k + 1) / pieces - B * k / pieces);
  std::unique_lock<std::mutex> lock(st.scratch_mutex, std::try_to_lock);
  Buffer private_scratch;
  float* scratch = (lock.owns_lock() ? st.scratch : private_scratch).Reserve(std::max<size_t>(at[pieces], 16));
  std::exception_ptr failure;
  std::mutex failure_mutex;
  auto piece = [&](int64_t k) {
    try {
      stock->Run(io, B * k / pieces, B * (k + 1) / pieces, scratch + at[k]);
    } catch (...) {
      std::lock_guard<std::mutex> g(failure_mutex);
      failure = std::current_exception();
    }
  };
  Parallel(ctx, pieces, piece);
  if (failure) std::rethrow_exception(failure);
  return true;
}

template <typename T>
void CpuLstm<T>::RunFused(OrtKernelContext* ctx, const CallIO& io) {
  State& st = *state_;
  const Attributes& attrs = st.attrs;
  const cpu::KernelTable& K = *st.kernels;
  const Knobs& kn = GetKnobs();
  const Dims& d = io.dims;
  const int64_t T_ = d.T, B = d.B, H = d.H, D = d.D, L = d.L, LD = L * D;
  const int64_t steps = io.max_len;

  const int P = PlanThreads();

  // Weights: the ones packed from the constant initializers when these are those, else packed now.
  const ConstantWeights& c = st.constants;
  std::shared_ptr<const Packed> held;
  Packed local;
  const Packed* pk = &local;
  if (c.dims.I == d.I && c.w == io.in[kW] && c.b == io.in[kB] && c.p == io.in[kP] && c.f == io.in[kFactors]) {
    held = st.PackedWeights();
    pk = held.get();
  } else {
    Pack(local, d, attrs.ranks, static_cast<const T*>(io.in[kW]), static_cast<const T*>(io.in[kB]),
         static_cast<const T*>(io.in[kP]), static_cast<const T*>(io.in[kFactors]));
  }
  const int64_t np = pk->np, Hp = pk->Hp, Gp = np * kPanel;

  // Scratch: the kernel's own buffer, or a private one while another Run holds it.
  std::unique_lock<std::mutex> lock(st.scratch_mutex, std::try_to_lock);
  Buffer private_scratch;
  Buffer& scratch = lock.owns_lock() ? st.scratch : private_scratch;

  const bool fp32 = std::is_same_v<T, float>;
  const bool x_direct = fp32 && attrs.layout == 0;
  T* y_out = static_cast<T*>(io.out[kY]);
  // The last layer writes Y itself where Y is [T, 1, B, H] fp32, i.e. [T*B][H] time-major.
  const bool y_direct = fp32 && attrs.layout == 0 && D == 1 && y_out;
  const int64_t rows = T_ * B;
  size_t n = 0;
  auto carve = [&n](int64_t count) {
    const size_t at = n;
    n += (static_cast<size_t>(count) + 15) & ~size_t(15);
    return at;
  };
  const size_t x_at = x_direct ? 0 : carve(rows * d.I);
  const size_t gx_at = carve(steps * B * D * Gp);
  const size_t lay_at[2] = {carve(L > 1 || !y_direct ? rows * D * H : 0), carve(L > 1 ? rows * D * H : 0)};
  const size_t h_at = carve(D * 2 * B * Hp), c_at = carve(D * B * Hp);
  const size_t fin_at = carve(2 * LD * B * H);
  // Factored parts: the input's product with A ([steps*B][rank], one direction at a time), and
  // each direction's h times A ([B][rank]), their ranks padded to whole panels.
  int64_t widest_x = 0, widest_h = 0;
  for (int64_t k = 0; k < LD; ++k) {
    widest_x = std::max(widest_x, pk->fx[k].Padded());
    widest_h = std::max(widest_h, pk->fh[k].Padded());
  }
  const size_t px_at = carve(steps * B * widest_x), ph_at = carve(D * B * widest_h);
  float* base = scratch.Reserve(std::max<size_t>(n, 16));
  float* gx = base + gx_at;
  float* hbuf = base + h_at;
  float* cbuf = base + c_at;
  float* h_final = base + fin_at;
  float* c_final = h_final + LD * B * H;

  // Layer 0's input, time-major fp32.
  const float* x0;
  if (x_direct) {
    x0 = static_cast<const float*>(io.in[kX]);
  } else {
    float* xc = base + x_at;
    const T* x = static_cast<const T*>(io.in[kX]);
    for (int64_t t = 0; t < T_; ++t)
      for (int64_t b = 0; b < B; ++b) {
        const T* src = x + (attrs.layout == 0 ? t * B + b : b * T_ + t) * d.I;
        float* dst = xc + (t * B + b) * d.I;
        for (int64_t i = 0; i < d.I; ++i) dst[i] = ToFloat(src[i]);
      }
    x0 = xc;
  }
  const int32_t* lens = io.seq_lens;
  const T* h0 = static_cast<const T*>(io.in[kInitialH]);
  const T* c0 = static_cast<const T*>(io.in[kInitialC]);
  auto state_row = [&](int64_t k, int64_t b) { return attrs.layout == 0 ? k * B + b : b * LD + k; };

  const float* layer_in = x0;
  float* layer_out = nullptr;
  for (int64_t l = 0; l < L; ++l) {
    const int64_t I = d.LayerInput(l);
    const bool last = l == L - 1;
    layer_out = last && y_direct ? reinterpret_cast<float*>(y_out) : base + lay_at[l % 2];
    float* y_write = last && !y_out ? nullptr : layer_out;

    // 1. Input projection of every step and both directions: [steps*B, I] x [I, D*Gp]. A
    // factored direction's goes through its rank: [steps*B, I] x A, then x B.
    const int64_t M = steps * B;
    const float* layer_bias = pk->bias.data() + pk->bias_off[l];
    if (steps > 0 && !pk->InputFactored(l)) {
      ProjectParallel(ctx, K, {layer_in, I, pk->wx.data() + pk->wx_off[l * D], I, layer_bias, gx, D * Gp, D * np}, M,
                      D * np, P);
    } else if (steps > 0) {
      for (int64_t dir = 0; dir < D; ++dir) {
        const FactorPart& f = pk->fx[l * D + dir];
        const float* bias = layer_bias + dir * np * kPanel;
        if (!f.rank) {
          ProjectParallel(ctx, K, {layer_in, I, pk->wx.data() + pk->wx_off[l * D + dir], I, bias, gx + dir * Gp, D * Gp, np},
                          M, np, P);
          continue;
        }
        float* px = base + px_at;
        ProjectParallel(ctx, K, {layer_in, I, pk->fac.data() + f.a_off, I, nullptr, px, f.Padded(), f.panels}, M,
                        f.panels, P);
        ProjectParallel(ctx, K, {px, f.Padded(), pk->fac.data() + f.b_off, f.rank, bias, gx + dir * Gp, D * Gp, np}, M,
                        np, P);
      }
    }

    // 2. The recurrence.
    for (int64_t dir = 0; dir < D; ++dir) {
      const int64_t k = l * D + dir;
      float* h = hbuf + dir * 2 * B * Hp;
      float* c = cbuf + dir * B * Hp;
      std::memset(h, 0, sizeof(float) * 2 * B * Hp);
      std::memset(c, 0, sizeof(float) * B * Hp);
      for (int64_t b = 0; b < B; ++b) {
        const int64_t r = state_row(k, b) * H;
        for (int64_t j = 0; j < H; ++j) {
          if (h0) h[b * Hp + j] = ToFloat(h0[r + j]);
          if (c0) c[b * Hp + j] = ToFloat(c0[r + j]);
        }
      }
    }
    // A factored direction's step is two products, h x A (phase 0) then (h A) x B with the cell
    // (phase 1): 2B * rank * (H + 4H) flops where the whole R takes 2B * H * 4H.
    double step_flops = 0, weight_bytes = 0;
    for (int64_t dir = 0; dir < D; ++dir) {
      const int64_t r = pk->fh[l * D + dir].rank, depth = r ? r * (H + kGates * H) : kGates * H * H;
      step_flops = std::max(step_flops, 2.0 * B * depth);
      weight_bytes = std::max(weight_bytes, 4.0 * depth);
    }
    const Plan plan = PlanRecurrence(d, np, steps, P, step_flops, weight_bytes);
    const int64_t groups = D * plan.batch_chunks, chunks = plan.unit_chunks;
    auto step_args = [&](int64_t g) {
      const int64_t dir = g / plan.batch_chunks, bc = g % plan.batch_chunks;
      const int64_t b0 = B * bc / plan.batch_chunks, b1 = B * (bc + 1) / plan.batch_chunks;
      const int64_t k = l * D + dir;
      const CellParams cell = MakeCellParams(attrs, static_cast<int>(dir));
      cpu::StepArgs a{};
      a.w = pk->wh.data() + pk->wh_off[k];
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
      cpu::SetCell(a, cell);
      a.peep = pk->has_peep ? pk->peep.data() + pk->peep_off[k] : nullptr;
      const FactorPart& f = pk->fh[k];
      if (f.rank) {
        a.w = pk->fac.data() + f.b_off;
        a.lhs = base + ph_at + dir * B * widest_h + b0 * f.Padded();  // each direction its own [B][widest]
        a.lhs_ld = f.Padded();
        a.K = f.rank;
      }
      return a;
    };
    // Phases of one step of group g: a factored recurrence first multiplies h by A.
    auto phases = [&](int64_t g) -> int64_t { return pk->fh[l * D + g / plan.batch_chunks].rank ? 2 : 1; };
    // Phase 0 of a factored step: lhs = h x A for the group's rows, panels [q0, q1) of A.
    auto factor_h = [&](const cpu::StepArgs& a, int64_t g, int64_t q0, int64_t q1) {
      if (a.h_zero) return;  // h is zero, and so is h A: the step skips the product
      const FactorPart& f = pk->fh[l * D + g / plan.batch_chunks];
      const cpu::ProjectArgs pa{a.h_in, Hp, pk->fac.data() + f.a_off, H, nullptr, const_cast<float*>(a.lhs), a.lhs_ld,
                                f.panels};
      K.project(pa, 0, a.rows, q0, q1);
    };
    auto at_step = [&](cpu::StepArgs a, int64_t s) {  // h ping-pongs between the two buffers
      a.s = s;
      a.h_zero = s == 0 && !h0;
      if (s % 2) {
        float* in = a.h_out;
        a.h_out = const_cast<float*>(a.h_in);
        a.h_in = in;
      }
      return a;
    };
    auto run_group = [&](int64_t g) {  // one thread, every step
      const cpu::StepArgs a = step_args(g);
      const bool factored = phases(g) == 2;
      for (int64_t s = 0; s < steps; ++s) {
        const cpu::StepArgs as = at_step(a, s);
        if (factored) factor_h(as, g, 0, pk->fh[l * D + g / plan.batch_chunks].panels);
        K.step(as, 0, np);
      }
    };
    if (chunks == 1) {
      const int64_t workers = std::min<int64_t>(groups, P);
      if (workers <= 1 || step_flops * steps < kn.parallel_min) {
        for (int64_t g = 0; g < groups; ++g) run_group(g);
      } else {
        std::atomic<int64_t> next{0};
        auto fn = [&](int64_t) {
          for (int64_t g; (g = next.fetch_add(1, std::memory_order_relaxed)) < groups;) run_group(g);
        };
        Parallel(ctx, workers, fn);
      }
    } else {
      // Tasks of one group claim (step, chunk) items in order; an item waits until the previous
      // step is done. Items are claimed in order, so whatever is waited for is already being run by
      // a live thread: no deadlock however many of the tasks the pool runs at once.
      // A factored step is two phases, each split over the chunks and waited for as a step is.
      std::unique_ptr<GroupSync[]> sync(new GroupSync[groups]);
      auto run_items = [&](int64_t g) {
        const int64_t ph = phases(g), total = steps * ph * chunks;
        GroupSync& gs = sync[g];
        const cpu::StepArgs a = step_args(g);
        const int64_t a_panels = pk->fh[l * D + g / plan.batch_chunks].panels;
        for (int64_t i; (i = gs.next.fetch_add(1, std::memory_order_relaxed)) < total;) {
          const int64_t v = i / chunks, s = v / ph, ch = i % chunks;
          int spins = 0;
          while (gs.done.load(std::memory_order_acquire) < v * chunks) SpinPause(spins);
          if (ph == 2 && v % 2 == 0)
            factor_h(at_step(a, s), g, a_panels * ch / chunks, a_panels * (ch + 1) / chunks);
          else
            K.step(at_step(a, s), np * ch / chunks, np * (ch + 1) / chunks);
          gs.done.fetch_add(1, std::memory_order_acq_rel);
        }
      };
      if (plan.groups_in_turn) {
        for (int64_t g = 0; g < groups; ++g) {
          auto fn = [&](int64_t) { run_items(g); };
          Parallel(ctx, chunks, fn);
        }
      } else {
        auto fn = [&](int64_t task) { run_items(task / chunks); };
        Parallel(ctx, groups * chunks, fn);
      }
    }

    // Final states of this layer.
    for (int64_t dir = 0; dir < D; ++dir) {
      const int64_t k = l * D + dir;
      const float* h = hbuf + dir * 2 * B * Hp + (steps % 2) * B * Hp;
      const float* c = cbuf + dir * B * Hp;
      for (int64_t b = 0; b < B; ++b) {
        const bool empty = (lens ? lens[b] : T_) == 0;
        for (int64_t j = 0; j < H; ++j) {
          h_final[(k * B + b) * H + j] = empty ? 0.f : h[b * Hp + j];
          c_final[(k * B + b) * H + j] = empty ? 0.f : c[b * Hp + j];
        }
      }
    }
    layer_in = layer_out;
  }

  // Outputs. Positions past a sequence's end are 0.
  if (y_out) {
    auto len_of = [&](int64_t b) -> int64_t { return lens ? lens[b] : T_; };
    if (y_direct) {
      for (int64_t t = 0; t < T_; ++t)
        for (int64_t b = 0; b < B; ++b)
          if (t >= len_of(b)) std::memset(static_cast<void*>(y_out + (t * B + b) * H), 0, sizeof(float) * H);
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
            for (int64_t j = 0; j < H; ++j) dst[j] = FromFloat<T>(src[j]);
          }
    }
  }
  for (int which : {kYH, kYC}) {
    T* out = static_cast<T*>(io.out[which]);
    if (!out) continue;
    const float* src = which == kYH ? h_final : c_final;
    for (int64_t k = 0; k < LD; ++k)
      for (int64_t b = 0; b < B; ++b) {
        T* dst = out + state_row(k, b) * H;
        const float* s = src + (k * B + b) * H;
        for (int64_t j = 0; j < H; ++j) dst[j] = FromFloat<T>(s[j]);
      }
  }
}

template class CpuLstm<float>;
template class CpuLstm<Ort::Float16_t>;

}  // namespace lstm_ort
