// Registers FusedLSTM's CUDA kernels (float32, float16) for the CUDA execution provider.
#pragma once

#include "ort_api.h"

namespace lstm_ort {

// Adds them to `domain` (throws Ort::Exception on failure).
void AddCudaOps(OrtCustomOpDomain* domain);

}  // namespace lstm_ort
