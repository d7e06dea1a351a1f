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
// odd n pairs straddle heads and their costs spread: 4, 5 and 3 key blocks
// for n = 3 rather than 4 each), in rounds that
// alternate direction (tile_decode.h listed_tile_at): the same simulation
// gives 1.044x at 16 heads (1.12x at 8, 1.03x at 32) and 1.03x for the
// 4096 + 8192 pair. KV-cache prefill has no empty unit but the same
// problem at a sequence's grain: its pairs are consecutive tiles, so a band
// of CTAs draws the longest cache's pairs (8-16 chunks of 512 tokens over
// random caches up to 16k at 8-32 heads: 1.22-1.63x the mean work;
// 1.04-1.17x with the list). Measured, same-run A/Bs on an H200
// (bench/results/2026-11-30c-h200/, bits identical): varlen 1.04-1.46x on
// 21 of 22 mixed-length batches, KV-cache prefill 1.04-1.31x on 5 of 6,
// the others level. Which CTA computes a tile never changes its bits.
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

#include "common/problem.h"
#include "sm90/split_calls.h"
#include "sm90/tuning_table.h"

namespace flashcore::sm90 {

// The builder ranks sequences by cost in one CTA with a quadratic count
// (tile_list.cu): at 512 sequences a few microseconds.
constexpr int64_t kTileListMaxSeqs = 512;

struct TileListPlan {
  int64_t entries = 0;  // the most tiles with work the call can have; 0: no list
  int64_t bytes = 0;    // workspace: the count and the entries, rounded to 256 bytes

  bool used() const { return entries > 0; }
};

// FLASHCORE_TILE_LIST=0 in the environment turns the lists off (the A/B
// baseline: the same bits, the launch's own round robin).
inline bool tile_list_allowed() {
  static const bool allowed = env_switch_on("FLASHCORE_TILE_LIST");
  return allowed;
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
inline TileListPlan plan_tile_list(const Problem& p, int block_m, int64_t max_splits, int slots) {
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
  return plan;
}

}  // namespace flashcore::sm90
