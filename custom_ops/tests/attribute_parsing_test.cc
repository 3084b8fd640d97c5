// FusedLSTM's attribute rules (attribute_parsing.cc, enum_names.cc):
// defaults, and the exact error messages tests/test_bad_input.py and users see.
#include <cmath>
#include <string>
#include <utility>

#include "attribute_parsing.h"
#include "check.h"
#include "enum_names.h"

using namespace lstm_ort;

namespace {

RawAttributes Minimal() {
  RawAttributes raw;
  raw.hidden_size = 8;
  return raw;
}

bool Near(float a, float b) { return std::fabs(a - b) < 1e-7f; }

}  // namespace

// Every name parses back to its value, in enum order; "?" for a value outside the table.
template <typename Enum>
void CheckNames(const char* names, const char* choices, int count) {
  CHECK_EQ(EnumNames<Enum>(","), std::string(names));
  CHECK_EQ(EnumChoices<Enum>(), std::string(choices));
  for (int i = 0; i < count; ++i) {
    Enum e;
    CHECK(ParseEnum(EnumName(static_cast<Enum>(i)), &e));
    CHECK(e == static_cast<Enum>(i));
  }
  CHECK_EQ(std::string(EnumName(static_cast<Enum>(99))), std::string("?"));
  Enum e;
  CHECK(!ParseEnum("", &e));
}

TEST(EnumNamesInEnumOrder) {
  CheckNames<Strategy>("auto,tiled,splitk,persistent,wavefront,cluster",
                       "auto, tiled, splitk, persistent, wavefront or cluster", 6);
  CheckNames<Precision>("fp32,tf32,fp16,bf16,auto", "fp32, tf32, fp16, bf16 or auto", 5);
  CheckNames<CpuKernel>("auto,fused,stock,stock_split,stock_threads",
                        "auto, fused, stock, stock_split or stock_threads", 5);
  CheckNames<MmaOperand>("3xtf32,tf32,fp16,bf16", "3xtf32, tf32, fp16 or bf16", 4);
  Strategy s;
  CHECK(!ParseEnum("Tiled", &s));  // names are case-sensitive
  Precision p;
  CHECK(!ParseEnum("FP16", &p));
  CHECK(!ParseEnum("float16", &p));
}

TEST(EachPrecisionNameResolves) {
  const std::pair<const char*, Precision> modes[] = {{"fp32", Precision::kFp32}, {"tf32", Precision::kTf32},
                                                     {"fp16", Precision::kFp16}, {"bf16", Precision::kBf16},
                                                     {"auto", Precision::kAuto}};
  for (const auto& [name, value] : modes) {
    RawAttributes raw = Minimal();
    raw.precision = name;
    CHECK(ResolveAttributes(raw).precision == value);
    CHECK(ResolvePrecision(name) == value);
  }
}

TEST(DefaultsOfAMinimalNode) {
  const Attributes a = ResolveAttributes(Minimal());
  CHECK_EQ(a.hidden_size, int64_t{8});
  CHECK_EQ(a.num_layers, int64_t{1});
  CHECK_EQ(a.num_directions, 1);
  CHECK(!a.reverse_only);
  CHECK_EQ(a.layout, int64_t{0});
  CHECK(!a.has_clip);
  CHECK(!a.input_forget);
  CHECK(a.strategy == Strategy::kAuto);
  CHECK(a.precision == Precision::kFp32);  // absent: today's fp32 arithmetic
  CHECK(a.tuned.empty());
  for (int d = 0; d < 2; ++d) {
    CHECK(a.act[d][0].kind == ActKind::kSigmoid);
    CHECK(a.act[d][1].kind == ActKind::kTanh);
    CHECK(a.act[d][2].kind == ActKind::kTanh);
  }
}

TEST(AttributeErrors) {
  RawAttributes raw;
  CHECK_THROWS_MESSAGE(ResolveAttributes(raw), "attribute hidden_size is required and must be > 0");
  raw.hidden_size = 0;
  CHECK_THROWS_MESSAGE(ResolveAttributes(raw), "attribute hidden_size is required and must be > 0");

  raw = Minimal();
  raw.num_layers = 0;
  CHECK_THROWS_MESSAGE(ResolveAttributes(raw), "attribute num_layers must be > 0, got 0");

  raw = Minimal();
  raw.direction = "both";
  CHECK_THROWS_MESSAGE(ResolveAttributes(raw), "attribute direction must be forward, reverse or bidirectional, got 'both'");

  raw = Minimal();
  raw.layout = 2;
  CHECK_THROWS_MESSAGE(ResolveAttributes(raw), "attribute layout must be 0 or 1, got 2");

  raw = Minimal();
  for (float clip : {0.f, -1.f, NAN}) {
    raw.clip = clip;
    CHECK_THROWS_MESSAGE(ResolveAttributes(raw), "attribute clip must be > 0");
  }

  raw = Minimal();
  raw.strategy = "fast";
  CHECK_THROWS_MESSAGE(ResolveAttributes(raw),
                       "attribute strategy must be auto, tiled, splitk, persistent, wavefront or cluster, got 'fast'");

  for (const char* bad : {"fp64", "FP16", "half", "", " tf32"}) {
    raw = Minimal();
    raw.precision = bad;
    CHECK_THROWS_MESSAGE(ResolveAttributes(raw),
                         std::string("attribute precision must be fp32, tf32, fp16, bf16 or auto, got '") + bad + "'");
  }

  raw = Minimal();
  raw.input_forget = 2;
  CHECK_THROWS_MESSAGE(ResolveAttributes(raw), "attribute input_forget must be 0 or 1");
}

