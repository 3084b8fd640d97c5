#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#include <stdexcept>
#include <string>

#include "cpu/cpu_features.h"
#include "cpu/int8/int8_kernels.h"
#include "overrides.h"

namespace lstm_ort::cpu::int8 {
namespace {

bool Has(const char* feature) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  if (std::strcmp(feature, "amx") == 0)  // tiles granted; AVX-512 around them
    return ThisCpuMath().amx_int8 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
  if (std::strcmp(feature, "vnni512") == 0 || std::strcmp(feature, "vnni256") == 0)
    return __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512vl") &&
           __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx2");
  if (std::strcmp(feature, "avxvnni") == 0) return __builtin_cpu_supports("avxvnni") && __builtin_cpu_supports("avx2");
  if (std::strcmp(feature, "avx2") == 0) return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#endif
  return std::strcmp(feature, "generic") == 0;
}

// Whether 512-bit vectors run at twice the 256-bit rate: on Intel's AVX-512 cores (an Intel Xeon
// with VNNI and no AMX, torch int8 fixtures: 0.63-0.82x of stock on 256-bit vectors, 0.98-1.37x on
// 512-bit); not on AMD before Zen 5 (family 0x1A), whose 512-bit operations are two 256-bit halves
// (Zen 4: 512-bit vectors no faster, and slower beside a busy hyperthread).
bool WideVectorsPay() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  if (!__builtin_cpu_is("amd")) return true;
  unsigned eax, ebx, ecx, edx;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return false;
  const unsigned family = ((eax >> 8) & 0xf) + ((eax >> 20) & 0xff);
  return family >= 0x1a;
#else
  return false;
#endif
}

// Best first; vnni512 only where wide vectors pay (else vnni256, the same instructions on 256 bits).
const Table* const kTables[] = {&amx::kTable, &vnni512::kTable, &vnni256::kTable, &avxvnni::kTable, &avx2::kTable,
                                &generic::kTable};

}  // namespace

const Table& Int8Kernels() {
  static const Table* table = [] {
    const std::string& forced = CpuOverridesFromEnvironment().int8_isa;
    const char* force = forced.c_str();
    if (*force) {
      for (const Table* t : kTables)
        if (std::strcmp(force, t->isa) == 0) {
          if (!Has(t->isa))
            throw std::runtime_error(std::string("LSTM_ORT_CPU_INT8_ISA=") + force + ": this CPU lacks that instruction set");
          return t;
        }
      throw std::runtime_error(std::string("LSTM_ORT_CPU_INT8_ISA=") + force +
                               " is not one of amx, vnni512, vnni256, avxvnni, avx2, generic");
    }
    for (const Table* t : kTables)
      if (Has(t->isa) && (t != &vnni512::kTable || WideVectorsPay())) return t;
    return &generic::kTable;
  }();
  return *table;
}

QuantParams QuantParamsFor(float lo, float hi) {
  // The range holds 0, so that 0 (padding, a zero state) is exact; 255 levels span it.
  lo = std::min(lo, 0.f);
  hi = std::max(hi, 0.f);
  QuantParams p;
  p.scale = hi == lo ? 1.f : (hi - lo) / 255.f;
  const float zp = std::max(0.f, std::min(255.f, 0.f - lo / p.scale));
  p.zero_point = static_cast<int32_t>(std::nearbyint(zp));  // half to even in the default rounding mode
  return p;
}

}  // namespace lstm_ort::cpu::int8
