// The last rounds of a paired schedule (tile_scheduler.h), dealt tile by
// tile. Paired tiles cost the same a pair, so a call of P pairs on G CTAs
// takes ceil(P / G) pair times while the work is P / G of them: with 2752
// tiles of 192 rows on 132 SMs (head dim 64 causal at 8k-16k on the FA3
// grid) 11 pair times for 10.4 of work, 5% of the SMs' time idle at the end;
// 1024 pairs (head dim 128's causal cells) take 8 for 7.76.
// Single tiles are finer: the pairs of the partial last round (and, for head
// dim 64's 192-row kernel, of the full round before it) are split, and their
// tiles go, longest first, to the CTA with the least work so far (ties: the
// lowest index). The rounds before stay in pairs, dealt round robin, for
// their L2 reuse. Which kernels take a plan, how many rounds it deals and up
// to how many keys are measured choices (tail_policy.h). The plan is built
// on the host once per shape (flash_fwd_launch.h) and travels in the
// kernel's parameters; it is used only where the model below says the last
// CTA finishes earlier than with pairs.
//
// The cost model: a tile costs its key blocks plus kTileOverheadBlocks (what
// a tile spends outside its key loop: Q and first K waits, the lone first
// Q·Kᵀ, the last P·V and the epilogue, 3005-5537 cycles in the 2026-11-27c
// timeline against 1500-2400 cycles a key block; docs/kernels.md).
//
// Which CTA computes a tile never changes its result (tile_scheduler.h):
// the plan changes timing, not bits.
#pragma once

#include <cute/config.hpp>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <numeric>
#include <queue>
#include <utility>
#include <vector>

#include "sm90/mask.h"
#include "sm90/tile_decode.h"

