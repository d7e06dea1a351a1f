// The split-KV policy (src/sm90/split_policy.h): chunk sizes follow a
// sequence's own length, and the grid/workspace bound covers every sequence
// a batch can hold. Pure host arithmetic, so it runs on every machine.
#include <gtest/gtest.h>

#include "common/problem.h"
#include "sm90/split_calls.h"
#include "sm90/split_policy.h"

namespace fctest {
namespace {

using namespace flashcore::sm90;

TEST(SplitPolicy, ChunkLimitFollowsTheHeadCount) {
  EXPECT_EQ(split_max_chunks_for_heads(8), 16);
  EXPECT_EQ(split_max_chunks_for_heads(32), 4);
  EXPECT_EQ(split_max_chunks_for_heads(3), 43);
  EXPECT_EQ(split_max_chunks_for_heads(1), 128);
  EXPECT_EQ(split_max_chunks_for_heads(128), 1);
  EXPECT_EQ(split_max_chunks_for_heads(1000), 1);
}

TEST(SplitPolicy, ChunkSizeGrowsWithTheSequenceInWholeUnits) {
  constexpr int64_t kKeys = kSplitMinKeys;
  // 8 KV heads (the decode suite): at most 16 chunks a sequence.
  EXPECT_EQ(split_keys_for<int64_t>(kKeys, 16, 100), 256);
  EXPECT_EQ(split_keys_for<int64_t>(kKeys, 16, 4096), 256);
  EXPECT_EQ(split_chunks_for<int64_t>(kKeys, 16, 4096, 4095), 16);
  EXPECT_EQ(split_keys_for<int64_t>(kKeys, 16, 4097), 512);
  EXPECT_EQ(split_chunks_for<int64_t>(kKeys, 16, 4097, 4096), 9);
  EXPECT_EQ(split_keys_for<int64_t>(kKeys, 16, 32768), 2048);
  EXPECT_EQ(split_chunks_for<int64_t>(kKeys, 16, 32768, 32767), 16);
  // The override: one size whatever the length.
  EXPECT_EQ(split_keys_for<int64_t>(384, 0, 100000), 384);
  EXPECT_EQ(split_chunks_for<int64_t>(384, 0, 100000, 99999), 261);
}

// For every length up to 20000 keys and several chunk limits: chunks hold
// whole units, cover the sequence, stay within the limit, and no shorter
// sequence has more chunks than the bound for the longest one says (the
// bound sizes the grid and the workspace: an excess would write out of it).
TEST(SplitPolicy, BoundCoversEveryShorterSequence) {
  constexpr int64_t kKeys = kSplitMinKeys;
  for (int64_t max_chunks : {0, 1, 2, 5, 16, 128}) {
    int64_t most = 0;
    for (int64_t keys = 1; keys <= 20000; ++keys) {
      int64_t const chunk = split_keys_for(kKeys, max_chunks, keys);
      int64_t const n = split_chunks_for(kKeys, max_chunks, keys, keys - 1);
      // The kernels' 32-bit arithmetic agrees.
      ASSERT_EQ(n, split_chunks_for<int32_t>(int32_t(kKeys), int32_t(max_chunks), int32_t(keys), int32_t(keys - 1)));
      ASSERT_EQ(chunk % kKeys, 0) << keys;
      ASSERT_GE(int64_t(n) * chunk, keys) << keys;
      ASSERT_LT(int64_t(n - 1) * chunk, keys) << keys;  // no empty chunk
      if (max_chunks > 0) {
        ASSERT_LE(n, max_chunks) << keys;
      }
      most = n > most ? n : most;
      ASSERT_LE(most, split_chunks_bound(kKeys, max_chunks, keys)) << "max_chunks " << max_chunks << " keys " << keys;
    }
  }
}

// Which calls split (src/sm90/split_calls.h): serving calls of at most 64
// rows a sequence (varlen calls whose packed rows allow a sequence that
// short, any head dim), and plain calls of at most 64 rows after GQA packing
// at head dims 64 and 128.
flashcore::Problem decode(int64_t batch, int64_t hq, int64_t hkv, int64_t sq, int64_t sk, int64_t d) {
  flashcore::Problem p;
  p.batch = batch, p.heads_q = hq, p.heads_kv = hkv, p.seqlen_q = sq, p.seqlen_k = sk, p.head_dim = d;
  return p;
}

TEST(SplitPolicy, PlainCallsOfAtMost64RowsSplitAtHeadDims64And128) {
  EXPECT_TRUE(may_split_keys(decode(1, 32, 8, 1, 4096, 128)));    // GQA-packed decode: 4 rows
  EXPECT_TRUE(may_split_keys(decode(1, 16, 16, 64, 4096, 64)));   // a 64-row chunk
  EXPECT_FALSE(may_split_keys(decode(1, 16, 16, 65, 4096, 64)));  // 65 rows
  EXPECT_FALSE(may_split_keys(decode(1, 128, 1, 1, 4096, 128)));  // packed: 128 rows
  EXPECT_FALSE(may_split_keys(decode(1, 16, 16, 1, 4096, 96)));   // no 64-row tile: no one-CTA schedule
  EXPECT_FALSE(may_split_keys(decode(1, 16, 16, 1, 4096, 256)));  // plain: no 64-row tile, 80-key blocks from 2k
  flashcore::Problem varlen = decode(4, 16, 16, 900, 4096, 96);
  varlen.varlen_q = varlen.varlen_k = true;
  EXPECT_TRUE(may_split_keys(varlen));  // its short sequences may split, whatever the longest
  varlen.total_q = 3 * 900 + 64;  // the fewest rows a sequence can have: 64
  EXPECT_TRUE(may_split_keys(varlen));
  varlen.total_q = 3 * 900 + 65;  // every sequence has more than 64 rows: no chunks planned
  EXPECT_FALSE(may_split_keys(varlen));
  EXPECT_EQ(split_shape(varlen).max_splits, 1);
  varlen.total_q = 4 * 900;  // uniform prefill
  EXPECT_FALSE(may_split_keys(varlen));
  flashcore::Problem chunked = decode(4, 16, 16, 65, 4096, 128);  // a KV cache's 65 new rows a sequence
  chunked.kv_cache = true;
  EXPECT_FALSE(may_split_keys(chunked));
  flashcore::Problem cache256 = decode(2, 16, 8, 1, 4096, 256);
  cache256.kv_cache = true;
  EXPECT_TRUE(may_split_keys(cache256));  // KV-cache decode at head dim 256: across CTAs
  // in chunks of multiples of 512 keys: 8 at 4k keys, 16 (of 2048) at 32k
  SplitShape const s256 = split_shape(cache256);
  EXPECT_EQ(s256.split_keys, kSplitMinKeysWide);
  EXPECT_EQ(split_chunks_bound<int64_t>(s256.split_keys, s256.max_chunks, 4096), 8);
  EXPECT_EQ(split_chunks_bound<int64_t>(s256.split_keys, s256.max_chunks, 32768), 16);
  EXPECT_EQ(split_keys_for<int64_t>(s256.split_keys, s256.max_chunks, 32768), 2048);
  EXPECT_EQ(split_chunks_bound<int64_t>(s256.split_keys, s256.max_chunks, 512), 1);  // never splits
  EXPECT_EQ(split_min_keys(128), kSplitMinKeys);
}

TEST(SplitPolicy, SplitShapeFollowsTheLengthAndTheOverride) {
  SplitShape s = split_shape(decode(1, 32, 8, 1, 4096, 128));
  EXPECT_EQ(s.split_keys, kSplitMinKeys);
  EXPECT_EQ(s.max_chunks, 16);  // 128 tiles over 8 KV heads
  EXPECT_EQ(s.max_splits, 16);
  EXPECT_EQ(split_shape(decode(1, 32, 8, 1, 256, 128)).max_splits, 1);  // one chunk: no split
  flashcore::Problem off = decode(1, 32, 8, 1, 4096, 128);
  off.config.num_splits = 1;
  EXPECT_EQ(split_shape(off).max_splits, 1);
  flashcore::Problem five = decode(1, 32, 8, 1, 4096, 128);
  five.config.num_splits = 5;  // 820 keys, rounded up to 896: 5 chunks
  s = split_shape(five);
  EXPECT_EQ(s.split_keys, 896);
  EXPECT_EQ(s.max_chunks, 0);
  EXPECT_EQ(s.max_splits, 5);
}

// The schedule of a split call (split_calls.h fold_split_chunks): in one CTA
// once the (sequence, head) tiles alone give half of the SMs a tile, and
// only with 64-row tiles.
TEST(SplitPolicy, ChunksRunInOneCtaOnceTheSequencesFillHalfTheGpu) {
  constexpr int kSms = 132;
  EXPECT_FALSE(fold_split_chunks(1, 8, 64, kSms));   // batch-1 decode, 8 KV heads: across CTAs
  EXPECT_FALSE(fold_split_chunks(8, 8, 64, kSms));   // 64 tiles
  EXPECT_TRUE(fold_split_chunks(9, 8, 64, kSms));    // 72 tiles
  EXPECT_TRUE(fold_split_chunks(16, 8, 64, kSms));   // the decode suite's batch 16
  EXPECT_FALSE(fold_split_chunks(64, 8, 128, kSms));  // 128-row tiles cannot fold
}

}  // namespace
}  // namespace fctest
