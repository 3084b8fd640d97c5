// The FusedLSTM op contract (docs/ops.md), shared by every kernel.
//
// Packed weights, per layer l and direction d in that order (layer-major):
//   W: [K_l, 4H] row-major, K_l = I_l + H (input rows, then recurrent rows);
//      column 4*j + g holds gate g of hidden unit j, g in ONNX order (i, o, f, c).
//   B: [4H] = Wb + Rb, same column order.
//   P: [3H] peepholes in ONNX order (i, o, f), each a block of H.
// I_0 is X's feature size; I_l = D*H for l > 0 (both directions concatenated).
//
// Factored weights (attributes rank_input / rank_recurrent, input `factors`; docs/ops.md): a part
// (input rows or recurrent rows) of block (l, d) with rank r > 0 is absent from W and stands in
// `factors` as A [rows, r] then B [r, 4H] (row-major, B's columns as W's), its product the rows
// it replaces. WeightLayout below places every part; Python mirrors it in lstm_ort/ops/packing.py.
//
// int8 weights (docs/ops.md, "int8 weights"): W of type int8 in the same layout, its zero point 0,
// and `W_scale` float: per (l, d) the input rows' scales [4H] then the recurrent rows' [4H], in W's
// column order. Activations are quantized per call (X) and per step (h) as onnxruntime's
// DynamicQuantizeLSTM does; the kernel is custom_ops/cpu/int8/.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace lstm_ort {

constexpr const char* kDomain = "lstm_ort";
constexpr const char* kOpName = "FusedLSTM";
constexpr int kGates = 4;
constexpr int kGateI = 0, kGateO = 1, kGateF = 2, kGateC = 3;

enum Input : int { kX = 0, kW, kB, kSequenceLens, kInitialH, kInitialC, kP, kFactors, kWScale, kNumInputs };
enum Output : int { kY = 0, kYH, kYC, kNumOutputs };

enum class ActKind : int32_t {
  kSigmoid, kTanh, kRelu, kAffine, kLeakyRelu, kThresholdedRelu,
  kScaledTanh, kHardSigmoid, kElu, kSoftsign, kSoftplus,
};

struct Activation {
  ActKind kind;
  float alpha;
  float beta;
};

// How the CUDA kernel runs the recurrence (attribute `strategy`; the CPU kernel ignores it).
// v1: one launch per step (kTiled, kSplitK). kPersistent: one cooperative launch per layer with
// the weights on chip. kWavefront: as kPersistent, consecutive layers sharing one launch.
// kCluster: one launch per layer, a thread-block cluster per direction with the weights in
// registers (H <= 256, B <= 8; elsewhere as kAuto). kAuto picks by shape. Names:
// custom_ops/strategy_names.h.
enum class Strategy : int32_t { kAuto = 0, kTiled, kSplitK, kPersistent, kWavefront, kCluster };

// How a kernel rounds the recurrence's operands (attribute `precision`; absent: kFp32). The
// model's element type T is unchanged: fp32 models keep fp32 inputs and outputs. kFp32: fp32
// arithmetic (on T storage; for T = float16 that is today's fp32 math on fp16 storage).
// kTf32, kFp16, kBf16: weights and the recurrent operand h in that type, fp32 accumulation, the
// cell state c in fp32. kAuto: fp32 where that costs nothing, else tf32. What a call computes in
// is decided once per device and call by DecidePrecision (custom_ops/precision.h), which gives an
// Arithmetic: no kernel reads the mode itself (docs/ops.md, "Precision modes"). Names:
// custom_ops/enum_names.cc.
enum class Precision : int32_t { kFp32 = 0, kTf32, kFp16, kBf16, kAuto };

// What a call computes in: a Precision resolved for one device and one call's sizes
// (DecidePrecision, custom_ops/precision.h); never `auto`. The same numbers as Precision's.
enum class Arithmetic : int32_t { kFp32 = 0, kTf32, kFp16, kBf16 };

