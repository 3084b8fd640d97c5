// The model of onnxruntime's own LSTM for one FusedLSTM node: the stack as the exporters write it
// (one ONNX LSTM node per layer, layout 0, the directions of a layer joined by Transpose and
// Reshape for the next), the weights unpacked from the contract's layout back to ONNX's (W, R,
// B = Wb + Rb with Rb zero, P). int8 weights make onnxruntime's DynamicQuantizeLSTM nodes instead
// (com.microsoft; W [D, I, 4H] and R [D, H, 4H] int8, a scale per column, zero points 0), the
// quantized LSTM the int8 node was rewritten from. Plain C++ (cpu/onnx_writer.h).
#pragma once

#include <cstdint>
#include <string>

#include "lstm_ort/contract.h"

namespace lstm_ort {

// Which optional inputs the node's calls carry: the model has an input for each.
struct StockSignature {
  bool seq_lens = false, initial_h = false, initial_c = false;
  bool operator==(const StockSignature& o) const {
    return seq_lens == o.seq_lens && initial_h == o.initial_h && initial_c == o.initial_c;
  }
};

// Names of the model's inputs and outputs.
namespace stock_names {
constexpr const char* kX = "X";
constexpr const char* kSeqLens = "sequence_lens";
std::string InitialH(int64_t layer);
std::string InitialC(int64_t layer);
constexpr const char* kY = "Y";  // the last layer's [T, D, B, H]
std::string YH(int64_t layer);   // [D, B, H]
std::string YC(int64_t layer);
}  // namespace stock_names

// A node's weights in the contract's layout (contract.h): fp32 W, or int8 W with its scales; b and
// p fp32 or null. No factored part.
struct StackWeights {
  const float* w = nullptr;
  const int8_t* w8 = nullptr;        // int8 W, in place of w
  const float* w_scale = nullptr;    // int8 W's scales (Dims::WeightScaleCount)
  const float* b = nullptr;
  const float* p = nullptr;
};

// Serialized ModelProto. `dims` gives I, H, L, D.
std::string StockStackModel(const Attributes& attrs, const Dims& dims, const StockSignature& sig, const StackWeights& w);

}  // namespace lstm_ort
