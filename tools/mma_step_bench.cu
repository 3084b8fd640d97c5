// The tensor-core step (custom_ops/cuda/mma_step/) on a GPU machine without onnxruntime: the
// op's CUDA path (RunLstmCuda, as cuda_ops.cc calls it, with its step graphs) on random weights.
//   tools/mma_step_build.sh            builds ./build-mma/mma_step_bench (here or on the GPU host)
//   mma_step_bench check               every precision mode, operand and tile against a float64 CPU
//                                      reference on fresh random inputs (outputs poisoned first)
//   mma_step_bench sanitize            one small call per kernel, for compute-sanitizer
//   mma_step_bench time [runs]         old backends (mma_step=0) against the tensor-core step, ms
//   mma_step_bench time-auto [runs]    what auto runs now against mma_step=0, at the rule's shapes
//   mma_step_bench time-one L T H B D precision [runs]
// Prints one line per case; `check` exits 1 when a case is outside its mode's bound.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "call_io.h"
#include "cuda/element_traits.h"
#include "cuda/lstm_cuda.h"
#include "enum_names.h"
#include "overrides.h"

using namespace lstm_ort;

namespace {

void Ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "CUDA error at %s: %s\n", what, cudaGetErrorString(e));
    std::exit(3);
  }
}

struct Case {
  int L, D, T, I, H, B;
  bool lens = false, init = false, peep = false, reverse_only = false;
  float h0_scale = 2.f;  // initial h in [-h0_scale, h0_scale]
};

std::string Name(const Case& c) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "L%d D%d T%d I%d H%d B%d%s%s%s%s", c.L, c.D, c.T, c.I, c.H, c.B,
                c.lens ? " lens" : "", c.init ? " init" : "", c.peep ? " peep" : "", c.reverse_only ? " rev" : "");
  return buf;
}

float HalfRound(float v) { return __half2float(__float2half_rn(v)); }

// Host copies of one call's inputs (as fp32 values the element type represents exactly) and the
// device buffers of element type T.
template <typename T>
struct Call {
  Case c;
  Dims d;
  std::vector<float> x, w, b, p, h0, c0;
  std::vector<int32_t> lens;
  int max_len = 0;
  std::vector<void*> device;
  CallIO io;
  void* y = nullptr;
  void* yh = nullptr;
  void* yc = nullptr;

