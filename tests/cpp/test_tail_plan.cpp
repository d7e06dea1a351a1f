// The tail plan of paired schedules (src/sm90/tail_plan.h), checked on the
// host: every CTA's walk (paired_tile_at, as the kernel's tile scheduler
// calls it) must visit each tile exactly once and end at the first invalid
// tile, and where a plan is made its modeled finish must come before the
// pairs'.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "sm90/tail_plan.h"
#include "sm90/tail_policy.h"
#include "tail_plan_cases.h"

namespace {

using flashcore::sm90::kTileOverheadBlocks;
using flashcore::sm90::make_tail_plan;
using flashcore::sm90::paired_tile_at;
using flashcore::sm90::TailPlan;

// Paired causal tiles (tile_decode.h's order): pair j of a head holds query
// blocks units-1-i then i (i = j % pairs), the middle blocks after all
// pairs; query block u costs u + 1 key blocks plus the tile overhead.
struct Causal {
  int units, heads;
  int tiles() const { return units * heads; }
  int cost(int t) const {
    int const pairs = units / 2, paired = 2 * pairs * heads;
    int const u = t < paired ? (t % 2 ? (t / 2) % pairs : units - 1 - (t / 2) % pairs) : pairs;
    return u + 1 + kTileOverheadBlocks;
  }
};

// Each CTA's tiles in order, and how many tiles its walks got wrong (visited
// twice or never, or a walk that does not end); 0 for a right plan.
struct Walks {
  std::vector<std::vector<int>> tiles;
  int wrong = 0;
};
Walks walks(TailPlan const& plan, int grid, int tiles) {
  Walks w;
  w.tiles.resize(grid);
  std::vector<int> seen(tiles, 0);
  for (int b = 0; b < grid; ++b) {
    for (int k = 0;; ++k) {
      if (k > tiles) {  // a walk longer than all tiles never ends
        ++w.wrong;
        break;
      }
      int const t = paired_tile_at(k, b, grid, plan, tiles);
      if (t >= tiles) break;
      if (t < 0) {
        ++w.wrong;
        break;
      }
      ++seen[t];
      w.tiles[b].push_back(t);
    }
  }
  for (int t = 0; t < tiles; ++t) w.wrong += seen[t] != 1;
  return w;
}

template <class Cost>
int64_t finish(Walks const& w, Cost const& cost) {
  int64_t end = 0;
  for (auto const& tiles : w.tiles) {
    int64_t sum = 0;
    for (int t : tiles) sum += cost(t);
    end = std::max(end, sum);
  }
  return end;
}

TEST(TailPlan, EveryTileOnceAndNeverLaterThanPairs) {
  TailPlan const none;
  for (int full_rounds : {0, 1}) {
    int planned = 0;
    for (int grid : {1, 7, 66, 132, 144}) {
      for (int units : {2, 3, 4, 8, 43, 128}) {
        for (int heads : {1, 5, 16, 256, 1024}) {
          Causal const c{units, heads};
          auto const cost = [&](int t) { return c.cost(t); };
          TailPlan const plan = make_tail_plan(c.tiles(), grid, full_rounds, cost);
          Walks const with = walks(plan, grid, c.tiles()), pairs = walks(none, grid, c.tiles());
          ASSERT_EQ(with.wrong, 0) << "full rounds " << full_rounds << " grid " << grid << " units " << units
                                   << " heads " << heads;
          ASSERT_EQ(pairs.wrong, 0);
          if (plan.first_k != TailPlan::kNone) {
            ++planned;
            EXPECT_LT(finish(with, cost), finish(pairs, cost))
                << "full rounds " << full_rounds << " grid " << grid << " units " << units << " heads " << heads;
            // The pairs before the dealt rounds stay as they were.
            int const rounds = (c.tiles() + 1) / 2 / grid;
            EXPECT_EQ(plan.first_k, 2 * (rounds - full_rounds));
            EXPECT_EQ(plan.tail_begin, 2 * (rounds - full_rounds) * grid);
          }
        }
      }
    }
    EXPECT_GT(planned, 20) << "full rounds " << full_rounds;
  }
}

// Uneven costs (any shape the launcher might model: windows, more queries
// than keys, heads of one cost and another): wherever a plan is made, its
// modeled finish comes before the pairs', counting the CTAs that get no
// tail tile (a review found plans that were not: the finish had counted
// only the CTAs that got one).
TEST(TailPlan, UnevenCostsPlanOnlyWhenEarlier) {
  TailPlan const none;
  uint32_t state = 12345;
  auto const next = [&] { return state = state * 1664525u + 1013904223u; };
  int planned = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    int const grid = int(next() % 40) + 1, full_rounds = int(next() % 2);
    int const tiles = int(next() % uint32_t(8 * grid)) + 2 * grid;
    std::vector<int> costs(size_t(tiles), 0);
    for (int& c : costs) c = int(next() % 50) + 1;
    auto const cost = [&](int t) { return costs[size_t(t)]; };
    TailPlan const plan = make_tail_plan(tiles, grid, full_rounds, cost);
    Walks const with = walks(plan, grid, tiles);
    ASSERT_EQ(with.wrong, 0) << "trial " << trial;
    if (plan.first_k == TailPlan::kNone) continue;
    ++planned;
    ASSERT_LT(finish(with, cost), finish(walks(none, grid, tiles), cost)) << "trial " << trial;
  }
  EXPECT_GT(planned, 100);
}

