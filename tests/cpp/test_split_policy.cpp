// The split-KV policy (src/sm90/split_policy.h): chunk sizes follow a
// sequence's own length, and the grid/workspace bound covers every sequence
// a batch can hold. Pure host arithmetic, so it runs on every machine.
#include <gtest/gtest.h>

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

}  // namespace
}  // namespace fctest