  explicit Call(const Case& cs, unsigned seed) : c(cs) {
    d = MakeDims(c.L, c.D, c.T, c.B, c.I, c.H);
    std::mt19937 gen(seed);
    const float s = 1.f / std::sqrt(static_cast<float>(c.H));
    auto fill = [&](std::vector<float>& v, size_t n, float lo, float hi) {
      std::uniform_real_distribution<float> u(lo, hi);
      v.resize(n);
      for (auto& e : v) {
        e = u(gen);
        if (std::is_same_v<T, __half>) e = HalfRound(e);
      }
    };
    fill(x, static_cast<size_t>(d.T * d.B * d.I), -1.f, 1.f);
    fill(w, static_cast<size_t>(d.WeightCount()), -s, s);
    fill(b, static_cast<size_t>(d.BiasCount()), -s, s);
    if (c.peep) fill(p, static_cast<size_t>(d.PeepholeCount()), -0.5f, 0.5f);
    if (c.init) {
      fill(h0, static_cast<size_t>(d.L * d.D * d.B * d.H), -c.h0_scale, c.h0_scale);
      fill(c0, static_cast<size_t>(d.L * d.D * d.B * d.H), -1.f, 1.f);
    }
    lens.assign(c.B, c.T);
    if (c.lens) {
      std::uniform_int_distribution<int> u(0, c.T);
      for (auto& l : lens) l = u(gen);
      lens[0] = c.T;
      if (c.B > 2) lens[1] = 0;
    }
    max_len = *std::max_element(lens.begin(), lens.end());
    io.dims = d;
    io.max_len = max_len;
    io.seq_lens = c.lens ? lens.data() : nullptr;
    io.in[kX] = Upload(x);
    io.in[kW] = Upload(w);
    io.in[kB] = Upload(b);
    if (c.peep) io.in[kP] = Upload(p);
    if (c.init) {
      io.in[kInitialH] = Upload(h0);
      io.in[kInitialC] = Upload(c0);
    }
    y = Alloc(static_cast<size_t>(d.T * d.D * d.B * d.H));
    yh = Alloc(static_cast<size_t>(d.L * d.D * d.B * d.H));
    yc = Alloc(static_cast<size_t>(d.L * d.D * d.B * d.H));
    io.out[kY] = y;
    io.out[kYH] = yh;
    io.out[kYC] = yc;
  }
  ~Call() {
    for (void* p : device) cudaFree(p);
  }
  void* Alloc(size_t n) {
    void* p = nullptr;
    Ok(cudaMalloc(&p, n * sizeof(T)), "malloc");
    device.push_back(p);
    return p;
  }
  void* Upload(const std::vector<float>& v) {
    std::vector<T> t(v.size());
    for (size_t i = 0; i < v.size(); ++i) t[i] = static_cast<T>(v[i]);
    void* p = Alloc(v.size());
    Ok(cudaMemcpy(p, t.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice), "upload");
    return p;
  }
  void Poison() {
    Ok(cudaMemset(y, 0xff, sizeof(T) * d.T * d.D * d.B * d.H), "poison");
    Ok(cudaMemset(yh, 0xff, sizeof(T) * d.L * d.D * d.B * d.H), "poison");
    Ok(cudaMemset(yc, 0xff, sizeof(T) * d.L * d.D * d.B * d.H), "poison");
  }
  std::vector<float> Download(void* p, size_t n) const {
    std::vector<T> t(n);
    Ok(cudaMemcpy(t.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost), "download");
    std::vector<float> f(n);
    for (size_t i = 0; i < n; ++i) f[i] = static_cast<float>(t[i]);
    return f;
  }
  // Y, Y_h, Y_c one after the other.
  std::vector<float> Outputs() const {
    auto out = Download(y, static_cast<size_t>(d.T * d.D * d.B * d.H));
    auto h = Download(yh, static_cast<size_t>(d.L * d.D * d.B * d.H));
    auto cc = Download(yc, static_cast<size_t>(d.L * d.D * d.B * d.H));
    out.insert(out.end(), h.begin(), h.end());
    out.insert(out.end(), cc.begin(), cc.end());
    return out;
  }
};

double Sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// FusedLSTM in float64 (layout 0, default activations), outputs as Call::Outputs orders them.
std::vector<double> Reference(const Case& c, const Dims& d, const std::vector<float>& x, const std::vector<float>& w,
                              const std::vector<float>& b, const std::vector<float>& p, const std::vector<float>& h0,
                              const std::vector<float>& c0, const std::vector<int32_t>& lens) {
  const int T = c.T, B = c.B, H = c.H, D = c.D, L = c.L, G = 4 * H;
  std::vector<double> in(x.begin(), x.end()), y, yh(static_cast<size_t>(L) * D * B * H), yc(yh.size());
  int I = c.I;
  std::vector<double> out;
  for (int l = 0; l < L; ++l) {
    out.assign(static_cast<size_t>(T) * B * D * H, 0.0);  // [T][B][D*H]
    for (int dir = 0; dir < D; ++dir) {
      const bool rev = c.reverse_only || dir == 1;
      const float* W = w.data() + d.WeightOffset(l, dir);
      const int k = l * D + dir;
      std::vector<double> h(static_cast<size_t>(B) * H, 0.0), cs(h.size(), 0.0), g(G);
      if (c.init)
        for (size_t i = 0; i < h.size(); ++i) {
          h[i] = h0[static_cast<size_t>(k) * B * H + i];
          cs[i] = c0[static_cast<size_t>(k) * B * H + i];
        }
      for (int step = 0; step < T; ++step) {
        std::vector<double> hn = h;
        for (int bb = 0; bb < B; ++bb) {
          if (step >= lens[bb]) continue;
          const int t = rev ? lens[bb] - 1 - step : step;
          for (int j = 0; j < G; ++j) g[j] = b[static_cast<size_t>(k) * G + j];
          const double* xr = in.data() + (static_cast<size_t>(t) * B + bb) * I;
          for (int i = 0; i < I; ++i) {
            const float* wr = W + static_cast<size_t>(i) * G;
            for (int j = 0; j < G; ++j) g[j] += xr[i] * wr[j];
          }
          for (int i = 0; i < H; ++i) {
            const float* wr = W + static_cast<size_t>(I + i) * G;
            const double hv = h[static_cast<size_t>(bb) * H + i];
            for (int j = 0; j < G; ++j) g[j] += hv * wr[j];
          }
          for (int u = 0; u < H; ++u) {
            double pi = 0, po = 0, pf = 0;
            if (c.peep) {
              pi = p[static_cast<size_t>(k) * 3 * H + u];
              po = p[static_cast<size_t>(k) * 3 * H + H + u];
              pf = p[static_cast<size_t>(k) * 3 * H + 2 * H + u];
            }
            double& cc = cs[static_cast<size_t>(bb) * H + u];
            const double ig = Sigmoid(g[4 * u] + pi * cc), fg = Sigmoid(g[4 * u + 2] + pf * cc);
            const double gg = std::tanh(g[4 * u + 3]);
            cc = fg * cc + ig * gg;
            const double og = Sigmoid(g[4 * u + 1] + po * cc);
            const double hv = og * std::tanh(cc);
            hn[static_cast<size_t>(bb) * H + u] = hv;
            out[(static_cast<size_t>(t) * B + bb) * D * H + dir * H + u] = hv;
          }
        }
        h = hn;
      }
      for (int bb = 0; bb < B; ++bb)
        for (int u = 0; u < H; ++u) {
          const size_t at = (static_cast<size_t>(k) * B + bb) * H + u;
          yh[at] = lens[bb] ? h[static_cast<size_t>(bb) * H + u] : 0.0;
          yc[at] = lens[bb] ? cs[static_cast<size_t>(bb) * H + u] : 0.0;
        }
    }
    in = out;
    I = D * H;
  }
  // Y [T][D][B][H] from the last layer's [T][B][D*H].
  std::vector<double> all(static_cast<size_t>(T) * D * B * H);
  for (int t = 0; t < T; ++t)
    for (int dir = 0; dir < D; ++dir)
      for (int bb = 0; bb < B; ++bb)
        for (int u = 0; u < H; ++u)
          all[((static_cast<size_t>(t) * D + dir) * B + bb) * H + u] = out[(static_cast<size_t>(t) * B + bb) * D * H + dir * H + u];
  all.insert(all.end(), yh.begin(), yh.end());
  all.insert(all.end(), yc.begin(), yc.end());
  return all;
}

// docs/ops.md's bound of a mode: |ours - ref| <= atol + rtol |ref|; float16 models take the looser
// of float16's and the mode's.
void Bound(Precision p, bool half_model, double* atol, double* rtol) {
  double a = 1e-4, r = 1e-5;
  if (p == Precision::kTf32 || p == Precision::kAuto) a = r = 2e-3;
  if (p == Precision::kFp16) a = r = 2e-2;
  if (p == Precision::kBf16) a = r = 5e-2;
  if (half_model) {
    a = std::max(a, 3.9e-3);
    r = std::max(r, 3.9e-3);
  }
  *atol = a;
  *rtol = r;
}

