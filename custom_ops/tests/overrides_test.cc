// The overrides' one strict parser (overrides.cc): the `debug` attribute and the environment
// aliases, every value checked.
#include <cstdlib>
#include <string>

#include "check.h"
#include "overrides.h"

using namespace lstm_ort;

TEST(DebugOptionsParse) {
  const Overrides none = ParseDebugOptions("");
  CHECK(!none.strict && !none.strategy && !none.mma_forced && !none.gemm_step && none.half_step_weights &&
        none.call_graphs);
  CHECK_EQ(none.resident_chunks, 1);
  const Overrides o = ParseDebugOptions(
      " strict=1; strategy = splitk;mma=fma;gemm_step=1;half_step_weights=0;cluster_size=4;cluster_slices=8;"
      "persistent_tile=16,8;persistent_chunks=3;low_rank_stepwise=1;call_graphs=0;;");
  CHECK(o.strict);
  CHECK(o.strategy == Strategy::kSplitK);
  CHECK(o.mma_forced && !o.mma);
  CHECK(o.gemm_step && !o.half_step_weights && o.low_rank_stepwise && !o.call_graphs);
  CHECK_EQ(o.cluster_size, 4);
  CHECK_EQ(o.cluster_slices, 8);
  CHECK_EQ(o.tile_u, 16);
  CHECK_EQ(o.tile_bb, 8);
  CHECK_EQ(o.resident_chunks, 3);
  CHECK(ParseDebugOptions("mma=bf16").mma == MmaOperand::kBf16);
}

TEST(DebugOptionsApplyOverTheirBase) {
  Overrides base;
  base.strategy = Strategy::kTiled;
  base.gemm_step = true;
  const Overrides o = ParseDebugOptions("strategy=cluster", base);
  CHECK(o.strategy == Strategy::kCluster);  // the attribute wins over the alias
  CHECK(o.gemm_step);                       // and keeps what it does not name
}

TEST(DebugOptionsRefuseBadValuesByName) {
  CHECK_THROWS_MESSAGE(ParseDebugOptions("strategy=fastest"),
                       "debug key strategy must be auto, tiled, splitk, persistent, wavefront or cluster, got 'fastest'");
  CHECK_THROWS_MESSAGE(ParseDebugOptions("mma=int8"), "debug key mma must be fma, 3xtf32, tf32, fp16 or bf16, got 'int8'");
  CHECK_THROWS_MESSAGE(ParseDebugOptions("gemm_step=yes"), "debug key gemm_step must be 0 or 1, got 'yes'");
  CHECK_THROWS_MESSAGE(ParseDebugOptions("cluster_slices=3"), "debug key cluster_slices must be 2, 4 or 8, got '3'");
  CHECK_THROWS_MESSAGE(ParseDebugOptions("cluster_size=0"),
                       "debug key cluster_size must be a cluster size from 1 to 16, got '0'");
  CHECK_THROWS_MESSAGE(ParseDebugOptions("persistent_chunks=5"),
                       "debug key persistent_chunks must be 1, 2, 3 or 4, got '5'");
  CHECK_THROWS_MESSAGE(ParseDebugOptions("persistent_tile=16"),
                       "debug key persistent_tile must be U,Bb (units and batch rows of a block; 0 leaves one to the "
                       "planner), got '16'");
  CHECK_THROWS_MESSAGE(ParseDebugOptions("strict=1x"), "debug key strict must be 0 or 1, got '1x'");
  CHECK_THROWS_MESSAGE(ParseDebugOptions("strict"), "debug entry 'strict' must be strict=value");
  CHECK_THROWS_MESSAGE(ParseDebugOptions("cpu_threads=2"),
                       "debug key cpu_threads is process-wide: set LSTM_ORT_CPU_THREADS instead");
  CHECK_THROWS_MESSAGE(ParseDebugOptions("fast=1"),
                       "debug key 'fast' is none of strict, strategy, mma, gemm_step, half_step_weights, cluster_size, "
                       "cluster_slices, persistent_tile, persistent_chunks, low_rank_stepwise, call_graphs, mma_step, "
                       "mma_step_tile, mma_step_pdl, mma_step_resident, mma_step_layers, refuse_launches");
  CHECK_THROWS_MESSAGE(ParseDebugOptions("mma_step_tile=64"),
                       "debug key mma_step_tile must be one of 32x64, 32x64k2, 64x64, 64x64k2, 64x128, 128x128, "
                       "64x128k2, 64x64k4, got '64'");
  CHECK_EQ(ParseDebugOptions("mma_step_tile=64x128").mma_step_tile, 4);
  CHECK(!*ParseDebugOptions("mma_step_pdl=0").mma_step_pdl);
  CHECK(!ParseDebugOptions("").mma_step_pdl);
  CHECK_EQ(ParseDebugOptions("mma_step_layers=2").mma_step_layers, 2);
  CHECK(ParseDebugOptions("refuse_launches=1").refuse_launches);
  CHECK(!ParseDebugOptions("").refuse_launches);
  CHECK(!ParseDebugOptions("").mma_step);
  CHECK(*ParseDebugOptions("mma_step=1").mma_step);
  CHECK(!*ParseDebugOptions("mma_step=0").mma_step);
}

TEST(EnvironmentAliasesParseAlike) {
  setenv("LSTM_ORT_GEMM_STEP", "1", 1);
  setenv("LSTM_ORT_STRATEGY", "", 1);  // empty: unset
  CHECK(OverridesFromEnvironment().gemm_step);
  CHECK(!OverridesFromEnvironment().strategy);
  CHECK(!OverridesForNode("gemm_step=0").gemm_step);  // the node's attribute wins
  setenv("LSTM_ORT_GEMM_STEP", "true", 1);
  CHECK_THROWS_MESSAGE(OverridesFromEnvironment(), "LSTM_ORT_GEMM_STEP must be 0 or 1, got 'true'");
  unsetenv("LSTM_ORT_GEMM_STEP");
  unsetenv("LSTM_ORT_STRATEGY");
  CHECK(!OverridesFromEnvironment().gemm_step);
}

TEST(DebugKeysInTableOrder) {
  CHECK_EQ(DebugKeys(","), std::string("strict,strategy,mma,gemm_step,half_step_weights,cluster_size,cluster_slices,"
                                       "persistent_tile,persistent_chunks,low_rank_stepwise,call_graphs,mma_step,"
                                       "mma_step_tile,mma_step_pdl,mma_step_resident,mma_step_layers,"
                                       "refuse_launches"));
}
