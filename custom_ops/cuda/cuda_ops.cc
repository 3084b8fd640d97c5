// FusedLSTM's CUDA kernels as custom ops of the CUDA execution provider: ORT's compute stream,
// scratch from ORT's device allocator, no synchronisation inside Compute.
#include "cuda/cuda_ops.h"

#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <array>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "cuda/call_plan.h"
#include "cuda/device_limits.h"
#include "cuda/element_traits.h"
#include "cuda/gemm/kept_split.h"
#include "cuda/heuristics.h"
#include "cuda/lstm_cuda.h"
#include "fused_lstm_op.h"
#include "overrides.h"

namespace lstm_ort {
namespace {

// The node's overrides: the environment's aliases, then its `debug` attribute (overrides.h).
Overrides OverridesOf(const Attributes& attrs) {
  try {
    return OverridesForNode(attrs.debug);
  } catch (const std::invalid_argument& e) {
    Fail(e.what());
  }
}

// onnxruntime's cuBLAS handle of the call's stream (the CUDA execution provider's resources, as
// its include/onnxruntime/core/providers/cuda/cuda_resource.h numbers them: cublas_handle_t is
// cuda_resource_offset + 2, since resource version 1), or null where it lends none: the call then
// uses a handle of its own (gemm/cublas_handles.h), and its 64 MiB workspace pool.
void* LentCublas(OrtKernelContext* context) {
  constexpr int kCudaResourceVersion = 1;
  constexpr int kCublasHandleResource = 10000 + 2;
  void* handle = nullptr;
  if (OrtStatus* status = Ort::GetApi().KernelContext_GetResource(context, kCudaResourceVersion,
                                                                   kCublasHandleResource, &handle)) {
    Ort::GetApi().ReleaseStatus(status);
    return nullptr;
  }
  return handle;
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
      : attrs_(ParseAttributes(info)), overrides_(OverridesOf(attrs_)), kept_split_(KeptSplitFor<T>(info)) {}

  void Compute(OrtKernelContext* context) {
    Ort::KernelContext ctx(context);
    const CallIO io = PrepareCall(ctx, attrs_);
    int device = 0;
    if (cudaGetDevice(&device) != cudaSuccess) Fail("no CUDA device");
    const auto stream = static_cast<cudaStream_t>(ctx.GetGPUComputeStream());
    void* const cublas = LentCublas(context);
    CallPlan plan = PlanFor(io, device);
    const KeptSplit kept = KeptHalvesFor(plan, io, stream);
    // From ORT's arena on this call's stream, freed back at the end of Compute. On the stream: the
    // arena then hands the memory to a call on another stream (onnxruntime runs concurrent calls
    // of a session on streams of their own) only once this stream's work is done. Taken without
    // it, the next call on another thread wrote into a replayed graph's scratch while it still
    // ran (the streams batcher's outputs, 8 threads).
    ScratchBuffer scratch;
    Ort::MemoryInfo mem("Cuda", OrtArenaAllocator, device, OrtMemTypeDefault);
    const OrtApi& api = Ort::GetApi();
    Ort::ThrowOnError(api.KernelContext_GetAllocator(context, mem, &scratch.allocator));
    Ort::ThrowOnError(api.KernelContext_GetScratchBuffer(context, mem, plan.scratch_bytes, &scratch.data));
    if (!scratch.data) Fail("could not allocate " + std::to_string(plan.scratch_bytes) + " bytes of scratch");
    // In strict mode a launch-time fallback throws from here, naming it.
    if (overrides_.call_graphs && io.dims.B > 0 && CallGraphPays(io.max_len, io.seq_lens != nullptr)) {
      // The whole call as one graph; the step loops inside launch into its capture.
      // Each attempt plans from its own copy: a capture the driver refuses and the direct launch
      // after it would otherwise record the same launch-time fallback twice.
      call_graphs_.Run(
          CallLaunchKey(io, device, stream, scratch.data, kept), stream,
          [&](cudaStream_t on) {
            CallPlan attempt = plan;
            RunLstmCuda<T>(attrs_, io, on, cublas, scratch.data, attempt, kept, nullptr);
          },
          LaunchGraphs::Cublas::kCalls);
      return;
    }
    RunLstmCuda<T>(attrs_, io, stream, cublas, scratch.data, plan, kept, &step_graphs_);
  }

 private:
  // Plans kept per call shape: a plan is a function of the node, the device and these sizes.
  static constexpr size_t kMaxCachedPlans = 256;
  using PlanKey = std::array<int64_t, 8>;

  // This call's plan (call_plan.h), made once per shape; in strict mode a planned fallback
  // throws, naming it, at every call.
  CallPlan PlanFor(const CallIO& io, int device) {
    const Dims& d = io.dims;
    const PlanKey key{device, d.T, d.B, d.I, d.H, d.L, d.D, io.max_len};
    {
      std::lock_guard<std::mutex> lock(plans_mutex_);
      const auto found = plans_.find(key);
      if (found != plans_.end()) return found->second;
    }
    const CallInputs in{d, io.max_len, kElementTypeOf<T>, kept_split_ != nullptr,
                        YRelaysLayers(d, attrs_.layout, io.out[kY] != nullptr)};
    CallPlan plan = PlanCall(in, attrs_, DeviceFor(device), overrides_);
    std::lock_guard<std::mutex> lock(plans_mutex_);
    if (plans_.size() >= kMaxCachedPlans) plans_.clear();
    plans_.emplace(key, plan);
    return plan;
  }

  // The kept halves the plan asks for, as they come (none where they could not be had: the plan
  // then makes room to split W itself).
  KeptSplit KeptHalvesFor(CallPlan& plan, const CallIO& io, cudaStream_t stream) {
    if (plan.kept == KeptHalves::kNone) return {};
    KeptSplit kept;
    if constexpr (std::is_same_v<T, float>)
      kept = kept_split_->For(static_cast<const float*>(io.in[kW]), io.dims, stream, plan.kept);
    if (!kept.Has(plan.kept)) plan.KeptHalvesUnavailable();
    return kept;
  }

  // The device as PlanCall sees it; its name (for tuned entries) is read once per device.
  CallDevice DeviceFor(int device) {
    std::string name;
    if (!attrs_.tuned.empty()) {
      std::lock_guard<std::mutex> lock(names_mutex_);
      auto it = gpu_names_.find(device);
      if (it == gpu_names_.end()) it = gpu_names_.emplace(device, DeviceName(device)).first;
      name = it->second;
    }
    return CallDeviceOf<T>(device, std::move(name));
  }

  Attributes attrs_;
  Overrides overrides_;
  std::unique_ptr<KeptSplitWeights> kept_split_;
  LaunchGraphs step_graphs_;  // v1's cuBLAS step loops of calls launched directly
  LaunchGraphs call_graphs_;  // whole short calls (CallGraphPays)
  std::mutex plans_mutex_;
  std::map<PlanKey, CallPlan> plans_;
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