Attributes AttrsOf(const Case& c, Precision p) {
  Attributes a;
  a.hidden_size = c.H;
  a.num_layers = c.L;
  a.num_directions = c.D;
  a.reverse_only = c.reverse_only;
  a.precision = p;
  for (auto& dir : a.act) {
    dir[0] = {ActKind::kSigmoid, 0.f, 0.f};
    dir[1] = {ActKind::kTanh, 0.f, 0.f};
    dir[2] = {ActKind::kTanh, 0.f, 0.f};
  }
  return a;
}

template <typename T>
CallPlan PlanFor(const Call<T>& call, const Attributes& attrs, const std::string& debug) {
  int device = 0;
  cudaGetDevice(&device);
  const CallInputs in{call.d, call.max_len, kElementTypeOf<T>, false};
  return PlanCall(in, attrs, CallDeviceOf<T>(device, ""), ParseDebugOptions(debug));
}

bool OnMmaStep(const CallPlan& plan) {
  for (const RangePlan& r : plan.ranges)
    if (r.backend != Backend::kMmaStep) return false;
  return !plan.ranges.empty();
}

// Scratch that grows as plans ask.
struct Scratch {
  void* p = nullptr;
  size_t bytes = 0;
  void* For(size_t n) {
    if (n > bytes) {
      if (p) cudaFree(p);
      Ok(cudaMalloc(&p, n), "scratch");
      bytes = n;
    }
    return p;
  }
};
Scratch g_scratch;
int g_reps = 3;  // calls per checked case: the first direct, the second captured, the third replayed

template <typename T>
void Run(Call<T>& call, const Attributes& attrs, CallPlan& plan, LaunchGraphs* graphs, cudaStream_t stream) {
  RunLstmCuda<T>(attrs, call.io, stream, g_scratch.For(plan.scratch_bytes), plan, KeptSplit{}, graphs);
}

struct Err {
  double max_abs = 0, worst = 0;  // worst: |ours - ref| / (atol + rtol |ref|)
  size_t bad = 0;                 // not finite
};

Err Compare(const std::vector<float>& got, const std::vector<double>& ref, double atol, double rtol) {
  Err e;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i])) {
      ++e.bad;
      continue;
    }
    const double diff = std::fabs(got[i] - ref[i]);
    e.max_abs = std::max(e.max_abs, diff);
    e.worst = std::max(e.worst, diff / (atol + rtol * std::fabs(ref[i])));
  }
  return e;
}

template <typename T>
int CheckCase(const Case& c, unsigned seed, Precision precision, const std::string& extra, bool want_mma) {
  Call<T> call(c, seed);
  const Attributes attrs = AttrsOf(c, precision);
  const auto ref = Reference(c, call.d, call.x, call.w, call.b, call.p, call.h0, call.c0, call.lens);
  double atol, rtol;
  Bound(precision, std::is_same_v<T, __half>, &atol, &rtol);
  int failures = 0;
  for (int variant = 0; variant < 2; ++variant) {
    const bool mma = variant == 0;
    if (!mma && !want_mma) continue;
    std::string debug = mma ? "mma_step=1;strict=1" + extra : "mma_step=0";
    CallPlan plan;
    try {
      plan = PlanFor(call, attrs, debug);
    } catch (const std::exception& e) {
      std::printf("  %-44s %-5s %-6s %s: not planned: %s\n", Name(c).c_str(), EnumName(precision),
                  std::is_same_v<T, __half> ? "fp16m" : "fp32m", mma ? "mma" : "old", e.what());
      if (mma) ++failures;
      continue;
    }
    if (mma && !OnMmaStep(plan)) {
      std::printf("  %s: not on the tensor-core step: %s\n", Name(c).c_str(), DescribeCallPlan(plan).c_str());
      ++failures;
      continue;
    }
    // Twice: the second call with graphs replays (a graph is captured on a key's second sighting).
    LaunchGraphs graphs;
    Err e;
    for (int rep = 0; rep < g_reps; ++rep) {
      call.Poison();
      Run(call, attrs, plan, &graphs, nullptr);
      Ok(cudaDeviceSynchronize(), "check run");
      const Err now = Compare(call.Outputs(), ref, atol, rtol);
      e.max_abs = std::max(e.max_abs, now.max_abs);
      e.worst = std::max(e.worst, now.worst);
      e.bad += now.bad;
    }
    const bool pass = e.bad == 0 && e.worst <= 1.0;
    if (mma && !pass) ++failures;
    std::printf("  %-44s %-5s %-6s %-4s max-abs %.2e  worst/bound %.3f  non-finite %zu  %s  [%s]\n", Name(c).c_str(),
                EnumName(precision), std::is_same_v<T, __half> ? "fp16m" : "fp32m", mma ? "mma" : "old", e.max_abs,
                e.worst, e.bad, pass ? "ok" : "FAIL", DescribeRanges(plan).c_str());
  }
  return failures;
}

