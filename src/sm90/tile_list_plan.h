// Real-tile lists for serving calls whose sequences differ in length
// (varlen calls of mixed lengths, KV-cache prefill): which calls take one
// and how much workspace it needs (host side; the list is built on the
// device by tile_list.cu and read by tile_scheduler.h).
//
// Why: a serving launch has max_seqlen_q / block_m units per (head, batch),
// the longest sequence's query blocks, so a shorter sequence leaves empty
// units, and the static round robin (tile_scheduler.h) deals them at the
// same places of every (head, batch): the CTAs that draw the empty places
// run short, the ones that draw the long sequences' last blocks long. A
// simulation of the deal (tools/tile-deal-sim) with a tile's cost as its
// key blocks + 1.5 (random lengths of 100-8192 tokens, 4-64 sequences, 40
// draws a head count) put the busiest CTA
// at 1.15x the mean work at 16 heads (1.33x at 8, 1.09x at 32), and 1.70x
// for sequences of 4096 and 8192 tokens. The list holds only the tiles that
// have work, whole sequences in order of cost (the costliest first: longest
// processing time first), each sequence's (head, unit) tiles together as
// before (K/V reuse in L2), causal units still in the order n-1, 0, n-2, 1,
// ... of a sequence's own blocks (seq_info.h pair_blocks) and dealt two
// consecutive entries a CTA, so a pair costs about n+1 key blocks (with an
// odd n pairs straddle heads: a head whose entries start at an odd index
// lists its units last first, so the straddling pair is middle + middle),
// in rounds that alternate direction (tile_decode.h listed_tile_at): the
// same simulation gives 1.017x at 16 heads (1.05x at 8, 1.01x at 32; 1.044x,
// 1.12x and 1.03x without the odd heads' order) and 1.03x for the 4096 +
// 8192 pair. KV-cache prefill has no empty unit but the same
// problem at a sequence's grain: its pairs are consecutive tiles, so a band
// of CTAs draws the longest cache's pairs (8-16 chunks of 512 tokens over
// random caches up to 16k at 8-32 heads: 1.22-1.63x the mean work;
// 1.04-1.17x with the list). Measured, same-run A/Bs on an H200
// (bench/results/2026-11-30c-h200/, bits identical): varlen 1.04-1.46x on
// 21 of 22 mixed-length batches, KV-cache prefill 1.04-1.31x on 5 of 6,
// the others level; the odd heads' order 3.0-12.6% more on 8 causal
// mixed-length batches (bench/results/2026-11-30d-h200/call2-*). Which CTA
// computes a tile never changes its bits.
//
// The tail (2026-11-30d, off unless FLASHCORE_TILE_LIST_TAIL is set): the
// list's last rounds still leave some CTAs more work than others where few
// tiles a CTA remain (sequences' pairs differ in cost; 1.05x the mean work
// on random batches at 8 heads, 1.19x on time_shapes.py's vrB8S4096D256,
// 1.24-1.91x on KV-cache prefill of 8-16 heads). The builder can deal the
// last rounds as single tiles, costliest first, each round's to the CTAs
// with the least work so far (as tail_plan.h does on the host for uniform
// calls), where the round robin would leave the busiest CTA more than
// tile_list_tail_min_excess() / 64 over the mean and the greedy deal
// finishes earlier: the simulation (tools/tile-deal-sim "greedy tail")
// puts those at 1.01-1.07x. Measured (same-run A/Bs on an H200,
// bench/results/2026-11-30d-h200/call3-*, call4-*, bits identical) it
// pays where the imbalance is large: KV-cache prefill of 8 x 512 rows over
// caches of up to 16k keys at head dim 256 703.5 -> 477.6 us, random causal
// batches at head dim 256 (4 x up to 8k) 263.8 -> 245.9; but with the gate
// at 1.19x the other 10 shapes ran 1-2% slower (2.5-6 us a call: the
// builder's accounting, call6-*, not the kernel's reads of the tail), and
// with the gate at 1.016x, where it deals on smaller imbalances, 4-15%
// slower though the simulation put them 1-9% faster.
//
// The lengths are in device memory and the host never reads them (no copy,
// no synchronization: graph capture holds), so the list is built by a
// one-CTA kernel launched before the attention kernel, which waits for it
// (programmatic dependent launch, launch_attrs.h).
//
// Host-only and CUDA-free: the CPU tests read it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>

#include "common/problem.h"
#include "sm90/split_calls.h"
#include "sm90/tuning_table.h"

namespace flashcore::sm90 {

// The builder ranks sequences by cost in one CTA with a quadratic count
// (tile_list.cu): at 512 sequences a few microseconds.
constexpr int64_t kTileListMaxSeqs = 512;
// The tail: rounds of the deal (pairs, or single tiles without pairing) it
// re-deals, and the widest grid it serves. The builder sorts the tail's
// tiles one a thread (2 x rounds x CTAs <= 1024).
constexpr int kTileListTailMaxRounds = 3;
constexpr int kTileListTailMaxCtas = 170;
static_assert(2 * kTileListTailMaxRounds * kTileListTailMaxCtas <= 1024, "tail tiles: one a builder thread");

struct TileListPlan {
  int64_t entries = 0;  // the most tiles with work the call can have; 0: no list
  int64_t bytes = 0;    // workspace: the count and the entries, rounded to 256 bytes, then the tail
  // The tail (tile_list.h TileListParams::tail): rounds re-dealt (0: none),
  // for a grid of up to tail_ctas CTAs, at int32 offset tail_offset from
  // the list, dealt where the round robin leaves the busiest CTA more than
  // tail_min_excess / 64 over the mean.
  int32_t tail_rounds = 0, tail_ctas = 0, tail_min_excess = 0;
  int64_t tail_offset = 0;

