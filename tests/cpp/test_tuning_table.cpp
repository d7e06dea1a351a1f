// The committed tile choices (src/sm90/tuning_table.h): pure host arithmetic,
// so the rules dispatch follows are checked on every machine.
#include <gtest/gtest.h>

#include "sm90/tuning_table.h"

namespace fctest {
namespace {

using flashcore::DType;
using namespace flashcore::sm90;

constexpr int kSms = 132;  // H100 SXM

TEST(TuningTable, BlockNDependsOnlyOnTheHeadDim) {
  // block_n fixes each row's reduction order: never on the amount of work.
  for (int64_t tiles : {1, 66, 67, 132, 133, 100000}) {
    for (bool tri : {false, true}) {
      EXPECT_EQ(tuned_tile(DType::kFloat16, 64, tiles, kSms, false, tri).block_n, 128);
      EXPECT_EQ(tuned_tile(DType::kBFloat16, 128, tiles, kSms, false, tri).block_n, 128);
      EXPECT_EQ(tuned_tile(DType::kBFloat16, 96, tiles, kSms, false, tri).block_n, 128);
      EXPECT_EQ(tuned_tile(DType::kBFloat16, 256, tiles, kSms, false, tri).block_n, 64);
    }
  }
}

TEST(TuningTable, SixtyFourRowTilesForSmallOrOneWaveTriangularCalls) {
  // Small calls: 64-row tiles while 128-row ones would fill at most half the SMs.
  EXPECT_EQ(tuned_tile(DType::kFloat16, 64, 66, kSms, false).block_m, 64);
  EXPECT_EQ(tuned_tile(DType::kFloat16, 64, 67, kSms, false).block_m, 128);
  // Causal-like: one wave of 128-row tiles (B1 H16 S1024) runs 64-row tiles in pairs.
  EXPECT_EQ(tuned_tile(DType::kFloat16, 64, 128, kSms, false, true).block_m, 64);
  EXPECT_TRUE(pair_tiles(256, kSms));
  EXPECT_EQ(tuned_tile(DType::kFloat16, 128, 132, kSms, false, true).block_m, 64);
  EXPECT_EQ(tuned_tile(DType::kFloat16, 64, 133, kSms, false, true).block_m, 128);
  EXPECT_EQ(tuned_tile(DType::kFloat16, 64, 128, kSms, false, false).block_m, 128);
  // Head dims without a 64-row tile keep 128 rows.
  EXPECT_EQ(tuned_tile(DType::kFloat16, 96, 10, kSms, false, true).block_m, 128);
  EXPECT_EQ(tuned_tile(DType::kFloat16, 256, 10, kSms, false, true).block_m, 128);
  // Packed GQA decode: always 64 rows.
  EXPECT_EQ(tuned_tile(DType::kFloat16, 128, 100000, kSms, true).block_m, 64);
}

TEST(TuningTable, TilesArePairedOnceSomeCtaGetsTwo) {
  EXPECT_FALSE(pair_tiles(1, kSms));
  EXPECT_FALSE(pair_tiles(kSms, kSms));
  EXPECT_TRUE(pair_tiles(kSms + 1, kSms));
  EXPECT_TRUE(pair_tiles(100000, kSms));
}

TEST(TuningTable, ThreeStagesOnlyForLongUnmaskedHeadDim128) {
  EXPECT_EQ(tuned_stages(128, 128, false, 2048, false), 3);
  EXPECT_EQ(tuned_stages(128, 128, false, 2047, false), 0);
  EXPECT_EQ(tuned_stages(128, 128, true, 16384, false), 0);
  EXPECT_EQ(tuned_stages(128, 64, false, 16384, false), 0);
  EXPECT_EQ(tuned_stages(128, 128, false, 16384, true), 0);
  EXPECT_EQ(tuned_stages(64, 128, false, 16384, false), 0);
}

}  // namespace
}  // namespace fctest
