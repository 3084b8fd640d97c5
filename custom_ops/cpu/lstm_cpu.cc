// FusedLSTM on the CPU: per call, the plan (cpu/call_plan.h), then the kernel it names: onnxruntime's
// LSTM on the same weights (cpu/stock_stack.h), chosen per shape class by the tuner under
// cpu_kernel auto (cpu/kernel_tuner.h), or FusedLSTM's own: the stack runner (cpu/stack_run.h) over
// the node's weight format (fp32 whole or factored: cpu/float_weights.h; int8: cpu/int8/int8_format.h;
// bf16: cpu/bf16/bf16_format.h).
#include "cpu/lstm_cpu.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "attribute_parsing.h"
#include "cpu/bf16/bf16_format.h"
#include "cpu/call_plan.h"
#include "cpu/constant_input.h"
#include "cpu/cpu_features.h"
#include "cpu/float_weights.h"
#include "cpu/int8/int8_format.h"
#include "cpu/kernel_report.h"
#include "cpu/kernel_tuner.h"
#include "cpu/kernels.h"
#include "cpu/pool.h"
#include "cpu/stack_run.h"
#include "cpu/stock_stack.h"
#include "cpu_kernel_names.h"
#include "overrides.h"

namespace lstm_ort {
namespace {

namespace q8 = cpu::int8;

// A constant initializer's data, or null (absent, or a graph input). `found` (if given) tells a
// constant with no elements, whose data may be null, from no constant.
const void* ConstantInput(const OrtKernelInfo* info, size_t index, size_t* count, ONNXTensorElementDataType* type,
                          bool* found = nullptr) {
  if (found) *found = false;
  const OrtValue* value = ConstantValue(info, index);
  if (!value) return nullptr;
  Ort::ConstValue v(value);
  auto shape = v.GetTensorTypeAndShapeInfo();
  *count = shape.GetElementCount();
  *type = shape.GetElementType();
  if (found) *found = true;
  return v.GetTensorRawData();
}

// Sessions of stock's one-thread model (StockStack's copies): a copy per batch piece that runs at
// once (stock_split's pieces, one per core), each holding its own prepacked weights, so at most
// four; more pieces share them in turn. Only for stacks of at most kMaxCopiedStockWeights fp32
// weights: the contention the copies remove was measured on calls of 0.1-0.5 ms (H72-H200, under
// 1 MiB of weights), and a copy of a large stack costs its size again (H1024 I256 L2, 52 MiB:
// the process grew 217 MiB instead of 105), so large stacks keep one session.
constexpr int64_t kMaxCopiedStockWeights = int64_t{1} << 20;  // 4 MiB of fp32
int StockCopies(const Dims& d) {
  return d.WeightCount() <= kMaxCopiedStockWeights ? std::min(4, PlanThreads()) : 1;
}

}  // namespace

// The machine as the plan sees it, once per process (the pool's size is counted per kernel).
const cpu::CpuMachine& ThisMachine() {
  static const cpu::CpuMachine machine = [] {
    cpu::CpuMachine m;
    m.threads = PlanThreads();
    m.name = CpuName();
    m.math = cpu::ThisCpuMath();
    m.fp32_isa = cpu::Kernels().isa;
    m.int8_isa = q8::Int8Kernels().isa;
    m.bf16_isa = m.math.Bf16() ? cpu::Bf16Kernels().isa : "none";
    return m;
  }();
  return machine;
}

// The node's constant weights as the session holds them (KernelInfoGetConstantInput_tensor: they
// live as long as the session), to pack them again, or build stock's session, after either was
// dropped.
struct ConstantWeights {
  Dims dims;  // I, H, L, D; I = -1: W is not a constant (packed on every call)
  const void *w = nullptr, *b = nullptr, *p = nullptr, *f = nullptr, *s = nullptr;
};

template <typename T>
struct CpuLstm<T>::State {
  Attributes attrs;
  bool int8 = false;  // W is int8 (with W_scale)
  ConstantWeights constants;
  std::mutex scratch_mutex;
  AlignedBuffer<char> scratch;
  const cpu::KernelTable* kernels = &cpu::Kernels();
  const cpu::CpuPlanKnobs knobs = cpu::CpuPlanKnobs::From(CpuOverridesFromEnvironment());
  CpuKernel env_kernel = CpuKernel::kAuto;  // LSTM_ORT_CPU_KERNEL, for nodes that name none
  std::string node_name;