  bool used() const { return entries > 0; }
};

// Ints the tail takes: its first k and rows, then rows x CTAs entries (pairs
// split: two rows a round).
constexpr int64_t tile_list_tail_ints(int rounds, int ctas) { return 2 + 2 * int64_t(rounds) * ctas; }

// FLASHCORE_TILE_LIST=0 in the environment turns the lists off (the A/B
// baseline: the same bits, the launch's own round robin).
inline bool tile_list_allowed() {
  static const bool allowed = env_switch_on("FLASHCORE_TILE_LIST");
  return allowed;
}

// FLASHCORE_TILE_LIST_TAIL=n: the tail's rounds (at most
// kTileListTailMaxRounds). Off unless set: measured (2026-11-30d, above) it
// costs 1-2% where it does not deal (a few microseconds a call) and more
// where it deals without a large imbalance to remove.
inline int tile_list_tail_rounds() {
  static const int rounds = int(std::min<int64_t>(env_positive_or("FLASHCORE_TILE_LIST_TAIL", 0), kTileListTailMaxRounds));
  return rounds;
}

// FLASHCORE_TILE_LIST_TAIL_GATE=n: the tail only where the round robin
// leaves the busiest CTA more than n/64 of the mean work over the mean
// (default 12: 1.19x; the tested gates were 1 and 12).
inline int tile_list_tail_min_excess() {
  static const int excess = int(std::min<int64_t>(env_positive_or("FLASHCORE_TILE_LIST_TAIL_GATE", 12), 1024));
  return excess;
}

// The list a call runs with, for a serving tile of block_m rows whose
// launch has max_splits split chunks at most a sequence (1: no split; a
// call that runs its chunks in one CTA passes 1) and `slots` CTAs at once.
// Only serving calls whose sequences' costs may differ: varlen calls whose
// query lengths may differ (empty units), KV-cache calls (chunked prefill:
// the same query rows against caches of different lengths, whose pairs of
// one sequence the round robin gives to a band of CTAs) and varlen calls
// whose key lengths may differ; of few enough sequences for the builder and
// more launch tiles than one wave. Calls whose every sequence may split its
// keys (decode: at most 64 query rows a sequence) keep their own schedules
// (split_policy.h, chunk_fold.h), as timed on their own shapes. The
// entries bound the real tiles: a sequence of L rows has at most
// ceil(L / block_m) <= L / block_m + 1 query blocks, or max_splits chunks,
// so a head has at most ceil(rows / block_m) + num_seqs * max_splits tiles
// for the call's rows (and never more than the launch's units * num_seqs).
// Bad metadata whose lengths add up to more only loses the tiles past the
// bound (wrong results, no access out of bounds: seq_info.h).
inline TileListPlan plan_tile_list(const Problem& p, int block_m, int64_t max_splits, int slots,
                                   int tail_rounds = tile_list_tail_rounds()) {
  TileListPlan plan;
  if (p.batch < 2 || p.batch > kTileListMaxSeqs || !tile_list_allowed()) return plan;
  bool const rows_vary = p.varlen_q && fewest_rows_per_sequence(p) != rows_per_sequence(p);
  bool const keys_vary = p.kv_cache || (p.varlen_k && p.total_k != p.batch * p.seqlen_k);
  if (!rows_vary && !keys_vary) return plan;
  if (rows_per_sequence(p) <= kSplitMaxRows) return plan;
  int64_t const splits = std::max<int64_t>(1, max_splits);
  int64_t const units = std::max(ceil_div(p.seqlen_q, block_m), splits);
  if (units * p.heads_q * p.batch <= slots) return plan;
  int64_t const rows = p.varlen_q ? p.total_q : p.batch * p.seqlen_q;
  int64_t const per_head = std::min(units * p.batch, ceil_div(rows, block_m) + p.batch * splits);
  int64_t const entries = per_head * p.heads_q;
  if (entries + 1 >= (int64_t(1) << 31)) return plan;
  plan.entries = entries;
  plan.bytes = ((entries + 1) * 4 + 255) / 256 * 256;
  int const rounds = std::min(tail_rounds, kTileListTailMaxRounds);
  if (rounds > 0 && slots <= kTileListTailMaxCtas) {
    plan.tail_rounds = rounds;
    plan.tail_ctas = slots;
    plan.tail_min_excess = tile_list_tail_min_excess();
    plan.tail_offset = plan.bytes / 4;
    plan.bytes += (tile_list_tail_ints(rounds, slots) * 4 + 255) / 256 * 256;
  }
  return plan;
}

}  // namespace flashcore::sm90
