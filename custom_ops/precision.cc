#include "precision.h"

#include <string>

#include "enum_names.h"

namespace lstm_ort {

namespace {

// Where tf32's step reads R's 16-bit copy at a size fp32 would read it whole (precision.h).
bool StepHalvesWhatItReads(const Dims& d) { return d.H >= kMinHiddenForAutoTf32Weights && d.T >= kMinStepsForHalfWeights; }

}  // namespace

bool OneStepRunsAsTf32(const Dims& d) {
  if (d.T != 1 || d.L > kMaxLayersForAutoTf32OneStep || d.D != 1 || d.H < kMinHiddenForAutoTf32OneStep ||
      d.H > kMaxHiddenForAutoTf32OneStep)
    return false;
  const int64_t min_cells = d.L >= kMinLayersForAutoTf32OneStepAtFewerCells ? kMinCellsForAutoTf32OneStepInDeepStacks
                                                                            : kMinCellsForAutoTf32OneStep;
  return d.H >= kMinHiddenForAutoTf32OneStepAtAnyBatch || d.B * d.H >= min_cells;
}

bool AutoRunsAsTf32(const Dims& d) {
  return d.B >= kMinBatchForAutoTf32 || (d.H >= kMinHiddenForAutoTf32 && d.B * d.H >= kMinCellsForAutoTf32) ||
         StepHalvesWhatItReads(d) || OneStepRunsAsTf32(d) ||
         MmaStepTakesStack(d, /*tf32x3=*/false) || ResidentMmaStepTakesStack(d, /*fp16_runs=*/false);
}

namespace {

PrecisionDecision OnCuda(Precision requested, const Dims& d) {
  PrecisionDecision out;
  out.requested = requested;
  if (requested != Precision::kAuto) {
    out.runs = static_cast<Arithmetic>(requested);
    out.words = EnumName(out.runs);
    return out;
  }
  const bool tf32 = AutoRunsAsTf32(d);
  out.runs = tf32 ? Arithmetic::kTf32 : Arithmetic::kFp32;
  if (!tf32)
    out.words = "fp32: auto at this size, where fp32 costs nothing";
  else if (MmaStepTakesStack(d, /*tf32x3=*/false))
    out.words = "tf32: auto on this stack, which the tensor-core step runs in tf32 faster than any fp32 path";
  else if (ResidentMmaStepTakesStack(d, /*fp16_runs=*/false))
    out.words =
        "tf32: auto on this stack, which the tensor-core step runs in tf32 faster than any fp32 path where its "
        "weights fit on chip (elsewhere tf32 is no slower than fp32)";
  else if (StepHalvesWhatItReads(d) && d.B < kMinBatchForAutoTf32 && d.B * d.H < kMinCellsForAutoTf32)
    out.words = "tf32: auto at this size, where a step's 16-bit weight copy halves what it reads";
  else
    out.words = "tf32: auto at this size, where fp32 would lose to stock's TF32 default";
  return out;
}

PrecisionDecision OnCpu(Precision requested, const Dims& d, const CpuMath& cpu) {
  PrecisionDecision out;
  out.requested = requested;
  out.runs = Arithmetic::kFp32;
  switch (requested) {
    case Precision::kFp32: out.words = "fp32"; break;
    case Precision::kAuto:
      out.words = "fp32: auto on the CPU (no TF32 arithmetic here; bf16 is beyond auto's bound)";
      break;
    case Precision::kTf32: out.words = "fp32: the CPU has no TF32 arithmetic, and fp32 is within tf32's bound"; break;
    case Precision::kFp16:
      out.words = "fp32: fp16 products are no faster than fp32 ones on the CPU, and fp32 is within fp16's bound";
      break;
    case Precision::kBf16:
      if (!cpu.Bf16()) {
        out.refused =
            "precision bf16 on the CPU needs AVX512-BF16 or AMX-BF16, which this CPU lacks (or the OS does not "
            "grant): give the node precision fp32 (the session option lstm_ort.precision=fp32), or run it on CUDA";
        out.words = "refused: " + out.refused;
        break;
      }
      if (!cpu.amx_bf16 && cpu.bf16_half_rate && !Bf16PaysAtHalfRate(d)) {
        out.words =
            "fp32: this CPU's bf16 products (AVX512-BF16, no AMX) run at half fp32's rate, and bf16 pays only where a "
            "step streams its weights (B <= " + std::to_string(kHalfRateBf16Rows) + ", B <= " +
            std::to_string(kHalfRateBf16PairRows) + " at H >= " + std::to_string(kHalfRateBf16PairHidden) +
            ", or B <= " + std::to_string(kHalfRateBf16StreamRows) + " at H >= " +
            std::to_string(kHalfRateBf16StreamHidden) + "); fp32 is within bf16's bound";
        break;
      }
      out.runs = Arithmetic::kBf16;
      out.words = std::string("bf16 weights and inputs to the products, fp32 accumulation and cell (") +
                  (cpu.amx_bf16 ? "AMX-BF16" : "AVX512-BF16") + ")";
      break;
  }
  return out;
}

}  // namespace

bool Bf16PaysAtHalfRate(const Dims& d) {
  return d.B <= kHalfRateBf16Rows || (d.B <= kHalfRateBf16PairRows && d.H >= kHalfRateBf16PairHidden) ||
         (d.B <= kHalfRateBf16StreamRows && d.H >= kHalfRateBf16StreamHidden);
}

PrecisionDecision DecidePrecision(Precision requested, Device device, const Dims& d, const CpuMath& cpu) {
  return device == Device::kCuda ? OnCuda(requested, d) : OnCpu(requested, d, cpu);
}

}  // namespace lstm_ort
