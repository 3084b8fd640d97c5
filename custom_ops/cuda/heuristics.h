// The CUDA path's shape heuristics as named functions of sizes. Plain C++, so they can be
// unit-tested without a GPU; thresholds measured on an H100 unless noted.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "cuda/element_type.h"
#include "lstm_ort/contract.h"

namespace lstm_ort {

// A tuned winner for this GPU model and (T, B) when the node's strategy is auto, else the
// node's strategy.
Strategy StrategyForCall(Strategy configured, const std::vector<TunedStrategy>& tuned, const std::string& gpu,
                         const Dims& d);

// The per-step kernels v1 can use.
enum class StepKernel { kTiled, kSplitK };

// Split-K keeps a unit's weights in registers: H = 1024 is as far as registers go.
constexpr int64_t kSplitKMaxHidden = 1024;
// v1's own choice (auto and the persistent strategies): split-K up to this batch, tiled above.
constexpr int64_t kSplitKMaxBatch = 16;

// Which per-step kernel v1 runs (also for layers the persistent strategies leave to v1).
StepKernel ChooseStepKernel(Strategy strategy, const Dims& d);

// fp32 input projections run as 3xTF32 (gemm/split_tf32.cuh) from this many rows (T*B) on, in
// chunks of at most kSplitChunkRows rows so the split copies stay small. B=1 (100 rows) lost 3%
// with the split, B=64 (6400 rows) gained 10-15%.
constexpr int64_t kMinRowsForSplit = 1024;
constexpr int64_t kSplitChunkRows = 16384;

bool ProjectsWithSplitTf32(ElementType type, int64_t rows);

// Dynamic shared memory the tiled step kernel may use; its limit is raised to this once per device.
constexpr size_t kTiledSmemBudget = 200 * 1024;

// Row groups of the tiled kernel's register tile (its RG template argument: 8 or 16).
int TiledRowGroups(int B);

// The tiled kernel's K chunk: the largest multiple of its K split that fits kTiledSmemBudget,
// so one chunk whenever H allows.
int TiledChunkRows(int H, int row_groups, ElementType type);

// K values per lane of the split-K kernel (its KPL template argument): H <= 32 * KPL.
int SplitKValuesPerLane(int H);

// Blocks along the units of the split-K kernel (one warp per unit).
int SplitKUnitBlocks(int H);

// Batch rows per split-K block: rows spread over more blocks when one block per unit group
// would leave SMs idle.
int SplitKRowsPerBlock(int B, int H, int D, int sm_count);

}  // namespace lstm_ort
