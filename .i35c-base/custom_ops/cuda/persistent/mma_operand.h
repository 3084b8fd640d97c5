// The operand type of the persistent kernel's tensor-core product (mma_kernel.cuh), as a value
// the plain-C++ planner and heuristics can see. Accumulation and the cell state stay fp32 in
// every case.
#pragma once

#include "cuda/host_device.h"

namespace lstm_ort {

enum class MmaOperand : int {
  kTf32x3 = 0,  // fp32 weights and h, each split into tf32 hi + lo: three products, FP32-accurate
  kTf32,        // one tf32 product (10-bit mantissa operands)
  kFp16,        // weights and h stored as fp16
  kBf16,        // weights and h stored as bf16
};

// What the product rounds its operands to: 8-row k steps for tf32, 16 for the 16-bit types.
LSTM_ORT_HOST_DEVICE constexpr int MmaKStep(MmaOperand op) { return op == MmaOperand::kTf32x3 || op == MmaOperand::kTf32 ? 8 : 16; }
LSTM_ORT_HOST_DEVICE constexpr int MmaOperandBytes(MmaOperand op) { return MmaKStep(op) == 8 ? 4 : 2; }

const char* MmaOperandName(MmaOperand op);

}  // namespace lstm_ort
