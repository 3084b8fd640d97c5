// FusedLSTM with factored weights on CUDA (docs/ops.md, Factored weights): the low-rank backend,
// which RunLstmCuda hands a call whose plan is low rank (PlanCall: the node's rank attributes name
// a factored part). The strategies and their tuning are for whole weights.
#pragma once

#include "cuda/call_plan.h"
#include "cuda/device_limits.h"
#include "lstm_ort/contract.h"

namespace lstm_ort {

struct CallIO;

// The factored recurrence's limits on `device` (both of its output types), measured once.
template <typename T>
const DeviceLimits& LowRankRecurrenceLimits(int device);

// Enqueues the whole stack on `stream` (a cudaStream_t), its GEMMs through `lent_cublas` (as
// RunLstmCuda's); `scratch` holds plan.scratch_bytes of device memory. A launch the device
// refuses is recorded in plan.fallbacks.
template <typename T>
void RunLowRankCuda(const Attributes& attrs, const CallIO& io, void* stream, void* lent_cublas, void* scratch,
                    CallPlan& plan);

}  // namespace lstm_ort
