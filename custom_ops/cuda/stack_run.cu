// One FusedLSTM call on CUDA, as its plan (call_plan.h) says: per range of layers, the input
// projection on cuBLAS (gemm/), then the recurrence on the range's backend, through the backend
// table below: one launch per step (v1/), one cooperative launch per range (persistent/), one
// cluster launch per layer (cluster/); factored weights go to low_rank/run.cu. Everything is
// enqueued on the caller's stream.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "attribute_parsing.h"
#include "call_io.h"
#include "cuda/cluster/args.h"
#include "cuda/cluster/launch.h"
#include "cuda/cuda_check.h"
#include "cuda/device_limits.h"
#include "cuda/direction_fields.h"
#include "cuda/element_traits.h"
#include "cuda/gemm/cublas_handles.h"
#include "cuda/gemm/input_projection.h"
#include "cuda/grid_stride.h"
#include "cuda/heuristics.h"
#include "cuda/call_plan.h"
#include "cuda/lstm_cuda.h"
#include "cuda/persistent/args.h"
#include "cuda/persistent/launch.h"
#include "cuda/scratch_layout.h"
#include "cuda/layer_io.cuh"
#include "cuda/low_rank/run.h"
#include "cuda/mma_step/args.h"
#include "cuda/mma_step/launch.h"
#include "cuda/v1/launch_step.h"
#include "cuda/v1/step_args.cuh"

namespace lstm_ort {
namespace {

int Log2(int n) {
  int k = 0;
  while ((1 << k) < n) ++k;
  return k;
}

std::string LayersText(int first, int count) {
  return count == 1 ? "layer " + std::to_string(first)
                    : "layers " + std::to_string(first) + "-" + std::to_string(first + count - 1);
}

// The calling host thread, as graph keys name it: its captures' cuBLAS calls run through its own
// handle and workspace (CublasLease).
uint64_t HostThreadKey() { return std::hash<std::thread::id>{}(std::this_thread::get_id()); }

// One call's stack, layer by layer or range by range, on one stream.
template <typename T>
class StackRun {
 public:
  StackRun(const Attributes& attrs, const CallIO& io, cudaStream_t stream, cublasHandle_t lent_cublas, void* scratch,
           CallPlan& plan, KeptSplit kept, LaunchGraphs* graphs)
      : attrs_(attrs),
        io_(io),
        d_(io.dims),
        stream_(stream),
        plan_(plan),
        kept_(kept),
        graphs_(graphs),
        s_(CarveScratch(io.dims, kElementTypeOf<T>, plan.scratch, scratch, nullptr)),
        cublas_(lent_cublas, stream) {
    T_ = static_cast<int>(d_.T);
    B_ = static_cast<int>(d_.B);
    H_ = static_cast<int>(d_.H);
    D_ = static_cast<int>(d_.D);
    L_ = static_cast<int>(d_.L);
    rows_ = static_cast<long long>(T_) * B_;
    G_ = static_cast<long long>(kGates) * H_;
    cudaGetDevice(&device_);
    cudaDeviceGetAttribute(&sm_count_, cudaDevAttrMultiProcessorCount, device_);
  }

  void Run() {
    // Without sequence_lens every length is T: set by the first states launch (TakePrelude).
    if (io_.seq_lens) LengthsOnDevice(s_.lens, io_.seq_lens, B_, T_, stream_);
    lens_pending_ = !io_.seq_lens;
    for (const RangePlan& range : plan_.ranges) {
      if ((this->*kLaunchers[static_cast<int>(range.backend)])(range)) continue;
      // Refused at launch (the launcher recorded why): the range's layers on v1. Its first layer's
      // projection is in gx already: every launcher projects before it launches, and its input
      // may since have been zeroed as its output (one buffer between layers, ragged lengths).
      for (int l = range.first; l < range.first + range.count; ++l) RunStepwise(l, l == range.first);
    }
  }

 private:
  const T* Weights() const { return static_cast<const T*>(io_.in[kW]); }
  // Layer l's recurrent rows of direction dir: they follow its input rows.
  const T* RecurrentWeights(int l, int dir) const { return Weights() + d_.WeightOffset(l, dir) + d_.LayerInput(l) * G_; }

  // What the next states launch does besides the states: the lengths, while they are pending.
  StatesPrelude TakePrelude() {
    StatesPrelude prelude;
    if (lens_pending_) {
      prelude.lens = s_.lens;
      prelude.B = B_;
      prelude.T = T_;
      lens_pending_ = false;
    }
    return prelude;
  }

