// Developer overrides of the kernels' own choices, from one table and one strict parser (the only
// file of custom_ops/ that reads the environment; docs/architecture.md, "Overrides", lists them).
//
// Per node (the CUDA kernel's): the `debug` attribute, "key=value;key=value", which
// lstm_ort.InferenceSession fills from the session config entries lstm_ort.debug.<key>; each key
// also has an environment variable (LSTM_ORT_<KEY>) as a development alias, read when a kernel
// is created. The attribute wins over the alias. Per process (the CPU kernel's planning knobs):
// environment variables only, read once.
//
// Every value is checked: a bad one is an error naming the key and what it takes, never a silent
// default. `strict` turns every fallback of the CUDA path (a strategy, tensor-core plan or
// launch that could not be had) into an error naming it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "cuda/persistent/mma_operand.h"
#include "lstm_ort/contract.h"

namespace lstm_ort {

struct Overrides {
  bool strict = false;                // every fallback is an error
  std::optional<Strategy> strategy;   // over the node's strategy and its tuned entries
  bool mma_forced = false;            // the persistent ranges' product is `mma` (empty: the FMA kernel)
  std::optional<MmaOperand> mma;
  bool gemm_step = false;             // every layer of a float32 call on v1's cuBLAS step
  bool half_step_weights = true;      // false: v1's cuBLAS step keeps the fp32 weights in the reduced modes
  int cluster_size = 0;               // > 0: the cluster kernel plans with clusters of this many blocks only
  int cluster_slices = 0;             // > 0: ... with this many lanes per gate column only (2, 4 or 8)
  int tile_u = 0, tile_bb = 0;        // > 0: the persistent planner's block tile (units, batch rows)
  int resident_chunks = 1;            // cp.async groups of the persistent kernel's resident h, 1..4
  bool low_rank_stepwise = false;     // factored recurrences on the per-step path
  bool call_graphs = true;            // short calls replayed as CUDA graphs (launch_graphs.h)
  std::optional<bool> mma_step;       // the tensor-core step (mma_step/): forced on, off; empty: per shape
  int mma_step_tile = -1;             // >= 0: its planner's tile (index of kMmaStepTileTable)
  std::optional<bool> mma_step_pdl;   // its launches overlap (programmatic dependent launch); empty: per shape
  std::optional<bool> mma_step_resident;  // its weights resident, one cooperative launch; empty: where it fits
  int mma_step_layers = 0;            // > 0: at most this many layers per range of it
  bool refuse_launches = false;       // launches the device may refuse (cooperative grid, cluster) act refused
};

// The CPU kernel's planning knobs (docs/cpu.md), process-wide.
struct CpuOverrides {
  int64_t threads = 0;              // threads to plan for; 0: the cores
  int64_t split_min = 400000;       // step flops from which one direction's panels split over threads
  int64_t parallel_min = 400000;    // flops worth another thread
  bool verbose = false;             // report packing at kernel creation
  int64_t split = 0;                // 0 as planned, 1 one thread, 2 batch rows split, 3 unit panels split
  std::string cpu_kernel;           // the cpu_kernel of nodes that name none; empty: none
  std::string fp32_isa;             // fp32 hot loops: v2, v3 or v4 forced (empty: the best)
  int64_t int8_split_min = 1 << 19;       // int8 kernel: multiply-adds worth another thread
  int64_t int8_step_split_min = 0;        // int8 kernel: a step's multiply-adds from which its panels split
                                          // (0: the int8 unit's own, cpu/call_plan.cc)
  std::string int8_isa;                   // int8 kernel: the instruction set forced (empty: the best)
  std::string bf16_isa;                   // bf16 kernels: amx, avx512bf16 or none (empty: the best)
};

// `text` ("key=value;..."; blank entries skipped) applied over `base`. std::invalid_argument,
// naming the key, for an unknown key, a process-wide one or a bad value.
Overrides ParseDebugOptions(const std::string& text, Overrides base = {});

// The environment aliases of the per-node keys, read now.
Overrides OverridesFromEnvironment();

// A kernel's overrides: the environment aliases, then its `debug` attribute.
inline Overrides OverridesForNode(const std::string& debug) {
  return ParseDebugOptions(debug, OverridesFromEnvironment());
}

// The CPU knobs, read from the environment once per process; throws (each time it is asked) for a
// bad value.
const CpuOverrides& CpuOverridesFromEnvironment();

// LSTM_ORT_CPU_ISA (v2, v3 or v4; empty: auto), for the kernel table's one-time choice; never
// throws (a bad value is reported by CpuOverridesFromEnvironment when a kernel is created).
std::string ForcedFp32Isa() noexcept;

// The per-node keys, in table order, joined by `separator` (Python's identity.DEBUG_KEYS).
std::string DebugKeys(const char* separator);

}  // namespace lstm_ort
