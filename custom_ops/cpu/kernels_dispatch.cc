#include "cpu/kernels.h"
#include "overrides.h"

namespace lstm_ort::cpu {

const KernelTable& Kernels() {
  static const KernelTable* table = [] {
    if (BaselineIsaForced()) return &v2::kTable;  // LSTM_ORT_CPU_ISA=v2
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return &v3::kTable;
#endif
    return &v2::kTable;
  }();
  return *table;
}

}  // namespace lstm_ort::cpu
