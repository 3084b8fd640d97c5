// C entry points for lstm_ort's Python side, in every build (CPU-only too): Python checks with
// them that it agrees with the kernels on strategy and precision names, weight packing (factored
// weights too) and the `tuned` format.
#include <algorithm>
#include <cstdint>
#include <exception>

#include "attribute_parsing.h"
#include "c_entry_point.h"
#include "cpu/cpu_features.h"
#include "enum_names.h"
#include "lstm_ort/contract.h"
#include "overrides.h"
#include "precision.h"
#include "session_keys.h"

// The strategy names in enum order, comma-separated: "auto,tiled,splitk,persistent,wavefront,cluster".
LSTM_ORT_C_ENTRY int LstmOrtStrategyNames(char* out, int size) {
  return lstm_ort::CopyOutWhole(lstm_ort::EnumNames<lstm_ort::Strategy>(","), out, size);
}

// The precision names in enum order, comma-separated: "fp32,tf32,fp16,bf16,auto".
LSTM_ORT_C_ENTRY int LstmOrtPrecisionNames(char* out, int size) {
  return lstm_ort::CopyOutWhole(lstm_ort::EnumNames<lstm_ort::Precision>(","), out, size);
}

// The precision decision (precision.h, DecidePrecision) for a call of H units, B rows, L layers of
// D directions and T steps on `device` ("cpu": this CPU, "cuda"): "<what runs>\t<in words>". 1 for
// bad arguments, 2 where the device refuses the mode (the reason in `out`).
LSTM_ORT_C_ENTRY int LstmOrtDecidePrecision(const char* device, const char* precision, int64_t H, int64_t B, int64_t L,
                                            int64_t D, int64_t T, char* out, int size) {
  lstm_ort::Precision p;
  if (!precision || !lstm_ort::ParseEnum(precision, &p))
    return lstm_ort::Failure("precision must be " + lstm_ort::EnumChoices<lstm_ort::Precision>(), out, size);
  const std::string on = device ? device : "";
  if (on != "cpu" && on != "cuda") return lstm_ort::Failure("device must be cpu or cuda", out, size);
  if (H < 1 || B < 0 || L < 1 || D < 1 || D > 2 || T < 0) return lstm_ort::Failure("invalid sizes", out, size);
  lstm_ort::Dims d;
  d.H = H;
  d.B = B;
  d.L = L;
  d.D = D;
  d.T = T;
  try {
    const lstm_ort::PrecisionDecision decision =
        on == "cpu" ? lstm_ort::DecidePrecision(p, lstm_ort::Device::kCpu, d, lstm_ort::cpu::ThisCpuMath())
                    : lstm_ort::DecidePrecision(p, lstm_ort::Device::kCuda, d);
    if (!decision.refused.empty()) return lstm_ort::Failure(decision.refused, out, size) + 1;
    return lstm_ort::CopyOutWhole(std::string(lstm_ort::EnumName(decision.runs)) + "\t" + decision.words, out, size);
  } catch (const std::exception& e) {
    return lstm_ort::Failure(e.what(), out, size);
  }
}

// The CPU kernel names in enum order, comma-separated: "auto,fused,stock,stock_split,
// stock_threads".
LSTM_ORT_C_ENTRY int LstmOrtCpuKernelNames(char* out, int size) {
  return lstm_ort::CopyOutWhole(lstm_ort::EnumNames<lstm_ort::CpuKernel>(","), out, size);
}

// The int8_scales names in enum order, comma-separated: "call,row,slices".
LSTM_ORT_C_ENTRY int LstmOrtInt8ScalesNames(char* out, int size) {
  return lstm_ort::CopyOutWhole(lstm_ort::EnumNames<lstm_ort::Int8Scales>(","), out, size);
}

// The session config keys lstm_ort reads, after "lstm_ort.", comma-separated (session_keys.h):
// "strategy,precision,cpu_kernel,int8_scales,library_registered,debug.strict,...".
LSTM_ORT_C_ENTRY int LstmOrtSessionKeys(char* out, int size) {
  std::string keys;
  for (const std::string& k : lstm_ort::SessionKeys()) keys += (keys.empty() ? "" : ",") + k;
  return lstm_ort::CopyOutWhole(keys, out, size);
}