int CheckAll() {
  int failures = 0;
  std::vector<Case> cases;
  Case a{2, 1, 20, 64, 128, 40};  // wavefront of two layers, lengths, initial states, peepholes
  a.lens = a.init = a.peep = true;
  cases.push_back(a);
  Case b{1, 2, 16, 32, 96, 20};  // bidirectional, lengths, a partial row tile
  b.lens = true;
  cases.push_back(b);
  Case c{3, 1, 12, 256, 256, 64};  // three layers, no states
  cases.push_back(c);
  Case r{1, 1, 10, 48, 64, 33};  // reverse only, initial states beyond fp16's range (scaled copy)
  r.reverse_only = r.init = true;
  r.h0_scale = 1e5f;
  cases.push_back(r);
  Case bi2{2, 2, 9, 40, 64, 48};  // bidirectional stack: one layer per range, the upper reading both
  bi2.init = bi2.lens = true;
  cases.push_back(bi2);
  unsigned seed = 1;
  std::printf("check: against float64 on the CPU, bound per mode (docs/ops.md), 3 calls each (graphs replay)\n");
  for (const Case& cs : cases)
    for (Precision p : {Precision::kFp32, Precision::kTf32, Precision::kFp16, Precision::kBf16}) {
      // h0 beyond fp16's range: bf16 and tf32 (the scaled fp16 copy) hold it; the fp16 mode's h
      // operand is fp16 by definition (as the persistent tensor-core kernel's).
      if (cs.h0_scale > 1e4f && p == Precision::kFp16) continue;
      failures += CheckCase<float>(cs, seed++, p, "", true);
    }
  std::printf("check: every tile, resident (where it fits) and streamed\n");
  for (int tile = 0; tile < kMmaStepTiles; ++tile)
    for (const char* resident : {"", ";mma_step_resident=0"}) {
      const std::string extra = std::string(";mma_step_tile=") + kMmaStepTileTable[tile].name + resident;
      for (Precision p : {Precision::kFp32, Precision::kTf32, Precision::kBf16}) {
        const MmaOperand op = p == Precision::kFp32 ? MmaOperand::kTf32x3 : MmaOperand::kFp16;
        if (MmaStepTileTakes(op, tile)) failures += CheckCase<float>(cases[0], seed++, p, extra, false);
      }
      if (MmaStepTileTakes(MmaOperand::kFp16, tile))
        failures += CheckCase<float>(cases[2], seed++, Precision::kFp16, extra, false);
    }
  std::printf("check: the seed's stack, resident and streamed\n");
  for (const char* resident : {"", ";mma_step_resident=0"}) {
    Case seed_stack{4, 1, 30, 512, 512, 64};
    seed_stack.lens = seed_stack.init = true;
    failures += CheckCase<float>(seed_stack, seed++, Precision::kTf32, resident, false);
    failures += CheckCase<float>(seed_stack, seed++, Precision::kBf16, resident, false);
  }
  std::printf("check: float16 models\n");
  for (const Case& cs : {cases[0], cases[1], cases[2]})
    for (Precision p : {Precision::kFp32, Precision::kBf16}) failures += CheckCase<__half>(cs, seed++, p, "", true);
  std::printf("check: %d failure(s)\n", failures);
  return failures ? 1 : 0;
}

