// CpuKernel <-> name, from one table: the `cpu_kernel` attribute, the CPU entries of `tuned`,
// the kernel report and the Python side (LstmOrtCpuKernelNames) read it.
#pragma once

#include <string>

#include "lstm_ort/contract.h"

namespace lstm_ort {

// "auto", "fused", "stock", "stock_split"; false for anything else.
bool ParseCpuKernel(const char* name, CpuKernel* out);

const char* CpuKernelName(CpuKernel kernel);

// Every name in enum order, joined by `separator`.
std::string CpuKernelNames(const char* separator);

// "auto, fused, stock or stock_split", for error messages.
std::string CpuKernelChoices();

}  // namespace lstm_ort
