// FusedLSTM on the CPU: fp32 math for float and float16 storage.
#pragma once

#include "op_config.h"

namespace lstm_ort {

// T is float or Ort::Float16_t.
template <typename T>
void RunLstmCpu(const Attributes& attrs, const CallIO& io);

}  // namespace lstm_ort
