// The model of onnxruntime's own LSTM for one FusedLSTM node: the stack as the exporters write it
// (one ONNX LSTM node per layer, layout 0, the directions of a layer joined by Transpose and
// Reshape for the next), the weights unpacked from the contract's layout back to ONNX's (W, R,
// B = Wb + Rb with Rb zero, P). Plain C++ (cpu/onnx_writer.h).
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

// Serialized ModelProto. `dims` gives I, H, L, D; w, b, p are fp32 in the contract's layout
// (b and p may be null). The weights must hold no factored part.
std::string StockStackModel(const Attributes& attrs, const Dims& dims, const StockSignature& sig, const float* w,
                            const float* b, const float* p);

}  // namespace lstm_ort