// The review's smallest case: 10 tiles on 3 CTAs, the kept round's largest
// load (100, CTA 2) on a CTA the tail would not reach: no plan.
TEST(TailPlan, NoPlanWhenTheKeptRoundsDecideTheFinish) {
  auto const cost = [](int t) { return t < 6 ? (t / 2 == 2 ? 50 : 3) : 4; };
  EXPECT_EQ(make_tail_plan(10, 3, 0, cost).first_k, TailPlan::kNone);
}

// The largest tails: one pair short of a further round, on the widest grid
// the plan holds, with an even and an odd tile count. The pairs dealt to the
// first half of the CTAs cost 5 times the others', so that the plan pays.
TEST(TailPlan, LargestTailsFit) {
  TailPlan const none;
  int const grid = TailPlan::kMaxCtas;
  for (int rounds : {2, 3, 64}) {
    for (int odd : {0, 1}) {
      int const tiles = 2 * ((rounds + 1) * grid - 1) - odd;
      auto const cost = [&](int t) { return (t / 2) % grid < grid / 2 ? 10 : 2; };
      TailPlan const plan = make_tail_plan(tiles, grid, 1, cost);
      ASSERT_NE(plan.first_k, TailPlan::kNone) << "rounds " << rounds << " odd " << odd;
      EXPECT_GT(tiles - plan.tail_begin, 4 * grid - 8);
      EXPECT_LE(tiles - plan.tail_begin, TailPlan::kMaxTiles);
      Walks const w = walks(plan, grid, tiles);
      EXPECT_EQ(w.wrong, 0) << "rounds " << rounds << " odd " << odd;
      EXPECT_LT(finish(w, cost), finish(walks(none, grid, tiles), cost));
    }
  }
}

// Head dim 128's causal 512-key cell (B32 H16: 4 query blocks a head, 1024
// pairs on 132 SMs): in the model the last CTA finishes one key block
// earlier than with pairs (71 against 72: a pair is 9, the work 69.8 a CTA).
TEST(TailPlan, Causal512OnAnH100) {
  Causal const c{4, 512};
  auto const cost = [&](int t) { return c.cost(t); };
  TailPlan const plan = make_tail_plan(c.tiles(), 132, 1, cost);
  ASSERT_NE(plan.first_k, TailPlan::kNone);
  EXPECT_EQ(plan.first_k, 2 * (1024 / 132 - 1));
  EXPECT_EQ(plan.tail_begin, 2 * (1024 / 132 - 1) * 132);
  TailPlan const none;
  EXPECT_EQ(finish(walks(none, 132, c.tiles()), cost), 72);
  EXPECT_EQ(finish(walks(plan, 132, c.tiles()), cost), 71);
}

// The same cell with only the partial last round dealt (the deal of head
// dims 128 and 256): 100 pairs split into 200 tiles on 132 CTAs after 7
// rounds of pairs, also 71.
TEST(TailPlan, Causal512LastRoundOnly) {
  Causal const c{4, 512};
  auto const cost = [&](int t) { return c.cost(t); };
  TailPlan const plan = make_tail_plan(c.tiles(), 132, 0, cost);
  ASSERT_NE(plan.first_k, TailPlan::kNone);
  EXPECT_EQ(plan.first_k, 2 * (1024 / 132));
  EXPECT_EQ(plan.tail_begin, 2 * (1024 / 132) * 132);
  EXPECT_EQ(plan.begin[132] - plan.begin[0], 2 * (1024 - 7 * 132));
  Walks const w = walks(plan, 132, c.tiles());
  EXPECT_EQ(w.wrong, 0);
  EXPECT_EQ(finish(w, cost), 71);
}

