#include "cpu/cpu_features.h"

#if defined(__x86_64__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "overrides.h"

namespace lstm_ort::cpu {
namespace {

#if defined(__x86_64__)
bool Cpuid(unsigned leaf, unsigned sub, unsigned r[4]) { return __get_cpuid_count(leaf, sub, &r[0], &r[1], &r[2], &r[3]); }

// XCR0: which register states the OS saves (bits 5-7: AVX-512; 17-18: AMX tile config and data).
unsigned long long Xcr0() {
  unsigned r[4];
  if (!Cpuid(1, 0, r) || !(r[2] & (1u << 27))) return 0;  // no OSXSAVE: no xgetbv
  unsigned lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<unsigned long long>(hi) << 32) | lo;
}

// Linux gives a process AMX's tile data only once it asks (kernel 5.16 on); an older kernel or
// a refusal leaves AMX off.
bool AmxGranted() {
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
}
#endif

}  // namespace

CpuMath HardwareCpuMath() {
  CpuMath m;
#if defined(__x86_64__)
  unsigned r7[4] = {}, r71[4] = {};
  if (!Cpuid(7, 0, r7)) return m;
  Cpuid(7, 1, r71);
  const unsigned long long xcr0 = Xcr0();
  const bool avx512_state = (xcr0 & 0xe0) == 0xe0 && (xcr0 & 0x6) == 0x6;
  const bool amx_state = (xcr0 & (3ull << 17)) == (3ull << 17);
  const bool avx512f = r7[1] & (1u << 16), avx512bw = r7[1] & (1u << 30), avx512vl = r7[1] & (1u << 31);
  m.avx512_bf16 = avx512_state && avx512f && avx512bw && avx512vl && (r71[0] & (1u << 5));
  const bool amx_tile = r7[3] & (1u << 24);
  m.amx_bf16 = amx_state && amx_tile && (r7[3] & (1u << 22));
  m.amx_int8 = amx_state && amx_tile && (r7[3] & (1u << 25));
  __builtin_cpu_init();
  m.bf16_half_rate = m.avx512_bf16 && __builtin_cpu_is("intel");
#endif
  return m;
}

const CpuMath& ThisCpuMath() {
  static const CpuMath math = [] {
    CpuMath m = HardwareCpuMath();
#if defined(__x86_64__)
    if ((m.amx_bf16 || m.amx_int8) && !AmxGranted()) m.amx_bf16 = m.amx_int8 = false;
#endif
    std::string forced;
    try {
      forced = CpuOverridesFromEnvironment().bf16_isa;
    } catch (...) {  // a bad knob is reported when a kernel is made
    }
    if (forced == "none") m.avx512_bf16 = m.amx_bf16 = false;
    if (forced == "avx512bf16") m.amx_bf16 = false;
    if (forced == "amx" || forced == "avx512bf16") m.bf16_half_rate = false;  // the unit named runs at every size
    return m;
  }();
  return math;
}

}  // namespace lstm_ort::cpu