  // Each kernel's weights, made when first needed and dropped once the tuner has settled on
  // others for every shape class seen (KernelTuner::Settled); a call holds its own reference.
  // stock: stock's session of one thread (stock, stock_split); stock_threads: of the pool's size.
  std::mutex weights_mutex;
  std::shared_ptr<const cpu::FloatPacked> packed;
  std::shared_ptr<const cpu::Bf16Packed> packed16;
  std::shared_ptr<const cpu::Int8Packed> packed8;
  std::shared_ptr<const StockStack> stock, stock_threads;
  // Threads of the session's pool (PoolThreads), counted at the first call that may run
  // stock_threads or the fused kernel; 0 before.
  std::once_flag pool_counted;
  int pool_threads = 0;
  // Why onnxruntime could not make stock's session: the fused kernel runs every call from then on.
  // Written once, before the flag is set.
  std::string stock_refused;
  std::atomic<bool> stock_failed{false};
  KernelTuner tuner;

  // Plans per call shape (a plan is a function of the node, the machine and the call's sizes): the
  // plan's own cost (its vectors and words) was 10% of a call of H40 B5 T7.
  struct PlanKey {
    int64_t steps, batch, input, max_len;  // T, B, I
    const char* why_no_stock;
    int pool_threads;
    bool operator<(const PlanKey& o) const {
      return std::tie(steps, batch, input, max_len, why_no_stock, pool_threads) <
             std::tie(o.steps, o.batch, o.input, o.max_len, o.why_no_stock, o.pool_threads);
    }
  };
  static constexpr size_t kMaxPlans = 64;  // beyond, the kept plans are dropped and made again
  std::mutex plans_mutex;
  std::map<PlanKey, std::shared_ptr<const cpu::CpuCallPlan>> plans;

  std::shared_ptr<const cpu::CpuCallPlan> PlanFor(const cpu::CpuCallInputs& in, int pool_threads) {
    const PlanKey key{in.dims.T, in.dims.B, in.dims.I, in.max_len, in.why_no_stock, pool_threads};
    std::lock_guard<std::mutex> lock(plans_mutex);
    auto it = plans.find(key);
    if (it != plans.end()) return it->second;
    if (plans.size() >= kMaxPlans) plans.clear();
    cpu::CpuMachine machine = ThisMachine();
    machine.pool_threads = pool_threads;
    auto plan = std::make_shared<const cpu::CpuCallPlan>(cpu::PlanCpuCall(in, attrs, machine, knobs, env_kernel));
    plans.emplace(key, plan);
    return plan;
  }

  std::shared_ptr<const cpu::FloatPacked> PackedWeights() {
    std::lock_guard<std::mutex> lock(weights_mutex);
    if (!packed) {
      auto pk = std::make_shared<cpu::FloatPacked>();
      const ConstantWeights& c = constants;
      cpu::PackFloat(*pk, c.dims, attrs.ranks, c.w, c.b, c.p, c.f, !std::is_same_v<T, float>);
      pk->w_src = c.w, pk->b_src = c.b, pk->p_src = c.p, pk->f_src = c.f;
      packed = std::move(pk);
    }
    return packed;
  }