  // A launch the device refused: recorded (an error in strict mode); the caller runs v1.
  bool Refused(const RangePlan& range, cudaError_t e) {
    ClearPending();
    plan_.fallbacks.Add(LayersText(range.first, range.count) + ": the device refused the " +
                        BackendName(range.backend) + " launch (" + cudaGetErrorName(e) + "): v1");
    return false;
  }

  // gx[d] = x @ Wx[d] for every row of layer l's input.
  void Project(int l) {
    ProjectionArgs<T> p{};
    p.x = l == 0 ? static_cast<const T*>(io_.in[kX]) : LayerOutput(l - 1);
    p.w = Weights() + d_.WeightOffset(l, 0);
    p.w_stride = d_.LayerK(l) * G_;
    p.I = static_cast<int>(d_.LayerInput(l));
    p.D = D_;
    p.G = static_cast<int>(G_);
    p.rows = rows_;
    p.gx = s_.gx;
    p.x_hi = s_.x_hi;
    p.x_lo = s_.x_lo;
    p.w_hi = s_.w_hi;
    p.w_lo = s_.w_lo;
    p.x_bf16 = s_.x_bf16;
    p.w_bf16 = s_.w_bf16;
    const int64_t kept_at = KeptSplitOffset(d_, l, 0);
    if (kept_.hi) p.kept = {kept_.hi + kept_at, kept_.lo ? kept_.lo + kept_at : nullptr};
    if (kept_.bf16) p.kept.bf16 = kept_.bf16 + kept_at;
    p.math = plan_.projection;
    ProjectInput(p, cublas_.handle(), stream_);
  }

  // Where layer l writes its sequence output: Y if it is the stack's last or Y relays (laid out as
  // the buffer between layers then), else that buffer. A range reads its input and writes its
  // output in one buffer: it projects its first layer's whole input first, on this stream.
  T* LayerOutput(int l) const {
    return l == L_ - 1 || plan_.scratch.y_relays ? static_cast<T*>(io_.out[kY]) : static_cast<T*>(s_.layer);
  }

  // The strides (layer_io.cuh) of a range's first layer's projection and of its last layer's
  // output into the arguments of any backend.
  template <typename Args>
  void SetLayerIO(int first, int last, Args& a) {
    ApplyLayerIO(LayerIOFor(d_, attrs_.layout, first), LayerIOFor(d_, attrs_.layout, last), LayerOutput(last), a);
    ZeroPastEnds(a.y, io_, stream_);
  }

  bool RunStepwiseRange(const RangePlan& range) {
    for (int l = range.first; l < range.first + range.count; ++l) RunStepwise(l);
    return true;
  }

