// One factored FusedLSTM call on CUDA, layer by layer on the caller's stream:
//   1. per direction, the input projection of every step: x A then (x A) B on cuBLAS (a part kept
//      whole: x W), into gx [D][T*B][4H];
//   2. the recurrence: where every direction's recurrence is factored and the factors' tiles fit on
//      chip, one persistent launch for every step (recurrence_kernel.cuh); otherwise, per step,
//      p = h A on cuBLAS for each factored direction, then one launch of LowRankStep for both
//      directions (p B + gx_t + bias, the cell, the writes).
// float16 inputs are widened to fp32 once per call: the math is fp32, as on the whole-weight path.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <optional>

#include "call_io.h"
#include "cuda/cuda_check.h"
#include "cuda/device_limits.h"
#include "cuda/direction_fields.h"
#include "cuda/element_traits.h"
#include "cuda/gemm/cublas_handles.h"
#include "cuda/grid_stride.h"
#include "cuda/layer_io.cuh"
#include "cuda/low_rank/gemm.h"
#include "cuda/low_rank/recurrence_kernel.cuh"
#include "cuda/low_rank/recurrence_plan.h"
#include "cuda/low_rank/run.h"
#include "cuda/low_rank/scratch.h"
#include "cuda/low_rank/step_kernel.cuh"
#include "cuda/process_cache.h"
#include "cuda/state_kernels.cuh"

namespace lstm_ort {
namespace {

template <typename T>
__global__ void Widen(const T* __restrict__ in, float* __restrict__ out, long long n) {
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<long long>(gridDim.x) * blockDim.x)
    out[i] = ToF(in[i]);
}

template <typename T, typename TY>
const void* RecurrenceKernel() {
  return reinterpret_cast<const void*>(LowRankRecurrence<T, TY>);
}

// The persistent recurrence's limits on `device`: both of its output types (the last layer
// writes T, the others fp32) get the opt-in shared memory, and co-residency is the fewer blocks
// either's registers allow.
template <typename T>
DeviceLimits MeasureRecurrenceLimits(int device) {
  const SmAttributes sm = ReadSmAttributes(device);
  const int smem_per_sm = sm.smem_per_sm, reserved = sm.reserved;
  const int by_registers = FewestBlocksByRegisters({RecurrenceKernel<T, T>(), RecurrenceKernel<T, float>()},
                                                   kLrpThreads, sm.smem_per_block,
                                                   "occupancy of the factored recurrence");
  DeviceLimits dev;
  dev.sm_count = sm.sm_count;
  dev.smem_per_block = static_cast<size_t>(sm.smem_per_block);
  dev.blocks_per_sm = [by_registers, smem_per_sm, reserved](size_t bytes, int) {
    return std::min<int>(by_registers, static_cast<int>(smem_per_sm / (bytes + reserved)));
  };
  return dev;
}

template <typename T>
class LowRankRun {
 public:
  LowRankRun(const Attributes& attrs, const CallIO& io, cudaStream_t stream, cublasHandle_t lent_cublas, void* scratch,
             CallPlan& plan)
      : attrs_(attrs),
        plan_(plan),
        io_(io),
        d_(io.dims),
        layout_(io.dims, attrs.ranks),
        stream_(stream),
        s_(CarveLowRankScratch(io.dims, attrs.ranks, kElementTypeOf<T>, scratch, nullptr)),
        lease_(lent_cublas, stream),
        cublas_(lease_.handle()) {
    rows_ = d_.T * d_.B;
    G_ = kGates * d_.H;
  }

  void Run() {
    LengthsOnDevice(s_.lens, io_.seq_lens, static_cast<int>(d_.B), static_cast<int>(d_.T), stream_);
    x_ = Fp32(kX, s_.x, rows_ * d_.I);
    w_ = Fp32(kW, s_.w, layout_.WeightCount());
    f_ = Fp32(kFactors, s_.factors, layout_.FactorCount());
    for (const RangePlan& range : plan_.ranges) RunLayer(range);
  }

 private:
  // An input as fp32: itself (float32), or widened into `to` (float16).
  const float* Fp32(int input, float* to, long long n) {
    if constexpr (kElementTypeOf<T> == ElementType::kFloat32) {
      return static_cast<const float*>(io_.in[input]);
    } else {
      if (n == 0) return to;
      ClearPending();
      Widen<T><<<GridStrideBlocks(n), kGridStrideThreads, 0, stream_>>>(static_cast<const T*>(io_.in[input]), to, n);
      Check(cudaGetLastError(), "widen to fp32");
      return to;
    }
  }