  std::shared_ptr<const cpu::Bf16Packed> Bf16Weights() {
    std::lock_guard<std::mutex> lock(weights_mutex);
    if (!packed16) {
      auto pk = std::make_shared<cpu::Bf16Packed>();
      const ConstantWeights& c = constants;
      cpu::PackBf16(*pk, cpu::Bf16Kernels(), c.dims, c.w, c.b, c.p, !std::is_same_v<T, float>);
      pk->w_src = c.w, pk->b_src = c.b, pk->p_src = c.p;
      packed16 = std::move(pk);
    }
    return packed16;
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
      StackWeights weights;
      if (int8)
        weights.w8 = static_cast<const int8_t*>(c.w), weights.w_scale = static_cast<const float*>(c.s);
      else
        weights.w = static_cast<const float*>(c.w);
      weights.b = static_cast<const float*>(c.b);
      weights.p = static_cast<const float*>(c.p);
      // int8 runs stock's kernel in one piece (the only candidate with its arithmetic): one copy.
      const int copies = threads > 1 || int8 ? 1 : StockCopies(c.dims);
      held = std::make_shared<StockStack>(attrs, c.dims, sig, weights, threads, copies);
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
      if (!!packed + !!packed16 + !!packed8 + !!stock + !!stock_threads < 2) return;  // one kernel's weights held
    }
    if (!tuner.Settled()) return;
    const bool fused = tuner.Uses(CpuKernel::kFused);
    const bool one_thread = tuner.Uses(CpuKernel::kStock) || tuner.Uses(CpuKernel::kStockSplit);
    const bool pool = tuner.Uses(CpuKernel::kStockThreads);
    // The float formats the plans kept name (precision bf16 runs fp32 at some sizes: Bf16PaysAtHalfRate);
    // a format dropped that a new call needs is packed again.
    bool fp32_planned = false, bf16_planned = false;
    {
      std::lock_guard<std::mutex> lock(plans_mutex);
      for (const auto& [key, plan] : plans) {
        fp32_planned = fp32_planned || plan->format == cpu::WeightFormat::kFp32;
        bf16_planned = bf16_planned || plan->format == cpu::WeightFormat::kBf16;
      }
    }
    std::lock_guard<std::mutex> lock(weights_mutex);
    if (!fused || !fp32_planned) packed.reset();
    if (!fused || !bf16_planned) packed16.reset();  // (int8's packed8 stays: it is not made again)
    if (!one_thread) stock.reset();
    if (!pool) stock_threads.reset();
  }

  // The session pool's thread count, counted once (PoolThreads: at most PlanThreads()).
  int PoolSize(OrtKernelContext* ctx) {
    std::call_once(pool_counted, [&] { pool_threads = PoolThreads(ctx); });
    return pool_threads;
  }

  // The fused kernel on this call, in the plan's weight format.
  void RunFused(OrtKernelContext* ctx, const cpu::CpuCallPlan& plan, const CallIO& io);
};

