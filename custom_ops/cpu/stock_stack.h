// onnxruntime's own LSTM kernel on a FusedLSTM node's weights: the stack's stock model
// (cpu/stock_model.h) in a session of its own, so that stock's kernel runs as it runs in the
// original model, weights prepacked once by onnxruntime. (OrtApi::InvokeOp runs a kernel without
// its PrePack: stock's LSTM then packs R at every step and ran 1.1-2.5x slower on this
// project's shapes, docs/cpu.md.) A session of one intra-op thread runs batch pieces side by side
// on the FusedLSTM session's threads (stock, stock_split); a session of the pool's thread count
// runs the whole batch with its own threads while the pool waits (stock_threads), as the original
// model's session runs stock's LSTM.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "call_io.h"
#include "cpu/stock_model.h"
#include "ort_api.h"

namespace lstm_ort {

class StockStack {
 public:
  // Throws (an Ort::Exception) when onnxruntime cannot make the session. `copies`: sessions of the
  // one model, for pieces that run side by side (stock_split: a copy per piece), each holding its
  // own prepacked weights. Pieces run on one session contend for its memory arena (H72 B5 T24 L2,
  // two pieces on two threads: 0.215-0.22 ms a call, 0.19-0.20 on a copy each, and the slowest
  // quarter of the calls from 0.25-0.27 to 0.20-0.21; H200 B8 T24: 0.46-0.51 -> 0.41-0.45 with the
  // arena off, which made large calls slower: H320 B64 T150 L2 117 -> 147 ms).
  StockStack(const Attributes& attrs, const Dims& dims, const StockSignature& sig, const StackWeights& weights,
             int threads, int copies = 1);

  // Rows [b0, b1) of the call, outputs written into io.out, on session copy `copy % copies`. Where the
  // call is one piece in layout 0 the session reads and writes the call's own buffers; else pieces
  // go through `scratch` (ScratchFloats of its rows). Thread-safe (sessions run concurrently).
  void Run(const CallIO& io, int64_t b0, int64_t b1, float* scratch, int copy = 0) const;
  size_t ScratchFloats(const CallIO& io, int64_t rows) const;

  const StockSignature& signature() const { return sig_; }
  int threads() const { return threads_; }

 private:
  Attributes attrs_;
  Dims dims_;  // I, H, L, D
  StockSignature sig_;
  int threads_;  // the session's intra-op threads
  Ort::Env env_;  // onnxruntime's one environment, held while the session lives
  std::vector<std::unique_ptr<Ort::Session>> sessions_;
};

}  // namespace lstm_ort