  // gx[dir] for every row of layer l's input `in` [rows][I].
  void Project(int l, const float* in) {
    const long long I = d_.LayerInput(l);
    for (int dir = 0; dir < d_.D; ++dir) {
      float* gx = s_.gx + dir * rows_ * G_;
      const long long r = layout_.InputRank(l, dir);
      if (r == 0) {
        RowMajorGemm(cublas_, rows_, G_, I, in, I, w_ + layout_.WeightOffset(l, dir), G_, gx, G_);
        continue;
      }
      const float* A = f_ + layout_.InputFactorOffset(l, dir);
      RowMajorGemm(cublas_, rows_, r, I, in, I, A, r, s_.px, r);
      RowMajorGemm(cublas_, rows_, G_, r, s_.px, r, A + I * r, G_, gx, G_);
    }
  }

  void RunLayer(const RangePlan& range) {
    const int l = range.first;
    const float* in = l == 0 ? x_ : s_.layer[(l - 1) % 2];
    if (rows_ > 0) Project(l, in);
    if (l == d_.L - 1) Step<T>(range, static_cast<T*>(io_.out[kY]));
    else Step<float>(range, s_.layer[l % 2]);
  }

  template <typename TY>
  void Step(const RangePlan& range, TY* y) {
    const int l = range.first;
    const int B = static_cast<int>(d_.B), H = static_cast<int>(d_.H), D = static_cast<int>(d_.D);
    LowRankStepArgs<T, TY> a{};
    a.B = B;
    a.H = H;
    a.lens = s_.lens;
    const LayerIO io = LayerIOFor(d_, attrs_.layout, l);
    ApplyLayerIO(io, io, y, a);
    ZeroPastEnds(y, io_, stream_);
    const long long state = d_.B * d_.H;
    SetDirectionFields(a, attrs_, s_.gx, rows_, G_, D);
    for (int dir = 0; dir < D; ++dir) {
      const long long r = layout_.RecurrentRank(l, dir);
      a.K[dir] = static_cast<int>(r ? r : d_.H);
      a.w[dir] = r ? f_ + layout_.RecurrentFactorOffset(l, dir) + d_.H * r
                   : w_ + layout_.WeightOffset(l, dir) + layout_.InputRows(l, dir) * G_;
      a.ld_lhs[dir] = r ? r : d_.H;
      a.c[dir] = s_.c + dir * state;
    }
    SetLayerSlices<T>(a.bias, a.peep, io_, l, D, d_.H);
    InitLayerStates<T>(io_, attrs_.layout, l, s_.h[0], s_.c, stream_);
    int cur = 0;  // the buffer of the final h
    // The plan's persistent recurrence (every direction factored and its tiles fit), else per step.
    const LowRankPlan* plan = range.low_rank();
    if (!plan || !RunRecurrence<TY>(l, *plan, a)) cur = StepByStep<TY>(l, a);
    WriteFinalStates<T>(io_, attrs_.layout, l, s_.h[cur], s_.c, s_.lens, stream_);
  }

