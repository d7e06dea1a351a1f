// What a tile index means: its (unit, head, batch) coordinates, in the
// order tile_scheduler.h describes. Host and device code (the host build of
// tests/cpp/test_tile_decode.cpp checks it against plain division on every
// tile of small problems and on samples up to 2^31 tiles).
//
// The divisors are fixed for a launch, so the host prepares them once as
// cutlass::FastDivmod (multiplier and shift): a division then costs an
// IMAD.HI and a shift instead of about 20 instructions and a MUFU.RCP, which
// queues behind the other warpgroup's exponentials. Same-run A/B on an H100
// (bench/results/2026-11-27d-h100/ab1-fast-divmod-o-in-v-medians.txt, three
// rounds, output bits identical): head dim 64 1.9-3.7% faster at 512-2k
// tokens, head dim 128 1.1-1.3% at 512-1k, head dim 256 level; head dim
// 128's unmasked 2k cell, bimodal on this card, came out 2-9% slower in two
// runs (docs/kernels.md, "Next experiments").
#pragma once

#include <cute/config.hpp>
#include <cutlass/fast_math.h>

namespace flashcore::sm90 {

struct TileCoord {
  int unit, head, batch;
};

// Per launch: units (query blocks or split chunks) per (head, batch), the
// pairs of them (paired tiles), query heads, and the GQA group (query heads
// per K/V head). Each divisor is at least 1: FastDivmod's constructor
// divides by it.
struct TileDivisors {
  cutlass::FastDivmod units{}, pairs{}, heads{}, group{};
};

inline TileDivisors make_tile_divisors(int units, int heads, int group) {
  auto at_least_one = [](int v) { return v > 1 ? v : 1; };
  return {cutlass::FastDivmod(at_least_one(units)), cutlass::FastDivmod(at_least_one(units / 2)),
          cutlass::FastDivmod(at_least_one(heads)), cutlass::FastDivmod(at_least_one(group))};
}

// Tiles of one (batch, head) are consecutive, heads fastest after units.
// Paired tiles (causal-like masks, one CTA): tile 2j is query block
// num_units - 1 - i and tile 2j + 1 is block i of pair j = (head, batch) *
// pairs + i; with an odd number of units the middle blocks of every
// (batch, head) follow after all pairs.
CUTE_HOST_DEVICE TileCoord decode_tile(int tile, bool paired_tiles, int num_units, int heads_q, int batch,
                                       TileDivisors const& d) {
  int unit, bh;
  if (paired_tiles) {
    int const pairs = num_units >> 1;
    int const paired = 2 * pairs * heads_q * batch;
    if (tile < paired) {
      int i;
      d.pairs(bh, i, tile >> 1);
      unit = (tile & 1) ? i : num_units - 1 - i;
    } else {
      bh = tile - paired;
      unit = pairs;
    }
  } else {
    d.units(bh, unit, tile);
  }
  int b, h;
  d.heads(b, h, bh);
  return {unit, h, b};
}

// Serving kernels' causal pairs (seq_info.h tile_work, tile_scheduler.h):
// unit u of a sequence of n query blocks (u < n) is its block n-1-u/2 for
// even u and (u-1)/2 for odd u (n-1, 0, n-2, 1, ...), so units 2i and 2i+1,
// dealt to one CTA, cost about n+1 key blocks together, whatever i; a
// permutation of the n blocks (tests/cpp/test_tile_decode.cpp).
CUTE_HOST_DEVICE int paired_block(int u, int n) { return (u & 1) ? (u >> 1) : n - 1 - (u >> 1); }

// No tile from a tile list's tail (tile_list.h): past every list entry.
constexpr int32_t kTileListNoTail = 0x7fffffff;

// The k-th tile of CTA b of g over a tile list (tile_list_plan.h), whose
// entries come costliest sequence first: round r deals g tiles (g pairs of
// consecutive entries when paired), CTA b taking slot b of even rounds and
// slot g-1-b of odd ones, so the CTA that drew a round's costliest tile
// draws the next round's cheapest. Grows with k (>= the entry count once the
// CTA is done, as tile_scheduler.h expects); over all CTAs a permutation of
// the entries (tests/cpp/test_tile_decode.cpp).
CUTE_HOST_DEVICE int listed_tile_at(int k, int b, int g, bool paired) {
  int const r = paired ? k >> 1 : k;
  int const slot = r * g + ((r & 1) ? g - 1 - b : b);
  return paired ? 2 * slot + (k & 1) : slot;
}

}  // namespace flashcore::sm90
