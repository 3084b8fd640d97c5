// FusedLSTM on CUDA (v1): per layer, one cuBLAS GEMM projects every timestep of the input for
// both directions; then one fused kernel per step does the recurrent product, gates, cell
// update, masking and writes, for both directions at once.
#include "cuda/lstm_cuda.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "call_io.h"
#include "cuda/cublas_handles.h"
#include "cuda/persistent_kernel.cuh"
#include "cuda/persistent_plan.h"
#include "cuda/split_tf32.cuh"
#include "cuda/step_splitk.cuh"
#include "cuda/step_tiled.cuh"

namespace lstm_ort {
namespace {

void Check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string("FusedLSTM CUDA: ") + what + ": " + cudaGetErrorString(e));
}
// Launch errors are read right after each launch; an error some other library left pending on
// this thread (cuBLAS, or ORT's own kernels) is cleared first, so it is not reported as ours.
void ClearPending() { (void)cudaGetLastError(); }

void Check(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(std::string("FusedLSTM cuBLAS: ") + what + " failed with status " + std::to_string(s));
}

constexpr size_t kAlign = 256;
size_t Aligned(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

// The per-step kernels v1 can use.
enum class StepKernel { kTiled, kSplitK };

struct Scratch {
  float* gx;       // [D][T*B][4H]
  float* h[2];     // [D][B][H] each
  float* c;        // [D][B][H]
  int* lens;       // [B]
  void* layer[2];  // [T][B][D][H] of the element type, between layers
  // The persistent kernel's: states per layer of a range, [L][D][B][H]; h in flight; barrier.
  float *h0, *c0, *h_fin, *c_fin;
  float* hbuf;
  unsigned* barrier;
  // fp32 input projections on TF32 tensor cores: the layer input and its weights, split.
  float *x_hi, *x_lo, *w_hi, *w_lo;
};

// h in flight for the persistent kernel: [2][L][D][H][B rounded up to 64], room for any plan's padding.
size_t HBufBytes(const Dims& d) { return sizeof(float) * 2 * d.L * d.D * d.H * ((d.B + 63) / 64 * 64); }

// fp32 input projections split for 3xTF32 (split_tf32.cuh) from this many rows (T*B) on, in
// chunks of at most kSplitChunkRows rows so the split copies stay small. Measured on the H100:
// B=1 (100 rows) lost 3% with the split, B=64 (6400 rows) gained 10-15%.
constexpr int64_t kMinRowsForSplit = 1024;
constexpr int64_t kSplitChunkRows = 16384;

Scratch Carve(const Dims& d, size_t elem, void* base, size_t* total) {
  Scratch s{};
  char* p = static_cast<char*>(base);
  size_t off = 0;
  auto take = [&](size_t bytes) {
    char* q = p ? p + off : nullptr;
    off += Aligned(bytes);
    return q;
  };
  const size_t state = sizeof(float) * d.D * d.B * d.H;
  s.gx = reinterpret_cast<float*>(take(sizeof(float) * d.D * d.T * d.B * kGates * d.H));
  s.h[0] = reinterpret_cast<float*>(take(state));
  s.h[1] = reinterpret_cast<float*>(take(state));
  s.c = reinterpret_cast<float*>(take(state));
  s.lens = reinterpret_cast<int*>(take(sizeof(int) * d.B));
  const size_t layer = d.L > 1 ? elem * d.T * d.B * d.D * d.H : 0;
  s.layer[0] = take(layer);
  s.layer[1] = take(d.L > 2 ? layer : 0);
  const size_t states = sizeof(float) * d.L * d.D * d.B * d.H;
  s.h0 = reinterpret_cast<float*>(take(states));
  s.c0 = reinterpret_cast<float*>(take(states));
  s.h_fin = reinterpret_cast<float*>(take(states));
  s.c_fin = reinterpret_cast<float*>(take(states));
  s.hbuf = reinterpret_cast<float*>(take(HBufBytes(d)));
  s.barrier = reinterpret_cast<unsigned*>(take(sizeof(unsigned)));
  if (elem == sizeof(float) && d.T * d.B >= kMinRowsForSplit) {
    const int64_t widest = std::max(d.I, d.D * d.H);  // the largest layer input
    const size_t x = sizeof(float) * std::min<int64_t>(d.T * d.B, kSplitChunkRows) * widest;
    const size_t w = sizeof(float) * d.D * (widest + d.H) * kGates * d.H;
    s.x_hi = reinterpret_cast<float*>(take(x));
    s.x_lo = reinterpret_cast<float*>(take(x));
    s.w_hi = reinterpret_cast<float*>(take(w));
    s.w_lo = reinterpret_cast<float*>(take(w));
  }
  if (total) *total = off;
  return s;
}

// Row of state k = l*D + d for batch entry b, in [L*D, B, H] (layout 0) or [B, L*D, H] (layout 1).
__device__ __forceinline__ long long StateRow(int layout, int LD, int B, int k, int b) {
  return layout == 0 ? static_cast<long long>(k) * B + b : static_cast<long long>(b) * LD + k;
}

template <typename T>
__global__ void InitStates(const T* h0, const T* c0, float* h, float* c, int layer, int D, int LD, int B, int H,
                           int layout) {
  const long long n = static_cast<long long>(D) * B * H;
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    const int j = i % H, b = (i / H) % B, d = i / (static_cast<long long>(H) * B);
    const long long src = StateRow(layout, LD, B, layer * D + d, b) * H + j;
    h[i] = h0 ? ToF(h0[src]) : 0.f;
    c[i] = c0 ? ToF(c0[src]) : 0.f;
  }
}