  // Every step of layer l in one cooperative launch; h and c come from and go back to s_.h[0] and
  // s_.c, s_.h[1] holds h transposed. False, with nothing run, where the device refuses the launch
  // (no cooperative launch, or fewer SMs than planned, e.g. under an MPS limit).
  template <typename TY>
  bool RunRecurrence(int l, const LowRankPlan& plan, const LowRankStepArgs<T, TY>& step) {
    LowRankRecurrenceArgs<T, TY> a{};
    a.plan = plan;
    a.B = static_cast<int>(d_.B);
    a.H = static_cast<int>(d_.H);
    a.max_len = io_.max_len;
    for (int dir = 0; dir < d_.D; ++dir) {
      const long long r = layout_.RecurrentRank(l, dir);
      a.rank[dir] = static_cast<int>(r);
      a.a[dir] = f_ + layout_.RecurrentFactorOffset(l, dir);
      a.b[dir] = a.a[dir] + d_.H * r;
      a.gx[dir] = step.gx[dir];
      a.bias[dir] = step.bias[dir];
      a.peep[dir] = step.peep[dir];
      a.reverse[dir] = step.reverse[dir];
      a.cell[dir] = step.cell[dir];
    }
    const LayerIO io = LayerIOFor(d_, attrs_.layout, l);
    ApplyLayerIO(io, io, step.y, a);
    a.h = s_.h[0];
    a.c = s_.c;
    a.ht = s_.h[1];
    a.p = s_.p;
    a.lens = s_.lens;
    a.barrier = s_.barrier;
    const long long Bp = PaddedBatch(d_.B);
    Check(cudaMemsetAsync(s_.barrier, 0, sizeof(unsigned), stream_), "reset the grid barrier");
    Check(cudaMemsetAsync(a.ht, 0, sizeof(float) * d_.D * d_.H * Bp, stream_), "zero the padded h");
    Check(cudaMemsetAsync(a.p, 0, sizeof(float) * d_.D * plan.rank * Bp, stream_), "zero the padded p");
    void* params[] = {&a};
    ClearPending();
    const cudaError_t e = cudaLaunchCooperativeKernel(RecurrenceKernel<T, TY>(), dim3(plan.blocks), dim3(kLrpThreads),
                                                      params, plan.smem, stream_);
    if (e == cudaErrorCooperativeLaunchTooLarge || e == cudaErrorNotSupported) {
      ClearPending();
      plan_.fallbacks.Add("layer " + std::to_string(l) + ": the device refused the low rank recurrence's launch (" +
                          cudaGetErrorName(e) + "): one launch per step");
      return false;
    }
    Check(e, "factored recurrence");
    return true;
  }

  // One cuBLAS product and one LowRankStep launch per step. Returns which s_.h holds the final h.
  template <typename TY>
  int StepByStep(int l, LowRankStepArgs<T, TY>& a) {
    const int B = static_cast<int>(d_.B), H = static_cast<int>(d_.H), D = static_cast<int>(d_.D);
    const long long state = d_.B * d_.H;
    const long long widest = WidestRank(attrs_.ranks, true);
    const dim3 grid((H + kLrUnits - 1) / kLrUnits, (B + kLrRows - 1) / kLrRows, D);
    int cur = 0;
    for (int step = 0; step < io_.max_len; ++step) {
      a.step = step;
      for (int dir = 0; dir < D; ++dir) {
        const float* h = s_.h[cur] + dir * state;
        a.h_in[dir] = h;
        a.h_out[dir] = s_.h[cur ^ 1] + dir * state;
        const long long r = layout_.RecurrentRank(l, dir);
        if (r == 0) {
          a.lhs[dir] = h;
          continue;
        }
        float* p = s_.p + dir * d_.B * widest;
        RowMajorGemm(cublas_, d_.B, r, d_.H, h, d_.H, f_ + layout_.RecurrentFactorOffset(l, dir), r, p, r);
        a.lhs[dir] = p;
      }
      ClearPending();
      LowRankStep<T, TY><<<grid, kLrThreads, 0, stream_>>>(a);
      Check(cudaGetLastError(), "factored step");
      cur ^= 1;
    }
    return cur;
  }

  const Attributes& attrs_;
  CallPlan& plan_;
  const CallIO& io_;
  const Dims& d_;
  WeightLayout layout_;
  cudaStream_t stream_;
  LowRankScratch s_;
  CublasLease lease_;
  cublasHandle_t cublas_;  // lease_'s, pointed at stream_ throughout
  const float *x_ = nullptr, *w_ = nullptr, *f_ = nullptr;
  long long rows_ = 0, G_ = 0;
};

}  // namespace

template <typename T>
const DeviceLimits& LowRankRecurrenceLimits(int device) {
  return ProcessCached(device, [device] { return MeasureRecurrenceLimits<T>(device); });
}

template <typename T>
void RunLowRankCuda(const Attributes& attrs, const CallIO& io, void* stream, void* lent_cublas, void* scratch,
                    CallPlan& plan) {
  if (io.dims.B == 0) return;
  LowRankRun<T>(attrs, io, static_cast<cudaStream_t>(stream), static_cast<cublasHandle_t>(lent_cublas), scratch, plan)
      .Run();
}

template const DeviceLimits& LowRankRecurrenceLimits<float>(int device);
template const DeviceLimits& LowRankRecurrenceLimits<__half>(int device);
template void RunLowRankCuda<float>(const Attributes& attrs, const CallIO& io, void* stream, void* lent_cublas,
                                    void* scratch, CallPlan& plan);
template void RunLowRankCuda<__half>(const Attributes& attrs, const CallIO& io, void* stream, void* lent_cublas,
                                     void* scratch, CallPlan& plan);

}  // namespace lstm_ort