template <typename T>
CpuLstm<T>::CpuLstm(const OrtKernelInfo* info, const Attributes& attrs) : state_(std::make_unique<State>()) {
  State& st = *state_;
  st.attrs = attrs;
  st.node_name = NodeName(info);
  st.int8 = Ort::ConstKernelInfo(info).GetInputTypeInfo(kW).GetTensorTypeAndShapeInfo().GetElementType() ==
            ONNX_TENSOR_ELEMENT_DATA_TYPE_INT8;
  // LSTM_ORT_CPU_KERNEL names a kernel for nodes that name none; int8 nodes have only their own.
  const std::string& env_kernel = CpuOverridesFromEnvironment().cpu_kernel;
  if (!env_kernel.empty() && !st.int8) st.env_kernel = ResolveCpuKernel(env_kernel);
  if (st.int8 && attrs.ranks.Any()) Fail("int8 weights cannot be factored (attributes rank_input/rank_recurrent)");
  Dims d;
  d.H = attrs.hidden_size;
  d.L = attrs.num_layers;
  d.D = attrs.num_directions;
  // A mode this CPU cannot run (bf16 without bf16 units) is refused when the session is made.
  if (!st.int8) {
    const PrecisionDecision precision = DecidePrecision(attrs.precision, Device::kCpu, d, ThisMachine().math);
    if (!precision.refused.empty()) Fail(precision.refused);
  }
  size_t nw = 0, nb = 0, np = 0, nf = 0, ns = 0;
  ONNXTensorElementDataType tw{}, tb{}, tp{}, tf{}, ts{};
  bool w_found = false;
  // W is empty when every part is factored: still a constant.
  const void* w = ConstantInput(info, kW, &nw, &tw, &w_found);
  const void* b = ConstantInput(info, kB, &nb, &tb);
  const void* p = ConstantInput(info, kP, &np, &tp);
  const void* f = ConstantInput(info, kFactors, &nf, &tf);
  const void* s = st.int8 ? ConstantInput(info, kWScale, &ns, &ts) : nullptr;
  const ONNXTensorElementDataType type =
      std::is_same_v<T, float> ? ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT : ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16;
  const bool factored = attrs.ranks.Any();
  d.I = w_found && (f || !factored)
            ? InputSizeFromCounts(d, attrs.ranks, static_cast<int64_t>(nw), f ? static_cast<int64_t>(nf) : 0)
            : -1;
  st.constants.dims = d;
  st.constants.dims.I = -1;
  for (const TunedStrategy& t : attrs.tuned)  // for the report: classes a tuned entry decides
    if (t.gpu == std::string(kTunedCpuPrefix) + CpuName()) st.tuner.Preset(ClassOf(t.T, t.B), t.cpu_kernel);
  RegisterKernel(this, st.node_name, &st.tuner, [&st] {
    std::lock_guard<std::mutex> lock(st.weights_mutex);
    std::string held;
    const std::pair<const char*, bool> kernels[] = {{"fused", st.packed || st.packed16 || st.packed8},
                                                    {"stock", st.stock != nullptr},
                                                    {"stock_threads", st.stock_threads != nullptr}};
    for (const auto& [name, on] : kernels)
      if (on) held += (held.empty() ? "" : ",") + std::string(name);
    return held;
  });
  if (!w_found || d.I <= 0) return;  // packed on every call
  if (st.int8) {
    if (tw != ONNX_TENSOR_ELEMENT_DATA_TYPE_INT8 || !s || ts != ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT ||
        static_cast<int64_t>(ns) != d.WeightScaleCount())
      return;
    const auto f32 = ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT;
    if (b && (tb != f32 || static_cast<int64_t>(nb) != d.BiasCount())) b = nullptr;
    if (p && (tp != f32 || static_cast<int64_t>(np) != d.PeepholeCount())) p = nullptr;
    st.constants = {d, w, b, p, nullptr, s};
    auto pk = std::make_shared<cpu::Int8Packed>();
    cpu::PackInt8(*pk, q8::Int8Kernels(), d, static_cast<const int8_t*>(w), static_cast<const float*>(s),
                  static_cast<const float*>(b), static_cast<const float*>(p));
    st.packed8 = std::move(pk);
  } else {
    if ((nw && tw != type) || (factored && tf != type)) return;
    for (int64_t k = 0; k < d.L * d.D; ++k)  // ranks the call would refuse: leave them to its message
      if (attrs.ranks.Input(k) > std::min(d.LayerInput(k / d.D), kGates * d.H) || attrs.ranks.Recurrent(k) > d.H) return;
    if (b && (tb != type || static_cast<int64_t>(nb) != d.BiasCount())) b = nullptr;
    if (p && (tp != type || static_cast<int64_t>(np) != d.PeepholeCount())) p = nullptr;
    st.constants = {d, w, b, p, f, nullptr};
    // The calls' batch is not known yet: packed for a call of one row (where a CPU's bf16 runs at
    // half rate, larger calls may run fp32 and pack it then).
    Dims one_row = d;
    one_row.B = 1;
    if (cpu::FormatFor(attrs, false, ThisMachine().math, one_row) == cpu::WeightFormat::kBf16)
      st.Bf16Weights();
    else
      st.PackedWeights();
  }
  if (CpuOverridesFromEnvironment().verbose)
    std::fprintf(stderr, "lstm_ort cpu: packed constant weights at kernel creation (I=%lld, H=%lld, L=%lld, D=%lld, %s)\n",
                 static_cast<long long>(d.I), static_cast<long long>(d.H), static_cast<long long>(d.L),
                 static_cast<long long>(d.D),
                 st.int8 ? q8::Int8Kernels().isa : st.packed16 ? cpu::Bf16Kernels().isa : st.kernels->isa);
}

