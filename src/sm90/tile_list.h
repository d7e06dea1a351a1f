// The tile-list builder (tile_list_plan.h says which calls take a list and
// why): a one-CTA kernel that reads the call's lengths and writes, into
// the workspace, the count of tiles with work and each one's index in the
// launch's (unit, head, batch) order (tile_decode.h), costliest sequence
// first. The attention kernel then deals list entries instead of launch
// tiles (tile_scheduler.h).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "flashcore/attention.h"
#include "sm90/seq_info.h"

namespace flashcore::sm90 {

struct TileListParams {
  SeqParams seq{};  // the call's lengths, mask and split plan, as the attention kernel reads them
  int32_t batch = 0, heads = 0;
  int32_t num_units = 0;  // the launch's units per (head, batch)
  int32_t capacity = 0;   // entries the list holds (tile_list_plan.h)
  int32_t* list = nullptr;  // [0]: the count; [1 + i]: entry i
  // PDL (launch_attrs.h): let the attention kernel launch as soon as this
  // one runs; otherwise at its exit (FLASHCORE_PDL=2).
  bool trigger_dependents_early = false;
  // The attention kernel deals consecutive entries in pairs (causal-like
  // masks): a (sequence, head) whose entries start at an odd index lists its
  // units last first, so a pair that spans two heads joins their middle blocks.
  bool paired = false;
  // The tail (tile_list_plan.h): the last tail_rounds rounds of the deal as
  // single tiles, costliest first onto the least-loaded CTAs of the
  // attention kernel's `grid`, where that finishes earlier. tail[0]: the k
  // from which a CTA's tiles come from the tail (kTileListNoTail: none);
  // tail[1]: the tail's rows; tail[2 + q * grid + b]: CTA b's q-th tail tile,
  // as a list position (tile_decode.h kTileListNoTail: none). tail_rounds = 0: no tail.
  int32_t* tail = nullptr;
  int32_t tail_rounds = 0, grid = 0;
  // Only where the round robin leaves the busiest CTA more than
  // tail_min_excess / 64 of the mean work over the mean
  // (tile_list_plan.h tile_list_tail_min_excess).
  int32_t tail_min_excess = 12;
};

// Launches the builder for a serving tile of block_m x block_n (the tiles
// serving kernels have: 64 x 128, 128 x 128, 128 x 64) on `stream`, as a
// programmatic dependent of the kernel before it.
Status launch_tile_list(const TileListParams& params, int block_m, int block_n, cudaStream_t stream);

}  // namespace flashcore::sm90
