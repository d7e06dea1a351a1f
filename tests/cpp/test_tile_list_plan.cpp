// Which calls run with a tile list (src/sm90/tile_list_plan.h) and how many
// entries it holds: pure host arithmetic, so it runs on every machine; the
// GPU tests TileListsKeepEverySequencesBits and CausalServingCallsPairBlocks-
// WithinEachSequence check the bits and that dispatch took one.
#include <gtest/gtest.h>

#include <algorithm>

#include "common/problem.h"
#include "sm90/tile_list_plan.h"

namespace fctest {
namespace {

using flashcore::Problem;
using namespace flashcore::sm90;

// A varlen problem of `seqs` sequences: bound sq, packed rows tq.
Problem varlen(int64_t seqs, int64_t sq, int64_t tq, int64_t heads = 16) {
  Problem p;
  p.batch = seqs, p.heads_q = heads, p.heads_kv = heads, p.head_dim = 128;
  p.seqlen_q = sq, p.seqlen_k = sq, p.total_q = tq, p.total_k = tq;
  p.varlen_q = p.varlen_k = true;
  return p;
}

TEST(TileListPlan, MixedQueryLengthsOfMoreThanOneWaveTakeAList) {
  // 4 sequences of up to 4096 rows, 10240 packed: 32 units of 128 rows a
  // (head, batch), 2048 launch tiles on 132 CTAs; at most 10240 / 128 + 4 =
  // 84 tiles with work a head.
  TileListPlan const plan = plan_tile_list(varlen(4, 4096, 10240), 128, 1, 132, 0);
  EXPECT_TRUE(plan.used());
  EXPECT_EQ(plan.entries, 84 * 16);
  // The count and the entries, rounded to 256 bytes.
  int64_t const list_bytes = (84 * 16 + 1) * 4 / 256 * 256 + 256;
  EXPECT_EQ(plan.bytes, list_bytes);
  EXPECT_EQ(plan.tail_rounds, 0);
  // With a tail (FLASHCORE_TILE_LIST_TAIL rounds): then its first k and
  // rows, and two rows of 132 positions a round, rounded to 256 bytes.
  for (int rounds = 1; rounds <= kTileListTailMaxRounds + 1; ++rounds) {
    TileListPlan const tail = plan_tile_list(varlen(4, 4096, 10240), 128, 1, 132, rounds);
    int const r = std::min(rounds, kTileListTailMaxRounds);
    EXPECT_EQ(tail.entries, plan.entries);
    EXPECT_EQ(tail.tail_rounds, r);
    EXPECT_EQ(tail.tail_ctas, 132);
    EXPECT_EQ(tail.tail_min_excess, tile_list_tail_min_excess());
    EXPECT_EQ(tail.tail_offset, list_bytes / 4);
    EXPECT_EQ(tail.bytes, list_bytes + ((2 + 2 * r * 132) * 4 + 255) / 256 * 256);
    EXPECT_EQ(tail.bytes % 256, 0);
  }
  // A grid wider than the builder's sort serves keeps the list, no tail.
  TileListPlan const wide = plan_tile_list(varlen(4, 4096, 10240), 128, 1, kTileListTailMaxCtas + 1, 3);
  EXPECT_TRUE(wide.used());
  EXPECT_EQ(wide.tail_rounds, 0);
  EXPECT_EQ(wide.bytes, list_bytes);
  // Never more entries than the launch has tiles (short sequences: the
  // per-sequence round-up dominates).
  EXPECT_EQ(plan_tile_list(varlen(100, 200, 100 * 150), 128, 1, 132).entries, 2 * 100 * 16);
  // Split chunks: a sequence of at most 64 rows has up to max_splits units.
  EXPECT_EQ(plan_tile_list(varlen(8, 4096, 4096 + 7 * 10), 64, 16, 132).entries,
            std::min<int64_t>(64 * 8, (4096 + 70 + 63) / 64 + 8 * 16) * 16);
}

TEST(TileListPlan, UniformShortOrOversizedCallsRunWithoutOne) {
  // Every sequence at the bound: no empty unit (and such a batch runs as a
  // dense one or in pairs as it is).
  EXPECT_FALSE(plan_tile_list(varlen(4, 4096, 4 * 4096), 128, 1, 132).used());
  // One wave: 2 x 16 x 4 = 128 launch tiles on 132 CTAs.
  EXPECT_FALSE(plan_tile_list(varlen(4, 256, 700), 128, 1, 132).used());
  EXPECT_TRUE(plan_tile_list(varlen(5, 256, 700), 128, 1, 132).used());
  // One sequence, too many for the builder, or not varlen.
  EXPECT_FALSE(plan_tile_list(varlen(1, 4096, 4000), 128, 1, 132).used());
  EXPECT_FALSE(plan_tile_list(varlen(kTileListMaxSeqs + 1, 4096, 4000 * kTileListMaxSeqs), 128, 1, 132).used());
  EXPECT_TRUE(plan_tile_list(varlen(kTileListMaxSeqs, 4096, 4000 * kTileListMaxSeqs), 128, 1, 132).used());
}

TEST(TileListPlan, KvCachePrefillAndVarlenKeysTakeOneDecodeDoesNot) {
  // Chunked prefill: 8 sequences of 512 new rows over caches of up to 8192
  // keys (lengths on the device): 4 units a (head, sequence), all real.
  Problem cache = varlen(8, 512, 0);
  cache.varlen_q = cache.varlen_k = false, cache.kv_cache = true, cache.seqlen_k = 8192;
  TileListPlan const plan = plan_tile_list(cache, 128, 1, 132);
  EXPECT_TRUE(plan.used());
  EXPECT_EQ(plan.entries, 4 * 8 * 16);
  // Decode (one row a sequence, which may split its keys) keeps its schedule.
  Problem decode = cache;
  decode.seqlen_q = 1;
  EXPECT_FALSE(plan_tile_list(decode, 64, 16, 132).used());
  // So does varlen decode: every sequence of at most 64 query rows.
  Problem varlen_decode = varlen(64, 64, 64 * 30);
  varlen_decode.seqlen_k = 4096, varlen_decode.total_k = 64 * 3000;
  EXPECT_FALSE(plan_tile_list(varlen_decode, 64, 16, 132).used());
  varlen_decode.seqlen_q = 65, varlen_decode.total_q = 64 * 30 + 1;  // one sequence may have 65
  EXPECT_TRUE(plan_tile_list(varlen_decode, 64, 16, 132).used());
  // Varlen: the same query lengths, key lengths that may differ.
  Problem keys = varlen(8, 1024, 8 * 1024);
  keys.seqlen_k = 4096, keys.total_k = 8 * 4096 - 1;
  EXPECT_TRUE(plan_tile_list(keys, 128, 1, 132).used());
  keys.total_k = 8 * 4096;  // every sequence at the bound: a dense batch
  EXPECT_FALSE(plan_tile_list(keys, 128, 1, 132).used());
}

}  // namespace
}  // namespace fctest
