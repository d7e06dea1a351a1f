// The sm90 tile decode (src/sm90/tile_decode.h) divides by host-prepared
// cutlass::FastDivmod divisors. Compiled for the host it is checked here
// without a GPU: on every tile of small problems it must be a bijection onto
// (unit, head, batch) in the scheduler's order (tile_scheduler.h), and up to
// 2^31 tiles (the launcher's limit) it must agree with plain division.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <set>
#include <tuple>
#include <vector>

#include "sm90/tile_decode.h"

namespace {

using flashcore::sm90::decode_tile;
using flashcore::sm90::listed_tile_at;
using flashcore::sm90::make_tile_divisors;
using flashcore::sm90::paired_block;
using flashcore::sm90::TileCoord;

// The decode written with / and %, in int64.
TileCoord by_division(int64_t tile, bool paired, int64_t units, int64_t heads, int64_t batch) {
  int64_t unit, bh;
  int64_t const pairs = units / 2, paired_tiles = 2 * pairs * heads * batch;
  if (paired && tile < paired_tiles) {
    int64_t const j = tile / 2, i = j % pairs;
    bh = j / pairs;
    unit = tile % 2 ? i : units - 1 - i;
  } else if (paired) {
    bh = tile - paired_tiles;
    unit = pairs;
  } else {
    unit = tile % units;
    bh = tile / units;
  }
  return {int(unit), int(bh % heads), int(bh / heads)};
}

void expect_same(TileCoord a, TileCoord b, int64_t tile) {
  EXPECT_EQ(a.unit, b.unit) << "tile " << tile;
  EXPECT_EQ(a.head, b.head) << "tile " << tile;
  EXPECT_EQ(a.batch, b.batch) << "tile " << tile;
}

TEST(TileDecode, EveryTileOfSmallProblemsOnceInOrder) {
  for (bool paired : {false, true}) {
    for (int units = 1; units <= 9; ++units) {
      for (int heads = 1; heads <= 5; ++heads) {
        for (int batch = 1; batch <= 3; ++batch) {
          auto const d = make_tile_divisors(units, heads, 1);
          int const tiles = units * heads * batch;
          std::set<std::tuple<int, int, int>> seen;
          for (int tile = 0; tile < tiles; ++tile) {
            TileCoord const t = decode_tile(tile, paired, units, heads, batch, d);
            ASSERT_TRUE(t.unit >= 0 && t.unit < units && t.head >= 0 && t.head < heads && t.batch >= 0 &&
                        t.batch < batch)
                << "tile " << tile << " of " << units << "x" << heads << "x" << batch;
            seen.insert({t.unit, t.head, t.batch});
            expect_same(t, by_division(tile, paired, units, heads, batch), tile);
            if (!paired) {
              // Units fastest, then heads: consecutive tiles share a (batch, head).
              EXPECT_EQ(tile, (t.batch * heads + t.head) * units + t.unit);
            } else if (tile % 2 == 1 && tile < 2 * (units / 2) * heads * batch) {
              // A pair's two query blocks cost the same together: i and units - 1 - i.
              TileCoord const even = decode_tile(tile - 1, paired, units, heads, batch, d);
              EXPECT_EQ(even.unit + t.unit, units - 1);
              EXPECT_EQ(even.head, t.head);
              EXPECT_EQ(even.batch, t.batch);
            }
          }
          EXPECT_EQ(int(seen.size()), tiles) << units << "x" << heads << "x" << batch;
        }
      }
    }
  }
}

// Tile counts up to the launcher's 2^31 - 1 with divisors that are not
// powers of two, near powers of two and large: the range where a fixed-point
// reciprocal would first round wrong.
TEST(TileDecode, AgreesWithDivisionUpTo2To31Tiles) {
  std::mt19937_64 rng(20261127);
  struct Shape {
    int units, heads;
  };
  Shape const shapes[] = {{1, 1},     {2, 3},        {3, 7},     {127, 129},     {128, 64},      {1000, 17},
                          {4097, 33}, {65535, 257}, {65537, 1}, {(1 << 20) + 1, 3}, {(1 << 30) - 1, 1}, {46341, 46340}};
  int64_t const max_tiles = (int64_t(1) << 31) - 1;
  for (Shape s : shapes) {
    int64_t const per_batch = int64_t(s.units) * s.heads;
    int const batch = int(max_tiles / per_batch);
    ASSERT_GE(batch, 1);
    int64_t const tiles = per_batch * batch;
    auto const d = make_tile_divisors(s.units, s.heads, 1);
    std::uniform_int_distribution<int64_t> pick(0, tiles - 1);
    for (bool paired : {false, true}) {
      for (int k = 0; k < 20000; ++k) {
        int64_t const tile = k < 64 ? tiles - 1 - k : (k < 128 ? k - 64 : pick(rng));
        expect_same(decode_tile(int(tile), paired, s.units, s.heads, batch, d),
                    by_division(tile, paired, s.units, s.heads, batch), tile);
        // The K/V-multicast straddle test (mainloop_load.h): (tile | 1) % units.
        ASSERT_EQ(d.units.rem(int(tile | 1)), int((tile | 1) % s.units)) << "tile " << tile;
      }
    }
  }
}

TEST(TileDecode, KvHeadOfEveryGqaGroup) {
  for (int group : {1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 31, 32, 64, 127, 128}) {
    auto const d = make_tile_divisors(1, 1, group);
    for (int head = 0; head < 4096; ++head) {
      ASSERT_EQ(d.group.div(head), head / group) << "head " << head << " group " << group;
    }
  }
}

// Serving kernels' causal pairs: for every block count n the units 0..n-1
// cover each block once, and units 2i and 2i+1 are blocks n-1-i and i, whose
// key blocks under a causal mask add up to the same n+1 for every pair (the
// middle block alone when n is odd).
TEST(TileDecode, ServingPairsPermuteEachSequencesBlocks) {
  for (int n = 1; n <= 300; ++n) {
    std::set<int> seen;
    for (int u = 0; u < n; ++u) {
      int const m = paired_block(u, n);
      ASSERT_TRUE(m >= 0 && m < n) << "n " << n << " u " << u;
      seen.insert(m);
      if (u % 2 == 1) {
        EXPECT_EQ(paired_block(u - 1, n) + 1 + m + 1, n + 1) << "n " << n << " pair " << u / 2;
      }
    }
    EXPECT_EQ(int(seen.size()), n) << "n " << n;
  }
  EXPECT_EQ(paired_block(0, 5), 4);
  EXPECT_EQ(paired_block(1, 5), 0);
  EXPECT_EQ(paired_block(4, 5), 2);
}

// A tile list's deal (tile_scheduler.h with a list): every entry goes to
// exactly one CTA, each CTA's entries grow with k (the walk stops at the
// first one past the count), paired entries 2j and 2j+1 go to one CTA, and
// rounds alternate direction: the CTA with the first slot of round r has the
// last slot of round r+1.
TEST(TileDecode, TileListDealIsAPermutationInRoundsOfAlternatingDirection) {
  for (bool paired : {false, true}) {
    for (int g : {1, 2, 7, 132}) {
      for (int count : {0, 1, 2, 131, 132, 133, 264, 1001}) {
        std::vector<int> owner(count, -1);
        for (int b = 0; b < g; ++b) {
          int last = -1;
          for (int k = 0;; ++k) {
            int const t = listed_tile_at(k, b, g, paired);
            ASSERT_GT(t, last) << "g " << g << " b " << b << " k " << k;
            last = t;
            if (t >= count) break;
            ASSERT_EQ(owner[t], -1) << "entry " << t << " dealt twice";
            owner[t] = b;
            if (paired && (t & 1)) {
              EXPECT_EQ(owner[t - 1], b) << "pair " << t / 2 << " split over two CTAs";
            }
          }
        }
        for (int t = 0; t < count; ++t) ASSERT_NE(owner[t], -1) << "entry " << t << " of " << count << " never dealt";
      }
    }
    int const step = paired ? 2 : 1;
    EXPECT_EQ(listed_tile_at(0, 0, 132, paired), 0);
    EXPECT_EQ(listed_tile_at(step, 0, 132, paired), (2 * 132 - 1) * step);  // round 1, slot 131 of it
    EXPECT_EQ(listed_tile_at(step, 131, 132, paired), 132 * step);          // round 1, slot 0 of it
    EXPECT_EQ(listed_tile_at(2 * step, 0, 132, paired), 2 * 132 * step);    // round 2, forward again
  }
}

}  // namespace