// The per-node debug override keys in table order, comma-separated: "strict,strategy,mma,...",
// each a session config entry lstm_ort.debug.<key> (overrides.h).
LSTM_ORT_C_ENTRY int LstmOrtDebugKeys(char* out, int size) {
  return lstm_ort::CopyOutWhole(lstm_ort::DebugKeys(","), out, size);
}

// Offset in elements of the packed W block of (layer l, direction d) for these sizes;
// (l = L, d = 0) gives W's element count. -1 for invalid sizes or indices.
LSTM_ORT_C_ENTRY int64_t LstmOrtWeightOffset(int64_t L, int64_t D, int64_t I, int64_t H, int64_t l, int64_t d) {
  if (L < 1 || (D != 1 && D != 2) || I < 1 || H < 1 || l < 0 || l > L || d < 0 || d >= D || (l == L && d != 0))
    return -1;
  // The total must fit in int64 for every offset below it to.
  int64_t total = 0;
  for (int64_t k = 0; k < L; ++k) {
    int64_t rows = 0, columns = 0, block = 0;
    if (__builtin_mul_overflow(D, H, &rows) || __builtin_add_overflow(k == 0 ? I : rows, H, &rows) ||
        __builtin_mul_overflow(H, lstm_ort::kGates, &columns) || __builtin_mul_overflow(rows, columns, &block) ||
        __builtin_mul_overflow(block, D, &block) || __builtin_add_overflow(total, block, &total))
      return -1;
  }
  const lstm_ort::Dims dims = lstm_ort::MakeDims(L, D, 0, 0, I, H);
  return dims.WeightOffset(l, d);
}

// With factored parts (ranks per (l, d) as the attributes rank_input and rank_recurrent hold them,
// L*D each; null = none factored): `what` 0 gives the offset of W block (l, d), 1 that of its
// input factors in `factors`, 2 that of its recurrent factors; (l = L, d = 0) gives W's element
// count (0) or that of `factors` (1, 2). -1 for invalid sizes, ranks or indices.
LSTM_ORT_C_ENTRY int64_t LstmOrtFactoredOffset(int64_t L, int64_t D, int64_t I, int64_t H, const int64_t* rank_input,
                                               const int64_t* rank_recurrent, int64_t l, int64_t d, int64_t what) {
  if (LstmOrtWeightOffset(L, D, I, H, l, d) < 0 || what < 0 || what > 2) return -1;
  lstm_ort::Ranks ranks;
  if (rank_input) ranks.input.assign(rank_input, rank_input + L * D);
  if (rank_recurrent) ranks.recurrent.assign(rank_recurrent, rank_recurrent + L * D);
  for (int64_t k = 0; k < L * D; ++k) {
    // Ranks within the matrices' sides, as the kernels require, keep every count below twice W's.
    const int64_t rows = k < D ? I : D * H, G = lstm_ort::kGates * H;
    if (ranks.Input(k) < 0 || ranks.Recurrent(k) < 0 || ranks.Input(k) > std::min(rows, G) ||
        ranks.Recurrent(k) > std::min(H, G))
      return -1;
  }
  const lstm_ort::Dims dims = lstm_ort::MakeDims(L, D, 0, 0, I, H);
  const lstm_ort::WeightLayout layout(dims, ranks);
  if (what == 0) return layout.WeightOffset(l, d);
  if (l == L) return layout.FactorCount();
  return what == 1 ? layout.InputFactorOffset(l, d) : layout.RecurrentFactorOffset(l, d);
}

// `text` parsed as the `tuned` attribute and written back canonically: "gpu|T|B|strategy"
// entries joined by ';'. On bad input, the attribute's error message.
LSTM_ORT_C_ENTRY int LstmOrtNormalizeTuned(const char* text, char* out, int size) {
  if (!text) return lstm_ort::Failure("no text", out, size);
  try {
    return lstm_ort::CopyOutWhole(lstm_ort::FormatTuned(lstm_ort::ParseTuned(text)), out, size);
  } catch (const std::exception& e) {
    return lstm_ort::Failure(e.what(), out, size);
  }
}
