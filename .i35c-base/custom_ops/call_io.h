// One call's validated sizes and buffers, free of ORT types so CUDA sources can include it.
#pragma once

#include <cstdint>

#include "lstm_ort/contract.h"

namespace lstm_ort {

// Input pointers are null where an optional input is absent; outputs null where not requested.
// Sequence lengths are always on the host.
struct CallIO {
  Dims dims;
  const void* in[kNumInputs] = {};
  const int32_t* seq_lens = nullptr;
  void* out[kNumOutputs] = {};
  int32_t max_len = 0;  // longest sequence in the batch
};

}  // namespace lstm_ort