template <typename T>
CpuLstm<T>::~CpuLstm() { UnregisterKernel(this); }

// Why stock's kernel cannot run this call of the node, or null when it can.
template <typename T>
const char* CpuLstm<T>::WhyNotStock(const CallIO& io) const {
  const State& st = *state_;
  const ConstantWeights& c = st.constants;
  if (st.int8 && cpu::Int8WhyNoStock(st.attrs.int8_scales)) return cpu::Int8WhyNoStock(st.attrs.int8_scales);
  if (!std::is_same_v<T, float>) return "onnxruntime's CPU LSTM has no float16 kernel";
  if (st.attrs.ranks.Any()) return "the node has factored weights, which stock's LSTM does not take";
  if (c.dims.I != io.dims.I || c.w != io.in[kW] || c.b != io.in[kB] || c.p != io.in[kP] ||
      (st.int8 && c.s != io.in[kWScale]))
    return "the weights are not constant initializers";
  if (io.dims.T < 1 || io.dims.B < 1) return "an empty call";
  if (st.stock_failed.load(std::memory_order_acquire)) return st.stock_refused.c_str();
  return nullptr;
}

template <typename T>
void CpuLstm<T>::Compute(OrtKernelContext* ctx, const CallIO& io) {
  State& st = *state_;
  const cpu::CpuCallInputs in{io.dims, io.max_len, !std::is_same_v<T, float>, st.int8, WhyNotStock(io)};
  const CpuKernel asked = st.attrs.cpu_kernel_set ? st.attrs.cpu_kernel : st.env_kernel;
  // The pool's size sizes stock_threads and merges the fused kernel's row groups the pool would run
  // in turn (MergeGroupsForPool): counted wherever either may run.
  const bool counts_pool = asked != CpuKernel::kStock && asked != CpuKernel::kStockSplit;
  const std::shared_ptr<const cpu::CpuCallPlan> held = st.PlanFor(in, counts_pool ? st.PoolSize(ctx) : 0);
  const cpu::CpuCallPlan& plan = *held;
  if (!plan.refused.empty()) Fail(plan.refused);
  KernelTuner::Pick pick{plan.kernel, false};
  const ShapeClass shape = ClassOf(io.dims.T, io.dims.B);
  if (plan.kernel == CpuKernel::kAuto) pick = st.tuner.Choose(shape, plan.candidates);
  CpuKernel kernel = pick.kernel;
  const auto start = std::chrono::steady_clock::now();
  bool stock_ran = false;
  if (kernel != CpuKernel::kFused) {
    const bool forced = plan.kernel != CpuKernel::kAuto && plan.kernel_why.rfind("tuned", 0) != 0;
    try {
      if (kernel == CpuKernel::kStockThreads)
        stock_ran = RunStock(ctx, io, 1, st.PoolSize(ctx));
      else
        stock_ran = RunStock(ctx, io, kernel == CpuKernel::kStockSplit ? plan.stock_pieces : 1, 1);
    } catch (const std::exception& e) {
      if (forced) throw;
      // auto never fails a call its own kernel can answer: stock's kernel is off for this node from
      // now on, with the reason in the report's words.
      st.RefuseStock(std::string("onnxruntime's LSTM failed a call: ") + e.what());
    }
    if (!stock_ran && forced) Fail(st.stock_refused);
  }
  if (!stock_ran) {
    kernel = CpuKernel::kFused;
    st.RunFused(ctx, plan, io);
  }
  if (pick.measuring)
    st.tuner.Record(shape, kernel, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  else if (plan.kernel == CpuKernel::kAuto || plan.kernel_why.rfind("tuned", 0) == 0)
    st.DropUnused();
}

template <typename T>
void CpuLstm<T>::State::RunFused(OrtKernelContext* ctx, const cpu::CpuCallPlan& plan, const CallIO& io) {
  const ConstantWeights& c = constants;
  const Dims& d = io.dims;
  const bool given = c.dims.I == d.I && c.w == io.in[kW] && c.b == io.in[kB] && c.p == io.in[kP];
  // Scratch: the kernel's own buffer, or a private one while another Run holds it.
  std::unique_lock<std::mutex> lock(scratch_mutex, std::try_to_lock);
  AlignedBuffer<char> private_scratch;
  AlignedBuffer<char>& buffer = lock.owns_lock() ? scratch : private_scratch;
  if constexpr (std::is_same_v<T, float>) {
    if (plan.format == cpu::WeightFormat::kInt8) {
      cpu::Int8Packed local;
      const cpu::Int8Packed* pk = packed8.get();
      if (!(given && c.s == io.in[kWScale] && pk)) {
        for (int64_t l = 0; l < d.L; ++l)
          if (d.LayerInput(l) > q8::kMaxDepth || d.H > q8::kMaxDepth)
            Fail("int8 weights: a layer's input size and H must be at most " + std::to_string(q8::kMaxDepth));
        cpu::PackInt8(local, q8::Int8Kernels(), d, static_cast<const int8_t*>(io.in[kW]),
                      static_cast<const float*>(io.in[kWScale]), static_cast<const float*>(io.in[kB]),
                      static_cast<const float*>(io.in[kP]));
        pk = &local;
      }
      const cpu::Int8Format fmt(*pk, q8::Int8Kernels(), plan.int8_scales);
      cpu::RunStack<T>(ctx, plan, io, attrs, fmt, *kernels, buffer);
      return;
    }
  }
  if (plan.format == cpu::WeightFormat::kBf16) {
    std::shared_ptr<const cpu::Bf16Packed> held;
    cpu::Bf16Packed local;
    const cpu::Bf16Packed* pk = &local;
    if (given) {
      held = Bf16Weights();
      pk = held.get();
    } else {
      cpu::PackBf16(local, cpu::Bf16Kernels(), d, io.in[kW], io.in[kB], io.in[kP], !std::is_same_v<T, float>);
    }
    const cpu::Bf16Format fmt(*pk, cpu::Bf16Kernels(), plan);
    cpu::RunStack<T>(ctx, plan, io, attrs, fmt, *kernels, buffer);
    return;
  }
  std::shared_ptr<const cpu::FloatPacked> held;
  cpu::FloatPacked local;
  const cpu::FloatPacked* pk = &local;
  if (given && c.f == io.in[kFactors]) {
    held = PackedWeights();
    pk = held.get();
  } else {
    cpu::PackFloat(local, d, attrs.ranks, io.in[kW], io.in[kB], io.in[kP], io.in[kFactors], !std::is_same_v<T, float>);
  }
  const cpu::FloatFormat fmt(*pk, d);
  cpu::RunStack<T>(ctx, plan, io, attrs, fmt, *kernels, buffer);
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
  AlignedBuffer<char> private_scratch;
  float* scratch =
      reinterpret_cast<float*>((lock.owns_lock() ? st.scratch : private_scratch).Reserve(std::max<size_t>(at[pieces], 16) * sizeof(float)));
  std::exception_ptr failure;
  std::mutex failure_mutex;
  auto piece = [&](int64_t k) {
    try {
      stock->Run(io, B * k / pieces, B * (k + 1) / pieces, scratch + at[k], static_cast<int>(k));
    } catch (...) {
      std::lock_guard<std::mutex> g(failure_mutex);
      failure = std::current_exception();
    }
  };
  Parallel(ctx, pieces, piece);
  if (failure) std::rethrow_exception(failure);
  return true;
}

template class CpuLstm<float>;
template class CpuLstm<Ort::Float16_t>;

}  // namespace lstm_ort
