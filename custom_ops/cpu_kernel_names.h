// CpuKernel <-> name for the CPU kernel's sources: the table is enum_names.cc's.
#pragma once

#include <string>

#include "enum_names.h"

namespace lstm_ort {

inline bool ParseCpuKernel(const char* name, CpuKernel* out) { return ParseEnum(name, out); }
inline const char* CpuKernelName(CpuKernel kernel) { return EnumName(kernel); }
inline std::string CpuKernelNames(const char* separator) { return EnumNames<CpuKernel>(separator); }
inline std::string CpuKernelChoices() { return EnumChoices<CpuKernel>(); }

}  // namespace lstm_ort
