// The CPU kernel's hot loops, compiled once per instruction set (kernels_v2.cc: x86-64-v2,
// kernels_v3.cc: x86-64-v3 = AVX2 + FMA, kernels_v4.cc: x86-64-v4 = AVX-512) and chosen once at
// run time by the CPU's features.
//
// Packed weights (built once per kernel from the contract's [K, 4H] blocks, see lstm_cpu.cc):
// hidden units are grouped in panels of kUnits; a panel's kPanel columns are gate-major (i x8, o x8,
// f x8, c x8), so one row of a panel's product is four vectors that the cell update consumes in
// registers. A panel is stored as two strips of kStrip columns, each a contiguous row-major
// [K][kStrip] matrix: a register tile's weights are one sequential stream (no stride that would
// leave half of the L1 sets unused) and a k-block of a strip is one contiguous range.
#pragma once

#include <cstdint>

#include "lstm_ort/cell.h"

namespace lstm_ort::cpu {

constexpr int kUnits = 8;                  // hidden units per panel
constexpr int kPanel = kGates * kUnits;    // columns per panel
constexpr int kStrip = 16;                 // columns per strip (two per panel)

// Where contract column 4j + g (hidden unit j, gate g) lies among the packed columns (np * kPanel).
inline int64_t PackedColumn(int64_t col) {
  const int64_t j = col / kGates, g = col % kGates;
  return (j / kUnits) * kPanel + g * kUnits + j % kUnits;
}

// Where column col (0..kPanel) of row k lies within a panel of K rows.
inline int64_t PanelIndex(int64_t K, int64_t k, int64_t col) {
  return (col / kStrip) * K * kStrip + k * kStrip + col % kStrip;
}

// out[r][q*kPanel ..] = bias[q*kPanel ..] + a[r][0..K) * panel q, for rows [r0, r1), panels [q0, q1).
struct ProjectArgs {
  const float* a;      // layer input rows
  int64_t lda;
  const float* w;      // panels, each K * kPanel floats
  int64_t K;
  const float* bias;   // n_panels * kPanel, or null
  float* out;
  int64_t ldo;
  int64_t n_panels;    // panels in w (all of them, not only the range a call computes)
};

// One recurrent step of a group of batch rows, for panels [p0, p1) of one direction.
struct StepArgs {
  const float* w;       // recurrent panels, each K * kPanel floats (K = H, or the rank when factored)
  int64_t H;            // real hidden size (rows of each panel unless factored)
  int64_t Hp;           // padded hidden size: row stride of h_in, h_out, c
  // Factored recurrence: the gates' product reads lhs [rows][lhs_ld] (h times the first factor,
  // K wide) and w holds the second factor's panels; null: it reads h_in, K = H.
  const float* lhs;
  int64_t lhs_ld, K;
  const float* h_in;    // [rows][Hp]
  bool h_zero;          // h_in is all zeros (first step, no initial_h): the recurrent product is skipped
  float* h_out;         // [rows][Hp]
  float* c;             // [rows][Hp], updated in place
  int64_t rows;
  // Row r of the group is batch entry b = b0 + r, of length lens[b] (T when lens is null); at step
  // s it is at time t = s (or len-1-s when reverse) and reads gx + (t*B + b)*gx_ld, writes
  // y + (t*B + b)*y_ld (y may be null). Rows with s >= len keep their state.
  const float* gx;
  int64_t gx_ld;
  float* y;
  int64_t y_ld;
  int64_t B, b0, T, s;
  const int32_t* lens;
  bool reverse;
  CellParams cell;
  bool default_acts;    // Sigmoid, Tanh, Tanh: vectorised cell (clip, peepholes, input_forget included)
  bool vector_acts;     // other activations that all have 8-lane forms (not Softplus): vectorised too
  const float* peep;    // [3][Hp] (i, o, f), or null
  // A call of one step (LayerPlan::step_projects): the step multiplies its rows' input itself, in
  // the same tiles as h (one product of depth Kx + K), so its gates start from x_bias (null: zero)
  // and gx is neither written nor read. Row r's input is x + (b0 + r) * x_ld; wx holds the input's
  // panels (each Kx * kPanel floats). Null wx: the gates start from gx, the layer's projection.
  const float* x = nullptr;
  int64_t x_ld = 0;
  const float* wx = nullptr;
  int64_t Kx = 0;
  const float* x_bias = nullptr;
  // The int8 format with one scale per step over a group's rows split among threads
  // (Recurrence::row_chunks): this part's index among the group's row_chunks parts (the group is then
  // its direction's whole batch, and its parts' slots consecutive). 1: the group runs whole.
  int64_t row_chunk = 0, row_chunks = 1;
};

// Batch entry b's length, and a row of length `len`'s time at step s (s < len): every format and
// cell addresses a step's rows by these.
inline int64_t LengthOf(const StepArgs& a, int64_t b) { return a.lens ? a.lens[b] : a.T; }
inline int64_t TimeAt(const StepArgs& a, int64_t len) { return a.reverse ? len - 1 - a.s : a.s; }

// The activations the cell runs on 8 lanes when they are not the default three (Softplus needs a
// log the kernels do not have: a cell with it runs per lane).
inline bool HasVectorForm(ActKind kind) { return kind != ActKind::kSoftplus; }
inline bool VectorCell(const CellParams& c) {
  return HasVectorForm(c.act[0].kind) && HasVectorForm(c.act[1].kind) && HasVectorForm(c.act[2].kind);
}

// The step's cell: its parameters, and which of the cell update's forms runs them.
inline void SetCell(StepArgs& a, const CellParams& cell) {
  a.cell = cell;
  a.default_acts = cell.act[0].kind == ActKind::kSigmoid && cell.act[1].kind == ActKind::kTanh &&
                   cell.act[2].kind == ActKind::kTanh;
  a.vector_acts = VectorCell(cell);
}

struct KernelTable {
  const char* isa;
  void (*project)(const ProjectArgs&, int64_t r0, int64_t r1, int64_t q0, int64_t q1);
  void (*step)(const StepArgs&, int64_t p0, int64_t p1);
};

namespace v2 {
extern const KernelTable kTable;
}
namespace v3 {
extern const KernelTable kTable;
}
namespace v4 {
extern const KernelTable kTable;
}

// The best table this CPU runs (LSTM_ORT_CPU_ISA=v2|v3|v4 forces one, for testing; a forced one the
// CPU lacks throws).
const KernelTable& Kernels();

// The cell alone, from a step's gates, for panels [p0, p1) of the step's rows: what the formats
// whose product is made apart (int8, bf16) run after it. The gates are the projection's (gx, as the
// step's rows give them) plus, where `products` gives row r of the group a row (np * kPanel packed
// columns, null: nothing to add), the step's product: the product never goes through gx, whose rows
// (every step's, beyond the caches) were read and written once more per step that way. A null gx:
// the products are the whole gates (a step that multiplied its input too), null for a row whose
// sequence ended. 16 lanes where the CPU has AVX-512 and the activations are the default
// (cell_avx512.cc), else the table's step from its gates (h_zero) once the products are added into
// gx (or, without gx, a row at a time from its product).
void CellFromGates(const StepArgs& a, int64_t p0, int64_t p1, const float* const* products = nullptr);
namespace avx512 {
void CellFromGates(const StepArgs& a, int64_t p0, int64_t p1, const float* const* products);
}

}  // namespace lstm_ort::cpu
