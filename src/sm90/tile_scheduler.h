// Persistent static tile scheduler. A tile is (query block, head, batch); CTA
// b takes one tile per round r.
//
// Without a causal-like mask every tile costs the same: tiles of one
// (batch, head) are consecutive and CTA b takes tile r*grid + b, so CTAs that
// run at the same time share K/V in L2.
//
// With a causal-like mask tile costs differ (a query block sees as many key
// blocks as lie left of its diagonal). Tiles are then ordered longest first
// (query blocks from the bottom up, all heads of one block together) and dealt
// in a snake: round r goes b = 0..grid-1 when r is even and back when it is
// odd, so every CTA's total work is nearly equal (a plain round-robin gave
// some CTAs 3x the work of others at 16k tokens).
//
// The assignment depends only on the shape, never on timing or data; a tile's
// result does not depend on which CTA computes it: results are bitwise
// reproducible and batch-invariant.
#pragma once

namespace flashcore::sm90 {

struct TileCoord {
  int m_block, head, batch;
};

template <class Params>
struct StaticTileScheduler {
  Params const& params;

  // The tile of this CTA in round r; >= num_tiles when the CTA is done.
  CUTE_DEVICE int tile_at(int r) const {
    int g = gridDim.x, b = blockIdx.x;
    if (!params.longest_first) return r * g + b;
    return r * g + ((r & 1) ? g - 1 - b : b);
  }
  CUTE_DEVICE bool valid(int tile) const { return tile < params.num_tiles; }

  CUTE_DEVICE TileCoord decode(int tile) const {
    int m_block, bh;
    if (params.longest_first) {
      int heads_total = params.heads_q * params.batch;
      m_block = params.num_m_blocks - 1 - tile / heads_total;
      bh = tile % heads_total;
    } else {
      m_block = tile % params.num_m_blocks;
      bh = tile / params.num_m_blocks;
    }
    return {m_block, bh % params.heads_q, bh / params.heads_q};
  }
};

}  // namespace flashcore::sm90
