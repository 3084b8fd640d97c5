#include <cstdlib>
#include <cstring>

#include "cpu/kernels.h"

namespace lstm_ort::cpu {

const KernelTable& Kernels() {
  static const KernelTable* table = [] {
    const char* force = std::getenv("LSTM_ORT_CPU_ISA");
    if (force && std::strcmp(force, "v2") == 0) return &v2::kTable;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return &v3::kTable;
#endif
    return &v2::kTable;
  }();
  return *table;
}

}  // namespace lstm_ort::cpu
