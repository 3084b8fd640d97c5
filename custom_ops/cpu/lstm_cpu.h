// FusedLSTM on the CPU, every weight format: float32 / float16 weights (fp32 math, or bf16 products
// where the node's precision is bf16 and the CPU has bf16 units: the one precision decision,
// precision.h) and int8 weights (DynamicQuantizeLSTM's arithmetic). Each call is planned once
// (cpu/call_plan.h, PlanCpuCall) and carried out as planned: onnxruntime's own LSTM kernel on the
// same weights (the floor, docs/cpu.md), or the stack runner (cpu/stack_run.h) over the node's
// weight format.
#pragma once

#include <memory>

#include "cpu/call_plan.h"
#include "op_config.h"

namespace lstm_ort {

// This machine as the CPU call plan sees it (cpu/call_plan.h), once per process; pool_threads 0.
const cpu::CpuMachine& ThisMachine();

// One per kernel instance (node and session). Weights that are constant initializers are packed
// when the kernel is created; threads come from the session's intra-op pool. Compute may run
// concurrently from several threads (concurrent Run calls on one session).
template <typename T>  // X's and the outputs' element type: float or Ort::Float16_t
class CpuLstm {
 public:
  CpuLstm(const OrtKernelInfo* info, const Attributes& attrs);
  ~CpuLstm();
  void Compute(OrtKernelContext* context, const CallIO& io);

  struct State;

 private:
  const char* WhyNotStock(const CallIO& io) const;
  bool RunStock(OrtKernelContext* context, const CallIO& io, int pieces, int threads);

  std::unique_ptr<State> state_;
};

}  // namespace lstm_ort
