// FusedLSTM's CPU kernel, as the custom-op wrapper sees it: float weights run CpuLstm<T>, int8
// weights CpuLstmInt8 (cpu/int8/lstm_int8.h).
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

}  // namespace lstm_ort