int Sanitize() {
  g_reps = 2;
  Case a{2, 1, 6, 64, 64, 24};
  a.lens = a.init = a.peep = true;
  Case b{1, 2, 5, 32, 64, 17};
  b.lens = b.init = true;
  int failures = 0;
  for (const Case& cs : {a, b}) {
    for (Precision p : {Precision::kFp32, Precision::kTf32, Precision::kBf16})
      for (int tile : {1, 3, 5}) {
        const std::string extra = std::string(";mma_step_tile=") + kMmaStepTileTable[tile].name;
        failures += CheckCase<float>(cs, 7, p, extra, false);  // resident where it fits
        failures += CheckCase<float>(cs, 7, p, extra + ";mma_step_resident=0", false);
        failures += CheckCase<float>(cs, 7, p, extra + ";mma_step_resident=0;mma_step_pdl=0", false);
      }
    failures += CheckCase<__half>(cs, 8, Precision::kFp16, "", false);
  }
  std::printf("sanitize cases: %d failure(s)\n", failures);
  return failures ? 1 : 0;
}

// Median ms of `runs` calls after warm-up, with the op's step graphs; and the outputs of the last.
template <typename T>
double TimeIt(Call<T>& call, const Attributes& attrs, CallPlan& plan, int runs, std::vector<float>* out) {
  cudaStream_t stream;
  Ok(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
  LaunchGraphs graphs;
  for (int i = 0; i < 3; ++i) Run(call, attrs, plan, &graphs, stream);
  Ok(cudaStreamSynchronize(stream), "warm-up");
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  std::vector<float> times;
  for (int i = 0; i < runs; ++i) {
    cudaEventRecord(start, stream);
    Run(call, attrs, plan, &graphs, stream);
    cudaEventRecord(stop, stream);
    Ok(cudaEventSynchronize(stop), "timed run");
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    times.push_back(ms);
  }
  std::sort(times.begin(), times.end());
  if (out) *out = call.Outputs();
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaStreamDestroy(stream);
  return times[times.size() / 2];
}

double MaxAbs(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, static_cast<double>(std::fabs(a[i] - b[i])));
  return m;
}

