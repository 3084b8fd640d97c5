// FusedLSTM with int8 weights on the CPU (docs/ops.md, "int8 weights"): the semantics of
// onnxruntime's DynamicQuantizeLSTM run single-threaded, on int8 dot products.
#pragma once

#include <memory>

#include "cpu/cpu_kernel.h"
#include "op_config.h"

namespace lstm_ort {

// One per kernel instance (node and session). Weights that are constant initializers are packed
// when the kernel is created; threads come from the session's intra-op pool; Compute may run
// concurrently from several threads.
class CpuLstmInt8 {
 public:
  CpuLstmInt8(const OrtKernelInfo* info, const Attributes& attrs);
  ~CpuLstmInt8();
  void Compute(OrtKernelContext* context, const CallIO& io);

  struct State;

 private:
  std::unique_ptr<State> state_;
};

// The kernel as the custom-op wrapper (fused_lstm_op.h) sees it: float32 X and outputs, int8 W.
struct CpuInt8Kernel : CpuOpKernel<float, CpuLstmInt8> {
  using CpuOpKernel::CpuOpKernel;
  static constexpr ONNXTensorElementDataType kWeightType = ONNX_TENSOR_ELEMENT_DATA_TYPE_INT8;
};

}  // namespace lstm_ort