TEST(FirstBrokenRuleIsReported) {
  RawAttributes raw;
  raw.layout = 5;
  raw.strategy = "x";
  CHECK_THROWS_MESSAGE(ResolveAttributes(raw), "attribute hidden_size is required and must be > 0");
  raw.hidden_size = 4;
  CHECK_THROWS_MESSAGE(ResolveAttributes(raw), "attribute layout must be 0 or 1, got 5");
}

TEST(DirectionsAndClip) {
  RawAttributes raw = Minimal();
  raw.direction = "reverse";
  Attributes a = ResolveAttributes(raw);
  CHECK(a.reverse_only && a.num_directions == 1);
  raw.direction = "bidirectional";
  a = ResolveAttributes(raw);
  CHECK(!a.reverse_only && a.num_directions == 2);
  raw.clip = 1.5f;
  raw.input_forget = 1;
  raw.strategy = "wavefront";
  a = ResolveAttributes(raw);
  CHECK(a.has_clip && Near(a.clip, 1.5f));
  CHECK(a.input_forget);
  CHECK(a.strategy == Strategy::kWavefront);
}

TEST(TunedEntriesParse) {
  const auto t = ParseTuned("NVIDIA H100 80GB HBM3|100|16|wavefront; ;GPU|+7| 2|splitk;");
  CHECK_EQ(t.size(), size_t{2});
  if (t.size() == 2) {
    CHECK_EQ(t[0].gpu, std::string("NVIDIA H100 80GB HBM3"));
    CHECK_EQ(t[0].T, int64_t{100});
    CHECK_EQ(t[0].B, int64_t{16});
    CHECK(t[0].strategy == Strategy::kWavefront);
    CHECK_EQ(t[1].T, int64_t{7});  // strtoll's sign and leading blanks, as before
    CHECK_EQ(t[1].B, int64_t{2});
    CHECK(t[1].strategy == Strategy::kSplitK);
  }
  CHECK(ParseTuned("").empty());
  CHECK(ParseTuned(" ; ;").empty());
}

TEST(TunedErrors) {
  const char* bad[] = {"gpu|1|2", "gpu|1|2|tiled|x", "|1|2|tiled", "gpu||2|tiled", "gpu|1||tiled",
                       "gpu|1x|2|tiled", "gpu|1|2|fast", "gpu|1|2|Tiled"};
  for (const char* entry : bad)
    CHECK_THROWS_MESSAGE(ParseTuned(std::string("ok|1|1|auto;") + entry),
                         std::string("attribute tuned must hold 'gpu|T|B|strategy' (or 'cpu:NAME|T|B|cpu_kernel') entries separated by ';', got '") +
                             entry + "'");
  RawAttributes raw = Minimal();
  raw.tuned = "gpu|1|2";
  CHECK_THROWS_MESSAGE(ResolveAttributes(raw),
                       "attribute tuned must hold 'gpu|T|B|strategy' (or 'cpu:NAME|T|B|cpu_kernel') entries separated by ';', got 'gpu|1|2'");
}

TEST(TunedFormatIsCanonicalAndRoundTrips) {
  CHECK_EQ(FormatTuned(ParseTuned(" A|+1| 2|tiled;;B|3|4|auto; ")), std::string(" A|1|2|tiled;B|3|4|auto"));
  CHECK_EQ(FormatTuned({}), std::string(""));
  const std::vector<TunedStrategy> entries = {{"NVIDIA H200", 512, 64, Strategy::kPersistent},
                                              {"x", 0, 0, Strategy::kAuto}};
  const auto back = ParseTuned(FormatTuned(entries));
  CHECK_EQ(back.size(), entries.size());
  for (size_t i = 0; i < back.size() && i < entries.size(); ++i) {
    CHECK_EQ(back[i].gpu, entries[i].gpu);
    CHECK_EQ(back[i].T, entries[i].T);
    CHECK_EQ(back[i].B, entries[i].B);
    CHECK(back[i].strategy == entries[i].strategy);
  }
}

