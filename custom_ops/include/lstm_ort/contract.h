// The FusedLSTM op contract (docs/ops.md), shared by every kernel.
//
// Packed weights, per layer l and direction d in that order (layer-major):
//   W: [K_l, 4H] row-major, K_l = I_l + H (input rows, then recurrent rows);
//      column 4*j + g holds gate g of hidden unit j, g in ONNX order (i, o, f, c).
//   B: [4H] = Wb + Rb, same column order.
//   P: [3H] peepholes in ONNX order (i, o, f), each a block of H.
// I_0 is X's feature size; I_l = D*H for l > 0 (both directions concatenated).
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

enum Input : int { kX = 0, kW, kB, kSequenceLens, kInitialH, kInitialC, kP, kNumInputs };
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
// kAuto picks by shape. Names: custom_ops/strategy_names.h.
enum class Strategy : int32_t { kAuto = 0, kTiled, kSplitK, kPersistent, kWavefront };

// How a kernel rounds the recurrence's operands (attribute `precision`; absent: kFp32). The
// model's element type T is unchanged: fp32 models keep fp32 inputs and outputs. kFp32: fp32
// arithmetic (on T storage; for T = float16 that is today's fp32 math on fp16 storage).
// kTf32, kFp16, kBf16: weights and the recurrent operand h in that type, fp32 accumulation, the
// cell state c in fp32. kAuto: fp32 where that costs nothing, else tf32; the CUDA kernel decides
// per shape. The CPU kernel computes every mode in fp32, which is within every mode's bound
// (docs/ops.md, "Precision modes"). Names: custom_ops/precision_names.h.
enum class Precision : int32_t { kFp32 = 0, kTf32, kFp16, kBf16, kAuto };

// A measured winner from `lstm-ort tune`, for one GPU model and one (T, B) of this node.
struct TunedStrategy {
  std::string gpu;
  int64_t T = 0, B = 0;
  Strategy strategy = Strategy::kAuto;
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
  std::vector<TunedStrategy> tuned;  // attribute `tuned`: "gpu|T|B|strategy;..."; used when strategy is auto
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
  int64_t PeepholeCount() const { return L * D * 3 * H; }
};

}  // namespace lstm_ort
