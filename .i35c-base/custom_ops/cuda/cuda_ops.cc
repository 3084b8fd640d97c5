// FusedLSTM's CUDA kernels as custom ops of the CUDA execution provider: ORT's compute stream,
// scratch from ORT's device allocator, no synchronisation inside Compute.
#include "cuda/cuda_ops.h"

#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "cuda/developer_knobs.h"
#include "cuda/device_limits.h"
#include "cuda/element_traits.h"
#include "cuda/gemm/kept_split.h"
#include "cuda/heuristics.h"
#include "cuda/low_rank/run.h"
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

// The ONNX element type of each storage type the CUDA path is instantiated for.
template <typename T>
struct OnnxElementType;
template <>
struct OnnxElementType<float> {
  static constexpr ONNXTensorElementDataType value = ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT;
};
template <>
struct OnnxElementType<__half> {
  static constexpr ONNXTensorElementDataType value = ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16;
};

// W's TF32 halves kept for the kernel's life, where W is a constant initializer of an fp32 node
// (null otherwise: the calls read W as it is, and split it themselves where they split). The
// memory comes from onnxruntime's allocator for the kernel's device, and goes back when the
// session ends.
template <typename T>
std::unique_ptr<KeptSplitWeights> KeptSplitFor(const OrtKernelInfo* info) {
  if constexpr (!std::is_same_v<T, float>) {
    return nullptr;
  } else {
    const OrtApi& api = Ort::GetApi();
    int constant = 0;
    const OrtValue* value = nullptr;
    OrtStatus* status = api.KernelInfoGetConstantInput_tensor(info, kW, &constant, &value);
    if (status) api.ReleaseStatus(status);
    if (status || !constant) return nullptr;
    OrtAllocator* allocator = nullptr;
    status = api.KernelInfoGetAllocator(info, OrtMemTypeDefault, &allocator);
    if (status) {
      api.ReleaseStatus(status);
      return nullptr;
    }
    std::shared_ptr<OrtAllocator> owner(allocator, [](OrtAllocator* a) { Ort::GetApi().ReleaseAllocator(a); });
    return std::make_unique<KeptSplitWeights>(
        [owner](size_t bytes) -> void* {
          void* p = nullptr;
          try {  // onnxruntime's arena throws when the device is full: the calls then read W as it is
            p = owner->Alloc(owner.get(), bytes);
          } catch (...) {
            return nullptr;
          }
          cudaPointerAttributes where{};
          if (p && (cudaPointerGetAttributes(&where, p) != cudaSuccess || where.type != cudaMemoryTypeDevice)) {
            owner->Free(owner.get(), p);  // not the device's memory: keep nothing
            return nullptr;
          }
          return p;
        },
        [owner](void* p) { owner->Free(owner.get(), p); });
  }
}

template <typename T>
struct CudaKernel {
  static constexpr ONNXTensorElementDataType kType = OnnxElementType<T>::value;
  static constexpr const char* kProvider = "CUDAExecutionProvider";

  explicit CudaKernel(const OrtKernelInfo* info)
      : attrs_(ParseAttributes(info)), strategy_(StrategyFor(attrs_)), kept_split_(KeptSplitFor<T>(info)) {}

  void Compute(OrtKernelContext* context) {
    Ort::KernelContext ctx(context);
    const CallIO io = PrepareCall(ctx, attrs_);
    int device = 0;
    if (cudaGetDevice(&device) != cudaSuccess) Fail("no CUDA device");
    // Freed back to ORT's arena at the end of Compute: work queued on this stream runs first.
    ScratchBuffer scratch;
    Ort::MemoryInfo mem("Cuda", OrtArenaAllocator, device, OrtMemTypeDefault);
    Ort::ThrowOnError(Ort::GetApi().KernelContext_GetAllocator(context, mem, &scratch.allocator));
    // Factored weights have a path of their own (low_rank/), which the strategies do not apply to.
    const bool factored = attrs_.ranks.Any();
    void* stream = ctx.GetGPUComputeStream();
    const KeptSplit kept = factored ? KeptSplit{} : KeptSplitForCall(io, static_cast<cudaStream_t>(stream));
    const size_t bytes = factored ? LowRankCudaScratchBytes<T>(io.dims, attrs_.ranks)
                                  : CudaScratchBytes<T>(io.dims, attrs_.precision, kept.Kept());
    scratch.data = scratch.allocator->Alloc(scratch.allocator, bytes);
    if (!scratch.data) Fail("could not allocate " + std::to_string(bytes) + " bytes of scratch");
    if (factored) return RunLowRankCuda<T>(attrs_, io, stream, scratch.data);
    const Strategy strategy =
        attrs_.tuned.empty() ? strategy_ : StrategyForCall(strategy_, attrs_.tuned, GpuName(device), io.dims);
    RunLstmCuda<T>(attrs_, io, stream, scratch.data, strategy, kept, &step_graphs_);
  }

 private:
  // The kept halves this call's projections read (heuristics.h CallReadsKeptHalves).
  KeptSplit KeptSplitForCall(const CallIO& io, cudaStream_t stream) {
    const KeptHalves halves = CallReadsKeptHalves(kElementTypeOf<T>, attrs_.precision, io.dims);
    if (!kept_split_ || halves == KeptHalves::kNone) return {};
    if constexpr (std::is_same_v<T, float>)
      return kept_split_->For(static_cast<const float*>(io.in[kW]), io.dims, stream, halves == KeptHalves::kBoth);
    return {};
  }

  const std::string& GpuName(int device) {
    std::lock_guard<std::mutex> lock(names_mutex_);
    auto it = gpu_names_.find(device);
    if (it == gpu_names_.end()) it = gpu_names_.emplace(device, DeviceName(device)).first;
    return it->second;
  }

  Attributes attrs_;
  Strategy strategy_;
  std::unique_ptr<KeptSplitWeights> kept_split_;
  StepGraphs step_graphs_;
  std::mutex names_mutex_;
  std::map<int, std::string> gpu_names_;
};

// ORT keeps a pointer to the op: it lives as long as the library.
template <typename T>
void AddCudaOp(OrtCustomOpDomain* domain) {
  static const FusedLstmOp<CudaKernel<T>> op;
  Ort::ThrowOnError(Ort::GetApi().CustomOpDomain_Add(domain, &op));
}

}  // namespace

// One line per element type; RunLstmCuda<T> is instantiated for each in stack_run.cu.
void AddCudaOps(OrtCustomOpDomain* domain) {
  AddCudaOp<float>(domain);
  AddCudaOp<__half>(domain);
}

}  // namespace lstm_ort
