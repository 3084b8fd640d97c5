// One FusedLSTM call on CUDA: per range of layers (stack_plan.h), the input projection on cuBLAS
// (gemm/), then the recurrence, either one launch per step (v1/) or one persistent launch per
// range (persistent/). Everything is enqueued on the caller's stream.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "call_io.h"
#include "cuda/cluster/args.h"
#include "cuda/cluster/launch.h"
#include "cuda/cuda_check.h"
#include "cuda/developer_knobs.h"
#include "cuda/device_limits.h"
#include "cuda/direction_fields.h"
#include "cuda/element_traits.h"
#include "cuda/gemm/cublas_handles.h"
#include "cuda/gemm/input_projection.h"
#include "cuda/grid_stride.h"
#include "cuda/heuristics.h"
#include "cuda/lstm_cuda.h"
#include "cuda/persistent/args.h"
#include "cuda/persistent/launch.h"
#include "cuda/scratch_layout.h"
#include "cuda/stack_plan.h"
#include "cuda/state_kernels.cuh"
#include "cuda/v1/launch_step.h"
#include "cuda/v1/step_args.cuh"

namespace lstm_ort {
namespace {

int Log2(int n) {
  int k = 0;
  while ((1 << k) < n) ++k;
  return k;
}

template <typename T>
std::vector<LayerRange> PlanRangesOn(int device, Strategy strategy, const Dims& d, std::optional<MmaOperand> mma) {
  return PlanRanges(
      strategy, d, [device]() -> const DeviceLimits& { return CachedDeviceLimits<T>(device); }, mma);
}

// The tensor-core operand of the persistent ranges, or none for the FMA kernel: the developer
// knob LSTM_ORT_MMA if set, else what the precision mode and the shape call for.
template <typename T>
std::optional<MmaOperand> MmaOperandOf(Precision precision, const Dims& d) {
  std::optional<MmaOverride> knob;
  try {
    knob = MmaOverrideFromEnvironment();
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error(std::string("FusedLSTM: ") + e.what());
  }
  if (knob) return knob->operand;
  return MmaOperandFor(precision, kElementTypeOf<T>, d);
}

// The ranges of one call and v1's step kernel: the persistent plans, unless the call runs every
// layer on v1's cuBLAS step (PrefersGemmSteps, or the developer knob LSTM_ORT_GEMM_STEP=1).
template <typename T>
std::vector<LayerRange> PlanCall(int device, Strategy strategy, Precision precision, const Dims& d, StepKernel* step) {
  constexpr ElementType type = kElementTypeOf<T>;
  if (type == ElementType::kFloat32 &&
      (PrefersGemmSteps(strategy, precision, type, d) || GemmStepForcedFromEnvironment())) {
    *step = StepKernel::kGemm;
    return OneLayerPerRange(static_cast<int>(d.L));
  }
  if (RunsOnCluster(strategy, d)) {
    const auto plan = PlanCluster(static_cast<int>(d.H), static_cast<int>(d.B), MaxClusterBlocks(device),
                                  ClusterSizeFromEnvironment(), ClusterSlicesFromEnvironment());
    if (plan) {
      *step = ChooseStepKernel(Strategy::kAuto, type, d);  // for a layer whose cluster the device refuses
      return ClusterRanges(static_cast<int>(d.L), *plan);
    }
  }
  if (strategy == Strategy::kCluster) strategy = Strategy::kAuto;  // the shape is beyond the cluster kernel
  *step = ChooseStepKernel(strategy, type, d);
  return PlanRangesOn<T>(device, strategy, d, MmaOperandOf<T>(precision, d));
}

// One call's stack, layer by layer or range by range, on one stream.
template <typename T>
class StackRun {
 public:
  StackRun(const Attributes& attrs, const CallIO& io, cudaStream_t stream, void* scratch, KeptSplit kept,
           StepGraphs* graphs)
      : attrs_(attrs),
        io_(io),
        d_(io.dims),
        stream_(stream),
        precision_(ResolvedPrecision(attrs.precision, io.dims)),
        kept_(kept),
        graphs_(graphs),
        s_(CarveScratch(io.dims, kElementTypeOf<T>, attrs.precision, kept.Kept(), scratch, nullptr)) {
    T_ = static_cast<int>(d_.T);
    B_ = static_cast<int>(d_.B);
    H_ = static_cast<int>(d_.H);
    D_ = static_cast<int>(d_.D);
    L_ = static_cast<int>(d_.L);
    rows_ = static_cast<long long>(T_) * B_;
    G_ = static_cast<long long>(kGates) * H_;
    cudaGetDevice(&device_);
    cudaDeviceGetAttribute(&sm_count_, cudaDevAttrMultiProcessorCount, device_);
    cublas_ = CublasHandleFor(stream);
  }

