// Registers FusedLSTM's CUDA kernels (float32, float16) for the CUDA execution provider.
#pragma once

#include "ort_api.h"

namespace lstm_ort {

void AddCudaOps(Ort::CustomOpDomain& domain);

}  // namespace lstm_ort
