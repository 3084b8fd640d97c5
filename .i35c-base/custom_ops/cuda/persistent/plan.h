// How the persistent kernel splits a range of layers into blocks, and which ranges a stack
// is cut into. Plain C++: the CUDA side supplies the device limits (device_limits.h).
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <vector>

#include "cuda/cluster/plan.h"
#include "cuda/device_limits.h"
#include "cuda/host_device.h"
#include "cuda/persistent/mma_operand.h"

namespace lstm_ort {

constexpr int kMaxRangeLayers = 8;
constexpr int kPersistentThreads = 256;

// One block's job: U units (4U gate columns) x Bb batch rows of one layer and direction.
struct PersistentPlan {
  int U = 0, Bb = 0;   // powers of two; Bb >= 4; Bb * U <= 1024 (at most 4 cells per thread)
  int R = 4;           // rows of a thread's register tile: 4 when Bb == 4, else 8
  int KC = 0;          // h rows per staged chunk (one cp.async group)
  bool resident = false;  // all K rows staged at once (<= 4 chunks); else a ring of two chunks
  int slots = 2;          // chunks that fit in the staging buffer
  int P = 0, S = 0;    // register tiles per block (R rows x 1 unit each), K slices per tile
  int n_u = 0, n_b = 0;
  int Bp = 0;          // n_b * Bb: the batch of the h buffer, padded (<= B rounded up to 64)
  int blocks = 0;
  long long w_floats = 0;  // shared-memory floats of the weight slice
  size_t smem = 0;         // dynamic shared memory per block, bytes
  double cost = 0;         // estimated cycles per interval
  // The tensor-core kernel's (mma_plan.h); unused by the FMA kernel.
  bool mma = false;
  MmaOperand operand = MmaOperand::kTf32x3;
  int ksplit = 1, tpw = 1;  // warps sharing a tile's k steps; tiles per warp (1 or 2)
  int kw = 0;               // weight rows in shared memory: K rounded up to the k step, zero-padded
  int ws = 0, bbp = 0;      // row strides of the weight slice and of staged h, in elements

  // Thread groups whose partial sums meet in shared memory: warps when the K slices of a tile
  // share a warp (P < 32; lanes meet by shuffles first), else the K slices.
  LSTM_ORT_HOST_DEVICE int groups() const { return P < 32 ? 8 : S; }
  LSTM_ORT_HOST_DEVICE int StagedRows() const { return slots * KC; }
};

// Rows of h (and of weights) a block multiplies per step: H for a range's first layer (its
// input projection is precomputed), in_rows + H above it.
int RangeRows(int layers, int H, int D);

std::optional<PersistentPlan> PlanRange(int layers, int D, int H, int B, const DeviceLimits& dev);

struct LayerRange {
  int first = 0, count = 1;
  std::optional<PersistentPlan> plan;    // empty: run with the per-step kernels (v1)
  std::optional<ClusterPlan> cluster;    // set: one layer on the cluster kernel (plan is empty)
};

// The plan of a range of `layers` layers, or none where it does not fit the device.
using RangePlanner = std::function<std::optional<PersistentPlan>(int layers)>;

// Cuts L layers into ranges. wavefront: ranges of several layers where D == 1 and the weights
// fit on chip; otherwise one layer per range.
std::vector<LayerRange> PlanStack(int L, int D, int T, bool wavefront, const RangePlanner& plan_range);

// With the FMA kernel's plans (PlanRange).
std::vector<LayerRange> PlanStack(int L, int D, int T, int H, int B, bool wavefront, const DeviceLimits& dev);

}  // namespace lstm_ort