void TimeRow(const Case& c, Precision precision, int runs, bool tiles) {
  Call<float> call(c, 11);
  const Attributes attrs = AttrsOf(c, precision);
  // The exact side: fp32 mode on the backends before the tensor-core step.
  CallPlan exact_plan = PlanFor(call, AttrsOf(c, Precision::kFp32), "mma_step=0");
  std::vector<float> exact, out;
  TimeIt(call, AttrsOf(c, Precision::kFp32), exact_plan, 1, &exact);
  CallPlan old_plan = PlanFor(call, attrs, "mma_step=0");
  const double old_ms = TimeIt(call, attrs, old_plan, runs, &out);
  const double old_err = MaxAbs(out, exact);
  CallPlan auto_plan = PlanFor(call, attrs, "");
  const double auto_ms = TimeIt(call, attrs, auto_plan, runs, &out);
  std::string best = "-";
  double best_ms = 1e30, best_err = 0;
  std::string line;
  // -4: the planner's choice streamed (never resident); -3: one layer per range; -2: with
  // overlapping launches; -1: the planner's choice; then each tile.
  for (int tile = c.L > 1 ? -4 : -2; tile < (tiles ? kMmaStepTiles : 0); ++tile) {
    std::string debug = tile == -2   ? "mma_step=1;mma_step_pdl=1;mma_step_resident=0"
                        : tile == -3 ? "mma_step=1;mma_step_layers=1"
                        : tile == -4 ? "mma_step=1;mma_step_resident=0"
                                     : "mma_step=1";
    if (tile >= 0) debug += std::string(";mma_step_tile=") + kMmaStepTileTable[tile].name;
    CallPlan plan = PlanFor(call, attrs, debug);
    if (!OnMmaStep(plan)) {
      if (tile < 0) line += " mma:- ";
      continue;
    }
    const double ms = TimeIt(call, attrs, plan, runs, &out);
    const double err = MaxAbs(out, exact);
    char buf[96];
    if (tile == -1) {
      std::snprintf(buf, sizeof buf, " mma %.3f (err %.1e)", ms, err);
      best_ms = ms;
      best_err = err;
      best = DescribeRanges(plan);
    } else if (tile == -2) {
      std::snprintf(buf, sizeof buf, " pdl %.3f", ms);
    } else if (tile == -3) {
      std::snprintf(buf, sizeof buf, " 1layer %.3f", ms);
    } else if (tile == -4) {
      std::snprintf(buf, sizeof buf, " streamed %.3f", ms);
    } else {
      std::snprintf(buf, sizeof buf, " %s:%.3f", kMmaStepTileTable[tile].name, ms);
    }
    line += buf;
  }
  std::printf("%-30s %-5s old %.3f (err %.1e) | auto %.3f |%s | x%.2f\n", Name(c).c_str(), EnumName(precision), old_ms,
              old_err, auto_ms, line.c_str(), best_ms < 1e29 ? old_ms / best_ms : 0.0);
  std::printf("    old: %s\n    mma: %s\n", DescribeRanges(old_plan).c_str(), best.c_str());
  (void)best_err;
}

int TimeAll(int runs) {
  std::printf("time: ms, median of %d calls (H100 numbers only when the device line says so)\n", runs);
  struct Row {
    Case c;
    std::vector<Precision> modes;
    bool tiles;
  };
  const std::vector<Row> rows = {
      // inside the rule (PrefersMmaStep) or at its edges
      {{4, 1, 100, 512, 512, 64}, {Precision::kAuto, Precision::kFp32, Precision::kTf32, Precision::kFp16}, true},
      {{4, 1, 100, 512, 512, 256}, {Precision::kAuto, Precision::kFp32, Precision::kFp16}, true},
      {{4, 1, 100, 256, 256, 512}, {Precision::kAuto, Precision::kFp32}, true},
      {{2, 1, 100, 512, 512, 256}, {Precision::kAuto, Precision::kFp32}, false},
      {{2, 1, 100, 256, 256, 64}, {Precision::kTf32}, false},
      {{3, 1, 100, 512, 512, 128}, {Precision::kTf32, Precision::kFp32}, false},
      {{4, 1, 100, 256, 256, 64}, {Precision::kAuto, Precision::kTf32}, false},
      {{4, 1, 100, 1024, 1024, 64}, {Precision::kAuto, Precision::kFp32, Precision::kFp16}, true},
      {{2, 1, 100, 768, 768, 32}, {Precision::kAuto}, false},
      {{4, 1, 100, 128, 128, 256}, {Precision::kAuto}, false},
      {{8, 1, 100, 512, 512, 64}, {Precision::kTf32}, false},
      // outside: auto should equal old
      {{1, 1, 100, 512, 512, 256}, {Precision::kAuto}, false},
      {{1, 2, 100, 512, 512, 256}, {Precision::kAuto}, false},
      {{4, 1, 100, 1024, 1024, 512}, {Precision::kAuto}, false},
  };
  for (const Row& r : rows)
    for (Precision p : r.modes) TimeRow(r.c, p, runs, r.tiles && p != Precision::kAuto);
  return 0;
}

