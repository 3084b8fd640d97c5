// Reading FusedLSTM's attributes and validating one call's inputs: shared by every kernel.
#pragma once

#include <string>

#include "lstm_ort/contract.h"
#include "ort_api.h"

namespace lstm_ort {

[[noreturn]] void Fail(const std::string& message);

Attributes ParseAttributes(const OrtKernelInfo* info);

// One call's validated sizes, input pointers (null where an optional input is absent),
// sequence lengths on the host, and allocated outputs (null where not requested).
struct CallIO {
  Dims dims;
  const void* in[kNumInputs] = {};
  const int32_t* seq_lens = nullptr;
  void* out[kNumOutputs] = {};
  int32_t max_len = 0;  // longest sequence in the batch
};

CallIO PrepareCall(Ort::KernelContext& ctx, const Attributes& attrs);

}  // namespace lstm_ort