// Final states; a sequence of length 0 ends in zeros, as stock onnxruntime gives.
template <typename T>
__global__ void FinalStates(const float* h, const float* c, const int* lens, T* y_h, T* y_c, int layer, int D,
                            int LD, int B, int H, int layout) {
  const long long n = static_cast<long long>(D) * B * H;
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    const int j = i % H, b = (i / H) % B, d = i / (static_cast<long long>(H) * B);
    const long long dst = StateRow(layout, LD, B, layer * D + d, b) * H + j;
    const bool empty = lens[b] == 0;
    if (y_h) y_h[dst] = FromF<T>(empty ? 0.f : h[i]);
    if (y_c) y_c[dst] = FromF<T>(empty ? 0.f : c[i]);
  }
}

int GridFor(long long n) { return static_cast<int>(std::min<long long>((n + 255) / 256, 4096)); }

constexpr size_t kTiledSmemBudget = 200 * 1024;

// The limit belongs to (kernel, device): raised once per device.
template <auto kernel>
void RaiseSmemLimit(int bytes, int device) {
  static std::atomic<uint64_t> raised{0};
  const uint64_t bit = uint64_t{1} << (device & 63);
  if (raised.load() & bit) return;
  Check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes),
        "raise the shared memory limit");
  raised.fetch_or(bit);
}

template <typename T, int RG>
void LaunchTiledRG(const StepArgs<T>& a, int D, int device, cudaStream_t stream) {
  using S = TiledShape<RG>;
  // The largest K chunk that fits the budget: one chunk whenever H allows.
  int kc = (a.H + S::kAlign - 1) / S::kAlign * S::kAlign;
  while (kc > S::kAlign && TiledSmemBytes<T, RG>(kc, a.H) > kTiledSmemBudget) kc -= S::kAlign;
  RaiseSmemLimit<StepTiled<T, RG>>(static_cast<int>(kTiledSmemBudget), device);
  dim3 grid((a.H + kTiledUnits - 1) / kTiledUnits, (a.B + S::RB - 1) / S::RB, D);
  StepTiled<T, RG><<<grid, kTiledThreads, TiledSmemBytes<T, RG>(kc, a.H), stream>>>(a, kc);
}

template <typename T>
void LaunchTiled(const StepArgs<T>& a, int D, int device, cudaStream_t stream) {
  if (a.B <= 32) LaunchTiledRG<T, 8>(a, D, device, stream);
  else LaunchTiledRG<T, 16>(a, D, device, stream);
}

