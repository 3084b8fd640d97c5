// The OrtCustomOp for FusedLSTM, one instance per (execution provider, element type).
// A Kernel supplies kType, kProvider (nullptr = CPU), a constructor from OrtKernelInfo and Compute;
// every exception becomes an ORT error status, so bad input never crashes the host process.
#pragma once

#include <exception>
#include <new>
#include <type_traits>

#include "op_config.h"

namespace lstm_ort {

inline OrtStatusPtr ToStatus(const std::exception& e) {
  if (auto* ort = dynamic_cast<const Ort::Exception*>(&e))
    return Ort::GetApi().CreateStatus(ort->GetOrtErrorCode(), ort->what());
  return Ort::GetApi().CreateStatus(ORT_FAIL, e.what());
}

template <typename Kernel>
struct StatusKernel : Kernel {
  using Kernel::Kernel;
  OrtStatusPtr ComputeV2(OrtKernelContext* context) {
    try {
      Kernel::Compute(context);
      return nullptr;
    } catch (const std::exception& e) {
      return ToStatus(e);
    }
  }
};

// W's element type: the kernel's kWeightType where it declares one (int8 weights), else kType.
template <typename Kernel, typename = void>
struct WeightTypeOf {
  static constexpr ONNXTensorElementDataType value = Kernel::kType;
};
template <typename Kernel>
struct WeightTypeOf<Kernel, std::void_t<decltype(Kernel::kWeightType)>> {
  static constexpr ONNXTensorElementDataType value = Kernel::kWeightType;
};

template <typename Kernel>
struct FusedLstmOp : Ort::CustomOpBase<FusedLstmOp<Kernel>, StatusKernel<Kernel>, /*WithStatus=*/true> {
  OrtStatusPtr CreateKernelV2(const OrtApi& /*api*/, const OrtKernelInfo* info, void** kernel) const {
    try {
      *kernel = new StatusKernel<Kernel>(info);
      return nullptr;
    } catch (const std::exception& e) {
      return ToStatus(e);
    }
  }
  const char* GetName() const { return kOpName; }
  const char* GetExecutionProviderType() const { return Kernel::kProvider; }

  size_t GetInputTypeCount() const { return kNumInputs; }
  ONNXTensorElementDataType GetInputType(size_t i) const {
    if (i == kSequenceLens) return ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32;
    if (i == kW) return WeightTypeOf<Kernel>::value;
    if (i == kWScale) return ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT;  // scales of int8 weights are float32
    return Kernel::kType;
  }
  OrtCustomOpInputOutputCharacteristic GetInputCharacteristic(size_t i) const {
    return i == kX || i == kW ? INPUT_OUTPUT_REQUIRED : INPUT_OUTPUT_OPTIONAL;
  }
  // Lengths are validated (and read by the scheduler) on the host, whatever the provider.
  OrtMemType GetInputMemoryType(size_t i) const {
    return i == kSequenceLens ? OrtMemTypeCPUInput : OrtMemTypeDefault;
  }

  size_t GetOutputTypeCount() const { return kNumOutputs; }
  ONNXTensorElementDataType GetOutputType(size_t) const { return Kernel::kType; }
  OrtCustomOpInputOutputCharacteristic GetOutputCharacteristic(size_t) const { return INPUT_OUTPUT_OPTIONAL; }
};

}  // namespace lstm_ort
