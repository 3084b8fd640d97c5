// The developer knobs' parsing (cuda/developer_knobs.cc).
#include <string>

#include "check.h"
#include "cuda/developer_knobs.h"

using namespace lstm_ort;

TEST(PersistentKnobsParse) {
  PersistentKnobs k = ParsePersistentKnobs(nullptr, nullptr);
  CHECK_EQ(k.only_u, 0);
  CHECK_EQ(k.only_bb, 0);
  CHECK_EQ(k.resident_chunks, 1);
  k = ParsePersistentKnobs("16,8", "3");
  CHECK_EQ(k.only_u, 16);
  CHECK_EQ(k.only_bb, 8);
  CHECK_EQ(k.resident_chunks, 3);
  k = ParsePersistentKnobs("4", "x");  // what does not parse stays 0
  CHECK_EQ(k.only_u, 4);
  CHECK_EQ(k.only_bb, 0);
  CHECK_EQ(k.resident_chunks, 0);
}

TEST(StrategyOverrideParse) {
  CHECK(!ParseStrategyOverride(nullptr).has_value());
  CHECK(!ParseStrategyOverride("").has_value());
  CHECK(ParseStrategyOverride("splitk") == Strategy::kSplitK);
  CHECK_THROWS_MESSAGE(ParseStrategyOverride("fastest"),
                       "LSTM_ORT_STRATEGY must be auto, tiled, splitk, persistent, wavefront or cluster, got 'fastest'");
}

TEST(MmaOverrideParse) {
  CHECK(!ParseMmaOverride(nullptr).has_value());
  CHECK(!ParseMmaOverride("").has_value());
  CHECK(!ParseMmaOverride("fma")->operand.has_value());
  CHECK(ParseMmaOverride("3xtf32")->operand == MmaOperand::kTf32x3);
  CHECK(ParseMmaOverride("bf16")->operand == MmaOperand::kBf16);
  CHECK_THROWS_MESSAGE(ParseMmaOverride("int8"), "LSTM_ORT_MMA must be fma, 3xtf32, tf32, fp16 or bf16, got 'int8'");
}
