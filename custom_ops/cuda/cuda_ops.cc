// FusedLSTM's CUDA kernels as custom ops of the CUDA execution provider: ORT's compute stream,
// scratch from ORT's device allocator, no synchronisation inside Compute.
#include "cuda/cuda_ops.h"

#include <cuda_runtime_api.h>

#include <map>
#include <mutex>
#include <stdexcept>
#include <string>

#include "cuda/developer_knobs.h"
#include "cuda/device_limits.h"
#include "cuda/heuristics.h"
#include "cuda/lstm_cuda.h"
#include "fused_lstm_op.h"

namespace lstm_ort {
namespace {

// The node's strategy attribute, unless the developer knob LSTM_ORT_STRATEGY overrides it.
Strategy StrategyFor(const Attributes& attrs) {
  try {
    return StrategyOverrideFromEnvironment().value_or(attrs.strategy);
  } catch (const std::invalid_argument& e) {
    Fail(e.what());
  }
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
        attrs_.tuned.empty() ? strategy_ : StrategyForCall(strategy_, attrs_.tuned, GpuName(device), io.dims);
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
