#include <stdexcept>
#include <string>

#include "cpu/bf16/bf16_kernels.h"
#include "cpu/cpu_features.h"
#include "overrides.h"

namespace lstm_ort::cpu {

const bf16::Table& Bf16Kernels() {
  static const bf16::Table* table = [] {
    const CpuMath& math = ThisCpuMath();
    std::string forced;
    try {
      forced = CpuOverridesFromEnvironment().bf16_isa;
    } catch (...) {  // a bad knob is reported when a kernel is made
    }
    if (forced == "amx" && !(math.amx_bf16 && math.avx512_bf16))
      throw std::runtime_error("LSTM_ORT_CPU_BF16_ISA=amx: this CPU lacks AMX-BF16 (or the OS does not grant it)");
    if (math.amx_bf16 && math.avx512_bf16) return &bf16::amx::kTable;
    if (math.avx512_bf16) return &bf16::avx512bf16::kTable;
    return &bf16::generic::kTable;
  }();
  return *table;
}

}  // namespace lstm_ort::cpu