  // v1: one launch of a fused step kernel per timestep, the plan's step kernel. `projected`: gx
  // holds layer l's projection already.
  void RunStepwise(int l, bool projected = false) {
    const StepKernel kernel = plan_.step;
    const bool step_projects = plan_.StepProjectsLayer(l) && !projected;
    if (!projected && !step_projects) Project(l);
    StepArgs<T> a{};
    a.B = B_;
    a.H = H_;
    a.lens = s_.lens;
    SetDirectionFields(a, attrs_, s_.gx, rows_, G_, D_);
    SetLayerSlices<T>(a.bias, a.peep, io_, l, D_, H_);
    for (int dir = 0; dir < D_; ++dir) {
      a.wh[dir] = RecurrentWeights(l, dir);
      a.c[dir] = s_.c + static_cast<long long>(dir) * B_ * H_;
    }
    if (step_projects) {
      a.x = l == 0 ? static_cast<const T*>(io_.in[kX]) : LayerOutput(l - 1);
      a.I = static_cast<int>(d_.LayerInput(l));
      for (int dir = 0; dir < D_; ++dir) {
        a.wx[dir] = Weights() + d_.WeightOffset(l, dir);
        a.gx[dir] = nullptr;
      }
    }
    // The steps write Y_h / Y_c at their last step, except the cuBLAS step's loop captured as a
    // graph (GemmStepLoopKey, which does not key the states), which leaves them to FinalStates. A
    // short call's cuBLAS step writes them in its cell: one launch fewer (H200, T=1 H1024 B64).
    bool loop_graphed = false;
    if constexpr (kElementTypeOf<T> == ElementType::kFloat32)
      loop_graphed = kernel == StepKernel::kGemm && graphs_ && io_.max_len >= kMinStepsForStepGraph;
    const bool steps_write_states = !loop_graphed && io_.max_len >= 1;
    if (steps_write_states) SetFinalStates(l, a);
    StatesPrelude prelude = TakePrelude();
    const bool stages_rows = step_projects && kernel == StepKernel::kGemm;  // its one GEMM's [x h0]
    if (stages_rows) {
      prelude.stage_x = a.x;
      prelude.stage = s_.gx;
      prelude.stage_I = a.I;
    }
    InitLayerStates<T>(io_, attrs_.layout, l, s_.h[0], s_.c, stream_, 1, prelude);
    // After the states' launch: it staged the layer's input rows from what may be this output
    // buffer, which the layer's outputs past a sequence's end zero.
    SetLayerIO(l, l, a);
    [[maybe_unused]] const GemmStepScratch gemm{s_.gates, s_.stream_done, s_.wh_half, s_.h_half, s_.wh_amax,
                                                stages_rows ? s_.gx : nullptr};
    [[maybe_unused]] GemmStepPlan plan;
    if constexpr (kElementTypeOf<T> == ElementType::kFloat32) {
      if (kernel == StepKernel::kGemm)
        plan = PrepareGemmSteps(a, d_, plan_.projection, plan_.step_weights, plan_.step_streams, gemm, stream_);
    }
    // Each launch below is checked right after it, so nothing foreign is pending between them.
    // The loop works on its own copy of the arguments: a replayed graph skips it. It enqueues on
    // `on`: this call's stream, or the stream a graph is captured on (launch_graphs.h).
    auto enqueue_steps = [&, a](cudaStream_t on) mutable {
      int cur = 0;
      for (int step = 0; step < io_.max_len; ++step) {
        a.step = step;
        for (int dir = 0; dir < D_; ++dir) {
          a.h_in[dir] = s_.h[cur] + static_cast<long long>(dir) * B_ * H_;
          a.h_out[dir] = s_.h[cur ^ 1] + static_cast<long long>(dir) * B_ * H_;
        }
        a.final_step = steps_write_states && step == io_.max_len - 1;
        if constexpr (kElementTypeOf<T> == ElementType::kFloat32) {
          if (kernel == StepKernel::kGemm) {
            ClearPending();
            const bool h_is_zero = step == 0 && !io_.in[kInitialH];
            LaunchGemmStep(a, d_, gemm, plan, h_is_zero, sm_count_, cublas_.On(on), on);
            Check(cudaGetLastError(), "recurrent step");
            cur ^= 1;
            continue;
          }
        }
        if (kernel == StepKernel::kSplitK) LaunchSplitKStep(a, D_, sm_count_, on);
        else LaunchTiledStep(a, D_, device_, on);
        Check(cudaGetLastError(), "recurrent step");
        cur ^= 1;
      }
    };
    if constexpr (kElementTypeOf<T> == ElementType::kFloat32) {
      if (loop_graphed)
        graphs_->Run(GemmStepLoopKey(a, gemm, plan), stream_, enqueue_steps, LaunchGraphs::Cublas::kCalls);
    }
    if (!loop_graphed) enqueue_steps(stream_);
    if (!steps_write_states)
      WriteFinalStates<T>(io_, attrs_.layout, l, s_.h[io_.max_len % 2], s_.c, s_.lens, stream_);
  }

  // Where layer l's last v1 step writes Y_h / Y_c: its rows of the op's [L*D, B, H] (layout 0) or
  // [B, L*D, H] (layout 1) states.
  void SetFinalStates(int l, StepArgs<T>& a) const {
    const long long LD = d_.L * D_;
    a.state_sb = attrs_.layout == 0 ? H_ : LD * H_;
    for (int dir = 0; dir < D_; ++dir) {
      const long long row = static_cast<long long>(l) * D_ + dir;
      const long long at = attrs_.layout == 0 ? row * B_ * H_ : row * H_;
      a.y_h[dir] = io_.out[kYH] ? static_cast<T*>(io_.out[kYH]) + at : nullptr;
      a.y_c[dir] = io_.out[kYC] ? static_cast<T*>(io_.out[kYC]) + at : nullptr;
    }
  }

