// FusedLSTM on CUDA (v1): per layer, one cuBLAS GEMM projects every timestep of the input for
// both directions; then one fused kernel per step does the recurrent product, gates, cell
// update, masking and writes, for both directions at once.
#include "cuda/lstm_cuda.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "call_io.h"
#include "cuda/cublas_handles.h"
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

struct Scratch {
  float* gx;       // [D][T*B][4H]
  float* h[2];     // [D][B][H] each
  float* c;        // [D][B][H]
  int* lens;       // [B]
  void* layer[2];  // [T][B][D][H] of the element type, between layers
};

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

template <typename T, int RG>
void LaunchTiledRG(const StepArgs<T>& a, int D, int device, cudaStream_t stream) {
  using S = TiledShape<RG>;
  // The largest K chunk that fits the budget: one chunk whenever H allows.
  int kc = (a.H + S::kAlign - 1) / S::kAlign * S::kAlign;
  while (kc > S::kAlign && TiledSmemBytes<T, RG>(kc, a.H) > kTiledSmemBudget) kc -= S::kAlign;
  // The limit belongs to (kernel, device): raise it once per device.
  static std::atomic<uint64_t> raised{0};
  const uint64_t bit = uint64_t{1} << (device & 63);
  if (!(raised.load() & bit)) {
    Check(cudaFuncSetAttribute(StepTiled<T, RG>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               static_cast<int>(kTiledSmemBudget)), "raise the shared memory limit");
    raised.fetch_or(bit);
  }
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

StepKernel Choose(StepKernel requested, const Dims& d) {
  if (requested == StepKernel::kSplitK && d.H > 1024) return StepKernel::kTiled;  // registers cap split-K at H=1024
  if (requested != StepKernel::kAuto) return requested;
  return d.B <= 16 && d.H <= 1024 ? StepKernel::kSplitK : StepKernel::kTiled;
}

template <typename T>
void Run(const Attributes& attrs, const CallIO& io, cudaStream_t stream, void* scratch, StepKernel requested) {
  const Dims& d = io.dims;
  const int T_ = static_cast<int>(d.T), B = static_cast<int>(d.B), H = static_cast<int>(d.H);
  const int D = static_cast<int>(d.D), L = static_cast<int>(d.L), LD = L * D;
  const int layout = static_cast<int>(attrs.layout);
  if (B == 0) return;
  const Scratch s = Carve(d, sizeof(T), scratch, nullptr);

  std::vector<int> lens(B, T_);
  if (io.seq_lens) lens.assign(io.seq_lens, io.seq_lens + B);
  Check(cudaMemcpyAsync(s.lens, lens.data(), sizeof(int) * B, cudaMemcpyHostToDevice, stream), "copy lengths");

  int device = 0, sm_count = 132;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, device);
  const StepKernel kernel = Choose(requested, d);
  cublasHandle_t cublas = CublasHandleFor(stream);
  const cudaDataType_t io_type = sizeof(T) == 2 ? CUDA_R_16F : CUDA_R_32F;
  const float one = 1.f, zero = 0.f;

  const T* W = static_cast<const T*>(io.in[kW]);
  const T* bias = static_cast<const T*>(io.in[kB]);
  const T* peep = static_cast<const T*>(io.in[kP]);
  T* Y = static_cast<T*>(io.out[kY]);
  const long long rows = static_cast<long long>(T_) * B;
  const long long G = static_cast<long long>(kGates) * H;

  for (int l = 0; l < L; ++l) {
    const int I = static_cast<int>(d.LayerInput(l));
    const T* x = l == 0 ? static_cast<const T*>(io.in[kX]) : static_cast<const T*>(s.layer[(l - 1) % 2]);
    // Layer 0 in layout 1 is batch-major: its projection rows come in (b, t) order.
    const bool batch_major = l == 0 && layout == 1;

    // gx[d] = x @ Wx[d] for every row, one strided-batched GEMM over the directions
    // (column-major view: gx^T [4H, rows] = Wx^T [4H, I] * x^T [I, rows]).
    if (rows > 0) {
      Check(cublasGemmStridedBatchedEx(cublas, CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(G), static_cast<int>(rows), I,
                                       &one, W + d.WeightOffset(l, 0), io_type, static_cast<int>(G),
                                       d.LayerK(l) * G, x, io_type, I, 0, &zero, s.gx, CUDA_R_32F,
                                       static_cast<int>(G), rows * G, D, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
            "input projection GEMM");
    }

    StepArgs<T> a{};
    a.B = B;
    a.H = H;
    a.lens = s.lens;
    a.gx_st = batch_major ? 1 : B;
    a.gx_sb = batch_major ? T_ : 1;
    const bool last = l == L - 1;
    if (last) {
      a.y = Y;
      a.y_st = layout == 0 ? static_cast<long long>(D) * B * H : static_cast<long long>(D) * H;
      a.y_sd = layout == 0 ? static_cast<long long>(B) * H : H;
      a.y_sb = layout == 0 ? H : static_cast<long long>(T_) * D * H;
    } else {
      a.y = static_cast<T*>(s.layer[l % 2]);
      a.y_st = static_cast<long long>(B) * D * H;
      a.y_sd = H;
      a.y_sb = static_cast<long long>(D) * H;
    }
    // Positions past a sequence's end stay zero.
    if (a.y && (io.seq_lens || io.max_len < T_))
      Check(cudaMemsetAsync(a.y, 0, sizeof(T) * rows * D * H, stream), "zero Y");
    for (int dir = 0; dir < D; ++dir) {
      const int k = l * D + dir;
      a.gx[dir] = s.gx + dir * rows * G;
      a.wh[dir] = W + d.WeightOffset(l, dir) + static_cast<long long>(I) * G;
      a.bias[dir] = bias ? bias + k * G : nullptr;
      a.peep[dir] = peep ? peep + k * 3LL * H : nullptr;
      a.c[dir] = s.c + static_cast<long long>(dir) * B * H;
      a.reverse[dir] = attrs.reverse_only || dir == 1;
      a.cell[dir] = MakeCellParams(attrs, dir);
    }

    const long long n_state = static_cast<long long>(D) * B * H;
    ClearPending();
    InitStates<T><<<GridFor(n_state), 256, 0, stream>>>(static_cast<const T*>(io.in[kInitialH]),
                                                        static_cast<const T*>(io.in[kInitialC]), s.h[0], s.c, l, D,
                                                        LD, B, H, layout);
    Check(cudaGetLastError(), "init states");

    int cur = 0;  // each launch below is checked right after it, so nothing foreign is pending between them
    for (int step = 0; step < io.max_len; ++step) {
      a.step = step;
      for (int dir = 0; dir < D; ++dir) {
        a.h_in[dir] = s.h[cur] + static_cast<long long>(dir) * B * H;
        a.h_out[dir] = s.h[cur ^ 1] + static_cast<long long>(dir) * B * H;
      }
      if (kernel == StepKernel::kSplitK) LaunchSplitK(a, D, sm_count, stream);
      else LaunchTiled(a, D, device, stream);
      Check(cudaGetLastError(), "recurrent step");
      cur ^= 1;
    }
    FinalStates<T><<<GridFor(n_state), 256, 0, stream>>>(s.h[cur], s.c, s.lens, static_cast<T*>(io.out[kYH]),
                                                         static_cast<T*>(io.out[kYC]), l, D, LD, B, H, layout);
    Check(cudaGetLastError(), "final states");
  }
}

}  // namespace

size_t CudaScratchBytes(const Dims& d, bool fp16) {
  size_t total = 0;
  Carve(d, fp16 ? 2 : 4, nullptr, &total);
  return total;
}

void RunLstmCuda(const Attributes& attrs, const CallIO& io, bool fp16, void* stream, void* scratch,
                 StepKernel step_kernel) {
  auto s = static_cast<cudaStream_t>(stream);
  if (fp16) Run<__half>(attrs, io, s, scratch, step_kernel);
  else Run<float>(attrs, io, s, scratch, step_kernel);
}

}  // namespace lstm_ort