template <typename T>
void LaunchSplitK(const StepArgs<T>& a, int D, int sm_count, cudaStream_t stream) {
  const int blocks_x = (a.H + kSplitKWarps - 1) / kSplitKWarps;
  // Spread rows over more blocks when one block per unit group leaves SMs idle.
  const int split = std::max(1, std::min(a.B, (sm_count + blocks_x * D - 1) / (blocks_x * D)));
  const int rows = (a.B + split - 1) / split;
  dim3 grid(blocks_x, (a.B + rows - 1) / rows, D);
  const int threads = kSplitKWarps * 32;
  if (a.H <= 32) StepSplitK<T, 1><<<grid, threads, 0, stream>>>(a, rows);
  else if (a.H <= 64) StepSplitK<T, 2><<<grid, threads, 0, stream>>>(a, rows);
  else if (a.H <= 128) StepSplitK<T, 4><<<grid, threads, 0, stream>>>(a, rows);
  else if (a.H <= 256) StepSplitK<T, 8><<<grid, threads, 0, stream>>>(a, rows);
  else if (a.H <= 512) StepSplitK<T, 16><<<grid, threads, 0, stream>>>(a, rows);
  else StepSplitK<T, 32><<<grid, threads, 0, stream>>>(a, rows);
}

// Which per-step kernel v1 uses.
StepKernel ChooseStep(Strategy strategy, const Dims& d) {
  if (strategy == Strategy::kSplitK && d.H <= 1024) return StepKernel::kSplitK;  // registers cap split-K at H=1024
  if (strategy == Strategy::kTiled || strategy == Strategy::kSplitK) return StepKernel::kTiled;
  return d.B <= 16 && d.H <= 1024 ? StepKernel::kSplitK : StepKernel::kTiled;
}

// The persistent kernel's register-tile variants (R rows).
template <typename T>
const void* PersistentKernel(int R) {
  return R == 4 ? reinterpret_cast<const void*>(PersistentLstm<T, 4>) : reinterpret_cast<const void*>(PersistentLstm<T, 8>);
}

// Queried once per (element type, device), developer knobs included: a call plans on plain
// arithmetic.
template <typename T>
const DeviceLimits& PersistentLimits(int device) {
  static std::mutex mu;
  static std::map<int, DeviceLimits> cache;  // map nodes stay put: references outlive the lock
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(device);
  if (it != cache.end()) return it->second;
  int sm_count = 0, smem_per_block = 0, smem_per_sm = 0, reserved = 0, by_registers[2] = {};  // R = 4, 8
  cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, device);
  cudaDeviceGetAttribute(&smem_per_block, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
  cudaDeviceGetAttribute(&smem_per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device);
  cudaDeviceGetAttribute(&reserved, cudaDevAttrReservedSharedMemoryPerBlock, device);
  for (int i = 0; i < 2; ++i) {
    const void* kernel = PersistentKernel<T>(i == 0 ? 4 : 8);
    Check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_per_block),
          "raise the shared memory limit");
    Check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&by_registers[i], kernel, kPersistentThreads, 0),
          "occupancy of the persistent kernel");
  }
  DeviceLimits dev;
  if (const char* tile = std::getenv("LSTM_ORT_PERSISTENT_TILE")) std::sscanf(tile, "%d,%d", &dev.only_u, &dev.only_bb);
  if (const char* chunks = std::getenv("LSTM_ORT_PERSISTENT_CHUNKS")) dev.resident_chunks = std::atoi(chunks);
  dev.sm_count = sm_count;
  dev.smem_per_block = static_cast<size_t>(smem_per_block);
  const int r4 = by_registers[0], r8 = by_registers[1];
  dev.blocks_per_sm = [r4, r8, smem_per_sm, reserved](size_t bytes, int R) {
    return std::min<int>(R == 4 ? r4 : r8, static_cast<int>(smem_per_sm / (bytes + reserved)));
  };
  return cache.emplace(device, std::move(dev)).first->second;
}