  // What the cuBLAS step loop of a layer captures by value (launch_graphs.h).
  LaunchKey GemmStepLoopKey(const StepArgs<float>& a, const GemmStepScratch& gemm, const GemmStepPlan& plan) const {
    LaunchKey key;
    key.Add(device_).Add(sm_count_).Add(HostThreadKey()).Add(io_.max_len).Add(D_).Add(a.B).Add(a.H);
    key.Add(io_.in[kInitialH] != nullptr).Add(a.lens).Add(a.gx_st).Add(a.gx_sb).Add(a.y).Add(a.y_st).Add(a.y_sd);
    key.Add(a.y_sb).Add(s_.h[0]).Add(s_.h[1]);
    for (int dir = 0; dir < D_; ++dir) {
      key.Add(a.gx[dir]).Add(a.wh[dir]).Add(a.bias[dir]).Add(a.peep[dir]).Add(a.c[dir]).Add(a.reverse[dir]);
      const CellParams& cell = a.cell[dir];
      for (const Activation& act : cell.act) key.Add(static_cast<int>(act.kind)).Add(act.alpha).Add(act.beta);
      key.Add(cell.has_clip).Add(cell.clip).Add(cell.input_forget);
    }
    key.Add(gemm.gates).Add(gemm.stream_done).Add(gemm.wh_half).Add(gemm.h_half).Add(gemm.wh_amax).Add(gemm.staged);
    key.Add(static_cast<int>(plan.math)).Add(static_cast<int>(plan.weights)).Add(plan.streams);
    key.Add(plan.gemm && plan.gemm->Ready());
    return key;
  }

  // A range's layers into the arguments of a backend that runs several in one launch (persistent,
  // tensor-core step): each layer's input rows, its weights (`w`, the first layer's recurrent rows
  // only, the others' input rows too) and its bias and peephole slices.
  template <typename Args, typename W, size_t kLayers>
  void SetRangeLayers(const RangePlan& range, Args& a, W (&w)[kLayers][2]) const {
    for (int r = 0; r < range.count; ++r) {
      const int l = range.first + r;
      a.in_rows[r] = r == 0 ? 0 : static_cast<int>(d_.LayerInput(l));
      for (int dir = 0; dir < D_; ++dir)
        w[r][dir] = r == 0 ? RecurrentWeights(l, dir) : Weights() + d_.WeightOffset(l, dir);
      SetLayerSlices<T>(a.bias[r], a.peep[r], io_, l, D_, H_);
    }
  }

  // The persistent kernel over a range; false when the device cannot launch its grid
  // cooperatively, and the caller falls back to v1.
  bool RunPersistent(const RangePlan& range) {
    const PersistentPlan& plan = *range.persistent();
    const int l0 = range.first;
    Project(l0);
    PersistentArgs<T> a{};
    a.plan = plan;
    a.B = B_;
    a.H = H_;
    a.max_len = io_.max_len;
    a.layers = range.count;
    a.D = D_;
    a.log2_u = Log2(plan.U);
    a.log2_bb4 = Log2(plan.Bb / 4);
    a.log2_p = Log2(plan.P);
    a.lens = s_.lens;
    SetRangeLayers(range, a, a.w);
    // The range's states, its staged h and its grid barrier zeroed, in one launch.
    StatesPrelude prelude = TakePrelude();
    prelude.zero = s_.hbuf;
    prelude.zero_n = std::min<long long>(2LL * range.count * D_ * H_ * plan.Bp, HBufBytes(d_) / sizeof(float));
    prelude.counter = s_.barrier;
    InitLayerStates<T>(io_, attrs_.layout, l0, s_.h0, s_.c0, stream_, range.count, prelude);
    SetDirectionFields(a, attrs_, s_.gx, rows_, G_, D_);
    a.hbuf = s_.hbuf;
    a.h0 = s_.h0;
    a.c0 = s_.c0;
    a.h_fin = s_.h_fin;
    a.c_fin = s_.c_fin;
    a.barrier = s_.barrier;
    SetLayerIO(l0, l0 + range.count - 1, a);
    const cudaError_t e = plan_.refuse_launches ? cudaErrorCooperativeLaunchTooLarge
                          : plan.mma             ? LaunchPersistentMma(a, plan.operand, stream_)
                                                 : LaunchPersistent(a, stream_);
    if (e == cudaErrorCooperativeLaunchTooLarge || e == cudaErrorNotSupported)  // e.g. no cooperative launch
      return Refused(range, e);
    Check(e, "persistent kernel");
    if (!plan.mma) ReportPhaseClocks(stream_, io_.max_len + range.count - 1);
    WriteFinalStates<T>(io_, attrs_.layout, l0, s_.h_fin, s_.c_fin, s_.lens, stream_, range.count);
    return true;
  }

