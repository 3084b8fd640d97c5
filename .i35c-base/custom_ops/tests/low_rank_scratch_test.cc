// The factored path's scratch carve-up (cuda/low_rank/scratch.cc): aligned, disjoint regions with
// room for what each holds; the fp32 copies of the inputs only for float16 calls.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "check.h"
#include "cuda/low_rank/recurrence_plan.h"
#include "cuda/low_rank/scratch.h"
#include "cuda/scratch_layout.h"

using namespace lstm_ort;

namespace {

struct Region {
  const char* name;
  const void* start;
  size_t need;
};

void CheckLayout(int64_t L, int64_t D, int64_t T, int64_t B, int64_t I, int64_t H, const Ranks& ranks,
                 ElementType type) {
  Dims d;
  d.L = L;
  d.D = D;
  d.T = T;
  d.B = B;
  d.I = I;
  d.H = H;
  size_t total = 0;
  CarveLowRankScratch(d, ranks, type, nullptr, &total);
  CHECK_EQ(total, LowRankScratchBytes(d, ranks, type));
  const std::unique_ptr<char[]> memory(new char[total + 1]);
  char* base = memory.get();
  const LowRankScratch s = CarveLowRankScratch(d, ranks, type, base, nullptr);
  const bool half = type == ElementType::kFloat16;
  CHECK_EQ(s.x != nullptr, half);
  const WeightLayout layout(d, ranks);
  const size_t f = sizeof(float), rows = T * B, state = f * D * B * H, Bp = PaddedBatch(B);
  std::vector<Region> regions;
  if (half)
    regions = {{"x", s.x, f * rows * I}, {"w", s.w, f * layout.WeightCount()},
               {"factors", s.factors, f * layout.FactorCount()}};
  const std::vector<Region> rest = {
      {"gx", s.gx, f * D * rows * 4 * H},
      {"px", s.px, f * rows * WidestRank(ranks, false)},
      {"h0", s.h[0], state},
      {"h1", s.h[1], f * D * Bp * H},
      {"c", s.c, state},
      {"p", s.p, f * D * Bp * WidestRank(ranks, true)},
      {"lens", s.lens, sizeof(int) * B},
      {"barrier", s.barrier, sizeof(unsigned)},
      {"layer0", s.layer[0], L > 1 ? f * rows * D * H : 0},
      {"layer1", s.layer[1], L > 2 ? f * rows * D * H : 0},
  };
  regions.insert(regions.end(), rest.begin(), rest.end());
  for (size_t i = 0; i < regions.size(); ++i) {
    const size_t off = static_cast<size_t>(static_cast<const char*>(regions[i].start) - base);
    const std::string what = std::string(regions[i].name) + " placed";
    if (off % kScratchAlign != 0) unit::RecordFailure(__FILE__, __LINE__, what + " unaligned");
    const size_t next = i + 1 < regions.size()
                            ? static_cast<size_t>(static_cast<const char*>(regions[i + 1].start) - base)
                            : total;
    if (off + regions[i].need > next) unit::RecordFailure(__FILE__, __LINE__, what + " overlaps what follows");
  }
}

}  // namespace

TEST(LowRankScratchRegionsAreAlignedAndDisjoint) {
  for (ElementType type : {ElementType::kFloat32, ElementType::kFloat16})
    for (int64_t L : {1, 2, 3})
      for (int64_t D : {1, 2})
        for (int64_t T : {0, 1, 100})
          for (int64_t B : {1, 17}) {
            Ranks ranks;
            ranks.input.assign(L * D, 3);
            ranks.recurrent.assign(L * D, 0);
            ranks.recurrent[0] = 5;
            CheckLayout(L, D, T, B, 7, 24, ranks, type);
            ranks.input.clear();  // recurrent factors only
            CheckLayout(L, D, T, B, 7, 24, ranks, type);
          }
}

TEST(WidestRankOfEachPart) {
  Ranks ranks;
  ranks.input = {3, 0, 9, 1};
  CHECK_EQ(WidestRank(ranks, false), int64_t{9});
  CHECK_EQ(WidestRank(ranks, true), int64_t{0});
}
