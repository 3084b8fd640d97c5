// The grid of CPU calls whose planning decisions data/cpu_plan_snapshot.tsv holds (issue 47: the CPU
// call plan must decide as the code before it did; the fp32, factored and int8 rows were written by
// a replica of that code, commit 6c41dc9's RunFused, CpuLstmInt8::Compute and CpuLstm::Compute; the
// bf16, int8 per-row and int8 per-slice rows, formats that code did not have, by PlanCpuCall when
// they were added; the int8 rows' recurrence since by its row split with one scale per step, which
// follows the pool as counted: `auto-nostock` counts a pool of one, `auto-nostock-pool16` of all;
// and `auto` on a pool of one no longer offers stock_split, whose pieces would run in turn),
// and the text the decisions are compared as. Rows are groups of calls (format, knob, threads,
// kernel, L, D, T, I) over a grid of H x B, each with an FNV-1a hash of its calls' decision lines.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "snapshot_table.h"

namespace cpu_snapshot {

enum class Format { kFp32, kFactored, kInt8, kInt8Row, kBf16, kInt8Slices };
inline const char* FormatText(Format f) {
  const char* names[] = {"fp32", "factored", "int8", "int8row", "bf16", "int8slices"};
  return names[static_cast<int>(f)];
}
// Formats the code before the plan had: their rows come from it.
inline bool Legacy(Format f) { return f == Format::kFp32 || f == Format::kFactored || f == Format::kInt8; }

// How the call's kernel is asked for: the node's cpu_kernel, whether stock's LSTM could run the
// call, and the pool's counted size.
struct Kernel {
  const char* name;
  const char* cpu_kernel;  // "auto", "fused", "stock_split"
  bool stock_can = true;
  int pool = 1;
};

struct Case {
  Format format;
  int split = 0;  // LSTM_ORT_CPU_SPLIT
  int threads = 1;
  Kernel kernel;
  int64_t L = 1, D = 1, T = 1, I = 1, H = 1, B = 1;
};

// One product of a layer's projection, its recurrence and the kernel, as text.
struct Product {
  int64_t workers = 1, row_blocks = 1, panel_blocks = 1;
};
struct Layer {
  std::vector<Product> products;
  int64_t batch_chunks = 1, unit_chunks = 1, rows_per_group = 0, row_chunks = 1;
  bool in_turn = false, parallel = false;
  bool step_projects = false;  // the step multiplies the input (no products)
};
struct Decisions {
  std::string kernel;  // "fused", "stock_split", "auto[fused,stock,stock_split]" ...
  int pieces = 1;
  std::vector<Layer> layers;
};

inline std::string Line(const Case& c, const Decisions& d) {
  char head[96];
  std::snprintf(head, sizeof head, "H%lld B%lld | %s p%d |", static_cast<long long>(c.H), static_cast<long long>(c.B),
                d.kernel.c_str(), d.pieces);
  std::string out = head;
  for (const Layer& l : d.layers) {
    out += " [";
    for (const Product& p : l.products)
      out += std::to_string(p.workers) + (p.workers > 1 ? "/" + std::to_string(p.row_blocks) + "x" + std::to_string(p.panel_blocks) : "") + ",";
    if (l.step_projects) out += "x in step,";
    out += " rec " + std::to_string(l.batch_chunks) + "/" + std::to_string(l.unit_chunks) +
           (l.rows_per_group ? " n" + std::to_string(l.rows_per_group) : "") +
           (l.row_chunks > 1 ? " rows" + std::to_string(l.row_chunks) : "") + (l.in_turn ? " turn" : "") +
           (l.parallel ? " par" : "") + "]";
  }
  return out;
}

inline std::string GroupKey(const Case& c) {
  return std::string(FormatText(c.format)) + " split" + std::to_string(c.split) + " P" + std::to_string(c.threads) + " " +
         c.kernel.name + " L" + std::to_string(c.L) + " D" + std::to_string(c.D) + " T" + std::to_string(c.T) + " I" +
         std::to_string(c.I);
}

inline std::vector<Case> Grid() {
  const std::vector<Kernel> kernels = {{"auto", "auto", true, 1}, {"auto-pool2", "auto", true, 2},
                                       {"auto-nostock", "auto", false, 1}, {"fused", "fused", true, 1},
                                       {"stock_split", "stock_split", true, 1},
                                       {"auto-nostock-pool16", "auto", false, 16}};
  std::vector<Case> out;
  for (Format f : {Format::kFp32, Format::kFactored, Format::kInt8, Format::kInt8Row, Format::kBf16, Format::kInt8Slices})
    for (int split : {0, 1, 2, 3}) {
      if (split && f != Format::kFp32) continue;
      for (int threads : {1, 2, 4, 16})
        for (const Kernel& k : kernels) {
          // Kernel choices only where stock can run (fp32 whole) and the knobs are the default;
          // the int8 formats also with a counted pool of every thread (their splits follow it).
          const bool int8 = f == Format::kInt8 || f == Format::kInt8Row || f == Format::kInt8Slices;
          if (std::string(k.name) == "auto-nostock-pool16" ? !int8
                                                           : std::string(k.name) != "auto-nostock" && (f != Format::kFp32 || split))
            continue;
          for (int64_t L : {1, 2})
            for (int64_t D : {1, 2})
              for (int64_t T : {1, 16, 100})
                for (int64_t I : {13, 256})
                  for (int64_t H : {16, 40, 128, 200, 256, 512, 725, 1024})
                    for (int64_t B : {1, 2, 3, 5, 8, 16, 64}) out.push_back({f, split, threads, k, L, D, T, I, H, B});
        }
    }
  return out;
}

// Groups in the grid's order, each with its lines' hash.
struct Table : snapshot::GroupTable {
  void Add(const Case& c, const Decisions& d) { GroupTable::Add(GroupKey(c), Line(c, d)); }
};

}  // namespace cpu_snapshot
