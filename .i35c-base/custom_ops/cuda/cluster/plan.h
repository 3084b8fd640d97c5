// How the cluster kernel (kernel.cuh) lays one layer over a thread-block cluster per direction.
// Plain C++, so the unit tests plan without a GPU.
//
// For small H the persistent kernel's step is bound by its grid barrier and by h's round trip
// through L2 (H100, H128 B1: 3.1 us per step against cuDNN's 2.0). A cluster of C blocks (one per
// SM) holds the layer's recurrent weights in registers, a thread's KPT rows of one gate column;
// each step's h goes straight into every block's shared memory (distributed shared memory), where
// an mbarrier counts its bytes in. No global memory and no grid or cluster barrier is on the
// step's critical path.
#pragma once

#include <cstddef>
#include <optional>

#include "cuda/host_device.h"

namespace lstm_ort {

constexpr int kClusterMaxBatch = 8;      // rows held per thread (NB <= 8)
constexpr int kClusterMaxBlocks = 16;    // 16 is the H100's non-portable cluster limit
// Threads per block every kernel variant is compiled for: 128 registers each. At 1024 threads (64
// registers) ptxas spilled in most variants, and the plans that need them (a cluster of 1 or 2
// at H >= 64) measured slower than thinner blocks anyway.
constexpr int kClusterMaxThreads = 512;

struct ClusterPlan {
  int C = 0;       // blocks per direction (the cluster size): every block has units
  int U = 0;       // units per block: 4U gate columns
  int S = 0;       // K slices per column (lanes of one column: 2, 4 or 8, the fewest that fit)
  int KPT = 0;     // weight rows per thread (8, 16 or 32): S * KPT >= H
  int NB = 0;      // batch rows per thread (1, 2, 4 or 8): B rounded up to a power of two
  int threads = 0; // 4 U S
  size_t smem = 0; // two h buffers [NB][S * KPT] floats, then their two mbarriers
  double cost = 0; // estimated microseconds per step

  LSTM_ORT_HOST_DEVICE int Rows() const { return S * KPT; }  // h's row length in shared memory, zero-padded
};

// The cheapest plan for one layer of hidden size H at batch B with clusters of at most
// `max_cluster` blocks, or none: H > 256 (a column's K rows exceed 8 lanes x 32 registers), B >
// kClusterMaxBatch, or no cluster size fits. `only_c` > 0 plans with that cluster size only,
// `only_s` > 0 with that many slices per column only (developer knobs LSTM_ORT_CLUSTER_SIZE and
// LSTM_ORT_CLUSTER_SLICES).
std::optional<ClusterPlan> PlanCluster(int H, int B, int max_cluster, int only_c = 0, int only_s = 0);

}  // namespace lstm_ort
