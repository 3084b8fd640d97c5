// C entry points of the CPU kernel's choices (cpu/kernel_report.h), for lstm_ort's Python side.
#include <exception>

#include "attribute_parsing.h"
#include "c_entry_point.h"
#include "cpu/kernel_report.h"
#include "cpu/lstm_cpu.h"
#include "overrides.h"

// Every live CPU kernel's shape classes, one per line (KernelReport's format).
LSTM_ORT_C_ENTRY int LstmOrtCpuKernelReport(char* out, int size) {
  return lstm_ort::CopyOutWhole(lstm_ort::KernelReport(), out, size);
}

// The name that keys this CPU's entries of the `tuned` attribute ("cpu:" + it).
LSTM_ORT_C_ENTRY int LstmOrtCpuName(char* out, int size) { return lstm_ort::CopyOutWhole(lstm_ort::CpuName(), out, size); }

// What a CPU call of these sizes does (cpu/call_plan.h, DescribeCpuCall), on this machine, for a
// node whose weights are `weights` ("float32", "float16", "int8") with these `precision`,
// `cpu_kernel`, `int8_scales` and `tuned` attribute values (empty: absent), in a session of
// `threads` intra-op threads.
LSTM_ORT_C_ENTRY int LstmOrtDescribeCpuCall(int64_t L, int64_t D, int64_t T, int64_t I, int64_t H, int64_t B,
                                            const char* weights, const char* precision, const char* cpu_kernel,
                                            const char* int8_scales, const char* tuned, int threads, char* out,
                                            int size) {
  using namespace lstm_ort;
  if (L < 1 || (D != 1 && D != 2) || T < 0 || I < 1 || H < 1 || B < 0 || threads < 1)
    return Failure("invalid sizes", out, size);
  const std::string w = weights ? weights : "";
  if (w != "float32" && w != "float16" && w != "int8") return Failure("weights must be float32, float16 or int8", out, size);
  try {
    RawAttributes raw;
    raw.hidden_size = H;
    raw.num_layers = L;
    raw.direction = D == 2 ? "bidirectional" : "forward";
    auto given = [](const char* v) { return v && *v ? std::optional<std::string>(v) : std::nullopt; };
    raw.precision = given(precision);
    raw.cpu_kernel = given(cpu_kernel);
    raw.int8_scales = given(int8_scales);
    raw.tuned = given(tuned);
    const Attributes attrs = ResolveAttributes(raw);
    cpu::CpuMachine machine = ThisMachine();
    machine.pool_threads = threads;
    const cpu::CpuCallInputs in{MakeDims(L, D, T, B, I, H), T, w == "float16", w == "int8",
                                w == "float32"  ? nullptr
                                : w == "int8" ? cpu::Int8WhyNoStock(attrs.int8_scales)
                                              : "onnxruntime's CPU LSTM has no float16 kernel"};
    const std::string& env = CpuOverridesFromEnvironment().cpu_kernel;
    const CpuKernel env_kernel = env.empty() || w == "int8" ? CpuKernel::kAuto : ResolveCpuKernel(env);
    const cpu::CpuCallPlan plan = cpu::PlanCpuCall(in, attrs, machine, cpu::CpuPlanKnobs::From(CpuOverridesFromEnvironment()),
                                                   env_kernel);
    return CopyOut(cpu::DescribeCpuCall(plan), out, size);
  } catch (const std::exception& e) {
    return Failure(e.what(), out, size);
  }
}