  // One layer on the cluster kernel; false when the device refuses the cluster (the caller runs
  // the layer with v1).
  bool RunCluster(const RangePlan& range) {
    const int l = range.first;
    Project(l);
    ClusterArgs<T> a{};
    a.plan = *range.cluster();
    a.B = B_;
    a.H = H_;
    a.max_len = io_.max_len;
    a.D = D_;
    a.lens = s_.lens;
    SetDirectionFields(a, attrs_, s_.gx, rows_, G_, D_);
    SetLayerSlices<T>(a.bias, a.peep, io_, l, D_, H_);
    for (int dir = 0; dir < D_; ++dir) a.w[dir] = RecurrentWeights(l, dir);
    SetLayerIO(l, l, a);
    InitLayerStates<T>(io_, attrs_.layout, l, s_.h[0], s_.c, stream_, 1, TakePrelude());
    a.h0 = s_.h[0];
    a.c0 = s_.c;
    a.h_fin = s_.h[1];
    a.c_fin = s_.c;  // each cell's c is read once by its owner before the loop and written after it
    const cudaError_t e = plan_.refuse_launches ? cudaErrorNotSupported : LaunchCluster(a, stream_);
    if (e == cudaErrorInvalidClusterSize || e == cudaErrorNotSupported || e == cudaErrorLaunchOutOfResources)
      return Refused(range, e);
    Check(e, "cluster kernel");
    WriteFinalStates<T>(io_, attrs_.layout, l, s_.h[1], s_.c, s_.lens, stream_);
    return true;
  }


  // A range on the tensor-core step (mma_step/): its first layer's projection, its states, its
  // operands (16-bit weight copies, initial h), then one launch per interval, replayed as a CUDA
  // graph from the second call that repeats every argument (launch_graphs.h), then its final states.
  bool RunMmaStep(const RangePlan& range) {
    const MmaStepPlan& plan = *range.mma_step();
    const int l0 = range.first;
    Project(l0);
    MmaStepArgs<T> a;
    std::memset(&a, 0, sizeof a);  // the graph key reads the arguments' bytes, padding included
    a.B = B_;
    a.H = H_;
    a.max_len = io_.max_len;
    a.layers = range.count;
    a.D = D_;
    a.lens = s_.lens;
    MmaStepInputs in{};
    SetRangeLayers(range, a, in.w);
    InitLayerStates<T>(io_, attrs_.layout, l0, s_.h0, s_.c0, stream_, range.count, TakePrelude());
    SetDirectionFields(a, attrs_, s_.gx, rows_, G_, D_);
    a.hop = s_.hbuf;  // HBufBytes holds [2][L][D][B][H] of any operand type
    a.c = s_.c0;      // the final c, read by WriteFinalStates
    a.h_fin = s_.h_fin;
    SetLayerIO(l0, l0 + range.count - 1, a);
    in.copies = s_.step_w;
    in.h0 = io_.in[kInitialH] ? s_.h0 : nullptr;
    in.exps = s_.step_exps;
    in.barrier = s_.barrier;
    PrepareMmaStep<T>(a, plan, in, stream_);
    auto enqueue = [&a, &plan](cudaStream_t on) { EnqueueMmaStep<T>(a, plan, on); };
    if (graphs_ && io_.max_len >= kMinStepsForStepGraph) {
      LaunchKey key;
      key.Add(device_).Add(plan.tile).Add(static_cast<int>(plan.operand)).Add(plan.m_tiles).Add(plan.n_tiles);
      key.Add(plan.threads).Add(static_cast<long long>(plan.smem)).Add(static_cast<int>(plan.resident));
      const unsigned char* bytes = reinterpret_cast<const unsigned char*>(&a);
      for (size_t i = 0; i < sizeof a; i += sizeof(uint64_t)) {
        uint64_t word = 0;
        std::memcpy(&word, bytes + i, std::min(sizeof word, sizeof a - i));
        key.Add(word);
      }
      graphs_->Run(key, stream_, enqueue, LaunchGraphs::Cublas::kNone);
    } else {
      enqueue(stream_);
    }
    WriteFinalStates<T>(io_, attrs_.layout, l0, s_.h_fin, s_.c0, s_.lens, stream_, range.count);
    return true;
  }

