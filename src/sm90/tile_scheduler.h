// Persistent static tile scheduler. A tile is (unit, head, batch); a CTA
// processes its tiles k = 0, 1, 2, ... in order. A unit is a query block, or
// for split-KV sequences a chunk of keys (seq_info.h: tile_work).
//
// Without a causal-like mask every tile costs the same: tiles of one
// (batch, head) are consecutive and CTA b takes tile k*grid + b, so CTAs that
// run at the same time share K/V in L2.
//
// With a causal-like mask (and more tiles than CTAs: tuning_table.h pair_tiles)
// a query block costs as many key blocks as lie left
// of its diagonal. Tiles are then dealt in pairs: query block i and block
// num_m-1-i of the same head, whose costs add up to the same total for every
// pair, so a round-robin over pairs gives every CTA nearly equal work, and
// pairs of one head stay consecutive for L2 reuse. (Two earlier schemes lost
// 10-35%: plain round-robin gave some CTAs 3x the work of others at 16k
// tokens; a longest-first order over all heads balanced the work but
// streamed every head's K/V through L2 once per query block.) With an odd
// number of query blocks the middle blocks follow after all pairs.
//
// With K/V multicast (kernel_traits.h kClusterM = 2) the CTAs of a cluster
// take consecutive tiles 2i and 2i+1 (calls without a mask: never paired,
// every tile walks all key blocks): cluster c of G takes tiles
// (k*G + c)*2 + rank, so both walk the same number of key blocks in step
// (tile_at below), usually of one head (mainloop_load.h).
//
// Serving kernels (per-sequence lengths) with a causal-like mask deal their
// tiles in the same pairs, 2i and 2i+1 of one (head, batch) to one CTA, but
// which query blocks those are comes from each sequence's own length
// (seq_info.h tile_work pair_blocks: n-1-i and i of its n blocks), since the
// launch's unit count is the longest sequence's.
//
// Kernels with kernel_traits.h kTailPlan (tail_policy.h): the last round or
// two of pairs are dealt tile by tile from a host-built plan (tail_plan.h).
//
// Serving calls with a tile list (tile_list_plan.h: varlen calls of mixed
// lengths, KV-cache prefill) deal list entries instead: only the tiles with work,
// costliest sequence first, in rounds of alternating direction
// (tile_decode.h listed_tile_at); an entry holds the launch tile it stands
// for, decoded as above, and the count of entries ends the walk. Where the
// builder dealt the list's last rounds tile by tile (its tail:
// tile_list_plan.h), a CTA's tiles from the tail's first k on are list
// positions from its table.
//
// The assignment depends only on the shape, never on timing or data; a tile's
// result does not depend on which CTA computes it: results are bitwise
// reproducible and batch-invariant.
#pragma once

#include "sm90/kernel_params.h"
#include "sm90/seq_info.h"
#include "sm90/tile_decode.h"

namespace flashcore::sm90 {

template <class Params>
struct StaticTileScheduler {
  Params const& params;

  // The k-th tile of this CTA; >= num_tiles once the CTA is done, and for
  // every k after (so the first invalid tile ends the loop). The tiles grow
  // with k, except in a tail plan's part (tail_plan.h: longest first).
  CUTE_DEVICE int tile_at(int k) const {
    // With clusters of (C, 1, 1) CTAs and a grid of G CTAs (a multiple of C),
    // CTA rank r of cluster c = b / C takes tile (k * G/C + c) * C + r, which
    // is k * G + b: the same formula. Those calls have no mask, so never
    // paired tiles: left out of their (24-register) producer.
    int g = gridDim.x, b = blockIdx.x;
    if constexpr (Params::kServing) {
      if (params.tile_list != nullptr) {
        // (Read at every tile rather than once a role: held in registers
        // through the role's loop they took head dim 128's 64-row serving
        // kernels from 231 to 255 registers; the tail is off by default.)
        if (params.tile_tail != nullptr) {
          int const first_k = load_index(params.tile_tail);
          if (k >= first_k) {
            int const q = k - first_k;
            return q < load_index(params.tile_tail + 1) ? load_index(params.tile_tail + 2 + q * g + b)
                                                        : kTileListNoTail;
          }
        }
        return listed_tile_at(k, b, g, params.paired_tiles);
      }
    }
    if (Params::kClusterM > 1 || !params.paired_tiles) return k * g + b;
    if constexpr (Params::kTailPlan) return paired_tile_at(k, b, g, params.tail, params.num_tiles);
    return 2 * ((k >> 1) * g + b) + (k & 1);
  }
  CUTE_DEVICE bool valid(int tile) const {
    if constexpr (Params::kServing) {
      if (params.tile_list != nullptr) return tile < load_index(params.tile_list);
    }
    return tile < params.num_tiles;
  }

  CUTE_DEVICE TileCoord decode(int tile) const {
    if constexpr (Params::kServing) {
      if (params.tile_list != nullptr) tile = load_index(params.tile_list + 1 + tile);
    }
    // Serving kernels pair units 2i and 2i+1 of one (head, batch) in
    // tile_work (their query blocks from each sequence's own length): the
    // tile index itself decodes as unpaired.
    return decode_tile(tile, Params::kClusterM == 1 && !Params::kServing && params.paired_tiles, params.num_units,
                       params.heads_q, params.batch, params.divisors);
  }
};

// What a tile index means to each role that walks the tiles (the K/V
// producer, Q's loader, the consumers, and the epilogue of the kernels that
// recompute it: kernel_traits.h kLeanTileState): its coordinates, its
// sequence, and its query block and key blocks.
struct TileInfo {
  TileCoord t;
  SeqInfo si;
  TileWork w;
};

template <class Traits, class Scheduler>
CUTE_DEVICE TileInfo tile_info(Scheduler const& scheduler, SeqParams const& seq, int tile) {
  TileCoord const t = scheduler.decode(tile);
  SeqInfo const si = seq_info<Traits::kServing>(seq, t.batch);
  return {t, si,
          tile_work<Traits::kBlockM, Traits::kBlockN, Traits::kServing, Traits::kIssueAhead, Traits::kFrontPad>(
              seq, si, t.unit, row_shift_of(scheduler.params), Traits::kServing && scheduler.params.paired_tiles)};
}

}  // namespace flashcore::sm90