// The walk check catches a plan that lists a tile twice (and so misses one).
TEST(TailPlan, AWalkThatRepeatsATileIsCaught) {
  Causal const c{4, 512};
  TailPlan plan = make_tail_plan(c.tiles(), 132, 1, [&](int t) { return c.cost(t); });
  ASSERT_NE(plan.first_k, TailPlan::kNone);
  plan.tiles[1] = plan.tiles[0];
  EXPECT_EQ(walks(plan, 132, c.tiles()).wrong, 2);
}

// Fewer than two rounds of pairs, more than kMaxRounds, or a grid wider than
// the plan holds: no plan.
TEST(TailPlan, NoPlanWhereItDoesNotApply) {
  auto const cost = [](int t) { return t % 4 + 3; };
  EXPECT_EQ(make_tail_plan(2 * 120, 132, 1, cost).first_k, TailPlan::kNone);  // 120 pairs: no full round
  EXPECT_EQ(make_tail_plan(2 * 200, 132, 1, cost).first_k, TailPlan::kNone);  // 200 pairs: one round
  EXPECT_NE(make_tail_plan(2 * 270, 132, 1, cost).first_k, TailPlan::kNone);  // two rounds and 6 pairs
  EXPECT_EQ(make_tail_plan(2 * 132 * (TailPlan::kMaxRounds + 1) + 2, 132, 1, cost).first_k, TailPlan::kNone);
  EXPECT_EQ(make_tail_plan(2 * 8000, TailPlan::kMaxCtas + 1, 1, cost).first_k, TailPlan::kNone);
  // Only the partial round dealt: one full round is enough, none without a
  // partial round after it.
  EXPECT_EQ(make_tail_plan(2 * 120, 132, 0, cost).first_k, TailPlan::kNone);  // no full round
  EXPECT_NE(make_tail_plan(2 * 200, 132, 0, cost).first_k, TailPlan::kNone);  // one round and 68 pairs
  EXPECT_EQ(make_tail_plan(2 * 264, 132, 0, cost).first_k, TailPlan::kNone);  // two rounds exactly
  EXPECT_EQ(make_tail_plan(2 * 200, 132, -1, cost).first_k, TailPlan::kNone);
}

// The costs the launcher gives the plan (flash_fwd_launch.h tail_plan_for):
// each query block's key blocks as the kernel walks them, plus the overhead.
TEST(TailPlan, QueryBlockCosts) {
  using flashcore::sm90::query_block_costs;
  int const none = 1 << 30;  // no window (the launcher's clamp)
  std::vector<int> const causal512 = {3, 4, 5, 6};
  EXPECT_EQ((query_block_costs<128, 128>(4, 512, 512, none, 0, false)), causal512);
  // Head dim 256's 80-key blocks: 2, 4, 5 and 7 blocks.
  std::vector<int> const n80 = {4, 6, 7, 9};
  EXPECT_EQ((query_block_costs<128, 80>(4, 512, 512, none, 0, false)), n80);
  // A left window of 256 keys: at most 3 blocks.
  std::vector<int> const window = {3, 4, 5, 5, 5, 5, 5, 5};
  EXPECT_EQ((query_block_costs<128, 128>(8, 1024, 1024, 256, 0, false)), window);
  // More queries than keys, bottom-right aligned: the first 200 rows see no
  // key; the issue-ahead kernels still visit one (masked) block there.
  std::vector<int> const masked = {2, 3, 3}, visited = {3, 3, 3};
  EXPECT_EQ((query_block_costs<128, 128>(3, 300, 100, none, 0, false)), masked);
  EXPECT_EQ((query_block_costs<128, 128>(3, 300, 100, none, 0, true)), visited);
}

