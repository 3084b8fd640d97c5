#include <stdexcept>
#include <string>

#include "cpu/kernels.h"
#include "overrides.h"

namespace lstm_ort::cpu {
namespace {

// Whether this CPU runs the build named v2, v3 or v4.
bool Runs(const std::string& level) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  if (level == "v4")
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
           __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512bw") && Runs("v3");
  if (level == "v3") return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#endif
  return level == "v2";
}

struct Build {
  const char* level;
  const KernelTable* table;
};
// Best first.
const Build kBuilds[] = {{"v4", &v4::kTable}, {"v3", &v3::kTable}, {"v2", &v2::kTable}};

}  // namespace

const KernelTable& Kernels() {
  static const KernelTable* table = [] {
    const std::string forced = ForcedFp32Isa();  // LSTM_ORT_CPU_ISA, for testing each build
    for (const Build& b : kBuilds) {
      if (!forced.empty() && forced != b.level) continue;
      if (Runs(b.level)) return b.table;
      if (!forced.empty())
        throw std::runtime_error("LSTM_ORT_CPU_ISA=" + forced + ": this CPU lacks that instruction set");
    }
    return &v2::kTable;
  }();
  return *table;
}

void CellFromGates(const StepArgs& a, int64_t p0, int64_t p1, const float* const* products) {
  // 16 lanes where the AVX-512 build of the loops is the one chosen.
  static const bool wide = &Kernels() == &v4::kTable;
  if (wide && a.default_acts) return avx512::CellFromGates(a, p0, p1, products);
  if (!a.gx) {  // the products are the gates: a row at a time, its gates at its product
    for (int64_t r = 0; r < a.rows; ++r) {
      StepArgs row = a;
      row.rows = 1;
      row.b0 = a.b0 + r;
      row.h_in = a.h_in + r * a.Hp;
      row.h_out = a.h_out + r * a.Hp;
      row.c = a.c + r * a.Hp;
      row.gx = products[r];  // null where the row's sequence ended (its state is kept)
      row.gx_ld = 0;
      row.h_zero = true;  // the step's first-step path: the cell from the gates alone
      Kernels().step(row, p0, p1);
    }
    return;
  }
  for (int64_t r = 0; products && r < a.rows; ++r) {  // the products into the running rows' gates
    if (!products[r]) continue;
    const int64_t b = a.b0 + r;
    float* gx = const_cast<float*>(a.gx) + (TimeAt(a, LengthOf(a, b)) * a.B + b) * a.gx_ld;
    for (int64_t i = p0 * kPanel; i < p1 * kPanel; ++i) gx[i] += products[r][i];
  }
  StepArgs from_gates = a;
  from_gates.h_zero = true;  // the step's first-step path: the cell from the gates alone
  Kernels().step(from_gates, p0, p1);
}

}  // namespace lstm_ort::cpu
