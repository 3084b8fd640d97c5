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

void CellFromGates(const StepArgs& a, int64_t p0, int64_t p1, const float* const* products) {
  static const bool wide = [] {
    if (BaselineIsaForced()) return false;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
           __builtin_cpu_supports("avx512dq");
#else
    return false;
#endif
  }();
  if (wide && a.default_acts) return avx512::CellFromGates(a, p0, p1, products);
  for (int64_t r = 0; products && r < a.rows; ++r) {  // the products into the running rows' gates
    if (!products[r]) continue;
    const int64_t b = a.b0 + r, len = a.lens ? a.lens[b] : a.T;
    float* gx = const_cast<float*>(a.gx) + ((a.reverse ? len - 1 - a.s : a.s) * a.B + b) * a.gx_ld;
    for (int64_t i = p0 * kPanel; i < p1 * kPanel; ++i) gx[i] += products[r][i];
  }
  StepArgs from_gates = a;
  from_gates.h_zero = true;  // the step's first-step path: the cell from the gates alone
  Kernels().step(from_gates, p0, p1);
}

}  // namespace lstm_ort::cpu