// Front padding (tail_policy.h front_pad): the rows it moves before row 0,
// and what it saves. The query blocks still partition the rows (each row in
// exactly one, none empty), and a causal call visits as many key blocks or
// fewer, whatever its lengths; on the FA3 grid's causal cells of the
// 192-row kernel, 5% fewer at 2k and 4k tokens and 1.5% at 8k and 16k.
TEST(TailPlan, FrontPad) {
  using flashcore::sm90::BlockMask;
  using flashcore::sm90::front_pad;
  using flashcore::sm90::front_pad_rows;
  int const none = 1 << 30;
  if (!FLASHCORE_FRONT_PAD) GTEST_SKIP() << "an A/B build without front padding";
  EXPECT_TRUE(front_pad(192, 128, 1, false));
  EXPECT_FALSE(front_pad(192, 128, 2, false));  // multicast: unmasked calls only
  EXPECT_FALSE(front_pad(128, 128, 1, false));  // as many key blocks either way
  EXPECT_FALSE(front_pad(128, 128, 1, true));
  EXPECT_EQ(front_pad_rows(2048, 192), 64);     // 11 tiles, 64 rows of padding
  EXPECT_EQ(front_pad_rows(4096, 192), 128);    // 22 tiles, 128
  EXPECT_EQ(front_pad_rows(2112, 192), 0);
  EXPECT_EQ(front_pad_rows(2049, 192), 0);      // 63 rows: no whole warpgroup
  EXPECT_EQ(front_pad_rows(1000, 192), 128);    // 152 rows: two warpgroups
  auto const blocks = [&](int sq, int sk, int shift) {
    BlockMask<192, 128, true> const mask{sq, sk, none, 0, shift};
    int const units = (sq + 191) / 192;
    int64_t total = 0;
    for (int u = 0; u < units; ++u) {
      int n0 = 0, n1 = 0;
      mask.n_block_range(u, n0, n1);
      total += n1 > n0 ? n1 - n0 : 0;
    }
    return total;
  };
  EXPECT_EQ(blocks(2048, 2048, 0), 101);
  EXPECT_EQ(blocks(2048, 2048, 64), 96);
  EXPECT_EQ(blocks(4096, 4096, 0), 384);
  EXPECT_EQ(blocks(4096, 4096, 128), 363);
  EXPECT_EQ(blocks(8192, 8192, 64), 1408);  // 1429 without
  EXPECT_EQ(blocks(16384, 16384, 128), 5547);  // 5632 without
  for (int sq = 1; sq <= 3000; sq += 7) {
    for (int sk : {sq, sq + 300, sq > 300 ? sq - 300 : 1}) {
      int const shift = front_pad_rows(sq, 192);
      ASSERT_EQ(shift % 64, 0);
      ASSERT_LT(shift, 192);
      ASSERT_LE(blocks(sq, sk, shift), blocks(sq, sk, 0)) << sq << "x" << sk;
    }
    int const shift = front_pad_rows(sq, 192);
    int const units = (sq + 191) / 192;
    int const first = -shift, last = (units - 1) * 192 - shift;  // first rows of the first and last blocks
    EXPECT_LE(first, 0);            // row 0 in the first block
    EXPECT_GT(first + 192, 0);      // which holds a real row
    EXPECT_LT(last, sq);            // the last block holds one too
    EXPECT_GE(last + 192, sq);      // and the last row
  }
}

// The GPU test's calls (tail_plan_cases.h) take a plan, built as the
// launcher builds it (make_paired_tail_plan) for the kernel each forces, with
// that kernel's deal (tail_policy.h).
template <int kBlockM, int kBlockN>
TailPlan gpu_test_plan(fctest::TailPlanCall const& c, flashcore::sm90::TailPolicy const& policy, int grid) {
  using flashcore::sm90::make_paired_tail_plan;
  using flashcore::sm90::make_tile_divisors;
  int const none = 1 << 30;  // no window (the launcher's clamp)
  int const units = int((c.seqlen_q + kBlockM - 1) / kBlockM), heads = int(c.heads_q), batch = int(c.batch);
  int const left = c.window_left < 0 ? none : int(c.window_left);
  int const right = c.causal ? 0 : c.window_right < 0 ? none : int(c.window_right);
  // No kernel with a plan has kernel_traits.h kIssueAhead (head dim 64's
  // 128-row kernel, which visits one masked key block where a query block
  // sees none): Policy below checks that it takes none.
  bool const one_block_at_least = false;
  // The launcher's front padding (tail_policy.h front_pad): causal-like calls.
  int const row_shift = flashcore::sm90::front_pad(kBlockM, kBlockN, 1, false) && left >= c.seqlen_k
                            ? flashcore::sm90::front_pad_rows(c.seqlen_q, kBlockM)
                            : 0;
  return make_paired_tail_plan<kBlockM, kBlockN>(
      policy.full_rounds, policy.max_keys, units * heads * batch, grid, units, heads, batch,
      make_tile_divisors(units, heads, int(c.heads_q / c.heads_kv)), int(c.seqlen_q), int(c.seqlen_k), left, right,
      one_block_at_least, row_shift);
}

