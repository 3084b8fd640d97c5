// FusedLSTM's CUDA kernels as custom ops of the CUDA execution provider: ORT's compute stream,
// scratch from ORT's device allocator, no synchronisation inside Compute.
#include "cuda/cuda_ops.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cuda/lstm_cuda.h"
#include "fused_lstm_op.h"
#include "strategy_names.h"

namespace lstm_ort {
namespace {

// The node's strategy attribute, unless the developer knob LSTM_ORT_STRATEGY overrides it.
Strategy StrategyFor(const Attributes& attrs) {
  const char* v = std::getenv("LSTM_ORT_STRATEGY");
  if (!v || !*v) return attrs.strategy;
  Strategy s;
  if (!ParseStrategy(v, &s))
    Fail("LSTM_ORT_STRATEGY must be " + StrategyChoices() + ", got '" + v + "'");
  return s;
}

std::string DeviceName(int device) {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, device) != cudaSuccess) {
    (void)cudaGetLastError();
    return {};
  }
  return prop.name;
}

// A tuned winner for this GPU model and (T, B), else the node's strategy.
Strategy ChooseStrategy(Strategy configured, const std::vector<TunedStrategy>& tuned, const std::string& gpu,
                        const Dims& d) {
  if (configured != Strategy::kAuto) return configured;
  for (const TunedStrategy& t : tuned)
    if (t.T == d.T && t.B == d.B && t.gpu == gpu) return t.strategy;
  return configured;
}

struct ScratchBuffer {
  OrtAllocator* allocator = nullptr;
  void* data = nullptr;
  ~ScratchBuffer() {
    if (data) allocator->Free(allocator, data);
    if (allocator) Ort::GetApi().ReleaseAllocator(allocator);
  }
};

template <bool kFp16>
struct CudaKernel {
  static constexpr ONNXTensorElementDataType kType =
      kFp16 ? ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16 : ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT;
  static constexpr const char* kProvider = "CUDAExecutionProvider";

  explicit CudaKernel(const OrtKernelInfo* info) : attrs_(ParseAttributes(info)), strategy_(StrategyFor(attrs_)) {}

  void Compute(OrtKernelContext* context) {
    Ort::KernelContext ctx(context);
    const CallIO io = PrepareCall(ctx, attrs_);
    int device = 0;
    if (cudaGetDevice(&device) != cudaSuccess) Fail("no CUDA device");
    // Freed back to ORT's arena at the end of Compute: work queued on this stream runs first.
    ScratchBuffer scratch;
    Ort::MemoryInfo mem("Cuda", OrtArenaAllocator, device, OrtMemTypeDefault);
    Ort::ThrowOnError(Ort::GetApi().KernelContext_GetAllocator(context, mem, &scratch.allocator));
    const size_t bytes = CudaScratchBytes(io.dims, kFp16);
    scratch.data = scratch.allocator->Alloc(scratch.allocator, bytes);
    if (!scratch.data) Fail("could not allocate " + std::to_string(bytes) + " bytes of scratch");
    const Strategy strategy =
        attrs_.tuned.empty() ? strategy_ : ChooseStrategy(strategy_, attrs_.tuned, GpuName(device), io.dims);
    RunLstmCuda(attrs_, io, kFp16, ctx.GetGPUComputeStream(), scratch.data, strategy);
  }

 private:
  const std::string& GpuName(int device) {
    std::lock_guard<std::mutex> lock(names_mutex_);
    auto it = gpu_names_.find(device);
    if (it == gpu_names_.end()) it = gpu_names_.emplace(device, DeviceName(device)).first;
    return it->second;
  }

  Attributes attrs_;
  Strategy strategy_;
  std::mutex names_mutex_;
  std::map<int, std::string> gpu_names_;
};

const FusedLstmOp<CudaKernel<false>> g_cuda_f32;
const FusedLstmOp<CudaKernel<true>> g_cuda_f16;

}  // namespace

void AddCudaOps(Ort::CustomOpDomain& domain) {
  domain.Add(&g_cuda_f32);
  domain.Add(&g_cuda_f16);
}

}  // namespace lstm_ort

// For lstm_ort's Python tools (ctypes), outside any onnxruntime session. Return 0 on success;
// otherwise `out` holds the error message.
namespace {
int CopyOut(const std::string& text, char* out, int size) {
  if (size <= 0) return 1;
  const size_t n = std::min<size_t>(text.size(), static_cast<size_t>(size) - 1);
  std::memcpy(out, text.data(), n);
  out[n] = '\0';
  return 0;
}
}  // namespace

// The name of the current CUDA device, as tuned entries record it.
extern "C" __attribute__((visibility("default"))) int LstmOrtCudaDeviceName(char* out, int size) {
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    (void)cudaGetLastError();
    CopyOut("no CUDA device", out, size);
    return 1;
  }
  const std::string name = lstm_ort::DeviceName(device);
  if (name.empty()) {
    CopyOut("could not read the CUDA device's properties", out, size);
    return 1;
  }
  return CopyOut(name, out, size);
}

// What the CUDA kernel does for one call of these sizes under `strategy`, in words.
extern "C" __attribute__((visibility("default"))) int LstmOrtDescribeStrategy(int64_t L, int64_t D, int64_t T,
                                                                               int64_t I, int64_t H, int64_t B,
                                                                               int fp16, const char* strategy,
                                                                               char* out, int size) {
  lstm_ort::Strategy s;
  if (!strategy || !lstm_ort::ParseStrategy(strategy, &s)) {
    CopyOut("unknown strategy", out, size);
    return 1;
  }
  if (L < 1 || (D != 1 && D != 2) || T < 0 || I < 1 || H < 1 || B < 0) {
    CopyOut("invalid sizes", out, size);
    return 1;
  }
  lstm_ort::Dims d;
  d.L = L;
  d.D = D;
  d.T = T;
  d.I = I;
  d.H = H;
  d.B = B;
  try {
    return CopyOut(lstm_ort::DescribeStrategy(d, fp16 != 0, s), out, size);
  } catch (const std::exception& e) {
    CopyOut(e.what(), out, size);
    return 1;
  }
}