TEST(ActivationsByNameCaseInsensitive) {
  Activation act[2][3];
  ResolveActivations(std::string(" relu ,TANH,softsign"), {}, {}, 1, act);
  CHECK(act[0][0].kind == ActKind::kRelu);
  CHECK(act[0][1].kind == ActKind::kTanh);
  CHECK(act[0][2].kind == ActKind::kSoftsign);
  CHECK(act[1][0].kind == ActKind::kRelu);  // one direction: copied to the second
  CHECK(act[1][2].kind == ActKind::kSoftsign);
}

TEST(ActivationAlphasAndBetasConsumedInOrder) {
  Activation act[2][3];
  // Sigmoid takes neither; LeakyRelu an alpha; HardSigmoid both; then Affine, Elu, ScaledTanh.
  ResolveActivations(std::string("LeakyRelu,Sigmoid,HardSigmoid,Affine,Elu,ScaledTanh"), {1.f, 2.f, 3.f, 4.f},
                     {10.f, 20.f}, 2, act);
  CHECK(Near(act[0][0].alpha, 1.f));
  CHECK(Near(act[0][2].alpha, 2.f) && Near(act[0][2].beta, 10.f));
  CHECK(Near(act[1][0].alpha, 3.f) && Near(act[1][0].beta, 20.f));
  CHECK(Near(act[1][1].alpha, 4.f));
  // Out of values: stock's defaults (ScaledTanh 0, 0).
  CHECK(Near(act[1][2].alpha, 0.f) && Near(act[1][2].beta, 0.f));
}

TEST(ActivationDefaultsWithoutValues) {
  Activation act[2][3];
  ResolveActivations(std::string("LeakyRelu,HardSigmoid,Elu"), {}, {}, 1, act);
  CHECK(Near(act[0][0].alpha, 0.01f));
  CHECK(Near(act[0][1].alpha, 0.2f) && Near(act[0][1].beta, 0.5f));
  CHECK(Near(act[0][2].alpha, 1.f));
}

TEST(ActivationErrors) {
  Activation act[2][3];
  CHECK_THROWS_MESSAGE(ResolveActivations(std::string("Sigmoid,Tanh,Tanh"), {}, {}, 2, act),
                       "attribute activations must name 6 functions (f, g, h per direction, comma-separated), got "
                       "'Sigmoid,Tanh,Tanh'");
  CHECK_THROWS_MESSAGE(ResolveActivations(std::string("Sigmoid,Gelu,Tanh"), {}, {}, 1, act),
                       "unknown activation 'Gelu'; expected one of Sigmoid, Tanh, Relu, Affine, LeakyRelu, "
                       "ThresholdedRelu, ScaledTanh, HardSigmoid, Elu, Softsign, Softplus");
  RawAttributes raw = Minimal();
  raw.direction = "bidirectional";
  raw.activations = "Relu,Tanh,Tanh";
  CHECK_THROWS_MESSAGE(ResolveAttributes(raw),
                       "attribute activations must name 6 functions (f, g, h per direction, comma-separated), got "
                       "'Relu,Tanh,Tanh'");
}

TEST(RanksOfFactoredParts) {
  RawAttributes raw = Minimal();
  CHECK(!ResolveAttributes(raw).ranks.Any());  // absent: nothing factored
  raw.num_layers = 2;
  raw.direction = "bidirectional";
  raw.rank_recurrent = std::vector<int64_t>{0, 2, 0, 0};
  const Attributes a = ResolveAttributes(raw);
  CHECK(a.ranks.Any());
  CHECK_EQ(a.ranks.Input(1), int64_t{0});
  CHECK_EQ(a.ranks.Recurrent(1), int64_t{2});
  raw.rank_recurrent = std::vector<int64_t>{0, 0, 0, 0};
  CHECK(!ResolveAttributes(raw).ranks.Any());  // all zero: nothing factored
  raw.rank_input = std::vector<int64_t>{1, 2};
  CHECK_THROWS_MESSAGE(ResolveAttributes(raw),
                       "attribute rank_input must hold 4 ranks >= 0 (one per layer and direction, 0 = not factored), "
                       "got [1, 2]");
  raw.rank_input = std::vector<int64_t>{1, -2, 0, 0};
  CHECK_THROWS_MESSAGE(ResolveAttributes(raw),
                       "attribute rank_input must hold 4 ranks >= 0 (one per layer and direction, 0 = not factored), "
                       "got [1, -2, 0, 0]");
}