namespace flashcore::sm90 {

struct TailPlan {
  static constexpr int kMaxCtas = 144;               // a grid wider than this runs without a plan
  static constexpr int kMaxTiles = 4 * kMaxCtas;     // the last two rounds: < 2 * grid pairs
  static constexpr int kMaxRounds = 64;  // beyond, the tail is under 1.6% of the work: no plan
  static constexpr int32_t kNone = 0x7fffffff;
  int32_t first_k = kNone;   // a CTA's k-th tile comes from the plan from k = first_k on
  int32_t tail_begin = 0;    // the first tile of the plan (tiles before it are dealt in pairs)
  uint16_t begin[kMaxCtas + 1] = {};  // CTA b's tiles: tiles[begin[b] .. begin[b + 1])
  uint16_t tiles[kMaxTiles] = {};     // offsets from tail_begin
};

// The k-th tile of CTA b of g with paired tiles (tile_scheduler.h), from the
// plan where it has one; >= num_tiles once the CTA is done.
CUTE_HOST_DEVICE int paired_tile_at(int k, int b, int g, TailPlan const& plan, int num_tiles) {
  if (k >= plan.first_k) {
    int const i = plan.begin[b] + (k - plan.first_k);
    return i < plan.begin[b + 1] ? plan.tail_begin + plan.tiles[i] : num_tiles;
  }
  return 2 * ((k >> 1) * g + b) + (k & 1);
}

// What a tile spends outside its key loop, in key blocks (the model above).
constexpr int kTileOverheadBlocks = 2;

// The model's cost of each query block of a paired call (uniform lengths):
// its key blocks (BlockMask, as the kernel walks them; at least one where the
// kernel visits a masked block anyway, kOneBlockAtLeast: seq_info.h
// tile_work) plus kTileOverheadBlocks.
template <int kBlockM, int kBlockN>
std::vector<int> query_block_costs(int units, int seqlen_q, int seqlen_k, int window_left, int window_right,
                                   bool one_block_at_least, int row_shift = 0) {
  BlockMask<kBlockM, kBlockN, true> const mask{seqlen_q, seqlen_k, window_left, window_right, row_shift};
  std::vector<int> costs(size_t(units > 0 ? units : 0));
  for (int u = 0; u < units; ++u) {
    int n0 = 0, n1 = 0;
    mask.n_block_range(u, n0, n1);
    int const blocks = n1 > n0 ? n1 - n0 : 0;
    costs[size_t(u)] = (one_block_at_least && blocks == 0 ? 1 : blocks) + kTileOverheadBlocks;
  }
  return costs;
}

// Builds the plan for num_tiles paired tiles on `grid` CTAs that deals the
// partial last round of pairs and the full_rounds rounds before it tile by
// tile; cost(t) is tile t's cost in key blocks, kTileOverheadBlocks
// included. No plan (first_k = kNone) when no full round would stay in
// pairs, there are more than kMaxRounds rounds, the grid is wider than
// kMaxCtas, or the plan would not finish earlier than the pairs. How much to
// deal is measured, not modeled (tail_policy.h): the model puts both deals
// 1-3% ahead nearly everywhere, and dealing two rounds was slower than the
// pairs at head dims 128 and 256.
template <class Cost>
TailPlan make_tail_plan(int num_tiles, int grid, int full_rounds, Cost&& cost) {
  TailPlan plan;
  int const units = num_tiles / 2 + (num_tiles & 1);  // pairs (and a middle tile); no overflow at INT_MAX
  int const rounds = grid > 0 ? units / grid : 0;
  int const keep_rounds = rounds - full_rounds;  // rounds of pairs dealt round robin
  if (full_rounds < 0 || keep_rounds < 1 || rounds > TailPlan::kMaxRounds || grid > TailPlan::kMaxCtas) return plan;
  int const keep = keep_rounds * grid;
  int const tail_begin = 2 * keep;
  int const tail = num_tiles - tail_begin;
  if (tail <= 0 || tail > TailPlan::kMaxTiles) return plan;  // (a full deal needs full_rounds <= 1)
  // Each CTA's work in the kept rounds, and what it would have with pairs to the end.
  std::vector<int64_t> load(grid, 0), paired(grid, 0);
  for (int t = 0; t < num_tiles; ++t) {
    int const b = (t / 2) % grid;
    (t < tail_begin ? load : paired)[b] += cost(t);
  }
  int64_t paired_end = 0;
  for (int b = 0; b < grid; ++b) paired_end = std::max(paired_end, load[b] + paired[b]);
  // Longest first onto the least-loaded CTA (lowest index on ties): a heap
  // of (load, CTA), O(tail log grid).
  std::vector<int> order(tail);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return cost(tail_begin + a) > cost(tail_begin + b); });
  using Slot = std::pair<int64_t, int>;
  std::priority_queue<Slot, std::vector<Slot>, std::greater<Slot>> least;
  for (int b = 0; b < grid; ++b) least.push({load[b], b});
  std::vector<std::vector<int>> mine(grid);
  // The finish counts the CTAs that get no tail tile too: one of them may
  // hold the largest load of the kept rounds (uneven costs).
  int64_t end = *std::max_element(load.begin(), load.end());
  for (int i : order) {
    auto [l, b] = least.top();
    least.pop();
    l += cost(tail_begin + i);
    end = std::max(end, l);
    least.push({l, b});
    mine[b].push_back(i);
  }
  if (end >= paired_end) return plan;
  int n = 0;
  for (int b = 0; b < grid; ++b) {
    plan.begin[b] = uint16_t(n);
    for (int i : mine[b]) plan.tiles[n++] = uint16_t(i);
  }
  plan.begin[grid] = uint16_t(n);
  plan.first_k = 2 * keep_rounds;
  plan.tail_begin = tail_begin;
  return plan;
}

// The plan of a paired call (uniform lengths: a tile's cost depends only on
// its query block), tiles in tile_decode.h's paired order: what the launcher
// builds (flash_fwd_launch.h tail_plan_for) and the host test checks.
template <int kBlockM, int kBlockN>
TailPlan make_paired_tail_plan(int full_rounds, int max_keys, int num_tiles, int grid, int units, int heads_q,
                               int batch, TileDivisors const& divisors, int seqlen_q, int seqlen_k, int window_left,
                               int window_right, bool one_block_at_least, int row_shift = 0) {
  if (seqlen_k > max_keys) return TailPlan{};
  std::vector<int> const unit_cost = query_block_costs<kBlockM, kBlockN>(units, seqlen_q, seqlen_k, window_left,
                                                                         window_right, one_block_at_least, row_shift);
  return make_tail_plan(num_tiles, grid, full_rounds, [&](int t) {
    return unit_cost[size_t(decode_tile(t, true, units, heads_q, batch, divisors).unit)];
  });
}

}  // namespace flashcore::sm90