// v1 runs one layer per range; the persistent strategies cut the stack into ranges that fit.
template <typename T>
std::vector<LayerRange> PlanRanges(Strategy strategy, const Dims& d, int device) {
  const int L = static_cast<int>(d.L);
  if (strategy == Strategy::kTiled || strategy == Strategy::kSplitK) {
    std::vector<LayerRange> ranges;
    for (int l = 0; l < L; ++l) ranges.push_back(LayerRange{l, 1, std::nullopt});
    return ranges;
  }
  return PlanStack(L, static_cast<int>(d.D), static_cast<int>(d.T), static_cast<int>(d.H), static_cast<int>(d.B),
                   strategy != Strategy::kPersistent, PersistentLimits<T>(device));
}

int Log2(int n) {
  int k = 0;
  while ((1 << k) < n) ++k;
  return k;
}

// One call's stack, layer by layer or range by range, on one stream.
template <typename T>
class StackRun {
 public:
  StackRun(const Attributes& attrs, const CallIO& io, cudaStream_t stream, void* scratch)
      : attrs_(attrs), io_(io), d_(io.dims), stream_(stream), s_(Carve(io.dims, sizeof(T), scratch, nullptr)) {
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
    std::vector<int> lens(B_, T_);
    if (io_.seq_lens) lens.assign(io_.seq_lens, io_.seq_lens + B_);
    Check(cudaMemcpyAsync(s_.lens, lens.data(), sizeof(int) * B_, cudaMemcpyHostToDevice, stream_), "copy lengths");
    const StepKernel step = ChooseStep(strategy, d_);
    for (const LayerRange& range : PlanRanges<T>(strategy, d_, device_)) {
      if (range.plan && RunPersistent(range)) continue;
      for (int l = range.first; l < range.first + range.count; ++l) RunStepwise(l, step);
    }
  }

 private:
  const T* Weights() const { return static_cast<const T*>(io_.in[kW]); }

  // gx[d] = x @ Wx[d] for every row, one strided-batched GEMM over the directions
  // (column-major view: gx^T [4H, rows] = Wx^T [4H, I] * x^T [I, rows]). fp16 inputs run on
  // tensor cores with fp32 accumulation as they are; fp32 inputs, from kMinRowsForSplit rows on,
  // as three TF32 GEMMs on their split halves (split_tf32.cuh): about twice as fast as SGEMM
  // here, ~2e-6 from it end to end.
  void Project(int l) {
    if (rows_ == 0) return;
    const int I = static_cast<int>(d_.LayerInput(l));
    const T* x = l == 0 ? static_cast<const T*>(io_.in[kX]) : static_cast<const T*>(s_.layer[(l - 1) % 2]);
    const T* w = Weights() + d_.WeightOffset(l, 0);
    const long long w_stride = d_.LayerK(l) * G_;
    if constexpr (sizeof(T) == 2) {
      Gemm(w, x, I, w_stride, 0, rows_, CUDA_R_16F, CUBLAS_COMPUTE_32F, 0.f);
    } else if (rows_ < kMinRowsForSplit) {  // small GEMMs: the splits would cost more than they save
      Gemm(w, x, I, w_stride, 0, rows_, CUDA_R_32F, CUBLAS_COMPUTE_32F, 0.f);
    } else {
      const long long nw = D_ * w_stride;
      ClearPending();
      SplitTf32<<<GridFor(nw), 256, 0, stream_>>>(w, s_.w_hi, s_.w_lo, nw);
      Check(cudaGetLastError(), "split for TF32");
      for (long long r0 = 0; r0 < rows_; r0 += kSplitChunkRows) {
        const long long n = std::min<long long>(kSplitChunkRows, rows_ - r0);
        SplitTf32<<<GridFor(n * I), 256, 0, stream_>>>(x + r0 * I, s_.x_hi, s_.x_lo, n * I);
        Check(cudaGetLastError(), "split for TF32");
        Gemm(s_.w_hi, s_.x_hi, I, w_stride, r0, n, CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_TF32, 0.f);
        Gemm(s_.w_lo, s_.x_hi, I, w_stride, r0, n, CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_TF32, 1.f);
        Gemm(s_.w_hi, s_.x_lo, I, w_stride, r0, n, CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_TF32, 1.f);
      }
    }
  }

