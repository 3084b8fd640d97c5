// One LSTM cell update, the same arithmetic for the CPU and CUDA kernels (fp32 math).
#pragma once

#include <cmath>

#include "lstm_ort/contract.h"

#if defined(__CUDACC__)
#define LSTM_ORT_HD __host__ __device__ __forceinline__
#else
#define LSTM_ORT_HD inline
#endif

namespace lstm_ort {

LSTM_ORT_HD float Apply(const Activation& a, float x) {
  switch (a.kind) {
    case ActKind::kSigmoid: return 1.f / (1.f + expf(-x));
    case ActKind::kTanh: return tanhf(x);
    case ActKind::kRelu: return x > 0.f ? x : 0.f;
    case ActKind::kAffine: return a.alpha * x + a.beta;
    case ActKind::kLeakyRelu: return x >= 0.f ? x : a.alpha * x;
    case ActKind::kThresholdedRelu: return x > a.alpha ? x : 0.f;
    case ActKind::kScaledTanh: return a.alpha * tanhf(a.beta * x);
    case ActKind::kHardSigmoid: return fmaxf(0.f, fminf(1.f, a.alpha * x + a.beta));
    case ActKind::kElu: return x >= 0.f ? x : a.alpha * (expf(x) - 1.f);
    case ActKind::kSoftsign: return x / (1.f + fabsf(x));
    case ActKind::kSoftplus: return log1pf(expf(x));
  }
  return x;
}

// By value, so a kernel launch can carry it.
struct CellParams {
  Activation act[3];  // f, g, h of this direction
  bool has_clip;
  float clip;
  bool input_forget;
};

inline CellParams MakeCellParams(const Attributes& a, int direction) {
  return CellParams{{a.act[direction][0], a.act[direction][1], a.act[direction][2]}, a.has_clip, a.clip, a.input_forget};
}

LSTM_ORT_HD float ClipTo(const CellParams& p, float x) {
  return p.has_clip ? fminf(p.clip, fmaxf(-p.clip, x)) : x;
}

// gi..gc: pre-activations (input and recurrent products plus bias); pi, po, pf: peepholes.
// Updates c in place and returns h. Clip applies to every activation input except h's,
// as stock onnxruntime does.
LSTM_ORT_HD float CellUpdate(const CellParams& p, float gi, float go, float gf, float gc,
                             float pi, float po, float pf, float& c) {
  const float c_prev = c;
  // A peephole of 0 (none given) adds nothing, even where c is inf (Softplus past 88: stock's
  // expf overflows too, and stock, without peepholes, gives h = o * tanh(inf) = o, not NaN).
  const float i = Apply(p.act[0], ClipTo(p, pi != 0.f ? gi + pi * c_prev : gi));
  const float f = p.input_forget ? 1.f - i : Apply(p.act[0], ClipTo(p, pf != 0.f ? gf + pf * c_prev : gf));
  const float g = Apply(p.act[1], ClipTo(p, gc));
  c = f * c_prev + i * g;
  const float o = Apply(p.act[0], ClipTo(p, po != 0.f ? go + po * c : go));
  return o * Apply(p.act[2], c);
}

// The cell nearly every model uses (Sigmoid, Tanh, Tanh; no clip, no input_forget), with
// peepholes: straight-line code, where CellUpdate dispatches on each activation. On the GPU it
// sits on the recurrent critical path once per step.
LSTM_ORT_HD bool IsDefaultCell(const CellParams& p) {
  return p.act[0].kind == ActKind::kSigmoid && p.act[1].kind == ActKind::kTanh && p.act[2].kind == ActKind::kTanh &&
         !p.has_clip && !p.input_forget;
}

LSTM_ORT_HD float FastSigmoid(float x) {
#if defined(__CUDA_ARCH__)
  return __frcp_rn(1.f + __expf(-x));  // a few ulp from 1 / (1 + expf(-x))
#else
  return 1.f / (1.f + expf(-x));
#endif
}

// The default cell with peepholes, its activations from `Act` (Sigmoid and Tanh).
template <typename Act>
LSTM_ORT_HD float PeepholeCell(float gi, float go, float gf, float gc, float pi, float po, float pf, float& c) {
  const float c_prev = c;
  const float i = Act::Sigmoid(gi + pi * c_prev);
  const float f = Act::Sigmoid(gf + pf * c_prev);
  const float g = Act::Tanh(gc);
  c = f * c_prev + i * g;
  return Act::Sigmoid(go + po * c) * Act::Tanh(c);
}

struct LibraryActivations {
  LSTM_ORT_HD static float Sigmoid(float x) { return FastSigmoid(x); }
  LSTM_ORT_HD static float Tanh(float x) { return tanhf(x); }
};

LSTM_ORT_HD float DefaultCellUpdate(float gi, float go, float gf, float gc, float pi, float po, float pf, float& c) {
  return PeepholeCell<LibraryActivations>(gi, go, gf, gc, pi, po, pf, c);
}

#if defined(__CUDACC__)
// Each activation as one exp2 and one reciprocal on the special function unit (tanh x =
// 2 sigmoid(2x) - 1): a shorter dependent chain than the library's, for kernels whose step is
// bound by latency (the cluster kernel). Each is within ~3e-7 of the exact value (absolute), far
// inside fp32 mode's 2e-5 bound.
struct ShortChainActivations {
  __device__ __forceinline__ static float Exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
  }
  __device__ __forceinline__ static float Reciprocal(float x) {
    float y;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
  }
  __device__ __forceinline__ static float Sigmoid(float x) { return Reciprocal(1.f + Exp2(-1.4426950408889634f * x)); }
  __device__ __forceinline__ static float Tanh(float x) { return fmaf(2.f, Sigmoid(2.f * x), -1.f); }
};
#endif

}  // namespace lstm_ort