  // The backend table: each backend's launcher, in Backend's order (call_plan.h); false where the
  // device refused the launch, after recording why in the plan's fallbacks.
  using Launcher = bool (StackRun::*)(const RangePlan&);
  static constexpr Launcher kLaunchers[] = {&StackRun::RunStepwiseRange, &StackRun::RunPersistent,
                                            &StackRun::RunPersistent,    &StackRun::RunCluster,
                                            nullptr,                     &StackRun::RunMmaStep};

  const Attributes& attrs_;
  const CallIO& io_;
  const Dims& d_;
  cudaStream_t stream_;
  CallPlan& plan_;       // every decision of this call; launch-time fallbacks are recorded in it
  KeptSplit kept_;       // W's TF32 halves kept across calls, or none
  LaunchGraphs* graphs_;   // the node's cached step graphs, or null
  Scratch s_;
  CublasLease cublas_;
  bool lens_pending_ = false;             // every length T, not set yet (TakePrelude)
  int T_ = 0, B_ = 0, H_ = 0, D_ = 1, L_ = 1, device_ = 0, sm_count_ = 132;
  long long rows_ = 0, G_ = 0;
};

}  // namespace

template <typename T>
CallDevice CallDeviceOf(int device, std::string name) {
  CallDevice dev;
  dev.name = std::move(name);
  dev.max_cluster_blocks = MaxClusterBlocks(device);
  dev.persistent = [device]() -> const DeviceLimits& { return CachedDeviceLimits<T>(device); };
  dev.low_rank = [device]() -> const DeviceLimits& { return LowRankRecurrenceLimits<T>(device); };
  dev.mma_step = [device]() -> const DeviceLimits& { return MmaStepLimits<T>(device); };
  return dev;
}

template <typename T>
std::string DescribeStrategy(const Dims& d, Strategy strategy, Precision precision) {
  int device = 0;
  Check(cudaGetDevice(&device), "current device");
  Attributes attrs;  // a node with these strategy and precision and the default cell
  attrs.strategy = strategy;
  attrs.precision = precision;
  ResolveActivations(std::nullopt, {}, {}, static_cast<int>(d.D), attrs.act);
  Overrides overrides = OverridesFromEnvironment();
  overrides.strict = false;  // a description names its fallbacks
  const CallInputs in{d, static_cast<int>(d.T), kElementTypeOf<T>, kElementTypeOf<T> == ElementType::kFloat32};
  return DescribeCallPlan(PlanCall(in, attrs, CallDeviceOf<T>(device, DeviceName(device)), overrides));
}

LaunchKey CallLaunchKey(const CallIO& io, int device, void* stream, const void* scratch, const KeptSplit& kept) {
  LaunchKey key;
  key.Add(device).Add(stream).Add(HostThreadKey());
  const Dims& d = io.dims;
  key.Add(d.T).Add(d.B).Add(d.I).Add(d.H).Add(d.L).Add(d.D).Add(io.max_len).Add(io.seq_lens);
  for (const void* in : io.in) key.Add(in);
  for (const void* out : io.out) key.Add(out);
  return key.Add(scratch).Add(kept.hi).Add(kept.lo).Add(kept.bf16);
}

template <typename T>
void RunLstmCuda(const Attributes& attrs, const CallIO& io, void* stream, void* lent_cublas, void* scratch,
                 CallPlan& plan, KeptSplit kept, LaunchGraphs* graphs) {
  if (io.dims.B == 0) return;
  if (plan.low_rank()) return RunLowRankCuda<T>(attrs, io, stream, lent_cublas, scratch, plan);
  StackRun<T>(attrs, io, static_cast<cudaStream_t>(stream), static_cast<cublasHandle_t>(lent_cublas), scratch, plan,
              kept, graphs)
      .Run();
}

// The element types FusedLSTM registers for CUDA (cuda_ops.cc).
#define LSTM_ORT_INSTANTIATE(T)                                                                         \
  template CallDevice CallDeviceOf<T>(int device, std::string name);                                    \
  template std::string DescribeStrategy<T>(const Dims& d, Strategy strategy, Precision precision);      \
  template void RunLstmCuda<T>(const Attributes& attrs, const CallIO& io, void* stream, void* lent_cublas, \
                               void* scratch, CallPlan& plan, KeptSplit kept, LaunchGraphs* graphs);
LSTM_ORT_INSTANTIATE(float)
LSTM_ORT_INSTANTIATE(__half)
#undef LSTM_ORT_INSTANTIATE

}  // namespace lstm_ort
