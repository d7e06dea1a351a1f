// The committed tuning table: which tile shape dispatch uses for a problem on
// an sm90 GPU. Picked from flashcore-tune runs on an H100 (bench/results/):
//
//  - block_n (keys per step) fixes the order of the floating-point reduction
//    of a row, so it depends only on dtype and head dim: never on the batch or
//    on the GPU's load, which keeps results batch-invariant.
//  - block_m (query rows per CTA) does not change any row's arithmetic (the
//    GPU test BlockMDoesNotChangeResults checks it bit for bit), so it may
//    follow the total amount of work: 64-row tiles when 128-row tiles would
//    leave more than half of the SMs idle (small batches, short sequences),
//    and for decode with GQA packing (gqa_pack.h), whose tiles hold only the
//    query heads of one KV head.
//  - Head dim 64 also has 192-row tiles (three consumer warpgroups). Dispatch
//    does not pick them yet: they are selectable with config.block_m = 192.
//    In a same-run A/B on an H100 (bench/results/2026-11-23-h100/
//    mask-and-tiles.txt) they were 9-13% faster than 128-row tiles on long
//    calls without a mask (bf16 B4 H32 S4096, B1 H32 S16384), 4-5% at 512
//    tokens (fp16 B32 H16, bf16 B32 H32), 4% causal at 16k, and 16% slower
//    causal at 1k (bf16 B16 H32). They enter this table once the GPU tests
//    have run on them and flashcore-tune has placed the boundaries.
#pragma once

#include <cstdint>

#include "common/problem.h"
#include "flashcore/attention.h"
#include "sm90/gqa_pack.h"

namespace flashcore::sm90 {

struct TileChoice {
  int block_m, block_n;
  int stages;  // 0: the tile's first compiled variant (kernel_registry.h)
};

// Shared-memory plan of head dim 128's 128-row tiles (kernel_traits.h): the
// 3-stage variant keeps one more K/V block in flight but stages O through Q's
// buffer, so a tile's Q load waits for the previous tile's O store. On the
// H100 (bench/results/2026-11-22b-h100/ab-stages.txt, same-process A/B
// against cuDNN) it is 1.5-5% faster without a mask from 2k keys up and
// 2-15% slower for shorter or causal sequences, which have few key blocks per
// tile. The stage count changes no arithmetic: any choice is bit-identical.
inline int tuned_stages(int head_dim, int block_m, bool masked, int64_t seqlen_k, bool serving) {
  bool const long_unmasked = !masked && seqlen_k >= 2048;
  return !serving && head_dim == 128 && block_m == 128 && long_unmasked ? 3 : 0;
}

// A plain call whose mask makes tile costs differ between query blocks (a
// right window, such as causal): its tiles are dealt in cost-balanced pairs
// (tile_scheduler.h, pair_tiles below). Per-sequence lengths (serving calls,
// the only ones that split keys) and packed decode break the pairing's premise.
inline bool costs_vary_by_tile(const Problem& p) {
  return !packs_gqa(p) && !p.has_per_seq_lengths() && p.window_right < p.seqlen_k;
}
// ... and grow along the query blocks (no left window: a sliding window's
// tiles cost about the same and keep 128 rows).
inline bool triangular_costs(const Problem& p) { return costs_vary_by_tile(p) && p.window_left >= p.seqlen_k; }

// triangular (triangular_costs of the call): when its 128-row tiles fit in
// one wave, the time is that of the longest tile (all of its key blocks);
// 64-row tiles dealt in pairs (query block i with num_m-1-i, twice as many
// tiles) give every CTA about as many key blocks, each at ~0.8x the time
// (half the rows, one consumer warpgroup).
// On an H100, fp16 B1 H16 S1024 D64 causal: 11.78 us against 12.64 us
// (bench/results/2026-11-22c-h100, tools/latency-breakdown, same process).
inline TileChoice tuned_tile(DType /*dtype*/, int head_dim, int64_t tiles_of_128_rows, int num_sms,
                             bool gqa_packed_decode, bool triangular = false) {
  int const block_n = head_dim == 256 ? 64 : 128;
  bool const has_m64 = head_dim == 64 || head_dim == 128;
  bool const small = tiles_of_128_rows * 2 <= num_sms;
  bool const one_triangular_wave = triangular && tiles_of_128_rows <= num_sms;
  // Packed decode has at most `group` (<= 64 in practice) valid rows a tile.
  return {has_m64 && (small || gqa_packed_decode || one_triangular_wave) ? 64 : 128, block_n, 0};
}

// Whether the tiles of a call with a causal-like mask are dealt in pairs
// (tile_scheduler.h): as soon as some CTA would get two tiles. With at most
// one tile per CTA pairing would only leave SMs idle; with more, the two
// tiles a CTA gets round-robin can add up to almost twice the longest.
inline bool pair_tiles(int64_t tiles, int num_sms) { return tiles > num_sms; }

}  // namespace flashcore::sm90
