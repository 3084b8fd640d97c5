// FusedLSTM on CUDA: host-side entry points, free of ORT and CUDA-compiler types.
#pragma once

#include <cstddef>
#include <string>

#include "lstm_ort/contract.h"

namespace lstm_ort {

struct CallIO;

size_t CudaScratchBytes(const Dims& d, bool fp16);

// What RunLstmCuda does for these sizes on the current device, in words (for reports).
std::string DescribeStrategy(const Dims& d, bool fp16, Strategy strategy);

// Enqueues the whole stack on `stream`; `seq_lens_host` may be null (every length is T).
// `scratch` holds CudaScratchBytes(...) bytes of device memory.
void RunLstmCuda(const Attributes& attrs, const CallIO& io, bool fp16, void* stream, void* scratch, Strategy strategy);

}  // namespace lstm_ort
