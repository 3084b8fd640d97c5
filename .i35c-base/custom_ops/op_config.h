// Reading FusedLSTM's attributes and validating one call's inputs: shared by every kernel.
#pragma once

#include <string>

#include "call_io.h"
#include "lstm_ort/contract.h"
#include "ort_api.h"

namespace lstm_ort {

[[noreturn]] void Fail(const std::string& message);

Attributes ParseAttributes(const OrtKernelInfo* info);

CallIO PrepareCall(Ort::KernelContext& ctx, const Attributes& attrs);

}  // namespace lstm_ort
