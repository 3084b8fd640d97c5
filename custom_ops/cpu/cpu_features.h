// Which reduced-precision units this CPU has and this process may use, found once at run time
// (never at build time: the library runs on any x86-64): AVX512-BF16 (vdpbf16ps), and AMX tiles
// with BF16 or int8 products, which Linux grants a process only on request
// (arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)); the request is made here, once.
// LSTM_ORT_CPU_BF16_ISA (amx, avx512bf16, none) narrows what the bf16 kernels may use, for
// testing and measuring (none: the CPU is taken to have no bf16, and precision bf16 is refused; a
// unit named runs bf16 at every size, even where its rate makes fp32 faster: CpuMath::bf16_half_rate).
#pragma once

#include "precision.h"

namespace lstm_ort::cpu {

// The units found (and granted), narrowed by LSTM_ORT_CPU_BF16_ISA; once per process.
const CpuMath& ThisCpuMath();

// The units the hardware has, before any override (for reports and tests).
CpuMath HardwareCpuMath();

}  // namespace lstm_ort::cpu