  // Rows [r0, r0 + n) of s_.gx (+)= x @ w, batched over the directions; x holds those rows.
  void Gemm(const void* w, const void* x, int I, long long w_stride, long long r0, long long n, cudaDataType_t type,
            cublasComputeType_t compute, float beta) {
    const float one = 1.f;
    Check(cublasGemmStridedBatchedEx(cublas_, CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(G_), static_cast<int>(n), I,
                                     &one, w, type, static_cast<int>(G_), w_stride, x, type, I, 0, &beta,
                                     s_.gx + r0 * G_, CUDA_R_32F, static_cast<int>(G_), rows_ * G_, D_, compute,
                                     CUBLAS_GEMM_DEFAULT),
          "input projection GEMM");
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
    const long long n = static_cast<long long>(D_) * B_ * H_;
    ClearPending();
    InitStates<T><<<GridFor(n), 256, 0, stream_>>>(static_cast<const T*>(io_.in[kInitialH]),
                                                   static_cast<const T*>(io_.in[kInitialC]), h, c, l, D_, L_ * D_, B_,
                                                   H_, static_cast<int>(attrs_.layout));
    Check(cudaGetLastError(), "init states");
  }

  void WriteFinalStates(int l, const float* h, const float* c) {
    const long long n = static_cast<long long>(D_) * B_ * H_;
    FinalStates<T><<<GridFor(n), 256, 0, stream_>>>(h, c, s_.lens, static_cast<T*>(io_.out[kYH]),
                                                    static_cast<T*>(io_.out[kYC]), l, D_, L_ * D_, B_, H_,
                                                    static_cast<int>(attrs_.layout));
    Check(cudaGetLastError(), "final states");
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
    const int I = static_cast<int>(d_.LayerInput(l));
    for (int dir = 0; dir < D_; ++dir) {
      const int k = l * D_ + dir;
      a.gx[dir] = s_.gx + dir * rows_ * G_;
      a.wh[dir] = Weights() + d_.WeightOffset(l, dir) + static_cast<long long>(I) * G_;
      a.bias[dir] = Bias(k);
      a.peep[dir] = Peep(k);
      a.c[dir] = s_.c + static_cast<long long>(dir) * B_ * H_;
      a.reverse[dir] = attrs_.reverse_only || dir == 1;
      a.cell[dir] = MakeCellParams(attrs_, dir);
    }
    InitLayerStates(l, s_.h[0], s_.c);
    int cur = 0;  // each launch below is checked right after it, so nothing foreign is pending between them
    for (int step = 0; step < io_.max_len; ++step) {
      a.step = step;
      for (int dir = 0; dir < D_; ++dir) {
        a.h_in[dir] = s_.h[cur] + static_cast<long long>(dir) * B_ * H_;
        a.h_out[dir] = s_.h[cur ^ 1] + static_cast<long long>(dir) * B_ * H_;
      }
      if (kernel == StepKernel::kSplitK) LaunchSplitK(a, D_, sm_count_, stream_);
      else LaunchTiled(a, D_, device_, stream_);
      Check(cudaGetLastError(), "recurrent step");
      cur ^= 1;
    }
    WriteFinalStates(l, s_.h[cur], s_.c);
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
      const int l = l0 + r, I = static_cast<int>(d_.LayerInput(l));
      a.in_rows[r] = r == 0 ? 0 : I;
      for (int dir = 0; dir < D_; ++dir) {
        const int k = l * D_ + dir;
        // The first layer multiplies only its recurrent rows; the others their input rows too.
        a.w[r][dir] = Weights() + d_.WeightOffset(l, dir) + (r == 0 ? static_cast<long long>(I) * G_ : 0);
        a.bias[r][dir] = Bias(k);
        a.peep[r][dir] = Peep(k);
      }
      InitLayerStates(l, s_.h0 + r * state, s_.c0 + r * state);
    }
    for (int dir = 0; dir < D_; ++dir) {
      a.gx[dir] = s_.gx + dir * rows_ * G_;
      a.reverse[dir] = attrs_.reverse_only || dir == 1;
      a.cell[dir] = MakeCellParams(attrs_, dir);
    }
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
    void* args[] = {&a};
    const cudaError_t e = cudaLaunchCooperativeKernel(PersistentKernel<T>(plan.R),
                                                      dim3(plan.blocks), dim3(kPersistentThreads), args, plan.smem,
                                                      stream_);
    if (e == cudaErrorCooperativeLaunchTooLarge || e == cudaErrorNotSupported) {  // e.g. no cooperative launch
      ClearPending();
      return false;
    }
    Check(e, "persistent kernel");
#ifdef LSTM_ORT_PHASE_CLOCKS
    {
      unsigned long long ns[2][6];
      cudaMemcpyFromSymbolAsync(ns, g_phase_ns, sizeof(ns), 0, cudaMemcpyDeviceToHost, stream_);
      cudaStreamSynchronize(stream_);
      const unsigned long long zero[2][6] = {};
      cudaMemcpyToSymbolAsync(g_phase_ns, zero, sizeof(zero), 0, cudaMemcpyHostToDevice, stream_);
      const int n = io_.max_len + range.count - 1;
      for (int b = 0; b < 2; ++b)
        std::fprintf(stderr, "phase ns/interval block %s: prefetch %.0f kloop %.0f reduce %.0f cell %.0f next %.0f barrier %.0f\n",
                     b ? "last" : "first", 1.0 * ns[b][0] / n, 1.0 * ns[b][1] / n, 1.0 * ns[b][2] / n,
                     1.0 * ns[b][3] / n, 1.0 * ns[b][4] / n, 1.0 * ns[b][5] / n);
    }
#endif
    for (int r = 0; r < range.count; ++r) WriteFinalStates(l0 + r, s_.h_fin + r * state, s_.c_fin + r * state);
    return true;
  }

  const T* Bias(int k) const {
    const T* b = static_cast<const T*>(io_.in[kB]);
    return b ? b + k * G_ : nullptr;
  }
  const T* Peep(int k) const {
    const T* p = static_cast<const T*>(io_.in[kP]);
    return p ? p + k * 3LL * H_ : nullptr;
  }

  const Attributes& attrs_;
  const CallIO& io_;
  const Dims& d_;
  cudaStream_t stream_;
  Scratch s_;
  cublasHandle_t cublas_ = nullptr;
  int T_ = 0, B_ = 0, H_ = 0, D_ = 1, L_ = 1, device_ = 0, sm_count_ = 132;
  long long rows_ = 0, G_ = 0;
};

}  // namespace