  void Run(Strategy strategy) {
    if (io_.seq_lens) {
      Check(cudaMemcpyAsync(s_.lens, io_.seq_lens, sizeof(int) * B_, cudaMemcpyHostToDevice, stream_), "copy lengths");
    } else {
      ClearPending();
      FillLengths<<<GridStrideBlocks(B_), kGridStrideThreads, 0, stream_>>>(s_.lens, B_, T_);
      Check(cudaGetLastError(), "fill lengths");
    }
    StepKernel step = StepKernel::kTiled;
    for (const LayerRange& range : PlanCall<T>(device_, strategy, precision_, d_, &step)) {
      if (range.cluster && RunCluster(range)) continue;
      if (range.plan && RunPersistent(range)) continue;
      for (int l = range.first; l < range.first + range.count; ++l) RunStepwise(l, step);
    }
  }

 private:
  const T* Weights() const { return static_cast<const T*>(io_.in[kW]); }
  // Layer l's recurrent rows of direction dir: they follow its input rows.
  const T* RecurrentWeights(int l, int dir) const { return Weights() + d_.WeightOffset(l, dir) + d_.LayerInput(l) * G_; }

  // gx[d] = x @ Wx[d] for every row of layer l's input.
  void Project(int l) {
    ProjectionArgs<T> p{};
    p.x = l == 0 ? static_cast<const T*>(io_.in[kX]) : static_cast<const T*>(s_.layer[(l - 1) % 2]);
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
    const int64_t kept_at = KeptSplitOffset(d_, l, 0);
    if (kept_.hi) p.kept = {kept_.hi + kept_at, kept_.lo ? kept_.lo + kept_at : nullptr};
    p.math = ProjectionMathFor(precision_, d_);
    ProjectInput(p, cublas_, stream_);
  }

  // Layer 0 in layout 1 is batch-major: its projection rows come in (b, t) order.
  long long GxStrideT(int l) const { return l == 0 && attrs_.layout == 1 ? 1 : B_; }
  long long GxStrideB(int l) const { return l == 0 && attrs_.layout == 1 ? T_ : 1; }

  // Where layer l writes its sequence output: Y for the last layer, else a buffer the next
  // layer's projection reads as [T][B][D][H]. Positions past a sequence's end stay zero.
  void Output(int l, T** y, long long* st, long long* sd, long long* sb) {
    if (l == L_ - 1) {
      *y = static_cast<T*>(io_.out[kY]);
      const bool l0 = attrs_.layout == 0;
      *st = l0 ? static_cast<long long>(D_) * B_ * H_ : static_cast<long long>(D_) * H_;
      *sd = l0 ? static_cast<long long>(B_) * H_ : H_;
      *sb = l0 ? H_ : static_cast<long long>(T_) * D_ * H_;
    } else {
      *y = static_cast<T*>(s_.layer[l % 2]);
      *st = static_cast<long long>(B_) * D_ * H_;
      *sd = H_;
      *sb = static_cast<long long>(D_) * H_;
    }
    if (*y && (io_.seq_lens || io_.max_len < T_))
      Check(cudaMemsetAsync(*y, 0, sizeof(T) * rows_ * D_ * H_, stream_), "zero Y");
  }

  void InitLayerStates(int l, float* h, float* c) {
    LaunchInitStates<T>(static_cast<const T*>(io_.in[kInitialH]), static_cast<const T*>(io_.in[kInitialC]), h, c, l,
                        D_, L_ * D_, B_, H_, static_cast<int>(attrs_.layout), stream_);
  }

