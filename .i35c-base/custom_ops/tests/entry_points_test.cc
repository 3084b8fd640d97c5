// The C entry points Python calls (entry_points.cc), called as ctypes would.
#include <cstdint>
#include <string>

#include "check.h"
#include "lstm_ort/contract.h"

extern "C" {
int LstmOrtStrategyNames(char* out, int size);
int LstmOrtPrecisionNames(char* out, int size);
int64_t LstmOrtWeightOffset(int64_t L, int64_t D, int64_t I, int64_t H, int64_t l, int64_t d);
int LstmOrtNormalizeTuned(const char* text, char* out, int size);
int64_t LstmOrtFactoredOffset(int64_t L, int64_t D, int64_t I, int64_t H, const int64_t* rank_input,
                              const int64_t* rank_recurrent, int64_t l, int64_t d, int64_t what);
}

TEST(StrategyNamesEntryPoint) {
  char buf[64];
  CHECK_EQ(LstmOrtStrategyNames(buf, sizeof buf), 0);
  CHECK_EQ(std::string(buf), std::string("auto,tiled,splitk,persistent,wavefront,cluster"));
  CHECK(LstmOrtStrategyNames(buf, 8) != 0);  // cut short is an error, not a shorter list
}

TEST(PrecisionNamesEntryPoint) {
  char buf[64];
  CHECK_EQ(LstmOrtPrecisionNames(buf, sizeof buf), 0);
  CHECK_EQ(std::string(buf), std::string("fp32,tf32,fp16,bf16,auto"));
  CHECK(LstmOrtPrecisionNames(buf, 8) != 0);  // cut short is an error, not a shorter list
}

TEST(WeightOffsetEntryPoint) {
  // L=2, D=2, I=3, H=4: layer 0 blocks of (3 + 4) x 16, layer 1 blocks of (8 + 4) x 16.
  CHECK_EQ(LstmOrtWeightOffset(2, 2, 3, 4, 0, 0), int64_t{0});
  CHECK_EQ(LstmOrtWeightOffset(2, 2, 3, 4, 0, 1), int64_t{112});
  CHECK_EQ(LstmOrtWeightOffset(2, 2, 3, 4, 1, 0), int64_t{224});
  CHECK_EQ(LstmOrtWeightOffset(2, 2, 3, 4, 1, 1), int64_t{416});
  CHECK_EQ(LstmOrtWeightOffset(2, 2, 3, 4, 2, 0), int64_t{608});  // the total
  lstm_ort::Dims d;
  d.L = 3;
  d.D = 1;
  d.I = 5;
  d.H = 6;
  CHECK_EQ(LstmOrtWeightOffset(3, 1, 5, 6, 3, 0), d.WeightCount());
  for (const auto& bad : {std::vector<int64_t>{0, 1, 3, 4, 0, 0}, {1, 3, 3, 4, 0, 0}, {1, 1, 0, 4, 0, 0},
                          {1, 1, 3, 0, 0, 0}, {1, 1, 3, 4, 2, 0}, {1, 1, 3, 4, 0, 1}, {1, 1, 3, 4, 1, 1},
                          {1, 1, 3, 4, -1, 0}, {1, 1, 1, int64_t{1} << 40, 1, 0}})
    CHECK_EQ(LstmOrtWeightOffset(bad[0], bad[1], bad[2], bad[3], bad[4], bad[5]), int64_t{-1});
}

TEST(FactoredOffsetEntryPoint) {
  // L=1, D=2, I=3, H=4 (4H = 16): direction 0's input rows factored at rank 2, direction 1's
  // recurrent rows at rank 1. W: block 0 holds R's 4 rows, block 1 W's 3 rows.
  const int64_t rx[] = {2, 0}, rh[] = {0, 1};
  CHECK_EQ(LstmOrtFactoredOffset(1, 2, 3, 4, rx, rh, 0, 0, 0), int64_t{0});
  CHECK_EQ(LstmOrtFactoredOffset(1, 2, 3, 4, rx, rh, 0, 1, 0), int64_t{64});
  CHECK_EQ(LstmOrtFactoredOffset(1, 2, 3, 4, rx, rh, 1, 0, 0), int64_t{112});
  // factors: (0,0) input A [3,2] + B [2,16] = 38; (0,1) recurrent A [4,1] + B [1,16] = 20.
  CHECK_EQ(LstmOrtFactoredOffset(1, 2, 3, 4, rx, rh, 0, 0, 1), int64_t{0});
  CHECK_EQ(LstmOrtFactoredOffset(1, 2, 3, 4, rx, rh, 0, 0, 2), int64_t{38});
  CHECK_EQ(LstmOrtFactoredOffset(1, 2, 3, 4, rx, rh, 0, 1, 1), int64_t{38});
  CHECK_EQ(LstmOrtFactoredOffset(1, 2, 3, 4, rx, rh, 0, 1, 2), int64_t{38});
  CHECK_EQ(LstmOrtFactoredOffset(1, 2, 3, 4, rx, rh, 1, 0, 1), int64_t{58});
  // No ranks: the whole layout.
  CHECK_EQ(LstmOrtFactoredOffset(2, 2, 3, 4, nullptr, nullptr, 2, 0, 0), LstmOrtWeightOffset(2, 2, 3, 4, 2, 0));
  // InputSizeFromCounts finds I back from both counts.
  lstm_ort::Dims d;
  d.L = 1;
  d.D = 2;
  d.H = 4;
  lstm_ort::Ranks ranks;
  ranks.input = {2, 0};
  ranks.recurrent = {0, 1};
  CHECK_EQ(lstm_ort::InputSizeFromCounts(d, ranks, 112, 58), int64_t{3});
  CHECK_EQ(lstm_ort::InputSizeFromCounts(d, ranks, 112, 59), int64_t{-1});
  // Refused: a rank beyond its matrix's side, a negative rank, a bad `what`.
  const int64_t big[] = {4, 0}, neg[] = {-1, 0};
  CHECK_EQ(LstmOrtFactoredOffset(1, 2, 3, 4, big, nullptr, 0, 0, 0), int64_t{-1});
  CHECK_EQ(LstmOrtFactoredOffset(1, 2, 3, 4, nullptr, neg, 0, 0, 0), int64_t{-1});
  CHECK_EQ(LstmOrtFactoredOffset(1, 2, 3, 4, rx, rh, 0, 0, 3), int64_t{-1});
}

TEST(NormalizeTunedEntryPoint) {
  char buf[256];
  CHECK_EQ(LstmOrtNormalizeTuned("GPU A|+10| 2|tiled;;GPU B|3|4|wavefront", buf, sizeof buf), 0);
  CHECK_EQ(std::string(buf), std::string("GPU A|10|2|tiled;GPU B|3|4|wavefront"));
  CHECK(LstmOrtNormalizeTuned("GPU|1|2|warp", buf, sizeof buf) != 0);
  CHECK_EQ(std::string(buf),
           std::string("attribute tuned must hold 'gpu|T|B|strategy' (or 'cpu:NAME|T|B|cpu_kernel') entries separated by ';', got 'GPU|1|2|warp'"));
  CHECK(LstmOrtNormalizeTuned(nullptr, buf, sizeof buf) != 0);
}