// What auto runs now against the backends before the tensor-core step (mma_step=0), at the rule's
// shapes and its edges: a short check of the planner's choices.
int TimeAuto(int runs) {
  std::printf("time-auto: ms, median of %d calls; auto (the rule) against mma_step=0\n", runs);
  const std::vector<std::pair<Case, Precision>> rows = {
      {{4, 1, 100, 512, 512, 64}, Precision::kTf32},   {{4, 1, 100, 512, 512, 64}, Precision::kFp16},
      {{4, 1, 100, 512, 512, 64}, Precision::kAuto},   {{4, 1, 100, 512, 512, 256}, Precision::kAuto},
      {{4, 1, 100, 512, 512, 256}, Precision::kFp32},  {{4, 1, 100, 512, 512, 256}, Precision::kFp16},
      {{4, 1, 100, 256, 256, 512}, Precision::kAuto},  {{4, 1, 100, 256, 256, 512}, Precision::kFp32},
      {{3, 1, 100, 512, 512, 128}, Precision::kTf32},  {{8, 1, 100, 512, 512, 64}, Precision::kTf32},
      {{4, 1, 100, 512, 512, 64}, Precision::kBf16},   {{2, 1, 100, 512, 512, 256}, Precision::kAuto},
  };
  for (const auto& [c, precision] : rows) {
    Call<float> call(c, 13);
    const Attributes attrs = AttrsOf(c, precision);
    CallPlan old_plan = PlanFor(call, attrs, "mma_step=0"), auto_plan = PlanFor(call, attrs, "");
    std::vector<float> old_out, auto_out;
    const double old_ms = TimeIt(call, attrs, old_plan, runs, &old_out);
    const double auto_ms = TimeIt(call, attrs, auto_plan, runs, &auto_out);
    std::printf("%-30s %-5s old %.3f | auto %.3f | x%.2f | max-abs auto vs old %.1e | %s\n", Name(c).c_str(),
                EnumName(precision), old_ms, auto_ms, old_ms / auto_ms, MaxAbs(auto_out, old_out),
                OnMmaStep(auto_plan) ? "tensor-core step" : "as before");
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "check";
  cudaDeviceProp prop{};
  Ok(cudaGetDeviceProperties(&prop, 0), "device");
  std::printf("device: %s, %d SMs\n", prop.name, prop.multiProcessorCount);
  try {
    if (mode == "check") return CheckAll();
    if (mode == "sanitize") return Sanitize();
    if (mode == "time") return TimeAll(argc > 2 ? std::atoi(argv[2]) : 20);
    if (mode == "time-auto") return TimeAuto(argc > 2 ? std::atoi(argv[2]) : 20);
    if (mode == "run" && argc >= 8) {  // L T H B D precision [debug]: three calls, for a profiler
      Case c{std::atoi(argv[2]), std::atoi(argv[6]), std::atoi(argv[3]), std::atoi(argv[4]), std::atoi(argv[4]),
             std::atoi(argv[5])};
      Precision p = Precision::kAuto;
      if (!ParseEnum(argv[7], &p)) return 2;
      Call<float> call(c, 5);
      const Attributes attrs = AttrsOf(c, p);
      CallPlan plan = PlanFor(call, attrs, argc > 8 ? argv[8] : "mma_step=1");
      std::printf("%s\n", DescribeCallPlan(plan).c_str());
      std::vector<float> out;
      std::printf("%.3f ms\n", TimeIt(call, attrs, plan, 3, &out));
      return 0;
    }
    if (mode == "time-one" && argc >= 9) {
      Case c{std::atoi(argv[2]), std::atoi(argv[6]), std::atoi(argv[3]), std::atoi(argv[4]), std::atoi(argv[4]),
             std::atoi(argv[5])};
      Precision p = Precision::kAuto;
      if (!ParseEnum(argv[7], &p)) return 2;
      TimeRow(c, p, argc > 8 ? std::atoi(argv[8]) : 20, true);
      return 0;
    }
  } catch (const std::exception& e) {
    std::printf("error: %s\n", e.what());
    return 4;
  }
  std::fprintf(stderr, "usage: %s check | sanitize | time [runs] | time-one L T H B D precision runs\n", argv[0]);
  return 2;
}
