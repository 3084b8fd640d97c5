// Device scratch of one factored FusedLSTM call (run.cu), carved out of a single allocation. Plain
// C++: the op asks for the size before anything runs, and the unit tests check the carve-up.
#pragma once

#include <cstddef>

#include "cuda/element_type.h"
#include "lstm_ort/contract.h"

namespace lstm_ort {

struct LowRankScratch {
  // float16 calls: X, W and the factors in fp32 (the math is fp32, and cuBLAS multiplies two
  // operands of one type); null for float32 calls, which read the inputs as they are.
  float *x, *w, *factors;
  float* gx;        // [D][T*B][4H]: a layer's input projection
  float* px;        // [T*B][widest input rank]: the input times A, one direction at a time
  float* h[2];      // [D][B][H] each, ping-pong; the persistent recurrence keeps h transposed in h[1],
                    // [D][H][Bp] (Bp = PaddedBatch(B))
  float* c;         // [D][B][H]
  float* p;         // [D][B][widest recurrent rank]: h times A, per step ([D][rank][Bp] when persistent)
  int* lens;        // [B]
  unsigned* barrier;  // the persistent recurrence's grid barrier counter
  float* layer[2];  // [T][B][D][H]: a layer's output for the next one, fp32
};

// The widest input and recurrent ranks of a node.
int64_t WidestRank(const Ranks& ranks, bool recurrent);

// The regions inside `base` (all null when base is null); `total` (if given) gets the bytes used.
LowRankScratch CarveLowRankScratch(const Dims& d, const Ranks& ranks, ElementType type, void* base, size_t* total);

size_t LowRankScratchBytes(const Dims& d, const Ranks& ranks, ElementType type);

}  // namespace lstm_ort
