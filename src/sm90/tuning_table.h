// The committed tuning table: which tile shape dispatch uses for a problem on
// an sm90 GPU. Picked from flashcore-tune runs on an H100 (bench/results/):
//
//  - block_n (keys per step) fixes the order of the floating-point reduction
//    of a row, so it depends only on the head dim and, at head dim 256, on a
//    plain call's key count and mask (serving calls: 64 at every length;
//    tuned_block_n): never on the batch or on the GPU's load, which keeps
//    results batch-invariant.
//  - block_m (query rows per CTA) does not change any row's arithmetic (the
//    GPU test BlockMDoesNotChangeResults checks it bit for bit), so it may
//    follow the total amount of work: 64-row tiles when 128-row tiles would
//    leave more than half of the SMs idle (small batches, short sequences),
//    and for decode with GQA packing (gqa_pack.h), whose tiles hold only the
//    query heads of one KV head.
//  - Head dim 64 also has 192-row tiles (three consumer warpgroups) for
//    plain calls; see tuned_tile for when they are picked.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "common/problem.h"
#include "flashcore/attention.h"
#include "sm90/gqa_pack.h"
#include "sm90/split_calls.h"

namespace flashcore::sm90 {

// Every tile is compiled with one K/V stage count a variant
// (tools/gen_sm90_kernels.py), so dispatch picks tiles and variants (K/V
// multicast, no turns, two CTAs an SM), never stage counts.
struct TileChoice {
  int block_m, block_n;
  int cluster_m = 1;  // 2: K/V multicast over pairs of CTAs (kernel_traits.h kClusterM)
};

// A plain call whose mask makes tile costs differ between query blocks (a
// right window, such as causal): its tiles are dealt in cost-balanced pairs
// (tile_scheduler.h, pair_tiles below). Not for the kernels of serving calls
// (per-sequence lengths or split keys: serving_costs_vary_by_tile below) nor
// packed decode (at most `group` rows, one query block).
// (A right window, unless the call is packed decode.)
inline bool mask_bounds_right(const Problem& p) { return !packs_gqa(p) && p.window_right < p.seqlen_k; }
inline bool costs_vary_by_tile(const Problem& p) { return !p.has_per_seq_lengths() && mask_bounds_right(p); }
// A call a serving kernel runs (per-sequence lengths or split keys) whose
// mask makes tile costs differ between a sequence's query blocks, and whose
// sequences all have the same query length (KV-cache calls; varlen calls
// whose packed rows fill every sequence to max_seqlen_q): its tiles are
// dealt in pairs too, each sequence's blocks paired from its own length
// (seq_info.h tile_work pair_blocks). Same-run A/B on an H200
// (bench/results/2026-11-30-h200/call1-*, bf16, causal varlen, two rounds,
// output bits identical): uniform batches 4-27% faster (B32 S512 D128 174
// -> 138 us, B2 S8192 D256 1229 -> 898); sequences of mixed lengths 6-12%
// slower (S*(j+1)/8 tokens for sequence j: the longest sequence sets the
// units of every (head, batch), the shorter ones' empty pairs sit at the
// same places in each, and the CTAs that draw those places run short, as a
// simulation of the static deal shows), so those keep block order round
// robin unless they run with a tile list (tile_list_plan.h: no empty units,
// pairs of consecutive entries; flash_fwd_launch.h). FLASHCORE_SERVING_PAIRS=0
// turns pairs off (the A/B baseline; serving_pairs_allowed below).
inline bool serving_pairs_allowed();
inline bool serving_costs_vary_by_tile(const Problem& p) {
  bool const uniform_rows = fewest_rows_per_sequence(p) == rows_per_sequence(p);
  return uniform_rows && mask_bounds_right(p) && serving_pairs_allowed();
}
// ... and grow along the query blocks (no left window: a sliding window's
// tiles cost about the same and keep 128 rows).
inline bool triangular_costs(const Problem& p) { return costs_vary_by_tile(p) && p.window_left >= p.seqlen_k; }

// The key block: 128 keys, except at head dim 256, whose two consumer
// warpgroups hold a 64 x 256 fp32 O each and fit 64 or 80 keys (80 is the
// most that fits shared memory with two K/V stages). Same-run A/Bs on an
// H100, bf16, three rounds each:
//  - bench/results/2026-11-23d-h100/ab2-d256-key-blocks-table.txt: 80 keys
//    2-5% faster without a mask from 1k keys and causal from 2k; 64 keys 4%
//    faster without a mask at 512 and 5-7% causal at 512 and 1k, where the
//    80-key blocks' masked and padded keys weigh more.
//  - bench/results/2026-11-25c-h100/ab3-d256-half-o-table.txt, after the
//    64-key kernel stopped staging O through Q's buffer (kernel_traits.h
//    kHalfO; 3-6% faster on its own cells): 64 keys are now also 1.4% faster
//    without a mask at 1k (246 against 250 us, every round) and 1.5% causal at
//    2k (267 against 271 us, two rounds of three); 80 keys stay 2% faster
//    causal at 4k, and without a mask at 2k the rounds spread by 8%.
//  - bench/results/2026-11-26e-h100/ab-blockn-table.txt, after Q got a
//    loader thread of its own (kernel_traits.h kQWarp), four rounds: 64 keys
//    2.5-16% faster at 512-1k and causal 2k; 80 keys faster without a mask
//    at 2k (medians 443 against 461 us); causal 4k's rounds are bimodal.
// The choice follows the sequence's own key count (uniform in a plain call)
// and the mask: never the batch, so results stay batch-invariant. Serving
// calls (per-sequence lengths in one launch) at head dim 256 take 64 keys
// whatever the lengths: their one compiled tile (kernel_traits.h), so that a
// sequence's key block never depends on the other sequences of its batch. A
// plain call of 2k keys and up (4k with a mask) gives the same bits as a
// serving call only with block_n = 64 (docs/numerics.md).
inline int tuned_block_n(int head_dim, int64_t seqlen_k, bool unmasked, bool serving = false) {
  if (head_dim != 256) return 128;
  if (serving) return 64;
  return seqlen_k < (unmasked ? 2048 : 4096) ? 64 : 80;
}

// What tile choice depends on, from the call (call_shape below).
struct CallShape {
  int64_t seqlen_q = 0;     // query rows of each (batch, query head)
  int64_t seqlen_k = 0;     // keys of each sequence (the key block, at head dim 256)
  int64_t sequences = 0;    // batch * query heads
  bool gqa_packed_decode = false;
  bool triangular = false;  // triangular_costs(): causal-like
  bool unmasked = false;    // no causal or window mask: every tile costs the same
  bool serving = false;     // per-sequence lengths or split keys: serving tiles (64/128 rows)
};

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// A dispatch switch for same-build A/B measurements: false when the
// environment variable `name` is "0". Callers read it once per process.
inline bool env_switch_on(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr || std::strcmp(v, "0") != 0;
}
// A dispatch threshold for the same A/Bs: the environment variable `name`
// when it holds a positive integer, else `fallback`.
inline int64_t env_positive_or(const char* name, int64_t fallback) {
  const char* v = std::getenv(name);
  long long const n = v != nullptr ? std::atoll(v) : 0;
  return n > 0 ? int64_t(n) : fallback;
}

// Head dim 64's one-warpgroup 64-row tile also runs two CTAs an SM
// (kernel_traits.h kCtasPerSm_, tools/gen_sm90_kernels.py TWO_CTA_TILES lists
// the same tiles). Alone on an SM, one warpgroup's chain (Q·Kᵀ, softmax,
// P·V) leaves the SM idle much of the time; with two CTAs the other CTA's
// warpgroup fills it. Same-run A/B on an H200, bf16/fp16, three rounds,
// output bits identical (bench/results/2026-11-29f-h200/call1-*, call2-*):
//  - against the one-CTA 64-row tile wherever there are more tiles than SMs:
//    15-29% faster (B8 H16 S128 5.1 -> 4.3 us, B32 H32 S512 260 -> 183,
//    causal B32 H32 S512 194 -> 138);
//  - against dispatch's tile before it (FLASHCORE_TWO_CTAS=0 in the same
//    build, call3-*), unmasked calls of more than one 64-row tile an SM: two
//    (256 tiles) B8 H16 S128 4.9 -> 4.3 us (-12%), B1 H16 S1024 13.0 -> 12.5
//    (-4%); four (512) B16 H16 S128 -4.4%, B8 H16 S256 -2.6%, but B2 H16
//    S1024 +1.0% and B1 H16 S2048 +0.3%; level from eight (B32 H16 S128,
//    B16 H16 S256) and slower further (B16 H16 S512 +10%, B32 H32 S512 +10%
//    against the 192-row multicast tile); 1-1.5% slower with at most one
//    tile an SM (two K/V stages against four), and 10% slower on the one-wave
//    causal call B1 H16 S1024, whose one-CTA tiles go in pairs.
// So: plain unmasked calls with more 64-row tiles than SMs and at most two an
// SM, or four for sequences of up to 256 rows (tuned_tile), and any plain
// unmasked call the caller runs on 64-row tiles with more tiles than SMs
// (tuned_two_ctas).
constexpr bool has_two_cta_kernel(int head_dim, int block_m, int block_n) {
  return head_dim == 64 && block_m == 64 && block_n == 128;
}
// FLASHCORE_TWO_CTAS=0 in the environment keeps one CTA an SM everywhere
// (and dispatch's tiles from before the two-CTA kernel).
inline bool two_ctas_allowed() {
  static const bool allowed = env_switch_on("FLASHCORE_TWO_CTAS");
  return allowed;
}
// The rule both tuned_tile and tuned_two_ctas apply: a plain call without a
// mask (no per-sequence lengths, no packed GQA decode) on a tile that has a
// two-CTA kernel, with more tiles than SMs.
inline bool two_ctas_fit(int head_dim, int block_m, int block_n, bool unmasked_plain_call, int64_t tiles, int num_sms) {
  return has_two_cta_kernel(head_dim, block_m, block_n) && unmasked_plain_call && tiles > num_sms && two_ctas_allowed();
}

// The tile choice, from the H100 tune run bench/results/2026-11-23b-h100/
// (flashcore-tune --suite all: every compiled tile on the FA3 and seed grids):
//
//  - 64-row tiles when 128-row tiles would fill at most half of the SMs, for
//    packed GQA decode (at most `group` valid rows a tile), and for serving
//    calls of at most 64 rows a sequence (split-KV in one CTA).
//  - head dim 64, unmasked plain calls of up to two 64-row tiles an SM (four
//    up to 256 rows): 64-row tiles, two CTAs an SM once there are more tiles
//    than SMs (has_two_cta_kernel above; measured on an H200, 2026-11-29f).
//  - triangular calls whose 128-row tiles fit in one wave: the time is that of
//    the longest tile (all of its key blocks); 64-row tiles dealt in pairs
//    (query block i with num_m-1-i, twice as many tiles) give every CTA about
//    as many key blocks, each at ~0.8x the time (half the rows, one consumer
//    warpgroup). fp16 B1 H16 S1024 D64 causal: 11.78 us against 12.64 us
//    (bench/results/2026-11-22c-h100, tools/latency-breakdown).
//  - head dim 64, 192-row tiles (plain calls only):
//    - no mask: CTAs take tiles round-robin and every tile costs the same, so
//      a call lasts (waves of tiles) x (rows a tile) / (speed per row). A
//      192-row tile does a row ~1.14x as fast as a 128-row one (bf16 B1 H32
//      S16384: 4137 against 4854 us with 21 against 32 waves), so it is picked
//      when waves192 * 192 < waves128 * 128 * 1.14. On the tuned grids that
//      picks every d64 shape where 192 rows measured faster (2.5-17%, 512
//      tokens and up) and none where they were slower (128/256 tokens, whose
//      padding grows; B1 H16 S1024: 96 tiles of 192 rows in one wave against
//      128 tiles of 128). test_tuning_table.cpp replays that run. Re-checked
//      after the 128-row kernel learned to issue ahead
//      (bench/results/2026-11-27e-h100/ab4-d64-m128-m192-table.txt, bf16,
//      medians of three rounds): 192 rows take 4% less time at B32 S512 and
//      17% at B8 S2048 without a mask, 2.5% causal at 2k and 4.7% at 4k.
//    - causal: faster from 2048 tokens (5%, 5%, 2%, 7% at 2k/4k/8k/16k),
//      slower at 512 and 1024 (5%, 16%), all measured with >= 2752 tiles.
//      Since a warpgroup passes over the key block masked for all of its
//      rows (mainloop_mma.h kSkipMaskedBlocks, 2026-11-29d), 192-row tiles
//      compute what 128-row tiles do and are faster at 1024 too: B16 H32
//      S1024 199.3 against 203.4 us in the same build, every round 1.6-2.1%
//      (H200, bench/results/2026-11-29d-h200/call1-ab1-*); still 10% slower
//      at 512 (145.1 against 131.7). Picked from 1024 query rows while there
//      are >= 8 tiles per SM; fewer (small batches) were not measured and
//      keep 128 rows.
//    - sliding windows were not measured and keep 128 rows.
inline TileChoice tuned_tile(DType /*dtype*/, int head_dim, const CallShape& w, int num_sms) {
  int const block_n = tuned_block_n(head_dim, w.seqlen_k, w.unmasked, w.serving);
  bool const has_m64 = head_dim == 64 || head_dim == 128;
  int64_t const tiles128 = ceil_div(w.seqlen_q, 128) * w.sequences;
  bool const small = tiles128 * 2 <= num_sms;
  bool const one_triangular_wave = w.triangular && tiles128 <= num_sms;
  // Serving calls whose sequences have at most 64 rows (decode, short
  // chunks) may split their keys, which only 64-row tiles can also do in
  // one CTA (splitkv_plan.h fold_splits).
  bool const split_rows = w.serving && w.seqlen_q <= kSplitMaxRows;
  // Two CTAs an SM (has_two_cta_kernel above): unmasked plain calls of more
  // 64-row tiles than SMs and up to two an SM, or four of sequences up to 256
  // rows (with fewer tiles than SMs, tuned_two_ctas keeps one CTA an SM).
  int64_t const tiles64 = ceil_div(w.seqlen_q, 64) * w.sequences;
  int64_t const two_cta_tiles = (w.seqlen_q <= 256 ? 4 : 2) * int64_t(num_sms);
  bool const two_ctas =
      two_ctas_fit(head_dim, 64, block_n, w.unmasked && !w.serving && !w.gqa_packed_decode, tiles64, num_sms) &&
      tiles64 <= two_cta_tiles;
  if (has_m64 && (w.gqa_packed_decode || split_rows || small || one_triangular_wave || two_ctas)) {
    return {64, block_n};
  }
  if (head_dim == 64 && !w.serving) {  // (packed decode returned above)
    int64_t const tiles192 = ceil_div(w.seqlen_q, 192) * w.sequences;
    bool const fewer_row_waves =
        ceil_div(tiles192, num_sms) * 192 * 100 < ceil_div(tiles128, num_sms) * 128 * 114;
    bool const long_triangular = w.triangular && w.seqlen_q >= 1024 && tiles192 >= 8 * int64_t(num_sms);
    if ((w.unmasked && fewer_row_waves) || long_triangular) return {192, block_n};
  }
  return {128, block_n};
}

// A plain call (no per-sequence lengths, no packed GQA decode) without a
// mask: every tile of it walks all keys. The calls the K/V-multicast and the
// two-CTA kernels take.
inline bool plain_unmasked(const Problem& p) {
  return !p.has_per_seq_lengths() && !packs_gqa(p) && !p.has_mask();
}

// Whether a K/V-multicast kernel (kernel_traits.h kClusterM) can take the
// call: a cluster's CTAs run tiles 2i and 2i+1 in step, over as many key
// blocks each, so the call is plain (no per-sequence lengths, no packed GQA
// decode), has no mask (every tile walks all keys) and an even number of
// tiles. Two tiles of one head share their loads; a pair that straddles two
// heads loads apart (mainloop_load.h), which only kernels with
// kPairsMayStraddle do: the others need an even number of query blocks a head.
inline bool cluster_eligible(const Problem& p, int block_m, int cluster_m, bool pairs_may_straddle) {
  if (!plain_unmasked(p)) return false;
  int64_t const blocks = ceil_div(p.seqlen_q, block_m);
  return pairs_may_straddle ? blocks * p.heads_q * p.batch % cluster_m == 0 : blocks % cluster_m == 0;
}

// FLASHCORE_SERVING_PAIRS=0 in the environment turns serving pairs off.
inline bool serving_pairs_allowed() {
  static const bool allowed = env_switch_on("FLASHCORE_SERVING_PAIRS");
  return allowed;
}

// FLASHCORE_CLUSTER=0 in the environment turns K/V multicast off.
inline bool cluster_allowed() {
  static const bool allowed = env_switch_on("FLASHCORE_CLUSTER");
  return allowed;
}

// K/V multicast over pairs of CTAs (kernel_traits.h kClusterM) halves the
// K/V bytes each SM pulls from L2. Same-run A/B on an H100, bf16, unmasked
// FA3-grid cells, three rounds, one build with FLASHCORE_CLUSTER=0 against
// the default (bench/results/2026-11-25d-h100/ab1-multicast-table.txt;
// output bits identical in every round):
//  - head dim 64, 192-row tiles: 2-3% faster at 4k and 16k tokens, where a
//    head has an even number of query blocks (pairs were kept within a
//    head); with pairs that may straddle two heads
//    (ab3-multicast-straddle-table.txt) 1.4-1.9% faster at 512, 1k, 8k and
//    16k and 1.5-1.8% on the fp16 seed shapes B16/B32 S512, 2k within the
//    rounds' spread;
//  - head dim 256, 80-key blocks (2k keys and up): 2% faster at 4k, 3.5% at
//    8k, 2% at 16k, level at 2k;
//  - head dim 128 (128-row tiles) and head dim 256 with 64-key blocks since
//    2026-11-26 (bench/results/2026-11-26d-h100/ab3-more-cluster-table.txt,
//    three rounds, bits identical), once V's TMA loads were one box a 64-dim
//    slice instead of 8-key boxes (kernel_traits.h SmemLayoutVt): head dim
//    128 2.7-3.2% faster at 4k-16k, 1.2% at 1k, level at 512 (medians of
//    three rounds); head dim 256 with 64 keys 0.8% at 512 and 1.0% at 1k.
//    With the 8-key boxes both were slower (head dim 128 0.5-3% at 512-4k,
//    level at 8k-16k; head dim 256 1% at 512-1k: 2026-11-25d).
// These tiles are compiled with multicast (tools/gen_sm90_kernels.py
// CLUSTER_TILES lists the same; each multicast kernel's launch checks at
// compile time that it is listed here, flash_fwd_launch.h).
// block_n does not matter: every block_n of these tiles has its multicast kernel.
constexpr bool has_cluster_kernel(int head_dim, int block_m, int /*block_n*/) {
  return (head_dim == 64 && block_m == 192) || (head_dim == 128 && block_m == 128) ||
         (head_dim == 256 && block_m == 128);
}

// K/V multicast where it is compiled and the call allows it. It changes only
// where K/V bytes come from, not the arithmetic: bit-identical results (GPU
// test ClusterKernelsMatchOneCtaKernels), so the choice may follow the batch.
// Head dim 64's 192-row kernel (three consumer warpgroups, a 32-register
// producer) loads straddling pairs; head dim 256's (24 registers) does not.
constexpr bool cluster_pairs_may_straddle(int head_dim) { return head_dim == 64; }

inline int tuned_cluster(const Problem& p, int block_m, int block_n) {
  int const d = int(p.head_dim);
  bool const use =
      has_cluster_kernel(d, block_m, block_n) && cluster_eligible(p, block_m, 2, cluster_pairs_may_straddle(d));
  return use && cluster_allowed() ? 2 : 1;
}

// Two consumer warpgroups without ping-pong turns, each running its softmax
// under its own P·V (kernel_traits.h kNoTurns_): head dim 128's 128-row
// tile, one CTA and K/V multicast, for calls of 1k keys and up. Same-run A/Bs on an H100, bf16,
// three rounds, output bits identical:
//  - bench/results/2026-11-26g-h100/ab1-d128-no-turns-table.txt (`nt`, a
//    patch that also took the turns from the multicast kernels): causal 1.8%
//    faster at 1k, 2.5% at 2k, 2.1% at 8k, 2.0% at 16k (4k: rounds spread
//    ±6%); 3.3% slower causal and 1.8% unmasked at 512 keys.
//  - bench/results/2026-11-27-h100/ab1-no-turns-from-1k-medians.txt (this
//    dispatch, against FLASHCORE_NO_TURNS=0 in the same build): causal 1.8%
//    faster at 1k, 2.7% at 2k, 2.9% at 4k, 1.0% at 8k, 3.4% at 16k.
//  - bench/results/2026-11-27c-h100/ab1-d128-c2-no-turns-table.txt (the
//    multicast twin, which runs the unmasked calls, against its turns in the
//    same build, three rounds, medians): 1k 0.7% slower (within the
//    rounds' spread), 2k 3.1% faster, 4k 2.5%, 8k 2.2%, 16k 2.3%.
//  - On an H200 (bench/results/2026-11-29b-h200/call2-ab1-*, three rounds):
//    turns kept 3.2% slower at 16k and 1.0% at 1k; no turns from 512 keys
//    (FLASHCORE_NO_TURNS_MIN_KEYS=512) 2.0% slower unmasked and 1.4%
//    causal at 512. (Multicast off there: 0.8-3.6% slower at 512 and 16k,
//    level at head dim 256 512, and 1.0% faster at head dim 256 unmasked
//    1k, the H100's reverse.)
//  - The serving kernel of the same tile (varlen and KV-cache calls that do
//    not split their keys; tools/gen_sm90_kernels.py SERVING_NO_TURNS_TILES)
//    since 2026-11-30 (bench/results/2026-11-30b-h200/call4-*, against
//    FLASHCORE_NO_TURNS=0 in the same build, varlen calls kept on the serving
//    kernels, five rounds, medians): causal B2 S8192 1.7% faster, mixed
//    lengths up to 8192 tokens 2.7%, unmasked B4 S4096 2.4%, causal 2k and 4k
//    1.1% and 4.6% (4k's rounds spread by 10%), mixed up to 2k and 4k level.
// The bits are those of the kernel with turns, so the choice may follow any
// shape.
constexpr bool has_no_turns_kernel(int head_dim, int block_m, int block_n) {
  return head_dim == 128 && block_m == 128 && block_n == 128;
}
// FLASHCORE_NO_TURNS=0 in the environment keeps the turns everywhere.
inline bool no_turns_allowed() {
  static const bool allowed = env_switch_on("FLASHCORE_NO_TURNS");
  return allowed;
}
// FLASHCORE_NO_TURNS_MIN_KEYS=N in the environment moves the key count from
// which the kernels without turns run (for same-build A/Bs; 1024 otherwise).
inline int64_t no_turns_min_keys() {
  static const int64_t keys = env_positive_or("FLASHCORE_NO_TURNS_MIN_KEYS", 1024);
  return keys;
}
inline bool tuned_no_turns(const Problem& p, int block_m, int block_n) {
  return has_no_turns_kernel(int(p.head_dim), block_m, block_n) && p.seqlen_k >= no_turns_min_keys() &&
         no_turns_allowed();
}

// The two-CTA kernel for a plain call without a mask on 64-row tiles (the
// table's or the caller's) once there are more tiles than SMs; with fewer,
// one CTA an SM and its four K/V stages. Same bits either way (GPU test
// TwoCtaKernelsMatchTheirOneCtaTwins), so the choice may follow the batch.
inline bool tuned_two_ctas(const Problem& p, int block_m, int block_n, int num_sms) {
  return two_ctas_fit(int(p.head_dim), block_m, block_n, plain_unmasked(p),
                      ceil_div(p.seqlen_q, block_m) * p.heads_q * p.batch, num_sms);
}

inline CallShape call_shape(const Problem& p) {
  CallShape w;
  w.seqlen_q = p.seqlen_q;
  w.seqlen_k = p.seqlen_k;
  w.sequences = p.batch * p.heads_q;
  w.gqa_packed_decode = packs_gqa(p);
  w.triangular = triangular_costs(p);
  w.unmasked = !p.has_mask();
  // Serving calls, and plain calls that split their keys: both run the
  // serving tiles (split_calls.h).
  w.serving = p.has_per_seq_lengths() || split_shape(p).max_splits > 1;
  return w;
}

// Whether the tiles of a call with a causal-like mask are dealt in pairs
// (tile_scheduler.h): as soon as some CTA would get two tiles. With at most
// one tile per CTA pairing would only leave SMs idle; with more, the two
// tiles a CTA gets round-robin can add up to almost twice the longest.
// `slots`: the CTAs resident at once (one an SM, two for the kernels of
// kernel_traits.h kCtasPerSm_).
inline bool pair_tiles(int64_t tiles, int slots) { return tiles > slots; }

}  // namespace flashcore::sm90
