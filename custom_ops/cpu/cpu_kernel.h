// FusedLSTM's CPU kernel, as the custom-op wrapper sees it: CpuLstm<T> for every weight format
// (float32 / float16 weights, and int8 weights, registered on their own: CpuInt8Kernel).
#pragma once

#include "cpu/lstm_cpu.h"

namespace lstm_ort {

template <typename T, typename Lstm = CpuLstm<T>>
struct CpuOpKernel {
  static constexpr ONNXTensorElementDataType kType = std::is_same_v<T, float>
                                                         ? ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT
                                                         : ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16;
  static constexpr const char* kProvider = nullptr;  // the CPU execution provider

  explicit CpuOpKernel(const OrtKernelInfo* info) : attrs_(ParseAttributes(info)), lstm_(info, attrs_) {}

  void Compute(OrtKernelContext* context) {
    Ort::KernelContext ctx(context);
    const CallIO io = PrepareCall(ctx, attrs_);
    lstm_.Compute(context, io);
  }

 private:
  Attributes attrs_;
  Lstm lstm_;
};

// int8 W (with W_scale): float32 X and outputs (docs/ops.md, "int8 weights").
struct CpuInt8Kernel : CpuOpKernel<float> {
  using CpuOpKernel::CpuOpKernel;
  static constexpr ONNXTensorElementDataType kWeightType = ONNX_TENSOR_ELEMENT_DATA_TYPE_INT8;
};

}  // namespace lstm_ort