  void WriteFinalStates(int l, const float* h, const float* c) {
    LaunchFinalStates<T>(h, c, s_.lens, static_cast<T*>(io_.out[kYH]), static_cast<T*>(io_.out[kYC]), l, D_, L_ * D_,
                         B_, H_, static_cast<int>(attrs_.layout), stream_);
  }

  // v1: one launch of a fused step kernel per timestep.
  void RunStepwise(int l, StepKernel kernel) {
    Project(l);
    StepArgs<T> a{};
    a.B = B_;
    a.H = H_;
    a.lens = s_.lens;
    a.gx_st = GxStrideT(l);
    a.gx_sb = GxStrideB(l);
    Output(l, &a.y, &a.y_st, &a.y_sd, &a.y_sb);
    SetDirectionFields(a, attrs_, s_.gx, rows_, G_, D_);
    for (int dir = 0; dir < D_; ++dir) {
      const int k = l * D_ + dir;
      a.wh[dir] = RecurrentWeights(l, dir);
      a.bias[dir] = BiasSlice<T>(io_, k, H_);
      a.peep[dir] = PeepSlice<T>(io_, k, H_);
      a.c[dir] = s_.c + static_cast<long long>(dir) * B_ * H_;
    }
    InitLayerStates(l, s_.h[0], s_.c);
    [[maybe_unused]] const GemmStepScratch gemm{s_.gates, s_.stream_done, s_.wh_half, s_.h_half, s_.wh_amax};
    [[maybe_unused]] GemmStepPlan plan;
    if constexpr (kElementTypeOf<T> == ElementType::kFloat32) {
      if (kernel == StepKernel::kGemm)
        plan = PrepareGemmSteps(a, d_, ProjectionMathFor(precision_, d_), !HalfStepWeightsDisabledFromEnvironment(),
                                gemm, stream_);
    }
    // Each launch below is checked right after it, so nothing foreign is pending between them.
    // The loop works on its own copy of the arguments: a replayed graph skips it.
    auto enqueue_steps = [&, a]() mutable {
      int cur = 0;
      for (int step = 0; step < io_.max_len; ++step) {
        a.step = step;
        for (int dir = 0; dir < D_; ++dir) {
          a.h_in[dir] = s_.h[cur] + static_cast<long long>(dir) * B_ * H_;
          a.h_out[dir] = s_.h[cur ^ 1] + static_cast<long long>(dir) * B_ * H_;
        }
        if constexpr (kElementTypeOf<T> == ElementType::kFloat32) {
          if (kernel == StepKernel::kGemm) {
            ClearPending();
            const bool h_is_zero = step == 0 && !io_.in[kInitialH];
            LaunchGemmStep(a, d_, gemm, plan, h_is_zero, sm_count_, cublas_, stream_);
            Check(cudaGetLastError(), "recurrent step");
            cur ^= 1;
            continue;
          }
        }
        if (kernel == StepKernel::kSplitK) LaunchSplitKStep(a, D_, sm_count_, stream_);
        else LaunchTiledStep(a, D_, device_, stream_);
        Check(cudaGetLastError(), "recurrent step");
        cur ^= 1;
      }
    };
    bool through_graph = false;
    if constexpr (kElementTypeOf<T> == ElementType::kFloat32) {
      through_graph = kernel == StepKernel::kGemm && graphs_ && io_.max_len >= kMinStepsForStepGraph;
      if (through_graph) graphs_->Run(GemmStepLoopKey(a, gemm, plan), stream_, enqueue_steps);
    }
    if (!through_graph) enqueue_steps();
    WriteFinalStates(l, s_.h[io_.max_len % 2], s_.c);
  }

