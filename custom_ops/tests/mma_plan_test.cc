// The tensor-core planner (cuda/persistent/mma_plan.cc) against fake devices: every plan must be
// launchable and match what mma_kernel.cuh indexes.
#include <string>

#include "check.h"
#include "cuda/persistent/mma_plan.h"
#include "cuda/stack_plan.h"
#include "enum_names.h"
#include "fake_devices.h"

using namespace lstm_ort;

namespace {

void CheckMmaPlan(const PersistentPlan& p, int layers, int D, int H, int B, MmaOperand op, const DeviceLimits& dev,
                  const std::string& where) {
  const int K = RangeRows(layers, H, D), kstep = MmaKStep(op), bytes = MmaOperandBytes(op);
  const auto fail = [&](const char* what) { unit::RecordFailure(__FILE__, __LINE__, where + ": " + what); };
  if (!p.mma || p.operand != op) fail("a tensor-core plan for this operand");
  if (!unit::IsPowerOfTwo(p.U) || p.U < 4 || p.U > 64) fail("U is a power of two in 4..64 (4U columns: whole 16-wide tiles)");
  if (!unit::IsPowerOfTwo(p.Bb) || p.Bb < 16 || p.Bb > 128) fail("Bb is a power of two in 16..128 (whole 16-row tiles)");
  if (p.Bb * p.U > 4 * kPersistentThreads) fail("a thread finishes at most 4 cells");
  const int tiles = (p.Bb / 16) * (p.U / 4);
  if (p.tpw * 8 != tiles * p.ksplit) fail("eight warps cover every tile and k share exactly once");
  if (p.tpw == 2 && p.Bb < 32) fail("a warp's two tiles are two row tiles of one column tile");
  if (p.n_u * p.U < H || (p.n_u - 1) * p.U >= H) fail("n_u blocks of U units cover H, none idle");
  if (p.n_b * p.Bb < B || (p.n_b - 1) * p.Bb >= B) fail("n_b slices of Bb rows cover B, none idle");
  if (p.Bp != p.n_b * p.Bb || p.Bp > (B + 127) / 128 * 128) fail("padded batch fits the h buffer (B rounded to 128)");
  if (p.blocks != layers * D * p.n_u * p.n_b) fail("one block per job");
  if (p.kw < K || p.kw % kstep != 0 || p.kw - K >= kstep) fail("weight rows: K rounded up to the k step");
  if (p.KC % kstep != 0 || p.KC < kstep) fail("chunks of whole k steps");
  if ((p.ws * bytes) % 16 != 0 || (p.bbp * bytes) % 16 != 0) fail("row strides keep 16-byte rows");
  if (p.resident && p.StagedRows() < K) fail("resident h holds every row");
  if (!p.resident && (p.slots != 2 || p.KC > 256)) fail("streamed h: a ring of two chunks of <= 256 rows");
  const size_t smem = static_cast<size_t>(bytes) * (static_cast<size_t>(p.kw) * p.ws + static_cast<size_t>(p.StagedRows()) * p.bbp) +
                      sizeof(float) * p.ksplit * p.Bb * (4 * p.U + 4);
  if (p.smem != smem) fail("smem = weights + staged h + partial sums");
  if (p.smem > dev.smem_per_block) fail("smem within the opt-in maximum");
  if (p.blocks > dev.sm_count * dev.blocks_per_sm(p.smem, 8)) fail("every block co-resident");
}

}  // namespace

TEST(MmaPlansAreLaunchable) {
  int planned = 0;
  for (const auto& device : unit::TestDevices())
    for (MmaOperand op : {MmaOperand::kTf32x3, MmaOperand::kTf32, MmaOperand::kFp16, MmaOperand::kBf16})
      for (int layers : {1, 2, 4})
        for (int D : {1, 2})
          for (int H : {1, 8, 31, 64, 100, 256, 512, 1024, 2048})
            for (int B : {1, 16, 33, 64, 256, 512}) {
              const auto plan = PlanMmaRange(layers, D, H, B, op, device.dev);
              if (!plan) continue;
              ++planned;
              CheckMmaPlan(*plan, layers, D, H, B, op, device.dev,
                           std::string(device.name) + " " + EnumName(op) + " layers=" + std::to_string(layers) +
                               " D=" + std::to_string(D) + " H=" + std::to_string(H) + " B=" + std::to_string(B));
            }
  CHECK(planned > 300);
}

TEST(MmaPlansCoverTheLargeBatchReferenceShapes) {
  // L4 H512 B256 and one layer of H1024 B64: the shapes tensor cores are for must plan on an H100.
  CHECK(PlanMmaRange(1, 1, 512, 256, MmaOperand::kTf32x3, unit::H100()).has_value());
  CHECK(PlanMmaRange(1, 1, 1024, 64, MmaOperand::kFp16, unit::H100()).has_value());
  CHECK(PlanMmaRange(2, 1, 512, 64, MmaOperand::kBf16, unit::H100()).has_value());
}

TEST(MmaRangesFallBackToTheFmaKernelWhereTilesDoNotFit) {
  // H = 2 has no 4-unit tile: the stack still plans, on the FMA kernel.
  Dims d;
  d.T = 10;
  d.B = 32;
  d.I = 3;
  d.H = 2;
  d.L = 2;
  const DeviceLimits dev = unit::H100();
  const auto ranges = PlanRanges(Strategy::kAuto, d, [&]() -> const DeviceLimits& { return dev; }, MmaOperand::kFp16);
  CHECK(!ranges.empty());
  for (const auto& r : ranges) CHECK(r.plan.has_value() && !r.plan->mma);
  const auto wide = PlanRanges(Strategy::kPersistent, [] {
    Dims w;
    w.T = 10;
    w.B = 64;
    w.I = 64;
    w.H = 256;
    return w;
  }(), [&]() -> const DeviceLimits& { return dev; }, MmaOperand::kTf32);
  CHECK(wide.size() == 1 && wide[0].plan && wide[0].plan->mma);
}
