// How the tensor-core persistent kernel (mma_kernel.cuh) splits a range of layers into blocks.
// Plain C++ like plan.h; the same PersistentPlan, with `mma` set and the tile fields below used.
//
// A block's job is the same (layer, direction, U units, Bb batch rows); its product
// [Bb x K] . [K x 4U] is cut into 16 x 16 output tiles. Eight warps take one or two tiles each
// (two share their weight fragments), or, with fewer than eight tiles, a tile each and a
// 1 / ksplit share of every chunk's k steps.
#pragma once

#include <optional>

#include "cuda/device_limits.h"
#include "cuda/persistent/mma_operand.h"
#include "cuda/persistent/plan.h"

namespace lstm_ort {

// Smallest batch a tile row covers: batch slices are multiples of 16 rows.
constexpr int kMmaTileRows = 16;

std::optional<PersistentPlan> PlanMmaRange(int layers, int D, int H, int B, MmaOperand op, const DeviceLimits& dev);

}  // namespace lstm_ort