// Which kernel runs a call on the CPU (attribute `cpu_kernel`; the CUDA kernels ignore it).
// kFused: FusedLSTM's own kernel. kStock: onnxruntime's LSTM kernel on the same weights, the
// stack run as the original model's LSTM nodes run it (cpu/stock_stack.h). kStockSplit: the same,
// batch rows split over the session's threads, one run each. kStockThreads: the same, the whole
// batch in one run on as many threads as the session's pool has, as the original model runs it
// (cpu/pool.h, PoolThreads). kAuto: measured per shape class on the first calls
// (cpu/kernel_tuner.h). Names: custom_ops/cpu_kernel_names.h.
enum class CpuKernel : int32_t { kAuto = 0, kFused, kStock, kStockSplit, kStockThreads };

// How the int8 kernel quantizes its activations (the layer input, and h at each step): one scale
// per call and per step, as onnxruntime's DynamicQuantizeLSTM on one thread (kCall, the default),
// or one per batch row (kRow), so that batched rows never change each other's results (what a
// stream batcher needs), or h with one scale per slice of the batch that onnxruntime's LSTM cuts
// for its threads, as DynamicQuantizeLSTM on as many threads as the CPU kernel plans for (kSlices:
// the slices run on threads of their own, no meeting per step). Attribute `int8_scales`;
// docs/ops.md, "int8 weights".
enum class Int8Scales : int32_t { kCall = 0, kRow, kSlices };

// A measured winner from `lstm-ort tune`, for one GPU model and one (T, B) of this node, or for
// one CPU ("cpu:" + its model name, as LstmOrtCpuName gives it) and a shape class of the CPU
// kernel (T the class's bucket).
constexpr const char* kTunedCpuPrefix = "cpu:";
struct TunedStrategy {
  std::string gpu;
  int64_t T = 0, B = 0;
  Strategy strategy = Strategy::kAuto;     // GPU entries
  CpuKernel cpu_kernel = CpuKernel::kAuto;  // CPU entries
};

// Ranks of the factored parts, per (layer, direction) k = l*D + d (attributes rank_input and
// rank_recurrent); 0, or an empty list, is a part kept whole in W.
struct Ranks {
  std::vector<int64_t> input, recurrent;

  int64_t Input(int64_t k) const { return input.empty() ? 0 : input[k]; }
  int64_t Recurrent(int64_t k) const { return recurrent.empty() ? 0 : recurrent[k]; }
  bool Any() const {
    for (const auto* v : {&input, &recurrent})
      for (int64_t r : *v)
        if (r > 0) return true;
    return false;
  }
};

// Attributes, resolved once per kernel instance.
struct Attributes {
  int64_t hidden_size = 0;
  int64_t num_layers = 1;
  int num_directions = 1;
  bool reverse_only = false;  // direction == "reverse"
  int64_t layout = 0;
  bool has_clip = false;
  float clip = 0.f;
  bool input_forget = false;
  Activation act[2][3];  // [direction][f, g, h]
  Strategy strategy = Strategy::kAuto;
  Precision precision = Precision::kFp32;
  CpuKernel cpu_kernel = CpuKernel::kAuto;
  Int8Scales int8_scales = Int8Scales::kCall;
  bool cpu_kernel_set = false;  // the node names one (else LSTM_ORT_CPU_KERNEL may, docs/cpu.md)
  std::vector<TunedStrategy> tuned;  // attribute `tuned`: "gpu|T|B|strategy;..."; used when strategy is auto
  Ranks ranks;                       // factored parts; none by default
  std::string debug;                 // attribute `debug`: "key=value;..." developer overrides (overrides.h)
};

// Sizes of one call, resolved from the inputs and validated.
struct Dims {
  int64_t T = 0, B = 0, I = 0, H = 0, L = 1, D = 1;

  int64_t LayerInput(int64_t l) const { return l == 0 ? I : D * H; }
  int64_t LayerK(int64_t l) const { return LayerInput(l) + H; }
  // Offset (in elements) of the packed W block of (l, d).
  int64_t WeightOffset(int64_t l, int64_t d) const {
    int64_t off = 0;
    for (int64_t k = 0; k < l; ++k) off += D * LayerK(k) * kGates * H;
    return off + d * LayerK(l) * kGates * H;
  }
  int64_t WeightCount() const { return WeightOffset(L, 0); }
  int64_t BiasCount() const { return L * D * kGates * H; }
  // W_scale of int8 weights: per (l, d), 4H input-row scales then 4H recurrent-row scales.
  int64_t WeightScaleCount() const { return L * D * 2 * kGates * H; }
  int64_t PeepholeCount() const { return L * D * 3 * H; }
};

