// The committed tile choices (src/sm90/tuning_table.h): pure host arithmetic,
// so the rules dispatch follows are checked on every machine.
#include <gtest/gtest.h>

#include "sm90/tuning_table.h"

namespace fctest {
namespace {

using flashcore::DType;
using namespace flashcore::sm90;

constexpr int kSms = 132;  // H100 SXM

// A call of `sequences` (batch x heads) sequences of seqlen_q query rows.
CallShape work(int64_t seqlen_q, int64_t sequences, bool triangular = false, bool unmasked = true) {
  CallShape w;
  w.seqlen_q = seqlen_q;
  w.sequences = sequences;
  w.triangular = triangular;
  w.unmasked = unmasked && !triangular;
  return w;
}
int block_m(int head_dim, const CallShape& w) { return tuned_tile(DType::kFloat16, head_dim, w, kSms).block_m; }

TEST(TuningTable, BlockNNeverDependsOnTheBatch) {
  // block_n fixes each row's reduction order: it follows the head dim and, at
  // head dim 256, the sequence's own key count and the mask in plain calls
  // (64 keys in serving calls, whose sequences share a launch); never the
  // number of sequences (batch x heads).
  for (int64_t s : {1, 128, 512, 1023, 1024, 2047, 2048, 4096, 16384}) {
    for (bool tri : {false, true}) {
      for (int64_t seqs : {1, 66, 67, 132, 133, 100000}) {
        for (bool serving : {false, true}) {
          int const d256 = serving ? 64 : tuned_block_n(256, s, !tri);
          CallShape w = work(s, seqs, tri);
          w.seqlen_k = s;
          w.serving = serving;
          EXPECT_EQ(tuned_tile(DType::kFloat16, 64, w, kSms).block_n, 128);
          EXPECT_EQ(tuned_tile(DType::kBFloat16, 128, w, kSms).block_n, 128);
          EXPECT_EQ(tuned_tile(DType::kBFloat16, 96, w, kSms).block_n, 128);
          EXPECT_EQ(tuned_tile(DType::kBFloat16, 256, w, kSms).block_n, d256) << s << " keys, seqs " << seqs;
        }
      }
    }
  }
}

TEST(TuningTable, HeadDim256KeyBlocksFollowTheMeasuredCrossovers) {
  // bench/results/2026-11-25c-h100/ab3-d256-half-o-table.txt (with the
  // 64-key kernel's O staged outside Q): 64 keys win below 2k keys without a
  // mask and below 4k with one.
  EXPECT_EQ(tuned_block_n(256, 512, /*unmasked=*/true), 64);
  EXPECT_EQ(tuned_block_n(256, 1024, true), 64);
  EXPECT_EQ(tuned_block_n(256, 2047, true), 64);
  EXPECT_EQ(tuned_block_n(256, 2048, true), 80);
  EXPECT_EQ(tuned_block_n(256, 16384, true), 80);
  EXPECT_EQ(tuned_block_n(256, 2048, /*unmasked=*/false), 64);
  EXPECT_EQ(tuned_block_n(256, 4095, false), 64);
  EXPECT_EQ(tuned_block_n(256, 4096, false), 80);
  EXPECT_EQ(tuned_block_n(128, 16384, true), 128);
  // Serving calls: the one serving tile of head dim 256, at any length.
  EXPECT_EQ(tuned_block_n(256, 512, true, /*serving=*/true), 64);
  EXPECT_EQ(tuned_block_n(256, 16384, true, /*serving=*/true), 64);
  EXPECT_EQ(tuned_block_n(256, 16384, false, /*serving=*/true), 64);
  EXPECT_EQ(tuned_block_n(128, 16384, true, /*serving=*/true), 128);
}

TEST(TuningTable, SixtyFourRowTilesForSmallOrOneWaveTriangularCalls) {
  // Small calls: 64-row tiles while 128-row ones would fill at most half the SMs.
  EXPECT_EQ(block_m(64, work(128, 66)), 64);
  // (Sliding windows: unmasked head dim 64 takes two-CTA 64-row tiles
  // further, TwoCtaSixtyFourRowTilesForUnmaskedHeadDim64.)
  EXPECT_EQ(block_m(64, work(128, 67, false, false)), 128);
  EXPECT_EQ(block_m(128, work(256, 33)), 64);
  EXPECT_EQ(block_m(128, work(256, 34)), 128);
  // Causal-like: one wave of 128-row tiles (B1 H16 S1024) runs 64-row tiles in pairs.
  EXPECT_EQ(block_m(64, work(1024, 16, true)), 64);
  EXPECT_TRUE(pair_tiles(256, kSms));
  EXPECT_EQ(block_m(128, work(128, 132, true)), 64);
  EXPECT_EQ(block_m(64, work(128, 133, true)), 128);
  EXPECT_EQ(block_m(64, work(128, 128, false, false)), 128);
  // Head dims without a 64-row tile keep 128 rows.
  EXPECT_EQ(block_m(96, work(128, 10, true)), 128);
  EXPECT_EQ(block_m(256, work(128, 10, true)), 128);
  // Packed GQA decode: always 64 rows.
  CallShape decode = work(1, 100000);
  decode.gqa_packed_decode = true;
  EXPECT_EQ(block_m(128, decode), 64);
  EXPECT_EQ(block_m(64, decode), 64);
}

// The head-dim-64 rows of the H100 tune run the table was set from
// (bench/results/2026-11-23b-h100/tune.csv): the measured best tile of each
// shape. Dispatch must pick it on every one. Rows re-measured since: causal
// B16 S1024 takes 192 rows once a warpgroup passes over its masked block
// (H200, bench/results/2026-11-29d-h200/call1-ab1-*, 2% faster); unmasked
// B8 S128, B16 S128, B8 S256 and B1 S1024 take 64 rows two CTAs an SM
// (H200, bench/results/2026-11-29f-h200/call2-*: 2-12% faster).
struct Measured {
  int64_t b, h, s;
  bool causal;
  int best_block_m;
};
constexpr Measured kTuneRun[] = {
    // FA3 grid, bf16, 16k tokens, 32 heads.
    {32, 32, 512, false, 192}, {16, 32, 1024, false, 192}, {8, 32, 2048, false, 192},
    {4, 32, 4096, false, 192}, {2, 32, 8192, false, 192},  {1, 32, 16384, false, 192},
    {32, 32, 512, true, 128},  {16, 32, 1024, true, 192},  {8, 32, 2048, true, 192},
    {4, 32, 4096, true, 192},  {2, 32, 8192, true, 192},   {1, 32, 16384, true, 192},
    // Seed grid, fp16, 16 heads.
    {1, 16, 128, false, 64},   {8, 16, 128, false, 64},    {16, 16, 128, false, 64},
    {32, 16, 128, false, 128}, {1, 16, 256, false, 64},    {8, 16, 256, false, 64},
    {16, 16, 256, false, 128}, {32, 16, 256, false, 128},  {1, 16, 512, false, 64},
    {8, 16, 512, false, 192},  {16, 16, 512, false, 192},  {32, 16, 512, false, 192},
    {1, 16, 1024, false, 64},  {1, 16, 1024, true, 64},
};

TEST(TuningTable, HeadDim64PicksTheMeasuredBestTileOnTheTunedGrids) {
  if (!two_ctas_allowed()) GTEST_SKIP() << "FLASHCORE_TWO_CTAS=0 in the environment: the rows before 2026-11-29f";
  for (const Measured& m : kTuneRun) {
    EXPECT_EQ(block_m(64, work(m.s, m.b * m.h, m.causal)), m.best_block_m)
        << "B" << m.b << " H" << m.h << " S" << m.s << (m.causal ? " causal" : "");
  }
}

TEST(TuningTable, TwoCtaSixtyFourRowTilesForUnmaskedHeadDim64) {
  if (!two_ctas_allowed()) GTEST_SKIP() << "FLASHCORE_TWO_CTAS=0 in the environment";
  // Unmasked plain calls of up to two 64-row tiles an SM (264 on 132 SMs),
  // or four (528) of sequences up to 256 rows.
  EXPECT_EQ(block_m(64, work(128, 264)), 64);   // 528 tiles
  EXPECT_EQ(block_m(64, work(128, 265)), 128);  // 530
  EXPECT_EQ(block_m(64, work(256, 132)), 64);   // 528
  EXPECT_EQ(block_m(64, work(256, 133)), 128);  // 532
  EXPECT_EQ(block_m(64, work(1024, 16)), 64);   // 256
  EXPECT_NE(block_m(64, work(1024, 17)), 64);   // 272 (192 rows)
  EXPECT_EQ(block_m(64, work(512, 33)), 64);    // 264
  EXPECT_NE(block_m(64, work(512, 34)), 64);    // 272 (192 rows)
  // Not with at most one 64-row tile an SM where 128-row tiles fill more
  // than half of them (126 tiles of 64 rows, 84 of 128).
  EXPECT_EQ(block_m(64, work(190, 42)), 128);
  // Not for masks (a sliding window), serving calls or other head dims, on
  // the 256 tiles of 64 rows that take it unmasked (B1 H16 S1024).
  EXPECT_EQ(block_m(64, work(1024, 16, false, false)), 128);
  CallShape serving = work(1024, 16);
  serving.serving = true;
  EXPECT_EQ(block_m(64, serving), 128);
  EXPECT_EQ(block_m(128, work(1024, 16)), 128);
  // The kernel: plain unmasked calls on 64-row tiles with more tiles than
  // SMs, whatever picked the tile (the table or the caller).
  flashcore::Problem p;
  p.batch = 8, p.heads_q = p.heads_kv = 16, p.seqlen_q = p.seqlen_k = 128, p.head_dim = 64;  // 256 tiles
  EXPECT_TRUE(tuned_two_ctas(p, 64, 128, kSms));
  EXPECT_FALSE(tuned_two_ctas(p, 128, 128, kSms));
  EXPECT_FALSE(tuned_two_ctas(p, 64, 128, 256));  // fewer tiles than SMs: one CTA, four stages
  p.batch = 4;                                     // 128 tiles
  EXPECT_FALSE(tuned_two_ctas(p, 64, 128, kSms));
  p.batch = 1000;
  EXPECT_TRUE(tuned_two_ctas(p, 64, 128, kSms));  // the caller's 64 rows on a large call
  p.causal = true, p.window_right = 0;
  EXPECT_FALSE(tuned_two_ctas(p, 64, 128, kSms));
  p.causal = false, p.window_right = flashcore::kUnboundedWindow;
  p.head_dim = 128;
  EXPECT_FALSE(tuned_two_ctas(p, 64, 128, kSms));
}

TEST(TuningTable, OneHundredNinetyTwoRowsOnlyWhereMeasured) {
  // Plain head-dim-64 calls only: serving and packed decode have no such tile,
  // nor do other head dims.
  CallShape serving = work(16384, 32);
  serving.serving = true;
  EXPECT_EQ(block_m(64, work(16384, 32)), 192);
  EXPECT_EQ(block_m(64, serving), 128);
  EXPECT_EQ(block_m(128, work(16384, 32)), 128);
  EXPECT_EQ(block_m(96, work(16384, 32)), 128);
  // Sliding windows (masked, not triangular) were not measured.
  EXPECT_EQ(block_m(64, work(16384, 32, false, false)), 128);
  // Causal: from 1024 query rows and with >= 8 tiles of 192 rows per SM.
  EXPECT_EQ(block_m(64, work(1023, 512, true)), 128);
  EXPECT_EQ(block_m(64, work(1024, 176, true)), 192);  // 6 x 176 = 1056 tiles
  EXPECT_EQ(block_m(64, work(1024, 175, true)), 128);  // 1050 tiles
  EXPECT_EQ(block_m(64, work(2048, 96, true)), 192);   // 11 x 96 = 1056 tiles
  EXPECT_EQ(block_m(64, work(2048, 95, true)), 128);   // 1045 tiles
  // No mask: waves of 192-row tiles against waves of 128-row ones. B1 H16:
  // S1024 is one wave either way (128 rows win), S2048 two against two.
  // (B1 H16 S1024 is 256 tiles of 64 rows: two CTAs an SM since 2026-11-29f.)
  EXPECT_EQ(block_m(64, work(1024, 16)), two_ctas_allowed() ? 64 : 128);
  EXPECT_EQ(block_m(64, work(2048, 16)), 128);  // 512 tiles of 64 rows
  // 384 rows: two tiles of 192 against three of 128, same waves count.
  EXPECT_EQ(block_m(64, work(384, 1000)), 192);
}

// call_shape: what dispatch reads from a validated problem.
flashcore::Problem problem(int64_t b, int64_t hq, int64_t hkv, int64_t sq, int64_t sk) {
  flashcore::Problem p;
  p.batch = b, p.heads_q = hq, p.heads_kv = hkv, p.seqlen_q = sq, p.seqlen_k = sk, p.head_dim = 64;
  return p;
}

TEST(TuningTable, CallShapeReadsTheProblem) {
  flashcore::Problem plain = problem(8, 32, 8, 2048, 2048);
  CallShape w = call_shape(plain);
  EXPECT_EQ(w.seqlen_q, 2048);
  EXPECT_EQ(w.sequences, 256);
  EXPECT_TRUE(w.unmasked);
  EXPECT_FALSE(w.triangular || w.serving || w.gqa_packed_decode);
  EXPECT_EQ(block_m(64, w), 192);

  flashcore::Problem causal = plain;
  causal.causal = true, causal.window_right = 0;
  w = call_shape(causal);
  EXPECT_TRUE(w.triangular);
  EXPECT_FALSE(w.unmasked);
  EXPECT_EQ(block_m(64, w), 192);  // 11 x 256 = 2816 tiles of 192 rows

  flashcore::Problem sliding = causal;
  sliding.window_left = 256;
  w = call_shape(sliding);
  EXPECT_FALSE(w.triangular || w.unmasked);
  EXPECT_EQ(block_m(64, w), 128);

  flashcore::Problem varlen = plain;
  varlen.varlen_q = varlen.varlen_k = true;
  w = call_shape(varlen);
  EXPECT_TRUE(w.serving && w.unmasked);
  EXPECT_EQ(block_m(64, w), 128);  // no 192-row serving tile

  // Serving calls of at most 64 rows a sequence: 64-row tiles, the ones that
  // can run split-KV in one CTA (splitkv_plan.h fold_splits); not at head
  // dim 96, which has no 64-row tile.
  flashcore::Problem varlen_decode = problem(64, 32, 8, 1, 4096);
  varlen_decode.varlen_q = varlen_decode.varlen_k = true;
  w = call_shape(varlen_decode);
  EXPECT_TRUE(w.serving && !w.gqa_packed_decode);
  EXPECT_EQ(block_m(64, w), 64);
  EXPECT_EQ(block_m(128, w), 64);
  EXPECT_EQ(block_m(96, w), 128);
  varlen_decode.seqlen_q = 65;
  EXPECT_EQ(block_m(128, call_shape(varlen_decode)), 128);

  flashcore::Problem decode = problem(64, 32, 8, 1, 4096);
  w = call_shape(decode);
  EXPECT_TRUE(w.gqa_packed_decode);
  EXPECT_EQ(block_m(64, w), 64);
}

TEST(TuningTable, KvMulticastOnlyForUnmaskedPlainCallsWhoseTilesPairUp) {
  flashcore::Problem plain = problem(8, 16, 16, 2048, 2048);  // 16 blocks of 128 rows a head
  plain.head_dim = 256;
  EXPECT_TRUE(cluster_eligible(plain, 128, 2, false));
  EXPECT_EQ(tuned_cluster(plain, 128, 80), 2);
  EXPECT_EQ(tuned_cluster(plain, 128, 64), 2);
  plain.head_dim = 128;
  EXPECT_EQ(tuned_cluster(plain, 128, 128), 2);
  EXPECT_EQ(tuned_cluster(plain, 64, 128), 1);  // no 64-row multicast kernel
  plain.head_dim = 96;  // none at head dim 96
  EXPECT_EQ(tuned_cluster(plain, 128, 128), 1);

  // Three query blocks a head: head dim 256's clusters need pairs within a
  // head; head dim 64's may straddle two heads, and need an even tile count.
  flashcore::Problem odd = problem(1, 2, 2, 3 * 192, 2048);
  odd.head_dim = 256;
  EXPECT_FALSE(cluster_pairs_may_straddle(256));
  EXPECT_FALSE(cluster_eligible(odd, 192, 2, false));
  odd.head_dim = 64;
  EXPECT_TRUE(cluster_pairs_may_straddle(64));
  EXPECT_TRUE(cluster_eligible(odd, 192, 2, true));  // 6 tiles
  EXPECT_EQ(tuned_cluster(odd, 192, 128), 2);
  EXPECT_EQ(tuned_cluster(odd, 128, 128), 1);  // no 128-row multicast kernel
  odd.heads_q = odd.heads_kv = 1;  // 3 tiles
  EXPECT_FALSE(cluster_eligible(odd, 192, 2, true));
  EXPECT_EQ(tuned_cluster(odd, 192, 128), 1);

  plain.head_dim = 256;
  flashcore::Problem causal = plain;
  causal.causal = true, causal.window_right = 0;
  EXPECT_FALSE(cluster_eligible(causal, 128, 2, true));
  flashcore::Problem window = plain;
  window.window_left = 4096;  // a left window wider than the keys is still a mask: not taken
  EXPECT_FALSE(cluster_eligible(window, 128, 2, true));
  flashcore::Problem varlen = plain;
  varlen.varlen_q = varlen.varlen_k = true;
  EXPECT_FALSE(cluster_eligible(varlen, 128, 2, true));
  flashcore::Problem decode = problem(64, 32, 8, 1, 4096);
  EXPECT_FALSE(cluster_eligible(decode, 64, 2, true));
}

// Head dim 128's 128-row tile without ping-pong turns from 1k keys, one CTA
// or K/V multicast (bench/results/2026-11-26g-h100/ab1-d128-no-turns-table.txt,
// 2026-11-27c-h100/ab1-d128-c2-no-turns-table.txt): by the keys of a
// sequence, whatever the mask, batch or query rows; never for other tiles or
// head dims, or serving calls (dispatch).
TEST(TuningTable, NoTurnsForHeadDim128From1kKeys) {
  if (!no_turns_allowed()) GTEST_SKIP() << "FLASHCORE_NO_TURNS=0 in the environment";
  if (no_turns_min_keys() != 1024) GTEST_SKIP() << "FLASHCORE_NO_TURNS_MIN_KEYS in the environment";
  flashcore::Problem p = problem(4, 16, 16, 4096, 1024);
  p.head_dim = 128;
  EXPECT_TRUE(tuned_no_turns(p, 128, 128));
  EXPECT_FALSE(tuned_no_turns(p, 64, 128));  // one warpgroup: no turns anyway
  p.seqlen_k = 1023;
  EXPECT_FALSE(tuned_no_turns(p, 128, 128));
  p.seqlen_k = 16384, p.seqlen_q = 1, p.batch = 1;
  p.causal = true, p.window_right = 0;
  EXPECT_TRUE(tuned_no_turns(p, 128, 128));
  for (int d : {64, 96, 256}) {
    p.head_dim = d;
    EXPECT_FALSE(tuned_no_turns(p, 128, d == 256 ? 80 : 128)) << d;
  }
  EXPECT_TRUE(has_no_turns_kernel(128, 128, 128));
  EXPECT_FALSE(has_no_turns_kernel(128, 64, 128));
}

// Serving kernels pair each sequence's query blocks only where every
// sequence has the same query length (tuning_table.h
// serving_costs_vary_by_tile): mixed lengths measured slower paired.
TEST(TuningTable, ServingCallsPairTilesOnlyForEqualQueryLengths) {
  flashcore::Problem varlen = problem(8, 16, 16, 2048, 2048);
  varlen.varlen_q = varlen.varlen_k = true;
  varlen.causal = true, varlen.window_right = 0;
  varlen.total_q = 8 * 2048;
  EXPECT_TRUE(serving_costs_vary_by_tile(varlen));
  varlen.total_q = 8 * 2048 - 1;  // some sequence is shorter than max_seqlen_q
  EXPECT_FALSE(serving_costs_vary_by_tile(varlen));

  flashcore::Problem chunked = problem(4, 16, 16, 600, 4096);  // KV cache: every sequence 600 new rows
  chunked.kv_cache = true;
  chunked.causal = true, chunked.window_right = 0;
  EXPECT_TRUE(serving_costs_vary_by_tile(chunked));
  chunked.window_left = 300;  // a sliding window still bounds on the right
  EXPECT_TRUE(serving_costs_vary_by_tile(chunked));
  chunked.causal = false, chunked.window_right = flashcore::kUnboundedWindow;
  EXPECT_FALSE(serving_costs_vary_by_tile(chunked));  // every block walks the window

  flashcore::Problem decode = problem(64, 32, 8, 1, 4096);  // packed GQA decode: one block
  decode.kv_cache = true;
  decode.causal = true, decode.window_right = 0;
  EXPECT_FALSE(serving_costs_vary_by_tile(decode));
}

TEST(TuningTable, TilesArePairedOnceSomeCtaGetsTwo) {
  EXPECT_FALSE(pair_tiles(1, kSms));
  EXPECT_FALSE(pair_tiles(kSms, kSms));
  EXPECT_TRUE(pair_tiles(kSms + 1, kSms));
  EXPECT_TRUE(pair_tiles(100000, kSms));
}

}  // namespace
}  // namespace fctest
