// FusedLSTM on the CPU: fp32 math for float and float16 storage. Every `precision` mode runs this
// fp32 math (Attributes::precision is not read here): fp32 is within each mode's bound, and the
// reduced modes exist to reach tensor cores, which the CPU does not have.
#pragma once

#include <memory>

#include "op_config.h"

namespace lstm_ort {

// One per kernel instance (node and session). Weights that are constant initializers are packed
// when the kernel is created; threads come from the session's intra-op pool. Compute may run
// concurrently from several threads (concurrent Run calls on one session).
template <typename T>  // float or Ort::Float16_t
class CpuLstm {
 public:
  CpuLstm(const OrtKernelInfo* info, const Attributes& attrs);
  ~CpuLstm();
  void Compute(OrtKernelContext* context, const CallIO& io);

  struct State;

 private:
  std::unique_ptr<State> state_;
};

}  // namespace lstm_ort