std::string DescribeStrategy(const Dims& d, bool fp16, Strategy strategy) {
  int device = 0;
  Check(cudaGetDevice(&device), "current device");
  const auto ranges = fp16 ? PlanRanges<__half>(strategy, d, device) : PlanRanges<float>(strategy, d, device);
  const char* step = ChooseStep(strategy, d) == StepKernel::kSplitK ? "splitk" : "tiled";
  std::string out;
  for (const LayerRange& r : ranges) {
    if (!out.empty()) out += "; ";
    out += r.count == 1 ? "layer " + std::to_string(r.first) :
                          "layers " + std::to_string(r.first) + "-" + std::to_string(r.first + r.count - 1);
    if (!r.plan) {
      out += std::string(": v1 ") + step + " (one launch per step)";
      continue;
    }
    const PersistentPlan& p = *r.plan;
    out += std::string(": ") + (r.count > 1 ? "wavefront" : "persistent") + " (" + std::to_string(p.blocks) +
           " blocks of " + std::to_string(p.U) + " units x " + std::to_string(p.Bb) + " rows, " +
           std::to_string(p.smem / 1024) + " KiB shared memory)";
  }
  return out;
}

size_t CudaScratchBytes(const Dims& d, bool fp16) {
  size_t total = 0;
  Carve(d, fp16 ? 2 : 4, nullptr, &total);
  return total;
}

void RunLstmCuda(const Attributes& attrs, const CallIO& io, bool fp16, void* stream, void* scratch, Strategy strategy) {
  if (io.dims.B == 0) return;
  auto s = static_cast<cudaStream_t>(stream);
  if (fp16) StackRun<__half>(attrs, io, s, scratch).Run(strategy);
  else StackRun<float>(attrs, io, s, scratch).Run(strategy);
}

}  // namespace lstm_ort
