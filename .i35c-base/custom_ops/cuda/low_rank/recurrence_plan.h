// How the persistent factored recurrence (recurrence_kernel.cuh) splits one layer over blocks.
// Plain C++, so the unit tests plan against fake devices.
//
// A factored step is two products, p = h A ([B][H] x [H][r]) and then gates = p B ([B][r] x
// [r][4H]), with a grid barrier after each. Every block has a tile of each: a phase-1 tile of CA
// rank columns x BA batch rows (A's columns resident in shared memory) and a phase-2 tile of U
// units x Bb batch rows (B's 4U gate columns resident), and keeps its phase-2 cells' c and h in
// registers for the whole sequence.
#pragma once

#include <cstddef>
#include <optional>

#include "cuda/device_limits.h"
#include "cuda/host_device.h"

namespace lstm_ort {

constexpr int kLrpThreads = 256;
constexpr int kLrpTileRows = 4;  // batch rows of a thread's register tile (one float4 of staged input)
constexpr int kLrpCellsPerThread = 4;

struct LowRankPlan {
  int rank = 0;                   // the widest recurrent rank of the layer's directions
  int CA = 0, BA = 0;             // phase 1 tile: rank columns x batch rows; powers of two, >= 4
  int U = 0, Bb = 0;              // phase 2 tile: units x batch rows; powers of two, Bb >= 4
  int n_ca = 0, n_ba = 0;         // phase 1 tiles along the rank and the batch
  int n_u = 0, n_b = 0;           // phase 2 tiles along H and the batch
  int per_dir = 0, blocks = 0;    // blocks per direction, and in the grid (D * per_dir)
  long long a_floats = 0;         // shared memory: A's tile [H][CA]
  long long b_floats = 0;         //   B's tile [rank][4U]
  long long stage_floats = 0;     //   the staged input of either phase: [H][BA] or [rank][Bb]
  long long red_floats = 0;       //   the slices' partial sums
  size_t smem = 0;                // bytes, the four above
  double cost = 0;                // estimated cycles per step

  // Register tiles (kLrpTileRows rows x 4 columns) per phase, and the K slices each is split into.
  LSTM_ORT_HOST_DEVICE int Pairs1() const { return (CA / 4) * (BA / kLrpTileRows); }
  LSTM_ORT_HOST_DEVICE int Pairs2() const { return U * (Bb / kLrpTileRows); }
  LSTM_ORT_HOST_DEVICE int Slices1() const { return kLrpThreads / Pairs1(); }
  LSTM_ORT_HOST_DEVICE int Slices2() const { return kLrpThreads / Pairs2(); }
  // Partial sums per tile that meet in shared memory: one per warp when a warp holds several
  // slices of a tile (they meet by shuffles first), else one per slice.
  LSTM_ORT_HOST_DEVICE static int Groups(int pairs) { return pairs < 32 ? kLrpThreads / 32 : kLrpThreads / pairs; }
};

// Rows of the transposed h and p buffers: B rounded up to whole float4s.
LSTM_ORT_HOST_DEVICE inline long long PaddedBatch(long long B) { return (B + 3) / 4 * 4; }

// The cheapest plan whose blocks are all co-resident on `dev`, or none (the per-step path runs).
std::optional<LowRankPlan> PlanLowRankRecurrence(int D, int H, int B, int rank, const DeviceLimits& dev);

}  // namespace lstm_ort
