// The bf16 format's hot loops (docs/ops.md, "bf16 on the CPU"), compiled once per instruction set
// and chosen once at run time by the CPU's features (bf16_dispatch.cc), never by -march=native:
//   amx         AMX-BF16 tiles (tdpbf16ps: 16 x 16 fp32 sums of 16 x 32 bf16 by 32 x 16 bf16), for
//               every row count (a step of one row too: bf16_impl.inc)
//   avx512bf16  AVX512-BF16 (vdpbf16ps: 16 fp32 lanes, each += a pair of bf16 products)
//   generic     plain C++ with the same rounding (round to nearest even), for CPUs without either:
//               never chosen for a node (precision bf16 is refused there), only for tests
//
// Packed weights: the fp32 format's panels (cpu/kernels.h: 8 units x 4 gates, gate-major, two
// strips of 16 columns), each strip [K / 2][16][2]: the two consecutive k of one column side by
// side, one 64-byte line per k pair (a row of an AMX B tile, a vdpbf16ps operand), K padded to
// even with zero weights. Activations are rows of K (padded) bf16. Products accumulate in fp32.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cpu/kernels.h"

namespace lstm_ort::cpu::bf16 {

// out[r][col] = (accumulate ? out[r][col] : 0) + sum_k a[r][k] w[k][col] + bias[col] (bias
// optional), fp32 sums of bf16 products, for rows [r0, r1) and panels [q0, q1).
struct GemmArgs {
  const uint16_t* a;        // activation rows, bf16
  int64_t lda;              // elements per activation row
  const uint16_t* w;        // packed panels
  int64_t depth;            // K padded to even: the rows of each strip this product reads
  int64_t stride;           // rows each strip holds (>= depth: a layer's panels hold W's rows, then R's)
  const float* bias;        // per packed column, or null
  bool accumulate;
  float* out;
  int64_t ldo;
  float* const* out_rows;   // per row, its output (instead of out + r * ldo), or null
  int64_t n_panels;         // panels in w
};

struct Table {
  const char* isa;
  int group;  // K is padded to a multiple of this: 2 (a pair), 32 (an AMX tile's depth)
  int row_pad;  // activation buffers hold rows in multiples of this (AMX tiles read 16 rows)
  // Rows [0, K) of a row-major [K][4H] float source (`fp16`: float16) in the contract's column
  // order (4j + g) as panels; np * PanelElements(K) elements.
  void (*pack)(const void* src, int64_t K, int64_t H, bool fp16, uint16_t* dst);
  // n floats rounded to bf16 (nearest even), then zeros up to `padded`.
  void (*convert)(const float* x, int64_t n, int64_t padded, uint16_t* out);
  void (*gemm)(const GemmArgs&, int64_t r0, int64_t r1, int64_t q0, int64_t q1);
};

// K padded to the table's group: the row length of activations and packed weights.
inline int64_t PaddedDepth(const Table& t, int64_t K) { return (K + t.group - 1) / t.group * t.group; }
// Elements of one panel of K rows.
inline int64_t PanelElements(const Table& t, int64_t K) { return PaddedDepth(t, K) * kPanel; }
// Rows an activation buffer of n rows holds.
inline int64_t PaddedRows(const Table& t, int64_t n) { return (n + t.row_pad - 1) / t.row_pad * t.row_pad; }

namespace generic {
extern const Table kTable;
}
namespace avx512bf16 {
extern const Table kTable;
}
namespace amx {
extern const Table kTable;
}

}  // namespace lstm_ort::cpu::bf16

namespace lstm_ort::cpu {

// The best bf16 table this CPU runs (cpu_features.h's units; LSTM_ORT_CPU_BF16_ISA=avx512bf16
// keeps AMX out, =amx asks for it and is refused where the CPU lacks it).
const bf16::Table& Bf16Kernels();

}  // namespace lstm_ort::cpu
