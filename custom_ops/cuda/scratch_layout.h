// One call's device scratch, carved out of a single allocation. Plain C++: the op asks for the
// size before anything runs on the GPU, and the unit tests check the carve-up.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cuda/element_type.h"
#include "cuda/heuristics.h"  // ProjectionMath
#include "lstm_ort/contract.h"

namespace lstm_ort {

// Every region starts on this boundary (cuBLAS and 16-byte vector loads want aligned rows).
constexpr size_t kScratchAlign = 256;

struct Scratch {
  float* gx;       // [D][T*B][4H]
  float* h[2];     // [D][B][H] each
  float* c;        // [D][B][H]
  int* lens;       // [B]
  // [T][B][D][H] of the element type: a layer's output for the next layer. One buffer serves every
  // layer: each range projects its first layer's whole input before it writes (stack_run.cu). Null
  // where Y carries these outputs (ScratchNeeds::y_relays) or there is one layer.
  void* layer;
  // The persistent kernel's: states per layer of a range, [L][D][B][H]; h in flight; barrier (also
  // the resident tensor-core step's).
  float *h0, *c0, *h_fin, *c_fin;
  float* hbuf;
  unsigned* barrier;
  float* gates;    // v1's cuBLAS step: [splits][D][B][4H] recurrent products (fp32 storage only)
  unsigned* stream_done;  // its weight-streaming step: [D][column tiles] split counters
  // Its 16-bit operands in the reduced modes (StepWeightsFor; null otherwise): a layer's
  // recurrent weights [D][H][4H], h [D][B][H], and the largest |weight| per direction (float bits).
  void* wh_half;
  void* h_half;
  unsigned* wh_amax;
  // fp32 input projections on TF32 tensor cores: the layer input (a chunk of rows) and the
  // input rows of its weights, split; null when ProjectsWithSplitTf32 says no, and the weights'
  // also where they are kept across calls (gemm/kept_split.h).
  float *x_hi, *x_lo, *w_hi, *w_lo;
  // fp16 and bf16 input projections of fp32 models: bfloat16 copies of a chunk of the layer
  // input's rows and of W's input rows [D][I][G]; null when ProjectsWithBf16Copies says no.
  void *x_bf16, *w_bf16;
  // The tensor-core step's (mma_step/launch.h): a range's 16-bit weight copies, and its operands'
  // scale exponents and maxima; null where no range runs on it.
  void* step_w;
  int* step_exps;
};

// What a call's scratch holds besides the regions every call has: the call plan's decisions.
struct ScratchNeeds {
  bool gates = false;         // v1's cuBLAS step's products, [gate_copies][D][B][4H] (fp32 storage)
  int64_t gate_copies = 1;    // partial sums per K split where the step may stream the weights
  bool stream_done = false;   // the streaming step's split counters
  bool half_weights = false;  // the 16-bit copies of R and h (reduced modes)
  bool split_x = false;       // 3xTF32 projections: x split, a chunk of rows
  bool split_w = false;       //   and W's input rows split (where its halves are not kept)
  bool bf16_copies = false;   // fp16/bf16 projections: x (a chunk of rows) in bfloat16
  bool bf16_w = false;        //   and W's input rows copied (where its copy is not kept)
  bool step_exps = false;          // ranges on the tensor-core step: its exponents
  int64_t step_weight_bytes = 0;   // ... and the largest range's 16-bit weight copies
  bool y_relays = false;      // Y passes the outputs between layers (CallInputs::y_relays): no layer buffer
};

// The rule: what a call of these sizes needs when its projection runs in `math` (the plan's, from
// the call's precision decision); `weights_kept`: W is kept across calls in the form the call
// reads (its 3xTF32 halves, its bfloat16 copy).
// PlanCall asks it.
ScratchNeeds ScratchNeedsFor(const Dims& d, ElementType type, ProjectionMath math, bool weights_kept);

// h in flight for the persistent kernel: [2][L][D][H][B rounded up to 128], room for any plan's padding.
size_t HBufBytes(const Dims& d);

// The regions inside `base` (all null when base is null); `total` (if given) gets the bytes used.
Scratch CarveScratch(const Dims& d, ElementType type, const ScratchNeeds& needs, void* base, size_t* total);

size_t ScratchBytes(const Dims& d, ElementType type, const ScratchNeeds& needs);

}  // namespace lstm_ort