  // What the cuBLAS step loop of a layer captures by value (v1/step_graphs.h).
  StepLoopKey GemmStepLoopKey(const StepArgs<float>& a, const GemmStepScratch& gemm, const GemmStepPlan& plan) const {
    StepLoopKey key;
    key.Add(device_).Add(sm_count_).Add(static_cast<const void*>(cublas_)).Add(io_.max_len).Add(D_).Add(a.B).Add(a.H);
    key.Add(io_.in[kInitialH] != nullptr).Add(a.lens).Add(a.gx_st).Add(a.gx_sb).Add(a.y).Add(a.y_st).Add(a.y_sd);
    key.Add(a.y_sb).Add(s_.h[0]).Add(s_.h[1]);
    for (int dir = 0; dir < D_; ++dir) {
      key.Add(a.gx[dir]).Add(a.wh[dir]).Add(a.bias[dir]).Add(a.peep[dir]).Add(a.c[dir]).Add(a.reverse[dir]);
      const CellParams& cell = a.cell[dir];
      for (const Activation& act : cell.act) key.Add(static_cast<int>(act.kind)).Add(act.alpha).Add(act.beta);
      key.Add(cell.has_clip).Add(cell.clip).Add(cell.input_forget);
    }
    key.Add(gemm.gates).Add(gemm.stream_done).Add(gemm.wh_half).Add(gemm.h_half).Add(gemm.wh_amax);
    key.Add(static_cast<int>(plan.math)).Add(static_cast<int>(plan.weights)).Add(plan.streams);
    key.Add(plan.gemm && plan.gemm->Ready());
    return key;
  }

  // The persistent kernel over a range; false when the device cannot launch its grid
  // cooperatively, and the caller falls back to v1.
  bool RunPersistent(const LayerRange& range) {
    const PersistentPlan& plan = *range.plan;
    const int l0 = range.first;
    if (io_.max_len == 0) {
      for (int r = 0; r < range.count; ++r) RunStepwise(l0 + r, StepKernel::kTiled);
      return true;
    }
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
    a.gx_st = GxStrideT(l0);
    a.gx_sb = GxStrideB(l0);
    const long long state = static_cast<long long>(D_) * B_ * H_;
    for (int r = 0; r < range.count; ++r) {
      const int l = l0 + r;
      a.in_rows[r] = r == 0 ? 0 : static_cast<int>(d_.LayerInput(l));
      for (int dir = 0; dir < D_; ++dir) {
        const int k = l * D_ + dir;
        // The first layer multiplies only its recurrent rows; the others their input rows too.
        a.w[r][dir] = r == 0 ? RecurrentWeights(l, dir) : Weights() + d_.WeightOffset(l, dir);
        a.bias[r][dir] = BiasSlice<T>(io_, k, H_);
        a.peep[r][dir] = PeepSlice<T>(io_, k, H_);
      }
      InitLayerStates(l, s_.h0 + r * state, s_.c0 + r * state);
    }
    SetDirectionFields(a, attrs_, s_.gx, rows_, G_, D_);
    a.hbuf = s_.hbuf;
    a.h0 = s_.h0;
    a.c0 = s_.c0;
    a.h_fin = s_.h_fin;
    a.c_fin = s_.c_fin;
    a.barrier = s_.barrier;
    const int last = l0 + range.count - 1;
    Output(last, &a.y, &a.y_st, &a.y_sd, &a.y_sb);
    Check(cudaMemsetAsync(s_.hbuf, 0, HBufBytes(d_), stream_), "zero h");
    Check(cudaMemsetAsync(s_.barrier, 0, sizeof(unsigned), stream_), "zero barrier");
    const cudaError_t e = plan.mma ? LaunchPersistentMma(a, plan.operand, stream_) : LaunchPersistent(a, stream_);
    if (e == cudaErrorCooperativeLaunchTooLarge || e == cudaErrorNotSupported) {  // e.g. no cooperative launch
      ClearPending();
      return false;
    }
    Check(e, "persistent kernel");
    if (!plan.mma) ReportPhaseClocks(stream_, io_.max_len + range.count - 1);
    for (int r = 0; r < range.count; ++r) WriteFinalStates(l0 + r, s_.h_fin + r * state, s_.c_fin + r * state);
    return true;
  }

