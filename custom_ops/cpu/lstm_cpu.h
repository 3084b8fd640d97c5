// FusedLSTM on the CPU: fp32 math for float and float16 storage. Every `precision` mode runs this
// fp32 math (Attributes::precision is not read here): fp32 is within each mode's bound, and the
// reduced modes exist to reach tensor cores, which the CPU does not have.
#pragma once

#include <memory>

#include "op_config.h"

namespace lstm_ort {

// One per kernel instance (node and session). Weights that are constant initializers are packed
// when the kernel is created; threads come from the session's intra-op pool. Compute may run
// concurrently from several threads (concurrent Run calls on one session). Each call runs either
// this project's kernel (RunFused) or onnxruntime's own LSTM kernel on the same weights
// (RunStock), as the `cpu_kernel` attribute says or, by default, as measured per shape class
// (cpu/kernel_tuner.h): the optimized model is then never slower than the original on the CPU,
// beyond the cost of the choice.
template <typename T>  // float or Ort::Float16_t
class CpuLstm {
 public:
  CpuLstm(const OrtKernelInfo* info, const Attributes& attrs);
  ~CpuLstm();
  void Compute(OrtKernelContext* context, const CallIO& io);

  struct State;

 private:
  const char* WhyNotStock(const CallIO& io) const;
  bool RunStock(OrtKernelContext* context, const CallIO& io, int pieces, int threads);
  void RunFused(OrtKernelContext* context, const CallIO& io);

  std::unique_ptr<State> state_;
};

}  // namespace lstm_ort