TEST(TailPlan, GpuTestCallsTakeAPlan) {
  using flashcore::sm90::tail_policy;
  if (!FLASHCORE_TAIL_PLAN || !FLASHCORE_TAIL_LAST_ROUND) GTEST_SKIP() << "an A/B build without the plan";
  for (fctest::TailPlanCall const& c : fctest::tail_plan_calls()) {
    auto const policy = tail_policy(c.head_dim, c.block_m, c.block_n, 1, false);
    ASSERT_TRUE(policy.plan) << "d" << c.head_dim << " m" << c.block_m << " n" << c.block_n;
    int const tiles = int((c.seqlen_q + c.block_m - 1) / c.block_m * c.heads_q * c.batch);
    TailPlan plan;
    if (c.block_m == 192 && c.block_n == 128) plan = gpu_test_plan<192, 128>(c, policy, fctest::kTailPlanSms);
    else if (c.block_m == 128 && c.block_n == 128) plan = gpu_test_plan<128, 128>(c, policy, fctest::kTailPlanSms);
    else if (c.block_m == 128 && c.block_n == 64) plan = gpu_test_plan<128, 64>(c, policy, fctest::kTailPlanSms);
    else FAIL() << "no tile " << c.block_m << "x" << c.block_n << " in this test";
    EXPECT_NE(plan.first_k, TailPlan::kNone)
        << "d" << c.head_dim << " B" << c.batch << " S" << c.seqlen_q << "x" << c.seqlen_k;
    EXPECT_EQ(walks(plan, fctest::kTailPlanSms, tiles).wrong, 0);
  }
}

// The policy (tail_policy.h): which kernels take a plan, how much it deals,
// and the key bound of the last-round deal.
TEST(TailPlan, Policy) {
  if (!FLASHCORE_TAIL_PLAN || !FLASHCORE_TAIL_LAST_ROUND) GTEST_SKIP() << "an A/B build without the plan";
  using flashcore::sm90::tail_policy;
  EXPECT_EQ(tail_policy(64, 192, 128, 1, false).full_rounds, 1);
  EXPECT_TRUE(tail_policy(128, 128, 128, 1, false).plan);
  EXPECT_EQ(tail_policy(128, 128, 128, 1, false).full_rounds, 0);
  EXPECT_EQ(tail_policy(256, 128, 64, 1, false).max_keys, 2048);
  EXPECT_FALSE(tail_policy(256, 128, 80, 1, false).plan);   // 80-key kernel: its code slows the key loop
  EXPECT_FALSE(tail_policy(128, 128, 128, 2, false).plan);  // multicast: unmasked calls only
  EXPECT_FALSE(tail_policy(128, 128, 128, 1, true).plan);   // serving kernels
  EXPECT_FALSE(tail_policy(64, 128, 128, 1, false).plan);   // level with and without
  EXPECT_FALSE(tail_policy(96, 128, 128, 1, false).plan);   // not measured
  // Over the bound: no plan for a call that would take one at 2048 keys.
  using flashcore::sm90::make_paired_tail_plan;
  using flashcore::sm90::make_tile_divisors;
  int const none = 1 << 30;
  auto const at = [&](int keys, int max_keys) {
    int const units = (keys + 127) / 128, heads = 8, batch = 16384 / keys;
    return make_paired_tail_plan<128, 64>(0, max_keys, units * heads * batch, 132, units, heads, batch,
                                          make_tile_divisors(units, heads, 1), keys, keys, none, 0, false)
        .first_k;
  };
  EXPECT_NE(at(2048, 2048), TailPlan::kNone);
  EXPECT_EQ(at(2048, 2047), TailPlan::kNone);
}

}  // namespace