  // One layer on the cluster kernel; false when the device refuses the cluster (the caller runs
  // the layer with v1) or the call has no steps.
  bool RunCluster(const LayerRange& range) {
    const int l = range.first;
    if (io_.max_len == 0) return false;
    Project(l);
    ClusterArgs<T> a{};
    a.plan = *range.cluster;
    a.B = B_;
    a.H = H_;
    a.max_len = io_.max_len;
    a.D = D_;
    a.lens = s_.lens;
    a.gx_st = GxStrideT(l);
    a.gx_sb = GxStrideB(l);
    SetDirectionFields(a, attrs_, s_.gx, rows_, G_, D_);
    for (int dir = 0; dir < D_; ++dir) {
      const int k = l * D_ + dir;
      a.w[dir] = RecurrentWeights(l, dir);
      a.bias[dir] = BiasSlice<T>(io_, k, H_);
      a.peep[dir] = PeepSlice<T>(io_, k, H_);
    }
    Output(l, &a.y, &a.y_st, &a.y_sd, &a.y_sb);
    InitLayerStates(l, s_.h[0], s_.c);
    a.h0 = s_.h[0];
    a.c0 = s_.c;
    a.h_fin = s_.h[1];
    a.c_fin = s_.c;  // each cell's c is read once by its owner before the loop and written after it
    const cudaError_t e = LaunchCluster(a, stream_);
    if (e == cudaErrorInvalidClusterSize || e == cudaErrorNotSupported || e == cudaErrorLaunchOutOfResources) {
      ClearPending();
      return false;
    }
    Check(e, "cluster kernel");
    WriteFinalStates(l, s_.h[1], s_.c);
    return true;
  }


  const Attributes& attrs_;
  const CallIO& io_;
  const Dims& d_;
  cudaStream_t stream_;
  Precision precision_;  // `auto` resolved for this call's shape
  KeptSplit kept_;       // W's TF32 halves kept across calls, or none
  StepGraphs* graphs_;   // the node's cached step graphs, or null
  Scratch s_;
  cublasHandle_t cublas_ = nullptr;
  int T_ = 0, B_ = 0, H_ = 0, D_ = 1, L_ = 1, device_ = 0, sm_count_ = 132;
  long long rows_ = 0, G_ = 0;
};

}  // namespace

template <typename T>
std::string DescribeStrategy(const Dims& d, Strategy strategy, Precision precision) {
  int device = 0;
  Check(cudaGetDevice(&device), "current device");
  StepKernel step = StepKernel::kTiled;
  const Precision resolved = ResolvedPrecision(precision, d);
  const std::vector<LayerRange> ranges = PlanCall<T>(device, strategy, resolved, d, &step);
  const std::string text = DescribeRanges(ranges, step);
  if (precision != Precision::kAuto) return text;
  return text + "; auto runs " + (resolved == Precision::kTf32 ? "tf32" : "fp32") + " at this size";
}

template <typename T>
size_t CudaScratchBytes(const Dims& d, Precision precision, bool weights_kept) {
  return ScratchBytes(d, kElementTypeOf<T>, precision, weights_kept);
}

template <typename T>
void RunLstmCuda(const Attributes& attrs, const CallIO& io, void* stream, void* scratch, Strategy strategy,
                 KeptSplit kept, StepGraphs* graphs) {
  if (io.dims.B == 0) return;
  StackRun<T>(attrs, io, static_cast<cudaStream_t>(stream), scratch, kept, graphs).Run(strategy);
}

// The element types FusedLSTM registers for CUDA (cuda_ops.cc).
#define LSTM_ORT_INSTANTIATE(T)                                                  \
  template std::string DescribeStrategy<T>(const Dims& d, Strategy strategy, Precision precision); \
  template size_t CudaScratchBytes<T>(const Dims& d, Precision precision, bool weights_kept); \
  template void RunLstmCuda<T>(const Attributes& attrs, const CallIO& io, void* stream, void* scratch, \
                               Strategy strategy, KeptSplit kept, StepGraphs* graphs);
LSTM_ORT_INSTANTIATE(float)
LSTM_ORT_INSTANTIATE(__half)
#undef LSTM_ORT_INSTANTIATE

}  // namespace lstm_ort
