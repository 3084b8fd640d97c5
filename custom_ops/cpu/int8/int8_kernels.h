// The int8 kernel's hot loops (docs/ops.md, "int8 weights"), compiled once per instruction set and
// chosen once at run time by the CPU's features (int8_dispatch.cc), never by -march=native:
//   vnni512  AVX-512 VNNI (EVEX vpdpbusd on 256-bit vectors: u8 x s8 quads summed into int32; 32
//            registers, so tiles of 12 rows. 512-bit vectors ran no faster on Zen 4 (the same
//            multiply-adds per cycle) and slower beside a busy hyperthread: tashkeel [8, 120] 21.8 vs
//            16.0 ms, [32, 120] 83 vs 69 ms, best of 5 rounds on a shared 2-core machine)
//   avxvnni  AVX-VNNI (the VEX encoding of the same instruction)
//   avx2     AVX2 vpmaddwd on int16 pairs (exact: no intermediate saturation, unlike vpmaddubsw)
//   generic  plain C++ on int16 pairs, for x86-64 CPUs without AVX2
//   amx      AMX-INT8 tiles (tdpbusd: 16 x 16 int32 sums of 16 x 64 uint8 by 64 x 16 int8) on the
//            same quads, K padded to 64, for every row count
//
// Packed weights: as the float kernel's (cpu/kernels.h), panels of kPanel columns (8 units x 4
// gates, gate-major), each panel two strips of kStrip columns; a strip is [K / G][kStrip][G]: the
// G consecutive k of one column side by side (G = 4 int8 for quads, G = 2 int16 for pairs), K
// padded to a multiple of G with zero weights. Activations are rows of K (padded) elements: uint8
// levels (quads; the zero point is corrected with the columns' sums) or int16 level - zero point
// (pairs). Every product is exact in int32 (K <= kMaxDepth).
#pragma once

#include <cstddef>
#include <cstdint>

#include "cpu/kernels.h"

namespace lstm_ort::cpu::int8 {

// |level - zero point| <= 255 and |w| <= 128: K * 255 * 128 < 2^31.
constexpr int64_t kMaxDepth = 65536;

// out[r][col] = (accumulate ? out[r][col] : 0) + float(sum_k a[r][k] w[k][col]) * (a_scale * w_scale[col])
//               + bias[col]  (bias optional), for rows [r0, r1) and panels [q0, q1); a_scale (and
//               the zero point) per row where row_scale is given.
struct GemmArgs {
  const void* a;            // activation rows (uint8 levels or int16 level - zero point)
  int64_t lda;              // elements per activation row
  const int8_t* w;          // packed panels (int8 quads or int16 pairs, as the table packs them)
  int64_t depth;            // K padded to the table's group
  const int32_t* col_sums;  // quads: per packed column, sum_k w (the zero point's correction)
  int32_t zero_point;       // quads: the activations' zero point
  float a_scale;
  const float* w_scale;     // per packed column
  const float* bias;        // per packed column, or null
  bool accumulate;
  float* out;
  int64_t ldo;
  float* const* out_rows;   // per row, its output (instead of out + r * ldo), or null
  int64_t n_panels;         // panels in w
  // Per row, its own scale and zero point (Int8Scales::kRow), instead of a_scale and zero_point.
  const float* row_scale = nullptr;
  const int32_t* row_zero_point = nullptr;
};

struct QuantParams {
  float scale;
  int32_t zero_point;
};

struct Table {
  const char* isa;
  int group;      // 4: uint8 x int8 quads; 2: int16 pairs
  int depth_pad;  // K is padded to a multiple of this (the group; an AMX tile's 64)
  int row_pad;    // activation buffers hold rows in multiples of this (AMX tiles read 16)
  // Whether a step fetches the next step's gates (written by the projection, out of cache) while it
  // runs: where the product is on tiles (amx), the step is short and waits on them; with the
  // product on vectors the prefetches cost more than they hide (Intel Xeon, AVX-512 VNNI, one
  // thread, with and without them interleaved in one process: 2-6% slower on the torch int8
  // fixtures and tashkeel at B 8 and 32; each side in a process of its own, within noise; stop 60).
  bool prefetch_next_gates;
  // Bytes of one panel of K (unpadded) rows.
  size_t (*panel_bytes)(int64_t K);
  // Rows [0, K) of a row-major [K][4H] int8 source in the contract's column order (4j + g) as panels.
  void (*pack)(const int8_t* src, int64_t K, int64_t H, int8_t* dst);
  // min and max of the finite values among n floats (NaN, +inf and -inf ignored: one inf in the
  // input would make the scale infinite and every level, of every row, meaningless; it takes the
  // range's end level instead); +inf and -inf when none is finite.
  void (*min_max)(const float* x, int64_t n, float* lo, float* hi);
  // n floats as activations of this table's kind (q = clamp(round_half_even(x / scale) + zp, 0, 255)).
  void (*quantize)(const float* x, int64_t n, QuantParams p, void* out);
  void (*gemm)(const GemmArgs&, int64_t r0, int64_t r1, int64_t q0, int64_t q1);
};

namespace generic {
extern const Table kTable;
}
namespace avx2 {
extern const Table kTable;
}
namespace avxvnni {
extern const Table kTable;
}
namespace vnni512 {
extern const Table kTable;
}
namespace vnni256 {
extern const Table kTable;
}
namespace amx {
extern const Table kTable;
}

// The best table this CPU runs; LSTM_ORT_CPU_INT8_ISA=generic|avx2|avxvnni|vnni256|vnni512|amx forces one
// (an instruction set the CPU lacks is refused with the reason, for testing).
const Table& Int8Kernels();

// Scale and zero point of uint8 levels for values in [lo, hi] (the range widened to hold 0), as
// onnxruntime quantizes the activations of DynamicQuantizeLSTM.
QuantParams QuantParamsFor(float lo, float hi);

// K padded for the table: the row length of activations and packed weights.
inline int64_t PaddedDepth(const Table& t, int64_t K) { return (K + t.depth_pad - 1) / t.depth_pad * t.depth_pad; }

// Rows an activation buffer of n rows holds.
inline int64_t PaddedRows(const Table& t, int64_t n) { return (n + t.row_pad - 1) / t.row_pad * t.row_pad; }

// Bytes of one activation element.
inline int64_t ActivationBytes(const Table& t) { return t.group == 4 ? 1 : 2; }

}  // namespace lstm_ort::cpu::int8
