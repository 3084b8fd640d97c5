// FusedLSTM with factored weights on CUDA (docs/ops.md, Factored weights): the CUDA op calls this
// instead of RunLstmCuda when the node's rank attributes name a factored part. The strategies
// and their tuning are for whole weights; this path has one design (run.cu).
#pragma once

#include <cstddef>

#include "lstm_ort/contract.h"

namespace lstm_ort {

struct CallIO;

template <typename T>
size_t LowRankCudaScratchBytes(const Dims& d, const Ranks& ranks);

// Enqueues the whole stack on `stream` (a cudaStream_t); `scratch` holds LowRankCudaScratchBytes<T>
// bytes of device memory.
template <typename T>
void RunLowRankCuda(const Attributes& attrs, const CallIO& io, void* stream, void* scratch);

}  // namespace lstm_ort
