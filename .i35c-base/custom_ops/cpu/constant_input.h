// A kernel input that is a constant initializer, read when the kernel is created (both CPU
// kernels pack their weights then).
#pragma once

#include <cstddef>

#include "ort_api.h"

namespace lstm_ort {

// Input `index` when it is a constant initializer, else null (absent, computed, or a graph input).
inline const OrtValue* ConstantValue(const OrtKernelInfo* info, size_t index) {
  size_t n_inputs = 0;
  if (OrtStatus* st = Ort::GetApi().KernelInfo_GetInputCount(info, &n_inputs)) {
    Ort::GetApi().ReleaseStatus(st);
    return nullptr;
  }
  if (index >= n_inputs) return nullptr;
  int is_constant = 0;
  const OrtValue* value = nullptr;
  if (OrtStatus* st = Ort::GetApi().KernelInfoGetConstantInput_tensor(info, index, &is_constant, &value)) {
    Ort::GetApi().ReleaseStatus(st);
    return nullptr;
  }
  return is_constant ? value : nullptr;
}

}  // namespace lstm_ort