inline Dims MakeDims(int64_t L, int64_t D, int64_t T, int64_t B, int64_t I, int64_t H) { return Dims{T, B, I, H, L, D}; }

// Where every part of a node's weights lies in W and in `factors`, for one call's sizes and the
// node's ranks. With no rank set, W is laid out as Dims::WeightOffset says.
class WeightLayout {
 public:
  WeightLayout(const Dims& d, const Ranks& r) : d_(d), r_(&r) {}

  int64_t InputRank(int64_t l, int64_t dir) const { return r_->Input(l * d_.D + dir); }
  int64_t RecurrentRank(int64_t l, int64_t dir) const { return r_->Recurrent(l * d_.D + dir); }
  // Rows of W block (l, dir): the input rows unless factored, then the recurrent rows unless factored.
  int64_t InputRows(int64_t l, int64_t dir) const { return InputRank(l, dir) ? 0 : d_.LayerInput(l); }
  int64_t BlockRows(int64_t l, int64_t dir) const { return InputRows(l, dir) + (RecurrentRank(l, dir) ? 0 : d_.H); }
  // Offset of W block (l, dir); (L, 0) gives W's element count.
  int64_t WeightOffset(int64_t l, int64_t dir) const {
    int64_t off = 0;
    for (int64_t k = 0; k < l * d_.D + dir; ++k) off += BlockRows(k / d_.D, k % d_.D) * kGates * d_.H;
    return off;
  }
  int64_t WeightCount() const { return WeightOffset(d_.L, 0); }
  // Offset in `factors` of (l, dir)'s input factors A [I_l, r] then B [r, 4H]; its recurrent
  // factors A [H, r] then B [r, 4H] follow. (L, 0) gives the element count of `factors`.
  int64_t InputFactorOffset(int64_t l, int64_t dir) const {
    int64_t off = 0;
    for (int64_t k = 0; k < l * d_.D + dir; ++k) off += FactorBlock(k / d_.D, k % d_.D);
    return off;
  }
  int64_t RecurrentFactorOffset(int64_t l, int64_t dir) const {
    return InputFactorOffset(l, dir) + InputRank(l, dir) * (d_.LayerInput(l) + kGates * d_.H);
  }
  int64_t FactorCount() const { return InputFactorOffset(d_.L, 0); }

 private:
  int64_t FactorBlock(int64_t l, int64_t dir) const {
    return InputRank(l, dir) * (d_.LayerInput(l) + kGates * d_.H) + RecurrentRank(l, dir) * (d_.H + kGates * d_.H);
  }
  Dims d_;
  const Ranks* r_;
};

// X's feature size I for which W and `factors` hold `w_count` and `f_count` elements (L, D, H
// from `d`), or -1 when there is none: both counts are affine in I.
inline int64_t InputSizeFromCounts(Dims d, const Ranks& r, int64_t w_count, int64_t f_count) {
  auto counts = [&](int64_t I, int64_t* w, int64_t* f) {
    d.I = I;
    const WeightLayout layout(d, r);
    *w = layout.WeightCount();
    *f = layout.FactorCount();
  };
  int64_t w0, f0, w1, f1;
  counts(0, &w0, &f0);
  counts(1, &w1, &f1);
  const int64_t slope = w1 - w0 > 0 ? w1 - w0 : f1 - f0, base = w1 - w0 > 0 ? w0 : f0;
  const int64_t count = w1 - w0 > 0 ? w_count : f_count;
  if (slope <= 0 || count - base <= 0 || (count - base) % slope) return -1;
  const int64_t I = (count - base) / slope;
  int64_t w, f;
  counts(I, &w, &f);
  return w == w_count && f == f_count ? I : -1;
}

}  // namespace lstm_ort
